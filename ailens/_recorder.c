/* The event buffer's hot path in C: ailens/record/buffer.py's EventBuffer, same semantics.
 *
 * collective_begin/collective_end are bound to Recorder.begin/end. With the Lens's default
 * clock (time.perf_counter_ns) and the cpu-ns counter (time.process_time_ns) both readings
 * are taken here with clock_gettime (CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID: the clocks
 * those two functions read on Linux), so a pair costs two method calls, two vDSO clock reads
 * and two CPU-time syscalls. Any other clock or counter (a test's fake, the perf counter) is
 * called as the Python callable it is. No Python object is made per event.
 *
 * Locking: end() may run on a framework thread while the training thread flushes. The flush
 * runs Python code under `with buf.lock:`, so end() takes the same lock (a C lock here,
 * released while waiting, so a waiting end() never holds the GIL). begin() runs on the
 * training thread, like the flush, and takes no lock (as in the Python version).
 *
 * Faults: a failure inside begin/end (an Exception, not BaseException) calls on_fault(exc)
 * and the tick still counts; the Lens then disables itself. Nothing here raises into training
 * except a wrong call signature or an exception raised by on_fault itself.
 *
 * Bump RECORDER_ABI when the interface to record/buffer.py changes: a stale build is then refused
 * there and the Python path is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#define RECORDER_ABI 3

/* The step log is handed to the writer (on_full) when it holds STEP_CAP step ends or its last
 * hand-over is STEP_FLUSH_NS old: record/buffer.py's STEP_CAP and STEP_FLUSH_NS. */
#define STEP_CAP 1024
#define STEP_FLUSH_NS 10000000000LL

/* How a reading is taken: by calling a Python callable, natively, or not at all (0). */
enum { READ_CALL = 0, READ_NATIVE = 1, READ_ZERO = 2 };

static PyObject *perf_counter_ns_fn; /* time.perf_counter_ns, compared by identity */
static PyObject *process_time_ns_fn; /* time.process_time_ns */

/* ------------------------------------------------------------------ Lock */

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
} LockObject;

static inline void lock_acquire(LockObject *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static PyObject *Lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    LockObject *self = (LockObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void Lock_dealloc(LockObject *self)
{
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Lock_acquire(LockObject *self, PyObject *Py_UNUSED(args))
{
    lock_acquire(self);
    Py_RETURN_TRUE;
}

static PyObject *Lock_release(LockObject *self, PyObject *Py_UNUSED(args))
{
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *Lock_exit(LockObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *Lock_locked(LockObject *self, PyObject *Py_UNUSED(args))
{
    if (PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        PyThread_release_lock(self->lock);
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef Lock_methods[] = {
    {"acquire", (PyCFunction)Lock_acquire, METH_NOARGS, "Block until the lock is held."},
    {"release", (PyCFunction)Lock_release, METH_NOARGS, "Release the lock."},
    {"__enter__", (PyCFunction)Lock_acquire, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Lock_exit, METH_FASTCALL, NULL},
    {"locked", (PyCFunction)Lock_locked, METH_NOARGS, "Whether the lock is held now."},
    {NULL},
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ailens._recorder.Lock",
    .tp_doc = "A non-reentrant lock that C code takes without a Python call.",
    .tp_basicsize = sizeof(LockObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Lock_new,
    .tp_dealloc = (destructor)Lock_dealloc,
    .tp_methods = Lock_methods,
};

/* ------------------------------------------------------------------ Recorder */

typedef struct {
    PyObject_HEAD
    /* columns, `cap` rows each; rows [0, n) are in use, row 0 is tick `base` */
    uint16_t *c_op;
    uint32_t *c_step;
    int64_t *c_nbytes, *c_begin, *c_end, *c_work;
    Py_ssize_t cap, n;
    long long ticks, step, oldest_open, base;
    int64_t t0, mark; /* mark: the counter at the last collective event */
    int clock_how, work_how;
    PyObject *clock, *read_work, *intern, *on_fault, *on_full, *op_ids;
    PyObject *last_op; /* the op of the last begin and its id: skips the dict lookup */
    long last_op_id;
    LockObject *lock;
    /* the step log: step ends not handed to the writer yet (log_step, _take_steps) */
    uint32_t *s_step;
    int64_t *s_t, *s_work;
    Py_ssize_t s_cap, s_n;
    int64_t work0, s_taken; /* the counter at the start; CLOCK_MONOTONIC at the last take */
} Recorder;

static int grow_columns(Recorder *self, Py_ssize_t cap)
{
    void **cols[] = {(void **)&self->c_op,    (void **)&self->c_step,  (void **)&self->c_nbytes,
                     (void **)&self->c_begin, (void **)&self->c_end,   (void **)&self->c_work};
    size_t sizes[] = {2, 4, 8, 8, 8, 8};
    for (int k = 0; k < 6; k++) {
        void *p = PyMem_RawRealloc(*cols[k], (size_t)cap * sizes[k]);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1; /* the columns grown so far are merely larger than cap: harmless */
        }
        *cols[k] = p;
    }
    self->cap = cap;
    return 0;
}

static inline int call_int(PyObject *fn, int64_t *out)
{
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL)
        return -1;
    long long v = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static inline int64_t timespec_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int read_clock(Recorder *self, int64_t *out)
{
    if (self->clock_how == READ_NATIVE) {
        *out = timespec_ns(CLOCK_MONOTONIC);
        return 0;
    }
    return call_int(self->clock, out);
}

static inline int read_work(Recorder *self, int64_t *out)
{
    if (self->work_how == READ_NATIVE) {
        *out = timespec_ns(CLOCK_PROCESS_CPUTIME_ID);
        return 0;
    }
    if (self->work_how == READ_ZERO) {
        *out = 0;
        return 0;
    }
    return call_int(self->read_work, out);
}

/* The pending exception is an Exception: hand it to `obj(exc)`, or to `obj.<name>(exc)` when
 * `name` is given (returns 0); a BaseException (KeyboardInterrupt, SystemExit) or an error in
 * that call stays raised (returns -1). */
static int hand_over(PyObject *obj, PyObject *name)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *args[2] = {obj, value};
    PyObject *r = name == NULL ? PyObject_CallOneArg(obj, value)
                               : PyObject_VectorcallMethod(name, args, 2, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* A fault inside begin/end goes to on_fault (see hand_over). */
static int fault(Recorder *self)
{
    return hand_over(self->on_fault, NULL);
}

static int not_ready(Recorder *self)
{
    if (self->op_ids != NULL)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "Recorder.__init__ was not called");
    return 1;
}

static PyObject *count_tick(Recorder *self)
{
    return PyLong_FromLongLong(self->ticks++);
}

/* The op's small integer id: op_ids[op], or a new one from intern(op). */
static long op_id_of(Recorder *self, PyObject *op)
{
    PyObject *id = PyDict_GetItemWithError(self->op_ids, op); /* borrowed */
    if (id != NULL)
        Py_INCREF(id);
    else {
        if (PyErr_Occurred())
            return -1;
        if (!PyUnicode_Check(op) || PyUnicode_GET_LENGTH(op) == 0) {
            PyErr_Format(PyExc_TypeError, "collective op must be a non-empty str, got %R", op);
            return -1;
        }
        id = PyObject_CallOneArg(self->intern, op);
        if (id == NULL)
            return -1;
        if (PyDict_SetItem(self->op_ids, op, id) < 0) {
            Py_DECREF(id);
            return -1;
        }
    }
    long v = PyLong_AsLong(id);
    Py_DECREF(id);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > UINT16_MAX) {
        PyErr_Format(PyExc_OverflowError, "op id %ld does not fit uint16", v);
        return -1;
    }
    return v;
}

static PyObject *Recorder_begin(Recorder *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"op", "nbytes"};
    PyObject *argv[2] = {NULL, NULL};
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > 2)
        goto bad_args;
    for (Py_ssize_t k = 0; k < nargs; k++)
        argv[k] = args[k];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int j = 0; j < 2; j++)
            if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0)
                slot = j;
        if (slot < 0 || argv[slot] != NULL)
            goto bad_args;
        argv[slot] = args[nargs + k];
    }
    if (argv[0] == NULL || argv[1] == NULL)
        goto bad_args;
    if (not_ready(self))
        return NULL;

    int64_t t, w;
    if (read_clock(self, &t) < 0 || read_work(self, &w) < 0)
        goto failed;
    Py_ssize_t i = self->n;
    if (i == self->cap) {
        if (self->on_full != Py_None) {
            PyObject *r = PyObject_CallNoArgs(self->on_full);
            if (r == NULL)
                goto failed;
            Py_DECREF(r);
        }
        i = self->n;
        if (i >= self->cap) {
            PyErr_SetString(PyExc_IndexError, "event buffer full");
            goto failed;
        }
    }
    long op_id = self->last_op_id;
    if (argv[0] != self->last_op) {
        op_id = op_id_of(self, argv[0]);
        if (op_id < 0)
            goto failed;
        Py_XSETREF(self->last_op, Py_NewRef(argv[0]));
        self->last_op_id = op_id;
    }
    long long nbytes = PyLong_AsLongLong(argv[1]);
    if (nbytes == -1 && PyErr_Occurred())
        goto failed;
    if (self->step < 0 || self->step > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "step %lld does not fit uint32", self->step);
        goto failed;
    }
    self->c_op[i] = (uint16_t)op_id;
    self->c_step[i] = (uint32_t)self->step;
    self->c_nbytes[i] = nbytes;
    self->c_begin[i] = t - self->t0;
    self->c_end[i] = -1;
    self->c_work[i] = w - self->mark;
    self->mark = w;
    self->n = i + 1;
    return count_tick(self);

failed:
    if (fault(self) < 0)
        return NULL;
    return count_tick(self);
bad_args:
    PyErr_SetString(PyExc_TypeError, "begin(op, nbytes) takes exactly 2 arguments");
    return NULL;
}

static void advance_open(Recorder *self)
{
    long long tick = self->oldest_open + 1, stop = self->ticks;
    /* rows past n hold no collective: stop there (memory safety for a broken tick count) */
    if (stop > self->base + self->n)
        stop = self->base + self->n;
    while (tick < stop && self->c_end[tick - self->base] >= 0)
        tick++;
    self->oldest_open = tick;
}

static PyObject *Recorder_end(Recorder *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    PyObject *tick_obj = nargs ? args[0] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > 1 || nargs + nkw > 1 ||
        (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "tick") != 0)) {
        PyErr_SetString(PyExc_TypeError, "end(tick=None) takes at most 1 argument");
        return NULL;
    }
    if (nkw)
        tick_obj = args[0];
    if (not_ready(self))
        return NULL;
    lock_acquire(self->lock); /* a flush on the training thread may be moving rows now */
    int64_t t, w;
    long long tick;
    if (read_clock(self, &t) < 0)
        goto failed;
    if (tick_obj == NULL || tick_obj == Py_None)
        tick = self->oldest_open;
    else {
        tick = PyLong_AsLongLong(tick_obj);
        if (tick == -1 && PyErr_Occurred())
            goto failed;
    }
    long long row = tick - self->base;
    if (0 <= row && row < self->n && self->c_end[row] < 0) {
        self->c_end[row] = t - self->t0;
        if (tick == self->oldest_open) {
            if (tick + 1 == self->ticks) /* the common, blocking case */
                self->oldest_open = tick + 1;
            else
                advance_open(self);
        }
        /* The work mark moves only when nothing stays in flight (see PyEventBuffer.end). */
        if (self->oldest_open >= self->ticks) {
            if (read_work(self, &w) < 0)
                goto failed;
            self->mark = w;
        }
    }
    PyThread_release_lock(self->lock->lock);
    Py_RETURN_NONE;

failed:
    PyThread_release_lock(self->lock->lock);
    if (fault(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_count(Recorder *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    if (nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0) != 2) {
        PyErr_SetString(PyExc_TypeError, "count(op, nbytes) takes exactly 2 arguments");
        return NULL;
    }
    return count_tick(self);
}

static PyObject *Recorder_ignore(Recorder *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    if (nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0) > 1) {
        PyErr_SetString(PyExc_TypeError, "ignore(tick=None) takes at most 1 argument");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _append_rows(op, step, nbytes, t_begin, t_end, work): k complete rows from six contiguous
 * buffers (uint16, uint32, int64 x4; record() in record/buffer.py builds them). Like begin(), a
 * full buffer calls on_full first; rows still open at the front then make it grow to fit. */
static PyObject *Recorder_append_rows(Recorder *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const Py_ssize_t itemsize[6] = {2, 4, 8, 8, 8, 8};
    Py_buffer views[6];
    int got = 0;
    PyObject *result = NULL;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_append_rows takes 6 columns");
        return NULL;
    }
    if (not_ready(self))
        return NULL;
    for (; got < 6; got++)
        if (PyObject_GetBuffer(args[got], &views[got], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
    Py_ssize_t k = views[0].len / itemsize[0];
    for (int c = 0; c < 6; c++)
        if (views[c].itemsize != itemsize[c] || views[c].len != k * itemsize[c]) {
            PyErr_Format(PyExc_ValueError, "column %d: want %zd items of %zd bytes", c, k,
                         itemsize[c]);
            goto done;
        }
    if (self->n + k > self->cap && self->on_full != Py_None) {
        PyObject *r = PyObject_CallNoArgs(self->on_full);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    }
    if (self->n + k > self->cap && grow_columns(self, self->n + k) < 0)
        goto done;
    Py_ssize_t i = self->n;
    memcpy(self->c_op + i, views[0].buf, k * 2);
    memcpy(self->c_step + i, views[1].buf, k * 4);
    memcpy(self->c_nbytes + i, views[2].buf, k * 8);
    memcpy(self->c_begin + i, views[3].buf, k * 8);
    memcpy(self->c_end + i, views[4].buf, k * 8);
    memcpy(self->c_work + i, views[5].buf, k * 8);
    self->n = i + k;
    result = Py_NewRef(Py_None);
done:
    while (got > 0)
        PyBuffer_Release(&views[--got]);
    return result;
}

static int grow_steps(Recorder *self)
{
    Py_ssize_t cap = self->s_cap ? 2 * self->s_cap : STEP_CAP;
    uint32_t *s = PyMem_RawRealloc(self->s_step, (size_t)cap * 4);
    if (s != NULL)
        self->s_step = s;
    int64_t *t = s == NULL ? NULL : PyMem_RawRealloc(self->s_t, (size_t)cap * 8);
    if (t != NULL)
        self->s_t = t;
    int64_t *w = t == NULL ? NULL : PyMem_RawRealloc(self->s_work, (size_t)cap * 8);
    if (w == NULL) {
        PyErr_NoMemory();
        return -1; /* the columns grown so far are merely larger than s_cap: harmless */
    }
    self->s_work = w;
    self->s_cap = cap;
    return 0;
}

/* log_step(): a step end now, in the step log as (step, time, work since the start); returns
 * the time (ns since t0). One call per step: on_full (the writer hand-over) when the log is
 * full or its last hand-over is old. Errors (a Python clock's) are raised: the caller faults. */
static PyObject *Recorder_log_step(Recorder *self, PyObject *Py_UNUSED(args))
{
    int64_t t, w;
    if (not_ready(self) || read_clock(self, &t) < 0 || read_work(self, &w) < 0)
        return NULL;
    if (self->s_n == self->s_cap && grow_steps(self) < 0)
        return NULL;
    Py_ssize_t i = self->s_n++;
    self->s_step[i] = (uint32_t)self->step;
    self->s_t[i] = t - self->t0;
    self->s_work[i] = w - self->work0;
    /* the native clock is CLOCK_MONOTONIC already: no second reading */
    int64_t now = self->clock_how == READ_NATIVE ? t : timespec_ns(CLOCK_MONOTONIC);
    if ((self->s_n >= STEP_CAP || now - self->s_taken > STEP_FLUSH_NS) &&
        self->on_full != Py_None) {
        PyObject *r = PyObject_CallNoArgs(self->on_full);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    return PyLong_FromLongLong(t - self->t0);
}

/* _take_steps() -> (step, t, work) bytearrays of the step log, emptied; None when empty. */
static PyObject *Recorder_take_steps(Recorder *self, PyObject *Py_UNUSED(args))
{
    if (not_ready(self))
        return NULL;
    self->s_taken = timespec_ns(CLOCK_MONOTONIC);
    Py_ssize_t k = self->s_n;
    if (k == 0)
        Py_RETURN_NONE;
    PyObject *r = Py_BuildValue("(NNN)",
                                PyByteArray_FromStringAndSize((char *)self->s_step, k * 4),
                                PyByteArray_FromStringAndSize((char *)self->s_t, k * 8),
                                PyByteArray_FromStringAndSize((char *)self->s_work, k * 8));
    if (r != NULL)
        self->s_n = 0;
    return r;
}

static PyObject *Recorder_read_work_now(Recorder *self, PyObject *Py_UNUSED(args))
{
    int64_t w;
    if (not_ready(self) || read_work(self, &w) < 0)
        return NULL;
    return PyLong_FromLongLong(w);
}

static PyObject *Recorder_new_op(Recorder *self, PyObject *op)
{
    if (not_ready(self))
        return NULL;
    long id = op_id_of(self, op);
    return id < 0 ? NULL : PyLong_FromLong(id);
}

static PyObject *Recorder_raw_columns(Recorder *self, PyObject *args)
{
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "nn", &start, &stop) || not_ready(self))
        return NULL;
    if (start < 0 || stop > self->cap || start > stop) {
        PyErr_Format(PyExc_ValueError, "rows [%zd, %zd) out of range (capacity %zd)", start,
                     stop, self->cap);
        return NULL;
    }
    Py_ssize_t k = stop - start;
    return Py_BuildValue(
        "(NNNNNN)",
        PyByteArray_FromStringAndSize((char *)(self->c_op + start), k * 2),
        PyByteArray_FromStringAndSize((char *)(self->c_step + start), k * 4),
        PyByteArray_FromStringAndSize((char *)(self->c_nbytes + start), k * 8),
        PyByteArray_FromStringAndSize((char *)(self->c_begin + start), k * 8),
        PyByteArray_FromStringAndSize((char *)(self->c_end + start), k * 8),
        PyByteArray_FromStringAndSize((char *)(self->c_work + start), k * 8));
}

static PyObject *Recorder_complete_rows(Recorder *self, PyObject *args)
{
    int final;
    Py_ssize_t max_cap;
    if (!PyArg_ParseTuple(args, "pn", &final, &max_cap) || not_ready(self))
        return NULL;
    long long open_rows = self->oldest_open - self->base;
    Py_ssize_t stop = final || open_rows > self->n ? self->n : (Py_ssize_t)open_rows;
    if (stop == 0 && self->n == self->cap) {
        if (self->cap < max_cap) {
            if (grow_columns(self, self->cap * 2) < 0)
                return NULL;
            return PyLong_FromLong(0);
        }
        stop = self->n;
        self->oldest_open = self->base + self->n;
    }
    return PyLong_FromSsize_t(stop);
}

static PyObject *Recorder_drop_front(Recorder *self, PyObject *arg)
{
    Py_ssize_t stop = PyLong_AsSsize_t(arg);
    if ((stop == -1 && PyErr_Occurred()) || not_ready(self))
        return NULL;
    if (stop < 0 || stop > self->n) {
        PyErr_Format(PyExc_ValueError, "cannot drop %zd of %zd rows", stop, self->n);
        return NULL;
    }
    Py_ssize_t keep = self->n - stop;
    if (keep) {
        memmove(self->c_op, self->c_op + stop, keep * sizeof *self->c_op);
        memmove(self->c_step, self->c_step + stop, keep * sizeof *self->c_step);
        memmove(self->c_nbytes, self->c_nbytes + stop, keep * sizeof *self->c_nbytes);
        memmove(self->c_begin, self->c_begin + stop, keep * sizeof *self->c_begin);
        memmove(self->c_end, self->c_end + stop, keep * sizeof *self->c_end);
        memmove(self->c_work, self->c_work + stop, keep * sizeof *self->c_work);
    }
    self->base += stop;
    self->n = keep;
    Py_RETURN_NONE;
}

static int Recorder_init(Recorder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cap", "clock", "read_work", "t0", "work0", "intern", "on_fault",
                             NULL};
    Py_ssize_t cap;
    long long t0, work0;
    PyObject *clock, *read_work, *intern, *on_fault;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n$OOLLOO", kwlist, &cap, &clock, &read_work,
                                     &t0, &work0, &intern, &on_fault))
        return -1;
    if (self->op_ids != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Recorder is already initialised");
        return -1;
    }
    if (cap < 1) {
        PyErr_Format(PyExc_ValueError, "cap must be >= 1, got %zd", cap);
        return -1;
    }
    if (grow_columns(self, cap) < 0)
        return -1;
    self->clock_how = clock == perf_counter_ns_fn ? READ_NATIVE : READ_CALL;
    self->work_how = read_work == Py_None              ? READ_ZERO
                     : read_work == process_time_ns_fn ? READ_NATIVE
                                                       : READ_CALL;
    self->t0 = t0;
    self->mark = work0;
    self->work0 = work0;
    self->s_taken = timespec_ns(CLOCK_MONOTONIC);
    Py_XSETREF(self->lock, (LockObject *)PyObject_CallNoArgs((PyObject *)&LockType));
    if (self->lock == NULL)
        return -1;
    Py_XSETREF(self->clock, Py_NewRef(clock));
    Py_XSETREF(self->read_work, Py_NewRef(read_work));
    Py_XSETREF(self->intern, Py_NewRef(intern));
    Py_XSETREF(self->on_fault, Py_NewRef(on_fault));
    Py_XSETREF(self->on_full, Py_NewRef(Py_None));
    self->op_ids = PyDict_New(); /* set last: it marks the object ready */
    return self->op_ids == NULL ? -1 : 0;
}

static int Recorder_traverse(Recorder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->clock);
    Py_VISIT(self->read_work);
    Py_VISIT(self->intern);
    Py_VISIT(self->on_fault);
    Py_VISIT(self->on_full);
    Py_VISIT(self->op_ids);
    Py_VISIT(self->last_op);
    Py_VISIT(self->lock);
    return 0;
}

static int Recorder_clear(Recorder *self)
{
    Py_CLEAR(self->clock);
    Py_CLEAR(self->read_work);
    Py_CLEAR(self->intern);
    Py_CLEAR(self->on_fault);
    Py_CLEAR(self->on_full);
    Py_CLEAR(self->op_ids);
    Py_CLEAR(self->last_op);
    Py_CLEAR(self->lock);
    return 0;
}

static void Recorder_dealloc(Recorder *self)
{
    PyObject_GC_UnTrack(self);
    Recorder_clear(self);
    PyMem_RawFree(self->c_op);
    PyMem_RawFree(self->c_step);
    PyMem_RawFree(self->c_nbytes);
    PyMem_RawFree(self->c_begin);
    PyMem_RawFree(self->c_end);
    PyMem_RawFree(self->c_work);
    PyMem_RawFree(self->s_step);
    PyMem_RawFree(self->s_t);
    PyMem_RawFree(self->s_work);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* on_full is settable; a callable or None */
static PyObject *Recorder_get_on_full(Recorder *self, void *closure)
{
    return Py_NewRef(self->on_full ? self->on_full : Py_None);
}

static int Recorder_set_on_full(Recorder *self, PyObject *value, void *closure)
{
    if (value == NULL || (value != Py_None && !PyCallable_Check(value))) {
        PyErr_SetString(PyExc_TypeError, "on_full must be a callable or None");
        return -1;
    }
    Py_XSETREF(self->on_full, Py_NewRef(value));
    return 0;
}

static PyGetSetDef Recorder_getset[] = {
    {"on_full", (getter)Recorder_get_on_full, (setter)Recorder_set_on_full,
     "Called when begin() finds the buffer full (the Lens flushes).", NULL},
    {NULL},
};

static PyMemberDef Recorder_members[] = {
    {"ticks", T_LONGLONG, offsetof(Recorder, ticks), 0, "collectives begun (also after a fault)"},
    {"step", T_LONGLONG, offsetof(Recorder, step), 0, "the step the next rows belong to"},
    {"oldest_open", T_LONGLONG, offsetof(Recorder, oldest_open), 0,
     "lowest tick whose end has not been seen"},
    {"base", T_LONGLONG, offsetof(Recorder, base), 0, "tick number of row 0"},
    {"n", T_PYSSIZET, offsetof(Recorder, n), READONLY, "rows in use"},
    {"cap", T_PYSSIZET, offsetof(Recorder, cap), READONLY, "rows allocated"},
    {"op_ids", T_OBJECT, offsetof(Recorder, op_ids), READONLY, "op name -> id"},
    {"_mark", T_LONGLONG, offsetof(Recorder, mark), 0, "the counter at the last event"},
    {"_t0", T_LONGLONG, offsetof(Recorder, t0), READONLY, "clock origin of the times"},
    {"_on_fault", T_OBJECT, offsetof(Recorder, on_fault), READONLY, "called with a fault"},
    {"lock", T_OBJECT, offsetof(Recorder, lock), READONLY, "held while rows move"},
    {NULL},
};

#define FASTCALL_KW(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef Recorder_methods[] = {
    {"begin", FASTCALL_KW(Recorder_begin), "begin(op, nbytes) -> tick: a collective starts."},
    {"end", FASTCALL_KW(Recorder_end), "end(tick=None): the oldest open collective, or tick, ends."},
    {"count", FASTCALL_KW(Recorder_count), "count(op, nbytes) -> tick: the disabled begin."},
    {"ignore", FASTCALL_KW(Recorder_ignore), "ignore(tick=None): the disabled end."},
    {"_append_rows", (PyCFunction)(void (*)(void))Recorder_append_rows, METH_FASTCALL,
     "_append_rows(op, step, nbytes, t_begin, t_end, work): complete rows at the end."},
    {"log_step", (PyCFunction)Recorder_log_step, METH_NOARGS,
     "log_step() -> ns since t0: a step end now, in the step log (the step is `step`)."},
    {"_take_steps", (PyCFunction)Recorder_take_steps, METH_NOARGS,
     "_take_steps() -> (step, t, work) bytearrays of the step log, emptied; None if empty."},
    {"_read_work", (PyCFunction)Recorder_read_work_now, METH_NOARGS,
     "_read_work() -> the work counter now."},
    {"_new_op", (PyCFunction)Recorder_new_op, METH_O, "_new_op(op) -> the op's id."},
    {"_raw_columns", (PyCFunction)Recorder_raw_columns, METH_VARARGS,
     "_raw_columns(start, stop) -> 6 bytearrays: copies of rows [start, stop)."},
    {"complete_rows", (PyCFunction)Recorder_complete_rows, METH_VARARGS,
     "complete_rows(final, max_cap) -> rows that may leave now (hold lock)."},
    {"drop_front", (PyCFunction)Recorder_drop_front, METH_O,
     "drop_front(stop): forget rows [0, stop) (hold lock)."},
    {NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ailens._recorder.Recorder",
    .tp_doc = "Event columns of one rank with the begin/end hot path (see ailens/record/buffer.py).",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Recorder_init,
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_traverse = (traverseproc)Recorder_traverse,
    .tp_clear = (inquiry)Recorder_clear,
    .tp_methods = Recorder_methods,
    .tp_members = Recorder_members,
    .tp_getset = Recorder_getset,
};

/* ------------------------------------------------------------------ AsyncCall, HandleWait
 *
 * An adapter's per-tensor wrappers around an asynchronous framework call that returns a
 * handle (Horovod torch's `_allreduce_async` and siblings: one call per gradient) and the
 * wait that completes it (`synchronize(handle)`), with the behaviour of the Python closures
 * they replace (integrations/horovod.py keeps those as the path without this module): no
 * Python frame of ailens's per tensor. The owner is the adapter's Attachment: `attached`,
 * `_finder` (not None: steps are inferred, and each call goes to `fallback`, the Python
 * wrapper), `lens` (`collective_begin`, `collective_end` and `disable`, looked up per call,
 * so a disabled or timed Lens is seen). `local.depth` > 0: inside ailens's own collective or
 * a recorded call; the call then passes straight through. Faults (an Exception from the
 * Lens) disable the Lens as Attachment does; the framework's own exceptions pass unchanged.
 */

static PyObject *small_one, *small_zero; /* 1 and 0, made once */
static PyObject *s_attached, *s_depth, *s_finder, *s_lens, *s_collective_begin,
    *s_collective_end, *s_disable, *s_nbytes;

/* The compiled wrappers' one layout (AsyncCall, HandleWait, BlockingCall below); a field a
 * wrapper does not use is NULL. */
typedef struct {
    PyObject_HEAD
    PyObject *real, *owner, *local, *op, *handles, *fallback, *dict;
    /* BlockingCall's: the method's name, what sizes its payload, and "<name>:<bytes>" made
     * for step_op_nbytes (equal counts) */
    PyObject *name, *array_type, *no_payload, *step_op;
    long long step_op_nbytes;
    int sizing, equal_counts;
    vectorcallfunc vectorcall;
} CallWrapper;

/* 1: attribute `name` of `obj` is true; 0: false; -1: unreadable (the error cleared). */
static int truth_of(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int t = v == NULL ? -1 : PyObject_IsTrue(v);
    Py_XDECREF(v);
    if (t < 0)
        PyErr_Clear();
    return t;
}

/* 1: the owner records this call; 0: it passes through; an error reading them: passes. */
static int recording(PyObject *owner, PyObject *local)
{
    return truth_of(owner, s_attached) > 0 && truth_of(local, s_depth) == 0;
}

/* The payload's bytes: its `nbytes`, summed over a list or tuple; -1 with an error set. */
static long long payload_nbytes(PyObject *x)
{
    if (PyList_Check(x) || PyTuple_Check(x)) {
        long long total = 0;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(x); i++) {
            long long b = payload_nbytes(PySequence_Fast_GET_ITEM(x, i));
            if (b < 0)
                return -1;
            total += b;
        }
        return total;
    }
    PyObject *b = PyObject_GetAttr(x, s_nbytes);
    if (b == NULL)
        return -1;
    long long v = PyLong_AsLongLong(b);
    Py_DECREF(b);
    if (v == -1 && PyErr_Occurred())
        return -1;
    return v < 0 ? 0 : v;
}

/* lens.collective_begin(op, nbytes): the tick (new ref), or NULL; a fault disables the Lens
 * and the tick is counted by the disabled path (Attachment._begin_tick). */
static PyObject *begin_tick(PyObject *owner, PyObject *op, long long nbytes)
{
    PyObject *lens = PyObject_GetAttr(owner, s_lens);
    if (lens == NULL)
        return NULL;
    PyObject *nb = PyLong_FromLongLong(nbytes);
    PyObject *tick = NULL;
    if (nb != NULL) {
        PyObject *args[3] = {lens, op, nb};
        tick = PyObject_VectorcallMethod(s_collective_begin, args, 3, NULL);
        if (tick == NULL && hand_over(lens, s_disable) == 0)
            tick = PyObject_VectorcallMethod(s_collective_begin, args, 3, NULL);
        Py_DECREF(nb);
    }
    Py_DECREF(lens);
    return tick;
}

/* lens.collective_end(tick) (Attachment.end): 0, or -1 with an error that is not a fault. */
static int end_tick(PyObject *owner, PyObject *tick)
{
    PyObject *lens = PyObject_GetAttr(owner, s_lens);
    if (lens == NULL)
        return -1;
    PyObject *args[2] = {lens, tick};
    PyObject *r = PyObject_VectorcallMethod(s_collective_end, args, 2, NULL);
    int ok = 0;
    if (r == NULL)
        ok = hand_over(lens, s_disable);
    Py_XDECREF(r);
    Py_DECREF(lens);
    return ok;
}

/* A wrapper cleared by the garbage collector (its cycle being freed) is never called; if it
 * were, an error rather than a NULL read. */
static int cleared(CallWrapper *self)
{
    if (self->real != NULL && self->owner != NULL && self->local != NULL && self->op != NULL &&
        self->handles != NULL && self->fallback != NULL)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "ailens: a cleared wrapper was called");
    return 1;
}

static PyObject *AsyncCall_vectorcall(CallWrapper *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames)
{
    if (cleared(self))
        return NULL;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!recording(self->owner, self->local))
        return PyObject_Vectorcall(self->real, args, nargsf, kwnames);
    PyObject *finder = PyObject_GetAttr(self->owner, s_finder);
    if (finder == NULL)
        PyErr_Clear();
    int plain = finder == Py_None && nargs > 0;
    Py_XDECREF(finder);
    if (!plain) /* steps inferred, or the payload by keyword: the Python wrapper */
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    long long nbytes = payload_nbytes(args[0]);
    if (nbytes < 0) { /* an argument we cannot size: 0 bytes, no fault */
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
        nbytes = 0;
    }
    PyObject *tick = begin_tick(self->owner, self->op, nbytes);
    if (tick == NULL)
        return NULL;
    /* what the framework calls inside is this collective's */
    if (PyObject_SetAttr(self->local, s_depth, small_one) < 0)
        PyErr_Clear();
    PyObject *handle = PyObject_Vectorcall(self->real, args, nargsf, kwnames);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyObject_SetAttr(self->local, s_depth, small_zero) < 0)
        PyErr_Clear();
    if (handle == NULL) {
        if (end_tick(self->owner, tick) < 0)
            PyErr_Clear(); /* the framework's exception is the one to raise */
        PyErr_Restore(type, value, tb);
        Py_DECREF(tick);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    if (PyDict_SetItem(self->handles, handle, tick) < 0) { /* fail open: the real handle */
        PyObject *lens = PyObject_GetAttr(self->owner, s_lens);
        int ok = lens == NULL ? -1 : hand_over(lens, s_disable);
        Py_XDECREF(lens);
        if (ok < 0) {
            Py_DECREF(tick);
            Py_DECREF(handle);
            return NULL;
        }
    }
    Py_DECREF(tick);
    return handle;
}

static PyObject *AsyncCall_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"real", "owner", "local", "op", "handles", "fallback", NULL};
    PyObject *real, *owner, *local, *op, *handles, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOUO!O:AsyncCall", names, &real, &owner,
                                     &local, &op, &PyDict_Type, &handles, &fallback))
        return NULL;
    if (!PyCallable_Check(real) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "AsyncCall: real and fallback must be callable");
        return NULL;
    }
    CallWrapper *self = (CallWrapper *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->real = Py_NewRef(real);
    self->owner = Py_NewRef(owner);
    self->local = Py_NewRef(local);
    self->op = Py_NewRef(op);
    self->handles = Py_NewRef(handles);
    self->fallback = Py_NewRef(fallback);
    self->vectorcall = (vectorcallfunc)AsyncCall_vectorcall;
    return (PyObject *)self;
}

static int CallWrapper_traverse(CallWrapper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->real);
    Py_VISIT(self->owner);
    Py_VISIT(self->local);
    Py_VISIT(self->op);
    Py_VISIT(self->handles);
    Py_VISIT(self->fallback);
    Py_VISIT(self->dict);
    Py_VISIT(self->name);
    Py_VISIT(self->array_type);
    Py_VISIT(self->no_payload);
    Py_VISIT(self->step_op);
    return 0;
}

static int CallWrapper_clear(CallWrapper *self)
{
    Py_CLEAR(self->real);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->local);
    Py_CLEAR(self->op);
    Py_CLEAR(self->handles);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->name);
    Py_CLEAR(self->array_type);
    Py_CLEAR(self->no_payload);
    Py_CLEAR(self->step_op);
    return 0;
}

static void CallWrapper_dealloc(CallWrapper *self)
{
    PyObject_GC_UnTrack(self);
    CallWrapper_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An unset slot reads as None (after a clear), never as NULL. */
static PyMemberDef CallWrapper_members[] = {
    {"real", T_OBJECT, offsetof(CallWrapper, real), 0, "the framework's function"},
    {"fallback", T_OBJECT, offsetof(CallWrapper, fallback), READONLY, "the Python wrapper"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CallWrapper, vectorcall), READONLY},
    {"__dictoffset__", T_PYSSIZET, offsetof(CallWrapper, dict), READONLY},
    {NULL},
};

/* What the wrappers' type objects share: the one layout, called through vectorcall, an
 * instance dict (integrations' named_like dresses them as the framework's function), the GC's
 * traverse and clear. */
#define CALL_WRAPPER_SLOTS                                                                 \
    .tp_basicsize = sizeof(CallWrapper),                                                   \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,     \
    .tp_call = PyVectorcall_Call,                                                          \
    .tp_vectorcall_offset = offsetof(CallWrapper, vectorcall),                             \
    .tp_dictoffset = offsetof(CallWrapper, dict),                                          \
    .tp_traverse = (traverseproc)CallWrapper_traverse,                                     \
    .tp_clear = (inquiry)CallWrapper_clear,                                                \
    .tp_dealloc = (destructor)CallWrapper_dealloc,                                         \
    .tp_members = CallWrapper_members

static PyTypeObject AsyncCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ailens._recorder.AsyncCall",
    .tp_doc = "AsyncCall(*, real, owner, local, op, handles, fallback): records each call of "
              "the asynchronous `real` as `op`, its handle -> tick in `handles`.",
    CALL_WRAPPER_SLOTS,
    .tp_new = AsyncCall_new,
};

/* HandleWait: `real(handle)` that ends the handle's tick (popped from `handles`) after it. */
static PyObject *HandleWait_vectorcall(CallWrapper *self, PyObject *const *args, size_t nargsf,
                                       PyObject *kwnames)
{
    if (cleared(self))
        return NULL;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *tick = NULL;
    if (PyDict_GET_SIZE(self->handles)) {
        tick = PyDict_GetItemWithError(self->handles, args[0]); /* borrowed */
        if (tick != NULL) {
            Py_INCREF(tick);
            if (PyDict_DelItem(self->handles, args[0]) < 0)
                PyErr_Clear();
        }
        else if (PyErr_Occurred()) { /* an unhashable handle: not one of ours */
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return NULL;
            PyErr_Clear();
        }
    }
    PyObject *r = PyObject_Vectorcall(self->real, args, nargsf, kwnames);
    if (tick != NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        int ok = end_tick(self->owner, tick);
        Py_DECREF(tick);
        if (ok < 0 && r == NULL)
            PyErr_Clear();
        if (ok < 0 && r != NULL) {
            Py_DECREF(r);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            return NULL;
        }
        PyErr_Restore(type, value, tb);
    }
    return r;
}

static PyObject *HandleWait_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"real", "owner", "handles", "fallback", NULL};
    PyObject *real, *owner, *handles, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOO!O:HandleWait", names, &real, &owner,
                                     &PyDict_Type, &handles, &fallback))
        return NULL;
    if (!PyCallable_Check(real) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "HandleWait: real and fallback must be callable");
        return NULL;
    }
    CallWrapper *self = (CallWrapper *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->real = Py_NewRef(real);
    self->owner = Py_NewRef(owner);
    self->local = Py_NewRef(Py_None); /* unused here: set, so a clear is seen as in AsyncCall */
    self->op = Py_NewRef(Py_None);
    self->handles = Py_NewRef(handles);
    self->fallback = Py_NewRef(fallback);
    self->vectorcall = (vectorcallfunc)HandleWait_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject HandleWaitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ailens._recorder.HandleWait",
    .tp_doc = "HandleWait(*, real, owner, handles, fallback): `real(handle)`, then the end of "
              "the tick `handles` holds for the handle.",
    CALL_WRAPPER_SLOTS,
    .tp_new = HandleWait_new,
};

/* BlockingCall: a blocking collective of mpi4py's communicator proxy (integrations/mpi.py's
 * LensComm), recorded in C: no Python frame of ailens's per call where the steps are marked or
 * step inference follows the found loop (follow_observed; a step end is then the Lens's), one
 * (`owner.begin`: the inference's observation and the tick) while it searches.
 * `sizing` says where the payload is: SIZE_FIRST, the first positional argument (an array of
 * `array_type`: its `nbytes`; a type in `no_payload`: 0 bytes; anything else: the Python
 * wrapper `fallback`), or SIZE_ZERO, none. `equal_counts`: MPI requires the same count on
 * every rank, so the step inference's op is "<name>:<bytes>" (LensComm._record). Anything but
 * the common case (an open non-blocking request, inference still looking at the calling
 * line, a payload by keyword or in a buffer spec) goes to `fallback`, which decides as the
 * Python method always did. */
enum { SIZE_FIRST = 1, SIZE_ZERO = 2 };
/* record/steps.py's StepFinder state that follows the found loop by op alone (_FOLLOW). */
#define FINDER_FOLLOW 2

static PyObject *s_open, *s_needs_keys, *s_begin, *s_step_op, *begin_kwnames, *s_lock,
    *s_acquire, *s_release, *s_steps, *s_steps_marked, *s_state, *s_pos, *s_period,
    *s_pattern_ops, *s_n, *s_last_end, *s_step_end;

/* The payload's bytes of a call whose first argument is `first`; -1: not the common case. */
static long long first_nbytes(CallWrapper *self, PyObject *first)
{
    if ((PyObject *)Py_TYPE(first) == self->array_type) {
        long long v = payload_nbytes(first);
        if (v < 0)
            PyErr_Clear();
        return v;
    }
    if (self->no_payload != Py_None) {
        int in = PySet_Contains(self->no_payload, (PyObject *)Py_TYPE(first));
        if (in > 0)
            return 0;
        if (in < 0)
            PyErr_Clear();
    }
    return -1;
}

/* The step inference's op for a call of `nbytes` (new ref), as LensComm._record makes it. */
static PyObject *step_op_of(CallWrapper *self, long long nbytes)
{
    if (!self->equal_counts)
        return Py_NewRef(self->name);
    if (self->step_op == NULL || self->step_op_nbytes != nbytes) {
        PyObject *s = PyUnicode_FromFormat("%U:%lld", self->name, nbytes);
        if (s == NULL)
            return NULL;
        Py_XSETREF(self->step_op, s);
        self->step_op_nbytes = nbytes;
    }
    return Py_NewRef(self->step_op);
}

/* An int attribute of `obj`; -1 when unreadable (the error cleared). */
static long long int_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    long long x = v == NULL ? -1 : PyLong_AsLongLong(v);
    Py_XDECREF(v);
    if (x == -1 && PyErr_Occurred())
        PyErr_Clear();
    return x;
}

static int set_int_attr(PyObject *obj, PyObject *name, long long x)
{
    PyObject *v = PyLong_FromLongLong(x);
    int r = v == NULL ? -1 : PyObject_SetAttr(obj, name, v);
    Py_XDECREF(v);
    return r;
}

/* lock.release(); an error in it is cleared (the collective runs), one already pending (a
 * BaseException from the tick's begin) stays raised. */
static void unlock(PyObject *lock)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallMethodNoArgs(lock, s_release);
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

/* Step inference's common cases (StepFinder.observe following the loop, inlined): the finder
 * follows the found loop and `step_op` is the op the loop has next (the observation only moves
 * its position: 1), or the loop's first op after a whole iteration (a step ends before this
 * call: 2, `owner._step_end()` to be called, as Attachment._observe does); the script has not
 * marked a step itself (Attachment._observe; the Lens's step count read as its `_steps`, what
 * its `steps` property returns). Then 1 or 2, with `owner.lock` held (Attachment.begin: the
 * observation and the tick in one order on every thread); else 0 and nothing changed: the
 * Python path decides (an iteration broken by other collectives, another thread inside, the
 * loop changed, anything unreadable). */
static int follow_observed(PyObject *owner, PyObject *finder, PyObject *step_op)
{
    PyObject *lock = PyObject_GetAttr(owner, s_lock);
    if (lock == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *call[2] = {lock, Py_False};
    PyObject *got = PyObject_VectorcallMethod(s_acquire, call, 2, NULL);
    int held = got == NULL ? -1 : PyObject_IsTrue(got);
    Py_XDECREF(got);
    if (held <= 0) {
        PyErr_Clear();
        Py_DECREF(lock);
        return 0;
    }
    int ok = 0;
    PyObject *lens = PyObject_GetAttr(owner, s_lens);
    PyObject *steps = lens == NULL ? NULL : PyObject_GetAttr(lens, s_steps);
    PyObject *marked = steps == NULL ? NULL : PyObject_GetAttr(owner, s_steps_marked);
    int same = marked == NULL ? -1 : PyObject_RichCompareBool(steps, marked, Py_EQ);
    Py_XDECREF(lens);
    Py_XDECREF(steps);
    Py_XDECREF(marked);
    if (same > 0 && int_attr(finder, s_state) == FINDER_FOLLOW) {
        long long pos = int_attr(finder, s_pos), period = int_attr(finder, s_period);
        long long n = int_attr(finder, s_n);
        int ends = pos >= period; /* a whole iteration went by: its first op ends the step */
        PyObject *ops = pos >= 0 && period > 0 && n >= 0 ? PyObject_GetAttr(finder, s_pattern_ops)
                                                         : NULL;
        PyObject *next = ops == NULL ? NULL : PySequence_GetItem(ops, ends ? 0 : (Py_ssize_t)pos);
        int match = next == NULL ? -1 : PyObject_RichCompareBool(next, step_op, Py_EQ);
        Py_XDECREF(ops);
        Py_XDECREF(next);
        if (match > 0 && !ends)
            ok = set_int_attr(finder, s_pos, pos + 1) == 0 && set_int_attr(finder, s_n, n + 1) == 0;
        else if (match > 0)
            ok = set_int_attr(finder, s_pos, 1) == 0 && set_int_attr(finder, s_last_end, n) == 0 &&
                         set_int_attr(finder, s_n, n + 1) == 0
                     ? 2
                     : 0;
    }
    PyErr_Clear();
    if (!ok)
        unlock(lock);
    Py_DECREF(lock);
    return ok;
}

/* Release owner.lock, held since follow_observed. */
static void release_lock(PyObject *owner)
{
    PyObject *lock = PyObject_GetAttr(owner, s_lock);
    if (lock == NULL)
        PyErr_Clear();
    else
        unlock(lock);
    Py_XDECREF(lock);
}

static int blocking_cleared(CallWrapper *self)
{
    if (self->real != NULL && self->owner != NULL && self->local != NULL && self->op != NULL &&
        self->name != NULL && self->array_type != NULL && self->no_payload != NULL &&
        self->fallback != NULL)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "ailens: a cleared wrapper was called");
    return 1;
}

static PyObject *BlockingCall_vectorcall(CallWrapper *self, PyObject *const *args,
                                         size_t nargsf, PyObject *kwnames)
{
    if (blocking_cleared(self))
        return NULL;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!recording(self->owner, self->local))
        return PyObject_Vectorcall(self->real, args, nargsf, kwnames);
    long long nbytes = 0;
    if (self->sizing == SIZE_FIRST)
        nbytes = nargs > 0 ? first_nbytes(self, args[0]) : -1;
    if (nbytes < 0 || truth_of(self->owner, s_open) != 0)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *finder = PyObject_GetAttr(self->owner, s_finder);
    if (finder == NULL) {
        PyErr_Clear();
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    int inferred = finder != Py_None;
    int keys = inferred ? truth_of(finder, s_needs_keys) : 0;
    if (keys != 0) { /* inference still tells equal collectives apart by the calling line */
        Py_DECREF(finder);
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    PyObject *tick = NULL;
    if (!inferred) {
        tick = begin_tick(self->owner, self->op, nbytes);
    }
    else {
        PyObject *step_op = step_op_of(self, nbytes);
        int followed = step_op == NULL ? 0 : follow_observed(self->owner, finder, step_op);
        if (followed) {
            PyObject *ended = followed == 2 ? PyObject_CallMethodNoArgs(self->owner, s_step_end)
                                            : Py_NewRef(Py_None);
            if (ended != NULL) /* else its error is raised, as from Attachment.begin */
                tick = begin_tick(self->owner, self->op, nbytes);
            Py_XDECREF(ended);
            release_lock(self->owner);
        }
        else if (step_op != NULL) { /* Attachment.begin: observation and tick; never raises */
            PyObject *nb = PyLong_FromLongLong(nbytes);
            if (nb != NULL) {
                PyObject *call[4] = {self->owner, self->op, nb, step_op};
                tick = PyObject_VectorcallMethod(s_begin, call, 3, begin_kwnames);
                Py_DECREF(nb);
            }
        }
        Py_XDECREF(step_op);
    }
    Py_DECREF(finder);
    if (tick == NULL)
        return NULL;
    /* the framework's own calls inside are not recorded */
    if (PyObject_SetAttr(self->local, s_depth, small_one) < 0)
        PyErr_Clear();
    PyObject *r = PyObject_Vectorcall(self->real, args, nargsf, kwnames);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyObject_SetAttr(self->local, s_depth, small_zero) < 0)
        PyErr_Clear();
    int ok = end_tick(self->owner, tick);
    Py_DECREF(tick);
    if (r == NULL) {
        if (ok < 0)
            PyErr_Clear(); /* the framework's exception is the one to raise */
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    if (ok < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *BlockingCall_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"real",       "owner",      "local",   "op",       "name",
                            "array_type", "no_payload", "sizing",  "equal_counts",
                            "fallback",   NULL};
    PyObject *real, *owner, *local, *op, *name, *array_type, *no_payload, *fallback;
    int sizing, equal_counts;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOUUOOipO:BlockingCall", names, &real,
                                     &owner, &local, &op, &name, &array_type, &no_payload,
                                     &sizing, &equal_counts, &fallback))
        return NULL;
    if (!PyCallable_Check(real) || !PyCallable_Check(fallback) || !PyType_Check(array_type) ||
        (no_payload != Py_None && !PyAnySet_Check(no_payload)) ||
        (sizing != SIZE_FIRST && sizing != SIZE_ZERO)) {
        PyErr_SetString(PyExc_TypeError,
                        "BlockingCall: real and fallback callable, array_type a type, "
                        "no_payload a set or None, sizing SIZE_FIRST or SIZE_ZERO");
        return NULL;
    }
    CallWrapper *self = (CallWrapper *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->real = Py_NewRef(real);
    self->owner = Py_NewRef(owner);
    self->local = Py_NewRef(local);
    self->op = Py_NewRef(op);
    self->name = Py_NewRef(name);
    self->array_type = Py_NewRef(array_type);
    self->no_payload = Py_NewRef(no_payload);
    self->fallback = Py_NewRef(fallback);
    self->sizing = sizing;
    self->equal_counts = equal_counts;
    self->vectorcall = (vectorcallfunc)BlockingCall_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject BlockingCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ailens._recorder.BlockingCall",
    .tp_doc = "BlockingCall(*, real, owner, local, op, name, array_type, no_payload, sizing, "
              "equal_counts, fallback): records each call of the blocking collective `real` "
              "as `op`.",
    CALL_WRAPPER_SLOTS,
    .tp_new = BlockingCall_new,
};

static struct PyModuleDef recorder_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ailens._recorder",
    .m_doc = "The compiled hot path of ailens' event buffer (optional; record/buffer.py falls back).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__recorder(void)
{
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL)
        return NULL;
    perf_counter_ns_fn = PyObject_GetAttrString(time, "perf_counter_ns");
    process_time_ns_fn = PyObject_GetAttrString(time, "process_time_ns");
    Py_DECREF(time);
    if (perf_counter_ns_fn == NULL || process_time_ns_fn == NULL)
        return NULL;
    if (PyType_Ready(&LockType) < 0 || PyType_Ready(&RecorderType) < 0 ||
        PyType_Ready(&AsyncCallType) < 0 || PyType_Ready(&HandleWaitType) < 0 ||
        PyType_Ready(&BlockingCallType) < 0)
        return NULL;
    if ((s_attached = PyUnicode_InternFromString("attached")) == NULL ||
        (s_depth = PyUnicode_InternFromString("depth")) == NULL ||
        (s_finder = PyUnicode_InternFromString("_finder")) == NULL ||
        (s_lens = PyUnicode_InternFromString("lens")) == NULL ||
        (s_collective_begin = PyUnicode_InternFromString("collective_begin")) == NULL ||
        (s_collective_end = PyUnicode_InternFromString("collective_end")) == NULL ||
        (s_disable = PyUnicode_InternFromString("disable")) == NULL ||
        (s_nbytes = PyUnicode_InternFromString("nbytes")) == NULL ||
        (s_open = PyUnicode_InternFromString("_open")) == NULL ||
        (s_needs_keys = PyUnicode_InternFromString("needs_keys")) == NULL ||
        (s_begin = PyUnicode_InternFromString("begin")) == NULL ||
        (s_step_op = PyUnicode_InternFromString("step_op")) == NULL ||
        (begin_kwnames = PyTuple_Pack(1, s_step_op)) == NULL ||
        (s_lock = PyUnicode_InternFromString("lock")) == NULL ||
        (s_acquire = PyUnicode_InternFromString("acquire")) == NULL ||
        (s_release = PyUnicode_InternFromString("release")) == NULL ||
        (s_steps = PyUnicode_InternFromString("_steps")) == NULL ||
        (s_steps_marked = PyUnicode_InternFromString("_steps_marked")) == NULL ||
        (s_state = PyUnicode_InternFromString("_state")) == NULL ||
        (s_pos = PyUnicode_InternFromString("_pos")) == NULL ||
        (s_period = PyUnicode_InternFromString("period")) == NULL ||
        (s_pattern_ops = PyUnicode_InternFromString("_pattern_ops")) == NULL ||
        (s_n = PyUnicode_InternFromString("_n")) == NULL ||
        (s_last_end = PyUnicode_InternFromString("_last_end")) == NULL ||
        (s_step_end = PyUnicode_InternFromString("_step_end")) == NULL ||
        (small_one = PyLong_FromLong(1)) == NULL || (small_zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&recorder_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "ABI", RECORDER_ABI) < 0 ||
        PyModule_AddIntConstant(m, "STEP_CAP", STEP_CAP) < 0 ||
        PyModule_AddObject(m, "STEP_FLUSH_NS", PyLong_FromLongLong(STEP_FLUSH_NS)) < 0 ||
        PyModule_AddObjectRef(m, "Lock", (PyObject *)&LockType) < 0 ||
        PyModule_AddObjectRef(m, "Recorder", (PyObject *)&RecorderType) < 0 ||
        PyModule_AddObjectRef(m, "AsyncCall", (PyObject *)&AsyncCallType) < 0 ||
        PyModule_AddObjectRef(m, "HandleWait", (PyObject *)&HandleWaitType) < 0 ||
        PyModule_AddObjectRef(m, "BlockingCall", (PyObject *)&BlockingCallType) < 0 ||
        PyModule_AddIntConstant(m, "SIZE_FIRST", SIZE_FIRST) < 0 ||
        PyModule_AddIntConstant(m, "SIZE_ZERO", SIZE_ZERO) < 0 ||
        PyModule_AddIntConstant(m, "FINDER_FOLLOW", FINDER_FOLLOW) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
