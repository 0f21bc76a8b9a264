/* Shared declarations of the sharestate._native extension. */
#ifndef SHARESTATE_NATIVE_H
#define SHARESTATE_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t native_be16(const unsigned char *p) {
    return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint32_t native_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t native_be64(const unsigned char *p) {
    return ((uint64_t)native_be32(p) << 32) | native_be32(p + 4);
}

/* Value slot tables (sharestate.coordinator.share_state.native_value_slots, keyed
 * type_id << 16 | version): item `i` of a slot tuple, and the tuple of a record's value
 * layout (borrowed; NULL when absent or on error: check PyErr_Occurred). */
static inline long native_slot(PyObject *slots, int i) {
    return PyLong_AsLong(PyTuple_GET_ITEM(slots, i));
}
static inline PyObject *native_value_slots(PyObject *slot_table, PyObject *type_id,
                                           PyObject *version) {
    long tid = PyLong_AsLong(type_id), ver = PyLong_AsLong(version);
    if (PyErr_Occurred()) return NULL;
    PyObject *slot_key = PyLong_FromLong((tid << 16) | (ver & 0xFFFF));
    if (!slot_key) return NULL;
    PyObject *slots = PyDict_GetItemWithError(slot_table, slot_key);
    Py_DECREF(slot_key);
    return slots;
}

/* Raise sharestate.records.codec.DecodeError(message, position). Returns NULL. */
PyObject *native_decode_error(Py_ssize_t position, const char *format, ...);
/* 16 bytes -> Kafka's Uuid.toString() (22 chars of URL-safe base64). */
PyObject *native_uuid_str(const unsigned char *raw);

typedef struct Layout Layout;
PyObject *native_compile(PyObject *self, PyObject *program);
Layout *native_layout(PyObject *capsule);
PyObject *native_read_layout(Layout *layout, const unsigned char *data, Py_ssize_t pos,
                             Py_ssize_t end, Py_ssize_t *out_pos);
PyObject *native_read_struct(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

PyObject *native_parse_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int native_parse_into(PyObject *records, const unsigned char *buf, Py_ssize_t len,
                      Py_ssize_t pos, Py_ssize_t end, long long count, long long base_offset,
                      long long base_timestamp, long long base_sequence, PyObject *owner,
                      PyObject **error);
PyObject *native_scan_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_decode_key_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_share_apply(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_share_audit(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_flatten_batches(PyObject *self, PyObject *args);
PyObject *native_transpose(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_int_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern PyTypeObject NativeRecordType;
PyObject *native_record_new(PyObject *buffer, long long offset, long long timestamp,
                            long long sequence, Py_ssize_t key_pos, Py_ssize_t key_len,
                            Py_ssize_t value_pos, Py_ssize_t value_len, PyObject *headers);
/* For a native Record: its key and value bytes in place (NULL, -1 for None); 0 otherwise. */
int native_record_view(PyObject *obj, const char **key, Py_ssize_t *key_len,
                       const char **value, Py_ssize_t *value_len);
/* Set a native Record's timestamp (LogAppendTime batches); 0 when not a native Record. */
int native_record_set_timestamp(PyObject *obj, long long timestamp);
/* Item i of a record, native or tuple (new reference). */
PyObject *native_record_field(PyObject *obj, Py_ssize_t i);
PyObject *native_arrow_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
