/* Broadcast, pull (providers that map peers' memory: caps.peer_map): the root
 * announces its buffer; every other rank maps it and copies the data into its
 * own buffer itself, all of them at once, then tells the root it is done
 * (plan.c), so the root's buffer is not reused while read. The root's go
 * (plan.c) carries no data here. */
#include <string.h>

#include "coll.h"

static int plan(ofccl__req_t *r)
{
    ofccl__plan_bcast(r, r->root);
    if (r->comm->rank != r->root)
        r->units_in = 1; /* the go; the data is read, not written */
    return 0;            /* the root's buffer, mapped here: the private state, zeroed */
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const char **root_at = ofccl__algo_priv(r);
    int rc;

    if (comm->rank == r->root) {
        int all_sent = 1;
        for (int k = 1; k < comm->size; k++) {
            int p = (comm->rank + k) % comm->size;
            if (r->sent[p] == 0 && (rc = ofccl__coll_put(r, p, NULL, NULL, 0, 0, 0)) != 0 &&
                rc != OFCCL_ERR_AGAIN)
                return rc;
            all_sent &= r->sent[p] > 0;
        }
        r->finished = all_sent && r->arrived >= r->units_in;
        return 0;
    }
    if (!r->peer_ready[r->root])
        return 0;
    if (*root_at == NULL && r->block > 0 &&
        (rc = ofccl__coll_map_peer(r, r->root, 0, r->block, (const void **)root_at)) != 0)
        return rc;
    /* Bounded work per call: `depth` chunks, then progress runs again. */
    for (unsigned k = 0; k < r->depth && r->reduced < r->nchunks; k++, r->reduced++) {
        size_t off = (size_t)r->reduced * r->chunk;
        rc = ofccl__exec_copy(r, (char *)r->out + off, *root_at + off,
                              ofccl__chunk_len(r, r->reduced));
        if (rc)
            return rc;
    }
    /* The root may reuse its buffer once told: after the copies are done. */
    if (r->reduced < r->nchunks || r->arrived < r->units_in || !ofccl__exec_idle(r))
        return 0;
    if ((rc = ofccl__bcast_done(r)) <= 0)
        return rc;
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__bc_pull = {
    .size = sizeof(ofccl__algo_t),
    .name = "pull",
    .coll = OFCCL__BC,
    .wire_id = OFCCL__WIRE_PULL,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = ofccl__bcast_writer_of,
    .unit_of = ofccl__bcast_unit_of,
    .need_of = ofccl__bcast_need_of,
    .buffers = OFCCL__BUF_PEERS_READ,
    .priv_fixed = sizeof(const char *),
};
