/* All-gather, ring: n-1 steps; at step s a rank forwards block (rank - s) to
 * its right neighbour, chunk by chunk as soon as that chunk arrived from the
 * left, so the steps overlap (pipelined). */
#include "coll.h"

/* Unit j came from the left at step s = j / chunks: block (rank - 1 - s). */
static void landed(const ofccl__req_t *r, uint32_t unit, size_t *off, size_t *len)
{
    int n = r->comm->size, s = (int)(unit / r->nchunks);
    unsigned c = unit % r->nchunks;

    *off = (size_t)((r->comm->rank - 1 - s + 2 * n) % n) * r->block + (size_t)c * r->chunk;
    *len = ofccl__chunk_len(r, c);
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, right = (comm->rank + 1) % n;
    unsigned total = (unsigned)(n - 1) * r->nchunks;
    char *dst = r->dst.ptr;

    while (r->sent[right] < total) {
        unsigned j = r->sent[right], s = j / r->nchunks, c = j % r->nchunks;
        size_t b = (size_t)((comm->rank - (int)s + n) % n);
        size_t off = b * r->block + (size_t)c * r->chunk;
        int rc;

        /* Block b reached us at step s-1 (from the left) before we pass it on;
         * our own, at step 0, once copied in (OFCCL__BUF_OWN_PIECES). */
        if (s > 0 && r->unit_cnt[ofccl__unit(r, s - 1, c)] == 0)
            break;
        if (s == 0 && !ofccl__exec_in(r, (size_t)c * r->chunk + ofccl__chunk_len(r, c)))
            break;
        rc = ofccl__coll_put(r, right, dst + off, r->dst.mr, ofccl__chunk_len(r, c), off, j);
        if (rc == OFCCL_ERR_AGAIN)
            break;
        if (rc)
            return rc;
    }
    r->finished = r->sent[right] == total && r->arrived >= r->units_in;
    return 0;
}

const ofccl__algo_t ofccl__ag_ring = {
    .size = sizeof(ofccl__algo_t),
    .name = "ring",
    .coll = OFCCL__AG,
    .wire_id = OFCCL__WIRE_RING,
    .flags = 0,
    .buffers = OFCCL__BUF_OWN_PIECES,
    .plan = ofccl__plan_ring,
    .progress = progress,
    .writer_of = ofccl__ring_writer_of,
    .unit_of = ofccl__ring_unit_of,
    .landed = landed,
};
