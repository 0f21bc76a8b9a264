/* Native fast path of sharestate/log/framing.py: walk consecutive "clean" v2 batches.
 *
 * A clean batch is magic 2, fully inside the buffer, within the size and record-count
 * limits, uncompressed, with a verified CRC-32C and records that parse without error (a
 * batch declaring none holds nothing after its header). The walk stops at the
 * first batch that is not clean (or at the end of the buffer) and returns where it
 * stopped; the Python walker then handles that position with its full rules. Headers and
 * records are exactly what the Python path builds for the same bytes.
 */
#include "native.h"

static PyObject *header_type = NULL, *batch_type = NULL;

static int load_header_type(void) {
    if (header_type) return 0;
    PyObject *module = PyImport_ImportModule("sharestate.log.batch");
    if (!module) return -1;
    header_type = PyObject_GetAttrString(module, "BatchHeader");
    batch_type = PyObject_GetAttrString(module, "Batch");
    Py_DECREF(module);
    return (header_type && batch_type) ? 0 : -1;
}

static int crc_matches(PyObject *crc_fn, const unsigned char *data, Py_ssize_t n,
                       uint32_t stored) {
    PyObject *view = PyMemoryView_FromMemory((char *)data, n, PyBUF_READ);
    if (!view) return -1;
    PyObject *actual = PyObject_CallOneArg(crc_fn, view);
    Py_DECREF(view);
    if (!actual) return -1;
    unsigned long value = PyLong_AsUnsignedLong(actual);
    Py_DECREF(actual);
    if (PyErr_Occurred()) return -1;
    return value == stored;
}

/* The int of `value` (None or out of range: 0, with no error set). */
static int optional_int(PyObject *value, long long *out) {
    if (value == Py_None) return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*out == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return !overflow;
}

/* scan_v2(buf, off, base_position, max_batch, max_records, crc_fn, create_time,
 *         log_append_time, none, max_batches, stop_position, order_last, segment_first,
 *         span)
 *   -> ([Batch(header, records, []), ...], new_off, in_order)
 * stop_position (absolute, -1: none): no batch starting at or after it is read.
 * in_order: how many of the first batches are data batches each right after the one
 * before, the first right after `order_last`, none ending more than `span` offsets past
 * `segment_first` (0 when either is None): the batches `sharestate.log.order.in_order`
 * admits on its usual path. */
PyObject *native_scan_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "scan_v2 takes 14 arguments");
        return NULL;
    }
    if (load_header_type() < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t off = PyLong_AsSsize_t(args[1]);
    long long base_position = PyLong_AsLongLong(args[2]);
    long long max_batch = PyLong_AsLongLong(args[3]);
    long long max_records = PyLong_AsLongLong(args[4]);
    PyObject *crc_fn = args[5], *create_time = args[6], *log_append = args[7];
    PyObject *none_codec = args[8];
    Py_ssize_t max_batches = PyLong_AsSsize_t(args[9]);
    long long stop_position = PyLong_AsLongLong(args[10]);
    long long span = PyLong_AsLongLong(args[13]);
    PyObject *out = NULL, *result = NULL;
    if (PyErr_Occurred()) goto done;
    long long prev_last = 0, segment_first = 0;
    int ordering = optional_int(args[11], &prev_last) && optional_int(args[12], &segment_first);
    Py_ssize_t in_order = 0;
    out = PyList_New(0);
    if (!out) goto done;
    const unsigned char *buf = view.buf;
    Py_ssize_t len = view.len;
    while (off >= 0 && off + 61 <= len && PyList_GET_SIZE(out) < max_batches
           && (stop_position < 0 || base_position + off < stop_position)) {
        const unsigned char *b = buf + off;
        long long base_offset = (long long)native_be64(b);
        int32_t length = (int32_t)native_be32(b + 8);
        long long size = (long long)length + 12;
        if (b[16] != 2 || length < 49 || size > max_batch || off + size > len) break;
        uint16_t attributes = native_be16(b + 21);
        if (attributes & 7) break;
        int32_t count = (int32_t)native_be32(b + 57);
        if (count < 0 || count > max_records) break;
        if (count == 0 && size != 61) break; /* bytes no record holds: a finding */
        uint32_t stored = native_be32(b + 17);
        int ok = crc_matches(crc_fn, b + 21, (Py_ssize_t)size - 21, stored);
        if (ok < 0) goto done;
        if (!ok) break;
        int32_t last_delta = (int32_t)native_be32(b + 23);
        long long base_ts = (long long)native_be64(b + 27);
        long long max_ts = (long long)native_be64(b + 35);
        long long base_seq = (int32_t)native_be32(b + 53);
        PyObject *records = PyList_New(0);
        if (!records) goto done;
        if (count > 0) {
            PyObject *error = NULL;
            int rc = native_parse_into(records, buf, len, off + 61, off + (Py_ssize_t)size, count,
                                       base_offset, base_ts, base_seq, last_delta,
                                       PyBytes_CheckExact(args[0]) ? args[0] : NULL, &error);
            if (rc != 0) {
                Py_XDECREF(error);
                Py_DECREF(records);
                if (rc < 0) goto done;
                break; /* a bad record: the Python walker reports it */
            }
            if (attributes & 8) {
                /* LogAppendTime: every record takes the batch's max timestamp */
                for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
                    PyObject *rec = PyList_GET_ITEM(records, i);
                    if (native_record_set_timestamp(rec, max_ts)) continue;
                    PyObject *ts = PyLong_FromLongLong(max_ts);
                    if (!ts) { Py_DECREF(records); goto done; }
                    PyObject *old = PyTuple_GET_ITEM(rec, 1);
                    PyTuple_SET_ITEM(rec, 1, ts);
                    Py_DECREF(old);
                }
            }
        }
        PyObject *header = ((PyTypeObject *)header_type)->tp_alloc(
            (PyTypeObject *)header_type, 19);
        if (!header) { Py_DECREF(records); goto done; }
        PyObject *items[19] = {
            PyLong_FromLongLong(base_position + off),
            PyLong_FromLongLong(base_offset),
            PyLong_FromLongLong((long long)((uint64_t)base_offset + (uint64_t)(long long)last_delta)),
            PyLong_FromLongLong(size),
            PyLong_FromLong((int32_t)native_be32(b + 12)),
            PyLong_FromLong(2),
            PyLong_FromUnsignedLong(stored),
            Py_NewRef(Py_True),
            Py_NewRef(none_codec),
            Py_NewRef((attributes & 8) ? log_append : create_time),
            PyLong_FromLongLong(base_ts),
            PyLong_FromLongLong(max_ts),
            PyLong_FromLongLong((long long)native_be64(b + 43)),
            PyLong_FromLong((int16_t)native_be16(b + 51)),
            PyLong_FromLongLong(base_seq),
            PyBool_FromLong(attributes & 16),
            PyBool_FromLong(attributes & 32),
            PyLong_FromLong(count),
            PyBool_FromLong(attributes & 64),
        };
        int failed = 0;
        for (int i = 0; i < 19; i++) {
            if (!items[i]) failed = 1;
            PyTuple_SET_ITEM(header, i, items[i] ? items[i] : Py_NewRef(Py_None));
        }
        if (failed) { Py_DECREF(header); Py_DECREF(records); goto done; }
        PyObject *findings = PyList_New(0);
        PyObject *batch = findings ? ((PyTypeObject *)batch_type)->tp_alloc(
            (PyTypeObject *)batch_type, 3) : NULL;
        if (!batch) { Py_XDECREF(findings); Py_DECREF(header); Py_DECREF(records); goto done; }
        PyTuple_SET_ITEM(batch, 0, header);
        PyTuple_SET_ITEM(batch, 1, records);
        PyTuple_SET_ITEM(batch, 2, findings);
        int appended = PyList_Append(out, batch);
        Py_DECREF(batch);
        if (appended < 0) goto done;
        off += (Py_ssize_t)size;
        if (ordering) {
            long long last = (long long)((uint64_t)base_offset + (uint64_t)(long long)last_delta);
            long long past;  /* last - segment_first; below any span when it underflows */
            ordering = !(attributes & 32) && prev_last != LLONG_MAX
                       && base_offset == prev_last + 1
                       && (__builtin_sub_overflow(last, segment_first, &past) || past <= span);
            if (ordering) {
                in_order++;
                prev_last = last;
            }
        }
    }
    result = Py_BuildValue("(Onn)", out, off, in_order);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}
