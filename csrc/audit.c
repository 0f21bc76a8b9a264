/* Native fast path of sharestate/analytics/audit.py: `ShareAuditor.observe` (the Python
 * twin, reached through `_decoded`) for the records that raise no finding.
 *
 * share_audit(seen, seen_type, key_type, records, decoded, slots, fallback) -> None
 *   seen      : ShareAuditor._seen, {ShareKey: _Seen}, updated in place
 *   seen_type : the _Seen NamedTuple class (SEEN_* in native.h)
 *   key_type  : the ShareKey NamedTuple class
 *   slots     : the slot table share_apply reads ({id(kind): {version: ValueSlots}})
 *   fallback  : callable(record, decoded), ShareAuditor's per-record Python path
 * A decoded share-state record of a key already seen is applied here when no rule fires:
 * same state epoch and next snapshot epoch for a snapshot, no leader-epoch or SPSO
 * regression. Every other decoded record (first sight of a key, tombstones, unknown layouts,
 * anything that makes a finding) goes to `fallback`, in order; items that are not clean
 * KeyValues (control records, errors) are skipped, as the Python path skips them.
 */
#include "native.h"

static PyObject *key_value_type = NULL;
/* The ShareKeys share_audit built last (see native_share_key). */
static NativeKey recent_keys[NATIVE_RECENT_KEYS];

static int load_types(void) {
    if (key_value_type) return 0;
    PyObject *kv = PyImport_ImportModule("sharestate.records.keyvalue");
    if (!kv) return -1;
    key_value_type = PyObject_GetAttrString(kv, "KeyValue");
    Py_DECREF(kv);
    return key_value_type ? 0 : -1;
}

/* *out = the int at values[index]; 0 ok, -1 error (or not an int). */
static int int_at(PyObject *values, long index, long long *out) {
    *out = PyLong_AsLongLong(PyTuple_GET_ITEM(values, index));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *seen_of(PyObject *type, PyObject *items[SEEN_SIZE]) {
    PyObject *seen = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, SEEN_SIZE);
    for (int i = 0; i < SEEN_SIZE; i++) {
        if (seen) PyTuple_SET_ITEM(seen, i, items[i]);
        else Py_XDECREF(items[i]);
    }
    return seen;
}

static PyObject *larger(PyObject *a, long long va, PyObject *b, long long vb) {
    return Py_NewRef(vb > va ? b : a);
}

/* 1 applied, 0 not taken (fall back), -1 error. */
static int audit_one(PyObject *seen, PyObject *seen_type, PyObject *key_type,
                     PyObject *decoded, PyObject *slot_table, SlotCache *cache) {
    PyObject *kind = PyTuple_GET_ITEM(decoded, KV_KIND);
    PyObject *key_values = PyTuple_GET_ITEM(decoded, KV_KEY);
    PyObject *version = PyTuple_GET_ITEM(decoded, KV_VALUE_VERSION);
    PyObject *values = PyTuple_GET_ITEM(decoded, KV_VALUE);
    if (values == Py_None || version == Py_None) return 0;
    PyObject *slots = native_cached_slots(cache, slot_table, kind, version);
    if (!slots) return PyErr_Occurred() ? -1 : 0;

    NativeKey key;
    if (native_share_key(recent_keys, key_type, key_values, &key) < 0) return -1;
    int rc = -1;
    PyObject *prev = native_key_get(seen, &key);
    if (!prev) { rc = PyErr_Occurred() ? -1 : 0; goto done; }

    long long leader, start, max_leader, prev_start, snapshot_epoch, prev_snapshot_epoch;
    long li = native_slot(slots, VALUE_SLOT_LEADER_EPOCH);
    long si = native_slot(slots, VALUE_SLOT_START_OFFSET);
    long sni = native_slot(slots, VALUE_SLOT_SNAPSHOT_EPOCH);
    if (int_at(values, li, &leader) < 0 || int_at(values, si, &start) < 0
        || int_at(values, sni, &snapshot_epoch) < 0
        || int_at(prev, SEEN_MAX_LEADER_EPOCH, &max_leader) < 0
        || int_at(prev, SEEN_START_OFFSET, &prev_start) < 0
        || int_at(prev, SEEN_SNAPSHOT_EPOCH, &prev_snapshot_epoch) < 0) goto done;
    /* epoch_regression (leader) and spso_regression are findings: the Python path. */
    if ((leader != -1 && leader < max_leader)
        || (start != -1 && prev_start != -1 && start < prev_start)) { rc = 0; goto done; }
    PyObject *leader_obj = PyTuple_GET_ITEM(values, li);
    PyObject *max_leader_obj = larger(PyTuple_GET_ITEM(prev, SEEN_MAX_LEADER_EPOCH), max_leader,
                                      leader_obj, leader);
    PyObject *items[SEEN_SIZE];
    if (PyObject_IsTrue(PyTuple_GET_ITEM(slots, VALUE_SLOT_IS_SNAPSHOT))) {
        long sei = native_slot(slots, VALUE_SLOT_STATE_EPOCH);
        PyObject *prev_state = PyTuple_GET_ITEM(prev, SEEN_STATE_EPOCH);
        long long state_epoch, prev_state_epoch;
        /* A snapshot is quiet only in the same state epoch, with the next snapshot epoch. */
        if (sei < 0 || prev_state == Py_None || snapshot_epoch != prev_snapshot_epoch + 1) {
            Py_DECREF(max_leader_obj);
            rc = 0;
            goto done;
        }
        if (int_at(values, sei, &state_epoch) < 0
            || int_at(prev, SEEN_STATE_EPOCH, &prev_state_epoch) < 0) {
            Py_DECREF(max_leader_obj);
            goto done;
        }
        if (state_epoch != prev_state_epoch) { Py_DECREF(max_leader_obj); rc = 0; goto done; }
        PyObject *state_obj = PyTuple_GET_ITEM(values, sei);
        PyObject *prev_max_state = PyTuple_GET_ITEM(prev, SEEN_MAX_STATE_EPOCH);
        PyObject *max_state;
        if (prev_max_state == Py_None) {
            max_state = Py_NewRef(state_obj);
        } else {
            long long pm;
            if (int_at(prev, SEEN_MAX_STATE_EPOCH, &pm) < 0) { Py_DECREF(max_leader_obj); goto done; }
            max_state = larger(prev_max_state, pm, state_obj, state_epoch);
        }
        items[SEEN_MAX_LEADER_EPOCH] = max_leader_obj;
        items[SEEN_MAX_STATE_EPOCH] = max_state;
        items[SEEN_STATE_EPOCH] = Py_NewRef(state_obj);
        items[SEEN_SNAPSHOT_EPOCH] = Py_NewRef(PyTuple_GET_ITEM(values, sni));
        items[SEEN_START_OFFSET] = Py_NewRef(PyTuple_GET_ITEM(values, si));
    } else {
        items[SEEN_MAX_LEADER_EPOCH] = max_leader_obj;
        items[SEEN_MAX_STATE_EPOCH] = Py_NewRef(PyTuple_GET_ITEM(prev, SEEN_MAX_STATE_EPOCH));
        items[SEEN_STATE_EPOCH] = Py_NewRef(PyTuple_GET_ITEM(prev, SEEN_STATE_EPOCH));
        items[SEEN_SNAPSHOT_EPOCH] = Py_NewRef(PyTuple_GET_ITEM(prev, SEEN_SNAPSHOT_EPOCH));
        items[SEEN_START_OFFSET] = Py_NewRef(start == -1 ? PyTuple_GET_ITEM(prev, SEEN_START_OFFSET)
                                                         : PyTuple_GET_ITEM(values, si));
    }
    PyObject *next = seen_of(seen_type, items);
    if (!next) goto done;
    rc = native_key_set(seen, &key, next) < 0 ? -1 : 1;
    Py_DECREF(next);
done:
    Py_DECREF(key.key);
    return rc;
}

PyObject *native_share_audit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7 || !PyDict_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])
        || !PyList_Check(args[3]) || !PyList_Check(args[4]) || !PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "share_audit(seen, seen_type, key_type, records, decoded, slots, fallback)");
        return NULL;
    }
    if (load_types() < 0) return NULL;
    PyObject *records = args[3], *decoded = args[4];
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (PyList_GET_SIZE(decoded) != n) {
        PyErr_SetString(PyExc_ValueError, "records and decoded differ in length");
        return NULL;
    }
    SlotCache cache = {NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(decoded, i);
        if (!Py_IS_TYPE(item, (PyTypeObject *)key_value_type)
            || PyTuple_GET_ITEM(item, KV_ERROR) != Py_None
            || PyTuple_GET_ITEM(item, KV_KIND) == Py_None
            || PyTuple_GET_ITEM(item, KV_KEY) == Py_None) {
            continue;
        }
        int rc = audit_one(args[0], args[1], args[2], item, args[5], &cache);
        if (rc == 0) {
            PyObject *res = PyObject_CallFunctionObjArgs(args[6], PyList_GET_ITEM(records, i),
                                                         item, NULL);
            rc = res ? 1 : -1;
            Py_XDECREF(res);
        }
        if (rc < 0) return NULL;
    }
    Py_RETURN_NONE;
}
