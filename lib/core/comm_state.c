/*
 * A communicator's state, as every file of lib/core reads and records it: its
 * failures (the sticky error and the position from which it covers calls and
 * requests), whether it is usable, deadlines, peers known gone, host names
 * for messages, and what its endpoint can do. Below everything else of
 * lib/core but the lock: it calls nothing there, so any file may.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine_impl.h"
#include "util.h"

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

const char *ofccl_comm_last_error(const ofccl_comm_t *comm)
{
    if (!ofccl__handle_live(comm))
        return comm ? "ofccl_comm_last_error: communicator destroyed"
                    : "ofccl_comm_last_error: comm is NULL";
    return comm->err.msg;
}

const char *ofccl__comm_host(const ofccl_comm_t *comm, int rank)
{
    if (comm->host_of == NULL || rank < 0 || rank >= comm->size)
        return "?";
    return comm->host_name[comm->host_of[rank]];
}

const ofccl__prov_caps_t *ofccl__comm_caps(const ofccl_comm_t *comm)
{
    return ofccl__ep_caps(comm->ep);
}

bool ofccl__comm_peer_local(const ofccl_comm_t *comm, int p)
{
    return ofccl__ep_peer_class(comm->ep, p) == OFCCL__PEER_LOCAL;
}

bool ofccl__comm_note_once(ofccl_comm_t *comm, unsigned bit)
{
    bool first = !(comm->coll->notes & (1u << bit));

    comm->coll->notes |= 1u << bit;
    return first;
}
