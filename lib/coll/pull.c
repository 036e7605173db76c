/* Through words, for algorithms that read their peers' announced buffers in
 * place (the pull reduce-scatter, the all-gather's takes; providers that map
 * peers' memory): a rank
 * says it is through with them in a word of its own control region that the
 * others poll. One store, where a zero-length message to each peer took n - 1
 * posts and as many signals (the same speed at 8 and 16 ranks, measured, and
 * no op to fail or retry). Through words only grow (seq + 1), so a peer
 * already on the slot's next collective still counts as through. */
#include "coll.h"
#include "trace.h"

void ofccl__through_say(ofccl__req_t *r)
{
    _Atomic uint64_t *mine = ofccl__coll_share_word(r, r->comm->rank, true);

    /* Through only once the copies and sums out of the peers' buffers are
     * done (an executor may finish later). */
    if (!ofccl__exec_idle(r))
        return;
    /* With release: every read of a peer's buffer (and write into one) comes
     * before. */
    if (atomic_load_explicit(mine, memory_order_relaxed) != r->seq + 1)
        atomic_store_explicit(mine, r->seq + 1, memory_order_release);
}

void ofccl__pull_through(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    ofccl__through_say(r);
    for (int p = 0; p < comm->size; p++) {
        if (p == comm->rank || r->from_cnt[p] != 0 ||
            atomic_load_explicit(ofccl__coll_share_word(r, p, true), memory_order_acquire) <
                r->seq + 1)
            continue;
        r->from_cnt[p] = 1; /* one arrival per peer through */
        r->arrived++;
        if (comm->ctx->trace != NULL)
            ofccl__trace_req_in(r, p);
        ofccl__ctx_moved(comm->ctx);
    }
}
