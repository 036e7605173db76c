/* Reduce-scatter, direct: each rank writes the slice owned by peer p into p's
 * staging (slot = writer's rank); the owner reduces chunk c once every peer's
 * chunk c has arrived, own contribution first, then the others in rank order. */
#include "coll.h"

static int reduce_ready(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const char *src = r->src.ptr, *stage = r->dst.ptr;
    const void **srcs = r->srcs;
    int ndiv = r->op.kind == OFCCL_OP_AVG ? comm->size : 0;

    while (r->reduced < r->nchunks && ofccl__direct_chunk_in(r, r->reduced)) {
        unsigned c = r->reduced;
        size_t off = (size_t)c * r->chunk, k = 1;
        int rc;

        srcs[0] = src + (size_t)comm->rank * r->block + off;
        for (int p = 0; p < comm->size; p++)
            if (p != comm->rank)
                srcs[k++] = stage + (size_t)p * r->block + off;
        rc = ofccl__exec_reduce(r, r->op, (char *)r->out + off, srcs, comm->size,
                                ofccl__chunk_len(r, c) / r->esize, ndiv);
        if (rc)
            return ofccl__coll_fail(r, rc, "reducing chunk %u", c);
        r->reduced++;
    }
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const char *src = r->src.ptr;
    size_t mine = (size_t)comm->rank * r->block;
    int all_sent = 1, rc;

    for (int k = 1; k < comm->size; k++) {
        int p = (comm->rank + k) % comm->size;
        while (r->sent[p] < r->nchunks) {
            unsigned c = r->sent[p];
            size_t off = (size_t)c * r->chunk;
            rc = ofccl__coll_put(r, p, src + (size_t)p * r->block + off, r->src.mr,
                                 ofccl__chunk_len(r, c), mine + off,
                                 ofccl__direct_unit_of(r, comm->rank, c));
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
        all_sent &= r->sent[p] == r->nchunks;
    }
    rc = reduce_ready(r);
    if (rc)
        return rc;
    r->finished = all_sent && r->reduced == r->nchunks;
    return 0;
}

const ofccl__algo_t ofccl__rs_direct = {
    .size = sizeof(ofccl__algo_t),
    .name = "direct",
    .coll = OFCCL__RS,
    .wire_id = OFCCL__WIRE_DIRECT,
    .flags = OFCCL__ALGO_ALL_PAIRS,
    .plan = ofccl__plan_direct,
    .progress = progress,
    .writer_of = ofccl__direct_writer_of,
    .unit_of = ofccl__direct_unit_of,
};
