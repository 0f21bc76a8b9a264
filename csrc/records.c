/* Native twin of sharestate/log/records_v2.py `parse_records_py`: identical records,
 * identical error messages and positions. Reads are bounded by the buffer's length (not by
 * `end`), exactly as the Python version's indexing is, so even malformed input takes the
 * same path through the checks.
 */
#include "native.h"

static PyObject *raw_record_type = NULL;

typedef struct {
    const unsigned char *buf;
    Py_ssize_t len;
    Py_ssize_t pos;
    PyObject *message;  /* set on failure (owned) */
    int truncated;
} Cursor;

static int fail(Cursor *c, const char *format, ...) {
    va_list vargs;
    va_start(vargs, format);
    c->message = PyUnicode_FromFormatV(format, vargs);
    va_end(vargs);
    return -1;
}

static int byte_at(Cursor *c, Py_ssize_t pos, unsigned char *out) {
    if (pos >= c->len) { c->truncated = 1; return -1; }
    *out = c->buf[pos];
    return 0;
}

/* zig-zag int32, at most 5 bytes, masked to 32 bits */
static int varint(Cursor *c, long long *out) {
    uint64_t value = 0;
    int shift = 0;
    for (;;) {
        unsigned char byte;
        if (byte_at(c, c->pos, &byte) < 0) return -1;
        c->pos++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            uint32_t v = (uint32_t)value;
            *out = (long long)((int32_t)((v >> 1) ^ (0u - (v & 1u))));
            return 0;
        }
        shift += 7;
        if (shift > 28) return fail(c, "varint longer than 5 bytes");
    }
}

/* zig-zag int64, at most 10 bytes, masked to 64 bits */
static int varlong(Cursor *c, long long *out) {
    uint64_t value = 0;
    int shift = 0;
    for (;;) {
        unsigned char byte;
        if (byte_at(c, c->pos, &byte) < 0) return -1;
        c->pos++;
        if (shift < 64) value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (long long)((value >> 1) ^ (0ull - (value & 1ull)));
            return 0;
        }
        shift += 7;
        if (shift > 63) return fail(c, "varlong longer than 10 bytes");
    }
}

static int32_t wrap32(long long v) { return (int32_t)(uint32_t)(uint64_t)v; }

static long long sequence_of(long long base, long long delta) {
    if (base < 0) return -1;
    const long long i32max = 0x7FFFFFFF;
    if (delta >= 0 && delta <= i32max - base) return base + delta;
    if (base > wrap32(i32max - delta)) return wrap32(delta - (i32max - base) - 1);
    return wrap32(base + delta);
}

static PyObject *slice(Cursor *c, Py_ssize_t at, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)c->buf + at, n);
}

/* One record; returns a new RawRecord, or NULL with c->message/c->truncated set
 * (or a Python error pending when allocation failed). */
static PyObject *one_record(Cursor *c, Py_ssize_t end, long long base_offset,
                            long long base_timestamp, long long base_sequence,
                            long long *low, long long last_delta, PyObject *owner) {
    long long size, ts_delta = 0, off_delta = 0, length;
    Py_ssize_t key_pos = 0, key_len = -1, value_pos = 0, value_len = -1;
    if (varint(c, &size) < 0) return NULL;
    Py_ssize_t body_end = c->pos + (Py_ssize_t)size;
    if (size < 1 || body_end > end) {
        fail(c, "record length %lld with %zd bytes left", size, end - c->pos);
        return NULL;
    }
    c->pos += 1; /* attributes */
    if (varlong(c, &ts_delta) < 0 || varint(c, &off_delta) < 0) return NULL;
    PyObject *key = NULL, *value = NULL, *headers = NULL;
    if (varint(c, &length) < 0) return NULL;
    if (length >= 0) {
        if (c->pos + length > body_end) {
            fail(c, "key of %lld bytes overruns the record", length);
            return NULL;
        }
        key_pos = c->pos;
        key_len = (Py_ssize_t)length;
        c->pos += (Py_ssize_t)length;
    }
    if (varint(c, &length) < 0) goto error;
    if (length >= 0) {
        if (c->pos + length > body_end) {
            fail(c, "value of %lld bytes overruns the record", length);
            goto error;
        }
        value_pos = c->pos;
        value_len = (Py_ssize_t)length;
        c->pos += (Py_ssize_t)length;
    }
    unsigned char first;
    if (byte_at(c, c->pos, &first) < 0) goto error;
    if (first == 0) {
        headers = PyTuple_New(0);
        c->pos += 1;
        if (!headers) goto error;
    } else {
        long long count;
        if (varint(c, &count) < 0) goto error;
        if (count < 0 || count * 2 > body_end - c->pos) {
            fail(c, "header count %lld does not fit the record", count);
            goto error;
        }
        headers = PyTuple_New((Py_ssize_t)count);
        if (!headers) goto error;
        for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
            if (varint(c, &length) < 0) goto error;
            if (length < 0 || c->pos + length > body_end) {
                fail(c, "header key length %lld is invalid", length);
                goto error;
            }
            PyObject *hkey = PyUnicode_DecodeUTF8((const char *)c->buf + c->pos,
                                                  (Py_ssize_t)length, "replace");
            if (!hkey) goto error;
            c->pos += (Py_ssize_t)length;
            PyObject *hvalue;
            if (varint(c, &length) < 0) { Py_DECREF(hkey); goto error; }
            if (length < 0) {
                hvalue = Py_NewRef(Py_None);
            } else {
                if (c->pos + length > body_end) {
                    Py_DECREF(hkey);
                    fail(c, "header value of %lld bytes overruns the record", length);
                    goto error;
                }
                hvalue = slice(c, c->pos, (Py_ssize_t)length);
                if (!hvalue) { Py_DECREF(hkey); goto error; }
                c->pos += (Py_ssize_t)length;
            }
            PyObject *pair = PyTuple_Pack(2, hkey, hvalue);
            Py_DECREF(hkey);
            Py_DECREF(hvalue);
            if (!pair) goto error;
            PyTuple_SET_ITEM(headers, i, pair);
        }
    }
    if (c->pos != body_end) {
        fail(c, "record declares %lld bytes but its fields use %lld", size,
             (long long)(c->pos - body_end) + size);
        goto error;
    }
    if (off_delta < *low || off_delta > last_delta) {
        fail(c, "offset delta %lld is outside %lld to %lld (after the record before it, "
             "within the batch's last offset delta)", off_delta, *low, last_delta);
        goto error;
    }
    *low = off_delta + 1;
    long long offset = (long long)((uint64_t)base_offset + (uint64_t)off_delta);
    long long timestamp = (long long)((uint64_t)base_timestamp + (uint64_t)ts_delta);
    if (owner) {
        PyObject *native = native_record_new(owner, offset, timestamp,
                                             sequence_of(base_sequence, off_delta), key_pos,
                                             key_len, value_pos, value_len, headers);
        Py_DECREF(headers);
        return native;
    }
    key = key_len < 0 ? Py_NewRef(Py_None) : slice(c, key_pos, key_len);
    value = value_len < 0 ? Py_NewRef(Py_None) : slice(c, value_pos, value_len);
    if (!key || !value) goto error;
    PyObject *record = ((PyTypeObject *)raw_record_type)->tp_alloc(
        (PyTypeObject *)raw_record_type, RECORD_SIZE);
    if (!record) goto error;
    PyObject *o = PyLong_FromLongLong(offset);
    PyObject *t = PyLong_FromLongLong(timestamp);
    PyObject *s = PyLong_FromLongLong(sequence_of(base_sequence, off_delta));
    if (!o || !t || !s) {
        Py_XDECREF(o); Py_XDECREF(t); Py_XDECREF(s); Py_DECREF(record);
        goto error;
    }
    PyTuple_SET_ITEM(record, RECORD_OFFSET, o);
    PyTuple_SET_ITEM(record, RECORD_TIMESTAMP, t);
    PyTuple_SET_ITEM(record, RECORD_SEQUENCE, s);
    PyTuple_SET_ITEM(record, RECORD_KEY, key);
    PyTuple_SET_ITEM(record, RECORD_VALUE, value);
    PyTuple_SET_ITEM(record, RECORD_HEADERS, headers);
    return record;
error:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    return NULL;
}

static int load_record_type(void) {
    if (raw_record_type) return 0;
    PyObject *module = PyImport_ImportModule("sharestate.log.batch");
    if (!module) return -1;
    raw_record_type = PyObject_GetAttrString(module, "RawRecord");
    Py_DECREF(module);
    if (!raw_record_type) return -1;
    if (!PyType_Check(raw_record_type)
        || !PyType_IsSubtype((PyTypeObject *)raw_record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "RawRecord must be a tuple subclass");
        Py_CLEAR(raw_record_type);
        return -1;
    }
    return 0;
}

/* Parse `count` records of buf[pos:end] into `records`. Returns 0 when all parsed, 1 when
 * a record was bad (*error = (message, position), new reference), -1 on a Python error.
 * `owner` (the bytes object `buf` belongs to, or NULL) lets records point into it. */
int native_parse_into(PyObject *records, const unsigned char *buf, Py_ssize_t len,
                      Py_ssize_t pos, Py_ssize_t end, long long count, long long base_offset,
                      long long base_timestamp, long long base_sequence,
                      long long last_delta, PyObject *owner, PyObject **error) {
    if (load_record_type() < 0) return -1;
    *error = NULL;
    if (count < 0) {
        *error = Py_BuildValue("(Nn)", PyUnicode_FromFormat("negative record count %lld", count),
                               pos);
        return *error ? 1 : -1;
    }
    Cursor c = { buf, len, pos, NULL, 0 };
    Py_ssize_t start = pos;
    long long low = 0; /* the smallest offset delta the next record may have */
    for (long long index = 0; index < count; index++) {
        start = c.pos;
        if (c.pos >= end) {
            fail(&c, "batch ends after %lld of %lld records", index, count);
        } else {
            PyObject *record = one_record(&c, end, base_offset, base_timestamp, base_sequence,
                                          &low, last_delta, owner);
            if (record) {
                int rc = PyList_Append(records, record);
                Py_DECREF(record);
                if (rc < 0) return -1;
                continue;
            }
            if (PyErr_Occurred()) return -1;
        }
        PyObject *message = c.truncated
            ? PyUnicode_FromFormat("record %lld: truncated", index)
            : PyUnicode_FromFormat("record %lld: %U", index, c.message);
        Py_XDECREF(c.message);
        if (!message) return -1;
        *error = Py_BuildValue("(Nn)", message, start);
        return *error ? 1 : -1;
    }
    if (c.pos != end) {
        *error = Py_BuildValue("(Nn)", PyUnicode_FromFormat(
            "%zd bytes left after the last of %lld records", end - c.pos, count), c.pos);
        return *error ? 1 : -1;
    }
    return 0;
}

/* parse_records(buf, pos, end, count, base_offset, base_timestamp, base_sequence,
 *               last_delta) -> (list of records, None | (message, position)) */
PyObject *native_parse_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "parse_records takes 8 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    long long count = PyLong_AsLongLong(args[3]);
    long long base_offset = PyLong_AsLongLong(args[4]);
    long long base_timestamp = PyLong_AsLongLong(args[5]);
    long long base_sequence = PyLong_AsLongLong(args[6]);
    long long last_delta = PyLong_AsLongLong(args[7]);
    PyObject *records = NULL, *error = NULL, *result = NULL;
    if (PyErr_Occurred()) goto done;
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "parse_records: bad bounds");
        goto done;
    }
    records = PyList_New(0);
    if (!records) goto done;
    if (native_parse_into(records, view.buf, view.len, pos, end, count, base_offset,
                          base_timestamp, base_sequence, last_delta,
                          PyBytes_CheckExact(args[0]) ? args[0] : NULL, &error) < 0) goto done;
    result = PyTuple_Pack(2, records, error ? error : Py_None);
done:
    Py_XDECREF(records);
    Py_XDECREF(error);
    PyBuffer_Release(&view);
    return result;
}
