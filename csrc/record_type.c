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
    case 0: return PyLong_FromLongLong(self->offset);
    case 1: return PyLong_FromLongLong(self->timestamp);
    case 2: return PyLong_FromLongLong(self->sequence);
    case 3: return slice_of(self, self->key_pos, self->key_len, &self->key);
    case 4: return slice_of(self, self->value_pos, self->value_len, &self->value);
    case 5: return Py_NewRef(self->headers);
    default:
        PyErr_SetString(PyExc_IndexError, "record index out of range");
        return NULL;
    }
}

static Py_ssize_t record_length(Record *self) { (void)self; return 6; }

static PyObject *get_field(Record *self, void *closure) {
    return record_item(self, (Py_ssize_t)(intptr_t)closure);
}

static PyGetSetDef record_getset[] = {
    {"offset", (getter)get_field, NULL, "absolute offset", (void *)0},
    {"timestamp", (getter)get_field, NULL, "timestamp (ms)", (void *)1},
    {"sequence", (getter)get_field, NULL, "sequence, or -1", (void *)2},
    {"key", (getter)get_field, NULL, "key bytes or None", (void *)3},
    {"value", (getter)get_field, NULL, "value bytes or None (tombstone)", (void *)4},
    {"headers", (getter)get_field, NULL, "(key, value) pairs", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *as_tuple(Record *self) {
    PyObject *t = PyTuple_New(6);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < 6; i++) {
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
        PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1), PyTuple_GET_ITEM(t, 2),
        PyTuple_GET_ITEM(t, 3), PyTuple_GET_ITEM(t, 4), PyTuple_GET_ITEM(t, 5));
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
