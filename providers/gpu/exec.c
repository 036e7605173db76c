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

typedef struct gexec {
    ofccl__gpu_t *g;
    int dev;
    ofccl__gpu_stream_t stream;
    ofccl__gpu_event_t ev[RING];
    uint64_t posted, done; /* tickets: the last posted, the last seen done */
    int sms;               /* the reduction kernel's SMs */
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

const ofccl__exec_ops_t ofccl__gpu_exec_ops = {
    .size = sizeof(ofccl__exec_ops_t),
    .name = "cuda",
    .copy = gx_copy,
    .fill = gx_fill,
    .reduce = gx_reduce,
    .test = gx_test,
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
