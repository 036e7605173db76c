/* Communicators: creation over the bootstrap, the sticky error state, signals
 * and the progress loop that dispatches them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "engine_impl.h"
#include "core.h"
#include "pool.h"
#include "trace.h"
#include "util.h"

ofccl__op_t ofccl__comm_op_plain = {NULL, 0};

int ofccl__comm_choose_signal(ofccl_comm_t *comm, const ofccl__prov_caps_t *caps)
{
    /* The transport chose when it was opened (OFCCL_SIGNAL, its capabilities). */
    comm->signal_mode =
        caps->signal == OFCCL__PROV_SIGNAL_ATOMIC ? OFCCL__SIGNAL_ATOMIC : OFCCL__SIGNAL_CQDATA;
    return 0;
}

static void on_done(void *arg, void *op_ctx)
{
    ofccl_comm_t *comm = arg;
    ofccl__op_t *op = op_ctx;

    comm->ops_pending--;
    ofccl__ctx_moved(comm->ctx);
    if (op != NULL && op->cb != NULL)
        op->cb(op, 0, NULL);
}

static void on_error(void *arg, void *op_ctx, int peer, int status, const char *msg)
{
    ofccl_comm_t *comm = arg;
    ofccl__op_t *op = op_ctx;
    bool lost =
        status == OFCCL_ERR_REMOTE_ERROR && peer >= 0 && peer < comm->size && peer != comm->rank;

    comm->ops_pending--;
    ofccl__ctx_moved(comm->ctx);
    /* A peer that has left makes our ops to it fail; a notice that another
     * rank failed first names the real cause, so it is read first. */
    ofccl__notice_check(comm);
    if (op != NULL && op->quiet) {
        /* its caller handles the failure */
    } else if (lost) {
        /* The peer is gone or its endpoint closed. That fails what still
         * needs something from it (engine.c), not what it had delivered
         * before it went, and every call from now on (its position). Unless
         * a peer's notice or an earlier failure explains it, tell the others
         * first, before they blame this rank's departure. */
        bool first = ofccl__comm_gone(comm, peer) == 0;
        bool explained = comm->notice_in != 0 || comm->sticky != 0;

        ofccl__comm_set_gone(comm, peer, OFCCL__GONE_UNREACHABLE);
        if (first && comm->gone_msg[0] == '\0') {
            ofccl__strlcpy(comm->gone_msg, msg, sizeof(comm->gone_msg));
            comm->gone_msg_of = peer;
        }
        if (first && !explained) {
            ofccl__notice_send(comm, ofccl__comm_next_seq(comm), OFCCL__NOTICE_EXITED, peer, -1);
            ofccl__comm_fail_at(comm, ofccl__comm_pos_now(comm), OFCCL_ERR_REMOTE_ERROR,
                                "rank %d on %s can no longer be reached (it has exited or closed "
                                "its endpoint): %s",
                                peer, ofccl__comm_host(comm, peer), msg);
        } else if (first) {
            /* A consequence: the earlier cause stays the message (and the
             * last error), but no later call may start either. */
            OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_CORE,
                         "rank %d: rank %d can no longer be reached, after a failure: %s",
                         comm->rank, peer, msg);
            ofccl__notice_fail(comm);
            if (comm->sticky != 0 && ofccl__comm_pos_now(comm) < comm->fail_pos)
                comm->fail_pos = ofccl__comm_pos_now(comm);
        }
    } else if (comm->sticky != 0) {
        /* Already failed (a notice, a dead peer, a timeout): an op failing
         * now is a consequence. A peer that saw the failure may have left
         * since; blaming it would hide the cause, so the first one stays the
         * communicator's error. */
        OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_CORE,
                     "rank %d: after the communicator failed (%s): %s", comm->rank,
                     comm->sticky_msg, msg);
        ofccl__strlcpy(comm->err.msg, comm->sticky_msg, sizeof(comm->err.msg));
        comm->err.code = comm->sticky;
    } else {
        ofccl__comm_fail(comm, status, "%s", msg);
    }
    if (op != NULL && op->cb != NULL)
        op->cb(op, status, msg);
}

static void on_remote_data(void *arg, uint64_t data)
{
    ofccl_comm_t *comm = arg;
    unsigned kind = 0;
    uint32_t id = 0, payload = 0;

    ofccl__ctx_moved(comm->ctx);
    /* Signals are untrusted: a stray one is counted and logged, never acted on. */
    if (ofccl__sig_decode(data, &kind, &id, &payload) != 0 || id != (comm->id & 0xffu)) {
        comm->corrupt_signals++;
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_CORE,
                    "ignoring signal 0x%llx: not for communicator %u", (unsigned long long)data,
                    comm->id);
        return;
    }
    if (kind == OFCCL__SIG_BARRIER && payload < OFCCL__ARRAY_LEN(comm->barrier_arrived)) {
        comm->barrier_arrived[payload]++;
    } else if (kind < OFCCL__SIG_KINDS && comm->sinks[kind].fn != NULL) {
        comm->sinks[kind].fn(comm->sinks[kind].arg, payload);
    } else {
        comm->corrupt_signals++;
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_CORE, "ignoring signal 0x%llx of unknown kind %u",
                    (unsigned long long)data, kind);
    }
}

void ofccl__comm_handlers(ofccl_comm_t *comm)
{
    comm->handlers = (ofccl__ep_handlers_t){comm, on_done, on_error, on_remote_data};
}

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
        (mode == 0 && ctx->boot->size >= LAZY_AUTO_MIN_RANKS && ofccl__boot_can_get(ctx->boot) &&
         strcmp(ctx->boot->ops->name, "pmix") == 0)) {
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

#define COMM_GETTER(fn, field)                                                                     \
    int fn(const ofccl_comm_t *comm, int *out)                                                     \
    {                                                                                              \
        OFCCL__CHECK_HANDLE(comm);                                                                 \
        if (out == NULL)                                                                           \
            return OFCCL_ERR_INVALID_ARG;                                                          \
        *out = comm->field;                                                                        \
        return 0;                                                                                  \
    }
COMM_GETTER(ofccl_comm_rank, rank)
COMM_GETTER(ofccl_comm_size, size)
COMM_GETTER(ofccl_comm_local_rank, local_rank)
COMM_GETTER(ofccl_comm_local_size, local_size)

const char *ofccl_comm_last_error(const ofccl_comm_t *comm)
{
    if (!ofccl__handle_live(comm))
        return comm ? "ofccl_comm_last_error: communicator destroyed"
                    : "ofccl_comm_last_error: comm is NULL";
    return comm->err.msg;
}

uint64_t ofccl__comm_next_seq(const ofccl_comm_t *comm)
{
    return comm->coll != NULL ? comm->coll->next_seq : 0;
}

uint64_t ofccl__comm_pos_now(const ofccl_comm_t *comm)
{
    return 2 * ofccl__comm_next_seq(comm);
}

/* Errors that leave the protocol out of step with the peers (a timeout or a
 * mismatch inside a collective leaves sequence numbers and buffers so) are
 * sticky: every call and request from their position on reports them. */
static bool is_sticky(int code)
{
    return code == OFCCL_ERR_REMOTE_ERROR || code == OFCCL_ERR_PROVIDER ||
           code == OFCCL_ERR_ABORTED || code == OFCCL_ERR_CORRUPT || code == OFCCL_ERR_TIMEOUT ||
           code == OFCCL_ERR_MISMATCH;
}

static int fail_v(ofccl_comm_t *comm, uint64_t pos, int code, const char *fmt, va_list ap)
{
    char msg[OFCCL__ERRMSG_LEN];
    int first = 0;

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (is_sticky(code)) {
        first = comm->sticky == 0;
        if (first)
            comm->sticky = code;
        if (pos < comm->fail_pos)
            comm->fail_pos = pos;
    }
    /* Lower layers often name the rank already; say it once. */
    if (strncmp(msg, "rank ", 5) == 0)
        code = ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, code, "%s", msg);
    else
        code = ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, code, "rank %d: %s",
                           comm->rank, msg);
    if (first) /* what every later call reports as the cause */
        ofccl__strlcpy(comm->sticky_msg, comm->err.msg, sizeof(comm->sticky_msg));
    return code;
}

int ofccl__comm_fail(ofccl_comm_t *comm, int code, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = fail_v(comm, 0, code, fmt, ap);
    va_end(ap);
    return rc;
}

int ofccl__comm_fail_at(ofccl_comm_t *comm, uint64_t pos, int code, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = fail_v(comm, pos, code, fmt, ap);
    va_end(ap);
    return rc;
}

int ofccl__comm_failed_at(ofccl_comm_t *comm, uint64_t pos)
{
    ofccl__comm_usable(comm);
    return ofccl__comm_covers(comm, pos);
}

void ofccl__comm_set_gone(ofccl_comm_t *comm, int p, int why)
{
    if (comm->gone != NULL && p >= 0 && p < comm->size && p != comm->rank && comm->gone[p] == 0) {
        comm->gone[p] = (uint8_t)why;
        comm->ngone++;
    }
}

int ofccl__comm_check_at(ofccl_comm_t *comm, const char *what, uint64_t pos)
{
    ofccl__notice_fail(comm); /* a peer's failure notice makes this one fail too */
    if (ofccl__comm_failed_at(comm, pos) == 0)
        return 0;
    if (comm->sticky == OFCCL_ERR_ABORTED)
        return ofccl__comm_fail(comm, OFCCL_ERR_ABORTED,
                                "%s: communicator %u was aborted (ofccl_comm_abort); only "
                                "ofccl_comm_destroy is useful now",
                                what, comm->id);
    return ofccl__comm_fail_at(comm, pos, comm->sticky,
                               "%s: communicator %u is unusable since an earlier error (%s): %s; "
                               "destroy it and create a new one",
                               what, comm->id, ofccl_strerror(comm->sticky), comm->sticky_msg);
}

int ofccl__comm_check(ofccl_comm_t *comm, const char *what)
{
    uint64_t pos = ofccl__comm_pos_now(comm);

    ofccl__dead_fail(comm, pos); /* a member the launcher reports gone cannot take part */
    return ofccl__comm_check_at(comm, what, pos);
}

int ofccl__comm_progress(ofccl_comm_t *comm)
{
    ofccl__err_t e;
    int rc;

    /* An abort stops progress at once (ofccl__comm_usable records it). */
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire))
        return ofccl__comm_usable(comm);
    rc = ofccl__ep_progress(comm->ep, &comm->handlers, 64, &e);
    if (rc < 0)
        return ofccl__comm_fail(comm, rc, "%s", e.msg);
    ofccl__notice_check(comm);
    return ofccl__comm_usable(comm);
}

void ofccl__comm_set_sink(ofccl_comm_t *comm, unsigned kind, ofccl__sig_sink_fn fn, void *arg)
{
    if (kind < OFCCL__SIG_KINDS) {
        comm->sinks[kind].fn = fn;
        comm->sinks[kind].arg = arg;
    }
}

uint64_t ofccl__comm_deadline(const ofccl_comm_t *comm, uint64_t now_ns)
{
    uint64_t ms = comm->timeout_ms;

    return ms == 0 ? UINT64_MAX : now_ns + ms * 1000000ull;
}

int ofccl__comm_usable(ofccl_comm_t *comm)
{
    /* The flag is all ofccl_comm_abort touches; the message is written here,
     * by the thread that holds the lock. */
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire) &&
        (comm->sticky == 0 || comm->fail_pos > 0))
        ofccl__comm_fail(comm, OFCCL_ERR_ABORTED, "communicator %u aborted by ofccl_comm_abort",
                         comm->id);
    return comm->sticky != 0 && comm->fail_pos == 0 ? comm->sticky : 0;
}

int ofccl_comm_abort(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    /* No lock: the caller may be the thread a blocked call is waiting on. */
    atomic_store_explicit(&comm->aborted, 1, memory_order_release);
    return 0;
}

int ofccl_comm_set_timeout(ofccl_comm_t *comm, uint64_t timeout_ms)
{
    OFCCL__CHECK_HANDLE(comm);
    if (timeout_ms > 86400000ull * 365)
        return OFCCL_ERR_INVALID_ARG;
    ofccl__ctx_lock(comm->ctx);
    comm->timeout_ms = timeout_ms;
    ofccl__ctx_unlock(comm->ctx);
    return 0;
}

int ofccl__comm_signal(ofccl_comm_t *comm, int peer, unsigned kind, uint32_t payload,
                       unsigned ctrl_word, uint64_t deadline_ns)
{
    ofccl__err_t e;
    int rc;

    if ((rc = ofccl__comm_resolve(comm, peer)) != 0)
        return rc;
    for (;;) {
        if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
            rc = ofccl__ep_writedata(comm->ep, peer, NULL, 0, NULL, &comm->peer_ctrl[peer], 0,
                                     ofccl__sig_encode(kind, comm->id, payload),
                                     &ofccl__comm_op_plain, &e);
        else
            rc = ofccl__ep_atomic_add(comm->ep, peer, 1, &comm->peer_ctrl[peer],
                                      (uint64_t)ctrl_word * sizeof(uint64_t), &ofccl__comm_op_plain,
                                      &e);
        if (rc == 0) {
            comm->ops_pending++;
            return 0;
        }
        if (rc != OFCCL_ERR_AGAIN)
            return ofccl__comm_fail(comm, rc, "signal to peer %d: %s", peer, e.msg);
        rc = ofccl__comm_progress(comm);
        if (rc)
            return rc;
        if (ofccl__now_ns() > deadline_ns)
            return ofccl__comm_fail(comm, OFCCL_ERR_TIMEOUT,
                                    "signal to peer %d: no free operation slot before the "
                                    "deadline",
                                    peer);
    }
}

int ofccl__comm_put_word(ofccl_comm_t *comm, int peer, unsigned src_word, unsigned dst_word,
                         ofccl__op_t *op)
{
    uint64_t v = atomic_load_explicit(&comm->ctrl[src_word], memory_order_relaxed);
    ofccl__err_t e;

    if (!ofccl__comm_resolved(comm, peer))
        return OFCCL_ERR_STATE;
    if (comm->peer_ctrl_at != NULL && comm->peer_ctrl_at[peer] != NULL) {
        atomic_store_explicit(&comm->peer_ctrl_at[peer][dst_word], v, memory_order_release);
        return 0;
    }
    if (ofccl__ep_write(comm->ep, peer, (const void *)&comm->ctrl[src_word], sizeof(uint64_t),
                        comm->ctrl_mr, &comm->peer_ctrl[peer], dst_word * sizeof(uint64_t), op,
                        &e) != 0)
        return e.code;
    comm->ops_pending++;
    return 1;
}

int ofccl__comm_quiesce(ofccl_comm_t *comm, uint64_t deadline_ns, const char *what)
{
    ofccl__idle_t idle = {0};

    for (unsigned spins = 1; comm->ops_pending > 0; spins++) {
        int rc = ofccl__comm_progress(comm);
        if (spins % 32 == 0)
            ofccl__idle_poll(comm->ctx, &idle);
        if (rc)
            return rc;
        if (ofccl__now_ns() > deadline_ns)
            return ofccl__comm_fail(comm, OFCCL_ERR_TIMEOUT,
                                    "%s: %u operation(s) still pending at the deadline", what,
                                    comm->ops_pending);
    }
    return 0;
}

/* Public entry points: the same calls under the context lock (progress.c). */
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
