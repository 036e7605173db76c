/*
 * What every broadcast algorithm shares. Beyond the data's own path, the
 * root and each other rank exchange descriptors both ways: a rank that is not
 * the root ends by telling the root it is done (a zero-length write), and the
 * root writes at least one unit to every rank (its data, or a zero-length
 * "go"). So the root never completes before every rank has posted the
 * broadcast, and any two ranks that name different roots check each other's
 * fingerprint: OFCCL_ERR_MISMATCH naming the root, not a silent success.
 *
 * Units: a rank that is not the root counts its data chunks 0..nchunks-1 from
 * its writer and, when the root is not that writer, the root's go as unit
 * nchunks; the root counts one done per rank (unit = that rank).
 */
#include "coll.h"
#include "util.h"

void ofccl__plan_bcast(ofccl__req_t *r, int data_from)
{
    ofccl_comm_t *comm = r->comm;
    int root = r->root;

    if (comm->rank == root) {
        for (int p = 0; p < comm->size; p++)
            r->writes_to_me[p] = r->i_write_to[p] = p != root;
        r->units_in = (unsigned)comm->size - 1;
        return;
    }
    r->writes_to_me[root] = 1; /* its data or its go */
    r->i_write_to[root] = 1;   /* our done */
    r->units_in = OFCCL__MAX(r->nchunks, 1u) * (data_from == root) + (data_from != root);
    if (data_from != root) {
        r->writes_to_me[data_from] = 1;
        r->units_in += r->nchunks;
    }
}

uint64_t ofccl__bcast_need_of(const ofccl__req_t *r, int p)
{
    int n = r->comm->size, succ = (r->comm->rank + 1) % n;
    bool last = (succ - r->root + n) % n == 0;

    /* Data goes from the root to every rank (direct), or to the successor
     * (chain); everything else is a zero-length signal. */
    if (r->algo->wire_id == OFCCL__WIRE_DIRECT)
        return r->comm->rank == r->root ? r->block : 0;
    if (r->algo->wire_id == OFCCL__WIRE_CHAIN)
        return p == succ && !last ? r->block : 0;
    return 0;
}

void ofccl__bcast_landed(const ofccl__req_t *r, uint32_t unit, size_t *off, size_t *len)
{
    *off = (size_t)unit * r->chunk;
    *len = unit < r->nchunks ? ofccl__chunk_len(r, unit) : 0; /* else a go or a done */
}

int ofccl__bcast_writer_of(const ofccl__req_t *r, uint32_t unit)
{
    int n = r->comm->size;

    if (r->comm->rank == r->root)
        return (int)unit; /* a done */
    if (r->algo->wire_id == OFCCL__WIRE_CHAIN && unit < r->nchunks)
        return (r->comm->rank - 1 + n) % n; /* chain data from the predecessor */
    return r->root;
}

uint32_t ofccl__bcast_unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    if (r->comm->rank == r->root)
        return (uint32_t)p;
    if (p != r->root || r->algo->wire_id != OFCCL__WIRE_CHAIN)
        return k; /* data (or the go) in order from the writer */
    /* chain: the root's go, unless the root is also the predecessor */
    return (r->comm->rank - 1 + r->comm->size) % r->comm->size == r->root ? k : r->nchunks;
}

/* The done each rank but the root sends once it has its data. */
int ofccl__bcast_done(ofccl__req_t *r)
{
    int rc;

    if (r->sent[r->root] > 0)
        return 1;
    rc = ofccl__coll_put(r, r->root, NULL, NULL, 0, 0, (uint32_t)r->comm->rank);
    return rc == OFCCL_ERR_AGAIN ? 0 : rc < 0 ? rc : 1;
}
