/* Native twin of sharestate/cluster/consumed.py `consumed_runs_py`: what one
 * `Consumer.consume()` returned, as runs of one partition, each record with the batch header
 * a consumed record gets (a batch of its own: a consumer sees no batch boundaries).
 *
 * consumed_runs(messages, header, timestamp_types) -> list[ConsumedRun]
 *   messages        : confluent-kafka Message objects, in the order consumed
 *   header          : a BatchHeader whose other fields every record's header takes
 *   timestamp_types : timestamp type names by confluent-kafka's timestamp kind
 * A message whose error() is not None is a run of its own (no records, its error and
 * offset); the others make runs of consecutive messages of one (topic, partition).
 *
 * A message is read through the C functions of its type's own methods (error(), topic(),
 * ...), called directly when the type defines them as C methods without arguments (as
 * confluent-kafka's Message does), by name otherwise: no Python call per message, and no
 * knowledge of the type's layout.
 */
#include "native.h"

enum { M_ERROR, M_TOPIC, M_PARTITION, M_OFFSET, M_TIMESTAMP, M_KEY, M_VALUE, M_COUNT };
static const char *const method_names[M_COUNT] = {
    "error", "topic", "partition", "offset", "timestamp", "key", "value" };
static PyObject *names[M_COUNT];
static PyCFunction getters[M_COUNT];
static PyTypeObject *resolved = NULL;
static PyObject *record_type = NULL, *run_type = NULL, *minus_one = NULL, *no_headers = NULL;

static int load_types(void) {
    if (run_type) return 0;
    PyObject *batch = PyImport_ImportModule("sharestate.log.batch");
    if (!batch) return -1;
    record_type = PyObject_GetAttrString(batch, "RawRecord");
    Py_DECREF(batch);
    PyObject *consumed = PyImport_ImportModule("sharestate.cluster.consumed");
    if (!consumed) return -1;
    run_type = PyObject_GetAttrString(consumed, "ConsumedRun");
    Py_DECREF(consumed);
    if (!minus_one) minus_one = PyLong_FromLong(-1);
    if (!no_headers) no_headers = PyTuple_New(0);
    for (int i = 0; i < M_COUNT; i++) {
        if (!names[i] && !(names[i] = PyUnicode_InternFromString(method_names[i]))) return -1;
    }
    return (record_type && run_type && minus_one && no_headers) ? 0 : -1;
}

/* Find the C functions of `type`'s methods (NULL where a method is not a C method without
 * arguments: it is then called by name). */
static int resolve(PyTypeObject *type) {
    for (int i = 0; i < M_COUNT; i++) {
        getters[i] = NULL;
        PyObject *found = PyObject_GetAttr((PyObject *)type, names[i]);
        if (!found) return -1;
        if (Py_IS_TYPE(found, &PyMethodDescr_Type)) {
            PyMethodDescrObject *descr = (PyMethodDescrObject *)found;
            if (PyType_IsSubtype(type, PyDescr_TYPE(descr))
                && (descr->d_method->ml_flags & ~METH_COEXIST) == METH_NOARGS) {
                getters[i] = descr->d_method->ml_meth;
            }
        }
        Py_DECREF(found);
    }
    Py_XSETREF(resolved, (PyTypeObject *)Py_NewRef(type));
    return 0;
}

/* message.<method i>() as a new reference. */
static PyObject *get(PyObject *message, int i) {
    return getters[i] ? getters[i](message, NULL) : PyObject_CallMethodNoArgs(message, names[i]);
}

static PyObject *new_tuple(PyTypeObject *type, Py_ssize_t n) {
    return type->tp_alloc(type, n);
}

/* A ConsumedRun of the given items (references stolen; NULL items make it fail). */
static PyObject *run_of(PyObject *items[RUN_SIZE]) {
    PyObject *run = NULL;
    int complete = 1;
    for (int i = 0; i < RUN_SIZE; i++) complete &= items[i] != NULL;
    if (complete) run = new_tuple((PyTypeObject *)run_type, RUN_SIZE);
    if (!run) {
        for (int i = 0; i < RUN_SIZE; i++) Py_XDECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < RUN_SIZE; i++) PyTuple_SET_ITEM(run, i, items[i]);
    return run;
}

/* Append the run being gathered (if any) to `out`; 0, or -1 on error. */
static int flush(PyObject *out, PyObject **topic, PyObject **partition, PyObject **records,
                 PyObject **headers) {
    if (!*records) return 0;
    Py_ssize_t n = PyList_GET_SIZE(*records);
    PyObject *last = PyTuple_GET_ITEM(PyList_GET_ITEM(*records, n - 1), RECORD_OFFSET);
    PyObject *items[RUN_SIZE] = {
        [RUN_TOPIC] = *topic, [RUN_PARTITION] = *partition, [RUN_RECORDS] = *records,
        [RUN_HEADERS] = *headers, [RUN_ERROR] = Py_NewRef(Py_None),
        [RUN_OFFSET] = Py_NewRef(last) };
    *topic = *partition = *records = *headers = NULL;
    PyObject *run = run_of(items);
    if (!run) return -1;
    int rc = PyList_Append(out, run);
    Py_DECREF(run);
    return rc;
}

/* 1 when (topic, partition) is the run's, 0 when not, -1 on error. */
static int same_partition(PyObject *topic, PyObject *partition, PyObject *run_topic,
                          PyObject *run_partition) {
    if (!run_topic) return 0;
    int same = topic == run_topic ? 1 : PyObject_RichCompareBool(topic, run_topic, Py_EQ);
    if (same != 1) return same;
    return partition == run_partition ? 1
           : PyObject_RichCompareBool(partition, run_partition, Py_EQ);
}

/* A record's header: `header` with its offsets, timestamp type and timestamps set. */
static PyObject *header_of(PyObject *header, PyObject *offset, PyObject *type,
                           PyObject *timestamp) {
    PyObject *h = new_tuple(Py_TYPE(header), HEADER_SIZE);
    if (!h) return NULL;
    for (int i = 0; i < HEADER_SIZE; i++) {
        PyObject *v = PyTuple_GET_ITEM(header, i);
        switch (i) {
        case HEADER_BASE_OFFSET: case HEADER_LAST_OFFSET: v = offset; break;
        case HEADER_TIMESTAMP_TYPE: v = type; break;
        case HEADER_BASE_TIMESTAMP: case HEADER_MAX_TIMESTAMP: v = timestamp; break;
        default: break;
        }
        PyTuple_SET_ITEM(h, i, Py_NewRef(v));
    }
    return h;
}

/* Append `message`'s record and header to the run's lists; 0, or -1 on error. */
static int add_record(PyObject *message, PyObject *header, PyObject *types, PyObject *records,
                      PyObject *headers) {
    PyObject *offset = get(message, M_OFFSET), *stamp = NULL, *key = NULL, *value = NULL;
    PyObject *record = NULL, *h = NULL;
    int rc = -1;
    if (!offset || !(stamp = get(message, M_TIMESTAMP))) goto done;
    if (!PyTuple_Check(stamp) || PyTuple_GET_SIZE(stamp) != 2) {
        PyErr_SetString(PyExc_TypeError, "a message's timestamp() is a (kind, timestamp) pair");
        goto done;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(stamp, 0));
    if (kind == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t known = PyTuple_GET_SIZE(types);
    PyObject *type = PyTuple_GET_ITEM(types, kind >= 0 && kind < known ? kind : 0);
    PyObject *timestamp = PyTuple_GET_ITEM(stamp, 1);
    if (!(key = get(message, M_KEY)) || !(value = get(message, M_VALUE))) goto done;
    if (!(record = new_tuple((PyTypeObject *)record_type, RECORD_SIZE))) goto done;
    PyTuple_SET_ITEM(record, RECORD_OFFSET, Py_NewRef(offset));
    PyTuple_SET_ITEM(record, RECORD_TIMESTAMP, Py_NewRef(timestamp));
    PyTuple_SET_ITEM(record, RECORD_SEQUENCE, Py_NewRef(minus_one));
    PyTuple_SET_ITEM(record, RECORD_KEY, Py_NewRef(key));
    PyTuple_SET_ITEM(record, RECORD_VALUE, Py_NewRef(value));
    PyTuple_SET_ITEM(record, RECORD_HEADERS, Py_NewRef(no_headers));
    if (!(h = header_of(header, offset, type, timestamp))) goto done;
    if (PyList_Append(records, record) < 0 || PyList_Append(headers, h) < 0) goto done;
    rc = 0;
done:
    Py_XDECREF(offset);
    Py_XDECREF(stamp);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(record);
    Py_XDECREF(h);
    return rc;
}

PyObject *native_consumed_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])
        || PyTuple_GET_SIZE(args[1]) != HEADER_SIZE || !PyTuple_Check(args[2])
        || PyTuple_GET_SIZE(args[2]) < 1) {
        PyErr_SetString(PyExc_TypeError,
                        "consumed_runs(list of messages, header, timestamp types)");
        return NULL;
    }
    if (load_types() < 0) return NULL;
    PyObject *messages = args[0], *header = args[1], *types = args[2];
    PyObject *out = PyList_New(0);
    PyObject *topic = NULL, *partition = NULL, *records = NULL, *headers = NULL;
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        if (Py_TYPE(message) != resolved && resolve(Py_TYPE(message)) < 0) goto fail;
        PyObject *error = get(message, M_ERROR);
        if (!error) goto fail;
        PyObject *at_topic = get(message, M_TOPIC);
        PyObject *at_partition = at_topic ? get(message, M_PARTITION) : NULL;
        if (!at_partition) { Py_XDECREF(at_topic); Py_DECREF(error); goto fail; }
        if (error != Py_None) {
            PyObject *items[RUN_SIZE] = {
                [RUN_TOPIC] = at_topic, [RUN_PARTITION] = at_partition,
                [RUN_RECORDS] = PyList_New(0), [RUN_HEADERS] = PyList_New(0),
                [RUN_ERROR] = error, [RUN_OFFSET] = get(message, M_OFFSET) };
            if (flush(out, &topic, &partition, &records, &headers) < 0) {
                for (int j = 0; j < RUN_SIZE; j++) Py_XDECREF(items[j]);
                goto fail;
            }
            PyObject *run = run_of(items);
            if (!run) goto fail;
            int rc = PyList_Append(out, run);
            Py_DECREF(run);
            if (rc < 0) goto fail;
            continue;
        }
        Py_DECREF(error);
        int same = same_partition(at_topic, at_partition, topic, partition);
        if (same < 0) { Py_DECREF(at_topic); Py_DECREF(at_partition); goto fail; }
        if (same) {
            Py_DECREF(at_topic);
            Py_DECREF(at_partition);
        } else {
            if (flush(out, &topic, &partition, &records, &headers) < 0) {
                Py_DECREF(at_topic);
                Py_DECREF(at_partition);
                goto fail;
            }
            topic = at_topic;
            partition = at_partition;
            records = PyList_New(0);
            headers = PyList_New(0);
            if (!records || !headers) goto fail;
        }
        if (add_record(message, header, types, records, headers) < 0) goto fail;
    }
    if (flush(out, &topic, &partition, &records, &headers) < 0) goto fail;
    return out;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(records);
    Py_XDECREF(headers);
    Py_DECREF(out);
    return NULL;
}
