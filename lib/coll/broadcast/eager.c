/* Broadcast, eager (small): the root writes {header, data} into every other
 * rank's eager slot; each of them answers with a header alone. The headers
 * carry the fingerprint (root included), so ranks that name different roots
 * or counts fail with OFCCL_ERR_MISMATCH, and the root completes only when
 * every rank has posted the broadcast. */
#include <string.h>

#include "coll.h"

static int plan(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++) {
        bool pair = p != comm->rank && (comm->rank == r->root || p == r->root);
        r->writes_to_me[p] = r->i_write_to[p] = pair;
    }
    r->units_in = comm->rank == r->root ? (unsigned)comm->size - 1 : 1;
    return 0;
}

static size_t payload(const ofccl__req_t *r)
{
    return r->comm->rank == r->root ? r->block : 0;
}

static int start(ofccl__req_t *r)
{
    int rc = ofccl__eager_send(r, 0, payload(r));
    return rc < 0 ? rc : 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int rc = ofccl__eager_send(r, 0, payload(r));

    if (rc <= 0 || (rc = ofccl__eager_arrived(r)) <= 0)
        return rc;
    if ((rc = ofccl__eager_land(r)) != 0)
        return rc;
    if (comm->rank != r->root && r->block &&
        (rc = ofccl__exec_copy(r, r->recvbuf,
                               ofccl__eager_in(comm, r->seq, r->root) + OFCCL__EAGER_HDR,
                               r->block)) != 0)
        return rc;
    r->finished = 1;
    return 0;
}

const ofccl__algo_t ofccl__bc_eager = {
    .size = sizeof(ofccl__algo_t),
    .name = "eager",
    .coll = OFCCL__BC,
    .wire_id = OFCCL__WIRE_EAGER,
    .flags = OFCCL__ALGO_EAGER,
    .plan = plan,
    .start = start,
    .progress = progress,
    .writer_of = ofccl__one_writer_of,
    .unit_of = ofccl__one_unit_of,
};
