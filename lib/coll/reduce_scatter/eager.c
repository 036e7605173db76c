/* Reduce-scatter, eager: each rank writes {header, the slice a peer owns}
 * straight into a slot of that peer's control region; the owner reduces its
 * own slice and the arrived ones (own first, then rank order) once all are in. */
#include "coll.h"

static int plan(ofccl__req_t *r)
{
    ofccl__plan_direct(r);
    r->units_in = (unsigned)(r->comm->size - 1);
    return 0;
}

/* Where peers' control regions are mapped, the data is stored at once, so a
 * wait can watch the marks from its first pass without the lock (stores
 * cannot fail: the rest is sent from progress). */
static int start(ofccl__req_t *r)
{
    int rc = ofccl__eager_send(r, r->block, r->block);
    return rc < 0 ? rc : 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, rc = ofccl__eager_send(r, r->block, r->block); /* peer p gets slice p */
    const void **srcs = r->srcs;

    if (rc <= 0 || (rc = ofccl__eager_arrived(r)) <= 0)
        return rc;
    rc = ofccl__eager_land(r);
    if (rc)
        return rc;
    if (r->count) {
        size_t k = 1;
        srcs[0] = (const char *)r->sendbuf + (size_t)comm->rank * r->block;
        for (int p = 0; p < n; p++)
            if (p != comm->rank)
                srcs[k++] = ofccl__eager_in(comm, r->seq, p) + OFCCL__EAGER_HDR;
        rc = ofccl__exec_reduce(r, r->op, r->out, srcs, n, r->count,
                                r->op.kind == OFCCL_OP_AVG ? n : 0);
        if (rc)
            return ofccl__coll_fail(r, rc, "reducing the eager slices");
    }
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__rs_eager = {
    .size = sizeof(ofccl__algo_t),
    .name = "eager",
    .coll = OFCCL__RS,
    .wire_id = OFCCL__WIRE_EAGER,
    .flags = OFCCL__ALGO_ALL_PAIRS | OFCCL__ALGO_EAGER,
    .plan = plan,
    .start = start,
    .progress = progress,
    .writer_of = ofccl__one_writer_of,
    .unit_of = ofccl__one_unit_of,
};
