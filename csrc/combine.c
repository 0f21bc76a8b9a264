/* Native twin of sharestate/coordinator/combiner.py `combine_py` (Kafka 4.4's sweep combiner).
 *
 * Same contract and result: prune both inputs at start_offset (-1: none), return fewer than
 * two batches as they are, else the per-offset maximum by (delivery_count, delivery_state)
 * with equal adjacent runs coalesced. When `so_far` is already sorted, disjoint and coalesced
 * (every result of combine is), new batches are spliced in; otherwise a sweep is run.
 * Unchanged batches are reused (same objects), new ones are StateBatch instances.
 */
#include "native.h"

/* Offsets are held in 128 bits: a batch may end at int64's largest value, and the sweep's
 * end events (last + 1) and the splice's neighbours (first - 1, last + 1) pass it. Every
 * result lies within the inputs' offsets, so it narrows back to int64 exactly. */
typedef __int128 Off;

typedef struct {
    Off first, last;
    long long state, count;
    PyObject *obj; /* borrowed source object when the batch is unchanged, else NULL */
} B;

typedef struct { B *v; Py_ssize_t n, cap; } Vec;

static int vec_push(Vec *vec, B b) {
    if (vec->n == vec->cap) {
        Py_ssize_t cap = vec->cap ? vec->cap * 2 : 16;
        B *grown = PyMem_Realloc(vec->v, (size_t)cap * sizeof(B));
        if (!grown) { PyErr_NoMemory(); return -1; }
        vec->v = grown;
        vec->cap = cap;
    }
    vec->v[vec->n++] = b;
    return 0;
}

static int as_ll(PyObject *o, long long *out) {
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Read a sequence of tuples starting with a StateBatch's fields, pruned at start (clipped
 * ones lose their object). */
static int load(PyObject *seq, long long start, Vec *out) {
    PyObject *fast = PySequence_Fast(seq, "batches must be a sequence");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = items[i];
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < BATCH_SIZE) {
            PyErr_SetString(PyExc_TypeError, "a state batch is a 4-tuple");
            Py_DECREF(fast);
            return -1;
        }
        B b;
        long long first, last;
        if (as_ll(PyTuple_GET_ITEM(t, BATCH_FIRST_OFFSET), &first) < 0
            || as_ll(PyTuple_GET_ITEM(t, BATCH_LAST_OFFSET), &last) < 0
            || as_ll(PyTuple_GET_ITEM(t, BATCH_DELIVERY_STATE), &b.state) < 0
            || as_ll(PyTuple_GET_ITEM(t, BATCH_DELIVERY_COUNT), &b.count) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        b.first = first;
        b.last = last;
        b.obj = PyTuple_GET_SIZE(t) == BATCH_SIZE ? t : NULL;
        if (start != -1) {
            if (b.last < start) continue;
            if (b.first < start) { b.first = start; b.obj = NULL; }
        }
        if (vec_push(out, b) < 0) { Py_DECREF(fast); return -1; }
    }
    Py_DECREF(fast);
    return 0;
}

static int higher(long long c1, long long s1, long long c2, long long s2) {
    return c1 > c2 || (c1 == c2 && s1 > s2);
}

static B mk(Off first, Off last, long long state, long long count) {
    B b = { first, last, state, count, NULL };
    return b;
}

/* Is the vector sorted, disjoint and coalesced (with every batch non-empty)? */
static int normalized(const Vec *v) {
    for (Py_ssize_t i = 0; i < v->n; i++) {
        if (v->v[i].first > v->v[i].last) return 0;
        if (i) {
            const B *p = &v->v[i - 1], *c = &v->v[i];
            if (c->first <= p->last) return 0;
            if (c->first == p->last + 1 && c->count == p->count && c->state == p->state) return 0;
        }
    }
    return 1;
}

/* Insert b into the normalized base, keeping it normalized (port of `_splice`). */
static int splice(Vec *base, B b, Vec *scratch) {
    Off f = b.first, last = b.last;
    long long s = b.state, c = b.count;
    Py_ssize_t lo = 0, hi = base->n;
    while (lo < hi) { /* first index with entry.last >= f - 1 */
        Py_ssize_t mid = (lo + hi) / 2;
        if (base->v[mid].last < f - 1) lo = mid + 1; else hi = mid;
    }
    Py_ssize_t i = lo;
    hi = base->n;
    while (lo < hi) { /* first index from i with entry.first > last + 1 */
        Py_ssize_t mid = (lo + hi) / 2;
        if (base->v[mid].first <= last + 1) lo = mid + 1; else hi = mid;
    }
    Py_ssize_t j = lo;
    scratch->n = 0;
    if (i == j) {
        if (vec_push(scratch, b) < 0) return -1;
    } else {
        Off pos = f, run = 0;
        int has_run = 0;
        for (Py_ssize_t k = i; k < j; k++) {
            B e = base->v[k];
            if (higher(e.count, e.state, c, s)) {
                if (has_run || e.first > pos) {
                    if (vec_push(scratch, mk(has_run ? run : pos, e.first - 1, s, c)) < 0) return -1;
                    has_run = 0;
                }
                if (vec_push(scratch, e) < 0) return -1;
            } else if (e.count == c && e.state == s) {
                if (!has_run) { run = e.first < pos ? e.first : pos; has_run = 1; }
            } else {
                if (e.first < f) {
                    if (e.last < f) {
                        if (vec_push(scratch, e) < 0) return -1;
                        continue;
                    }
                    if (vec_push(scratch, mk(e.first, f - 1, e.state, e.count)) < 0) return -1;
                }
                if (!has_run && pos <= last) { run = pos; has_run = 1; }
                if (e.last > last) {
                    if (has_run) {
                        if (vec_push(scratch, mk(run, last, s, c)) < 0) return -1;
                        has_run = 0;
                    }
                    if (e.first > last) {
                        if (vec_push(scratch, e) < 0) return -1;
                    } else if (vec_push(scratch, mk(last + 1, e.last, e.state, e.count)) < 0) {
                        return -1;
                    }
                }
            }
            if (e.last >= pos) pos = e.last + 1;
        }
        if (pos <= last) {
            if (!has_run) { run = pos; has_run = 1; }
            pos = last + 1;
        }
        if (has_run && vec_push(scratch, mk(run, pos - 1, s, c)) < 0) return -1;
    }
    /* base[i:j] = scratch */
    Py_ssize_t delta = scratch->n - (j - i);
    if (delta > 0) {
        for (Py_ssize_t k = 0; k < delta; k++) if (vec_push(base, mk(0, 0, 0, 0)) < 0) return -1;
        memmove(base->v + j + delta, base->v + j, (size_t)(base->n - delta - j) * sizeof(B));
    } else if (delta < 0) {
        memmove(base->v + j + delta, base->v + j, (size_t)(base->n - j) * sizeof(B));
        base->n += delta;
    }
    memcpy(base->v + i, scratch->v, (size_t)scratch->n * sizeof(B));
    return 0;
}

typedef struct { Off off; int begin; long long count, state; } Event;

static int event_cmp(const void *a, const void *b) {
    const Event *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->count != y->count) return x->count < y->count ? -1 : 1;
    if (x->state != y->state) return x->state < y->state ? -1 : 1;
    return 0;
}

typedef struct { long long count, state; Py_ssize_t refs; } Active;

/* Per-offset maximum of arbitrary batches (port of `_sweep`). */
static int sweep(const Vec *in, Vec *out) {
    Event *events = PyMem_Malloc((size_t)(in->n * 2 + 1) * sizeof(Event));
    Active *active = PyMem_Malloc((size_t)(in->n + 1) * sizeof(Active));
    if (!events || !active) { PyMem_Free(events); PyMem_Free(active); PyErr_NoMemory(); return -1; }
    Py_ssize_t ne = 0, na = 0;
    for (Py_ssize_t i = 0; i < in->n; i++) {
        const B *b = &in->v[i];
        if (b->first <= b->last) {
            Event e1 = { b->first, 1, b->count, b->state };
            Event e2 = { b->last + 1, 0, b->count, b->state };
            events[ne++] = e1;
            events[ne++] = e2;
        }
    }
    qsort(events, (size_t)ne, sizeof(Event), event_cmp);
    Off run_first = 0, run_last = 0, cur = 0;
    long long rc = 0, rs = 0;
    int has_run = 0;
    for (Py_ssize_t k = 0; k < ne; k++) {
        Event *e = &events[k];
        if (e->off != cur) {
            if (na) {
                Py_ssize_t w = 0;
                for (Py_ssize_t a = 1; a < na; a++) {
                    if (higher(active[a].count, active[a].state, active[w].count, active[w].state)) w = a;
                }
                if (has_run && active[w].count == rc && active[w].state == rs && run_last == cur - 1) {
                    run_last = e->off - 1;
                } else {
                    if (has_run && vec_push(out, mk(run_first, run_last, rs, rc)) < 0) goto fail;
                    rc = active[w].count; rs = active[w].state;
                    run_first = cur; run_last = e->off - 1;
                    has_run = 1;
                }
            }
            cur = e->off;
        }
        Py_ssize_t a = 0;
        while (a < na && !(active[a].count == e->count && active[a].state == e->state)) a++;
        if (e->begin) {
            if (a == na) { active[na].count = e->count; active[na].state = e->state; active[na].refs = 0; na++; }
            active[a].refs++;
        } else if (--active[a].refs == 0) {
            active[a] = active[--na];
        }
    }
    if (has_run && vec_push(out, mk(run_first, run_last, rs, rc)) < 0) goto fail;
    PyMem_Free(events);
    PyMem_Free(active);
    return 0;
fail:
    PyMem_Free(events);
    PyMem_Free(active);
    return -1;
}

static PyObject *state_batch_type = NULL, *normalized_type = NULL;

static int load_types(void) {
    if (state_batch_type) return 0;
    PyObject *state = PyImport_ImportModule("sharestate.coordinator.share_state");
    if (!state) return -1;
    state_batch_type = PyObject_GetAttrString(state, "StateBatch");
    Py_DECREF(state);
    PyObject *combiner = PyImport_ImportModule("sharestate.coordinator.combiner");
    if (!combiner) return -1;
    normalized_type = PyObject_GetAttrString(combiner, "_Normalized");
    Py_DECREF(combiner);
    return (state_batch_type && normalized_type) ? 0 : -1;
}

static PyObject *batch_object(const B *b) {
    if (b->obj && Py_IS_TYPE(b->obj, (PyTypeObject *)state_batch_type)) return Py_NewRef(b->obj);
    PyObject *t = ((PyTypeObject *)state_batch_type)->tp_alloc((PyTypeObject *)state_batch_type,
                                                               BATCH_SIZE);
    if (!t) return NULL;
    long long v[BATCH_SIZE] = { [BATCH_FIRST_OFFSET] = (long long)b->first,
                                [BATCH_LAST_OFFSET] = (long long)b->last,
                                [BATCH_DELIVERY_STATE] = b->state,
                                [BATCH_DELIVERY_COUNT] = b->count };
    for (int i = 0; i < BATCH_SIZE; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* A tuple of `type` (or a plain tuple when type is NULL) holding the batches. */
static PyObject *pack(const Vec *v, PyObject *type) {
    PyObject *t = type ? ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, v->n)
                       : PyTuple_New(v->n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < v->n; i++) {
        PyObject *b = batch_object(&v->v[i]);
        if (!b) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, b);
    }
    return t;
}

PyObject *native_combine_batches(PyObject *so_far, PyObject *new_batches, long long start) {
    if (load_types() < 0) return NULL;
    Vec base = { 0 }, adds = { 0 }, scratch = { 0 }, out = { 0 };
    PyObject *result = NULL;
    if (load(so_far, start, &base) < 0 || load(new_batches, start, &adds) < 0) goto done;
    if (base.n + adds.n < 2) {
        /* Kafka's special case: returned as they are */
        for (Py_ssize_t i = 0; i < adds.n; i++) if (vec_push(&base, adds.v[i]) < 0) goto done;
        int valid = base.n == 0 || base.v[0].first <= base.v[0].last;
        result = pack(&base, valid ? normalized_type : NULL);
        goto done;
    }
    if (normalized(&base)) {
        for (Py_ssize_t i = 0; i < adds.n; i++) {
            if (adds.v[i].first <= adds.v[i].last && splice(&base, adds.v[i], &scratch) < 0) goto done;
        }
        result = pack(&base, normalized_type);
    } else {
        for (Py_ssize_t i = 0; i < adds.n; i++) if (vec_push(&base, adds.v[i]) < 0) goto done;
        if (sweep(&base, &out) < 0) goto done;
        result = pack(&out, normalized_type);
    }
done:
    PyMem_Free(base.v);
    PyMem_Free(adds.v);
    PyMem_Free(scratch.v);
    PyMem_Free(out.v);
    return result;
}

/* combine(so_far, new, start_offset) */
PyObject *native_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "combine takes 3 arguments");
        return NULL;
    }
    long long start = PyLong_AsLongLong(args[2]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    return native_combine_batches(args[0], args[1], start);
}
