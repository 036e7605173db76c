/*
 * ofccl._fast: the per-collective hot path of the Python package, for objects
 * that export a C-contiguous buffer (numpy arrays, bytearray, array.array).
 *
 * ctypes costs about a microsecond per call and numpy's __array_interface__
 * another; a small all-gather takes a few hundred nanoseconds on the local
 * transport, so the Python layer would triple its latency. These functions do
 * the buffer checks and the calls in C. They never decide an error message:
 * whatever they cannot handle (no buffer, unknown format, wrong sizes) returns
 * None, and the Python code takes its checked path, which says what is wrong.
 *
 * The library is not linked: ofccl.Comm hands over the addresses of the
 * functions ctypes already loaded (bind()), so both paths call the same copy
 * of libofccl.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

/* Mirrors ofccl_redop_t of ofccl.h (whose ABI is stable); the header is not
 * needed to build the package on its own. */
typedef struct fast_redop {
    int kind;
    double scalar;
} fast_redop_t;

typedef int (*allgather_fn)(void *, const void *, void *, size_t, int, void **);
typedef int (*reduce_scatter_fn)(void *, const void *, void *, size_t, int, fast_redop_t, void **);
typedef int (*wait_fn)(void *);
typedef int (*test_fn)(void *, int *);
typedef int (*free_fn)(void *);

static allgather_fn p_allgather;
static reduce_scatter_fn p_reduce_scatter;
static wait_fn p_wait;
static test_fn p_test;
static free_fn p_req_free;

#define ERR_BUSY (-11)

static void *addr_arg(PyObject *o)
{
    return o == Py_None ? NULL : PyLong_AsVoidPtr(o);
}

static PyObject *fast_bind(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *p[5];

    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "bind(allgather, reduce_scatter, wait, test, free)");
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        p[i] = PyLong_AsVoidPtr(args[i]);
        if (p[i] == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bind: NULL function address");
            return NULL;
        }
    }
    p_allgather = (allgather_fn)p[0];
    p_reduce_scatter = (reduce_scatter_fn)p[1];
    p_wait = (wait_fn)p[2];
    p_test = (test_fn)p[3];
    p_req_free = (free_fn)p[4];
    Py_RETURN_NONE;
}

/* ofccl dtype of a buffer format, -1 if not one ofccl moves. */
static int format_dtype(const char *f)
{
    if (f == NULL)
        return 4; /* plain bytes */
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return -1;
    switch (f[0]) {
    case 'f':
        return 0;
    case 'd':
        return 1;
    case 'e':
        return 3;
    case 'B':
        return 4;
    default:
        return -1;
    }
}

/* Both buffers, checked; 1 = usable, 0 = not ours (error state cleared). */
static int get_pair(PyObject *send, PyObject *recv, Py_buffer *s, Py_buffer *r, int *dtype)
{
    if (PyObject_GetBuffer(send, s, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        return 0;
    }
    if (PyObject_GetBuffer(recv, r, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0) {
        PyErr_Clear();
        PyBuffer_Release(s);
        return 0;
    }
    *dtype = format_dtype(s->format);
    if (*dtype < 0 || *dtype != format_dtype(r->format) || s->itemsize != r->itemsize) {
        PyBuffer_Release(r);
        PyBuffer_Release(s);
        return 0;
    }
    return 1;
}

/* Post an all-gather if both objects are plain buffers of one ofccl dtype and
 * the sizes fit: 1 = posted (*req set), 0 = not ours (the Python path will
 * explain), < 0 = the library's error code. */
static int post_allgather(PyObject *hobj, PyObject *send, PyObject *recv, PyObject *nr, void **req)
{
    Py_buffer s, r;
    void *comm = addr_arg(hobj);
    long nranks = PyLong_AsLong(nr);
    int dtype, rc;

    if (p_allgather == NULL || comm == NULL || nranks <= 0) {
        PyErr_Clear();
        return 0;
    }
    if (!get_pair(send, recv, &s, &r, &dtype))
        return 0;
    if (r.len != s.len * nranks) {
        rc = 0;
    } else {
        rc = p_allgather(comm, s.buf, r.buf, (size_t)(s.len / s.itemsize), dtype, req);
        rc = rc ? rc : 1;
    }
    PyBuffer_Release(&r);
    PyBuffer_Release(&s);
    return rc;
}

static int post_reduce_scatter(PyObject *const *a, void **req)
{
    Py_buffer s, r;
    void *comm = addr_arg(a[0]);
    long nranks = PyLong_AsLong(a[3]);
    fast_redop_t op = {(int)PyLong_AsLong(a[4]), PyFloat_AsDouble(a[5])};
    int dtype, rc;

    if (p_reduce_scatter == NULL || comm == NULL || nranks <= 0 || PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (!get_pair(a[1], a[2], &s, &r, &dtype))
        return 0;
    if (dtype == 4 || s.len != r.len * nranks) { /* bytes are never reduced: let C say so */
        rc = 0;
    } else {
        rc = p_reduce_scatter(comm, s.buf, r.buf, (size_t)(r.len / r.itemsize), dtype, op, req);
        rc = rc ? rc : 1;
    }
    PyBuffer_Release(&r);
    PyBuffer_Release(&s);
    return rc;
}

static PyObject *post_result(int rc, void *req)
{
    if (rc == 0)
        Py_RETURN_NONE;
    return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromVoidPtr(req);
}

/* allgather(comm, send, recv, nranks) -> request address, a negative ofccl
 * code, or None when the Python path must handle (and explain) the call. */
static PyObject *fast_allgather(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *req = NULL;

    int rc;

    if (n != 4)
        Py_RETURN_NONE;
    rc = post_allgather(args[0], args[1], args[2], args[3], &req);
    return post_result(rc, req);
}

/* reduce_scatter(comm, send, recv, nranks, kind, scalar): as allgather. */
static PyObject *fast_reduce_scatter(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *req = NULL;

    int rc;

    if (n != 6)
        Py_RETURN_NONE;
    rc = post_reduce_scatter(args, &req);
    return post_result(rc, req);
}

/* wait_free(req) -> (rc, freed): waits without the GIL, then frees the
 * request unless it is still running (a timed-out wait). */
static PyObject *fast_wait_free(PyObject *self, PyObject *arg)
{
    void *req = PyLong_AsVoidPtr(arg);
    int rc, frc;

    if (req == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "wait_free: NULL request");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS rc = p_wait(req);
    Py_END_ALLOW_THREADS frc = p_req_free(req);
    return Py_BuildValue("(ii)", rc, frc != ERR_BUSY);
}

/* test_free(req) -> (done, rc): frees the request once it completed. */
static PyObject *fast_test_free(PyObject *self, PyObject *arg)
{
    void *req = PyLong_AsVoidPtr(arg);
    int rc, done = 0;

    if (req == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "test_free: NULL request");
        return NULL;
    }
    rc = p_test(req, &done);
    if (rc || done)
        done = p_req_free(req) != ERR_BUSY;
    return Py_BuildValue("(ii)", done, rc);
}

/* ---- Request: the Python object a collective returns, in C ----------------
 * Same attributes as ofccl.comm.Request (the Python class, used when this
 * extension is missing); only the common path (completed, no error, no
 * profiler range, no follow-up) is done here. Anything else goes to the
 * Python hook complete(req, rc, freed), i.e. Request._complete. */
typedef struct req_object {
    PyObject_HEAD void *h;
    PyObject *comm;    /* ofccl.Comm */
    PyObject *pending; /* comm._pending: keeps unfinished requests alive */
    PyObject *keep;    /* the buffers, until completion */
    PyObject *result;
    PyObject *prof;
    PyObject *then;
    PyObject *weakrefs;
} req_object;

static PyObject *hook_complete; /* Request._complete */
static PyObject *hook_await;    /* Request.__await__ */

static int req_traverse(req_object *r, visitproc visit, void *arg)
{
    Py_VISIT(r->comm);
    Py_VISIT(r->pending);
    Py_VISIT(r->keep);
    Py_VISIT(r->result);
    Py_VISIT(r->prof);
    Py_VISIT(r->then);
    return 0;
}

static int req_clear(req_object *r)
{
    Py_CLEAR(r->comm);
    Py_CLEAR(r->pending);
    Py_CLEAR(r->keep);
    Py_CLEAR(r->result);
    Py_CLEAR(r->prof);
    Py_CLEAR(r->then);
    return 0;
}

static void req_dealloc(req_object *r)
{
    PyObject_GC_UnTrack(r);
    if (r->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)r);
    req_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* Completion: the short path here, everything else in Python. */
static PyObject *req_done(req_object *r, int rc, int freed)
{
    if (rc == 0 && freed && r->prof == Py_None && r->then == Py_None) {
        r->h = NULL;
        Py_CLEAR(r->keep);
        if (PySet_Discard(r->pending, (PyObject *)r) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return PyObject_CallFunction(hook_complete, "Oii", (PyObject *)r, rc, freed);
}

static PyObject *req_wait(req_object *r, PyObject *unused)
{
    int rc, frc;
    void *h = r->h;
    PyObject *res;

    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS rc = p_wait(h);
        Py_END_ALLOW_THREADS frc = p_req_free(h);
        res = req_done(r, rc, frc != ERR_BUSY);
        if (res == NULL)
            return NULL;
        Py_DECREF(res);
    }
    Py_INCREF(r->result);
    return r->result;
}

static PyObject *req_test(req_object *r, PyObject *unused)
{
    int rc, done = 0;
    PyObject *res;

    if (r->h == NULL)
        Py_RETURN_TRUE;
    rc = p_test(r->h, &done);
    if (!rc && !done)
        Py_RETURN_FALSE;
    done = p_req_free(r->h) != ERR_BUSY;
    res = req_done(r, rc, done);
    if (res == NULL)
        return NULL;
    Py_DECREF(res);
    return PyBool_FromLong(r->h == NULL);
}

static PyObject *req_await(PyObject *r)
{
    return PyObject_CallOneArg(hook_await, r);
}

static PyObject *req_get_h(req_object *r, void *unused)
{
    if (r->h == NULL)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(r->h);
}

static int req_set_h(req_object *r, PyObject *v, void *unused)
{
    if (v == NULL || v == Py_None) {
        r->h = NULL;
        return 0;
    }
    r->h = PyLong_AsVoidPtr(v);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *req_get_done(req_object *r, void *unused)
{
    return PyBool_FromLong(r->h == NULL);
}

static PyMethodDef req_methods[] = {
    {"wait", (PyCFunction)req_wait, METH_NOARGS, "Block until complete; return the output."},
    {"test", (PyCFunction)req_test, METH_NOARGS, "True once complete (never blocks)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef req_members[] = {
    {"_comm", T_OBJECT, offsetof(req_object, comm), READONLY, NULL},
    {"_keep", T_OBJECT, offsetof(req_object, keep), 0, NULL},
    {"result", T_OBJECT, offsetof(req_object, result), 0, "the output"},
    {"_prof", T_OBJECT, offsetof(req_object, prof), 0, NULL},
    {"_then", T_OBJECT, offsetof(req_object, then), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef req_getset[] = {
    {"_h", (getter)req_get_h, (setter)req_set_h, NULL, NULL},
    {"done", (getter)req_get_done, NULL, "True once complete", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyAsyncMethods req_async = {req_await, NULL, NULL, NULL};

static PyTypeObject req_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ofccl._fast.Request",
    .tp_basicsize = sizeof(req_object),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A posted collective (see ofccl.Request).",
    .tp_traverse = (traverseproc)req_traverse,
    .tp_clear = (inquiry)req_clear,
    .tp_dealloc = (destructor)req_dealloc,
    .tp_weaklistoffset = offsetof(req_object, weakrefs),
    .tp_methods = req_methods,
    .tp_members = req_members,
    .tp_getset = req_getset,
    .tp_as_async = &req_async,
};

/* A new Request for posted handle h; registered in `pending`. */
static PyObject *req_new(void *h, PyObject *comm, PyObject *pending, PyObject *send, PyObject *recv)
{
    req_object *r = PyObject_GC_New(req_object, &req_type);

    if (r == NULL)
        return NULL;
    r->h = h;
    r->weakrefs = NULL;
    Py_INCREF(comm);
    r->comm = comm;
    Py_INCREF(pending);
    r->pending = pending;
    r->keep = PyTuple_Pack(2, send, recv);
    Py_INCREF(recv);
    r->result = recv;
    Py_INCREF(Py_None);
    r->prof = Py_None;
    Py_INCREF(Py_None);
    r->then = Py_None;
    PyObject_GC_Track(r);
    if (r->keep == NULL || PySet_Add(pending, (PyObject *)r) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

/* set_hooks(complete, await): the Python halves of Request. */
static PyObject *fast_set_hooks(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "set_hooks(complete, await)");
        return NULL;
    }
    Py_XDECREF(hook_complete);
    Py_XDECREF(hook_await);
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    hook_complete = args[0];
    hook_await = args[1];
    Py_RETURN_NONE;
}

/* allgather_req(Comm, pending, comm, send, recv, nranks) -> Request, a
 * negative ofccl code, or None (the Python path handles the call). */
static PyObject *fast_allgather_req(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *req = NULL;
    int rc;

    if (n != 6)
        Py_RETURN_NONE;
    rc = post_allgather(args[2], args[3], args[4], args[5], &req);
    if (rc <= 0)
        return post_result(rc, req);
    return req_new(req, args[0], args[1], args[3], args[4]);
}

/* reduce_scatter_req(Comm, pending, comm, send, recv, nranks, kind, scalar). */
static PyObject *fast_reduce_scatter_req(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    void *req = NULL;
    int rc;

    if (n != 8)
        Py_RETURN_NONE;
    rc = post_reduce_scatter(args + 2, &req);
    if (rc <= 0)
        return post_result(rc, req);
    return req_new(req, args[0], args[1], args[3], args[4]);
}

static PyMethodDef fast_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))fast_bind, METH_FASTCALL, "bind library functions"},
    {"allgather", (PyCFunction)(void (*)(void))fast_allgather, METH_FASTCALL, "post all-gather"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))fast_reduce_scatter, METH_FASTCALL,
     "post reduce-scatter"},
    {"wait_free", fast_wait_free, METH_O, "wait, then free the request"},
    {"test_free", fast_test_free, METH_O, "test, and free the request once done"},
    {"allgather_req", (PyCFunction)(void (*)(void))fast_allgather_req, METH_FASTCALL,
     "post all-gather, return a Request"},
    {"reduce_scatter_req", (PyCFunction)(void (*)(void))fast_reduce_scatter_req, METH_FASTCALL,
     "post reduce-scatter, return a Request"},
    {"set_hooks", (PyCFunction)(void (*)(void))fast_set_hooks, METH_FASTCALL,
     "Python halves of Request"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT,
    "_fast",
    "ofccl hot path (see _fast.c)",
    -1,
    fast_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    PyObject *m;

    if (PyType_Ready(&req_type) < 0)
        return NULL;
    m = PyModule_Create(&fast_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&req_type);
    if (PyModule_AddObject(m, "Request", (PyObject *)&req_type) < 0) {
        Py_DECREF(&req_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
