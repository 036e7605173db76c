/*
 * The lifecycle of a world communicator: ofccl_comm_world creates one over
 * the bootstrap (setup.c does the work, over any exchange), and
 * ofccl_comm_destroy takes down any communicator. The top of lib/core's
 * communicator files: nothing below calls it.
 */
#include <stdio.h>
#include <string.h>

#include "comm_impl.h"
#include "engine_impl.h"
#include "trace.h"
#include "util.h"

/* A world communicator's exchange: the bootstrap. */
static int boot_allgather(void *arg, const void *in, size_t len, void *out, size_t slot,
                          size_t *lens, ofccl__err_t *e)
{
    return ofccl__boot_allgather(arg, in, len, out, slot, lens, e);
}

/* OFCCL_BOOT_EXCHANGE=lazy (or auto under PMIx, which serves records on
 * demand, from LAZY_AUTO_MIN_RANKS ranks on: below, collecting them costs
 * less than the extra exchanges): publish, read on first use. Where a
 * provider attaches every peer at once (shm, the local and per-peer
 * transports) creation then collects them all (setup.c). */
#define LAZY_AUTO_MIN_RANKS 64
static int boot_publish(void *arg, const void *in, size_t len, size_t slot,
                        struct ofccl__boot_pub **out, ofccl__err_t *e)
{
    return ofccl__boot_publish(arg, true, in, len, slot, out, e);
}

static int boot_allreduce(void *arg, const uint64_t *in, uint64_t *out, int n, const uint8_t *ops,
                          ofccl__err_t *e)
{
    return ofccl__boot_allreduce(arg, in, out, n, ops, e);
}

static int comm_world_locked(ofccl_ctx_t *ctx, ofccl_comm_t **out)
{
    ofccl__comm_init_t init = {"ofccl_comm_world", ctx->boot->rank, ctx->boot->size,
                               ctx->boot->local_rank, ctx->boot->local_size};
    int64_t mode = ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_BOOT_EXCHANGE); /* auto|all|lazy */
    ofccl__xchg_t x = {ctx->boot, boot_allgather, NULL, NULL};
    int rc;

    /* Every rank decides alike, from the job alone: were the provider part of
     * it, ranks started with different ones would run different exchanges
     * instead of naming the difference. */
    if (mode == 2 ||
        (mode == 0 && ctx->boot->size >= LAZY_AUTO_MIN_RANKS && ofccl__boot_lazy_auto(ctx->boot))) {
        x.publish = boot_publish;
        x.allreduce = boot_allreduce;
    }

    if (out == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_INVALID_ARG,
                           "ofccl_comm_world: comm is NULL");
    rc = ofccl__comm_create(ctx, &init, &x, out);
    /* Ranks that run different exchanges (OFCCL_BOOT_EXCHANGE differs) meet
     * as a failed fence or a size no rank expected: say which this one ran. */
    if (rc == OFCCL_ERR_BOOTSTRAP || rc == OFCCL_ERR_CORRUPT) {
        size_t n = strnlen(ctx->err.msg, sizeof(ctx->err.msg));

        snprintf(ctx->err.msg + n, sizeof(ctx->err.msg) - n,
                 " (this rank ran the %s exchange of setup records, OFCCL_BOOT_EXCHANGE=%s; ranks "
                 "that run different ones fail here)",
                 x.publish != NULL ? "lazy" : "collecting",
                 mode == 2   ? "lazy"
                 : mode == 1 ? "all"
                             : "auto");
    }
    return rc;
}

static int comm_destroy_locked(ofccl_comm_t *comm)
{
    ofccl_ctx_t *ctx;

    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    ctx = comm->ctx;
    if (comm->nwins > 0)
        return ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, OFCCL_ERR_BUSY,
                           "ofccl_comm_destroy: %d registered window(s) still open", comm->nwins);
    for (int s = 0; comm->coll != NULL && s < OFCCL__SLOTS; s++)
        if (comm->coll->reqs[s].state == OFCCL__REQ_ACTIVE && !comm->sticky)
            return ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, OFCCL_ERR_BUSY,
                               "ofccl_comm_destroy: collective #%llu is still running; wait "
                               "for it (or abort the communicator) first",
                               (unsigned long long)comm->coll->reqs[s].seq);
    /* Local: give our own ops a moment to finish, but never wait on dead peers. */
    if (comm->ops_pending > 0 && !comm->sticky)
        ofccl__comm_quiesce(comm, ofccl__now_ns() + 1000000000ull, "destroy");
    /* A failed communicator's peers may still be writing into it (their
     * requests ended at other times than ours). The provider may owe them the
     * end of a write that already landed here (shm hands a write's command
     * back to its sender from the target's progress, later when the sender's
     * return queue is full): 20 ms of progress lets that out before the
     * endpoint closes. */
    if (comm->sticky && comm->ep != NULL)
        ofccl__comm_linger(comm, ofccl__now_ns() + 20000000ull);
    if (comm->gpu_free != NULL) /* lib/coll/gpu: its streams released first */
        comm->gpu_free(comm);
    ofccl__handle_remove(comm);
    comm->ctx->ncomms--;
    for (ofccl_comm_t **pp = &comm->ctx->comms; *pp != NULL; pp = &(*pp)->next)
        if (*pp == comm) {
            *pp = comm->next;
            break;
        }
    ofccl__comm_free(comm);
    if (ctx->trace != NULL) /* a job that never closes its context still leaves a trace */
        ofccl__trace_write(ctx->trace);
    return 0;
}

/* Public entry points: the same calls under the context lock (lock.c). */
int ofccl_comm_world(ofccl_ctx_t *ctx, ofccl_comm_t **out)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, comm_world_locked(ctx, out));
}

int ofccl_comm_destroy(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, comm_destroy_locked(comm));
}
