/* Native fast path of sharestate/replay/share_log.py: apply a batch of decoded share-state
 * records to a ShareShard, as the shard's `_snapshot` / `_update` would (the Python twin is
 * `_Applier.apply_all`).
 *
 * share_apply(context, records, decoded, as_of_offset, as_of_time, slots, fallback, history)
 *     -> (applied, stopped, last_offset, last_timestamp)
 *   context  : ShareShard.native_context(), a NativeContext (CTX_* in native.h)
 *   slots    : the slot table, {id(kind): {version: ValueSlots}} (VALUE_SLOT_* in native.h)
 *   fallback : callable(record, decoded) applying one record in Python
 *   history  : None, or a list that gets, per record applied in C, the tuple
 *              (offset, timestamp, key, state, max_leader_epoch, max_state_epoch,
 *               snapshot_update_count, last_snapshot_offset) — the fallback appends the
 *              same for the records it applies, so the list stays in log order — or a
 *              Columns (columns.c) the same tuples are appended to as rows
 * Records that did not decode are skipped, as the Python twin skips them. Records the C
 * path does not take exactly as the shard would (tombstones, control records, unknown
 * layouts, invalid state batches) go to `fallback`, one by one, in order.
 */
#include "native.h"

PyObject *native_combine_batches(PyObject *so_far, PyObject *new_batches, long long start);

static PyObject *key_value_type = NULL, *state_batch_type = NULL, *one = NULL, *minus_one = NULL;

static int load_types(void) {
    if (key_value_type) return 0;
    if (!one && !(one = PyLong_FromLong(1))) return -1;
    if (!minus_one && !(minus_one = PyLong_FromLong(-1))) return -1;
    PyObject *kv = PyImport_ImportModule("sharestate.records.keyvalue");
    if (!kv) return -1;
    key_value_type = PyObject_GetAttrString(kv, "KeyValue");
    Py_DECREF(kv);
    PyObject *st = PyImport_ImportModule("sharestate.coordinator.share_state");
    if (!st) return -1;
    state_batch_type = PyObject_GetAttrString(st, "StateBatch");
    Py_DECREF(st);
    return (key_value_type && state_batch_type) ? 0 : -1;
}

static PyObject *new_tuple(PyObject *type, Py_ssize_t n) {
    return ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
}

/* Item `index` of `values`, or `absent` (new ref) when index is -1. */
static PyObject *field(PyObject *values, long index, PyObject *absent) {
    return Py_NewRef(index < 0 ? absent : PyTuple_GET_ITEM(values, index));
}

/* 1 when every decoded batch has first <= last, 0 when one does not, -1 on error. */
static int batches_valid(PyObject *raw, PyObject *slots) {
    long fi = native_slot(slots, VALUE_SLOT_FIRST_OFFSET);
    long li = native_slot(slots, VALUE_SLOT_LAST_OFFSET);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(raw); i++) {
        PyObject *b = PyTuple_GET_ITEM(raw, i);
        int bad = PyObject_RichCompareBool(PyTuple_GET_ITEM(b, fi), PyTuple_GET_ITEM(b, li), Py_GT);
        if (bad != 0) return bad < 0 ? -1 : 0;
    }
    return 1;
}

/* The decoded batch structs as a tuple of StateBatch (all valid). */
static PyObject *state_batches(PyObject *raw, PyObject *slots) {
    long fi = native_slot(slots, VALUE_SLOT_FIRST_OFFSET);
    long li = native_slot(slots, VALUE_SLOT_LAST_OFFSET);
    long si = native_slot(slots, VALUE_SLOT_DELIVERY_STATE);
    long ci = native_slot(slots, VALUE_SLOT_DELIVERY_COUNT);
    Py_ssize_t n = PyTuple_GET_SIZE(raw);
    PyObject *out = PyTuple_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyTuple_GET_ITEM(raw, i);
        PyObject *first = PyTuple_GET_ITEM(b, fi), *last = PyTuple_GET_ITEM(b, li);
        PyObject *sb = new_tuple(state_batch_type, BATCH_SIZE);
        if (!sb) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(sb, BATCH_FIRST_OFFSET, Py_NewRef(first));
        PyTuple_SET_ITEM(sb, BATCH_LAST_OFFSET, Py_NewRef(last));
        PyTuple_SET_ITEM(sb, BATCH_DELIVERY_STATE, Py_NewRef(PyTuple_GET_ITEM(b, si)));
        PyTuple_SET_ITEM(sb, BATCH_DELIVERY_COUNT, Py_NewRef(PyTuple_GET_ITEM(b, ci)));
        PyTuple_SET_ITEM(out, i, sb);
    }
    return out;
}

/* The ShareKeys share_apply built last (see native_share_key). */
static NativeKey recent_keys[NATIVE_RECENT_KEYS];

/* map.get(key), a new reference (None when absent); NULL on error. */
static inline PyObject *get_or_none(PyObject *map, const NativeKey *key) {
    PyObject *v = native_key_get(map, key);
    if (!v) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return Py_NewRef(v);
}

/* map[key] = max(map.get(key), value); a new reference to the value it holds after. */
static PyObject *max_into(PyObject *map, const NativeKey *key, PyObject *value) {
    PyObject *prev = native_key_get(map, key);
    if (prev) {
        int less = PyObject_RichCompareBool(prev, value, Py_LT);
        if (less < 0) return NULL;
        if (!less) return Py_NewRef(prev);
    } else if (PyErr_Occurred()) {
        return NULL;
    }
    return native_key_set(map, key, value) < 0 ? NULL : Py_NewRef(value);
}

/* A SharePartitionState of `type` holding `items` (references stolen). */
static PyObject *state_of(PyObject *type, PyObject *items[STATE_SIZE]) {
    PyObject *state = new_tuple(type, STATE_SIZE);
    if (!state) {
        for (int i = 0; i < STATE_SIZE; i++) Py_XDECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < STATE_SIZE; i++) PyTuple_SET_ITEM(state, i, items[i]);
    return state;
}

/* What a record leaves its key with, for its HistoryEntry (new references; NULL: None). */
typedef struct {
    PyObject *state, *leader_epoch, *state_epoch, *count;
} KeyAfter;

static void key_after_clear(KeyAfter *after) {
    Py_CLEAR(after->state);
    Py_CLEAR(after->leader_epoch);
    Py_CLEAR(after->state_epoch);
    Py_CLEAR(after->count);
}

/* Append the key's HistoryEntry (sharestate.replay.share_log): (offset, timestamp, key,
 * then what the shard holds for it: state, leader epoch, state epoch, update count, last
 * snapshot offset; None where absent). `after` has the first four (the last is read from
 * the offsets manager's map). */
static int record_history(PyObject *ctx, PyObject *history, PyObject *offset, PyObject *ts,
                          const NativeKey *key, const KeyAfter *after) {
    PyObject *snapshot_offset = get_or_none(
        PyTuple_GET_ITEM(ctx, CTX_SNAPSHOT_OFFSETS), key);
    if (!snapshot_offset) return -1;
    PyObject *entry = PyTuple_New(8);
    if (!entry) { Py_DECREF(snapshot_offset); return -1; }
    PyObject *items[8] = {offset, ts, key->key, after->state, after->leader_epoch,
                          after->state_epoch, after->count, snapshot_offset};
    for (int i = 0; i < 7; i++) {
        PyTuple_SET_ITEM(entry, i, Py_NewRef(items[i] ? items[i] : Py_None));
    }
    PyTuple_SET_ITEM(entry, 7, snapshot_offset);
    int rc = PyList_Check(history) ? PyList_Append(history, entry)
                                   : native_columns_append(history, entry);
    Py_DECREF(entry);
    return rc;
}

/* 1 applied (or skipped: it did not decode), 0 not taken (fall back), -1 error */
static int apply_one(PyObject *ctx, PyObject *offset, PyObject *ts, PyObject *decoded,
                     PyObject *slot_table, SlotCache *slot_cache,
                     PyObject *history) {
    if (!Py_IS_TYPE(decoded, (PyTypeObject *)key_value_type)) return 0;
    PyObject *kind = PyTuple_GET_ITEM(decoded, KV_KIND);
    PyObject *key_values = PyTuple_GET_ITEM(decoded, KV_KEY);
    PyObject *version = PyTuple_GET_ITEM(decoded, KV_VALUE_VERSION);
    PyObject *values = PyTuple_GET_ITEM(decoded, KV_VALUE);
    PyObject *error = PyTuple_GET_ITEM(decoded, KV_ERROR);
    /* A record that did not decode is skipped, as `_Applier.apply` skips it (its finding
     * came with its batch): applied, without a history entry. */
    if (error != Py_None || kind == Py_None || key_values == Py_None) return 1;
    if (values == Py_None || version == Py_None) return 0;
    PyObject *slots = native_cached_slots(slot_cache, slot_table, kind, version);
    if (!slots) return PyErr_Occurred() ? -1 : 0;
    PyObject *raw_batches = PyTuple_GET_ITEM(values, native_slot(slots, VALUE_SLOT_BATCHES));
    int valid = batches_valid(raw_batches, slots);
    if (valid <= 0) return valid;
    int is_snapshot = PyObject_IsTrue(PyTuple_GET_ITEM(slots, VALUE_SLOT_IS_SNAPSHOT));
    if (is_snapshot < 0) return -1;
    if (is_snapshot && native_slot(slots, VALUE_SLOT_STATE_EPOCH) < 0) return 0;
    /* The combiner reads a StateBatch's fields from any tuple, so an update merged into an
     * existing state needs no StateBatch copies of batches whose structs hold them so. */
    int raw_order = native_slot(slots, VALUE_SLOT_FIRST_OFFSET) == BATCH_FIRST_OFFSET
                    && native_slot(slots, VALUE_SLOT_LAST_OFFSET) == BATCH_LAST_OFFSET
                    && native_slot(slots, VALUE_SLOT_DELIVERY_STATE) == BATCH_DELIVERY_STATE
                    && native_slot(slots, VALUE_SLOT_DELIVERY_COUNT) == BATCH_DELIVERY_COUNT;
    PyObject *batches = NULL;

    PyObject *states = PyTuple_GET_ITEM(ctx, CTX_STATES);
    PyObject *leader_epochs = PyTuple_GET_ITEM(ctx, CTX_LEADER_EPOCHS);
    PyObject *state_epochs = PyTuple_GET_ITEM(ctx, CTX_STATE_EPOCHS);
    PyObject *counts = PyTuple_GET_ITEM(ctx, CTX_COUNTS);
    PyObject *update_offsets = PyTuple_GET_ITEM(ctx, CTX_UPDATE_OFFSETS);
    PyObject *limit = PyTuple_GET_ITEM(ctx, CTX_LIMIT);
    PyObject *first_count = PyTuple_GET_ITEM(ctx, CTX_FIRST_UPDATE_COUNT);
    PyObject *fresh_epoch = PyTuple_GET_ITEM(ctx, CTX_FRESH_STATE_EPOCH);
    PyObject *fresh_ts = PyTuple_GET_ITEM(ctx, CTX_FRESH_TIMESTAMP);
    PyObject *key_type = PyTuple_GET_ITEM(ctx, CTX_KEY_TYPE);
    PyObject *state_type = PyTuple_GET_ITEM(ctx, CTX_STATE_TYPE);

    NativeKey key;
    if (native_share_key(recent_keys, key_type, key_values, &key) < 0) return -1;
    KeyAfter after = {NULL, NULL, NULL, NULL};
    PyObject *leader_epoch = PyTuple_GET_ITEM(values, native_slot(slots, VALUE_SLOT_LEADER_EPOCH));
    PyObject *start = PyTuple_GET_ITEM(values, native_slot(slots, VALUE_SLOT_START_OFFSET));
    int rc = -1;
    if (!(after.leader_epoch = max_into(leader_epochs, &key, leader_epoch))) goto done;
    if (is_snapshot) {
        PyObject *state_epoch = PyTuple_GET_ITEM(
            values, native_slot(slots, VALUE_SLOT_STATE_EPOCH));
        if (!(after.state_epoch = max_into(state_epochs, &key, state_epoch))) goto done;
        if (!(batches = state_batches(raw_batches, slots))) goto done;
        PyObject *items[STATE_SIZE] = {
            [STATE_SNAPSHOT_EPOCH] = Py_NewRef(
                PyTuple_GET_ITEM(values, native_slot(slots, VALUE_SLOT_SNAPSHOT_EPOCH))),
            [STATE_STATE_EPOCH] = Py_NewRef(state_epoch),
            [STATE_LEADER_EPOCH] = Py_NewRef(leader_epoch),
            [STATE_START_OFFSET] = Py_NewRef(start),
            [STATE_DELIVERY_COMPLETE_COUNT] = field(
                values, native_slot(slots, VALUE_SLOT_DELIVERY_COMPLETE_COUNT), minus_one),
            [STATE_CREATE_TIMESTAMP] = field(
                values, native_slot(slots, VALUE_SLOT_CREATE_TIMESTAMP), Py_None),
            [STATE_WRITE_TIMESTAMP] = field(
                values, native_slot(slots, VALUE_SLOT_WRITE_TIMESTAMP), Py_None),
            [STATE_BATCHES] = Py_NewRef(batches) };
        if (!(after.state = state_of(state_type, items))) goto done;
        if (native_key_set(states, &key, after.state) < 0) goto done;
        PyObject *count = native_key_get(counts, &key);
        if (count) {
            int reached = PyObject_RichCompareBool(count, limit, Py_GE);
            if (reached < 0) goto done;
            if (reached) {
                if (!(after.count = PyLong_FromLong(0))) goto done;
                if (native_key_set(counts, &key, after.count) < 0) goto done;
            } else {
                after.count = Py_NewRef(count);
            }
        } else if (PyErr_Occurred()) {
            goto done;
        }
        PyObject *res = PyObject_CallFunctionObjArgs(update_offsets, key.key, offset, Py_False, NULL);
        if (!res) goto done;
        Py_DECREF(res);
    } else {
        long dcci = native_slot(slots, VALUE_SLOT_DELIVERY_COMPLETE_COUNT);
        PyObject *dcc = dcci < 0 ? minus_one : PyTuple_GET_ITEM(values, dcci);
        PyObject *state = native_key_get(states, &key);
        if (!state) {
            if (PyErr_Occurred()) goto done;
            if (!(batches = state_batches(raw_batches, slots))) goto done;
            PyObject *items[STATE_SIZE] = {
                [STATE_SNAPSHOT_EPOCH] = Py_NewRef(
                    PyTuple_GET_ITEM(values, native_slot(slots, VALUE_SLOT_SNAPSHOT_EPOCH))),
                [STATE_STATE_EPOCH] = Py_NewRef(fresh_epoch),
                [STATE_LEADER_EPOCH] = Py_NewRef(leader_epoch),
                [STATE_START_OFFSET] = Py_NewRef(start),
                [STATE_DELIVERY_COMPLETE_COUNT] = Py_NewRef(dcc),
                [STATE_CREATE_TIMESTAMP] = Py_NewRef(fresh_ts),
                [STATE_WRITE_TIMESTAMP] = Py_NewRef(fresh_ts),
                [STATE_BATCHES] = Py_NewRef(batches) };
            after.state = state_of(state_type, items);
        } else {
            int keep_start = PyObject_RichCompareBool(start, minus_one, Py_EQ);
            int keep_epoch = PyObject_RichCompareBool(leader_epoch, minus_one, Py_EQ);
            if (keep_start < 0 || keep_epoch < 0) goto done;
            PyObject *s = keep_start ? PyTuple_GET_ITEM(state, STATE_START_OFFSET) : start;
            long long start_value = PyLong_AsLongLong(s);
            if (start_value == -1 && PyErr_Occurred()) goto done;
            if (!raw_order && !(batches = state_batches(raw_batches, slots))) goto done;
            PyObject *combined = native_combine_batches(PyTuple_GET_ITEM(state, STATE_BATCHES),
                                                        batches ? batches : raw_batches,
                                                        start_value);
            if (!combined) goto done;
            PyObject *items[STATE_SIZE] = {
                [STATE_SNAPSHOT_EPOCH] = Py_NewRef(PyTuple_GET_ITEM(state, STATE_SNAPSHOT_EPOCH)),
                [STATE_STATE_EPOCH] = Py_NewRef(PyTuple_GET_ITEM(state, STATE_STATE_EPOCH)),
                [STATE_LEADER_EPOCH] = Py_NewRef(
                    keep_epoch ? PyTuple_GET_ITEM(state, STATE_LEADER_EPOCH) : leader_epoch),
                [STATE_START_OFFSET] = Py_NewRef(s),
                [STATE_DELIVERY_COMPLETE_COUNT] = Py_NewRef(dcc),
                [STATE_CREATE_TIMESTAMP] = Py_NewRef(
                    PyTuple_GET_ITEM(state, STATE_CREATE_TIMESTAMP)),
                [STATE_WRITE_TIMESTAMP] = Py_NewRef(PyTuple_GET_ITEM(state, STATE_WRITE_TIMESTAMP)),
                [STATE_BATCHES] = combined };
            after.state = state_of(state_type, items);
        }
        if (!after.state) goto done;
        if (native_key_set(states, &key, after.state) < 0) goto done;
        PyObject *count = native_key_get(counts, &key);
        if (count) after.count = PyNumber_Add(count, one);
        else if (PyErr_Occurred()) goto done;
        else after.count = Py_NewRef(first_count);
        if (!after.count || native_key_set(counts, &key, after.count) < 0) goto done;
        if (history != Py_None) {
            PyObject *state_epoch = native_key_get(state_epochs, &key);
            if (!state_epoch && PyErr_Occurred()) goto done;
            after.state_epoch = Py_XNewRef(state_epoch);
        }
    }
    rc = history == Py_None ? 1
         : (record_history(ctx, history, offset, ts, &key, &after) < 0 ? -1 : 1);
done:
    key_after_clear(&after);
    Py_DECREF(key.key);
    Py_XDECREF(batches);
    return rc;
}

PyObject *native_share_apply(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 8 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != CTX_SIZE
        || !PyList_Check(args[1]) || !PyList_Check(args[2]) || !PyDict_Check(args[5])
        || (args[7] != Py_None && !PyList_Check(args[7])
            && !Py_IS_TYPE(args[7], &NativeColumnsType))) {
        PyErr_SetString(PyExc_TypeError, "share_apply(context, records, decoded, as_of_offset, "
                                         "as_of_time, slots, fallback, history)");
        return NULL;
    }
    if (load_types() < 0) return NULL;
    PyObject *ctx = args[0], *records = args[1], *decoded = args[2];
    PyObject *as_of_offset = args[3], *as_of_time = args[4], *slot_table = args[5];
    PyObject *fallback = args[6], *history = args[7];
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (PyList_GET_SIZE(decoded) != n) {
        PyErr_SetString(PyExc_ValueError, "records and decoded differ in length");
        return NULL;
    }
    long long max_offset = 0, max_time = 0;
    int bound_offset = as_of_offset != Py_None, bound_time = as_of_time != Py_None;
    if (bound_offset && (max_offset = PyLong_AsLongLong(as_of_offset)) == -1 && PyErr_Occurred()) return NULL;
    if (bound_time && (max_time = PyLong_AsLongLong(as_of_time)) == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t applied = 0;
    int stopped = 0;
    PyObject *last_offset = Py_NewRef(Py_None), *last_ts = Py_NewRef(Py_None);
    PyObject *result = NULL;
    SlotCache cache = {NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        PyObject *offset = native_record_field(record, RECORD_OFFSET);
        PyObject *ts = offset ? native_record_field(record, RECORD_TIMESTAMP) : NULL;
        if (!ts) { Py_XDECREF(offset); goto done; }
        long long o = bound_offset ? PyLong_AsLongLong(offset) : 0;
        long long t = bound_time ? PyLong_AsLongLong(ts) : 0;
        int rc = PyErr_Occurred() ? -1 : 1;
        if (rc > 0 && ((bound_offset && o > max_offset) || (bound_time && t > max_time))) {
            Py_DECREF(offset);
            Py_DECREF(ts);
            stopped = 1;
            break;
        }
        PyObject *item = PyList_GET_ITEM(decoded, i);
        if (rc > 0) rc = apply_one(ctx, offset, ts, item, slot_table, &cache, history);
        if (rc == 0) {
            PyObject *res = PyObject_CallFunctionObjArgs(fallback, record, item, NULL);
            rc = res ? 1 : -1;
            Py_XDECREF(res);
        }
        if (rc < 0) { Py_DECREF(offset); Py_DECREF(ts); goto done; }
        applied++;
        Py_SETREF(last_offset, offset);
        Py_SETREF(last_ts, ts);
    }
    result = Py_BuildValue("(nOOO)", applied, stopped ? Py_True : Py_False, last_offset, last_ts);
done:
    Py_DECREF(last_offset);
    Py_DECREF(last_ts);
    return result;
}
