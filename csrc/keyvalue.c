/* Native twin of sharestate/records/keyvalue.py `decode_key_value` over a whole batch.
 *
 * decode_key_values(records, table, fallback) -> list of KeyValue
 *   records  : list of RawRecord (or native Record)
 *   table    : {type_id: KindPrograms} (KIND_PROGRAMS_* in native.h: the kind, its key
 *              layout and {version: value layout}, compiled)
 *   fallback : callable(key, value) -> KeyValue, the Python decoder
 * The C path takes only the clean case (known type, key and value decode exactly, or a
 * tombstone); anything else is handed to `fallback`, so results and error messages are
 * those of the Python decoder by construction. A null key's KeyValue depends on nothing
 * else (an immutable error), so `fallback` is asked for it once per call and the answer is
 * shared: a batch of null-key records costs what its records cost. Likewise a record whose
 * key bytes are those of the record before shares that record's decoded key struct.
 */
#include "native.h"

static PyObject *key_value_type = NULL;

static int load_key_value_type(void) {
    if (key_value_type) return 0;
    PyObject *module = PyImport_ImportModule("sharestate.records.keyvalue");
    if (!module) return -1;
    key_value_type = PyObject_GetAttrString(module, "KeyValue");
    Py_DECREF(module);
    return key_value_type ? 0 : -1;
}

/* Decode `data[2:]` with the layout capsule; NULL and no error set when it does not decode
 * cleanly (the caller falls back), NULL with an error set on a real failure. */
static PyObject *clean_struct(PyObject *capsule, const unsigned char *data, Py_ssize_t n) {
    Layout *layout = native_layout(capsule);
    if (!layout) return NULL;
    Py_ssize_t end;
    PyObject *values = native_read_layout(layout, data, 2, n, &end);
    if (!values) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
        PyErr_Clear();
        return NULL;
    }
    if (end != n) { Py_DECREF(values); return NULL; }
    return values;
}

/* The key bytes (up to KEY_MEMO_MAX_LEN) of the record last decoded in one call's loop and
 * their decoded struct: the next record with the same key bytes (a share-partition's
 * records mostly follow one another) shares that struct, as equal as a fresh decoding and
 * never changed after (decoded records are values), instead of decoding it again. Start
 * each call with a zeroed one; `key_memo_clear` drops its reference. */
#define KEY_MEMO_MAX_LEN 256
typedef struct {
    Py_ssize_t len;
    PyObject *values;
    char bytes[KEY_MEMO_MAX_LEN];
} KeyMemo;

static void key_memo_clear(KeyMemo *memo) {
    Py_CLEAR(memo->values);
}

static PyObject *fast_one(PyObject *record, PyObject *table, KeyMemo *memo) {
    const char *key, *value;
    Py_ssize_t key_len, value_len;
    if (!native_record_view(record, &key, &key_len, &value, &value_len)) {
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) <= RECORD_VALUE) return NULL;
        PyObject *k = PyTuple_GET_ITEM(record, RECORD_KEY);
        PyObject *v = PyTuple_GET_ITEM(record, RECORD_VALUE);
        if (!PyBytes_Check(k) || (v != Py_None && !PyBytes_Check(v))) return NULL;
        key = PyBytes_AS_STRING(k);
        key_len = PyBytes_GET_SIZE(k);
        value = v == Py_None ? NULL : PyBytes_AS_STRING(v);
        value_len = v == Py_None ? -1 : PyBytes_GET_SIZE(v);
    }
    if (!key || key_len < 2) return NULL;
    const unsigned char *kb = (const unsigned char *)key;
    PyObject *type_id = PyLong_FromLong((int16_t)native_be16(kb));
    if (!type_id) return NULL;
    PyObject *entry = PyDict_GetItemWithError(table, type_id);
    if (!entry) { Py_DECREF(type_id); return NULL; }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != KIND_PROGRAMS_SIZE) {
        PyErr_SetString(PyExc_TypeError, "a kind table holds KindPrograms");
        Py_DECREF(type_id);
        return NULL;
    }
    PyObject *kv = NULL, *key_values = NULL, *version = NULL, *values = NULL;
    if (memo->values && memo->len == key_len && memcmp(memo->bytes, key, (size_t)key_len) == 0) {
        key_values = Py_NewRef(memo->values);
    } else {
        key_values = clean_struct(PyTuple_GET_ITEM(entry, KIND_PROGRAMS_KEY), kb, key_len);
        if (!key_values) goto out;
        if (key_len <= KEY_MEMO_MAX_LEN) {
            Py_XSETREF(memo->values, Py_NewRef(key_values));
            memcpy(memo->bytes, key, (size_t)key_len);
            memo->len = key_len;
        }
    }
    if (!value) {
        version = Py_NewRef(Py_None);
        values = Py_NewRef(Py_None);
    } else {
        if (value_len < 2) goto out;
        const unsigned char *vb = (const unsigned char *)value;
        version = PyLong_FromLong((int16_t)native_be16(vb));
        if (!version) goto out;
        PyObject *capsule = PyDict_GetItemWithError(PyTuple_GET_ITEM(entry, KIND_PROGRAMS_VALUES),
                                                    version);
        if (!capsule) goto out;
        values = clean_struct(capsule, vb, value_len);
        if (!values) goto out;
    }
    kv = ((PyTypeObject *)key_value_type)->tp_alloc((PyTypeObject *)key_value_type, KV_SIZE);
    if (!kv) goto out;
    PyTuple_SET_ITEM(kv, KV_TYPE_ID, type_id);
    PyTuple_SET_ITEM(kv, KV_KIND, Py_NewRef(PyTuple_GET_ITEM(entry, KIND_PROGRAMS_KIND)));
    PyTuple_SET_ITEM(kv, KV_KEY, key_values);
    PyTuple_SET_ITEM(kv, KV_VALUE_VERSION, version);
    PyTuple_SET_ITEM(kv, KV_VALUE, values);
    PyTuple_SET_ITEM(kv, KV_ERROR, Py_NewRef(Py_None));
    return kv;
out:
    Py_DECREF(type_id);
    Py_XDECREF(key_values);
    Py_XDECREF(version);
    Py_XDECREF(values);
    return NULL;
}

PyObject *native_decode_key_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode_key_values(list, dict, fallback)");
        return NULL;
    }
    if (load_key_value_type() < 0) return NULL;
    PyObject *records = args[0], *table = args[1], *fallback = args[2];
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    PyObject *null_key = NULL;  /* the fallback's answer for a null key, once asked */
    KeyMemo memo = {0, NULL, {0}};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        PyObject *kv = fast_one(record, table, &memo);
        if (!kv) {
            if (PyErr_Occurred()) goto fail;
            PyObject *key = native_record_field(record, RECORD_KEY);
            if (key == Py_None && null_key) {
                Py_DECREF(key);
                kv = Py_NewRef(null_key);
            } else {
                PyObject *value = key ? native_record_field(record, RECORD_VALUE) : NULL;
                kv = value ? PyObject_CallFunctionObjArgs(fallback, key, value, NULL) : NULL;
                if (kv && key == Py_None) null_key = Py_NewRef(kv);
                Py_XDECREF(key);
                Py_XDECREF(value);
                if (!kv) goto fail;
            }
        }
        PyList_SET_ITEM(out, i, kv);
    }
    Py_XDECREF(null_key);
    key_memo_clear(&memo);
    return out;
fail:
    Py_XDECREF(null_key);
    key_memo_clear(&memo);
    Py_DECREF(out);
    return NULL;
}
