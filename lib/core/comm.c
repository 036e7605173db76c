/* A communicator at work: its completion handlers, checks at the start of a
 * call (a peer's notice, a member known gone, the sticky error), signals, the
 * progress loop that dispatches them, aborts and timeouts. Creation and
 * destruction are above it (world.c, setup.c); its state below
 * (comm_state.c). */
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

int ofccl_comm_abort(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    /* No lock: the caller may be the thread a blocked call is waiting on.
     * The watcher, where one runs, fails and releases the communicator's
     * stream-ordered requests at once. */
    atomic_store_explicit(&comm->aborted, 1, memory_order_release);
    ofccl__watch_kick(comm->ctx);
    return 0;
}

int ofccl_comm_set_stream(ofccl_comm_t *comm, ofccl_stream_t stream)
{
    OFCCL__CHECK_HANDLE(comm);
    ofccl__ctx_lock(comm->ctx);
    comm->stream = stream;
    ofccl__ctx_unlock(comm->ctx);
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

void ofccl__comm_linger(ofccl_comm_t *comm, uint64_t deadline_ns)
{
    ofccl__err_t e;

    while (ofccl__now_ns() < deadline_ns)
        if (ofccl__ep_progress(comm->ep, &comm->handlers, 64, &e) < 0)
            return;
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
