/*
 * The public completion calls — ofccl_test, ofccl_wait, ofccl_progress,
 * ofccl_req_free, ofccl_req_stream_wait — over the engine in engine.c.
 */

#include "engine_impl.h"
#include "exec.h"
#include "util.h"

/* A communicator's failure is its own: it reaches the caller through that
 * communicator's requests and calls, never through the context's progress. */
static int progress_unlocked(ofccl_ctx_t *ctx)
{
    if (ctx == NULL)
        return OFCCL_ERR_INVALID_ARG;
    for (ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next)
        ofccl__coll_progress(c, true);
    return 0;
}

/* Waiting or testing drives every communicator of the context, not only the
 * request's own: a rank waiting on A must keep feeding B, which a peer may be
 * waiting on first (docs/api.md, "Progress"). Errors of other communicators
 * stay theirs; the caller sees only the request's status. */
static void progress_all(ofccl_ctx_t *ctx, bool check_clock)
{
    for (ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next)
        ofccl__coll_progress(c, check_clock);
}

static int test_unlocked(ofccl_req_t *req, int *done)
{
    if (req == NULL || done == NULL || req->state == OFCCL__REQ_FREE)
        return OFCCL_ERR_INVALID_ARG;
    if (req->state == OFCCL__REQ_ACTIVE)
        progress_all(req->comm->ctx, true);
    *done = req->state == OFCCL__REQ_DONE;
    return *done ? req->status : 0;
}

int ofccl_wait(ofccl_req_t *req)
{
    ofccl_ctx_t *ctx;
    ofccl__idle_t idle = {0};
    bool mapped;
    int state;

    if (req == NULL)
        return OFCCL_ERR_INVALID_ARG;
    /* The request's state is read under the lock: a progress thread or the
     * watcher may be completing it. */
    ctx = req->comm->ctx;
    ofccl__ctx_lock(ctx);
    state = req->state;
    mapped = ofccl__coll_lockfree_watch(req);
    ofccl__ctx_unlock(ctx);
    if (state == OFCCL__REQ_FREE)
        return OFCCL_ERR_INVALID_ARG;
    /* Bounded: every request carries a deadline that progress enforces. One
     * pass per lock hold, so a progress thread can interleave. */
    for (unsigned spins = 1;; spins++) {
        /* A mapped eager request is watched without the lock (its marks are
         * atomics; the lock's atomics would stall on our own stores reaching
         * the peer), and once every mark is in, only it is driven, under the
         * lock. Everything else, and every 64th pass, is a full pass. */
        bool full = !mapped || spins % 64 == 0;
        bool landed = mapped && !full && ofccl__eager_all_marked(req);
        if (full || landed) {
            int status;
            ofccl__ctx_lock(ctx);
            if (req->state == OFCCL__REQ_ACTIVE && landed)
                ofccl__coll_progress_req(req);
            else if (req->state == OFCCL__REQ_ACTIVE)
                progress_all(ctx, spins % 64 == 0);
            state = req->state;
            status = req->status;
            ofccl__ctx_unlock(ctx);
            if (state != OFCCL__REQ_ACTIVE)
                return status;
        }
        /* The clock is first read after 32 passes: a small collective is over
         * before that. Then ofccl__idle_poll yields (oversubscribed ranks) and,
         * once nothing has moved for OFCCL_SPIN_US, naps. */
        if (spins % 32 == 0)
            ofccl__idle_poll(ctx, &idle);
    }
}

static int req_free_unlocked(ofccl_req_t *req)
{
    if (req == NULL || req->state == OFCCL__REQ_FREE)
        return OFCCL_ERR_INVALID_ARG;
    if (req->state == OFCCL__REQ_ACTIVE)
        return ofccl__comm_fail(req->comm, OFCCL_ERR_BUSY,
                                "ofccl_req_free: %s #%llu is still running; wait for it first",
                                ofccl__coll_name(req->coll), (unsigned long long)req->seq);
    req->state = OFCCL__REQ_FREE;
    return 0;
}

/* A stream-ordered request is waited for on the stream (its end word, or
 * its algorithm's end event); any other on the host. */
static int stream_wait_unlocked(ofccl_req_t *req, ofccl_stream_t stream)
{
    if (req->state == OFCCL__REQ_FREE)
        return OFCCL_ERR_INVALID_ARG;
    if (req->state != OFCCL__REQ_ACTIVE)
        return req->status;
    if (req->stream_ord)
        return ofccl__exec_stream_wait(req, stream);
    if (req->algo != NULL && req->algo->stream_wait != NULL)
        return req->algo->stream_wait(req, stream);
    return ofccl_wait(req);
}

/* Public entry points: the same calls under the context lock (lock.c). */
int ofccl_progress(ofccl_ctx_t *ctx)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, progress_unlocked(ctx));
}

int ofccl_test(ofccl_req_t *req, int *done)
{
    if (req == NULL)
        return OFCCL_ERR_INVALID_ARG;
    OFCCL__LOCKED(req->comm->ctx, test_unlocked(req, done));
}

int ofccl_req_free(ofccl_req_t *req)
{
    if (req == NULL)
        return OFCCL_ERR_INVALID_ARG;
    OFCCL__LOCKED(req->comm->ctx, req_free_unlocked(req));
}

int ofccl_req_stream_wait(ofccl_req_t *req, ofccl_stream_t stream)
{
    if (req == NULL)
        return OFCCL_ERR_INVALID_ARG;
    OFCCL__LOCKED(req->comm->ctx, stream_wait_unlocked(req, stream));
}
