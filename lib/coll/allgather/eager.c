/* All-gather, eager: for small collectives, each rank writes {header, its block}
 * straight into a slot of every peer's control region — no descriptor round
 * trip — and copies the blocks out once all have arrived. The header carries
 * what a descriptor would: sequence, fingerprint and count, checked on arrival. */
#include <string.h>

#include "coll.h"

static int plan(ofccl__req_t *r)
{
    ofccl__plan_direct(r);
    r->units_in = (unsigned)(r->comm->size - 1); /* one {header, block} per writer */
    return 0;
}

/* Where peers' control regions are mapped, the data is stored at once, so a
 * wait can watch the marks from its first pass without the lock (stores
 * cannot fail: the rest is sent from progress). */
static int start(ofccl__req_t *r)
{
    int rc = ofccl__eager_send(r, 0, r->block);
    return rc < 0 ? rc : 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int rc = ofccl__eager_send(r, 0, r->block); /* the same block to everyone */

    if (rc <= 0 || (rc = ofccl__eager_arrived(r)) <= 0)
        return rc;
    rc = ofccl__eager_land(r);
    if (rc)
        return rc;
    for (int p = 0; p < comm->size && r->block && rc == 0; p++) {
        char *dst = (char *)r->recvbuf + (size_t)p * r->block;
        if (p != comm->rank)
            rc = ofccl__exec_copy(r, dst, ofccl__eager_in(comm, r->seq, p) + OFCCL__EAGER_HDR,
                                  r->block);
        else if (dst != (const char *)r->sendbuf) /* in place is the same address */
            rc = ofccl__exec_copy(r, dst, r->sendbuf, r->block);
    }
    if (rc)
        return rc;
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__ag_eager = {
    .size = sizeof(ofccl__algo_t),
    .name = "eager",
    .coll = OFCCL__AG,
    .wire_id = OFCCL__WIRE_EAGER,
    .flags = OFCCL__ALGO_ALL_PAIRS | OFCCL__ALGO_EAGER,
    .plan = plan,
    .start = start,
    .progress = progress,
    .writer_of = ofccl__one_writer_of,
    .unit_of = ofccl__one_unit_of,
};
