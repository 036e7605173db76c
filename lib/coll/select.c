/*
 * The one place an algorithm is chosen. OFCCL_ALGO_AG / OFCCL_ALGO_RS force
 * direct or ring (all-gather also hier, across hosts); auto takes the
 * hierarchical all-gather where same-host and other-host peers go through
 * different transports, then direct for small jobs or small blocks (one step,
 * lowest latency) and the ring for larger jobs with large blocks (each link
 * carries 1/n of the data), except where peers' memory maps (the local
 * transport): there direct already moves each byte once, with no link to
 * share, while the ring adds n-1 dependent steps and twice the memory
 * traffic, so auto stays direct at every size. Within direct, what the
 * memory and the provider allow decides the variant: a small collective goes
 * through the peers' eager slots, and a reduce-scatter reads its peers' blocks
 * in place where their memory maps (pull).
 */
#include "coll.h"

#define RING_MIN_RANKS 9
#define RING_MIN_BLOCK (64u << 10)

#define CHAIN_MIN_RANKS 3
#define CHAIN_MIN_BLOCK (256u << 10)

static bool hier(ofccl_comm_t *comm, int forced, size_t block, int bucket);

/* Broadcast: eager when small; across hosts hierarchical where the
 * all-gather's is (hier below); on mapped memory every rank reads the root's
 * buffer at once (pull), at any rank count: measured at 16 and 32 ranks it is
 * 2-15x the chain and the direct broadcast at every size from 64 KiB to 64 MiB
 * (docs/performance.md); otherwise direct, or the chain when large enough for
 * its pipeline to beat the root's n-1 copies. */
static const ofccl__algo_t *choose_bcast(ofccl_comm_t *comm, size_t block, int bucket)
{
    int forced = (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_ALGO_BC);

    if (forced == 0 && !bucket && ofccl__eager_possible(comm, block))
        return &ofccl__bc_eager;
    /* Across hosts: the all-gather's rule (its hier's value 3 is our 4). */
    if ((forced == 0 || forced == 4) && hier(comm, forced ? 3 : 0, block, bucket))
        return &ofccl__bc_hier;
    if (forced == 3 || (forced == 0 && ofccl__comm_caps(comm)->peer_map))
        return ofccl__comm_caps(comm)->peer_map ? &ofccl__bc_pull : &ofccl__bc_direct;
    if (forced == 2 || (forced == 0 && comm->size >= CHAIN_MIN_RANKS && block >= CHAIN_MIN_BLOCK))
        return &ofccl__bc_chain;
    return &ofccl__bc_direct;
}

/* Hierarchical all-gather: forced, or automatic where the links differ (a
 * peer on this host goes through the local transport, one elsewhere through
 * the fabric) and the block is past the eager size; only where it fits. */
static bool hier(ofccl_comm_t *comm, int forced, size_t block, int bucket)
{
    int me = comm->rank, mate;

    if (!ofccl__ag_hier_fits(comm) || forced == 1 || forced == 2)
        return false;
    if (forced == 3)
        return true;
    mate = comm->node_rank[comm->node_of[me] * comm->node_width +
                           (comm->node_idx[me] + 1) % comm->node_width];
    return ofccl__comm_peer_local(comm, mate) && (bucket || !ofccl__eager_possible(comm, block));
}

const ofccl__algo_t *ofccl__choose(ofccl_comm_t *comm, int coll, size_t block, int bucket)
{
    if (coll == OFCCL__BC)
        return choose_bcast(comm, block, bucket);
    int forced = (int)ofccl__cfg_int(&comm->ctx->cfg,
                                     coll == OFCCL__AG ? OFCCL__CFG_ALGO_AG : OFCCL__CFG_ALGO_RS);
    if (coll == OFCCL__AG && hier(comm, forced, block, bucket))
        return &ofccl__ag_hier;
    bool ring = forced == 2 || (forced == 0 && !ofccl__comm_caps(comm)->peer_map &&
                                comm->size >= RING_MIN_RANKS && block >= RING_MIN_BLOCK);

    if (ring)
        return coll == OFCCL__AG ? &ofccl__ag_ring : &ofccl__rs_ring;
    /* Buckets are packed into staging and scattered back: never eager. */
    if (!bucket && ofccl__eager_possible(comm, block))
        return coll == OFCCL__AG ? &ofccl__ag_eager : &ofccl__rs_eager;
    if (coll == OFCCL__RS && ofccl__comm_caps(comm)->peer_map)
        return &ofccl__rs_pull;
    return coll == OFCCL__AG ? &ofccl__ag_direct : &ofccl__rs_direct;
}
