/*
 * Reduce-scatter, hierarchical, for H hosts of L ranks each (the
 * communicator's node table; rank (h, i) is the i-th rank of host h, and rail
 * i is the ranks (h', i) of every host):
 *   1. within a host: rank (h, j) writes to each other rank (h, i) of its host
 *      its contributions to the H blocks of rail i, the other hosts' first (in
 *      host order from h + 1), its host's own last; rank (h, i) sums them with
 *      its own into one partial per other host;
 *   2. between hosts, along rails: rank (h, i) writes the partial for block
 *      (h', i) to (h', i), which adds the H - 1 partials it receives to its
 *      host's sum of its own block.
 * Every rank of a host drives its own stream between hosts at once, and each
 * byte crosses to another host once (a partial of L contributions). Partials
 * travel in the wire dtype: bf16/f16 sums are rounded once more than with
 * direct (docs/reductions.md).
 *
 * Staging (what peers write here), in blocks: slot s of the L - 1 other ranks
 * of the host (s = (j - i - 1) mod L for rank (h, j)) holds its H blocks at
 * s * H + t; the partial from the rank of our rail on host h' comes at
 * (L - 1) * H + ((h' - h - 1) mod H). n - 1 blocks, and unit = block index *
 * nchunks + chunk. The partials computed here wait in r->fwd ((H - 1) blocks).
 * r->reduced counts the chunks reduced: first the (H - 1) * nchunks partials,
 * host by host, then the nchunks of the result.
 */
#include "coll.h"

static const ofccl_redop_t sum_op = {OFCCL_OP_SUM, 1.0};

static int at(const ofccl_comm_t *comm, int h, int i)
{
    return comm->node_rank[h * comm->node_width + i];
}

/* The same shape as the hierarchical all-gather: several hosts with as many
 * ranks each, more than one. */
bool ofccl__rs_hier_fits(const ofccl_comm_t *comm)
{
    return comm->nnodes > 1 && comm->node_width > 1;
}

/* Staging block index at rank `to` for writer `from`'s t-th block (one of its
 * host) or partial (one of its rail on another host: t unused). */
static unsigned stage_idx(const ofccl_comm_t *comm, int to, int from, int t)
{
    int H = comm->nnodes, L = comm->node_width;

    if (comm->node_of[from] == comm->node_of[to])
        return (unsigned)(((comm->node_idx[from] - comm->node_idx[to] - 1 + L) % L) * H + t);
    return (unsigned)((L - 1) * H + (comm->node_of[from] - comm->node_of[to] - 1 + H) % H);
}

/* Staging: n - 1 blocks where peers write (the H blocks of each other rank
 * of the host, then a partial from each other host), and the partial this
 * rank forwards to each other host. */
static void staging(const ofccl__req_t *r, size_t *dst, size_t *fwd)
{
    *dst = (size_t)(r->comm->size - 1) * r->block;
    *fwd = (size_t)(r->comm->nnodes - 1) * r->block;
}

static int plan(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int me = comm->rank;

    if (!ofccl__rs_hier_fits(comm))
        return ofccl__coll_fail(r, OFCCL_ERR_INTERNAL,
                                "hierarchical reduce-scatter on %d hosts of %d ranks: it needs "
                                "several hosts with as many ranks each, more than one",
                                comm->nnodes, comm->node_width);
    for (int p = 0; p < comm->size; p++) {
        bool peer = p != me && (comm->node_of[p] == comm->node_of[me] ||
                                comm->node_idx[p] == comm->node_idx[me]);
        r->writes_to_me[p] = r->i_write_to[p] = peer;
    }
    r->units_in = (unsigned)(comm->size - 1) * r->nchunks;
    r->unit_span = r->units_in;
    r->dst_need = (uint64_t)(comm->size - 1) * r->block;
    return 0;
}

static int writer_of(const ofccl__req_t *r, uint32_t unit)
{
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, H = comm->nnodes, L = comm->node_width;
    int s = r->nchunks ? (int)(unit / r->nchunks) : -1;

    if (s < 0 || s >= comm->size - 1)
        return -1;
    if (s < (L - 1) * H)
        return at(comm, comm->node_of[me], (comm->node_idx[me] + 1 + s / H) % L);
    return at(comm, (comm->node_of[me] + 1 + s - (L - 1) * H) % H, comm->node_idx[me]);
}

/* Writer p's k-th write here: a rank of our host sends its H blocks in
 * order, one of our rail elsewhere its partial. */
static uint32_t unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    return stage_idx(r->comm, r->comm->rank, p, 0) * r->nchunks + k;
}

static unsigned units_from(const ofccl__req_t *r, int p)
{
    const ofccl_comm_t *comm = r->comm;

    if (!r->writes_to_me[p])
        return 0;
    return comm->node_of[p] == comm->node_of[comm->rank] ? (unsigned)comm->nnodes * r->nchunks
                                                         : r->nchunks;
}

/* Chunk c of the block at `block` (inside `mr`) into peer p's staging block
 * s, signalled as unit s * nchunks + c: both phases write this way. */
static int put_staged(ofccl__req_t *r, int p, const char *block, const ofccl__mr_t *mr, unsigned s,
                      unsigned c)
{
    size_t off = (size_t)c * r->chunk;

    return ofccl__coll_put(r, p, block + off, mr, ofccl__chunk_len(r, c),
                           (size_t)s * r->block + off, s * r->nchunks + c);
}

/* Phase 1: to each other rank (h, j) of our host, our contributions to the H
 * blocks of rail j, other hosts' first. */
static int to_host(ofccl__req_t *r, bool *all)
{
    ofccl_comm_t *comm = r->comm;
    int me = comm->rank, h = comm->node_of[me], H = comm->nnodes, L = comm->node_width;
    unsigned total = (unsigned)H * r->nchunks;
    const char *src = r->src.ptr;

    for (int k = 1; k < L; k++) {
        int j = (comm->node_idx[me] + k) % L, q = at(comm, h, j);
        while (r->sent[q] < total) {
            unsigned w = r->sent[q], t = w / r->nchunks, c = w % r->nchunks;
            unsigned s = stage_idx(comm, q, me, (int)t);
            int b = at(comm, (h + 1 + (int)t) % H, j);
            int rc = put_staged(r, q, src + (size_t)b * r->block, r->src.mr, s, c);
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
        *all &= r->sent[q] == total;
    }
    return 0;
}

/* Have the other ranks of our host written their t-th block's chunk c? */
static bool host_in(const ofccl__req_t *r, unsigned t, unsigned c)
{
    unsigned H = (unsigned)r->comm->nnodes, L = (unsigned)r->comm->node_width;

    for (unsigned s = 0; s < L - 1; s++)
        if (r->unit_cnt[(s * H + t) * r->nchunks + c] == 0)
            return false;
    return true;
}

/* Have the partials of chunk c from the other hosts arrived? */
static bool rail_in(const ofccl__req_t *r, unsigned c)
{
    unsigned H = (unsigned)r->comm->nnodes, L = (unsigned)r->comm->node_width;

    for (unsigned s = 0; s < H - 1; s++)
        if (r->unit_cnt[((L - 1) * H + s) * r->nchunks + c] == 0)
            return false;
    return true;
}

/* Our host's contributions to chunk c of its t-th block (own first) into
 * srcs; returns how many. */
static int host_srcs(ofccl__req_t *r, unsigned t, size_t off)
{
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, H = comm->nnodes, L = comm->node_width;
    int b = at(comm, (comm->node_of[me] + 1 + (int)t) % H, comm->node_idx[me]);
    const char *stage = r->dst.ptr;

    r->srcs[0] = (const char *)r->src.ptr + (size_t)b * r->block + off;
    for (int s = 0; s < L - 1; s++)
        r->srcs[s + 1] = stage + ((size_t)s * (size_t)H + t) * r->block + off;
    return L;
}

/* Reduce what has arrived, in order, at most `depth` chunks per call: the
 * partials for the other hosts (into r->fwd), then our block (into r->out):
 * our host's sum plus the other hosts' partials. With premul the partials are
 * already scaled: they are added to our host's sum in a second pass. */
static int reduce_some(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    unsigned H = (unsigned)comm->nnodes, L = (unsigned)comm->node_width;
    unsigned parts = (H - 1) * r->nchunks;
    int ndiv = r->op.kind == OFCCL_OP_AVG ? comm->size : 0, rc = 0;

    for (unsigned k = 0; k < r->depth && r->reduced < parts + r->nchunks; k++) {
        unsigned t = r->reduced < parts ? r->reduced / r->nchunks : H - 1;
        unsigned c = r->reduced < parts ? r->reduced % r->nchunks : r->reduced - parts;
        size_t off = (size_t)c * r->chunk, count = ofccl__chunk_len(r, c) / r->esize;
        int n = 0;

        if (!host_in(r, t, c) || (t == H - 1 && !rail_in(r, c)))
            break;
        n = host_srcs(r, t, off);
        if (t < H - 1) {
            rc = ofccl__exec_reduce(r, r->op, (char *)r->fwd.ptr + t * r->block + off, r->srcs, n,
                                    count, 0);
        } else {
            char *out = (char *)r->out + off;
            const char *rail = (const char *)r->dst.ptr + (size_t)(L - 1) * H * r->block + off;
            bool premul = r->op.kind == OFCCL_OP_PREMUL_SUM;

            if (premul) {
                rc = ofccl__exec_reduce(r, r->op, out, r->srcs, n, count, 0);
                r->srcs[0] = out;
                n = 1;
            }
            for (unsigned s = 0; s < H - 1; s++)
                r->srcs[n++] = rail + (size_t)s * r->block;
            if (rc == 0)
                rc = ofccl__exec_reduce(r, premul ? sum_op : r->op, out, r->srcs, n, count, ndiv);
        }
        if (rc)
            return ofccl__coll_fail(r, rc, "reducing chunk %u of %s", c,
                                    t < H - 1 ? "a partial for another host" : "the result");
        r->reduced++;
        ofccl__ctx_moved(comm->ctx);
    }
    return 0;
}

/* Phase 2: each partial to the rank of our rail on its host, chunk by chunk
 * as it is reduced. */
static int to_rail(ofccl__req_t *r, bool *all)
{
    ofccl_comm_t *comm = r->comm;
    int me = comm->rank, h = comm->node_of[me], H = comm->nnodes;
    const char *fwd = r->fwd.ptr;

    /* Partials go on once their sums are done (an executor may finish later). */
    if (!ofccl__exec_idle(r)) {
        *all = false;
        return 0;
    }
    for (int t = 0; t < H - 1; t++) {
        int p = at(comm, (h + 1 + t) % H, comm->node_idx[me]);
        unsigned s = stage_idx(comm, p, me, 0);
        while (r->sent[p] < r->nchunks && r->reduced > (unsigned)t * r->nchunks + r->sent[p]) {
            int rc = put_staged(r, p, fwd + (size_t)t * r->block, r->fwd.mr, s, r->sent[p]);
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
        *all &= r->sent[p] == r->nchunks;
    }
    return 0;
}

static int progress(ofccl__req_t *r)
{
    bool all = true;
    int rc = to_host(r, &all);

    if (rc == 0)
        rc = reduce_some(r);
    if (rc == 0)
        rc = to_rail(r, &all);
    if (rc)
        return rc;
    r->finished = all && r->reduced == (unsigned)r->comm->nnodes * r->nchunks;
    return 0;
}

const ofccl__algo_t ofccl__rs_hier = {
    .size = sizeof(ofccl__algo_t),
    .name = "hier",
    .coll = OFCCL__RS,
    .wire_id = OFCCL__WIRE_HIER,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = writer_of,
    .unit_of = unit_of,
    .units_from = units_from,
    .staging = staging,
};
