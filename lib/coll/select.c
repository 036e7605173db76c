/*
 * The one place an algorithm is chosen. OFCCL_ALGO_AG / OFCCL_ALGO_RS force
 * direct or ring; auto takes direct for small jobs or small blocks (one step,
 * lowest latency) and the ring for larger jobs with large blocks (each link
 * carries 1/n of the data). Within direct, what the memory and the provider
 * allow decides the variant: a small collective goes through the peers' eager
 * slots, and a reduce-scatter reads its peers' blocks in place where their
 * memory maps (pull).
 */
#include "coll.h"

#define RING_MIN_RANKS 9
#define RING_MIN_BLOCK (64u << 10)

const ofccl__algo_t *ofccl__choose(ofccl_comm_t *comm, int coll, size_t block, int bucket)
{
    int forced = (int)ofccl__cfg_int(&comm->ctx->cfg,
                                     coll == OFCCL__AG ? OFCCL__CFG_ALGO_AG : OFCCL__CFG_ALGO_RS);
    bool ring =
        forced == 2 || (forced == 0 && comm->size >= RING_MIN_RANKS && block >= RING_MIN_BLOCK);

    if (ring)
        return coll == OFCCL__AG ? &ofccl__ag_ring : &ofccl__rs_ring;
    /* Buckets are packed into staging and scattered back: never eager. */
    if (!bucket && ofccl__eager_possible(comm, block))
        return coll == OFCCL__AG ? &ofccl__ag_eager : &ofccl__rs_eager;
    if (coll == OFCCL__RS && ofccl__comm_caps(comm)->peer_map)
        return &ofccl__rs_pull;
    return coll == OFCCL__AG ? &ofccl__ag_direct : &ofccl__rs_direct;
}
