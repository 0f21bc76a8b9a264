/* Native twin of sharestate/records/codec.py `read_struct_py`.
 *
 * A layout arrives as the StructProgram sharestate/records/codec.py builds of it (fields:
 * STRUCT_PROGRAM_* and SLOT_PROGRAM_* in native.h; kinds: WIRE_KINDS):
 *   StructProgram = (flexible, width, defaults, regular, tagged, names)
 *   SlotProgram   = (position, kind, nullable, flexible, sub, name)
 *     sub is a StructProgram for STRUCT, the element's SlotProgram for ARRAY, else None
 *   tagged = ((tag, SlotProgram), ...) sorted by tag
 * It is compiled once into C structures kept in a capsule. The output is the same tuple
 * the Python codec builds, and errors raise the same DecodeError(message, position).
 */
#include "native.h"

typedef struct Layout Layout;

typedef struct Slot {
    Py_ssize_t index;
    int kind;
    int nullable;
    int flexible;
    Layout *layout;        /* STRUCT */
    struct Slot *element;  /* ARRAY */
    PyObject *name;        /* borrowed from the program tuple (kept alive by it) */
} Slot;

struct Layout {
    int flexible;
    Py_ssize_t width;
    PyObject *defaults;    /* tuple, borrowed */
    Py_ssize_t n_regular;
    Slot *regular;
    Py_ssize_t n_tagged;
    long long *tags;
    Slot *tagged;
};

typedef struct {
    PyObject *program;     /* owned: keeps borrowed references alive */
    Layout *root;
} Compiled;

static void free_layout(Layout *layout);

static void free_slot(Slot *slot) {
    if (slot->layout) { free_layout(slot->layout); slot->layout = NULL; }
    if (slot->element) { free_slot(slot->element); PyMem_Free(slot->element); slot->element = NULL; }
}

static void free_layout(Layout *layout) {
    if (!layout) return;
    for (Py_ssize_t i = 0; i < layout->n_regular; i++) free_slot(&layout->regular[i]);
    for (Py_ssize_t i = 0; i < layout->n_tagged; i++) free_slot(&layout->tagged[i]);
    PyMem_Free(layout->regular);
    PyMem_Free(layout->tagged);
    PyMem_Free(layout->tags);
    PyMem_Free(layout);
}

static Layout *compile_layout(PyObject *prog);

static int compile_slot(PyObject *prog, Slot *slot) {
    if (!PyTuple_Check(prog) || PyTuple_GET_SIZE(prog) != SLOT_PROGRAM_SIZE) {
        PyErr_SetString(PyExc_TypeError, "a slot program is a SlotProgram");
        return -1;
    }
    memset(slot, 0, sizeof(*slot));
    slot->index = PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, SLOT_PROGRAM_POSITION));
    slot->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(prog, SLOT_PROGRAM_KIND));
    slot->nullable = PyObject_IsTrue(PyTuple_GET_ITEM(prog, SLOT_PROGRAM_NULLABLE));
    slot->flexible = PyObject_IsTrue(PyTuple_GET_ITEM(prog, SLOT_PROGRAM_FLEXIBLE));
    slot->name = PyTuple_GET_ITEM(prog, SLOT_PROGRAM_NAME);
    if (PyErr_Occurred()) return -1;
    PyObject *sub = PyTuple_GET_ITEM(prog, SLOT_PROGRAM_SUB);
    if (slot->kind == K_STRUCT) {
        slot->layout = compile_layout(sub);
        if (!slot->layout) return -1;
    } else if (slot->kind == K_ARRAY) {
        slot->element = PyMem_Calloc(1, sizeof(Slot));
        if (!slot->element) { PyErr_NoMemory(); return -1; }
        if (compile_slot(sub, slot->element) < 0) return -1;
    }
    return 0;
}

static Layout *compile_layout(PyObject *prog) {
    if (!PyTuple_Check(prog) || PyTuple_GET_SIZE(prog) != STRUCT_PROGRAM_SIZE) {
        PyErr_SetString(PyExc_TypeError, "a struct program is a StructProgram");
        return NULL;
    }
    Layout *layout = PyMem_Calloc(1, sizeof(Layout));
    if (!layout) { PyErr_NoMemory(); return NULL; }
    layout->flexible = PyObject_IsTrue(PyTuple_GET_ITEM(prog, STRUCT_PROGRAM_FLEXIBLE));
    layout->width = PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, STRUCT_PROGRAM_WIDTH));
    layout->defaults = PyTuple_GET_ITEM(prog, STRUCT_PROGRAM_DEFAULTS);
    PyObject *regular = PyTuple_GET_ITEM(prog, STRUCT_PROGRAM_REGULAR);
    PyObject *tagged = PyTuple_GET_ITEM(prog, STRUCT_PROGRAM_TAGGED);
    if (PyErr_Occurred() || !PyTuple_Check(layout->defaults) || !PyTuple_Check(regular)
        || !PyTuple_Check(tagged)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad struct program");
        free_layout(layout);
        return NULL;
    }
    layout->n_regular = PyTuple_GET_SIZE(regular);
    layout->n_tagged = PyTuple_GET_SIZE(tagged);
    layout->regular = PyMem_Calloc((size_t)layout->n_regular + 1, sizeof(Slot));
    layout->tagged = PyMem_Calloc((size_t)layout->n_tagged + 1, sizeof(Slot));
    layout->tags = PyMem_Calloc((size_t)layout->n_tagged + 1, sizeof(long long));
    if (!layout->regular || !layout->tagged || !layout->tags) {
        PyErr_NoMemory();
        free_layout(layout);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < layout->n_regular; i++) {
        if (compile_slot(PyTuple_GET_ITEM(regular, i), &layout->regular[i]) < 0) {
            free_layout(layout);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < layout->n_tagged; i++) {
        PyObject *entry = PyTuple_GET_ITEM(tagged, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "tagged entry must be (tag, slot)");
            free_layout(layout);
            return NULL;
        }
        layout->tags[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
        if (compile_slot(PyTuple_GET_ITEM(entry, 1), &layout->tagged[i]) < 0) {
            free_layout(layout);
            return NULL;
        }
    }
    return layout;
}

static void capsule_free(PyObject *capsule) {
    Compiled *compiled = PyCapsule_GetPointer(capsule, "sharestate.layout");
    if (!compiled) return;
    free_layout(compiled->root);
    Py_XDECREF(compiled->program);
    PyMem_Free(compiled);
}

PyObject *native_compile(PyObject *self, PyObject *program) {
    (void)self;
    Compiled *compiled = PyMem_Calloc(1, sizeof(Compiled));
    if (!compiled) return PyErr_NoMemory();
    compiled->root = compile_layout(program);
    if (!compiled->root) { PyMem_Free(compiled); return NULL; }
    Py_INCREF(program);
    compiled->program = program;
    PyObject *capsule = PyCapsule_New(compiled, "sharestate.layout", capsule_free);
    if (!capsule) {
        free_layout(compiled->root);
        Py_DECREF(program);
        PyMem_Free(compiled);
    }
    return capsule;
}

Layout *native_layout(PyObject *capsule) {
    Compiled *compiled = PyCapsule_GetPointer(capsule, "sharestate.layout");
    return compiled ? compiled->root : NULL;
}

/* ------------------------------------------------------------------------------------ */
/* reading */

typedef struct {
    const unsigned char *data;
    Py_ssize_t pos;
    Py_ssize_t end;
} Reader;

static int need(Reader *r, Py_ssize_t n, Py_ssize_t *start) {
    if (n < 0 || r->pos + n > r->end) {
        native_decode_error(r->pos, "needs %zd bytes, %zd left", n, r->end - r->pos);
        return -1;
    }
    *start = r->pos;
    r->pos += n;
    return 0;
}

static int uvarint(Reader *r, long long *out) {
    unsigned long long value = 0;
    int shift = 0;
    Py_ssize_t start = r->pos;
    for (;;) {
        if (r->pos >= r->end) { native_decode_error(start, "truncated varint"); return -1; }
        unsigned char byte = r->data[r->pos++];
        value |= (unsigned long long)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) { *out = (long long)value; return 0; }
        shift += 7;
        if (shift > 28) { native_decode_error(start, "varint longer than 5 bytes"); return -1; }
    }
}

static int read_length(Reader *r, int flexible, int wide, long long *out) {
    Py_ssize_t s;
    if (flexible) {
        long long v;
        if (uvarint(r, &v) < 0) return -1;
        *out = v - 1;
        return 0;
    }
    if (wide) {
        if (need(r, 4, &s) < 0) return -1;
        *out = (int32_t)native_be32(r->data + s);
    } else {
        if (need(r, 2, &s) < 0) return -1;
        *out = (int16_t)native_be16(r->data + s);
    }
    return 0;
}

static PyObject *read_layout(Layout *layout, Reader *r);

/* Coordinator records repeat the same group ids, member ids and topic ids endlessly, so a
 * small direct-mapped cache of recently decoded strings saves most UTF-8 decoding and
 * allocation. Entries are immutable str objects; a hit returns a new reference. */
#define STRING_CACHE_SIZE 1024
#define STRING_CACHE_MAX_LEN 512
typedef struct { PyObject *text; Py_ssize_t n; int uuid; unsigned char bytes[STRING_CACHE_MAX_LEN]; } CacheEntry;
static CacheEntry *string_cache = NULL;

static PyObject *cached_text(const unsigned char *data, Py_ssize_t n, int uuid) {
    if (n > STRING_CACHE_MAX_LEN || (!string_cache
            && !(string_cache = PyMem_Calloc(STRING_CACHE_SIZE, sizeof(CacheEntry))))) {
        return uuid ? native_uuid_str(data)
                    : PyUnicode_DecodeUTF8((const char *)data, n, "replace");
    }
    uint64_t h = 1469598103934665603ull ^ (uint64_t)uuid;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ data[i]) * 1099511628211ull;
    CacheEntry *e = &string_cache[h & (STRING_CACHE_SIZE - 1)];
    if (e->text && e->n == n && e->uuid == uuid && memcmp(e->bytes, data, (size_t)n) == 0) {
        return Py_NewRef(e->text);
    }
    PyObject *text = uuid ? native_uuid_str(data)
                          : PyUnicode_DecodeUTF8((const char *)data, n, "replace");
    if (!text) return NULL;
    Py_XSETREF(e->text, Py_NewRef(text));
    e->n = n;
    e->uuid = uuid;
    memcpy(e->bytes, data, (size_t)n);
    return text;
}

static PyObject *null_value(Slot *slot, Reader *r) {
    if (!slot->nullable) {
        native_decode_error(r->pos, "null in non-nullable field %U", slot->name);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *read_slot(Slot *slot, Reader *r) {
    Py_ssize_t s;
    long long n;
    switch (slot->kind) {
    case K_INT8:
        if (need(r, 1, &s) < 0) return NULL;
        return PyLong_FromLong((signed char)r->data[s]);
    case K_INT16:
        if (need(r, 2, &s) < 0) return NULL;
        return PyLong_FromLong((int16_t)native_be16(r->data + s));
    case K_UINT16:
        if (need(r, 2, &s) < 0) return NULL;
        return PyLong_FromLong((long)native_be16(r->data + s));
    case K_INT32:
        if (need(r, 4, &s) < 0) return NULL;
        return PyLong_FromLong((int32_t)native_be32(r->data + s));
    case K_INT64:
        if (need(r, 8, &s) < 0) return NULL;
        return PyLong_FromLongLong((long long)native_be64(r->data + s));
    case K_FLOAT64: {
        if (need(r, 8, &s) < 0) return NULL;
        uint64_t bits = native_be64(r->data + s);
        double d;
        memcpy(&d, &bits, sizeof d);
        return PyFloat_FromDouble(d);
    }
    case K_BOOL:
        if (need(r, 1, &s) < 0) return NULL;
        return PyBool_FromLong(r->data[s] != 0);
    case K_UUID:
        if (need(r, 16, &s) < 0) return NULL;
        return cached_text(r->data + s, 16, 1);
    case K_STRING:
        if (read_length(r, slot->flexible, 0, &n) < 0) return NULL;
        if (n < 0) return null_value(slot, r);
        if (need(r, (Py_ssize_t)n, &s) < 0) return NULL;
        return cached_text(r->data + s, (Py_ssize_t)n, 0);
    case K_BYTES:
        if (read_length(r, slot->flexible, 1, &n) < 0) return NULL;
        if (n < 0) return null_value(slot, r);
        if (need(r, (Py_ssize_t)n, &s) < 0) return NULL;
        return PyBytes_FromStringAndSize((const char *)r->data + s, (Py_ssize_t)n);
    case K_ARRAY: {
        if (read_length(r, slot->flexible, 1, &n) < 0) return NULL;
        if (n < 0) return null_value(slot, r);
        if (n > r->end - r->pos) {
            native_decode_error(r->pos, "array of %lld elements in %zd bytes", n, r->end - r->pos);
            return NULL;
        }
        PyObject *items = PyTuple_New((Py_ssize_t)n);
        if (!items) return NULL;
        for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
            PyObject *item = read_slot(slot->element, r);
            if (!item) { Py_DECREF(items); return NULL; }
            PyTuple_SET_ITEM(items, i, item);
        }
        return items;
    }
    case K_STRUCT:
        if (slot->nullable) {
            if (need(r, 1, &s) < 0) return NULL;
            if ((signed char)r->data[s] < 0) Py_RETURN_NONE;
        }
        return read_layout(slot->layout, r);
    default:
        native_decode_error(r->pos, "unsupported kind %d", slot->kind);
        return NULL;
    }
}

static PyObject *read_layout(Layout *layout, Reader *r) {
    Py_ssize_t width = layout->width;
    PyObject *values = PyTuple_New(width + 1);
    if (!values) return NULL;
    for (Py_ssize_t i = 0; i < width; i++) {
        PyObject *d = PyTuple_GET_ITEM(layout->defaults, i);
        Py_INCREF(d);
        PyTuple_SET_ITEM(values, i, d);
    }
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(values, width, Py_None);
    for (Py_ssize_t i = 0; i < layout->n_regular; i++) {
        Slot *slot = &layout->regular[i];
        PyObject *v = read_slot(slot, r);
        if (!v) goto fail;
        PyObject *old = PyTuple_GET_ITEM(values, slot->index);
        PyTuple_SET_ITEM(values, slot->index, v);
        Py_DECREF(old);
    }
    if (layout->flexible) {
        long long count, last_tag = -1;
        PyObject *unknown = NULL;
        if (uvarint(r, &count) < 0) goto fail;
        for (long long k = 0; k < count; k++) {
            long long tag, size;
            Py_ssize_t tag_pos = r->pos, start;
            if (uvarint(r, &tag) < 0) goto fail_unknown;
            if (tag <= last_tag) {
                native_decode_error(tag_pos, "tagged field %lld out of order", tag);
                goto fail_unknown;
            }
            last_tag = tag;
            if (uvarint(r, &size) < 0) goto fail_unknown;
            if (need(r, (Py_ssize_t)size, &start) < 0) goto fail_unknown;
            Slot *slot = NULL;
            for (Py_ssize_t t = 0; t < layout->n_tagged; t++) {
                if (layout->tags[t] == tag) { slot = &layout->tagged[t]; break; }
            }
            if (!slot) {
                if (!unknown && !(unknown = PyList_New(0))) goto fail;
                PyObject *entry = Py_BuildValue("(Ly#)", tag, (const char *)r->data + start,
                                                (Py_ssize_t)size);
                if (!entry || PyList_Append(unknown, entry) < 0) { Py_XDECREF(entry); goto fail_unknown; }
                Py_DECREF(entry);
                continue;
            }
            Reader sub = { r->data, start, start + (Py_ssize_t)size };
            PyObject *v;
            if (slot->kind == K_STRUCT && slot->nullable) {
                /* tagged nullable struct: unsigned-varint presence marker, 0 = null */
                long long present;
                if (uvarint(&sub, &present) < 0) goto fail_unknown;
                if (present == 0) { Py_INCREF(Py_None); v = Py_None; }
                else v = read_layout(slot->layout, &sub);
            } else {
                v = read_slot(slot, &sub);
            }
            if (!v) goto fail_unknown;
            PyObject *old = PyTuple_GET_ITEM(values, slot->index);
            PyTuple_SET_ITEM(values, slot->index, v);
            Py_DECREF(old);
            if (sub.pos != start + (Py_ssize_t)size) {
                native_decode_error(sub.pos, "tagged field %lld has %zd extra bytes", tag,
                                    start + (Py_ssize_t)size - sub.pos);
                goto fail_unknown;
            }
        }
        if (unknown) {
            PyObject *frozen = PyList_AsTuple(unknown);
            Py_DECREF(unknown);
            if (!frozen) goto fail;
            PyObject *old = PyTuple_GET_ITEM(values, width);
            PyTuple_SET_ITEM(values, width, frozen);
            Py_DECREF(old);
        }
        return values;
    fail_unknown:
        Py_XDECREF(unknown);
        goto fail;
    }
    return values;
fail:
    Py_DECREF(values);
    return NULL;
}

PyObject *native_read_layout(Layout *layout, const unsigned char *data, Py_ssize_t pos,
                             Py_ssize_t end, Py_ssize_t *out_pos) {
    Reader r = { data, pos, end };
    PyObject *values = read_layout(layout, &r);
    if (values) *out_pos = r.pos;
    return values;
}

/* read_struct(capsule, data, pos, end) -> (values, new_pos) */
PyObject *native_read_struct(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "read_struct takes 4 arguments"); return NULL; }
    Layout *layout = native_layout(args[0]);
    if (!layout) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]);
    Py_ssize_t end = PyLong_AsSsize_t(args[3]);
    PyObject *result = NULL;
    if (!PyErr_Occurred()) {
        if (pos < 0 || end > view.len || pos > end) {
            PyErr_SetString(PyExc_ValueError, "read_struct: bad bounds");
        } else {
            Py_ssize_t out_pos;
            PyObject *values = native_read_layout(layout, view.buf, pos, end, &out_pos);
            if (values) result = Py_BuildValue("(Nn)", values, out_pos);
        }
    }
    PyBuffer_Release(&view);
    return result;
}
