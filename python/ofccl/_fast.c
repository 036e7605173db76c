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

/* allgather(comm, send, recv, nranks) -> request address, a negative ofccl
 * code, or None when the Python path must handle (and explain) the call. */
static PyObject *fast_allgather(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    Py_buffer s, r;
    void *comm, *req = NULL;
    long nranks;
    int dtype, rc;
    size_t count;

    if (n != 4 || p_allgather == NULL)
        Py_RETURN_NONE;
    comm = addr_arg(args[0]);
    nranks = PyLong_AsLong(args[3]);
    if (comm == NULL || nranks <= 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!get_pair(args[1], args[2], &s, &r, &dtype))
        Py_RETURN_NONE;
    count = (size_t)(s.len / s.itemsize);
    if (r.len != s.len * nranks) {
        PyBuffer_Release(&r);
        PyBuffer_Release(&s);
        Py_RETURN_NONE;
    }
    rc = p_allgather(comm, s.buf, r.buf, count, dtype, &req);
    PyBuffer_Release(&r);
    PyBuffer_Release(&s);
    return rc ? PyLong_FromLong(rc) : PyLong_FromVoidPtr(req);
}

/* reduce_scatter(comm, send, recv, nranks, kind, scalar): as allgather. */
static PyObject *fast_reduce_scatter(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    Py_buffer s, r;
    void *comm, *req = NULL;
    long nranks;
    int dtype, rc;
    fast_redop_t op;

    if (n != 6 || p_reduce_scatter == NULL)
        Py_RETURN_NONE;
    comm = addr_arg(args[0]);
    nranks = PyLong_AsLong(args[3]);
    op.kind = (int)PyLong_AsLong(args[4]);
    op.scalar = PyFloat_AsDouble(args[5]);
    if (comm == NULL || nranks <= 0 || PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!get_pair(args[1], args[2], &s, &r, &dtype))
        Py_RETURN_NONE;
    if (dtype == 4 || s.len != r.len * nranks) { /* bytes are never reduced: let C say so */
        PyBuffer_Release(&r);
        PyBuffer_Release(&s);
        Py_RETURN_NONE;
    }
    rc = p_reduce_scatter(comm, s.buf, r.buf, (size_t)(r.len / r.itemsize), dtype, op, &req);
    PyBuffer_Release(&r);
    PyBuffer_Release(&s);
    return rc ? PyLong_FromLong(rc) : PyLong_FromVoidPtr(req);
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

static PyMethodDef fast_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))fast_bind, METH_FASTCALL, "bind library functions"},
    {"allgather", (PyCFunction)(void (*)(void))fast_allgather, METH_FASTCALL, "post all-gather"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))fast_reduce_scatter, METH_FASTCALL,
     "post reduce-scatter"},
    {"wait_free", fast_wait_free, METH_O, "wait, then free the request"},
    {"test_free", fast_test_free, METH_O, "test, and free the request once done"},
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
    return PyModule_Create(&fast_module);
}
