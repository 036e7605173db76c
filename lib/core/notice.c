/*
 * Failure notices. A rank that gives up on a collective because of a peer
 * (the peer exited, stopped responding, or posted something else) would leave
 * the other ranks to find out at their own deadline, or from its departure,
 * which they would then blame on it. So it first writes one word into every
 * other rank's control region: {field, reason, culprit}. Each rank reads that word
 * on every progress pass and fails the communicator naming the culprit, unless
 * it has already failed for its own reasons (the first failure is the one a
 * communicator reports). A notice is best effort: a rank it cannot reach will
 * learn at its deadline, as before. A mismatch notice says which argument
 * differs (the field), so that every rank's message names it, also on ranks
 * that never see the differing descriptor themselves.
 */
#include <stdio.h>

#include "core.h"
#include "util.h"

#define NOTICE_CULPRIT_MASK 0xffffffffull
#define MISMATCH_GRACE_NS 100000000ull /* 100 ms */

static void notice_done(ofccl__op_t *op, int status, const char *msg)
{
    ofccl_comm_t *comm = (ofccl_comm_t *)((char *)op - offsetof(ofccl_comm_t, notice_op));

    (void)status;
    (void)msg;
    comm->notices_out--;
}

const char *ofccl__field_name(int field)
{
    static const char *const names[OFCCL__FIELDS] = {
        [OFCCL__FIELD_NONE] = "arguments",
        [OFCCL__FIELD_OPERATION] =
            "operation (all-gather vs reduce-scatter: collectives posted in a different order)",
        [OFCCL__FIELD_DTYPE] = "dtype",
        [OFCCL__FIELD_REDOP] = "reduction op",
        [OFCCL__FIELD_ALGO] = "algorithm (OFCCL_ALGO_* differs)",
        [OFCCL__FIELD_CALL] = "call (a bucket collective on one rank, a flat one on the other)",
        [OFCCL__FIELD_ROOT] = "root",
        [OFCCL__FIELD_SCALAR] = "premul scalar",
        [OFCCL__FIELD_ORDER] = "collective order (collectives posted in a different order)",
        [OFCCL__FIELD_COUNT] = "count",
        [OFCCL__FIELD_TENSORS] = "bucket tensors (number or order)",
        [OFCCL__FIELD_LAYOUT] = "bucket layout (a tensor's size)",
        [OFCCL__FIELD_PATH] = "count (or OFCCL_EAGER_BYTES: one rank took the eager path)",
    };

    return field > 0 && field < OFCCL__FIELDS ? names[field] : names[0];
}

static void send_word(ofccl_comm_t *comm, int reason, int culprit, int skip, int field)
{
    uint64_t word = (uint64_t)field << 40 | (uint64_t)reason << 32 | ((uint64_t)culprit + 1);
    ofccl__err_t e;

    if (comm->notice_sent || culprit < 0 || (comm->size < 3 && reason != OFCCL__NOTICE_MISMATCH))
        return; /* once; with two ranks only a mismatch has somebody to tell */
    comm->notice_sent = 1;
    atomic_store_explicit(&comm->ctrl[OFCCL__CTRL_NOTICE_OUT], word, memory_order_relaxed);
    comm->notice_op = (ofccl__op_t){.cb = notice_done, .quiet = 1};
    for (int p = 0; p < comm->size; p++) {
        /* A culprit of a mismatch may not see it itself (it waits for data
         * that will never come): it is told too. */
        if (p == comm->rank || p == skip || (p == culprit && reason != OFCCL__NOTICE_MISMATCH))
            continue;
        /* Lazily created: only the peers this rank works with hear it
         * directly; resolving all others on a failure path would stall. */
        if (!ofccl__comm_resolved(comm, p))
            continue;
        if (comm->peer_ctrl_at != NULL && comm->peer_ctrl_at[p] != NULL) {
            atomic_store_explicit(&comm->peer_ctrl_at[p][OFCCL__CTRL_NOTICE_IN], word,
                                  memory_order_release);
            continue;
        }
        if (ofccl__ep_write(comm->ep, p, (const void *)&comm->ctrl[OFCCL__CTRL_NOTICE_OUT],
                            sizeof(uint64_t), comm->ctrl_mr, &comm->peer_ctrl[p],
                            OFCCL__CTRL_NOTICE_IN * sizeof(uint64_t), &comm->notice_op, &e) == 0) {
            comm->ops_pending++;
            comm->notices_out++;
        }
    }
    OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_CORE,
                "rank %d: told the other ranks of communicator %u that rank %d failed (reason %d)",
                comm->rank, comm->id, culprit, reason);
}

void ofccl__notice_send(ofccl_comm_t *comm, int reason, int culprit, int skip)
{
    send_word(comm, reason, culprit, skip, OFCCL__FIELD_NONE);
}

void ofccl__notice_mismatch(ofccl_comm_t *comm, int culprit, int field)
{
    send_word(comm, OFCCL__NOTICE_MISMATCH, culprit, -1, field);
}

bool ofccl__notice_busy(const ofccl_comm_t *comm)
{
    return comm->notices_out > 0;
}

/* A communicator with no collective running fails at once; otherwise each
 * running request fails from its own progress, with its own account of what
 * it waits for (ofccl__notice_cause). */
static bool any_running(const ofccl_comm_t *comm)
{
    return ofccl__comm_active_requests(comm) > 0;
}

int ofccl__notice_check(ofccl_comm_t *comm)
{
    uint64_t word = atomic_load_explicit(&comm->ctrl[OFCCL__CTRL_NOTICE_IN], memory_order_acquire);
    int culprit = (int)(word & NOTICE_CULPRIT_MASK) - 1, reason = (int)(word >> 32 & 0xff);
    int field = (int)(word >> 40 & 0xff);

    if (word == 0 || comm->sticky || comm->notice_in != 0)
        return comm->sticky;
    /* Untrusted: a word that names no rank, or no reason or field we know, is
     * ignored (and counted). */
    if (culprit < 0 || culprit >= comm->size || reason < OFCCL__NOTICE_EXITED ||
        reason > OFCCL__NOTICE_MISMATCH || field >= OFCCL__FIELDS || word >> 48 != 0 ||
        (field != 0 && reason != OFCCL__NOTICE_MISMATCH)) {
        comm->corrupt_signals++;
        atomic_store_explicit(&comm->ctrl[OFCCL__CTRL_NOTICE_IN], 0, memory_order_relaxed);
        return 0;
    }
    comm->notice_in = reason;
    comm->notice_culprit = culprit;
    comm->notice_field = field;
    comm->notice_ns = ofccl__coarse_ns();
    comm->notice_sent = 1; /* the rank that saw it first told everyone */
    if (any_running(comm))
        return 0;
    return ofccl__notice_fail(comm);
}

int ofccl__notice_fail(ofccl_comm_t *comm)
{
    int culprit = comm->notice_culprit, reason = comm->notice_in;
    char who[96];

    if (reason == 0 || comm->sticky)
        return comm->sticky;
    comm->notice_first = 1;
    if (culprit == comm->rank)
        snprintf(who, sizeof(who), "this rank");
    else
        snprintf(who, sizeof(who), "rank %d on %s", culprit, ofccl__comm_host(comm, culprit));
    switch (reason) {
    case OFCCL__NOTICE_EXITED:
        return ofccl__comm_fail(comm, OFCCL_ERR_REMOTE_ERROR,
                                "communicator %u: %s has exited (a peer saw it go and told this "
                                "rank); the communicator is unusable",
                                comm->id, who);
    case OFCCL__NOTICE_SILENT:
        return ofccl__comm_fail(comm, OFCCL_ERR_TIMEOUT,
                                "communicator %u: %s stopped responding (a peer timed out "
                                "waiting for it and told this rank); the communicator is unusable",
                                comm->id, who);
    default:
        if (comm->notice_field != OFCCL__FIELD_NONE)
            return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                                    "communicator %u: %s posted a collective with a different %s "
                                    "than a peer (that peer's message names both ranks); the "
                                    "communicator is unusable",
                                    comm->id, who, ofccl__field_name(comm->notice_field));
        return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                                "communicator %u: %s posted a collective whose arguments differ "
                                "from a peer's (that peer's message names the field); the "
                                "communicator is unusable",
                                comm->id, who);
    }
}

int ofccl__notice_cause(const ofccl_comm_t *comm, int *culprit, char *buf, size_t len)
{
    buf[0] = '\0';
    *culprit = -1;
    if (comm->notice_in == OFCCL__NOTICE_EXITED) {
        *culprit = comm->notice_culprit;
        snprintf(buf, len, "rank %d has exited (a peer saw it go and told this rank); ",
                 comm->notice_culprit);
    } else if (comm->notice_in == OFCCL__NOTICE_SILENT) {
        snprintf(buf, len,
                 "a peer timed out waiting for rank %d and told this rank, which stops "
                 "waiting too; ",
                 comm->notice_culprit);
    } else if (comm->notice_in == OFCCL__NOTICE_MISMATCH) {
        char who[32] = "this rank";

        /* A rank whose own descriptors show the difference names the field:
         * give that check a moment before taking the peer's word for it. */
        if (ofccl__coarse_ns() - comm->notice_ns < MISMATCH_GRACE_NS)
            return 0;
        if (comm->notice_culprit != comm->rank)
            snprintf(who, sizeof(who), "rank %d", comm->notice_culprit);
        if (comm->notice_field != OFCCL__FIELD_NONE)
            snprintf(buf, len,
                     "%s posted it with a different %s than a peer (that peer's message "
                     "names both ranks); ",
                     who, ofccl__field_name(comm->notice_field));
        else
            snprintf(buf, len,
                     "%s posted it with arguments that differ from a peer's (that peer's "
                     "message names the field); ",
                     who);
    }
    return comm->notice_in;
}
