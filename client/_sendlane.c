/* The producer's send lane: AsyncProducer.send's common case in one C call (CPython C API).
 *
 * A keyless record of bytes, with no partition, headers, timestamp or callback given, goes to its topic's
 * sticky partition: into the open batch the producer's Python path chose for the topic's last such record.
 * The Python path arms the lane with that batch (arm); the lane then appends later records to it itself,
 * doing what the Python path would do with the same state (tierlog/client/producer.py, _enqueue_now, is
 * the reference), and answers None, having changed nothing, whenever anything else could happen:
 *
 *   - the value is not bytes, or any of key, partition, headers, timestamp, callback is given;
 *   - the topic is not armed, or the router's metadata snapshot is no longer the one it was armed with;
 *   - the producer is fatal (its idempotence state has a fatal error) or the lane is closed;
 *   - the batch is full (the sender drained it, or it expired or was aborted: each marks it full), or the
 *     record does not fit it (the Python path then seals it and opens the next);
 *   - the record exceeds the record limit, or buffer_memory has no room or a sender waits for some.
 *
 * It reads and writes the same Python attributes the Python path does (the accumulator's _used, the
 * batch's records, size and full), so the two paths interleave freely on the producer's event loop. Not
 * thread-safe, as the accumulator is not.
 *
 * The handle it answers is an instance of the producer's FutureRecordMetadata class, filled slot by slot
 * (the class must be a plain slotted class with object slots _batch, _index and _cancelled).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

/* the attribute names the lane reads and writes (interned once), and the empty headers tuple */
static PyObject *str_used, *str_waiting, *str_records, *str_size, *str_full, *str_fatal, *str_snapshot,
    *str_wakeup, *str_set, *empty_tuple;

typedef struct {
    PyObject_HEAD
    PyObject *accumulator;
    PyObject *router;
    PyObject *idempotence; /* None when the producer is not idempotent */
    PyTypeObject *handle_type;
    PyObject *make_record;
    PyObject *batches; /* dict: topic -> the open batch of its sticky partition */
    PyObject *snapshot; /* the router snapshot the batches were armed under */
    Py_ssize_t handle_slots[3]; /* byte offsets of _batch, _index, _cancelled */
    long long batch_size;
    long long memory;
    long long record_limit;
    long long overhead; /* the Python path's RECORD_OVERHEAD: a record's framing at worst */
    int closed;
} SendLane;

/* The byte offset of cls's own object slot name, inside its instances. */
static int
slot_offset(PyTypeObject *cls, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyDict_GetItemString(cls->tp_dict, name);
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
        ((PyDescrObject *)descr)->d_type != cls) {
        PyErr_Format(PyExc_TypeError, "the handle class has no slot %s of its own", name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY) ||
        member->offset < (Py_ssize_t)sizeof(PyObject) ||
        member->offset > cls->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
        PyErr_Format(PyExc_TypeError, "the handle class's %s is not a writable object slot", name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

static int
lane_init(SendLane *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"accumulator", "router", "idempotence", "handle_type", "make_record",
                             "batch_size", "buffer_memory", "record_limit", "overhead", NULL};
    PyObject *acc, *router, *idempotence, *handle_type, *make_record;
    long long batch_size, memory, record_limit, overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOLLLL", kwlist, &acc, &router, &idempotence,
                                     &handle_type, &make_record, &batch_size, &memory, &record_limit,
                                     &overhead)) {
        return -1;
    }
    if (!PyType_Check(handle_type)) {
        PyErr_SetString(PyExc_TypeError, "handle_type must be a class");
        return -1;
    }
    PyTypeObject *cls = (PyTypeObject *)handle_type;
    /* a plain slotted class: allocated by the generic allocator, no __dict__, no __init__ of its own to
       skip beyond setting the three slots */
    if (cls->tp_alloc != PyType_GenericAlloc || cls->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "handle_type must be a plain slotted class");
        return -1;
    }
    static const char *names[3] = {"_batch", "_index", "_cancelled"};
    Py_ssize_t slots[3];
    for (int k = 0; k < 3; k++) {
        if (slot_offset(cls, names[k], &slots[k]) < 0) {
            return -1;
        }
    }
    if (!PyCallable_Check(make_record)) {
        PyErr_SetString(PyExc_TypeError, "make_record must be callable");
        return -1;
    }
    if (batch_size <= 0 || memory <= 0 || record_limit <= 0 || overhead < 0) {
        PyErr_SetString(PyExc_ValueError, "batch_size, buffer_memory and record_limit must be positive");
        return -1;
    }
    PyObject *batches = PyDict_New();
    if (batches == NULL) {
        return -1;
    }
    Py_XSETREF(self->accumulator, Py_NewRef(acc));
    Py_XSETREF(self->router, Py_NewRef(router));
    Py_XSETREF(self->idempotence, Py_NewRef(idempotence));
    Py_XSETREF(self->handle_type, (PyTypeObject *)Py_NewRef(handle_type));
    Py_XSETREF(self->make_record, Py_NewRef(make_record));
    Py_XSETREF(self->batches, batches);
    Py_XSETREF(self->snapshot, Py_NewRef(Py_None));
    memcpy(self->handle_slots, slots, sizeof(slots));
    self->batch_size = batch_size;
    self->memory = memory;
    self->record_limit = record_limit;
    self->overhead = overhead;
    self->closed = 0;
    return 0;
}

static int
lane_traverse(SendLane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->accumulator);
    Py_VISIT(self->router);
    Py_VISIT(self->idempotence);
    Py_VISIT(self->handle_type);
    Py_VISIT(self->make_record);
    Py_VISIT(self->batches);
    Py_VISIT(self->snapshot);
    return 0;
}

static int
lane_clear(SendLane *self)
{
    Py_CLEAR(self->batches); /* first: send, arm and close check it before touching the rest */
    Py_CLEAR(self->accumulator);
    Py_CLEAR(self->router);
    Py_CLEAR(self->idempotence);
    Py_CLEAR(self->handle_type);
    Py_CLEAR(self->make_record);
    Py_CLEAR(self->snapshot);
    return 0;
}

static void
lane_dealloc(SendLane *self)
{
    PyObject_GC_UnTrack(self);
    lane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An int attribute of obj as a long long; -1 with an error set if it is missing or not an int. */
static int
get_ll(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Whether the lane is still valid for the router's current snapshot: 1 yes, 0 no (the batches are
   dropped), -1 error. */
static int
snapshot_current(SendLane *self)
{
    PyObject *current = PyObject_GetAttr(self->router, str_snapshot);
    if (current == NULL) {
        return -1;
    }
    int same = current == self->snapshot;
    Py_DECREF(current);
    if (!same) {
        PyDict_Clear(self->batches);
    }
    return same;
}

/* send(topic, value, key, partition, headers, timestamp, callback) -> a handle, or None having changed
   nothing (see the top of the file for when). */
static PyObject *
lane_send(SendLane *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "send(topic, value, key, partition, headers, timestamp, callback)");
        return NULL;
    }
    if (self->batches == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SendLane.__init__ was not called");
        return NULL;
    }
    PyObject *topic = args[0], *value = args[1];
    if (self->closed || !PyBytes_CheckExact(value)) {
        Py_RETURN_NONE;
    }
    for (int k = 2; k < 7; k++) {
        if (args[k] != Py_None) {
            Py_RETURN_NONE;
        }
    }
    PyObject *batch = PyDict_GetItemWithError(self->batches, topic); /* borrowed */
    if (batch == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_INCREF(batch); /* the dict may drop it below */
    PyObject *result = NULL, *records = NULL, *record = NULL, *stamp = NULL;
    PyObject *new_size = NULL, *new_used = NULL;
    int ok = snapshot_current(self);
    if (ok < 0) {
        goto error;
    }
    if (ok == 0) {
        goto fallback;
    }
    if (self->idempotence != Py_None) {
        PyObject *fatal = PyObject_GetAttr(self->idempotence, str_fatal);
        if (fatal == NULL) {
            goto error;
        }
        ok = fatal == Py_None;
        Py_DECREF(fatal);
        if (!ok) {
            goto fallback;
        }
    }
    PyObject *full = PyObject_GetAttr(batch, str_full);
    if (full == NULL) {
        goto error;
    }
    ok = full == Py_False;
    Py_DECREF(full);
    if (!ok) {
        if (PyDict_DelItem(self->batches, topic) < 0) {
            goto error;
        }
        goto fallback;
    }
    long long size = self->overhead + PyBytes_GET_SIZE(value);
    if (size > self->record_limit) {
        goto fallback;
    }
    long long waiting, used, batch_bytes;
    if (get_ll(self->accumulator, str_waiting, &waiting) < 0 ||
        get_ll(self->accumulator, str_used, &used) < 0 || get_ll(batch, str_size, &batch_bytes) < 0) {
        goto error;
    }
    if (waiting != 0 || used + size > self->memory || batch_bytes + size > self->batch_size) {
        goto fallback;
    }
    records = PyObject_GetAttr(batch, str_records);
    if (records == NULL) {
        goto error;
    }
    if (!PyList_CheckExact(records)) {
        goto fallback;
    }
    /* the wall clock in ms, exactly as int(time.time() * 1000): the same clock, the same doubles
       (CPython divides the nanoseconds by 1e9 unless they are whole seconds), truncated */
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    long long ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    volatile double seconds = ns % 1000000000LL == 0 ? (double)(ns / 1000000000LL) : (double)ns / 1e9;
    volatile double millis = seconds * 1000.0;
    stamp = PyLong_FromDouble(millis);
    if (stamp == NULL) {
        goto error;
    }
    PyObject *call_args[4] = {Py_None, value, empty_tuple, stamp};
    record = PyObject_Vectorcall(self->make_record, call_args, 4, NULL);
    if (record == NULL) {
        goto error;
    }
    PyObject *handle = self->handle_type->tp_alloc(self->handle_type, 0);
    if (handle == NULL) {
        goto error;
    }
    Py_ssize_t index = PyList_GET_SIZE(records);
    PyObject *index_obj = PyLong_FromSsize_t(index);
    if (index_obj == NULL) {
        Py_DECREF(handle);
        goto error;
    }
    *(PyObject **)((char *)handle + self->handle_slots[0]) = Py_NewRef(batch);
    *(PyObject **)((char *)handle + self->handle_slots[1]) = index_obj;
    *(PyObject **)((char *)handle + self->handle_slots[2]) = Py_NewRef(Py_False);
    new_size = PyLong_FromLongLong(batch_bytes + size);
    new_used = PyLong_FromLongLong(used + size);
    if (new_size == NULL || new_used == NULL) {
        Py_DECREF(handle);
        goto error;
    }
    /* from here on the record is in: append it, then account for it as the Python path does (replacing
       two existing attribute values allocates nothing) */
    if (PyList_Append(records, record) < 0) {
        Py_DECREF(handle);
        goto error;
    }
    if (PyObject_SetAttr(batch, str_size, new_size) < 0 ||
        PyObject_SetAttr(self->accumulator, str_used, new_used) < 0) {
        Py_DECREF(handle);
        goto error;
    }
    if (batch_bytes + size >= self->batch_size) { /* sealed: the sender may take it at once */
        if (PyObject_SetAttr(batch, str_full, Py_True) < 0 || PyDict_DelItem(self->batches, topic) < 0) {
            Py_DECREF(handle);
            goto error;
        }
        PyObject *wakeup = PyObject_GetAttr(self->accumulator, str_wakeup);
        PyObject *done = wakeup == NULL ? NULL : PyObject_CallMethodNoArgs(wakeup, str_set);
        Py_XDECREF(wakeup);
        if (done == NULL) {
            Py_DECREF(handle);
            goto error;
        }
        Py_DECREF(done);
    }
    result = handle;
    goto finish;
fallback:
    result = Py_NewRef(Py_None);
    goto finish;
error:
    result = NULL;
finish:
    Py_XDECREF(new_size);
    Py_XDECREF(new_used);
    Py_XDECREF(stamp);
    Py_XDECREF(record);
    Py_XDECREF(records);
    Py_DECREF(batch);
    return result;
}

/* arm(topic, batch, snapshot): records of topic may go to batch (open, the tail of its sticky partition's
   queue) while the router's snapshot is snapshot. A new snapshot drops every armed topic. */
static PyObject *
lane_arm(SendLane *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "arm(topic, batch, snapshot)");
        return NULL;
    }
    if (self->batches == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SendLane.__init__ was not called");
        return NULL;
    }
    if (self->closed) {
        Py_RETURN_NONE;
    }
    if (args[2] != self->snapshot) {
        PyDict_Clear(self->batches);
        Py_SETREF(self->snapshot, Py_NewRef(args[2]));
    }
    if (PyDict_SetItem(self->batches, args[0], args[1]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* close(): every later send answers None; the armed batches are dropped. */
static PyObject *
lane_close(SendLane *self, PyObject *Py_UNUSED(ignored))
{
    self->closed = 1;
    if (self->batches != NULL) {
        PyDict_Clear(self->batches);
    }
    Py_RETURN_NONE;
}

static PyMethodDef lane_methods[] = {
    {"send", (PyCFunction)(void (*)(void))lane_send, METH_FASTCALL,
     "send(topic, value, key, partition, headers, timestamp, callback) -> a handle, or None"},
    {"arm", (PyCFunction)(void (*)(void))lane_arm, METH_FASTCALL, "arm(topic, batch, snapshot)"},
    {"close", (PyCFunction)lane_close, METH_NOARGS, "close(): every later send answers None"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef lane_members[] = {
    {"batches", T_OBJECT, offsetof(SendLane, batches), READONLY, "topic -> the armed open batch"},
    {"snapshot", T_OBJECT, offsetof(SendLane, snapshot), READONLY,
     "the snapshot the batches were armed under"},
    {"closed", T_BOOL, offsetof(SendLane, closed), READONLY, "whether close() was called"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SendLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tierlog.client._sendlane.SendLane",
    .tp_basicsize = sizeof(SendLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SendLane(accumulator, router, idempotence, handle_type, make_record, batch_size, "
              "buffer_memory, record_limit, overhead): AsyncProducer.send's common case in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lane_init,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_methods = lane_methods,
    .tp_members = lane_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sendlane", "AsyncProducer.send's common case in C (see producer.py).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__sendlane(void)
{
#define INTERN(var, text)                                                                                    \
    if ((var = PyUnicode_InternFromString(text)) == NULL) {                                                  \
        return NULL;                                                                                         \
    }
    INTERN(str_used, "_used");
    INTERN(str_waiting, "_waiting");
    INTERN(str_records, "records");
    INTERN(str_size, "size");
    INTERN(str_full, "full");
    INTERN(str_fatal, "fatal");
    INTERN(str_snapshot, "_snapshot");
    INTERN(str_wakeup, "wakeup");
    INTERN(str_set, "set");
#undef INTERN
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL || PyType_Ready(&SendLaneType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "SendLane", (PyObject *)&SendLaneType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
