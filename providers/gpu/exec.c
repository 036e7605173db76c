/*
 * A device's executor (exec_ops.h) for the host engine's requests on device
 * memory, where a transport takes it (a libfabric domain with FI_HMEM): the
 * copies and fills an algorithm posts run on a stream of ofccl's own on that
 * device, by the copy engines, and each post records an event, its ticket.
 * Tickets complete in order (one stream), so the newest event found done
 * stands for every earlier one. Reductions take ofccl's reduction kernel,
 * whose sources must be device memory or host memory the device can reach.
 *
 * One executor per device for the process, made on first use and kept for
 * its life (a stream and RING events); every context registers the same one.
 * A context's calls into it hold that context's lock, but two contexts may
 * call at once: its own lock serializes them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_ops.h"
#include "gpu.h"

#define RING 64 /* events in flight; a post beyond waits for the oldest */

/* End words: host memory the device reads, lent one by one; each keeps the
 * last value it was lent with, so a word only grows. */
#define WORDS_PAGE 512 /* words per pinned page */
typedef struct gword {
    uint64_t value;
    void *dev;
    struct gword *next;
    _Atomic uint64_t *host;
} gword_t;

/* An event a mark is recorded with, kept for the next mark once released. */
typedef struct gmark {
    ofccl__gpu_event_t ev;
    struct gmark *next;
} gmark_t;

typedef struct gexec {
    ofccl__gpu_t *g;
    int dev;
    ofccl__gpu_stream_t stream;
    ofccl__gpu_event_t ev[RING];
    uint64_t posted, done; /* tickets: the last posted, the last seen done */
    int sms;               /* the reduction kernel's SMs */
    gmark_t *marks;        /* released marks, for reuse */
    gword_t *words;        /* end words not lent (pages are never freed: a stream may read one) */
    pthread_mutex_t lock;
} gexec_t;

/* The event of a new ticket: the ring's slot, waiting for its previous
 * ticket first when that one is still in flight. */
static int record(gexec_t *x, uint64_t *ticket)
{
    uint64_t t = x->posted + 1;
    ofccl__err_t e = {0};
    int rc;

    if (t > RING && x->done < t - RING) {
        rc = ofccl__gpu_event_sync(x->g, x->dev, x->ev[t % RING], &e);
        if (rc)
            return rc;
        x->done = t - RING;
    }
    rc = ofccl__gpu_event_record(x->g, x->dev, x->ev[t % RING], x->stream, &e);
    if (rc)
        return rc;
    x->posted = t;
    *ticket = t;
    return OFCCL__EXEC_POSTED;
}

/* Errors are the (negative) OFCCL_ERR_* codes of the GPU calls. */
static int gx_copy(void *state, void *dst, const void *src, size_t len, uint64_t *ticket)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};
    int rc = 0;

    if (len == 0)
        return 0;
    pthread_mutex_lock(&x->lock);
    rc = ofccl__gpu_copy(x->g, x->dev, x->stream, dst, src, len, &e);
    rc = rc ? rc : record(x, ticket);
    pthread_mutex_unlock(&x->lock);
    return rc;
}

static int gx_reduce(void *state, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                     const void *const *srcs, int nsrc, size_t count, int ndiv, uint64_t *ticket)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};
    int rc;

    if (nsrc > OFCCL__GPU_REDUCE_SRCS || dtype == OFCCL_U8)
        return OFCCL_ERR_NOT_SUPPORTED;
    if (count == 0)
        return 0;
    pthread_mutex_lock(&x->lock);
    rc = ofccl__gpu_reduce_kernel(x->g, x->dev, x->stream, dst, srcs, nsrc, count, (int)dtype,
                                  (int)op.kind, op.scalar, ndiv, x->sms, NULL, &e);
    rc = rc ? rc : record(x, ticket);
    pthread_mutex_unlock(&x->lock);
    return rc;
}

static int gx_fill(void *state, void *dst, int byte, size_t len, uint64_t *ticket)
{
    (void)state;
    (void)dst;
    (void)byte;
    (void)len;
    (void)ticket;
    return OFCCL_ERR_NOT_SUPPORTED; /* no algorithm fills device memory */
}

static int gx_test(void *state, uint64_t ticket)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};
    int rc = 1;

    pthread_mutex_lock(&x->lock);
    if (ticket > x->done) {
        rc = ofccl__gpu_event_query(x->g, x->dev, x->ev[ticket % RING], &e);
        if (rc == 1)
            x->done = ticket;
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

/* ---- stream-ordered requests: the caller's stream ---- */
static int gx_copy_on(void *state, ofccl_stream_t stream, void *dst, const void *src, size_t len)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};

    return len ? ofccl__gpu_copy(x->g, x->dev, stream, dst, src, len, &e) : 0;
}

static int gx_reduce_on(void *state, ofccl_stream_t stream, ofccl_dtype_t dtype, ofccl_redop_t op,
                        void *dst, const void *const *srcs, int nsrc, size_t count, int ndiv)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};

    if (nsrc > OFCCL__GPU_REDUCE_SRCS || dtype == OFCCL_U8)
        return OFCCL_ERR_NOT_SUPPORTED;
    if (count == 0)
        return 0;
    return ofccl__gpu_reduce_kernel(x->g, x->dev, stream, dst, srcs, nsrc, count, (int)dtype,
                                    (int)op.kind, op.scalar, ndiv, x->sms, NULL, &e);
}

static int gx_mark(void *state, ofccl_stream_t stream, uint64_t *mark)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};
    gmark_t *m;
    int rc = 0;

    pthread_mutex_lock(&x->lock);
    if ((m = x->marks) != NULL)
        x->marks = m->next;
    pthread_mutex_unlock(&x->lock);
    if (m == NULL && (m = calloc(1, sizeof(*m))) == NULL)
        return OFCCL_ERR_NO_MEMORY;
    if (m->ev == NULL)
        rc = ofccl__gpu_event_create(x->g, x->dev, false, &m->ev, &e);
    if (rc == 0)
        rc = ofccl__gpu_event_record(x->g, x->dev, m->ev, stream, &e);
    if (rc != 0) {
        if (m->ev != NULL)
            ofccl__gpu_event_destroy(x->g, x->dev, m->ev);
        free(m);
        return rc;
    }
    *mark = (uint64_t)(uintptr_t)m;
    return 0;
}

static int gx_marked(void *state, uint64_t mark)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};

    return ofccl__gpu_event_query(x->g, x->dev, ((gmark_t *)(uintptr_t)mark)->ev, &e);
}

static void gx_unmark(void *state, uint64_t mark)
{
    gexec_t *x = state;
    gmark_t *m = (gmark_t *)(uintptr_t)mark;

    if (m == NULL)
        return;
    pthread_mutex_lock(&x->lock);
    m->next = x->marks;
    x->marks = m;
    pthread_mutex_unlock(&x->lock);
}

static int gx_wait_word(void *state, ofccl_stream_t stream, void *dev, uint64_t value)
{
    gexec_t *x = state;
    ofccl__err_t e = {0};

    return ofccl__gpu_wait_flag(x->g, x->dev, stream, dev, value, &e);
}

/* A new page of end words, pinned (the caller holds the lock). */
static int words_grow(gexec_t *x)
{
    size_t len = WORDS_PAGE * sizeof(uint64_t);
    ofccl__err_t e = {0};
    gword_t *w = calloc(WORDS_PAGE, sizeof(*w));
    void *page = NULL, *dev = NULL;
    int rc;

    if (w == NULL || posix_memalign(&page, 4096, len) != 0) {
        free(w);
        return OFCCL_ERR_NO_MEMORY;
    }
    memset(page, 0, len);
    if ((rc = ofccl__gpu_host_register(x->g, x->dev, page, len, &dev, &e)) != 0) {
        free(page);
        free(w);
        return rc;
    }
    for (int i = 0; i < WORDS_PAGE; i++) {
        w[i].host = (_Atomic uint64_t *)page + i;
        w[i].dev = (char *)dev + (size_t)i * sizeof(uint64_t);
        w[i].next = i + 1 < WORDS_PAGE ? &w[i + 1] : x->words;
    }
    x->words = w;
    return 0;
}

static int gx_word(void *state, uint64_t *handle, _Atomic uint64_t **word, void **dev,
                   uint64_t *value)
{
    gexec_t *x = state;
    gword_t *w;
    int rc = 0;

    pthread_mutex_lock(&x->lock);
    if (x->words == NULL)
        rc = words_grow(x);
    if (rc == 0) {
        w = x->words;
        x->words = w->next;
        *handle = (uint64_t)(uintptr_t)w;
        *word = w->host;
        *dev = w->dev;
        *value = ++w->value;
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

static void gx_word_put(void *state, uint64_t handle)
{
    gexec_t *x = state;
    gword_t *w = (gword_t *)(uintptr_t)handle;

    pthread_mutex_lock(&x->lock);
    w->next = x->words;
    x->words = w;
    pthread_mutex_unlock(&x->lock);
}

const ofccl__exec_ops_t ofccl__gpu_exec_ops = {
    .size = sizeof(ofccl__exec_ops_t),
    .name = "cuda",
    .copy = gx_copy,
    .fill = gx_fill,
    .reduce = gx_reduce,
    .test = gx_test,
    .copy_on = gx_copy_on,
    .reduce_on = gx_reduce_on,
    .mark = gx_mark,
    .marked = gx_marked,
    .unmark = gx_unmark,
    .word = gx_word,
    .word_put = gx_word_put,
    .wait_word = gx_wait_word,
};

void *ofccl__gpu_exec_state(ofccl__gpu_t *g, int dev, int sms, ofccl__err_t *e)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static gexec_t *made[OFCCL__GPU_MAX_DEVICES];
    gexec_t *x;
    int rc = 0;

    if (dev < 0 || dev >= OFCCL__GPU_MAX_DEVICES) {
        snprintf(e->msg, sizeof(e->msg), "no device %d", dev);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    x = made[dev];
    if (x == NULL && (x = calloc(1, sizeof(*x))) == NULL)
        snprintf(e->msg, sizeof(e->msg), "no memory");
    else if (made[dev] == NULL) {
        x->g = g;
        x->dev = dev;
        x->sms = sms > 0 ? sms : 8;
        pthread_mutex_init(&x->lock, NULL);
        rc = ofccl__gpu_stream_create(g, dev, &x->stream, e);
        for (int i = 0; rc == 0 && i < RING; i++)
            rc = ofccl__gpu_event_create(g, dev, false, &x->ev[i], e);
        if (rc) {
            for (int i = 0; i < RING; i++)
                if (x->ev[i] != NULL)
                    ofccl__gpu_event_destroy(g, dev, x->ev[i]);
            if (x->stream != NULL)
                ofccl__gpu_stream_destroy(g, dev, x->stream);
            free(x);
            x = NULL;
        }
        made[dev] = x;
    }
    pthread_mutex_unlock(&lock);
    return x;
}
