/*
 * All-gather, hierarchical, for H hosts of L ranks each (the communicator's
 * node table; rank (h, i) is the i-th rank of host h):
 *   1. between hosts, along rails: rank (h, i) writes its block to (h', i) on
 *      every other host, so every rank of a host drives its own NIC-facing
 *      stream at once and each block crosses to each host once;
 *   2. within a host: rank (h, i) forwards the H blocks of its rail (its own
 *      first, then the others' in host order from its own) to every other
 *      rank of its host, each chunk as soon as it has arrived.
 * Every block b reaches a rank once, at its place in the output, as unit
 * b * nchunks + c (the direct numbering): from b itself when b is on the
 * rank's rail, else from the rank of its own host on b's rail.
 */
#include "coll.h"

/* The rank of host h on rail i. */
static int at(const ofccl_comm_t *comm, int h, int i)
{
    return comm->node_rank[h * comm->node_width + i];
}

/* Does the communicator have the shape (several hosts, as many ranks on each,
 * more than one on a host)? */
bool ofccl__ag_hier_fits(const ofccl_comm_t *comm)
{
    return comm->nnodes > 1 && comm->node_width > 1;
}

static int plan(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int me = comm->rank;

    if (!ofccl__ag_hier_fits(comm))
        return ofccl__coll_fail(r, OFCCL_ERR_INTERNAL,
                                "hierarchical all-gather on %d hosts of %d ranks", comm->nnodes,
                                comm->node_width);
    for (int p = 0; p < comm->size; p++) {
        bool peer = p != me && (comm->node_of[p] == comm->node_of[me] ||
                                comm->node_idx[p] == comm->node_idx[me]);
        r->writes_to_me[p] = r->i_write_to[p] = peer;
    }
    r->units_in = (unsigned)(comm->size - 1) * r->nchunks;
    return 0;
}

/* The block peer p on this host sends in its k-th write here. */
static int forwarded(const ofccl__req_t *r, int p, uint32_t k)
{
    const ofccl_comm_t *comm = r->comm;
    int t = (int)(k / r->nchunks);

    return at(comm, (comm->node_of[p] + t) % comm->nnodes, comm->node_idx[p]);
}

static int writer_of(const ofccl__req_t *r, uint32_t unit)
{
    const ofccl_comm_t *comm = r->comm;
    int b = r->nchunks ? (int)(unit / r->nchunks) : -1;

    if (b < 0 || b >= comm->size)
        return -1;
    if (comm->node_idx[b] == comm->node_idx[comm->rank])
        return b;
    return at(comm, comm->node_of[comm->rank], comm->node_idx[b]);
}

static uint32_t unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    const ofccl_comm_t *comm = r->comm;

    if (comm->node_of[p] != comm->node_of[comm->rank])
        return (uint32_t)p * r->nchunks + k;
    return (uint32_t)forwarded(r, p, k) * r->nchunks + k % r->nchunks;
}

/* A rank of our host forwards its rail's H blocks; one of another host, its own. */
static unsigned units_from(const ofccl__req_t *r, int p)
{
    const ofccl_comm_t *comm = r->comm;

    if (!r->writes_to_me[p])
        return 0;
    return comm->node_of[p] == comm->node_of[comm->rank] ? (unsigned)comm->nnodes * r->nchunks
                                                         : r->nchunks;
}

/* Phase 1: our block to the rank of our rail on every other host. */
static int to_rail(ofccl__req_t *r, bool *all)
{
    ofccl_comm_t *comm = r->comm;
    int me = comm->rank, h = comm->node_of[me], i = comm->node_idx[me];
    const char *src = r->src.ptr;
    size_t mine = (size_t)me * r->block;

    for (int t = 1; t < comm->nnodes; t++) {
        int p = at(comm, (h + t) % comm->nnodes, i);
        while (r->sent[p] < r->nchunks) {
            unsigned c = r->sent[p];
            size_t off = (size_t)c * r->chunk, len = ofccl__chunk_len(r, c);
            int rc;

            if (!ofccl__exec_in(r, off + len))
                break;
            rc = ofccl__coll_put(r, p, src + off, r->src.mr, len, mine + off,
                                 ofccl__direct_unit_of(r, me, c));
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
        *all &= r->sent[p] == r->nchunks;
    }
    return 0;
}

/* Phase 2: our rail's blocks to every other rank of our host, in order,
 * each chunk once it is here. */
static int to_host(ofccl__req_t *r, bool *all)
{
    ofccl_comm_t *comm = r->comm;
    int me = comm->rank, h = comm->node_of[me], L = comm->node_width;
    unsigned total = (unsigned)comm->nnodes * r->nchunks;
    const char *dst = r->dst.ptr, *src = r->src.ptr;

    for (int k = 1; k < L; k++) {
        int q = at(comm, h, (comm->node_idx[me] + k) % L);
        while (r->sent[q] < total) {
            unsigned j = r->sent[q], c = j % r->nchunks;
            int b = forwarded(r, me, j);
            size_t off = (size_t)b * r->block + (size_t)c * r->chunk;
            const void *from = b == me ? src + (size_t)c * r->chunk : dst + off;
            int rc;

            if (b != me && r->unit_cnt[ofccl__direct_unit_of(r, b, c)] == 0)
                break; /* not here yet */
            if (b == me && !ofccl__exec_in(r, (size_t)c * r->chunk + ofccl__chunk_len(r, c)))
                break;
            rc = ofccl__coll_put(r, q, from, b == me ? r->src.mr : r->dst.mr,
                                 ofccl__chunk_len(r, c), off, ofccl__direct_unit_of(r, b, c));
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
        *all &= r->sent[q] == total;
    }
    return 0;
}

static int progress(ofccl__req_t *r)
{
    bool all = true;
    int rc = to_rail(r, &all);

    if (rc == 0)
        rc = to_host(r, &all);
    if (rc)
        return rc;
    all &= ofccl__ag_copy_own(r);
    r->finished = all && r->arrived >= r->units_in;
    return 0;
}

const ofccl__algo_t ofccl__ag_hier = {
    .size = sizeof(ofccl__algo_t),
    .name = "hier",
    .coll = OFCCL__AG,
    .wire_id = OFCCL__WIRE_HIER,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = writer_of,
    .unit_of = unit_of,
    .units_from = units_from,
    .landed = ofccl__direct_landed, /* the direct numbering */
    .start = ofccl__ag_own_start,
    .buffers = OFCCL__BUF_OWN_BEHIND | OFCCL__BUF_OWN_PIECES,
    .priv_fixed = sizeof(ofccl__own_copy_t),
};
