/* sharestate._native: C twins of the hot pure-Python paths (same results, faster). */
#include "native.h"

static PyObject *decode_error_class = NULL;

PyObject *native_decode_error(Py_ssize_t position, const char *format, ...) {
    va_list vargs;
    va_start(vargs, format);
    PyObject *message = PyUnicode_FromFormatV(format, vargs);
    va_end(vargs);
    if (!message) return NULL;
    if (!decode_error_class) {
        PyObject *module = PyImport_ImportModule("sharestate.records.codec");
        if (module) {
            decode_error_class = PyObject_GetAttrString(module, "DecodeError");
            Py_DECREF(module);
        }
        if (!decode_error_class) { Py_DECREF(message); return NULL; }
    }
    PyObject *exc = PyObject_CallFunction(decode_error_class, "On", message, position);
    Py_DECREF(message);
    if (exc) {
        PyErr_SetObject(decode_error_class, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static const char B64URL[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

PyObject *native_uuid_str(const unsigned char *raw) {
    char out[24];
    int o = 0;
    for (int i = 0; i < 15; i += 3) {
        uint32_t v = ((uint32_t)raw[i] << 16) | ((uint32_t)raw[i + 1] << 8) | raw[i + 2];
        out[o++] = B64URL[(v >> 18) & 63];
        out[o++] = B64URL[(v >> 12) & 63];
        out[o++] = B64URL[(v >> 6) & 63];
        out[o++] = B64URL[v & 63];
    }
    uint32_t last = raw[15];
    out[o++] = B64URL[(last >> 2) & 63];
    out[o++] = B64URL[(last << 4) & 63];
    return PyUnicode_FromStringAndSize(out, o);
}

static PyMethodDef methods[] = {
    {"compile", native_compile, METH_O, "compile(program) -> layout capsule"},
    {"read_struct", (PyCFunction)(void (*)(void))native_read_struct, METH_FASTCALL,
     "read_struct(layout, data, pos, end) -> (values, new_pos)"},
    {"parse_records", (PyCFunction)(void (*)(void))native_parse_records, METH_FASTCALL,
     "parse_records(buf, pos, end, count, base_offset, base_timestamp, base_sequence)"},
    {"scan_v2", (PyCFunction)(void (*)(void))native_scan_v2, METH_FASTCALL,
     "scan_v2(buf, off, base_position, max_batch, crc_fn, create_time, log_append_time, none, max_batches, stop)"},
    {"decode_key_values", (PyCFunction)(void (*)(void))native_decode_key_values, METH_FASTCALL,
     "decode_key_values(records, table, fallback) -> list of KeyValue"},
    {"combine", (PyCFunction)(void (*)(void))native_combine, METH_FASTCALL,
     "combine(so_far, new, start_offset) -> batches (Kafka 4.4's combiner)"},
    {"share_apply", (PyCFunction)(void (*)(void))native_share_apply, METH_FASTCALL,
     "share_apply(context, records, decoded, as_of_offset, as_of_time, slots, fallback, history)"},
    {"share_audit", (PyCFunction)(void (*)(void))native_share_audit, METH_FASTCALL,
     "share_audit(seen, seen_type, key_type, records, decoded, slots, fallback)"},
    {"flatten_batches", native_flatten_batches, METH_VARARGS,
     "flatten_batches(states, item=7) -> (offsets, first, last, state, count, valid) buffers"},
    {"transpose", (PyCFunction)(void (*)(void))native_transpose, METH_FASTCALL,
     "transpose(rows, paths) -> one list per index path"},
    {"arrow_records", (PyCFunction)(void (*)(void))native_arrow_records, METH_FASTCALL,
     "arrow_records(n, buffer, offsets, timestamps, key_offsets, key_valid, value_offsets, "
     "value_valid, value_base) -> list of Record"},
    {"int_columns", (PyCFunction)(void (*)(void))native_int_columns, METH_FASTCALL,
     "int_columns(rows, paths, widths) -> (data, validity bitmap or None) per path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "sharestate._native", "C twins of sharestate's hot paths.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&NativeRecordType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Record", (PyObject *)&NativeRecordType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
