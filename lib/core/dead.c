/*
 * Ranks that are gone. The launcher's word first: the bootstrap (PMIx
 * failure events) calls on_dead on its own thread; it only records, with
 * atomics: which world rank, and a static string naming the report. The
 * context's threads read that in progress (engine.c) and when a call starts
 * (ofccl__comm_check). A request fails for a gone rank only while it still
 * needs something from it (its descriptor, its data): what a rank delivered
 * before it died stands. A call that needs every member (a barrier, an
 * exchange) fails at once when one is gone, whoever said so: the launcher,
 * a peer's notice, the transport, or the local process watch; it could not
 * have taken part. Launchers that raise no event leave the first source
 * empty; then the others or the deadline decide.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine_impl.h"
#include "util.h"

static void on_dead(void *arg, int rank, const char *source)
{
    ofccl_ctx_t *ctx = arg;
    const char *none = NULL;

    if (rank < 0 || rank >= ctx->boot->size || source == NULL)
        return;
    if (atomic_compare_exchange_strong(&ctx->dead_why[rank], &none, source))
        atomic_fetch_add_explicit(&ctx->dead_count, 1, memory_order_release);
    /* Wake waiting loops that nap (a lost increment only delays them by a nap). */
    atomic_fetch_add_explicit(&ctx->activity, 1, memory_order_relaxed);
}

void ofccl__dead_start(ofccl_ctx_t *ctx)
{
    ofccl__err_t e;
    int rc;

    ctx->dead_why = calloc((size_t)ctx->boot->size, sizeof(*ctx->dead_why));
    if (ctx->dead_why == NULL) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE,
                    "no memory to follow the launcher's failure events: a dead rank is found "
                    "by its transport or at the deadline");
        return;
    }
    rc = ofccl__boot_watch(ctx->boot, on_dead, ctx, &e);
    if (rc == 0)
        ctx->dead_watched = 1;
    else if (rc != OFCCL_ERR_NOT_SUPPORTED)
        OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE,
                    "not following the launcher's failure events (%s): a dead rank is found by "
                    "its transport or at the deadline",
                    e.msg);
}

void ofccl__dead_stop(ofccl_ctx_t *ctx)
{
    if (ctx->dead_watched)
        ofccl__boot_unwatch(ctx->boot);
    ctx->dead_watched = 0;
    free((void *)ctx->dead_why);
    ctx->dead_why = NULL;
}

const char *ofccl__dead_source(const ofccl_comm_t *comm, int p)
{
    const ofccl_ctx_t *ctx = comm->ctx;

    if (atomic_load_explicit(&ctx->dead_count, memory_order_acquire) == 0 || comm->world_of == NULL)
        return NULL;
    return atomic_load_explicit(&ctx->dead_why[comm->world_of[p]], memory_order_relaxed);
}

void ofccl__dead_name(const ofccl_comm_t *comm, int p, const char *source, char *buf, size_t len)
{
    snprintf(buf, len, "rank %d (world rank %d) on %s has exited, reported by the launcher (%s)", p,
             comm->world_of != NULL ? comm->world_of[p] : p, ofccl__comm_host(comm, p), source);
}

void ofccl__dead_gone_name(const ofccl_comm_t *comm, int p, char *buf, size_t len)
{
    switch (ofccl__comm_gone(comm, p)) {
    case OFCCL__GONE_EXITED:
        snprintf(buf, len, "rank %d on %s has exited (a peer saw it go and told this rank)", p,
                 ofccl__comm_host(comm, p));
        break;
    case OFCCL__GONE_SILENT:
        snprintf(buf, len,
                 "rank %d on %s stopped responding (a peer timed out waiting for it and told "
                 "this rank)",
                 p, ofccl__comm_host(comm, p));
        break;
    default:
        snprintf(buf, len,
                 "rank %d on %s can no longer be reached (it has exited or closed its "
                 "endpoint)%s%s",
                 p, ofccl__comm_host(comm, p), comm->gone_msg_of == p ? ": " : "",
                 comm->gone_msg_of == p ? comm->gone_msg : "");
        break;
    }
}

/* The launcher's word or the communicator's mark (a notice, the transport). */
static bool marked(const ofccl_comm_t *comm, int p, int *code, char *buf, size_t len)
{
    const char *source = p != comm->rank ? ofccl__dead_source(comm, p) : NULL;

    *code = OFCCL_ERR_REMOTE_ERROR;
    if (source != NULL) {
        ofccl__dead_name(comm, p, source, buf, len);
        return true;
    }
    if (ofccl__comm_gone(comm, p) == 0)
        return false;
    ofccl__dead_gone_name(comm, p, buf, len);
    if (ofccl__comm_gone(comm, p) == OFCCL__GONE_SILENT)
        *code = OFCCL_ERR_TIMEOUT;
    return true;
}

/* The process watch (the local transport, shm): a peer whose process has
 * exited, or -1. */
static int watched_gone(const ofccl_comm_t *comm, char *buf, size_t len)
{
    int pid = -1, p = comm->ctx->peer_watch ? ofccl__ep_peer_gone(comm->ep, &pid) : -1;

    if (p >= 0)
        snprintf(buf, len, "rank %d (pid %d) on %s has exited", p, pid, ofccl__comm_host(comm, p));
    return p;
}

bool ofccl__dead_known(const ofccl_comm_t *comm, int p, int *code, char *buf, size_t len)
{
    if (marked(comm, p, code, buf, len))
        return true;
    *code = OFCCL_ERR_REMOTE_ERROR;
    return watched_gone(comm, buf, len) == p;
}

int ofccl__dead_fail(ofccl_comm_t *comm, uint64_t pos)
{
    char who[OFCCL__ERRMSG_LEN / 2];
    int code = OFCCL_ERR_REMOTE_ERROR, p;

    if (ofccl__comm_failed_at(comm, pos))
        return comm->sticky;
    for (p = 0; p < comm->size; p++)
        if (marked(comm, p, &code, who, sizeof(who)))
            break;
    if (p == comm->size && watched_gone(comm, who, sizeof(who)) < 0)
        return 0;
    return ofccl__comm_fail_at(comm, pos, code, "communicator %u: %s; the communicator is unusable",
                               comm->id, who);
}
