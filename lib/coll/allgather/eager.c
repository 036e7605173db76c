/* All-gather, eager: for small collectives, each rank writes {header, its block}
 * straight into a slot of every peer's control region — no descriptor round
 * trip — and copies the blocks out once all have arrived. The header carries
 * what a descriptor would: sequence, fingerprint and count, checked on arrival. */
#include <string.h>

#include "coll.h"

#define HDR (OFCCL__DESC_WORDS * sizeof(uint64_t))

static int plan(ofccl__req_t *r)
{
    ofccl__plan_direct(r);
    r->units_in = (unsigned)(r->comm->size - 1); /* one {header, block} per writer */
    return 0;
}

/* Check every writer's header, then place the blocks; once. */
int ofccl__eager_land(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    char why[256];

    for (int p = 0; p < comm->size; p++) {
        ofccl__desc_expect_t x = {r->seq, r->fingerprint, r->count, 0, p, comm->rank};
        int rc;
        if (p == comm->rank)
            continue;
        rc = ofccl__desc_check((const uint64_t *)ofccl__eager_in(comm, r->seq, p), &x, why,
                               sizeof(why));
        if (rc)
            return ofccl__coll_fail(r, rc, "%s", why);
    }
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, all_sent = 1, rc;

    for (int k = 1; k < n; k++) {
        int p = (comm->rank + k) % n;
        uint8_t *o;
        if (r->sent[p])
            continue;
        o = ofccl__eager_out(comm, r->slot, p);
        ofccl__eager_header(r, o);
        if (r->block)
            memcpy(o + HDR, r->sendbuf, r->block);
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
    for (int p = 0; p < n && r->block; p++) {
        char *dst = (char *)r->recvbuf + (size_t)p * r->block;
        if (p != comm->rank)
            memcpy(dst, ofccl__eager_in(comm, r->seq, p) + HDR, r->block);
        else if (dst != (const char *)r->sendbuf)
            memmove(dst, r->sendbuf, r->block);
    }
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__ag_eager = {sizeof(ofccl__algo_t), "eager", OFCCL__AG,
                                       OFCCL__ALGO_EAGER,     plan,    progress};
