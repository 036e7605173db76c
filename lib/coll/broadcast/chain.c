/* Broadcast, chain (pipelined): ranks in order from the root; each forwards
 * chunk c to its successor as soon as chunk c arrived from its predecessor,
 * so every link carries the data once and the chunks overlap. The root also
 * sends each rank past its successor a zero-length go (plan.c). */
#include "coll.h"

static int pos(const ofccl__req_t *r, int rank)
{
    return (rank - r->root + r->comm->size) % r->comm->size;
}

static int plan(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, me = pos(r, comm->rank);

    ofccl__plan_bcast(r, me > 0 ? (comm->rank - 1 + n) % n : r->root);
    if (me + 1 < n)
        r->i_write_to[(comm->rank + 1) % n] = 1;
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, me = pos(r, comm->rank), succ = (comm->rank + 1) % n, rc;
    char *buf = r->dst.ptr;

    if (me + 1 < n) {
        while (r->sent[succ] < r->nchunks) {
            unsigned c = r->sent[succ];
            size_t off = (size_t)c * r->chunk;
            if (me > 0 && r->unit_cnt[c] == 0) /* not here yet */
                break;
            rc = ofccl__coll_put(r, succ, buf + off, r->dst.mr, ofccl__chunk_len(r, c), off, c);
            if (rc == OFCCL_ERR_AGAIN)
                break;
            if (rc)
                return rc;
        }
    }
    if (comm->rank == r->root) {
        /* The go to every rank that is not the successor (and the successor's
         * go, for an empty broadcast). */
        for (int p = 0; p < n; p++) {
            if (p == comm->rank || (p == succ && r->nchunks > 0) || r->sent[p] > 0)
                continue;
            rc = ofccl__coll_put(r, p, NULL, NULL, 0, 0, r->nchunks);
            if (rc && rc != OFCCL_ERR_AGAIN)
                return rc;
        }
        r->finished = r->arrived >= r->units_in;
        for (int p = 0; p < n && r->finished; p++)
            r->finished = p == comm->rank || r->sent[p] > 0;
        r->finished &= me + 1 >= n || r->sent[succ] >= r->nchunks;
        return 0;
    }
    if (r->arrived < r->units_in || (me + 1 < n && r->sent[succ] < r->nchunks))
        return 0;
    if ((rc = ofccl__bcast_done(r)) <= 0)
        return rc;
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__bc_chain = {
    .size = sizeof(ofccl__algo_t),
    .name = "chain",
    .coll = OFCCL__BC,
    .wire_id = OFCCL__WIRE_CHAIN,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = ofccl__bcast_writer_of,
    .unit_of = ofccl__bcast_unit_of,
    .landed = ofccl__bcast_landed,
    .need_of = ofccl__bcast_need_of,
};
