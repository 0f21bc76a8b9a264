/* Shared declarations of the sharestate._native extension. */
#ifndef SHARESTATE_NATIVE_H
#define SHARESTATE_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t native_be16(const unsigned char *p) {
    return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint32_t native_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t native_be64(const unsigned char *p) {
    return ((uint64_t)native_be32(p) << 32) | native_be32(p + 4);
}

/* Positional layouts: the field order of each Python tuple C reads or builds by position,
 * one X-macro per NamedTuple (named in its comment). Each gives the index constants used in
 * csrc (`enum { ..., <PREFIX>SIZE }`) and the names `sharestate._native.FIELDS` exports
 * (module.c), which tests/test_native.py compares with the NamedTuples' `_fields`: a field
 * added, removed or moved on one side only fails that test. */
#define NATIVE_INDEX(index, field) index,

/* sharestate.coordinator.shard.NativeContext: what share_apply needs of a shard */
#define CONTEXT_FIELDS(X) \
    X(CTX_STATES, states) X(CTX_LEADER_EPOCHS, leader_epochs) \
    X(CTX_STATE_EPOCHS, state_epochs) X(CTX_COUNTS, counts) \
    X(CTX_UPDATE_OFFSETS, update_offsets) \
    X(CTX_LIMIT, snapshot_update_records_per_snapshot) \
    X(CTX_FIRST_UPDATE_COUNT, first_update_count) \
    X(CTX_FRESH_STATE_EPOCH, fresh_update_state_epoch) \
    X(CTX_FRESH_TIMESTAMP, fresh_update_timestamp) X(CTX_KEY_TYPE, key_type) \
    X(CTX_STATE_TYPE, state_type) X(CTX_SNAPSHOT_OFFSETS, snapshot_offsets)
enum { CONTEXT_FIELDS(NATIVE_INDEX) CTX_SIZE };

/* sharestate.coordinator.share_state.ValueSlots: where a value layout's fields sit in its
 * decoded tuple (-1: absent); the last four index each decoded state batch struct */
#define VALUE_SLOT_FIELDS(X) \
    X(VALUE_SLOT_IS_SNAPSHOT, is_snapshot) X(VALUE_SLOT_SNAPSHOT_EPOCH, snapshot_epoch) \
    X(VALUE_SLOT_STATE_EPOCH, state_epoch) X(VALUE_SLOT_LEADER_EPOCH, leader_epoch) \
    X(VALUE_SLOT_START_OFFSET, start_offset) \
    X(VALUE_SLOT_DELIVERY_COMPLETE_COUNT, delivery_complete_count) \
    X(VALUE_SLOT_CREATE_TIMESTAMP, create_timestamp) \
    X(VALUE_SLOT_WRITE_TIMESTAMP, write_timestamp) X(VALUE_SLOT_BATCHES, batches) \
    X(VALUE_SLOT_FIRST_OFFSET, first_offset) X(VALUE_SLOT_LAST_OFFSET, last_offset) \
    X(VALUE_SLOT_DELIVERY_STATE, delivery_state) X(VALUE_SLOT_DELIVERY_COUNT, delivery_count)
enum { VALUE_SLOT_FIELDS(NATIVE_INDEX) VALUE_SLOT_SIZE };

/* sharestate.records.codec.StructProgram and SlotProgram: a layout as compile() reads it */
#define STRUCT_PROGRAM_FIELDS(X) \
    X(STRUCT_PROGRAM_FLEXIBLE, flexible) X(STRUCT_PROGRAM_WIDTH, width) \
    X(STRUCT_PROGRAM_DEFAULTS, defaults) X(STRUCT_PROGRAM_REGULAR, regular) \
    X(STRUCT_PROGRAM_TAGGED, tagged) X(STRUCT_PROGRAM_NAMES, names)
enum { STRUCT_PROGRAM_FIELDS(NATIVE_INDEX) STRUCT_PROGRAM_SIZE };
#define SLOT_PROGRAM_FIELDS(X) \
    X(SLOT_PROGRAM_POSITION, position) X(SLOT_PROGRAM_KIND, kind) \
    X(SLOT_PROGRAM_NULLABLE, nullable) X(SLOT_PROGRAM_FLEXIBLE, flexible) \
    X(SLOT_PROGRAM_SUB, sub) X(SLOT_PROGRAM_NAME, name)
enum { SLOT_PROGRAM_FIELDS(NATIVE_INDEX) SLOT_PROGRAM_SIZE };

/* sharestate.records.keyvalue.KindPrograms: a record kind and its compiled layouts */
#define KIND_PROGRAMS_FIELDS(X) \
    X(KIND_PROGRAMS_KIND, kind) X(KIND_PROGRAMS_KEY, key) X(KIND_PROGRAMS_VALUES, values)
enum { KIND_PROGRAMS_FIELDS(NATIVE_INDEX) KIND_PROGRAMS_SIZE };

/* sharestate.records.keyvalue.KeyValue: a decoded data record */
#define KEY_VALUE_FIELDS(X) \
    X(KV_TYPE_ID, type_id) X(KV_KIND, kind) X(KV_KEY, key) \
    X(KV_VALUE_VERSION, value_version) X(KV_VALUE, value) X(KV_ERROR, error)
enum { KEY_VALUE_FIELDS(NATIVE_INDEX) KV_SIZE };

/* sharestate.log.batch.RawRecord: one record of a batch */
#define RAW_RECORD_FIELDS(X) \
    X(RECORD_OFFSET, offset) X(RECORD_TIMESTAMP, timestamp) X(RECORD_SEQUENCE, sequence) \
    X(RECORD_KEY, key) X(RECORD_VALUE, value) X(RECORD_HEADERS, headers)
enum { RAW_RECORD_FIELDS(NATIVE_INDEX) RECORD_SIZE };

/* sharestate.log.batch.BatchHeader: a batch's header */
#define BATCH_HEADER_FIELDS(X) \
    X(HEADER_POSITION, position) X(HEADER_BASE_OFFSET, base_offset) \
    X(HEADER_LAST_OFFSET, last_offset) X(HEADER_SIZE_IN_BYTES, size_in_bytes) \
    X(HEADER_PARTITION_LEADER_EPOCH, partition_leader_epoch) X(HEADER_MAGIC, magic) \
    X(HEADER_CRC, crc) X(HEADER_CRC_VALID, crc_valid) X(HEADER_COMPRESSION, compression) \
    X(HEADER_TIMESTAMP_TYPE, timestamp_type) X(HEADER_BASE_TIMESTAMP, base_timestamp) \
    X(HEADER_MAX_TIMESTAMP, max_timestamp) X(HEADER_PRODUCER_ID, producer_id) \
    X(HEADER_PRODUCER_EPOCH, producer_epoch) X(HEADER_BASE_SEQUENCE, base_sequence) \
    X(HEADER_IS_TRANSACTIONAL, is_transactional) X(HEADER_IS_CONTROL, is_control) \
    X(HEADER_RECORD_COUNT, record_count) X(HEADER_HAS_DELETE_HORIZON, has_delete_horizon)
enum { BATCH_HEADER_FIELDS(NATIVE_INDEX) HEADER_SIZE };

/* sharestate.cluster.consumed.ConsumedRun: consumed messages of one partition */
#define CONSUMED_RUN_FIELDS(X) \
    X(RUN_TOPIC, topic) X(RUN_PARTITION, partition) X(RUN_RECORDS, records) \
    X(RUN_HEADERS, headers) X(RUN_ERROR, error) X(RUN_OFFSET, offset)
enum { CONSUMED_RUN_FIELDS(NATIVE_INDEX) RUN_SIZE };

/* sharestate.coordinator.share_state.ShareKey, StateBatch and SharePartitionState */
#define SHARE_KEY_FIELDS(X) \
    X(SHARE_KEY_GROUP_ID, group_id) X(SHARE_KEY_TOPIC_ID, topic_id) \
    X(SHARE_KEY_PARTITION, partition)
enum { SHARE_KEY_FIELDS(NATIVE_INDEX) SHARE_KEY_SIZE };
#define STATE_BATCH_FIELDS(X) \
    X(BATCH_FIRST_OFFSET, first_offset) X(BATCH_LAST_OFFSET, last_offset) \
    X(BATCH_DELIVERY_STATE, delivery_state) X(BATCH_DELIVERY_COUNT, delivery_count)
enum { STATE_BATCH_FIELDS(NATIVE_INDEX) BATCH_SIZE };
#define PARTITION_STATE_FIELDS(X) \
    X(STATE_SNAPSHOT_EPOCH, snapshot_epoch) X(STATE_STATE_EPOCH, state_epoch) \
    X(STATE_LEADER_EPOCH, leader_epoch) X(STATE_START_OFFSET, start_offset) \
    X(STATE_DELIVERY_COMPLETE_COUNT, delivery_complete_count) \
    X(STATE_CREATE_TIMESTAMP, create_timestamp) X(STATE_WRITE_TIMESTAMP, write_timestamp) \
    X(STATE_BATCHES, batches)
enum { PARTITION_STATE_FIELDS(NATIVE_INDEX) STATE_SIZE };

/* sharestate.analytics.audit._Seen: what the audit remembers of a live key */
#define SEEN_FIELDS(X) \
    X(SEEN_MAX_LEADER_EPOCH, max_leader_epoch) X(SEEN_MAX_STATE_EPOCH, max_state_epoch) \
    X(SEEN_STATE_EPOCH, state_epoch) X(SEEN_SNAPSHOT_EPOCH, snapshot_epoch) \
    X(SEEN_START_OFFSET, start_offset)
enum { SEEN_FIELDS(NATIVE_INDEX) SEEN_SIZE };

/* Every layout above as (Python class name, X-macro): what `_native.FIELDS` holds. */
#define NATIVE_LAYOUTS(L) \
    L(NativeContext, CONTEXT_FIELDS) L(ValueSlots, VALUE_SLOT_FIELDS) \
    L(StructProgram, STRUCT_PROGRAM_FIELDS) L(SlotProgram, SLOT_PROGRAM_FIELDS) \
    L(KindPrograms, KIND_PROGRAMS_FIELDS) L(KeyValue, KEY_VALUE_FIELDS) \
    L(RawRecord, RAW_RECORD_FIELDS) L(BatchHeader, BATCH_HEADER_FIELDS) \
    L(ConsumedRun, CONSUMED_RUN_FIELDS) L(ShareKey, SHARE_KEY_FIELDS) \
    L(StateBatch, STATE_BATCH_FIELDS) L(SharePartitionState, PARTITION_STATE_FIELDS) \
    L(_Seen, SEEN_FIELDS)

/* Wire kinds of struct programs (sharestate.records.spec.Kind), exported as `_native.KINDS`. */
#define WIRE_KINDS(X) \
    X(K_BOOL, BOOL) X(K_INT8, INT8) X(K_INT16, INT16) X(K_UINT16, UINT16) X(K_INT32, INT32) \
    X(K_INT64, INT64) X(K_FLOAT64, FLOAT64) X(K_UUID, UUID) X(K_STRING, STRING) \
    X(K_BYTES, BYTES) X(K_STRUCT, STRUCT) X(K_ARRAY, ARRAY)
enum { WIRE_KINDS(NATIVE_INDEX) K_COUNT };

/* Slot tables ({id(record kind): {value version: ValueSlots}}, from
 * sharestate.replay.share_log.native_slots): item `i` of a ValueSlots, and the ValueSlots of
 * a decoded record's kind and value version (borrowed; NULL when absent or on error: check
 * PyErr_Occurred). */
static inline long native_slot(PyObject *slots, int i) {
    return PyLong_AsLong(PyTuple_GET_ITEM(slots, i));
}
static inline PyObject *native_value_slots(PyObject *slot_table, PyObject *kind,
                                           PyObject *version) {
    PyObject *kind_id = PyLong_FromVoidPtr(kind);
    if (!kind_id) return NULL;
    PyObject *versions = PyDict_GetItemWithError(slot_table, kind_id);
    Py_DECREF(kind_id);
    if (!versions) return NULL;
    PyObject *slots = PyDict_GetItemWithError(versions, version);
    if (slots && (!PyTuple_Check(slots) || PyTuple_GET_SIZE(slots) != VALUE_SLOT_SIZE)) {
        PyErr_SetString(PyExc_TypeError, "a slot table holds ValueSlots");
        return NULL;
    }
    return slots;
}

/* The ValueSlots last looked up in a loop over one call's records: the next record of the
 * same kind and value version (the same objects, alive for the whole call) takes them
 * without a lookup. Start each call with a zeroed one. */
typedef struct {
    PyObject *kind, *version, *slots;
} SlotCache;
static inline PyObject *native_cached_slots(SlotCache *cache, PyObject *slot_table,
                                            PyObject *kind, PyObject *version) {
    if (cache->slots && kind == cache->kind && version == cache->version) return cache->slots;
    PyObject *slots = native_value_slots(slot_table, kind, version);
    if (slots) *cache = (SlotCache){kind, version, slots};
    return slots;
}

/* A ShareKey and its hash. */
typedef struct {
    PyObject *key;
    Py_hash_t hash;
} NativeKey;
/* The ShareKeys last built from decoded key structs, found again by the identity of their
 * fields: decoding shares the strings of a key (a cache of them) and the small ints, and
 * the struct itself between consecutive records of a key, so a share-partition's records
 * take one ShareKey object, hashed once, that the shard's dicts hold too (a lookup then
 * matches it by identity, not field by field). Each file using it keeps its own table
 * (`static NativeKey recent[NATIVE_RECENT_KEYS]`): its references live with the module. */
enum { NATIVE_RECENT_KEYS = 64 };
/* *out = a new reference to the `key_type` ShareKey of a decoded key struct (its first
 * fields are the ShareKey's: native_slots checks the layouts), and its hash; -1 on error. */
static inline int native_share_key(NativeKey recent[NATIVE_RECENT_KEYS], PyObject *key_type,
                                   PyObject *key_values, NativeKey *out) {
    PyObject *const *fields = &PyTuple_GET_ITEM(key_values, 0);
    uintptr_t h = 0;
    for (int i = 0; i < SHARE_KEY_SIZE; i++) h = h * 1000003u ^ ((uintptr_t)fields[i] >> 4);
    NativeKey *slot = &recent[(h ^ (h >> 16)) % NATIVE_RECENT_KEYS];
    PyObject *held = slot->key;
    int same = held && Py_IS_TYPE(held, (PyTypeObject *)key_type);
    for (int i = 0; same && i < SHARE_KEY_SIZE; i++) same = PyTuple_GET_ITEM(held, i) == fields[i];
    if (same) {
        *out = (NativeKey){Py_NewRef(held), slot->hash};
        return 0;
    }
    PyObject *key = ((PyTypeObject *)key_type)->tp_alloc((PyTypeObject *)key_type,
                                                        SHARE_KEY_SIZE);
    if (!key) return -1;
    for (int i = 0; i < SHARE_KEY_SIZE; i++) PyTuple_SET_ITEM(key, i, Py_NewRef(fields[i]));
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) { Py_DECREF(key); return -1; }
    Py_XSETREF(slot->key, Py_NewRef(key));
    slot->hash = hash;
    *out = (NativeKey){key, hash};
    return 0;
}
/* map.get(key) (borrowed; NULL when absent or on error: check PyErr_Occurred) and
 * map[key] = value for a dict `map`, with the key's hash taken once (CPython 3.11's
 * known-hash dict calls). */
static inline PyObject *native_key_get(PyObject *map, const NativeKey *key) {
    return _PyDict_GetItem_KnownHash(map, key->key, key->hash);
}
static inline int native_key_set(PyObject *map, const NativeKey *key, PyObject *value) {
    return _PyDict_SetItem_KnownHash(map, key->key, value, key->hash);
}

/* Raise sharestate.records.codec.DecodeError(message, position). Returns NULL. */
PyObject *native_decode_error(Py_ssize_t position, const char *format, ...);
/* 16 bytes -> Kafka's Uuid.toString() (22 chars of URL-safe base64). */
PyObject *native_uuid_str(const unsigned char *raw);

typedef struct Layout Layout;
PyObject *native_compile(PyObject *self, PyObject *program);
Layout *native_layout(PyObject *capsule);
PyObject *native_read_layout(Layout *layout, const unsigned char *data, Py_ssize_t pos,
                             Py_ssize_t end, Py_ssize_t *out_pos);
PyObject *native_read_struct(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

PyObject *native_parse_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int native_parse_into(PyObject *records, const unsigned char *buf, Py_ssize_t len,
                      Py_ssize_t pos, Py_ssize_t end, long long count, long long base_offset,
                      long long base_timestamp, long long base_sequence,
                      long long last_delta, PyObject *owner, PyObject **error);
PyObject *native_scan_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_next_candidate(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_crc_shift(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_decode_key_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_share_apply(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_share_audit(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_transpose(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_tuples(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern PyTypeObject NativeColumnsType;
/* Columns.append(row) for a Columns object; -1 with an error set. */
int native_columns_append(PyObject *columns, PyObject *row);
extern PyTypeObject NativeRecordType;
PyObject *native_record_new(PyObject *buffer, long long offset, long long timestamp,
                            long long sequence, Py_ssize_t key_pos, Py_ssize_t key_len,
                            Py_ssize_t value_pos, Py_ssize_t value_len, PyObject *headers);
/* For a native Record: its key and value bytes in place (NULL, -1 for None); 0 otherwise. */
int native_record_view(PyObject *obj, const char **key, Py_ssize_t *key_len,
                       const char **value, Py_ssize_t *value_len);
/* Set a native Record's timestamp (LogAppendTime batches); 0 when not a native Record. */
int native_record_set_timestamp(PyObject *obj, long long timestamp);
/* Item i of a record, native or tuple (new reference). */
PyObject *native_record_field(PyObject *obj, Py_ssize_t i);
PyObject *native_arrow_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_consumed_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_lag_walk_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_lag_walk_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_lag_walk_feed(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_lag_walk_end(PyObject *self, PyObject *capsule);
PyObject *native_lag_walk_take(PyObject *self, PyObject *capsule);

#endif
