/*
 * Failure notices. A rank that gives up on a collective because of a peer
 * (the peer exited, stopped responding, or posted something else) would leave
 * the other ranks to find out at their own deadline, or from its departure,
 * which they would then blame on it. So it first writes one word into every
 * other rank's control region: {collective, field, reason, culprit}. Each rank
 * reads that word on every progress pass and records it; the engine and the
 * calls decide from it (docs/reliability.md): a notice about collective k
 * fails the requests at or after k, and those that still wait for a culprit
 * that exited or went silent, never an earlier request whose data is all
 * here. A notice is best effort: a rank it cannot reach learns at its
 * deadline, as before. A mismatch notice says which argument differs (the
 * field), so that every rank's message names it, also on ranks that never see
 * the differing descriptor themselves.
 *
 * The word: culprit + 1 in bits 0-31, the reason in 32-35, the field in
 * 36-39, the collective's sequence number modulo 2^24 in 40-63 (ranks are
 * never that far apart: a rank is at most a few collectives ahead of one it
 * waits for).
 */
#include <stdio.h>

#include "core.h"
#include "util.h"

#define NOTICE_CULPRIT_MASK 0xffffffffull
#define NOTICE_SEQ_BITS 24
#define NOTICE_SEQ_MASK ((1ull << NOTICE_SEQ_BITS) - 1)
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

static void send_word(ofccl_comm_t *comm, uint64_t seq, int reason, int culprit, int skip,
                      int field)
{
    uint64_t word = (seq & NOTICE_SEQ_MASK) << 40 | (uint64_t)field << 36 | (uint64_t)reason << 32 |
                    ((uint64_t)culprit + 1);

    /* Once per collective, and again only for an earlier one: a notice
     * about seq or later reached (or came from) the others already. With two
     * ranks only a mismatch has somebody to tell. */
    if (culprit < 0 || (comm->size < 3 && reason != OFCCL__NOTICE_MISMATCH) ||
        seq >= comm->notice_sent_seq || (comm->notice_in != 0 && seq >= comm->notice_seq))
        return;
    comm->notice_sent_seq = seq;
    atomic_store_explicit(&comm->ctrl[OFCCL__CTRL_NOTICE_OUT], word, memory_order_relaxed);
    comm->notice_op = (ofccl__op_t){.cb = notice_done, .quiet = 1};
    for (int p = 0; p < comm->size; p++) {
        /* A culprit of a mismatch may not see it itself (it waits for data
         * that will never come): it is told too. */
        if (p == comm->rank || p == skip || (p == culprit && reason != OFCCL__NOTICE_MISMATCH))
            continue;
        /* Lazily created: only the peers this rank works with (resolved)
         * hear it directly; resolving all others on a failure path would
         * stall. */
        if (ofccl__ctrl_put_word(comm, p, OFCCL__CTRL_NOTICE_OUT, OFCCL__CTRL_NOTICE_IN,
                                 &comm->notice_op) == 1)
            comm->notices_out++;
    }
    OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_CORE,
                "rank %d: told the other ranks of communicator %u that rank %d failed collective "
                "#%llu (reason %d)",
                comm->rank, comm->id, culprit, (unsigned long long)seq, reason);
}

void ofccl__notice_send(ofccl_comm_t *comm, uint64_t seq, int reason, int culprit, int skip)
{
    send_word(comm, seq, reason, culprit, skip, OFCCL__FIELD_NONE);
}

void ofccl__notice_mismatch(ofccl_comm_t *comm, uint64_t seq, int culprit, int field)
{
    send_word(comm, seq, OFCCL__NOTICE_MISMATCH, culprit, -1, field);
}

bool ofccl__notice_busy(const ofccl_comm_t *comm)
{
    return comm->notices_out > 0;
}

/* The full sequence number of a notice's 24 bits: the one nearest to this
 * rank's next collective. */
static uint64_t notice_seq_of(const ofccl_comm_t *comm, uint64_t bits)
{
    uint64_t next = ofccl__comm_next_seq(comm);
    uint64_t delta = (bits - next) & NOTICE_SEQ_MASK;

    if (delta < (1ull << (NOTICE_SEQ_BITS - 1)))
        return next + delta;
    delta = (1ull << NOTICE_SEQ_BITS) - delta; /* behind this rank */
    return delta <= next ? next - delta : 0;
}

void ofccl__notice_check(ofccl_comm_t *comm)
{
    uint64_t word = atomic_load_explicit(&comm->ctrl[OFCCL__CTRL_NOTICE_IN], memory_order_acquire);
    int culprit = (int)(word & NOTICE_CULPRIT_MASK) - 1, reason = (int)(word >> 32 & 0xf);
    int field = (int)(word >> 36 & 0xf);
    uint64_t seq;

    if (word == 0 || word == comm->notice_word)
        return;
    comm->notice_word = word;
    /* Untrusted: a word that names no rank, or no reason or field we know, is
     * ignored (and counted). */
    if (culprit < 0 || culprit >= comm->size || reason < OFCCL__NOTICE_EXITED ||
        reason > OFCCL__NOTICE_MISMATCH || field >= OFCCL__FIELDS ||
        (field != 0 && reason != OFCCL__NOTICE_MISMATCH)) {
        comm->corrupt_signals++;
        return;
    }
    seq = notice_seq_of(comm, word >> 40);
    if (reason != OFCCL__NOTICE_MISMATCH)
        ofccl__comm_set_gone(comm, culprit,
                             reason == OFCCL__NOTICE_EXITED ? OFCCL__GONE_EXITED
                                                            : OFCCL__GONE_SILENT);
    /* The notice that names the cause is the one about the earliest
     * collective: a later word about an earlier one replaces it. */
    if (comm->notice_in != 0 && seq >= comm->notice_seq)
        return;
    comm->notice_in = reason;
    comm->notice_culprit = culprit;
    comm->notice_field = field;
    comm->notice_seq = seq;
    comm->notice_ns = ofccl__coarse_ns();
    OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_CORE,
                "rank %d: communicator %u: a peer says rank %d failed collective #%llu (reason "
                "%d)",
                comm->rank, comm->id, culprit, (unsigned long long)seq, reason);
}

bool ofccl__notice_told(const ofccl_comm_t *comm, uint64_t seq)
{
    return comm->notice_sent_seq <= seq ||
           (comm->notice_in == OFCCL__NOTICE_MISMATCH && comm->notice_seq <= seq);
}

int ofccl__notice_culprit(const ofccl_comm_t *comm)
{
    return comm->notice_in != 0 ? comm->notice_culprit : -1;
}

bool ofccl__notice_concerns(const ofccl_comm_t *comm, uint64_t seq, bool owes_culprit)
{
    if (comm->notice_in == 0)
        return false;
    return seq >= comm->notice_seq || (comm->notice_in != OFCCL__NOTICE_MISMATCH && owes_culprit);
}

int ofccl__notice_fail(ofccl_comm_t *comm)
{
    int culprit = comm->notice_culprit, reason = comm->notice_in;
    char who[96];

    uint64_t pos = ofccl__pos_coll(comm->notice_seq);

    if (reason == 0 || (comm->sticky != 0 && comm->fail_pos <= pos))
        return comm->sticky;
    comm->notice_first = comm->sticky == 0;
    if (culprit == comm->rank)
        snprintf(who, sizeof(who), "this rank");
    else
        snprintf(who, sizeof(who), "rank %d on %s", culprit, ofccl__comm_host(comm, culprit));
    switch (reason) {
    case OFCCL__NOTICE_EXITED:
        return ofccl__comm_fail_at(comm, pos, OFCCL_ERR_REMOTE_ERROR,
                                   "communicator %u: %s has exited (a peer saw it go and told "
                                   "this rank); the communicator is unusable",
                                   comm->id, who);
    case OFCCL__NOTICE_SILENT:
        return ofccl__comm_fail_at(comm, pos, OFCCL_ERR_TIMEOUT,
                                   "communicator %u: %s stopped responding (a peer timed out "
                                   "waiting for it and told this rank); the communicator is "
                                   "unusable",
                                   comm->id, who);
    default:
        if (comm->notice_field != OFCCL__FIELD_NONE)
            return ofccl__comm_fail_at(comm, pos, OFCCL_ERR_MISMATCH,
                                       "communicator %u: %s posted collective #%llu with a "
                                       "different %s than a peer (that peer's message names both "
                                       "ranks); the communicator is unusable",
                                       comm->id, who, (unsigned long long)comm->notice_seq,
                                       ofccl__field_name(comm->notice_field));
        return ofccl__comm_fail_at(comm, pos, OFCCL_ERR_MISMATCH,
                                   "communicator %u: %s posted collective #%llu with arguments "
                                   "that differ from a peer's (that peer's message names the "
                                   "field); the communicator is unusable",
                                   comm->id, who, (unsigned long long)comm->notice_seq);
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
