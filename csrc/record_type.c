/* sharestate._native.Record: a v2 record read in C, behaving as sharestate.log.RawRecord.
 *
 * It keeps the offset, timestamp and sequence as C integers and the key and value as
 * positions into the batch buffer it holds on to, so walking a log creates one object per
 * record; the Python ints and bytes are made (once) only when asked for. To Python it is a
 * read-only sequence of six items with RawRecord's field names, equal to any sequence of the
 * same items (a RawRecord NamedTuple included), and `_replace` gives a RawRecord. It holds
 * no references that could form a cycle, so it is not tracked by the cyclic GC.
 */
#include "native.h"
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    long long offset, timestamp, sequence;
    PyObject *buffer;        /* bytes the key and value point into */
    Py_ssize_t key_pos, key_len, value_pos, value_len;  /* len -1: None */
    PyObject *headers;       /* tuple */
    PyObject *key, *value;   /* made on first use */
} Record;

static PyObject *raw_record_class = NULL;

static void record_dealloc(Record *self) {
    Py_XDECREF(self->buffer);
    Py_XDECREF(self->headers);
    Py_XDECREF(self->key);
    Py_XDECREF(self->value);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *slice_of(Record *self, Py_ssize_t pos, Py_ssize_t len, PyObject **cache) {
    if (len < 0) Py_RETURN_NONE;
    if (!*cache) {
        *cache = PyBytes_FromStringAndSize(PyBytes_AS_STRING(self->buffer) + pos, len);
        if (!*cache) return NULL;
    }
    return Py_NewRef(*cache);
}

static PyObject *record_item(Record *self, Py_ssize_t i) {
    switch (i) {
    case RECORD_OFFSET: return PyLong_FromLongLong(self->offset);
    case RECORD_TIMESTAMP: return PyLong_FromLongLong(self->timestamp);
    case RECORD_SEQUENCE: return PyLong_FromLongLong(self->sequence);
    case RECORD_KEY: return slice_of(self, self->key_pos, self->key_len, &self->key);
    case RECORD_VALUE: return slice_of(self, self->value_pos, self->value_len, &self->value);
    case RECORD_HEADERS: return Py_NewRef(self->headers);
    default:
        PyErr_SetString(PyExc_IndexError, "record index out of range");
        return NULL;
    }
}

static Py_ssize_t record_length(Record *self) { (void)self; return RECORD_SIZE; }

static PyObject *get_field(Record *self, void *closure) {
    return record_item(self, (Py_ssize_t)(intptr_t)closure);
}

static PyGetSetDef record_getset[] = {
    {"offset", (getter)get_field, NULL, "absolute offset", (void *)RECORD_OFFSET},
    {"timestamp", (getter)get_field, NULL, "timestamp (ms)", (void *)RECORD_TIMESTAMP},
    {"sequence", (getter)get_field, NULL, "sequence, or -1", (void *)RECORD_SEQUENCE},
    {"key", (getter)get_field, NULL, "key bytes or None", (void *)RECORD_KEY},
    {"value", (getter)get_field, NULL, "value bytes or None (tombstone)", (void *)RECORD_VALUE},
    {"headers", (getter)get_field, NULL, "(key, value) pairs", (void *)RECORD_HEADERS},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *as_tuple(Record *self) {
    PyObject *t = PyTuple_New(RECORD_SIZE);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < RECORD_SIZE; i++) {
        PyObject *v = record_item(self, i);
        if (!v) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *record_richcompare(PyObject *a, PyObject *b, int op) {
    if ((op != Py_EQ && op != Py_NE) || !PySequence_Check(b) || !PySequence_Check(a)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *left = Py_IS_TYPE(a, &NativeRecordType) ? as_tuple((Record *)a) : PySequence_Tuple(a);
    PyObject *right = Py_IS_TYPE(b, &NativeRecordType) ? as_tuple((Record *)b) : PySequence_Tuple(b);
    PyObject *result = NULL;
    if (left && right) result = PyObject_RichCompare(left, right, op);
    Py_XDECREF(left);
    Py_XDECREF(right);
    return result;
}

static PyObject *record_repr(Record *self) {
    PyObject *t = as_tuple(self);
    if (!t) return NULL;
    PyObject *r = PyUnicode_FromFormat(
        "RawRecord(offset=%R, timestamp=%R, sequence=%R, key=%R, value=%R, headers=%R)",
        PyTuple_GET_ITEM(t, RECORD_OFFSET), PyTuple_GET_ITEM(t, RECORD_TIMESTAMP),
        PyTuple_GET_ITEM(t, RECORD_SEQUENCE), PyTuple_GET_ITEM(t, RECORD_KEY),
        PyTuple_GET_ITEM(t, RECORD_VALUE), PyTuple_GET_ITEM(t, RECORD_HEADERS));
    Py_DECREF(t);
    return r;
}

static PyObject *load_raw_record_class(void) {
    if (!raw_record_class) {
        PyObject *module = PyImport_ImportModule("sharestate.log.batch");
        if (!module) return NULL;
        raw_record_class = PyObject_GetAttrString(module, "RawRecord");
        Py_DECREF(module);
    }
    return raw_record_class;
}

/* _replace(**changes) -> RawRecord with those fields changed */
static PyObject *record_replace(Record *self, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "_replace takes keyword arguments only");
        return NULL;
    }
    PyObject *cls = load_raw_record_class();
    PyObject *t = cls ? as_tuple(self) : NULL;
    if (!t) return NULL;
    PyObject *base = PyObject_Call(cls, t, NULL);
    Py_DECREF(t);
    if (!base || !kwargs) return base;
    PyObject *method = PyObject_GetAttrString(base, "_replace");
    Py_DECREF(base);
    if (!method) return NULL;
    PyObject *empty = PyTuple_New(0);
    PyObject *result = empty ? PyObject_Call(method, empty, kwargs) : NULL;
    Py_XDECREF(empty);
    Py_DECREF(method);
    return result;
}

static PyMethodDef record_methods[] = {
    {"_replace", (PyCFunction)(void (*)(void))record_replace, METH_VARARGS | METH_KEYWORDS,
     "a RawRecord with the given fields replaced"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods record_as_sequence = {
    .sq_length = (lenfunc)record_length,
    .sq_item = (ssizeargfunc)record_item,
};

PyTypeObject NativeRecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sharestate._native.Record",
    .tp_basicsize = sizeof(Record),
    .tp_dealloc = (destructor)record_dealloc,
    .tp_repr = (reprfunc)record_repr,
    .tp_as_sequence = &record_as_sequence,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A record of a v2 batch (sharestate.log.RawRecord, read in C).",
    .tp_richcompare = record_richcompare,
    .tp_methods = record_methods,
    .tp_getset = record_getset,
};

PyObject *native_record_new(PyObject *buffer, long long offset, long long timestamp,
                            long long sequence, Py_ssize_t key_pos, Py_ssize_t key_len,
                            Py_ssize_t value_pos, Py_ssize_t value_len, PyObject *headers) {
    Record *r = PyObject_New(Record, &NativeRecordType);
    if (!r) return NULL;
    r->offset = offset;
    r->timestamp = timestamp;
    r->sequence = sequence;
    r->buffer = Py_NewRef(buffer);
    r->key_pos = key_pos;
    r->key_len = key_len;
    r->value_pos = value_pos;
    r->value_len = value_len;
    r->headers = Py_NewRef(headers);
    r->key = NULL;
    r->value = NULL;
    return (PyObject *)r;
}

int native_record_view(PyObject *obj, const char **key, Py_ssize_t *key_len,
                       const char **value, Py_ssize_t *value_len) {
    if (!Py_IS_TYPE(obj, &NativeRecordType)) return 0;
    Record *r = (Record *)obj;
    const char *base = PyBytes_AS_STRING(r->buffer);
    *key = r->key_len < 0 ? NULL : base + r->key_pos;
    *key_len = r->key_len;
    *value = r->value_len < 0 ? NULL : base + r->value_pos;
    *value_len = r->value_len;
    return 1;
}

PyObject *native_record_field(PyObject *obj, Py_ssize_t i) {
    if (Py_IS_TYPE(obj, &NativeRecordType)) return record_item((Record *)obj, i);
    if (PyTuple_Check(obj) && i < PyTuple_GET_SIZE(obj)) return Py_NewRef(PyTuple_GET_ITEM(obj, i));
    return PySequence_GetItem(obj, i);
}

int native_record_set_timestamp(PyObject *obj, long long timestamp) {
    if (!Py_IS_TYPE(obj, &NativeRecordType)) return 0;
    ((Record *)obj)->timestamp = timestamp;
    return 1;
}

static int has_bit(const unsigned char *bits, Py_ssize_t i) {
    return bits == NULL || (bits[i >> 3] >> (i & 7)) & 1;
}

/* arrow_records(n, buffer, offsets, timestamps, key_offsets, key_valid, value_offsets,
 *               value_valid, value_base) -> list of Record
 * The `n` records of Arrow columns (zero-based, no nulls in offsets and timestamps): `offsets`
 * and `timestamps` hold int64 values, `key_offsets` / `value_offsets` the int32 offsets of
 * binary columns whose data are at the start of `buffer` (keys) and at `value_base` (values),
 * `*_valid` their validity bitmaps or None. Sequence -1, no headers: what bronze keeps. */
PyObject *native_arrow_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "arrow_records(n, buffer, offsets, timestamps, key_offsets, "
                                         "key_valid, value_offsets, value_valid, value_base)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "arrow_records: n < 0");
        return NULL;
    }
    PyObject *buffer = args[1];
    Py_buffer views[6];
    int held = 0;
    PyObject *out = NULL, *headers = NULL;
    for (int i = 0; i < 6; i++) {
        PyObject *source = args[i + 2];
        if (source == Py_None) { views[i].buf = NULL; views[i].len = 0; views[i].obj = NULL; continue; }
        if (PyObject_GetBuffer(source, &views[i], PyBUF_SIMPLE) < 0) goto done;
        held |= 1 << i;
    }
    Py_ssize_t value_base = PyLong_AsSsize_t(args[8]);
    if (value_base == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t size = PyBytes_GET_SIZE(buffer);
    if (!views[0].buf || !views[1].buf || !views[2].buf || !views[4].buf
        || views[0].len < n * 8 || views[1].len < n * 8 || views[2].len < (n + 1) * 4 || views[4].len < (n + 1) * 4
        || (views[3].buf && views[3].len < (n + 7) / 8) || (views[5].buf && views[5].len < (n + 7) / 8)) {
        PyErr_SetString(PyExc_ValueError, "arrow_records: buffers too short for the rows");
        goto done;
    }
    const int32_t *keys = views[2].buf, *values = views[4].buf;
    out = PyList_New(n);
    headers = PyTuple_New(0);
    if (!out || !headers) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t offset, timestamp;
        memcpy(&offset, (const char *)views[0].buf + i * 8, 8);
        memcpy(&timestamp, (const char *)views[1].buf + i * 8, 8);
        int key = has_bit(views[3].buf, i), value = has_bit(views[5].buf, i);
        Py_ssize_t key_pos = keys[i], key_len = keys[i + 1] - keys[i];
        Py_ssize_t value_pos = value_base + values[i], value_len = values[i + 1] - values[i];
        if (key_pos < 0 || key_len < 0 || key_pos + key_len > size || value_pos < value_base
            || value_len < 0 || value_pos + value_len > size) {
            PyErr_SetString(PyExc_ValueError, "arrow_records: an offset points outside the buffer");
            Py_CLEAR(out);
            goto done;
        }
        PyObject *record = native_record_new(buffer, offset, timestamp, -1, key_pos,
                                             key ? key_len : -1, value_pos,
                                             value ? value_len : -1, headers);
        if (!record) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, i, record);
    }
done:
    for (int i = 0; i < 6; i++) if (held & (1 << i)) PyBuffer_Release(&views[i]);
    Py_XDECREF(headers);
    return out;
}
