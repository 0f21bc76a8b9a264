/* Native twin of sharestate/analytics/lag_history.py `walk_groups`: the lag-history walk of
 * one share group after another, fed history rows as column buffers (lag_walk.py).
 *
 * lag_walk_new(lines, horizon) -> capsule: `lines` the end-offset timelines (see
 *     `LINE_ARRAYS`), `horizon` None or the time before which each group's walk is saved.
 * lag_walk_begin(walk, saved): a group starts, from nothing (None) or a saved walk
 *     (time, members), each member as `lag_walk_end` gives it.
 * lag_walk_feed(walk, topic, partition, state_partition, record_offset, time, deleted,
 *     start_offset, start_valid, complete, complete_valid, state_end, state_end_valid):
 *     the group's next rows (int32 topic codes, uint8 flags, int64 the rest).
 * lag_walk_end(walk) -> None or (time, members): the group's walk before the horizon (or at
 *     its last moment); members (topic, partition, state, last state partition, last
 *     record offset, lag, at sample), state None or (SPSO, complete, state end), lag None or
 *     (end offset, estimate end, estimate time, estimate source, exact, lower bound, source,
 *     lag).
 * lag_walk_take(walk) -> (rows, columns): the rows made since the last take (`OUT_*`).
 *
 * Source codes: 0 is the state's own bound, 1 a file's row (`lag_walk.SOURCE_CODES`).
 */
#include "native.h"

enum { SRC_STATE = 0, SRC_FILE = 1 };
enum { SHARE_PARTITION_ROW = 0, GROUP_ROW = 1 };

/* `lines`: a tuple of these int64 arrays (numpy or bytes), flat over every timeline. */
enum {
    LINE_TOPIC, LINE_PARTITION,                           /* per line */
    LINE_EXACT_AT, LINE_EXACT_TIME, LINE_EXACT_END, LINE_EXACT_SRC,
    LINE_STAMPED_AT, LINE_STAMPED_TIME, LINE_STAMPED_END, LINE_STAMPED_SRC,
    LINE_FILE_AT, LINE_FILE_TIME, LINE_FILE_MAX, LINE_FILE_MAX_TIME,
    LINE_SAMPLE_AT, LINE_SAMPLE_TIME,
    LINE_ARRAYS
};

typedef struct {
    int64_t end, time;
    int8_t src;
    uint8_t has_end, has_time, exact, lower;
} Estimate;

typedef struct {
    Estimate est;
    int64_t end, lag;
    int8_t src;
    uint8_t has_end, has_lag;
} StateLag;

typedef struct {
    int64_t key, partition, spso, complete, state_end, last_sp, last_off;
    int32_t topic, line;
    uint8_t has_state, spso_ok, complete_ok, end_ok, has_lag, at_sample, dirty;
    StateLag lag;
} Member;

typedef struct { int64_t time; int32_t member; } Sample;

/* A growable array of `size`-byte items. */
typedef struct { char *data; Py_ssize_t n, cap, size; } Vec;

static void *vec_push(Vec *v) {
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 256;
        char *grown = PyMem_Realloc(v->data, (size_t)(cap * v->size));
        if (!grown) { PyErr_NoMemory(); return NULL; }
        v->data = grown;
        v->cap = cap;
    }
    return v->data + v->size * v->n++;
}

/* Output columns, in `lag_walk_take`'s order. */
enum {
    OUT_KIND, OUT_GROUP, OUT_TIME, OUT_TOPIC, OUT_PARTITION, OUT_STATE_PARTITION,
    OUT_RECORD_OFFSET, OUT_START, OUT_START_OK, OUT_COMPLETE, OUT_COMPLETE_OK, OUT_END,
    OUT_END_OK, OUT_END_TIME, OUT_END_TIME_OK, OUT_SOURCE, OUT_EXACT, OUT_LOWER, OUT_LAG,
    OUT_LAG_OK, OUT_PARTITIONS, OUT_COLUMNS
};
static const Py_ssize_t OUT_SIZES[OUT_COLUMNS] = {1, 4, 8, 4, 8, 8, 8, 8, 1, 8, 1, 8, 1, 8, 1,
                                                  1, 1, 1, 8, 1, 4};

/* An open-addressing map of int64 keys to indexes (-1: empty slot). */
typedef struct { int64_t *keys; int32_t *values; Py_ssize_t cap, n; } Map;

static uint64_t mix(int64_t key) {
    uint64_t x = (uint64_t)key * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

static int32_t map_get(const Map *m, int64_t key) {
    if (!m->cap) return -1;
    for (Py_ssize_t i = (Py_ssize_t)(mix(key) & (uint64_t)(m->cap - 1));;
         i = (i + 1) & (m->cap - 1)) {
        if (m->values[i] < 0) return -1;
        if (m->keys[i] == key) return m->values[i];
    }
}

static int map_put(Map *m, int64_t key, int32_t value) {
    if (2 * (m->n + 1) > m->cap) {
        Py_ssize_t cap = m->cap ? m->cap * 2 : 64;
        int64_t *keys = PyMem_Malloc(sizeof(int64_t) * (size_t)cap);
        int32_t *values = PyMem_Malloc(sizeof(int32_t) * (size_t)cap);
        if (!keys || !values) { PyMem_Free(keys); PyMem_Free(values); PyErr_NoMemory(); return -1; }
        for (Py_ssize_t i = 0; i < cap; i++) values[i] = -1;
        Map grown = {keys, values, cap, 0};
        for (Py_ssize_t i = 0; i < m->cap; i++)
            if (m->values[i] >= 0) map_put(&grown, m->keys[i], m->values[i]);
        PyMem_Free(m->keys);
        PyMem_Free(m->values);
        *m = grown;
    }
    Py_ssize_t i = (Py_ssize_t)(mix(key) & (uint64_t)(m->cap - 1));
    while (m->values[i] >= 0) i = (i + 1) & (m->cap - 1);
    m->keys[i] = key;
    m->values[i] = value;
    m->n++;
    return 0;
}

static void map_clear(Map *m) {
    for (Py_ssize_t i = 0; i < m->cap; i++) m->values[i] = -1;
    m->n = 0;
}

typedef struct {
    int64_t *arrays[LINE_ARRAYS];
    Map lines;                      /* (topic, partition) -> line */
    int64_t horizon;
    int has_horizon;
    Vec members, heap, at_sample, dirty;  /* Member, Sample, int32, int32 */
    Map where;                      /* (topic, partition) -> member */
    __int128 lag;                   /* the members' lags summed: past int64 when damaged
                                       states lag near 2^63 each (the row's lag unknown) */
    int64_t counted, inexact, lower;  /* over the members with a lag */
    int64_t t;
    int has_t, open, snapped;
    int32_t group;
    PyObject *snapshot;             /* the walk saved at the horizon (None: before any moment) */
    Vec out[OUT_COLUMNS];
} Walk;

static int64_t where_key(int32_t topic, int64_t partition) {
    return ((int64_t)topic << 32) ^ (int64_t)(uint32_t)partition;
}

/* (index of the last point at or before t, or -1; whether its value holds at t). */
/* The first index of times[lo:hi] after t (Python's bisect_right). */
static Py_ssize_t bisect_right(const int64_t *times, Py_ssize_t lo, Py_ssize_t hi,
                               int64_t t) {
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (t < times[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

static Py_ssize_t bracket(const int64_t *times, const int64_t *ends, Py_ssize_t lo,
                          Py_ssize_t hi, int64_t t, int *holds) {
    Py_ssize_t i = bisect_right(times, lo, hi, t) - 1;
    if (i < lo) return -1;
    *holds = times[i] == t || (i + 1 < hi && ends[i + 1] == ends[i]);
    return i;
}

static const Estimate UNKNOWN = {0, 0, SRC_STATE, 0, 0, 0, 1};

/* `Timeline.at(t)` of line `k`. */
static Estimate line_at(const Walk *w, int32_t k, int64_t t) {
    int64_t *const *a = w->arrays;
    if (k < 0) return UNKNOWN;
    int holds = 0;
    Py_ssize_t i = bracket(a[LINE_EXACT_TIME], a[LINE_EXACT_END], a[LINE_EXACT_AT][k],
                           a[LINE_EXACT_AT][k + 1], t, &holds);
    if (i >= 0 && holds)
        return (Estimate){a[LINE_EXACT_END][i], a[LINE_EXACT_TIME][i],
                          (int8_t)a[LINE_EXACT_SRC][i], 1, 1, 1, 0};
    int stamped_holds = 0;
    Py_ssize_t s = bracket(a[LINE_STAMPED_TIME], a[LINE_STAMPED_END], a[LINE_STAMPED_AT][k],
                           a[LINE_STAMPED_AT][k + 1], t, &stamped_holds);
    if (s >= 0 && stamped_holds)
        return (Estimate){a[LINE_STAMPED_END][s], a[LINE_STAMPED_TIME][s],
                          (int8_t)a[LINE_STAMPED_SRC][s], 1, 1, 0, 0};
    Estimate best = UNKNOWN;
    if (i >= 0)
        best = (Estimate){a[LINE_EXACT_END][i], a[LINE_EXACT_TIME][i],
                          (int8_t)a[LINE_EXACT_SRC][i], 1, 1, 0, 1};
    Py_ssize_t lo = a[LINE_FILE_AT][k];
    Py_ssize_t j = bisect_right(a[LINE_FILE_TIME], lo, a[LINE_FILE_AT][k + 1], t) - 1;
    if (j >= lo && (!best.has_end || a[LINE_FILE_MAX][j] > best.end))
        best = (Estimate){a[LINE_FILE_MAX][j], a[LINE_FILE_MAX_TIME][j], SRC_FILE, 1, 1, 0, 1};
    return best;
}

/* `state_lag`: the lag of a state against an estimate. */
static StateLag state_lag(int spso_ok, int64_t spso, int complete_ok, int64_t complete,
                          int end_ok, int64_t state_end, Estimate est) {
    StateLag out = {est, est.end, 0, est.src, est.has_end, 0};
    if (end_ok && (!out.has_end || state_end > out.end)) {
        out.end = state_end;
        out.has_end = 1;
        if (est.lower) out.src = SRC_STATE;
    }
    if (spso_ok && spso >= 0 && out.has_end) {
        out.lag = out.end - spso - (complete_ok ? complete : 0);
        out.has_lag = 1;
    }
    return out;
}

static void totals_add(Walk *w, const Member *m, int sign) {
    if (!m->has_lag) return;
    w->lag += (__int128)sign * m->lag.lag;
    w->counted += sign;
    w->inexact += sign * !m->lag.est.exact;
    w->lower += sign * m->lag.est.lower;
}

static int heap_push(Walk *w, int64_t time, int32_t member) {
    Sample *h = vec_push(&w->heap);
    if (!h) return -1;
    Sample *base = (Sample *)w->heap.data;
    Py_ssize_t i = w->heap.n - 1;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (base[up].time <= time) break;
        base[i] = base[up];
        i = up;
    }
    base[i] = (Sample){time, member};
    return 0;
}

static Sample heap_pop(Walk *w) {
    Sample *base = (Sample *)w->heap.data;
    Sample top = base[0], last = base[--w->heap.n];
    Py_ssize_t n = w->heap.n, i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && base[c + 1].time < base[c].time) c++;
        if (base[c].time >= last.time) break;
        base[i] = base[c];
        i = c;
    }
    if (n) base[i] = last;
    return top;
}

static Member *member_at(Walk *w, int32_t i) { return (Member *)w->members.data + i; }

/* The member index of (topic, partition), added (and its samples after `after` queued)
 * when new; -1 with an error set. */
static int32_t member_of(Walk *w, int32_t topic, int64_t partition, int64_t after) {
    int64_t key = where_key(topic, partition);
    int32_t i = map_get(&w->where, key);
    if (i >= 0) return i;
    i = (int32_t)w->members.n;
    Member *m = vec_push(&w->members);
    if (!m || map_put(&w->where, key, i) < 0) return -1;
    memset(m, 0, sizeof *m);
    m->key = key;
    m->topic = topic;
    m->partition = partition;
    m->last_sp = m->last_off = -1;
    m->line = map_get(&w->lines, key);
    if (m->line >= 0) {
        int64_t *const *a = w->arrays;
        for (int64_t s = a[LINE_SAMPLE_AT][m->line]; s < a[LINE_SAMPLE_AT][m->line + 1]; s++)
            if (a[LINE_SAMPLE_TIME][s] > after && heap_push(w, a[LINE_SAMPLE_TIME][s], i) < 0)
                return -1;
    }
    return i;
}

static int mark(Vec *list, Member *m, int32_t i) {
    if (m->dirty) return 0;
    int32_t *slot = vec_push(list);
    if (!slot) return -1;
    *slot = i;
    m->dirty = 1;
    return 0;
}

#define OUT(w, col, type) ((type *)vec_push(&(w)->out[col]))

/* One output row; every column pushed (a failed push leaves the columns uneven: the walk
 * is then unusable, which the error raised says). */
static int emit(Walk *w, uint8_t kind, int32_t topic, int64_t partition, int64_t sp,
                int64_t offset, int start_ok, int64_t start, int complete_ok, int64_t complete,
                int end_ok, int64_t end, int end_time_ok, int64_t end_time, int8_t src,
                uint8_t exact, uint8_t lower, int lag_ok, int64_t lag, int32_t partitions) {
    uint8_t *k = OUT(w, OUT_KIND, uint8_t);
    int32_t *g = OUT(w, OUT_GROUP, int32_t);
    int64_t *t = OUT(w, OUT_TIME, int64_t);
    int32_t *tp = OUT(w, OUT_TOPIC, int32_t);
    int64_t *p = OUT(w, OUT_PARTITION, int64_t), *s = OUT(w, OUT_STATE_PARTITION, int64_t);
    int64_t *o = OUT(w, OUT_RECORD_OFFSET, int64_t), *st = OUT(w, OUT_START, int64_t);
    uint8_t *sto = OUT(w, OUT_START_OK, uint8_t);
    int64_t *c = OUT(w, OUT_COMPLETE, int64_t);
    uint8_t *co = OUT(w, OUT_COMPLETE_OK, uint8_t);
    int64_t *e = OUT(w, OUT_END, int64_t);
    uint8_t *eo = OUT(w, OUT_END_OK, uint8_t);
    int64_t *et = OUT(w, OUT_END_TIME, int64_t);
    uint8_t *eto = OUT(w, OUT_END_TIME_OK, uint8_t);
    int8_t *sr = OUT(w, OUT_SOURCE, int8_t);
    uint8_t *ex = OUT(w, OUT_EXACT, uint8_t), *lo = OUT(w, OUT_LOWER, uint8_t);
    int64_t *l = OUT(w, OUT_LAG, int64_t);
    uint8_t *lok = OUT(w, OUT_LAG_OK, uint8_t);
    int32_t *n = OUT(w, OUT_PARTITIONS, int32_t);
    if (!k || !g || !t || !tp || !p || !s || !o || !st || !sto || !c || !co || !e || !eo
        || !et || !eto || !sr || !ex || !lo || !l || !lok || !n) return -1;
    *k = kind; *g = w->group; *t = w->t; *tp = topic; *p = partition; *s = sp; *o = offset;
    *st = start_ok ? start : 0; *sto = (uint8_t)start_ok;
    *c = complete_ok ? complete : 0; *co = (uint8_t)complete_ok;
    *e = end_ok ? end : 0; *eo = (uint8_t)end_ok;
    *et = end_time_ok ? end_time : 0; *eto = (uint8_t)end_time_ok;
    *sr = src; *ex = exact; *lo = lower; *l = lag_ok ? lag : 0; *lok = (uint8_t)lag_ok;
    *n = partitions;
    return 0;
}

/* A saved walk: (time, members) or None before any moment. */
static PyObject *saved_state(Walk *w) {
    if (!w->has_t) Py_RETURN_NONE;
    PyObject *members = PyList_New(w->members.n);
    if (!members) return NULL;
    for (Py_ssize_t i = 0; i < w->members.n; i++) {
        Member *m = member_at(w, (int32_t)i);
        PyObject *state = Py_None, *lag = Py_None, *item;
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        if (m->has_state) {
            Py_DECREF(state);
            state = Py_BuildValue("(NNN)",
                                  m->spso_ok ? PyLong_FromLongLong(m->spso) : Py_NewRef(Py_None),
                                  m->complete_ok ? PyLong_FromLongLong(m->complete)
                                                 : Py_NewRef(Py_None),
                                  m->end_ok ? PyLong_FromLongLong(m->state_end)
                                            : Py_NewRef(Py_None));
        }
        if (state && m->has_lag) {
            const StateLag *g = &m->lag;
            Py_DECREF(lag);
            lag = Py_BuildValue("(NNNiiiiL)",
                                g->has_end ? PyLong_FromLongLong(g->end) : Py_NewRef(Py_None),
                                g->est.has_end ? PyLong_FromLongLong(g->est.end)
                                               : Py_NewRef(Py_None),
                                g->est.has_time ? PyLong_FromLongLong(g->est.time)
                                                : Py_NewRef(Py_None),
                                (int)g->est.src, (int)g->est.exact, (int)g->est.lower,
                                (int)g->src, (long long)g->lag);
        }
        if (!state || !lag) {
            Py_XDECREF(state);
            Py_XDECREF(lag);
            Py_DECREF(members);
            return NULL;
        }
        item = Py_BuildValue("(iLNLLNO)", (int)m->topic, (long long)m->partition, state,
                             (long long)m->last_sp, (long long)m->last_off, lag,
                             m->at_sample ? Py_True : Py_False);
        if (!item) {
            Py_DECREF(members);
            return NULL;
        }
        PyList_SET_ITEM(members, i, item);
    }
    return Py_BuildValue("(LN)", (long long)w->t, members);
}

/* A moment at `now` opens: the walk saved first when it reaches the horizon. */
static int open_moment(Walk *w, int64_t now) {
    if (w->has_horizon && now >= w->horizon && !w->snapped) {
        w->snapshot = saved_state(w);
        if (!w->snapshot) return -1;
        w->snapped = 1;
    }
    w->t = now;
    w->has_t = w->open = 1;
    int32_t *pending = (int32_t *)w->at_sample.data;
    for (Py_ssize_t i = 0; i < w->at_sample.n; i++) {
        Member *m = member_at(w, pending[i]);
        m->at_sample = 0;
        if (mark(&w->dirty, m, pending[i]) < 0) return -1;
    }
    w->at_sample.n = 0;
    while (w->heap.n && ((Sample *)w->heap.data)[0].time == now) {
        Sample s = heap_pop(w);
        if (mark(&w->dirty, member_at(w, s.member), s.member) < 0) return -1;
    }
    return 0;
}

/* The open moment closes: its changed members evaluated again, the group's row. */
static int close_moment(Walk *w) {
    int32_t *dirty = (int32_t *)w->dirty.data;
    for (Py_ssize_t i = 0; i < w->dirty.n; i++) {
        Member *m = member_at(w, dirty[i]);
        m->dirty = 0;
        totals_add(w, m, -1);
        m->has_lag = 0;
        if (m->has_state) {
            StateLag lag = state_lag(m->spso_ok, m->spso, m->complete_ok, m->complete,
                                     m->end_ok, m->state_end, line_at(w, m->line, w->t));
            if (lag.has_lag) {
                m->lag = lag;
                m->has_lag = 1;
            }
        }
        totals_add(w, m, 1);
        if (m->has_lag && m->lag.est.has_time && m->lag.est.time == w->t && !m->at_sample) {
            int32_t *slot = vec_push(&w->at_sample);
            if (!slot) return -1;
            *slot = dirty[i];
            m->at_sample = 1;
        }
    }
    w->dirty.n = 0;
    w->open = 0;
    int some = w->counted > 0;
    int fits = some && w->lag >= INT64_MIN && w->lag <= INT64_MAX;
    return emit(w, GROUP_ROW, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1,
                (uint8_t)(some && !w->inexact), (uint8_t)(!some || w->lower > 0), fits,
                fits ? (int64_t)w->lag : 0, (int32_t)w->counted);
}

/* Moments of the samples before `before` (all of them: `until_end`). */
static int sample_moments(Walk *w, int64_t before, int until_end) {
    while (w->heap.n && (until_end || ((Sample *)w->heap.data)[0].time < before)) {
        if (open_moment(w, ((Sample *)w->heap.data)[0].time) < 0 || close_moment(w) < 0)
            return -1;
    }
    return 0;
}

static void walk_free(PyObject *capsule) {
    Walk *w = PyCapsule_GetPointer(capsule, "sharestate.lag_walk");
    if (!w) return;
    for (int i = 0; i < LINE_ARRAYS; i++) PyMem_Free(w->arrays[i]);
    PyMem_Free(w->lines.keys);
    PyMem_Free(w->lines.values);
    PyMem_Free(w->where.keys);
    PyMem_Free(w->where.values);
    PyMem_Free(w->members.data);
    PyMem_Free(w->heap.data);
    PyMem_Free(w->at_sample.data);
    PyMem_Free(w->dirty.data);
    for (int i = 0; i < OUT_COLUMNS; i++) PyMem_Free(w->out[i].data);
    Py_XDECREF(w->snapshot);
    PyMem_Free(w);
}

static Walk *walk_of(PyObject *capsule) {
    return PyCapsule_GetPointer(capsule, "sharestate.lag_walk");
}

PyObject *native_lag_walk_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != LINE_ARRAYS) {
        PyErr_Format(PyExc_TypeError, "lag_walk_new(lines, horizon): lines is a tuple of %d "
                     "int64 arrays", LINE_ARRAYS);
        return NULL;
    }
    Walk *w = PyMem_Calloc(1, sizeof *w);
    if (!w) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(w, "sharestate.lag_walk", walk_free);
    if (!capsule) { PyMem_Free(w); return NULL; }
    for (int i = 0; i < OUT_COLUMNS; i++) w->out[i].size = OUT_SIZES[i];
    w->members.size = sizeof(Member);
    w->heap.size = sizeof(Sample);
    w->at_sample.size = w->dirty.size = sizeof(int32_t);
    Py_ssize_t lines = -1;
    for (int i = 0; i < LINE_ARRAYS; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[0], i), &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(capsule);
            return NULL;
        }
        w->arrays[i] = PyMem_Malloc(view.len ? (size_t)view.len : 1);
        if (w->arrays[i]) memcpy(w->arrays[i], view.buf, (size_t)view.len);
        Py_ssize_t n = view.len / 8;
        PyBuffer_Release(&view);
        if (!w->arrays[i]) { Py_DECREF(capsule); return PyErr_NoMemory(); }
        if (i == LINE_TOPIC) lines = n;
    }
    for (Py_ssize_t k = 0; k < lines; k++)
        if (map_put(&w->lines, where_key((int32_t)w->arrays[LINE_TOPIC][k],
                                         w->arrays[LINE_PARTITION][k]), (int32_t)k) < 0) {
            Py_DECREF(capsule);
            return NULL;
        }
    if (args[1] != Py_None) {
        w->horizon = PyLong_AsLongLong(args[1]);
        if (w->horizon == -1 && PyErr_Occurred()) { Py_DECREF(capsule); return NULL; }
        w->has_horizon = 1;
    }
    w->group = -1;
    return capsule;
}

/* An int or None as (ok, value); -1 with an error set. */
static int opt_int(PyObject *v, int64_t *out, uint8_t *ok) {
    *ok = v != Py_None;
    *out = 0;
    if (v == Py_None) return 0;
    *out = PyLong_AsLongLong(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int restore(Walk *w, PyObject *saved) {
    long long t;
    PyObject *members;
    if (!PyArg_ParseTuple(saved, "LO!", &t, &PyList_Type, &members)) return -1;
    w->t = t;
    w->has_t = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(members); i++) {
        int topic, at_sample;
        long long partition, last_sp, last_off;
        PyObject *state, *lag;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(members, i), "iLOLLOp", &topic, &partition,
                              &state, &last_sp, &last_off, &lag, &at_sample)) return -1;
        int32_t index = member_of(w, topic, partition, t);
        if (index < 0) return -1;
        Member *m = member_at(w, index);
        m->last_sp = last_sp;
        m->last_off = last_off;
        if (state != Py_None) {
            PyObject *a, *b, *c;
            if (!PyArg_ParseTuple(state, "OOO", &a, &b, &c) || opt_int(a, &m->spso, &m->spso_ok) < 0
                || opt_int(b, &m->complete, &m->complete_ok) < 0
                || opt_int(c, &m->state_end, &m->end_ok) < 0) return -1;
            m->has_state = 1;
        }
        if (lag != Py_None) {
            PyObject *end, *est_end, *est_time;
            int est_src, exact, lower, src;
            long long value;
            StateLag *g = &m->lag;
            if (!PyArg_ParseTuple(lag, "OOOippiL", &end, &est_end, &est_time, &est_src, &exact,
                                  &lower, &src, &value)
                || opt_int(end, &g->end, &g->has_end) < 0
                || opt_int(est_end, &g->est.end, &g->est.has_end) < 0
                || opt_int(est_time, &g->est.time, &g->est.has_time) < 0) return -1;
            g->est.src = (int8_t)est_src;
            g->est.exact = (uint8_t)exact;
            g->est.lower = (uint8_t)lower;
            g->src = (int8_t)src;
            g->lag = value;
            g->has_lag = 1;
            m->has_lag = 1;
            totals_add(w, m, 1);
        }
        if (at_sample) {
            int32_t *slot = vec_push(&w->at_sample);
            if (!slot) return -1;
            *slot = index;
            m->at_sample = 1;
        }
    }
    return 0;
}

PyObject *native_lag_walk_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Walk *w = nargs == 2 ? walk_of(args[0]) : NULL;
    if (!w) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "lag_walk_begin(walk, saved)");
        return NULL;
    }
    w->members.n = w->heap.n = w->at_sample.n = w->dirty.n = 0;
    map_clear(&w->where);
    w->lag = w->counted = w->inexact = w->lower = 0;
    w->t = 0;
    w->has_t = w->open = w->snapped = 0;
    Py_CLEAR(w->snapshot);
    w->group++;
    if (args[1] != Py_None && restore(w, args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

enum {
    IN_TOPIC, IN_PARTITION, IN_STATE_PARTITION, IN_RECORD_OFFSET, IN_TIME, IN_DELETED,
    IN_START, IN_START_OK, IN_COMPLETE, IN_COMPLETE_OK, IN_END, IN_END_OK, IN_COLUMNS
};
static const Py_ssize_t IN_SIZES[IN_COLUMNS] = {4, 8, 8, 8, 8, 1, 8, 1, 8, 1, 8, 1};

static int feed_rows(Walk *w, void *const *col, Py_ssize_t n) {
    const int32_t *topic = col[IN_TOPIC];
    const int64_t *partition = col[IN_PARTITION], *sp = col[IN_STATE_PARTITION];
    const int64_t *offset = col[IN_RECORD_OFFSET], *time = col[IN_TIME];
    const int64_t *start = col[IN_START], *complete = col[IN_COMPLETE], *end = col[IN_END];
    const uint8_t *deleted = col[IN_DELETED], *start_ok = col[IN_START_OK];
    const uint8_t *complete_ok = col[IN_COMPLETE_OK], *end_ok = col[IN_END_OK];
    for (Py_ssize_t r = 0; r < n; r++) {
        if (!w->open || time[r] != w->t) {
            if (w->open && close_moment(w) < 0) return -1;
            if (sample_moments(w, time[r], 0) < 0 || open_moment(w, time[r]) < 0) return -1;
        }
        int32_t index = member_of(w, topic[r], partition[r], w->t);
        if (index < 0) return -1;
        Member *m = member_at(w, index);
        if (sp[r] > m->last_sp || (sp[r] == m->last_sp && offset[r] >= m->last_off)) {
            m->last_sp = sp[r];
            m->last_off = offset[r];
            m->has_state = !deleted[r];
            m->spso = start[r]; m->spso_ok = start_ok[r];
            m->complete = complete[r]; m->complete_ok = complete_ok[r];
            m->state_end = end[r]; m->end_ok = end_ok[r];
        }
        if (mark(&w->dirty, m, index) < 0) return -1;
        int rc;
        if (deleted[r]) {
            rc = emit(w, SHARE_PARTITION_ROW, topic[r], partition[r], sp[r], offset[r], 0, 0, 0,
                      0, 0, 0, 0, 0, -1, 0, 1, 0, 0, 1);
        } else {
            Estimate est = line_at(w, m->line, w->t);
            StateLag lag = state_lag(start_ok[r], start[r], complete_ok[r], complete[r],
                                     end_ok[r], end[r], est);
            rc = emit(w, SHARE_PARTITION_ROW, topic[r], partition[r], sp[r], offset[r],
                      start_ok[r], start[r], complete_ok[r], complete[r], lag.has_end, lag.end,
                      lag.src != SRC_STATE && est.has_time, est.time, lag.src,
                      (uint8_t)(lag.has_lag && est.exact), est.lower, lag.has_lag, lag.lag, 1);
        }
        if (rc < 0) return -1;
    }
    return 0;
}

PyObject *native_lag_walk_feed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Walk *w = nargs == 1 + IN_COLUMNS ? walk_of(args[0]) : NULL;
    if (!w) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "lag_walk_feed takes the walk and %d columns",
                         IN_COLUMNS);
        return NULL;
    }
    Py_buffer views[IN_COLUMNS];
    void *cols[IN_COLUMNS];
    int got = 0, rc = -1;
    Py_ssize_t n = -1;
    for (; got < IN_COLUMNS; got++) {
        if (PyObject_GetBuffer(args[1 + got], &views[got], PyBUF_SIMPLE) < 0) goto done;
        Py_ssize_t rows = views[got].len / IN_SIZES[got];
        if (views[got].len % IN_SIZES[got] || (n >= 0 && rows != n)) {
            PyErr_SetString(PyExc_ValueError, "lag_walk_feed: columns of unequal lengths");
            got++;
            goto done;
        }
        n = rows;
        cols[got] = views[got].buf;
    }
    rc = feed_rows(w, cols, n);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

PyObject *native_lag_walk_end(PyObject *self, PyObject *capsule) {
    (void)self;
    Walk *w = walk_of(capsule);
    if (!w) return NULL;
    if ((w->open && close_moment(w) < 0) || sample_moments(w, 0, 1) < 0) return NULL;
    if (w->snapped) return Py_NewRef(w->snapshot);
    return saved_state(w);
}

PyObject *native_lag_walk_take(PyObject *self, PyObject *capsule) {
    (void)self;
    Walk *w = walk_of(capsule);
    if (!w) return NULL;
    Py_ssize_t n = w->out[OUT_KIND].n;
    PyObject *columns = PyTuple_New(OUT_COLUMNS);
    if (!columns) return NULL;
    for (int i = 0; i < OUT_COLUMNS; i++) {
        if (w->out[i].n != n) {
            Py_DECREF(columns);
            PyErr_SetString(PyExc_RuntimeError, "lag walk: columns left uneven by an error");
            return NULL;
        }
        PyObject *data = PyBytes_FromStringAndSize(w->out[i].data, n * w->out[i].size);
        if (!data) { Py_DECREF(columns); return NULL; }
        PyTuple_SET_ITEM(columns, i, data);
    }
    for (int i = 0; i < OUT_COLUMNS; i++) w->out[i].n = 0;
    return Py_BuildValue("(nN)", n, columns);
}
