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

/* Docstrings open with a text signature (what inspect.signature and mypy's stubtest read,
 * checked against sharestate/_native.pyi) and name the pure-Python twin. */
static PyMethodDef methods[] = {
    {"compile", native_compile, METH_O,
     "compile($module, program, /)\n--\n\n"
     "A StructProgram compiled for read_struct (a capsule)."},
    {"read_struct", (PyCFunction)(void (*)(void))native_read_struct, METH_FASTCALL,
     "read_struct($module, layout, data, pos, end, /)\n--\n\n"
     "(values, new position); twin: sharestate.records.codec.read_struct_py."},
    {"parse_records", (PyCFunction)(void (*)(void))native_parse_records, METH_FASTCALL,
     "parse_records($module, buf, pos, end, count, base_offset, base_timestamp, "
     "base_sequence, last_delta, /)\n--\n\n"
     "(records, None or (message, position)); twin: "
     "sharestate.log.records_v2.parse_records_py."},
    {"scan_v2", (PyCFunction)(void (*)(void))native_scan_v2, METH_FASTCALL,
     "scan_v2($module, buf, off, base_position, max_batch, max_records, crc, create_time, "
     "log_append_time, none, max_batches, stop, order_last, segment_first, span, /)\n--\n\n"
     "(clean batches, where the walk stopped, how many of them are in offset order); twin: "
     "sharestate.log.framing's batch walk."},
    {"next_candidate", (PyCFunction)(void (*)(void))native_next_candidate, METH_FASTCALL,
     "next_candidate($module, buf, off, stop, eof, max_batch, /)\n--\n\n"
     "The first position passing the resync header checks (or -1 - where they stopped); "
     "twin: sharestate.log.resync.next_candidate_py."},
    {"crc_shift", (PyCFunction)(void (*)(void))native_crc_shift, METH_FASTCALL,
     "crc_shift($module, crc, length, castagnoli, /)\n--\n\n"
     "x^(8 * length) * crc modulo CRC-32C's polynomial (castagnoli) or CRC-32's; "
     "twin: sharestate.log.checksums.crc_shift_py."},
    {"decode_key_values", (PyCFunction)(void (*)(void))native_decode_key_values, METH_FASTCALL,
     "decode_key_values($module, records, table, fallback, /)\n--\n\n"
     "A KeyValue per record; twin: sharestate.records.keyvalue.decode_key_value."},
    {"combine", (PyCFunction)(void (*)(void))native_combine, METH_FASTCALL,
     "combine($module, so_far, new, start_offset, /)\n--\n\n"
     "Kafka 4.4's combiner; twin: sharestate.coordinator.combiner.combine_py."},
    {"share_apply", (PyCFunction)(void (*)(void))native_share_apply, METH_FASTCALL,
     "share_apply($module, context, records, decoded, as_of_offset, as_of_time, slots, "
     "fallback, history, /)\n--\n\n"
     "(applied, stopped, last offset, last timestamp); twin: "
     "sharestate.replay.share_log._Applier.apply_all."},
    {"share_audit", (PyCFunction)(void (*)(void))native_share_audit, METH_FASTCALL,
     "share_audit($module, seen, seen_type, key_type, records, decoded, slots, fallback, "
     "/)\n--\n\n"
     "Audit share-state records; twin: sharestate.analytics.audit.ShareAuditor.observe."},
    {"transpose", (PyCFunction)(void (*)(void))native_transpose, METH_FASTCALL,
     "transpose($module, rows, paths, /)\n--\n\n"
     "One list per index path; twin: sharestate.tables.columns.transpose_py."},
    {"tuples", (PyCFunction)(void (*)(void))native_tuples, METH_FASTCALL,
     "tuples($module, row_type, n, columns, /)\n--\n\n"
     "Rows of a tuple type from Arrow buffers; twin: "
     "sharestate.tables.columns.tuples_of_py."},
    {"arrow_records", (PyCFunction)(void (*)(void))native_arrow_records, METH_FASTCALL,
     "arrow_records($module, n, buffer, offsets, timestamps, key_offsets, key_valid, "
     "value_offsets, value_valid, value_base, /)\n--\n\n"
     "Records over Arrow bronze buffers; twin: the RawRecord path of "
     "sharestate.tables.arrow_log.records_of."},
    {"consumed_runs", (PyCFunction)(void (*)(void))native_consumed_runs, METH_FASTCALL,
     "consumed_runs($module, messages, header, timestamp_types, /)\n--\n\n"
     "Consumed messages as runs of one partition (records with their headers) or error "
     "messages alone; twin: sharestate.cluster.consumed.consumed_runs_py."},
    {"lag_walk_new", (PyCFunction)(void (*)(void))native_lag_walk_new, METH_FASTCALL,
     "lag_walk_new($module, lines, horizon, /)\n--\n\n"
     "A lag-history walk over the end-offset timelines `lines` (a capsule); twin: "
     "sharestate.analytics.lag_history.walk_groups."},
    {"lag_walk_begin", (PyCFunction)(void (*)(void))native_lag_walk_begin, METH_FASTCALL,
     "lag_walk_begin($module, walk, saved, /)\n--\n\n"
     "A group's walk starts, from nothing or a saved walk."},
    {"lag_walk_feed", (PyCFunction)(void (*)(void))native_lag_walk_feed, METH_FASTCALL,
     "lag_walk_feed($module, walk, topic, partition, state_partition, record_offset, time, "
     "deleted, start_offset, start_valid, complete, complete_valid, state_end, "
     "state_end_valid, /)\n--\n\n"
     "The group's next history rows, as column buffers."},
    {"lag_walk_end", native_lag_walk_end, METH_O,
     "lag_walk_end($module, walk, /)\n--\n\n"
     "The group's walk ends: its state before the horizon (or at its last moment), or None."},
    {"lag_walk_take", native_lag_walk_take, METH_O,
     "lag_walk_take($module, walk, /)\n--\n\n"
     "(rows, column buffers) of the lag rows made since the last take."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "sharestate._native", "C twins of sharestate's hot paths.", -1,
    methods, NULL, NULL, NULL, NULL,
};

/* A tuple of the names in a NULL-terminated array. */
static PyObject *names_tuple(const char *const *names) {
    Py_ssize_t n = 0;
    while (names[n]) n++;
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t && i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, i, name);
    }
    return t;
}

#define NATIVE_NAME(index, field) #field,
#define LAYOUT_NAMES(cls, FIELDS) static const char *const cls##_names[] = { FIELDS(NATIVE_NAME) NULL };
NATIVE_LAYOUTS(LAYOUT_NAMES)
#define LAYOUT_ENTRY(cls, FIELDS) { #cls, cls##_names },
static const struct { const char *cls; const char *const *names; } layouts[] = {
    NATIVE_LAYOUTS(LAYOUT_ENTRY)
};
static const char *const kind_names[] = { WIRE_KINDS(NATIVE_NAME) NULL };

/* FIELDS: {class name: field names in the order C uses}; KINDS: wire kind names by number. */
static int add_layouts(PyObject *m) {
    PyObject *fields = PyDict_New();
    if (!fields) return -1;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        PyObject *names = names_tuple(layouts[i].names);
        int rc = names ? PyDict_SetItemString(fields, layouts[i].cls, names) : -1;
        Py_XDECREF(names);
        if (rc < 0) { Py_DECREF(fields); return -1; }
    }
    PyObject *kinds = names_tuple(kind_names);
    int rc = kinds ? PyModule_AddObjectRef(m, "KINDS", kinds) : -1;
    Py_XDECREF(kinds);
    if (rc == 0) rc = PyModule_AddObjectRef(m, "FIELDS", fields);
    Py_DECREF(fields);
    return rc;
}

/* SOURCES: the SHA-256 of csrc/ this module was built from (setup.py passes it). */
#ifndef SHARESTATE_SOURCES
#error "build with setup.py: it defines SHARESTATE_SOURCES, the digest of csrc/"
#endif

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&NativeRecordType) < 0 || PyType_Ready(&NativeColumnsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Record", (PyObject *)&NativeRecordType) < 0
        || PyModule_AddObjectRef(m, "Columns", (PyObject *)&NativeColumnsType) < 0
        || PyModule_AddStringConstant(m, "SOURCES", SHARESTATE_SOURCES) < 0
        || add_layouts(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
