/* Arrow columns built from rows of Python objects: the C twins of sharestate/tables/columns.py
 * (`transpose_py`, `ColumnsPy`).
 *
 * Columns(specs): rows in, Arrow buffers out. `specs` is a tuple of (path, kind): a path is a
 * tuple of item indexes followed down from the row (row[i][j]...; a None met on the way is a
 * null), a kind one of COL_* below. `append(row)` adds one row (all columns or, on an error,
 * none), `extend(rows)` a list of them, `take()` hands back what was added and starts
 * again: per column a tuple of little-endian buffers,
 *   int32 / int64: (data, validity)        bool: (bits, validity)
 *   string / binary: (offsets int32[n+1], data, validity)
 *   batches: (offsets int32[n+1], first int64[m], last int64[m], state int32[m],
 *             count int32[m], validity)    -- a list<struct> of state batches
 * where validity is a bitmap (bit i set: row i has a value), None when no row is null, and
 * a null's data is zeros. Each row is walked once, every column filled from it while it
 * is in cache; share_apply appends its history entries this way as it makes them.
 */
#include "native.h"

enum { COL_INT32, COL_INT64, COL_BOOL, COL_STRING, COL_BINARY, COL_BATCHES, COL_KINDS };
#define MAX_DEPTH 8

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_grow(Buf *b, Py_ssize_t need) {
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
    char *grown = PyMem_Realloc(b->p, (size_t)cap);
    if (!grown) { PyErr_NoMemory(); return -1; }
    b->p = grown;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *data, Py_ssize_t size) {
    if (b->len + size > b->cap && buf_grow(b, b->len + size) < 0) return -1;
    if (size) memcpy(b->p + b->len, data, (size_t)size);
    b->len += size;
    return 0;
}

/* Set (or, with value 0, leave clear) bit `i` of a bitmap, grown a byte at a time. */
static inline int bit_put(Buf *b, Py_ssize_t i, int value) {
    if ((i >> 3) >= b->len) {
        unsigned char zero = 0;
        if (buf_put(b, &zero, 1) < 0) return -1;
    }
    if (value) ((unsigned char *)b->p)[i >> 3] |= (unsigned char)(1u << (i & 7));
    return 0;
}

typedef struct {
    int kind;
    Py_ssize_t idx[MAX_DEPTH], depth;
    Buf data, offsets, valid, last, state, count;  /* offsets: int32, from a 0 */
    Py_ssize_t nulls;
} Column;

typedef struct {
    PyObject_HEAD
    Py_ssize_t rows, ncols;
    Column *cols;
} Columns;

/* A column's lengths, to put it back as it was when a row fails half-way. */
typedef struct {
    Py_ssize_t data, offsets, valid, last, state, count, nulls;
} Mark;

static Mark mark_of(const Column *c) {
    return (Mark){c->data.len, c->offsets.len, c->valid.len, c->last.len, c->state.len,
                  c->count.len, c->nulls};
}

/* Clear bit `row` and those after it in a bitmap's kept last byte. */
static void clear_from(Buf *b, Py_ssize_t row) {
    if ((row >> 3) < b->len)
        ((unsigned char *)b->p)[row >> 3] &= (unsigned char)((1u << (row & 7)) - 1);
}

static void restore(Column *c, Py_ssize_t row, const Mark *m) {
    c->data.len = m->data;
    c->offsets.len = m->offsets;
    c->valid.len = m->valid;
    c->last.len = m->last;
    c->state.len = m->state;
    c->count.len = m->count;
    c->nulls = m->nulls;
    clear_from(&c->valid, row);
    if (c->kind == COL_BOOL) clear_from(&c->data, row);
}

static int int_value(PyObject *v, int bits, long long *out, const char *what) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow || (bits == 32 && (x < INT32_MIN || x > INT32_MAX))) {
        PyErr_Format(PyExc_OverflowError, "%s out of int%d range", what, bits);
        return -1;
    }
    *out = x;
    return 0;
}

static int put_int(Buf *b, long long x, int bits) {
    if (bits == 32) {
        int32_t y = (int32_t)x;
        return buf_put(b, &y, 4);
    }
    int64_t y = (int64_t)x;
    return buf_put(b, &y, 8);
}

static int put_offset(Column *c, Py_ssize_t end) {
    if (end > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a column holds more than 2 GiB");
        return -1;
    }
    int32_t o = (int32_t)end;
    return buf_put(&c->offsets, &o, 4);
}

/* The batches of one row (a tuple of tuples whose first four items are a StateBatch's). */
static int put_batches(Column *c, PyObject *v) {
    if (!PyTuple_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "a batches column holds tuples of batches");
        return -1;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(v);
    static const int bits[BATCH_SIZE] = {
        [BATCH_FIRST_OFFSET] = 64, [BATCH_LAST_OFFSET] = 64,
        [BATCH_DELIVERY_STATE] = 32, [BATCH_DELIVERY_COUNT] = 32 };
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *b = PyTuple_GET_ITEM(v, j);
        if (!PyTuple_Check(b) || PyTuple_GET_SIZE(b) < BATCH_SIZE) {
            PyErr_SetString(PyExc_TypeError, "a state batch is a 4-tuple");
            return -1;
        }
        long long x[BATCH_SIZE];
        for (int f = 0; f < BATCH_SIZE; f++) {
            if (int_value(PyTuple_GET_ITEM(b, f), bits[f], &x[f], "a state batch value") < 0)
                return -1;
        }
        if (put_int(&c->data, x[BATCH_FIRST_OFFSET], 64) < 0
            || put_int(&c->last, x[BATCH_LAST_OFFSET], 64) < 0
            || put_int(&c->state, x[BATCH_DELIVERY_STATE], 32) < 0
            || put_int(&c->count, x[BATCH_DELIVERY_COUNT], 32) < 0) return -1;
    }
    return put_offset(c, c->data.len / 8);
}

/* The (borrowed) bytes of a native Record's key or value, when the column reads one
 * straight from a Record: 1 found (NULL data for None), 0 not such a column, -1 error. */
static int record_bytes(const Column *c, PyObject *row, const char **data, Py_ssize_t *size) {
    if (c->kind != COL_BINARY || c->depth != 1 || !Py_IS_TYPE(row, &NativeRecordType)
        || (c->idx[0] != RECORD_KEY && c->idx[0] != RECORD_VALUE)) return 0;
    const char *key, *value;
    Py_ssize_t key_len, value_len;
    native_record_view(row, &key, &key_len, &value, &value_len);
    *data = c->idx[0] == RECORD_KEY ? key : value;
    *size = c->idx[0] == RECORD_KEY ? key_len : value_len;
    return 1;
}

static PyObject *follow(PyObject *row, const Py_ssize_t *idx, Py_ssize_t depth);

/* `follow`, borrowing the value when every step is a tuple's item; otherwise (a native
 * Record on the way) `*owned` holds the new reference returned. NULL with an error set. */
static inline PyObject *walk(PyObject *row, const Py_ssize_t *idx, Py_ssize_t depth,
                             PyObject **owned) {
    PyObject *v = row;
    for (Py_ssize_t d = 0; d < depth && v != Py_None; d++) {
        if (!PyTuple_Check(v) || idx[d] < 0 || idx[d] >= PyTuple_GET_SIZE(v))
            return *owned = follow(v, idx + d, depth - d);
        v = PyTuple_GET_ITEM(v, idx[d]);
    }
    return v;
}

/* Add row `r`'s value of column `c` (taken from `row`). */
static int put_value(Column *c, Py_ssize_t r, PyObject *row) {
    const char *bytes = NULL;
    Py_ssize_t size = 0;
    int direct = record_bytes(c, row, &bytes, &size);
    PyObject *v = NULL, *owned = NULL;
    if (!direct) {
        v = walk(row, c->idx, c->depth, &owned);
        if (!v) return -1;
    }
    int null = direct ? bytes == NULL : v == Py_None;
    int rc = -1;
    if (null || c->nulls) {  /* the bitmap starts at the first null, rows before it valid */
        if (!c->nulls) {
            for (Py_ssize_t i = 0; i < r; i++) {
                if (bit_put(&c->valid, i, 1) < 0) goto done;
            }
        }
        if (bit_put(&c->valid, r, !null) < 0) goto done;
        c->nulls += null;
    }
    switch (c->kind) {
    case COL_INT32:
    case COL_INT64: {
        int bits = c->kind == COL_INT32 ? 32 : 64;
        long long x = 0;
        if (!null && int_value(v, bits, &x, "value") < 0) goto done;
        rc = put_int(&c->data, x, bits);
        goto done;
    }
    case COL_BOOL:
        if (!null && !PyBool_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "a bool column holds bools");
            goto done;
        }
        rc = bit_put(&c->data, r, v == Py_True);
        goto done;
    case COL_STRING:
        if (!null) {
            if (!PyUnicode_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "a string column holds str");
                goto done;
            }
            if (!(bytes = PyUnicode_AsUTF8AndSize(v, &size))) goto done;
        }
        break;
    case COL_BINARY:
        if (!null && !direct) {
            if (!PyBytes_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "a binary column holds bytes");
                goto done;
            }
            bytes = PyBytes_AS_STRING(v);
            size = PyBytes_GET_SIZE(v);
        }
        break;
    default:  /* COL_BATCHES */
        rc = null ? put_offset(c, c->data.len / 8) : put_batches(c, v);
        goto done;
    }
    rc = null ? put_offset(c, c->data.len) :
        buf_put(&c->data, bytes, size) < 0 ? -1 : put_offset(c, c->data.len);
done:
    Py_XDECREF(owned);
    return rc;
}

int native_columns_append(PyObject *self, PyObject *row) {
    Columns *b = (Columns *)self;
    Mark marks[32];
    for (Py_ssize_t i = 0; i < b->ncols; i++) marks[i] = mark_of(&b->cols[i]);
    for (Py_ssize_t i = 0; i < b->ncols; i++) {
        if (put_value(&b->cols[i], b->rows, row) < 0) {
            for (Py_ssize_t j = 0; j <= i; j++) restore(&b->cols[j], b->rows, &marks[j]);
            return -1;
        }
    }
    b->rows++;
    return 0;
}

static void column_free(Column *c) {
    PyMem_Free(c->data.p);
    PyMem_Free(c->offsets.p);
    PyMem_Free(c->valid.p);
    PyMem_Free(c->last.p);
    PyMem_Free(c->state.p);
    PyMem_Free(c->count.p);
}

/* Empty the column (keeping its memory) and start its offsets at 0. */
static int column_reset(Column *c) {
    c->data.len = c->offsets.len = c->valid.len = 0;
    c->last.len = c->state.len = c->count.len = 0;
    c->nulls = 0;
    if (c->kind >= COL_STRING) return put_offset(c, 0);
    return 0;
}

static Py_ssize_t read_path(PyObject *path, Py_ssize_t *idx);

static PyObject *columns_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *specs;
    if ((kwargs && PyDict_GET_SIZE(kwargs)) || !PyArg_ParseTuple(args, "O!:Columns", &PyTuple_Type, &specs)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Columns(specs, /)");
        return NULL;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(specs);
    if (k > 32) {
        PyErr_SetString(PyExc_ValueError, "Columns: at most 32 columns");
        return NULL;
    }
    Columns *self = (Columns *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->cols = PyMem_Calloc((size_t)(k ? k : 1), sizeof(Column));
    if (!self->cols) { Py_DECREF(self); return PyErr_NoMemory(); }
    self->ncols = k;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        Column *c = &self->cols[i];
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 2) {
            PyErr_SetString(PyExc_TypeError, "a column spec is (path, kind)");
            Py_DECREF(self);
            return NULL;
        }
        c->depth = read_path(PyTuple_GET_ITEM(spec, 0), c->idx);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        if (c->depth < 0 || (kind == -1 && PyErr_Occurred())) { Py_DECREF(self); return NULL; }
        if (kind < 0 || kind >= COL_KINDS) {
            PyErr_SetString(PyExc_ValueError, "unknown column kind");
            Py_DECREF(self);
            return NULL;
        }
        c->kind = (int)kind;
        if (column_reset(c) < 0) { Py_DECREF(self); return NULL; }
    }
    return (PyObject *)self;
}

static void columns_dealloc(Columns *self) {
    for (Py_ssize_t i = 0; self->cols && i < self->ncols; i++) column_free(&self->cols[i]);
    PyMem_Free(self->cols);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *columns_append(Columns *self, PyObject *row) {
    if (native_columns_append((PyObject *)self, row) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *columns_extend(Columns *self, PyObject *rows) {
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "extend(list of rows)");
        return NULL;
    }
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(rows); r++) {
        if (native_columns_append((PyObject *)self, PyList_GET_ITEM(rows, r)) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

/* The column's buffers (see the top of the file). */
static PyObject *column_buffers(const Column *c) {
    PyObject *valid = c->nulls ? bytes_of(&c->valid) : Py_NewRef(Py_None);
    if (!valid) return NULL;
    PyObject *out;
    switch (c->kind) {
    case COL_INT32:
    case COL_INT64:
    case COL_BOOL:
        out = Py_BuildValue("(NO)", bytes_of(&c->data), valid);
        break;
    case COL_STRING:
    case COL_BINARY:
        out = Py_BuildValue("(NNO)", bytes_of(&c->offsets), bytes_of(&c->data), valid);
        break;
    default:
        out = Py_BuildValue("(NNNNNO)", bytes_of(&c->offsets), bytes_of(&c->data),
                            bytes_of(&c->last), bytes_of(&c->state), bytes_of(&c->count),
                            valid);
    }
    Py_DECREF(valid);
    return out;
}

static PyObject *columns_take(Columns *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(self->ncols);
    for (Py_ssize_t i = 0; out && i < self->ncols; i++) {
        PyObject *buffers = column_buffers(&self->cols[i]);
        if (!buffers) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, buffers);
    }
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        if (column_reset(&self->cols[i]) < 0) { Py_DECREF(out); return NULL; }
    }
    self->rows = 0;
    return out;
}

static Py_ssize_t columns_length(Columns *self) {
    return self->rows;
}

static PyMethodDef columns_methods[] = {
    {"append", (PyCFunction)columns_append, METH_O,
     "append($self, row, /)\n--\n\nAdd one row (every column, or on an error none)."},
    {"extend", (PyCFunction)columns_extend, METH_O,
     "extend($self, rows, /)\n--\n\nAdd a list of rows."},
    {"take", (PyCFunction)columns_take, METH_NOARGS,
     "take($self, /)\n--\n\nThe buffers of every column (see csrc/columns.c), emptied."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods columns_as_sequence = {
    .sq_length = (lenfunc)columns_length,
};

PyTypeObject NativeColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sharestate._native.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_dealloc = (destructor)columns_dealloc,
    .tp_as_sequence = &columns_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns(specs, /)\n--\n\n"
              "Arrow buffers of columns built from rows; twin: "
              "sharestate.tables.columns.ColumnsPy.",
    .tp_methods = columns_methods,
    .tp_new = columns_new,
};

/* tuples(type, n, columns) -> [type tuple per row]
 * The inverse of Columns: rows of a tuple type (a NamedTuple) whose items are, column by
 * column, values of Arrow arrays without nulls (offset 0) or a constant:
 *   (COL_INT32 | COL_INT64, data) (COL_BOOL, bits) (COL_STRING, offsets, data) (-1, value)
 * A string column's value is made once for a run of equal strings. The pure-Python twin is
 * `tuples_of_py` in columns.py. */
PyObject *native_tuples(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyType_Check(args[0])
        || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "tuples(tuple type, n, columns)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    Py_ssize_t n = PyLong_AsSsize_t(args[1]), k = PyTuple_GET_SIZE(args[2]);
    if (n < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "tuples: n < 0");
        return NULL;
    }
    if (k > 32) {
        PyErr_SetString(PyExc_ValueError, "tuples: at most 32 columns");
        return NULL;
    }
    int kinds[32];
    PyObject *constants[32] = {NULL}, *last[32] = {NULL};
    Py_buffer views[32][2];
    int held[32] = {0};
    PyObject *out = NULL;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *spec = PyTuple_GET_ITEM(args[2], c);
        long kind = PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) >= 2
            ? PyLong_AsLong(PyTuple_GET_ITEM(spec, 0)) : -2;
        Py_ssize_t want = kind == COL_STRING ? 2 : kind == -1 || kind == COL_INT32
            || kind == COL_INT64 || kind == COL_BOOL ? 1 : -1;
        if (want < 0 || PyTuple_GET_SIZE(spec) != want + 1) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a column is (kind, buffers...) or (-1, value)");
            goto done;
        }
        kinds[c] = (int)kind;
        if (kind == -1) {
            constants[c] = PyTuple_GET_ITEM(spec, 1);
            continue;
        }
        for (Py_ssize_t b = 0; b < want; b++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, b + 1), &views[c][b], PyBUF_SIMPLE) < 0)
                goto done;
            held[c] |= 1 << b;
        }
        Py_ssize_t need = kind == COL_INT32 ? n * 4 : kind == COL_INT64 ? n * 8
            : kind == COL_BOOL ? (n + 7) / 8 : (n + 1) * 4;
        if (views[c][0].len < need) {
            PyErr_SetString(PyExc_ValueError, "tuples: a buffer is too short for the rows");
            goto done;
        }
        if (kind == COL_STRING && n) {
            const int32_t *o = views[c][0].buf;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > views[c][1].len) {
                    PyErr_SetString(PyExc_ValueError, "tuples: a string offset is outside its data");
                    goto done;
                }
            }
        }
    }
    out = PyList_New(n);
    if (!out) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = type->tp_alloc(type, k);
        if (!row) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, i, row);
        for (Py_ssize_t c = 0; c < k; c++) {
            PyObject *v;
            const char *data = kinds[c] == -1 ? NULL : views[c][0].buf;
            switch (kinds[c]) {
            case -1:
                v = Py_NewRef(constants[c]);
                break;
            case COL_INT32: {
                int32_t x;
                memcpy(&x, data + i * 4, 4);
                v = PyLong_FromLong(x);
                break;
            }
            case COL_INT64: {
                int64_t x;
                memcpy(&x, data + i * 8, 8);
                v = PyLong_FromLongLong(x);
                break;
            }
            case COL_BOOL:
                v = Py_NewRef(((const unsigned char *)data)[i >> 3] & (1u << (i & 7))
                              ? Py_True : Py_False);
                break;
            default: {  /* COL_STRING */
                const int32_t *o = (const int32_t *)data;
                const char *text = (const char *)views[c][1].buf + o[i];
                Py_ssize_t size = o[i + 1] - o[i];
                PyObject *before = last[c];
                if (before && PyUnicode_GET_LENGTH(before) == size && PyUnicode_IS_ASCII(before)
                    && memcmp(PyUnicode_DATA(before), text, (size_t)size) == 0) {
                    v = Py_NewRef(before);
                } else {
                    v = PyUnicode_DecodeUTF8(text, size, NULL);
                    if (v) Py_XSETREF(last[c], Py_NewRef(v));
                }
            }
            }
            if (!v) { Py_CLEAR(out); goto done; }
            PyTuple_SET_ITEM(row, c, v);
        }
    }
done:
    for (Py_ssize_t c = 0; c < k; c++) {
        for (int b = 0; b < 2; b++) if (held[c] & (1 << b)) PyBuffer_Release(&views[c][b]);
        Py_XDECREF(last[c]);
    }
    return out;
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
