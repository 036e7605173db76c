/* Reduce-scatter, pull (providers that map peers' memory: caps.peer_map).
 * Every rank announces its source buffer instead of a staging area; once all
 * descriptors are in, it maps each peer's block for this rank and reduces
 * chunk c of all of them, own contribution first, straight into the output:
 * one pass that reads every input once, where the push version first copied
 * each peer's block into staging. Then it signals each peer once (a
 * zero-length write with CQ data): "done reading your buffer". A rank's
 * request completes only when every peer has said so, so no source changes
 * while it is read. */
#include "coll.h"

/* Map every peer's block for this rank, once its descriptor is in. 1 when all
 * are mapped, 0 to wait, <0 on error. */
static int map_peers(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++) {
        const void *at;
        int rc;

        if (p == comm->rank || r->peer_at[p] != NULL)
            continue;
        if (!r->peer_ready[p])
            return 0;
        rc = ofccl__coll_map_peer(r, p, (uint64_t)comm->rank * r->block, r->block, &at);
        if (rc)
            return rc;
        r->peer_at[p] = at;
    }
    return 1;
}

static int reduce_some(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const char *own = (const char *)r->src.ptr + (size_t)comm->rank * r->block;
    int ndiv = r->op.kind == OFCCL_OP_AVG ? comm->size : 0;

    /* Bounded work per call: `depth` chunks, then progress runs again. */
    for (unsigned k = 0; k < r->depth && r->reduced < r->nchunks; k++) {
        unsigned c = r->reduced;
        size_t off = (size_t)c * r->chunk, n = 1;
        int rc;

        r->srcs[0] = own + off;
        for (int p = 0; p < comm->size; p++)
            if (p != comm->rank)
                r->srcs[n++] = r->peer_at[p] + off;
        rc = ofccl__reduce(r->dtype, r->op, (char *)r->out + off, r->srcs, comm->size,
                           ofccl__chunk_len(r, c) / r->esize, ndiv);
        if (rc)
            return ofccl__coll_fail(r, rc, "reducing chunk %u", c);
        r->reduced++;
        ofccl__ctx_moved(comm->ctx);
    }
    return 0;
}

static int plan(ofccl__req_t *r)
{
    ofccl__plan_direct(r);
    r->units_in = (unsigned)(r->comm->size - 1); /* one "done" per peer */
    for (int p = 0; p < r->comm->size; p++)
        r->peer_at[p] = NULL;
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int all_sent = 1, rc = map_peers(r);

    if (rc <= 0)
        return rc;
    if ((rc = reduce_some(r)) != 0)
        return rc;
    if (r->reduced < r->nchunks)
        return 0;
    for (int k = 1; k < comm->size; k++) {
        int p = (comm->rank + k) % comm->size;
        if (r->sent[p] == 0) {
            rc = ofccl__coll_put(r, p, NULL, NULL, 0, 0, (uint32_t)comm->rank);
            if (rc && rc != OFCCL_ERR_AGAIN)
                return rc;
        }
        all_sent &= r->sent[p] == 1;
    }
    r->finished = all_sent && r->arrived == r->units_in;
    return 0;
}

const ofccl__algo_t ofccl__rs_pull = {
    .size = sizeof(ofccl__algo_t),
    .name = "pull",
    .coll = OFCCL__RS,
    .wire_id = OFCCL__WIRE_PULL,
    .flags = OFCCL__ALGO_ALL_PAIRS,
    .plan = plan,
    .progress = progress,
    .writer_of = ofccl__one_writer_of,
    .unit_of = ofccl__one_unit_of,
};
