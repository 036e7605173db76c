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
/* Choose r's executor for buffers of kinds `a` and `b` (the memory the
 * request copies and reduces between); OFCCL_ERR_NOT_SUPPORTED, with the
 * communicator's message naming the kind, where none serves them. */
int ofccl__exec_choose(ofccl__req_t *r, ofccl__mem_kind_t a, ofccl__mem_kind_t b);

/* The slow paths: an executor that may complete later (exec.c). */
int ofccl__exec_post_copy(ofccl__req_t *r, void *dst, const void *src, size_t len);
int ofccl__exec_post_fill(ofccl__req_t *r, void *dst, int byte, size_t len);
int ofccl__exec_post_reduce(ofccl__req_t *r, ofccl_redop_t op, void *dst, const void *const *srcs,
                            int nsrc, size_t count, int ndiv);
/* Test r's executor work in flight: 0, or the executor's error (r fails
 * with it). */
int ofccl__exec_pump(ofccl__req_t *r);

static inline bool ofccl__exec_on_host(const ofccl__req_t *r)
{
    return r->exec->ops == &ofccl__exec_cpu_ops;
}

/* Is all of r's executor work done? */
static inline bool ofccl__exec_idle(const ofccl__req_t *r)
{
    return !r->exec_busy;
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
