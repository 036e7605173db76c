/*
 * The one place an algorithm is chosen. OFCCL_ALGO_AG / _RS / _BC, when set,
 * win. On auto, a collective small enough for the peers' eager slots goes
 * eagerly (one step, no descriptor round trip; never a bucket, which is
 * packed into staging); otherwise the cost model (cost.c) predicts the time
 * of every candidate that can run here and the cheapest wins: direct, ring
 * and, where the communicator's hosts have the shape (fits), hier; for
 * broadcast direct, chain and hier. What the memory and the provider allow
 * then decides the variant of direct: where peers' memory maps, a
 * reduce-scatter reads its peers' blocks in place and a broadcast's
 * receivers read the root's buffer at once (pull). This is the host
 * engine's chooser: device memory the GPU peer class serves takes its
 * stream programs (post.c).
 */
#include "coll.h"
#include "cost.h"

/* A candidate of one collective: the algorithm and where it can run (NULL:
 * wherever the collective can). */
typedef struct cand {
    const ofccl__algo_t *algo;
    bool (*fits)(const ofccl_comm_t *comm);
} cand_t;

static const cand_t ag_cands[OFCCL__CAND_COUNT] = {
    [OFCCL__CAND_DIRECT] = {&ofccl__ag_direct, NULL},
    [OFCCL__CAND_RING] = {&ofccl__ag_ring, NULL},
    [OFCCL__CAND_HIER] = {&ofccl__ag_hier, ofccl__ag_hier_fits},
};
static const cand_t rs_cands[OFCCL__CAND_COUNT] = {
    [OFCCL__CAND_DIRECT] = {&ofccl__rs_direct, NULL},
    [OFCCL__CAND_RING] = {&ofccl__rs_ring, NULL},
    [OFCCL__CAND_HIER] = {&ofccl__rs_hier, ofccl__rs_hier_fits},
};
static const cand_t bc_cands[OFCCL__CAND_COUNT] = {
    [OFCCL__CAND_DIRECT] = {&ofccl__bc_direct, NULL},
    [OFCCL__CAND_HIER] = {&ofccl__bc_hier, ofccl__ag_hier_fits}, /* the same shape */
    [OFCCL__CAND_CHAIN] = {&ofccl__bc_chain, NULL},
};

static const cand_t *cands_of(int coll)
{
    return coll == OFCCL__AG ? ag_cands : coll == OFCCL__RS ? rs_cands : bc_cands;
}

/* Candidates of `coll` that can run on the communicator (bit 1 << cand). */
unsigned ofccl__choose_valid(const ofccl_comm_t *comm, int coll)
{
    const cand_t *c = cands_of(coll);
    unsigned valid = 0;

    for (int k = 0; k < OFCCL__CAND_COUNT; k++)
        if (c[k].algo != NULL && (c[k].fits == NULL || c[k].fits(comm)))
            valid |= 1u << k;
    return valid;
}

int ofccl__choose_model(const ofccl_comm_t *comm, int coll, size_t bytes)
{
    ofccl__cost_topo_t t;

    ofccl__cost_topo_of(comm, &t);
    return ofccl__cost_pick(&t, coll, bytes, ofccl__choose_valid(comm, coll));
}

/* Direct, in the variant the memory allows (and, for the all-gather's takes,
 * the block size: below OFCCL_AG_TAKE the claims cost more than they save). */
static const ofccl__algo_t *direct_variant(ofccl_comm_t *comm, int coll, size_t block, unsigned mem)
{
    bool map = ofccl__comm_caps(comm)->peer_map && !(mem & OFCCL__MEM_CALLER_DEVICE);
    size_t take = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_AG_TAKE);

    if (coll == OFCCL__RS && map)
        return &ofccl__rs_pull;
    if (coll == OFCCL__AG && map && take > 0 && block >= take)
        return &ofccl__ag_take;
    if (coll == OFCCL__BC && map)
        return &ofccl__bc_pull;
    return cands_of(coll)[OFCCL__CAND_DIRECT].algo;
}

static const ofccl__algo_t *eager_of(int coll)
{
    return coll == OFCCL__AG   ? &ofccl__ag_eager
           : coll == OFCCL__RS ? &ofccl__rs_eager
                               : &ofccl__bc_eager;
}

/* A hierarchical algorithm asked for where the communicator lacks the shape:
 * direct runs (a setting may reach split communicators inside one host), said
 * once per communicator. */
static void hier_unfit(ofccl_comm_t *comm)
{
    if (ofccl__comm_note_once(comm, OFCCL__NOTE_HIER_UNFIT))
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_COLL,
                    "rank %d: a hierarchical algorithm is asked for (OFCCL_ALGO_*=hier), but "
                    "this communicator is not several hosts of as many ranks each (%d ranks on %d "
                    "host%s): direct runs instead",
                    comm->rank, comm->size, comm->nnodes, comm->nnodes == 1 ? "" : "s");
}

/* OFCCL_ALGO_BC: 1 direct, 2 chain, 3 pull (direct where memory does not map),
 * 4 hier (direct where it does not fit). */
static const ofccl__algo_t *forced_bcast(ofccl_comm_t *comm, int forced, unsigned mem)
{
    if (forced == 2)
        return &ofccl__bc_chain;
    if (forced == 4 && (ofccl__choose_valid(comm, OFCCL__BC) & (1u << OFCCL__CAND_HIER)))
        return &ofccl__bc_hier;
    if (forced == 4)
        hier_unfit(comm);
    return forced == 3 ? direct_variant(comm, OFCCL__BC, 0, mem) : &ofccl__bc_direct;
}

const ofccl__algo_t *ofccl__choose(ofccl_comm_t *comm, int coll, size_t block, int bucket,
                                   unsigned mem)
{
    int id = coll == OFCCL__AG   ? OFCCL__CFG_ALGO_AG
             : coll == OFCCL__RS ? OFCCL__CFG_ALGO_RS
                                 : OFCCL__CFG_ALGO_BC;
    int forced = (int)ofccl__cfg_int(&comm->ctx->cfg, id), cand;
    bool eager = !bucket && !(mem & OFCCL__MEM_CALLER_DEVICE) && ofccl__eager_possible(comm, block);
    /* Device memory (a transport that takes it): never eager (the CPU copies
     * its words). Through a fabric (FI_HMEM) direct only: nothing is
     * forwarded, since a provider may signal a write into device memory
     * before its device copy has landed (shm's CUDA IPC copies on the GPU
     * after it completes), so a ring or chain could pass on stale bytes.
     * Where every write lands before its signal (comm->dev_landed: the local
     * transport) an all-gather or a broadcast is chosen as on host memory;
     * a reduce-scatter, whose staging is sized for direct, stays direct. */
    if ((mem & OFCCL__MEM_ALGO_DEVICE) && (coll == OFCCL__RS || !comm->dev_landed)) {
        if (forced != 0 && ofccl__comm_note_once(comm, OFCCL__NOTE_DEVICE_DIRECT))
            OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL,
                        "rank %d: GPU memory through the fabric runs direct, whatever "
                        "OFCCL_ALGO_* asks",
                        comm->rank);
        return coll == OFCCL__BC ? &ofccl__bc_direct : cands_of(coll)[OFCCL__CAND_DIRECT].algo;
    }
    if (coll == OFCCL__BC && forced != 0)
        return forced_bcast(comm, forced, mem);
    /* All-gather and reduce-scatter: 1 direct (eager when small), 2 ring,
     * 3 hier (direct where it does not fit). */
    if (forced == 2)
        return cands_of(coll)[OFCCL__CAND_RING].algo;
    if (forced == 3 && (ofccl__choose_valid(comm, coll) & (1u << OFCCL__CAND_HIER)))
        return cands_of(coll)[OFCCL__CAND_HIER].algo;
    if (forced == 3)
        hier_unfit(comm);
    if (eager)
        return eager_of(coll);
    if (forced == 0 && ofccl__comm_note_once(comm, OFCCL__NOTE_COST)) {
        char why[600];
        unsigned valid[3] = {ofccl__choose_valid(comm, OFCCL__AG),
                             ofccl__choose_valid(comm, OFCCL__RS),
                             ofccl__choose_valid(comm, OFCCL__BC)};
        ofccl__cost_describe(comm, valid, why, sizeof(why));
        OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL, "rank %d: communicator of %d ranks: %s",
                    comm->rank, comm->size, why);
    }
    cand = forced != 0 ? OFCCL__CAND_DIRECT : ofccl__choose_model(comm, coll, block);
    if (cand == OFCCL__CAND_DIRECT || cand >= OFCCL__CAND_COUNT)
        return direct_variant(comm, coll, block, mem);
    return cands_of(coll)[cand].algo;
}
