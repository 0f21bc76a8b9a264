/* Native twin of sharestate/tables/columns.py `flatten_batches_py`: the state batches of many
 * states as flat little-endian buffers for an Arrow list<struct> column.
 *
 * flatten_batches(states, item=STATE_BATCHES) -> (offsets int32[n+1], first int64[m],
 *     last int64[m], state int32[m], count int32[m], valid uint8[n])
 * `states` is a sequence whose items are None (a null list) or tuples whose item `item` is
 * a tuple of batches, each a tuple starting with a StateBatch's fields.
 */
#include "native.h"

static int grow(char **buf, Py_ssize_t *cap, Py_ssize_t need) {
    if (need <= *cap) return 0;
    Py_ssize_t cap2 = *cap ? *cap : 1024;
    while (cap2 < need) cap2 *= 2;
    char *grown = PyMem_Realloc(*buf, (size_t)cap2);
    if (!grown) { PyErr_NoMemory(); return -1; }
    *buf = grown;
    *cap = cap2;
    return 0;
}

/* *out = the int `v`, which must fit `bits` (32 or 64) bits; -1 with an error set (TypeError
 * when it is no int, OverflowError when it does not fit), as `flatten_batches_py` raises. */
static int batch_value(PyObject *v, int bits, long long *out) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow || (bits == 32 && (x < INT32_MIN || x > INT32_MAX))) {
        PyErr_SetString(PyExc_OverflowError, "a state batch value is out of range");
        return -1;
    }
    *out = x;
    return 0;
}

PyObject *native_flatten_batches(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *states;
    Py_ssize_t item = STATE_BATCHES;
    if (!PyArg_ParseTuple(args, "O|n", &states, &item)) return NULL;
    PyObject *fast = PySequence_Fast(states, "states must be a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    char *first = NULL, *last = NULL, *state = NULL, *count = NULL;
    Py_ssize_t cf = 0, cl = 0, cs = 0, cc = 0, m = 0;
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *valid = PyBytes_FromStringAndSize(NULL, n);
    PyObject *result = NULL;
    if (!offsets || !valid) goto done;
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    char *ok = PyBytes_AS_STRING(valid);
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = items[i];
        ok[i] = s != Py_None;
        if (s != Py_None) {
            if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) <= item || item < 0
                || !PyTuple_Check(PyTuple_GET_ITEM(s, item))) {
                PyErr_SetString(PyExc_TypeError, "a state is a tuple whose item `item` holds its batches");
                goto done;
            }
            PyObject *batches = PyTuple_GET_ITEM(s, item);
            Py_ssize_t k = PyTuple_GET_SIZE(batches);
            if (grow(&first, &cf, (m + k) * 8) < 0 || grow(&last, &cl, (m + k) * 8) < 0
                || grow(&state, &cs, (m + k) * 4) < 0 || grow(&count, &cc, (m + k) * 4) < 0) goto done;
            for (Py_ssize_t j = 0; j < k; j++) {
                PyObject *b = PyTuple_GET_ITEM(batches, j);
                if (!PyTuple_Check(b) || PyTuple_GET_SIZE(b) < BATCH_SIZE) {
                    PyErr_SetString(PyExc_TypeError, "a state batch is a 4-tuple");
                    goto done;
                }
                long long v[BATCH_SIZE];
                static const int bits[BATCH_SIZE] = {
                    [BATCH_FIRST_OFFSET] = 64, [BATCH_LAST_OFFSET] = 64,
                    [BATCH_DELIVERY_STATE] = 32, [BATCH_DELIVERY_COUNT] = 32 };
                for (int f = 0; f < BATCH_SIZE; f++) {
                    if (batch_value(PyTuple_GET_ITEM(b, f), bits[f], &v[f]) < 0) goto done;
                }
                int64_t f = v[BATCH_FIRST_OFFSET], l = v[BATCH_LAST_OFFSET];
                int32_t st = (int32_t)v[BATCH_DELIVERY_STATE], c = (int32_t)v[BATCH_DELIVERY_COUNT];
                memcpy(first + (m + j) * 8, &f, 8);
                memcpy(last + (m + j) * 8, &l, 8);
                memcpy(state + (m + j) * 4, &st, 4);
                memcpy(count + (m + j) * 4, &c, 4);
            }
            m += k;
            if (m > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "too many batches"); goto done; }
        }
        off[i + 1] = (int32_t)m;
    }
    result = Py_BuildValue("(Oy#y#y#y#O)", offsets,
                           first ? first : "", m * 8, last ? last : "", m * 8,
                           state ? state : "", m * 4, count ? count : "", m * 4, valid);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(valid);
    PyMem_Free(first);
    PyMem_Free(last);
    PyMem_Free(state);
    PyMem_Free(count);
    Py_DECREF(fast);
    return result;
}

/* The indexes of one path (a tuple of at most 8 ints) into `idx`; its depth, -1 on error. */
static Py_ssize_t read_path(PyObject *path, Py_ssize_t *idx) {
    if (!PyTuple_Check(path)) {
        PyErr_SetString(PyExc_TypeError, "a path is a tuple of indexes");
        return -1;
    }
    Py_ssize_t depth = PyTuple_GET_SIZE(path);
    if (depth > 8) { PyErr_SetString(PyExc_ValueError, "path too deep"); return -1; }
    for (Py_ssize_t d = 0; d < depth; d++) idx[d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(path, d));
    return PyErr_Occurred() ? -1 : depth;
}

/* row[idx[0]][idx[1]]... as a new reference: None where a None is met on the way, NULL with
 * an error set when the path does not fit. */
static PyObject *follow(PyObject *row, const Py_ssize_t *idx, Py_ssize_t depth) {
    PyObject *v = Py_NewRef(row);
    for (Py_ssize_t d = 0; d < depth && v != Py_None; d++) {
        PyObject *next;
        if (Py_IS_TYPE(v, &NativeRecordType) && idx[d] >= 0 && idx[d] < RECORD_SIZE) {
            next = native_record_field(v, idx[d]);
        } else if (PyTuple_Check(v) && idx[d] >= 0 && idx[d] < PyTuple_GET_SIZE(v)) {
            next = Py_NewRef(PyTuple_GET_ITEM(v, idx[d]));
        } else {
            PyErr_SetString(PyExc_IndexError, "path does not fit a row");
            next = NULL;
        }
        Py_DECREF(v);
        if (!next) return NULL;
        v = next;
    }
    return v;
}

/* transpose(rows, paths) -> [column list per path]
 * Each path is a tuple of item indexes followed down from the row (row[i][j]...); a None met
 * on the way gives None. The pure-Python twin is sharestate/tables/columns.py
 * `transpose_py`. */
PyObject *native_transpose(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "transpose(list of rows, tuple of index paths)");
        return NULL;
    }
    PyObject *rows = args[0], *paths = args[1];
    Py_ssize_t n = PyList_GET_SIZE(rows), k = PyTuple_GET_SIZE(paths);
    PyObject *out = PyList_New(k);
    if (!out) return NULL;
    for (Py_ssize_t c = 0; c < k; c++) {
        Py_ssize_t idx[8];
        Py_ssize_t depth = read_path(PyTuple_GET_ITEM(paths, c), idx);
        PyObject *column = depth < 0 ? NULL : PyList_New(n);
        if (!column) { Py_DECREF(out); return NULL; }
        for (Py_ssize_t r = 0; r < n; r++) {
            PyObject *v = follow(PyList_GET_ITEM(rows, r), idx, depth);
            if (!v) { Py_DECREF(column); Py_DECREF(out); return NULL; }
            PyList_SET_ITEM(column, r, v);
        }
        PyList_SET_ITEM(out, c, column);
    }
    return out;
}

/* int_columns(rows, paths, widths) -> [(data, validity or None) per path]
 * `transpose` for integer columns, as Arrow buffers: `widths[c]` is 4 or 8 bytes per value,
 * `data` little-endian (0 where null), `validity` a bitmap (bit i set: row i has a value),
 * None when no row is null. Rows are walked once, every column filled from each (the rows
 * are touched while in cache). The pure-Python twin is `int_columns_py` in columns.py. */
#define MAX_INT_COLUMNS 32
PyObject *native_int_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2])
        || PyTuple_GET_SIZE(args[1]) != PyTuple_GET_SIZE(args[2])) {
        PyErr_SetString(PyExc_TypeError, "int_columns(list of rows, tuple of paths, tuple of widths)");
        return NULL;
    }
    PyObject *rows = args[0], *paths = args[1], *widths = args[2];
    Py_ssize_t n = PyList_GET_SIZE(rows), k = PyTuple_GET_SIZE(paths);
    if (k > MAX_INT_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "int_columns: too many columns");
        return NULL;
    }
    Py_ssize_t idx[MAX_INT_COLUMNS][8], depth[MAX_INT_COLUMNS], width[MAX_INT_COLUMNS];
    Py_ssize_t nulls[MAX_INT_COLUMNS];
    PyObject *data[MAX_INT_COLUMNS] = {NULL}, *valid[MAX_INT_COLUMNS] = {NULL};
    PyObject *out = NULL;
    for (Py_ssize_t c = 0; c < k; c++) {
        depth[c] = read_path(PyTuple_GET_ITEM(paths, c), idx[c]);
        if (depth[c] < 0) goto done;
        width[c] = PyLong_AsSsize_t(PyTuple_GET_ITEM(widths, c));
        if (width[c] != 4 && width[c] != 8) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a width is 4 or 8");
            goto done;
        }
        data[c] = PyBytes_FromStringAndSize(NULL, n * width[c]);
        valid[c] = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (!data[c] || !valid[c]) goto done;
        memset(PyBytes_AS_STRING(valid[c]), 0, (size_t)((n + 7) / 8));
        nulls[c] = 0;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        for (Py_ssize_t c = 0; c < k; c++) {
            PyObject *v = follow(row, idx[c], depth[c]);
            if (!v) goto done;
            long long x = 0;
            if (v == Py_None) {
                nulls[c]++;
            } else {
                x = PyLong_AsLongLong(v);
                if (x == -1 && PyErr_Occurred()) { Py_DECREF(v); goto done; }
                if (width[c] == 4 && (x < INT32_MIN || x > INT32_MAX)) {
                    PyErr_SetString(PyExc_OverflowError, "value out of int32 range");
                    Py_DECREF(v);
                    goto done;
                }
                unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(valid[c]);
                bits[r >> 3] |= (unsigned char)(1u << (r & 7));
            }
            Py_DECREF(v);
            char *bytes = PyBytes_AS_STRING(data[c]);
            if (width[c] == 4) {
                int32_t y = (int32_t)x;
                memcpy(bytes + r * 4, &y, 4);
            } else {
                int64_t y = (int64_t)x;
                memcpy(bytes + r * 8, &y, 8);
            }
        }
    }
    out = PyList_New(k);
    for (Py_ssize_t c = 0; out && c < k; c++) {
        PyObject *pair = PyTuple_Pack(2, data[c], nulls[c] ? valid[c] : Py_None);
        if (!pair) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, c, pair);
    }
done:
    for (Py_ssize_t c = 0; c < k; c++) {
        Py_XDECREF(data[c]);
        Py_XDECREF(valid[c]);
    }
    return out;
}
