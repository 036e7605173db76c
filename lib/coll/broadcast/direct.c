/* Broadcast, direct: the root writes its buffer, chunk by chunk, into every
 * other rank's; each of those then tells the root it is done (plan.c). One
 * step: the lowest latency, the root's link carries n-1 copies. */
#include "coll.h"
#include "util.h"

static int plan(ofccl__req_t *r)
{
    ofccl__plan_bcast(r, r->root);
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int all_sent = 1, rc;

    if (comm->rank != r->root) {
        if (r->arrived < r->units_in)
            return 0;
        if ((rc = ofccl__bcast_done(r)) <= 0)
            return rc;
        r->finished = 1;
        return 0;
    }
    /* At least one unit per rank, even of an empty broadcast (the go). */
    for (int k = 1; k < comm->size; k++) {
        int p = (comm->rank + k) % comm->size;
        while (r->sent[p] < OFCCL__MAX(r->nchunks, 1u)) {
            unsigned c = r->sent[p];
            size_t off = (size_t)c * r->chunk, len = r->nchunks ? ofccl__chunk_len(r, c) : 0;
            rc = ofccl__coll_put(r, p, len ? (const char *)r->src.ptr + off : NULL, r->src.mr, len,
                                 off, c);
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
        all_sent &= r->sent[p] >= OFCCL__MAX(r->nchunks, 1u);
    }
    r->finished = all_sent && r->arrived >= r->units_in;
    return 0;
}

const ofccl__algo_t ofccl__bc_direct = {
    .size = sizeof(ofccl__algo_t),
    .name = "direct",
    .coll = OFCCL__BC,
    .wire_id = OFCCL__WIRE_DIRECT,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = ofccl__bcast_writer_of,
    .unit_of = ofccl__bcast_unit_of,
    .landed = ofccl__bcast_landed,
    .need_of = ofccl__bcast_need_of,
};
