/* Algorithm selection: OFCCL_ALGO_AG / OFCCL_ALGO_RS force one; auto takes
 * direct for small jobs or small blocks (one step, lowest latency) and the ring
 * for larger jobs with large blocks (each link carries 1/n of the data). */
#include "coll.h"

#define RING_MIN_RANKS 9
#define RING_MIN_BLOCK (64u << 10)

const ofccl__algo_t *ofccl__algo_select(const ofccl_comm_t *comm, int coll, size_t block_bytes)
{
    int id = (int)ofccl__cfg_int(&comm->ctx->cfg,
                                 coll == OFCCL__AG ? OFCCL__CFG_ALGO_AG : OFCCL__CFG_ALGO_RS);
    int ring =
        id == 2 || (id == 0 && comm->size >= RING_MIN_RANKS && block_bytes >= RING_MIN_BLOCK);

    if (coll == OFCCL__AG)
        return ring ? &ofccl__ag_ring : &ofccl__ag_direct;
    return ring ? &ofccl__rs_ring : &ofccl__rs_direct;
}
