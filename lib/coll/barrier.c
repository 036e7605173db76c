/* Barrier: dissemination over the fabric (ceil(log2 n) rounds). Arrivals are
 * counted per round, monotonically, so a fast rank's signal for the next
 * barrier is never confused with this one's. */

#include "core.h"
#include "util.h"

static uint64_t arrived(const ofccl_comm_t *comm, int round)
{
    if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
        return comm->barrier_arrived[round];
    return atomic_load_explicit(&comm->ctrl[OFCCL__CTRL_BARRIER + round], memory_order_acquire);
}

static int barrier_unlocked(ofccl_comm_t *comm)
{
    uint64_t deadline, seq, start;
    ofccl__idle_t idle = {0};
    int rc;

    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if ((rc = ofccl__comm_check(comm, "ofccl_barrier")) != 0)
        return rc;
    if (comm->size == 1)
        return 0;
    seq = ++comm->barrier_seq;
    start = ofccl__now_ns();
    deadline = ofccl__comm_deadline(comm, start);
    for (int round = 0; (1 << round) < comm->size; round++) {
        int dist = 1 << round;
        int to = (comm->rank + dist) % comm->size;
        int from = (comm->rank - dist + comm->size) % comm->size;

        rc = ofccl__comm_signal(comm, to, OFCCL__SIG_BARRIER, (uint32_t)round,
                                OFCCL__CTRL_BARRIER + (unsigned)round, deadline);
        if (rc)
            return rc;
        for (unsigned spins = 1; arrived(comm, round) < seq; spins++) {
            if (spins % 32 == 0)
                ofccl__idle_poll(comm->ctx, &idle); /* yield, then nap: see core.h */
            rc = ofccl__comm_progress(comm);
            if (rc)
                return rc;
            if (ofccl__now_ns() > deadline)
                return ofccl__comm_fail(
                    comm, OFCCL_ERR_TIMEOUT,
                    "barrier #%llu, round %d: waited %llu ms for rank %d (is it alive and in the "
                    "same barrier?)",
                    (unsigned long long)seq, round,
                    (unsigned long long)((ofccl__now_ns() - start) / 1000000), from);
        }
    }
    /* Our signals must be complete before the caller may tear the communicator down. */
    return ofccl__comm_quiesce(comm, deadline, "barrier");
}

/* Public entry points: the same calls under the context lock (progress.c). */
int ofccl_barrier(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, barrier_unlocked(comm));
}
