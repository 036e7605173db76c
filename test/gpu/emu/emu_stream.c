/*
 * The emulated device (emu.h): streams, events, copies and ofccl's kernels.
 *
 * A stream is a thread that runs its queue in order, as a GPU runs a
 * stream: a flag wait polls a 64-bit word (spinning a little, then napping
 * up to 100 us, so that many emulated streams share two cores), a flag write
 * is a release store after everything before it, a copy is a memmove, and a
 * kernel runs on the host with the arguments kernel.c passed and the rules
 * kernels.cu follows (the abort word, the chain's per-block flags, the
 * reduction's order and rounding). An event counts its records; it has
 * completed once the last one recorded was reached. The default streams
 * (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) are one per device.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu.h"

enum { OP_WAIT_VALUE, OP_WRITE_VALUE, OP_COPY, OP_RECORD, OP_WAIT_EVENT, OP_KERNEL };

struct CUevent_st {
    _Atomic uint64_t recorded, reached;
    atomic_int refs; /* the handle's, and one per queued operation on it */
    _Atomic uint64_t at_ns;
};

typedef struct op {
    int kind;
    union {
        struct {
            _Atomic uint64_t *addr;
            uint64_t v;
        } flag;
        struct {
            void *dst;
            const void *src;
            size_t len;
        } copy;
        struct {
            struct CUevent_st *ev;
            uint64_t n;
        } event;
        struct {
            int kernel;
            unsigned blocks;
            union {
                struct ofccl__copy_args copy;
                struct ofccl__chain_args chain;
                struct ofccl__reduce_args reduce;
                struct ofccl__signal_args signal;
            } a;
        } k;
    } u;
} op_t;

struct CUstream_st {
    struct CUstream_st *next; /* every stream of the process (all_streams) */
    pthread_mutex_t mu;
    pthread_cond_t more, idle;
    op_t *ring;
    size_t cap, head, n;
    uint64_t queued, done;
    bool dying;
};

static pthread_mutex_t dflt_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *dflt[OFCCL__GPU_MAX_DEVICES];
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *all_streams;

static uint64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A poll's pace: spin a little, then naps doubling from 1 us to 100 us. */
static void backoff(unsigned *spins)
{
    if (++*spins < 64) {
        sched_yield();
        return;
    }
    long ns = 1000L << (*spins - 64 < 7 ? *spins - 64 : 7);
    struct timespec ts = {0, ns < 100000 ? ns : 100000};
    nanosleep(&ts, NULL);
}

static bool aborted(const void *word)
{
    return word != NULL &&
           atomic_load_explicit((const _Atomic uint64_t *)word, memory_order_acquire) != 0;
}

static void event_put(struct CUevent_st *ev)
{
    if (atomic_fetch_sub(&ev->refs, 1) == 1)
        free(ev);
}

/* ---- the kernels ---- */
static void run_copy(const struct ofccl__copy_args *a)
{
    if (aborted(a->abort))
        return;
    for (int d = 0; d < a->ndst; d++)
        memmove(a->dst[d], a->src, a->len);
}

static void run_signal(const struct ofccl__signal_args *a)
{
    if (aborted(a->abort))
        return;
    for (int i = 0; i < a->n; i++)
        atomic_store_explicit((_Atomic uint64_t *)a->flag[i], a->value, memory_order_seq_cst);
}

/* Chunk by chunk, slice b (block b's) once the predecessor's flag b says it
 * is here, then the successor's flag b (kernels.cu, ofccl_chain). */
static void run_chain(const struct ofccl__chain_args *a, unsigned blocks)
{
    unsigned long long nchunks = (a->len + a->chunk - 1) / a->chunk;
    _Atomic uint64_t *in = a->in, *out = a->out;

    for (unsigned long long c = 0; c < nchunks; c++) {
        unsigned long long off = c * a->chunk,
                           n = a->len - off < a->chunk ? a->len - off : a->chunk;
        unsigned long long per = ((n + blocks - 1) / blocks + 15) & ~15ull;
        for (unsigned b = 0; b < blocks; b++) {
            unsigned long long lo = b * per < n ? b * per : n, hi = lo + per < n ? lo + per : n;
            unsigned spins = 0;
            while (in != NULL &&
                   atomic_load_explicit(&in[b], memory_order_acquire) < a->base + c + 1) {
                if (aborted(a->abort))
                    return;
                backoff(&spins);
            }
            if (in == NULL && aborted(a->abort))
                return;
            if (a->next != NULL && lo < hi)
                memmove((char *)a->next + off + lo, (const char *)a->src + off + lo, hi - lo);
            if (out != NULL)
                atomic_store_explicit(&out[b], a->base + c + 1, memory_order_release);
        }
    }
}

static float bits_f32(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bf16_get(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* Nearest even; a NaN stays a quiet NaN with its sign and top payload. */
static uint16_t bf16_put(float x)
{
    uint32_t u = f32_bits(x);

    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u | 0x00400000u) >> 16)
                                           : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float f16_get(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

    if (exp == 0) /* zero or subnormal: man * 2^-24, exact in f32 */
        return sign ? -((float)man * 0x1p-24f) : (float)man * 0x1p-24f;
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | man << 13);
    return bits_f32(sign | (exp + 112u) << 23 | man << 13);
}

static uint16_t f16_put(float x)
{
    uint32_t u = f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;

    if (a > 0x7f800000u) /* NaN: quiet, the top of its payload */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* rounds to at least 65536: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) /* below 2^-14: in x + 0.5 the f32 step is f16's 2^-24 */
        return (uint16_t)(sign | (f32_bits(bits_f32(a) + 0.5f) - 0x3f000000u));
    return (uint16_t)(sign | (a - (112u << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13);
}

/* Element i of every source, in order (kernels.cu, red_run): the first
 * (times the factor), then each other one added, each operation rounded on
 * its own; divided by ndiv where it is set. */
#define REDUCE(T, GET, PUT, ACC)                                                                   \
    for (size_t i = 0; i < a->count; i++) {                                                        \
        ACC x = GET(((const T *)a->src[0])[i]);                                                    \
        if (premul)                                                                                \
            x = x * c;                                                                             \
        for (int k = 1; k < a->nsrc; k++) {                                                        \
            ACC y = GET(((const T *)a->src[k])[i]);                                                \
            x = x + (premul ? y * c : y);                                                          \
        }                                                                                          \
        ((T *)a->dst)[i] = PUT(a->ndiv ? x / (ACC)a->ndiv : x);                                    \
    }
#define SAME(x) (x)

static void run_reduce(const struct ofccl__reduce_args *a)
{
    bool premul = a->kind == 2;

    if (aborted(a->abort))
        return;
    if (a->dtype == 1) {
        double c = a->scalar;
        REDUCE(double, SAME, SAME, double);
    } else {
        float c = (float)a->scalar;
        if (a->dtype == 0) {
            REDUCE(float, SAME, SAME, float);
        } else if (a->dtype == 2) {
            REDUCE(uint16_t, bf16_get, bf16_put, float);
        } else {
            REDUCE(uint16_t, f16_get, f16_put, float);
        }
    }
}

/* ---- streams ---- */
static void run(op_t *op)
{
    unsigned spins = 0;

    switch (op->kind) {
    case OP_WAIT_VALUE:
        while (atomic_load_explicit(op->u.flag.addr, memory_order_acquire) < op->u.flag.v)
            backoff(&spins);
        break;
    case OP_WRITE_VALUE:
        atomic_store_explicit(op->u.flag.addr, op->u.flag.v, memory_order_seq_cst);
        break;
    case OP_COPY:
        memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.len);
        break;
    case OP_RECORD: {
        struct CUevent_st *ev = op->u.event.ev;
        uint64_t seen = atomic_load(&ev->reached);
        atomic_store(&ev->at_ns, now_ns());
        while (seen < op->u.event.n &&
               !atomic_compare_exchange_weak(&ev->reached, &seen, op->u.event.n))
            ;
        event_put(ev);
        break;
    }
    case OP_WAIT_EVENT:
        while (atomic_load(&op->u.event.ev->reached) < op->u.event.n)
            backoff(&spins);
        event_put(op->u.event.ev);
        break;
    case OP_KERNEL:
        if (op->u.k.kernel == OFCCL__GPU_K_COPY)
            run_copy(&op->u.k.a.copy);
        else if (op->u.k.kernel == OFCCL__GPU_K_CHAIN)
            run_chain(&op->u.k.a.chain, op->u.k.blocks);
        else if (op->u.k.kernel == OFCCL__GPU_K_SIGNAL)
            run_signal(&op->u.k.a.signal);
        else
            run_reduce(&op->u.k.a.reduce);
        break;
    }
}

static void *worker(void *arg)
{
    struct CUstream_st *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->n == 0 && !s->dying)
            pthread_cond_wait(&s->more, &s->mu);
        if (s->n == 0)
            break;
        op_t op = s->ring[s->head];
        s->head = (s->head + 1) % s->cap;
        s->n--;
        pthread_mutex_unlock(&s->mu);
        run(&op);
        pthread_mutex_lock(&s->mu);
        s->done++;
        pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&all_mu);
    for (struct CUstream_st **p = &all_streams; *p != NULL; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&all_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->more);
    pthread_cond_destroy(&s->idle);
    free(s->ring);
    free(s);
    return NULL;
}

static CUresult s_create(CUstream *out, unsigned int flags)
{
    struct CUstream_st *s = calloc(1, sizeof(*s));
    pthread_attr_t attr;
    pthread_t th;
    int rc;

    if (s == NULL || (s->ring = calloc(64, sizeof(op_t))) == NULL) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->cap = 64;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->more, NULL);
    pthread_cond_init(&s->idle, NULL);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&all_mu);
    rc = pthread_create(&th, &attr, worker, s);
    if (rc == 0) {
        s->next = all_streams;
        all_streams = s;
    }
    pthread_mutex_unlock(&all_mu);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(s->ring);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* As CUDA: the stream goes once its work is done (a wait that is never
 * satisfied keeps its thread, as it would keep a GPU's stream). */
static CUresult s_destroy(CUstream s)
{
    pthread_mutex_lock(&s->mu);
    s->dying = true;
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

static struct CUstream_st *resolve(CUstream s)
{
    int dev = ofccl__emu_current_dev();

    if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD)
        return s;
    dev = dev < 0 ? 0 : dev;
    pthread_mutex_lock(&dflt_mu);
    if (dflt[dev] == NULL && s_create(&dflt[dev], 0) != CUDA_SUCCESS)
        dflt[dev] = NULL;
    s = dflt[dev];
    pthread_mutex_unlock(&dflt_mu);
    return s;
}

static CUresult enqueue(CUstream hs, const op_t *op)
{
    struct CUstream_st *s = resolve(hs);

    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&s->mu);
    if (s->n == s->cap) { /* grow, unwrapping the ring */
        op_t *r = malloc(2 * s->cap * sizeof(*r));
        if (r == NULL) {
            pthread_mutex_unlock(&s->mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < s->n; i++)
            r[i] = s->ring[(s->head + i) % s->cap];
        free(s->ring);
        s->ring = r;
        s->head = 0;
        s->cap *= 2;
    }
    s->ring[(s->head + s->n) % s->cap] = *op;
    s->n++;
    s->queued++;
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

static void drain(struct CUstream_st *s)
{
    pthread_mutex_lock(&s->mu);
    for (uint64_t until = s->queued; s->done < until;)
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static CUresult s_sync(CUstream hs)
{
    struct CUstream_st *s = resolve(hs);

    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    drain(s);
    return CUDA_SUCCESS;
}

void ofccl__emu_device_sync(void)
{
    pthread_mutex_lock(&all_mu);
    for (struct CUstream_st *s = all_streams; s != NULL; s = s->next)
        drain(s);
    pthread_mutex_unlock(&all_mu);
}

/* Every address an operation touches, as the emulated device reaches it. */
#define VIEW(p) ofccl__emu_host_view((const void *)(p))

static CUresult s_wait_value(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
    op_t op = {.kind = OP_WAIT_VALUE};

    if (flags != CU_STREAM_WAIT_VALUE_GEQ)
        return CUDA_ERROR_NOT_SUPPORTED;
    op.u.flag.addr = VIEW(addr);
    op.u.flag.v = v;
    return enqueue(s, &op);
}

static CUresult s_write_value(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
    op_t op = {.kind = OP_WRITE_VALUE};

    op.u.flag.addr = VIEW(addr);
    op.u.flag.v = v;
    return enqueue(s, &op);
}

static CUresult s_copy(CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s)
{
    op_t op = {.kind = OP_COPY};

    op.u.copy.dst = VIEW(dst);
    op.u.copy.src = VIEW(src);
    op.u.copy.len = len;
    return enqueue(s, &op);
}

static CUresult s_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                         void **extra)
{
    op_t op = {.kind = OP_KERNEL};
    size_t len = f->kernel == OFCCL__GPU_K_COPY     ? sizeof(op.u.k.a.copy)
                 : f->kernel == OFCCL__GPU_K_CHAIN  ? sizeof(op.u.k.a.chain)
                 : f->kernel == OFCCL__GPU_K_SIGNAL ? sizeof(op.u.k.a.signal)
                                                    : sizeof(op.u.k.a.reduce);

    if (params == NULL || gx == 0)
        return CUDA_ERROR_INVALID_VALUE;
    op.u.k.kernel = f->kernel;
    op.u.k.blocks = gx;
    memcpy(&op.u.k.a, params[0], len);
    switch (f->kernel) {
    case OFCCL__GPU_K_COPY:
        for (int d = 0; d < op.u.k.a.copy.ndst; d++)
            op.u.k.a.copy.dst[d] = VIEW(op.u.k.a.copy.dst[d]);
        op.u.k.a.copy.src = VIEW(op.u.k.a.copy.src);
        op.u.k.a.copy.abort = op.u.k.a.copy.abort ? VIEW(op.u.k.a.copy.abort) : NULL;
        break;
    case OFCCL__GPU_K_CHAIN:
        op.u.k.a.chain.src = VIEW(op.u.k.a.chain.src);
        op.u.k.a.chain.next = op.u.k.a.chain.next ? VIEW(op.u.k.a.chain.next) : NULL;
        op.u.k.a.chain.in = op.u.k.a.chain.in ? VIEW(op.u.k.a.chain.in) : NULL;
        op.u.k.a.chain.out = op.u.k.a.chain.out ? VIEW(op.u.k.a.chain.out) : NULL;
        op.u.k.a.chain.abort = op.u.k.a.chain.abort ? VIEW(op.u.k.a.chain.abort) : NULL;
        break;
    case OFCCL__GPU_K_SIGNAL:
        for (int i = 0; i < op.u.k.a.signal.n; i++)
            op.u.k.a.signal.flag[i] = VIEW(op.u.k.a.signal.flag[i]);
        op.u.k.a.signal.abort = op.u.k.a.signal.abort ? VIEW(op.u.k.a.signal.abort) : NULL;
        break;
    default:
        for (int k = 0; k < op.u.k.a.reduce.nsrc; k++)
            op.u.k.a.reduce.src[k] = VIEW(op.u.k.a.reduce.src[k]);
        op.u.k.a.reduce.dst = VIEW(op.u.k.a.reduce.dst);
        op.u.k.a.reduce.abort = op.u.k.a.reduce.abort ? VIEW(op.u.k.a.reduce.abort) : NULL;
        break;
    }
    return enqueue(s, &op);
}

/* ---- events ---- */
static CUresult ev_create(CUevent *out, unsigned int flags)
{
    struct CUevent_st *ev = calloc(1, sizeof(*ev));

    if (ev == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_init(&ev->refs, 1);
    *out = ev;
    return CUDA_SUCCESS;
}

static CUresult ev_destroy(CUevent ev)
{
    event_put(ev);
    return CUDA_SUCCESS;
}

static CUresult ev_record(CUevent ev, CUstream s)
{
    op_t op = {.kind = OP_RECORD};
    CUresult res;

    atomic_fetch_add(&ev->refs, 1);
    op.u.event.ev = ev;
    op.u.event.n = atomic_fetch_add(&ev->recorded, 1) + 1;
    if ((res = enqueue(s, &op)) != CUDA_SUCCESS)
        event_put(ev);
    return res;
}

static CUresult ev_query(CUevent ev)
{
    return atomic_load(&ev->reached) >= atomic_load(&ev->recorded) ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_NOT_READY;
}

static CUresult ev_sync(CUevent ev)
{
    uint64_t until = atomic_load(&ev->recorded);
    unsigned spins = 0;

    while (atomic_load(&ev->reached) < until)
        backoff(&spins);
    return CUDA_SUCCESS;
}

static CUresult ev_elapsed(float *ms, CUevent a, CUevent b)
{
    *ms = (float)((double)(int64_t)(atomic_load(&b->at_ns) - atomic_load(&a->at_ns)) / 1e6);
    return CUDA_SUCCESS;
}

static CUresult s_wait_event(CUstream s, CUevent ev, unsigned int flags)
{
    op_t op = {.kind = OP_WAIT_EVENT};
    CUresult res;

    op.u.event.n = atomic_load(&ev->recorded);
    if (op.u.event.n == 0) /* never recorded: nothing to wait for */
        return CUDA_SUCCESS;
    atomic_fetch_add(&ev->refs, 1);
    op.u.event.ev = ev;
    if ((res = enqueue(s, &op)) != CUDA_SUCCESS)
        event_put(ev);
    return res;
}

void ofccl__emu_stream_install(struct ofccl__gpu_fns *fn)
{
    fn->cuStreamCreate = s_create;
    fn->cuStreamDestroy = s_destroy;
    fn->cuStreamWaitEvent = s_wait_event;
    fn->cuStreamSynchronize = s_sync;
    fn->cuStreamWaitValue64 = s_wait_value;
    fn->cuStreamWriteValue64 = s_write_value;
    fn->cuEventCreate = ev_create;
    fn->cuEventDestroy = ev_destroy;
    fn->cuEventRecord = ev_record;
    fn->cuEventQuery = ev_query;
    fn->cuEventSynchronize = ev_sync;
    fn->cuEventElapsedTime = ev_elapsed;
    fn->cuMemcpyAsync = s_copy;
    fn->cuLaunchKernel = s_launch;
}
