/* Barrier: dissemination over the fabric (ceil(log2 n) rounds). Arrivals are
 * counted per round, monotonically, so a fast rank's signal for the next
 * barrier is never confused with this one's.
 *
 * A barrier sits between collectives: after those posted before it, before
 * the next. It succeeds once every round's arrival is here, whatever failure
 * notice comes meanwhile: a notice about a later collective was sent by a
 * rank that had passed it (docs/reliability.md). It fails when the
 * communicator failed at an earlier position, when a member is known gone as
 * it starts (that member could not have taken part), and while it waits,
 * when the rank it waits for is known gone or failed this barrier itself. A
 * rank whose barrier fails tells the ranks it has not signalled yet (its word
 * BAR_FAIL carries the barrier's number), so that nobody waits on it for the
 * deadline: they fail and tell theirs. */

#include <stdio.h>

#include "core.h"
#include "util.h"

static uint64_t arrived(const ofccl_comm_t *comm, int round)
{
    if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
        return comm->barrier_arrived[round];
    return atomic_load_explicit(&comm->ctrl[OFCCL__CTRL_BARRIER + round], memory_order_acquire);
}

static int rounds(const ofccl_comm_t *comm)
{
    int n = 0;

    while ((1 << n) < comm->size)
        n++;
    return n;
}

/* Barrier `seq` failed here before this rank signalled round `round`: tell
 * the targets of that round and the later ones (best effort). */
static void tell_failed(ofccl_comm_t *comm, uint64_t seq, int round)
{
    atomic_store_explicit(&comm->ctrl[OFCCL__CTRL_BAR_FAIL_OUT],
                          seq << 24 | ((uint64_t)comm->rank & 0xffffff), memory_order_relaxed);
    comm->barrier_op = (ofccl__op_t){.cb = NULL, .quiet = 1};
    for (int r = round; r < rounds(comm); r++)
        ofccl__ctrl_put_word(comm, (comm->rank + (1 << r)) % comm->size, OFCCL__CTRL_BAR_FAIL_OUT,
                             OFCCL__CTRL_BAR_FAIL_IN, &comm->barrier_op);
}

/* While waiting in round `round` of barrier `seq` for rank `from`: 0, or the
 * reason to give up (the communicator's error, set here). */
static int broken(ofccl_comm_t *comm, uint64_t seq, int round, int from, uint64_t pos)
{
    uint64_t told =
        atomic_load_explicit(&comm->ctrl[OFCCL__CTRL_BAR_FAIL_IN], memory_order_acquire);
    char why[OFCCL__ERRMSG_LEN / 2];
    int code, rc, who = (int)(told & 0xffffff);

    if ((rc = ofccl__comm_check_at(comm, "ofccl_barrier", pos)) != 0)
        return rc;
    if (told >> 24 == seq && who < comm->size)
        return ofccl__comm_fail_at(comm, pos, OFCCL_ERR_REMOTE_ERROR,
                                   "barrier #%llu, round %d: rank %d on %s failed it (its message "
                                   "says why); the communicator is unusable",
                                   (unsigned long long)seq, round, who,
                                   ofccl__comm_host(comm, who));
    if (!ofccl__dead_known(comm, from, &code, why, sizeof(why)))
        return 0;
    /* Whatever it wrote before it went has been read by now: one more pass. */
    if (ofccl__comm_progress(comm) == 0 && arrived(comm, round) >= seq)
        return 0;
    return ofccl__comm_fail_at(comm, pos, code,
                               "barrier #%llu, round %d: %s before it signalled this rank; the "
                               "communicator is unusable",
                               (unsigned long long)seq, round, why);
}

static int barrier_unlocked(ofccl_comm_t *comm)
{
    uint64_t deadline, seq, start, pos;
    ofccl__idle_t idle = {0};
    int rc = 0, round = 0;

    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    pos = ofccl__comm_pos_now(comm);
    seq = comm->barrier_seq + 1;
    if ((rc = ofccl__comm_check(comm, "ofccl_barrier")) != 0)
        goto failed;
    if (comm->size == 1)
        return 0;
    comm->barrier_seq = seq;
    start = ofccl__now_ns();
    deadline = ofccl__comm_deadline(comm, start);
    for (; round < rounds(comm); round++) {
        int dist = 1 << round;
        int to = (comm->rank + dist) % comm->size;
        int from = (comm->rank - dist + comm->size) % comm->size;

        rc = ofccl__comm_signal(comm, to, OFCCL__SIG_BARRIER, (uint32_t)round,
                                OFCCL__CTRL_BARRIER + (unsigned)round, deadline);
        if (rc)
            goto failed;
        for (unsigned spins = 1; arrived(comm, round) < seq; spins++) {
            if (spins % 32 == 0)
                ofccl__idle_poll(comm->ctx, &idle); /* yield, then nap: see core.h */
            if ((rc = ofccl__comm_progress(comm)) != 0)
                goto failed;
            if (arrived(comm, round) >= seq)
                break;
            if (spins % 32 == 0 && (rc = broken(comm, seq, round, from, pos)) != 0) {
                round++; /* this round's signal went out */
                goto failed;
            }
            if (ofccl__now_ns() > deadline) {
                rc = ofccl__comm_fail_at(
                    comm, pos, OFCCL_ERR_TIMEOUT,
                    "barrier #%llu, round %d: waited %llu ms for rank %d (is it alive and in the "
                    "same barrier?)",
                    (unsigned long long)seq, round,
                    (unsigned long long)((ofccl__now_ns() - start) / 1000000), from);
                round++;
                goto failed;
            }
        }
    }
    /* Our signals must be complete before the caller may tear the communicator down. */
    return ofccl__comm_quiesce(comm, deadline, "barrier");
failed:
    if (comm->size > 1 && rc != OFCCL_ERR_INVALID_ARG)
        tell_failed(comm, seq, round);
    return rc;
}

/* Public entry points: the same calls under the context lock (lock.c). */
int ofccl_barrier(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, barrier_unlocked(comm));
}
