/* Reduce-scatter, pull (providers that map peers' memory: caps.peer_map).
 * Every rank announces its source buffer instead of a staging area, and, where
 * it is ofccl memory, its output. Once all descriptors are in, it maps every
 * peer's source and reduces blocks grain by grain (OFCCL_RS_GRAIN) straight
 * into their outputs: one pass that reads every input once, where the push
 * version first copied each peer's block into staging.
 *
 * Grains are taken from a counter in the block owner's control region. A rank
 * takes its own block's grains first, then those left in the other ranks'
 * blocks whose output it can write, in rank order from its own: a rank on a
 * slow core, or one busy elsewhere, no longer sets the pace. Whoever takes a
 * grain sums the same sources in the same order (the owner's contribution
 * first, then the others by rank), so results do not depend on who reduced
 * what.
 *
 * A rank through with every block says so in its through word (../pull.c).
 * A rank's request completes only when every peer has said so: by then nobody
 * reads its source, and every grain of its output has been written. */
#include "coll.h"
#include "util.h"

/* The request's private state. */
struct pull {
    size_t grain;     /* bytes of a block taken at once */
    unsigned ngrains; /* grains per block */
    int take_k;       /* blocks this rank is through with, from its own on */
    /* [size] each: peer p's source (all blocks) and output (where announced),
     * mapped here */
    const char **peer_at;
    char **peer_out;
};

static struct pull *pull_of(const ofccl__req_t *r)
{
    struct pull *st = ofccl__algo_priv(r);

    /* The arrays follow the struct, in the per-peer bytes. */
    st->peer_at = (const char **)(st + 1);
    st->peer_out = (char **)(st->peer_at + r->comm->size);
    return st;
}

/* Map every peer's source, all blocks, and its output where announced, once
 * its descriptor is in. 1 when all are mapped, 0 to wait, <0 on error. */
static int map_peers(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    struct pull *st = pull_of(r);

    for (int p = 0; p < comm->size; p++) {
        const void *at;
        int rc;

        if (p == comm->rank || st->peer_at[p] != NULL)
            continue;
        if (!r->peer_ready[p])
            return 0;
        rc = ofccl__coll_map_peer(r, p, 0, r->block * (size_t)comm->size, &at);
        if (rc == 0)
            rc = ofccl__coll_map_peer_out(r, p, &st->peer_out[p]);
        if (rc)
            return rc;
        st->peer_at[p] = at;
    }
    return 1;
}

static const char *source(const ofccl__req_t *r, const struct pull *st, int p)
{
    return p == r->comm->rank ? (const char *)r->src.ptr : st->peer_at[p];
}

/* Grain g of block b into `out` (that block's output): rank b's contribution
 * first, then the others' by rank. Returns the bytes reduced, <0 on error. */
static long reduce_grain(ofccl__req_t *r, struct pull *st, int b, unsigned g, char *out)
{
    ofccl_comm_t *comm = r->comm;
    size_t at = (size_t)g * st->grain, off = (size_t)b * r->block + at, n = 1;
    size_t len = OFCCL__MIN(st->grain, r->block - at);
    int rc;

    r->srcs[0] = source(r, st, b) + off;
    for (int p = 0; p < comm->size; p++)
        if (p != b)
            r->srcs[n++] = source(r, st, p) + off;
    rc = ofccl__exec_reduce(r, r->op, out + at, r->srcs, comm->size, len / r->esize,
                            r->op.kind == OFCCL_OP_AVG ? comm->size : 0);
    if (rc)
        return ofccl__coll_fail(r, rc, "reducing grain %u of rank %d's block", g, b);
    return (long)len;
}

/* Claim a grain of block b from its counter; UINT32_MAX when none is left. */
static uint32_t claim(ofccl__req_t *r, const struct pull *st, int b)
{
    _Atomic uint64_t *w = ofccl__coll_share_word(r, b, false);
    uint64_t g;

    /* A look first: near the end every rank visits every counter, and a
     * read of a line leaves the others' copies alone, where an increment
     * takes the line away from all of them. */
    if (b != r->comm->rank && atomic_load_explicit(w, memory_order_relaxed) >= st->ngrains)
        return UINT32_MAX;
    g = atomic_fetch_add_explicit(w, 1, memory_order_relaxed);
    return g >= st->ngrains ? UINT32_MAX : (uint32_t)g;
}

/* Take and reduce grains, about `depth` chunks' worth per call (then progress
 * runs again). take_k counts the blocks found exhausted or not writable. */
static int take_some(ofccl__req_t *r, struct pull *st)
{
    ofccl_comm_t *comm = r->comm;
    size_t budget = (size_t)r->depth * r->chunk;

    while (st->take_k < comm->size && budget > 0) {
        int b = (comm->rank + st->take_k) % comm->size;
        char *out = b == comm->rank ? (char *)r->out : st->peer_out[b];
        uint32_t g;
        long n;

        if (out == NULL || (g = claim(r, st, b)) == UINT32_MAX) {
            st->take_k++;
            continue;
        }
        if ((n = reduce_grain(r, st, b, g, out)) < 0)
            return (int)n;
        if (b != comm->rank)
            comm->ctx->stats.reduced_for_peers += (uint64_t)n;
        budget -= OFCCL__MIN(budget, (size_t)n);
        ofccl__ctx_moved(comm->ctx);
    }
    return 0;
}

static int plan(ofccl__req_t *r)
{
    size_t grain = (size_t)ofccl__cfg_int(&r->comm->ctx->cfg, OFCCL__CFG_RS_GRAIN);
    struct pull *st = pull_of(r); /* zeroed by the engine: nothing mapped yet */

    ofccl__plan_direct(r);
    r->units_in = (unsigned)(r->comm->size - 1); /* each peer through */
    /* Whole cache lines (and so whole elements). Grain 0: every block is one
     * grain, and no rank announces its output (the setting is agreed), so
     * only its owner takes it. */
    grain -= grain % 64;
    st->grain = grain > 0 ? OFCCL__MIN(grain, r->block) : r->block;
    st->grain = OFCCL__MAX(st->grain, (size_t)1);
    while (r->block / st->grain >= ((size_t)1 << 31)) /* grain numbers fit 32 bits */
        st->grain *= 2;
    st->ngrains = (unsigned)((r->block + st->grain - 1) / st->grain);
    if (grain == 0)
        r->win2 = ofccl__mem_ref(NULL, NULL);
    /* Peers increment this only after our descriptor, which follows. */
    atomic_store_explicit(ofccl__coll_share_word(r, r->comm->rank, false), 0, memory_order_relaxed);
    return 0;
}

static int progress(ofccl__req_t *r)
{
    struct pull *st = pull_of(r);
    int rc = map_peers(r);

    if (rc <= 0)
        return rc;
    if ((rc = take_some(r, st)) != 0)
        return rc;
    if (st->take_k < r->comm->size)
        return 0;
    ofccl__pull_through(r);
    r->finished = r->arrived == r->units_in;
    return 0;
}

const ofccl__algo_t ofccl__rs_pull = {
    .size = sizeof(ofccl__algo_t),
    .name = "pull",
    .coll = OFCCL__RS,
    .wire_id = OFCCL__WIRE_PULL,
    .flags = OFCCL__ALGO_ALL_PAIRS,
    .plan = plan,
    .progress = progress,
    .writer_of = ofccl__one_writer_of,
    .unit_of = ofccl__one_unit_of,
    .buffers = OFCCL__BUF_PEERS_READ | OFCCL__BUF_SHOW_OUT,
    .priv_fixed = sizeof(struct pull),
    .priv_per_peer = sizeof(const char *) + sizeof(char *),
};
