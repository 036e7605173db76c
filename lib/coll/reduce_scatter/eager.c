/* Reduce-scatter, eager: each rank writes {header, the slice a peer owns}
 * straight into a slot of that peer's control region; the owner reduces its
 * own slice and the arrived ones (own first, then rank order) once all are in. */
#include <string.h>

#include "coll.h"

#define HDR (OFCCL__DESC_WORDS * sizeof(uint64_t))

static int plan(ofccl__req_t *r)
{
    ofccl__plan_direct(r);
    r->units_in = (unsigned)(r->comm->size - 1);
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, all_sent = 1, rc;
    const char *send = r->sendbuf;
    const void **srcs = r->srcs;

    for (int k = 1; k < n; k++) {
        int p = (comm->rank + k) % n;
        uint8_t *o;
        if (r->sent[p])
            continue;
        o = ofccl__eager_out(comm, r->slot, p);
        ofccl__eager_header(r, o);
        if (r->block)
            memcpy(o + HDR, send + (size_t)p * r->block, r->block);
        rc = ofccl__coll_put(r, p, o, comm->ctrl_mr, HDR + r->block, 0, 0);
        if (rc == OFCCL_ERR_AGAIN) {
            all_sent = 0;
            continue;
        }
        if (rc)
            return rc;
    }
    if (!all_sent || (rc = ofccl__eager_arrived(r)) <= 0)
        return rc;
    rc = ofccl__eager_land(r);
    if (rc)
        return rc;
    if (r->count) {
        size_t k = 1;
        srcs[0] = send + (size_t)comm->rank * r->block;
        for (int p = 0; p < n; p++)
            if (p != comm->rank)
                srcs[k++] = ofccl__eager_in(comm, r->seq, p) + HDR;
        rc = ofccl__reduce(r->dtype, r->op, r->out, srcs, n, r->count,
                           r->op.kind == OFCCL_OP_AVG ? n : 0);
        if (rc)
            return ofccl__coll_fail(r, rc, "reducing the eager slices");
    }
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__rs_eager = {sizeof(ofccl__algo_t), "eager", OFCCL__RS,
                                       OFCCL__ALGO_EAGER,     plan,    progress};
