/* All-gather, direct: each rank writes its block into every peer's buffer.
 * One step; every peer's stream is chunked and at most `depth` deep. */
#include "coll.h"

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int all_sent = 1;

    /* Start with the right neighbour so ranks do not all hit rank 0 first. */
    for (int k = 1; k < comm->size; k++) {
        int p = (comm->rank + k) % comm->size, rc = ofccl__ag_put_own(r, p);

        if (rc)
            return rc;
        all_sent &= r->sent[p] == r->nchunks;
    }
    all_sent &= ofccl__ag_copy_own(r);
    r->finished = all_sent && r->arrived >= r->units_in;
    return 0;
}

const ofccl__algo_t ofccl__ag_direct = {
    .size = sizeof(ofccl__algo_t),
    .name = "direct",
    .coll = OFCCL__AG,
    .wire_id = OFCCL__WIRE_DIRECT,
    .flags = OFCCL__ALGO_ALL_PAIRS,
    .plan = ofccl__plan_direct,
    .progress = progress,
    .writer_of = ofccl__direct_writer_of,
    .unit_of = ofccl__direct_unit_of,
    .landed = ofccl__direct_landed,
    .start = ofccl__ag_own_start,
    .buffers = OFCCL__BUF_OWN_BEHIND | OFCCL__BUF_OWN_PIECES,
    .priv_fixed = sizeof(ofccl__own_copy_t),
};
