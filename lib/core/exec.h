/*
 * The executor of a request: every copy and reduction of collective data in
 * lib/coll goes through these calls, never through memcpy or ofccl__reduce.
 * A request's executor is chosen once, when it is posted, from the memory
 * kinds of its buffers, out of the context's registry (one executor per
 * kind; the host's is registered with the context). Work on host memory is
 * done at post, inline; an executor that completes later (a GPU's, on a
 * stream) hands back tickets, which the engine tests on every progress pass:
 * a request completes only once all of its executor work is done, and an
 * algorithm that publishes what a copy or sum produced (a through word, a
 * count of arrivals) asks ofccl__exec_idle first.
 *
 * The ops table and the registry are declared in providers/exec_ops.h, where
 * the local transport copies through them too.
 */
#ifndef OFCCL_CORE_EXEC_H
#define OFCCL_CORE_EXEC_H

#include <string.h>

#include "engine.h"
#include "exec_ops.h"
#include "reduce.h"

/* The host's executor: memcpy, memset and the reduction kernels, done at post. */
extern const ofccl__exec_ops_t ofccl__exec_cpu_ops;

/* The context's registry with the host's executor in it (ctx creation). */
void ofccl__exec_init(ofccl_ctx_t *ctx);
/* Add (or replace) the executor of memory kind `kind` (a device ordinal):
 * requests posted later on buffers of that kind use it, and so do the
 * context's endpoints opened later. 0, or OFCCL_ERR_RESOURCE. */
int ofccl__exec_register(ofccl_ctx_t *ctx, ofccl__mem_kind_t kind, const ofccl__exec_ops_t *ops,
                         void *state);
/* Choose r's executors for the caller's buffers of kinds `a` and `b`: the
 * io executor of that memory (a device's, registered with the context on
 * first use), and for the algorithm the same, until the entry point stages
 * the buffers in host memory (ofccl__exec_staged). Device memory makes the
 * request stream-ordered on the communicator's stream, and gated: the io
 * copies made while it is gated go on that stream (see engine.h).
 * OFCCL_ERR_NOT_SUPPORTED, with the communicator's message naming the kind,
 * where no executor serves them. */
int ofccl__exec_choose(ofccl__req_t *r, ofccl__mem_kind_t a, ofccl__mem_kind_t b);
/* The algorithm runs on host memory (staging) whatever the caller passed. */
void ofccl__exec_staged(ofccl__req_t *r);

/* ---- stream-ordered requests (engine.c) ---- */
/* At post, once the io copies into staging are enqueued: a mark on the
 * caller's stream after them, and the stream's wait for the request's end
 * word. 0, or an error (nothing enqueued on the stream waits then). */
int ofccl__exec_enter(ofccl__req_t *r);
/* Has the caller's stream reached the request (its mark)? 1 yes (the gate
 * opens), 0 not yet, or an error. */
int ofccl__exec_gate(ofccl__req_t *r);
/* At post, for an algorithm that asks (OFCCL__BUF_OWN_PIECES): `len` bytes
 * of the caller's memory at `src` into staging at `dst`, as
 * ofccl__exec_io_copy does, but where they go on the caller's stream and
 * are large, in pieces with a mark after each: the first mark is the gate,
 * so the request starts once the first piece is in. Once per request, before
 * any other io copy on the stream. 0, or an error. */
int ofccl__exec_io_copy_in(ofccl__req_t *r, void *dst, const void *src, size_t len);
/* Bytes of the input in staging from its start, the pieces' marks passed so
 * far polled (SIZE_MAX where it was not copied in by pieces, or all is in).
 * Only once the gate is open. */
size_t ofccl__exec_in_ready(ofccl__req_t *r);
/* Is the input in up to byte `end` (the cached answer first)? */
static inline bool ofccl__exec_in(ofccl__req_t *r, size_t end)
{
    return end <= r->in_ready || end <= ofccl__exec_in_ready(r);
}
/* Before the request's staging is released: 1 once every piece is in (or
 * there were none), 0 not yet. */
int ofccl__exec_in_done(ofccl__req_t *r);
/* The request is over (done or failed): its end word is stored, so the
 * caller's stream goes on. Host stores only. */
void ofccl__exec_release(ofccl__req_t *r);
/* Make `stream` wait for the request's end word too (ofccl_req_stream_wait). */
int ofccl__exec_stream_wait(ofccl__req_t *r, ofccl_stream_t stream);

/* The slow paths: an executor that may complete later (exec.c). */
int ofccl__exec_post_copy(ofccl__req_t *r, void *dst, const void *src, size_t len);
int ofccl__exec_post_io_copy(ofccl__req_t *r, void *dst, const void *src, size_t len);
/* A reduction of the caller's buffers into the caller's buffer by the io
 * executor (one rank: a collective that is a local reduction), as
 * ofccl__exec_io_copy orders it. */
int ofccl__exec_io_reduce(ofccl__req_t *r, ofccl_redop_t op, void *dst, const void *const *srcs,
                          int nsrc, size_t count, int ndiv);
int ofccl__exec_post_fill(ofccl__req_t *r, void *dst, int byte, size_t len);
int ofccl__exec_post_reduce(ofccl__req_t *r, ofccl_redop_t op, void *dst, const void *const *srcs,
                            int nsrc, size_t count, int ndiv);
/* Test r's executor work in flight (both executors'): 0, or the
 * executor's error (r fails with it). */
int ofccl__exec_pump(ofccl__req_t *r);

/* Does the algorithm run on host memory? */
static inline bool ofccl__exec_on_host(const ofccl__req_t *r)
{
    return r->exec->ops == &ofccl__exec_cpu_ops;
}

/* Are the caller's buffers host memory? */
static inline bool ofccl__exec_io_on_host(const ofccl__req_t *r)
{
    return r->io->kind == OFCCL__MEM_HOST;
}

/* Is all of r's executor work done? */
static inline bool ofccl__exec_idle(const ofccl__req_t *r)
{
    return !r->exec_busy && !r->io_busy;
}

/*
 * Copy `len` bytes, fill `len` bytes with `byte`, or reduce (as
 * ofccl__reduce, with r's dtype) through r's executor: 0 when posted (done
 * already on the host), or an error. The buffers stay as they are until
 * ofccl__exec_idle(r).
 */
static inline int ofccl__exec_copy(ofccl__req_t *r, void *dst, const void *src, size_t len)
{
    if (ofccl__exec_on_host(r)) {
        if (len > 0)
            memcpy(dst, src, len);
        return 0;
    }
    return ofccl__exec_post_copy(r, dst, src, len);
}

/* A copy between the caller's buffers and staging, by the io executor: on
 * the caller's stream while the request is gated (stream-ordered behind the
 * caller's work on them), else on the executor's own. */
static inline int ofccl__exec_io_copy(ofccl__req_t *r, void *dst, const void *src, size_t len)
{
    if (ofccl__exec_io_on_host(r)) {
        if (len > 0)
            memcpy(dst, src, len);
        return 0;
    }
    return ofccl__exec_post_io_copy(r, dst, src, len);
}

static inline int ofccl__exec_fill(ofccl__req_t *r, void *dst, int byte, size_t len)
{
    if (ofccl__exec_on_host(r)) {
        if (len > 0)
            memset(dst, byte, len);
        return 0;
    }
    return ofccl__exec_post_fill(r, dst, byte, len);
}

static inline int ofccl__exec_reduce(ofccl__req_t *r, ofccl_redop_t op, void *dst,
                                     const void *const *srcs, int nsrc, size_t count, int ndiv)
{
    if (ofccl__exec_on_host(r))
        return ofccl__reduce(r->dtype, op, dst, srcs, nsrc, count, ndiv);
    return ofccl__exec_post_reduce(r, op, dst, srcs, nsrc, count, ndiv);
}

#endif
