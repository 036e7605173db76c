/*
 * The second exchange of a communicator's creation: has every member
 * succeeded, which number does the communicator get, and (for a trace) how
 * far is each clock from rank 0's. An all-gather of a status per rank, or,
 * when created lazily, a reduction of four words.
 */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "trace.h"
#include "util.h"

/* The status exchange also carries when each rank's records exchange returned
 * (`released`, CLOCK_MONOTONIC): every rank leaves it at about the same
 * moment, so the differences estimate each clock's offset to rank 0's for a
 * trace (OFCCL_TRACE). Ranks on rank 0's host share its clock: offset 0. */
static void note_clock_offset(ofccl_comm_t *comm, uint64_t mine, uint64_t rank0)
{
    ofccl__trace_t *t = comm->ctx->trace;

    if (t == NULL || comm->size != comm->ctx->boot->size)
        return; /* only the world communicator's rank 0 is the job's */
    if (comm->host_of[comm->rank] == comm->host_of[0]) {
        ofccl__trace_set_offset(t, 0, "same host as rank 0");
        return;
    }
    ofccl__trace_set_offset(t, (int64_t)(mine - rank0), "bootstrap exchange release");
}

/* After the records: has every member succeeded? Fails naming the first that
 * did not. Also agrees on the communicator's number: *id, this rank's
 * proposal, becomes the highest. */
int ofccl__setup_status(ofccl_comm_t *comm, const ofccl__xchg_t *x, int mine, uint64_t released,
                        uint32_t *id)
{
    uint8_t st[OFCCL__STATUS_LEN] = {mine != 0},
            *all = malloc((size_t)comm->size * OFCCL__STATUS_LEN);
    size_t *lens = calloc((size_t)comm->size, sizeof(*lens));
    ofccl__err_t e;
    int rc;

    if (all == NULL || lens == NULL) {
        free(all);
        free(lens);
        return mine ? mine : ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory");
    }
    ofccl__put_le32(st + 4, *id);
    ofccl__put_le64(st + 8, released);
    rc = x->allgather(x->arg, st, OFCCL__STATUS_LEN, all, OFCCL__STATUS_LEN, lens, &e);
    if (rc && mine == 0)
        mine = ofccl__comm_fail(comm, rc, "comm setup: status exchange: %s", e.msg);
    for (int r = 0; r < comm->size && mine == 0; r++)
        if (lens[r] != OFCCL__STATUS_LEN || all[(size_t)r * OFCCL__STATUS_LEN] != 0)
            mine = ofccl__comm_fail(comm, OFCCL_ERR_REMOTE_ERROR,
                                    "comm setup: rank %d failed to create its side of the "
                                    "communicator (its own error says why)",
                                    r);
    for (int r = 0; r < comm->size && mine == 0; r++)
        *id = OFCCL__MAX(*id, ofccl__get_le32(all + (size_t)r * OFCCL__STATUS_LEN + 4));
    if (mine == 0)
        note_clock_offset(comm, released, ofccl__get_le64(all + 8));
    free(all);
    free(lens);
    return mine;
}

/* The same as a reduction (lazy creation of a world communicator): the
 * lowest failed rank, the highest proposed number, rank 0's release time. */
int ofccl__setup_status_reduced(ofccl_comm_t *comm, const ofccl__xchg_t *x, int mine,
                                uint64_t released, uint32_t *id, bool *need_all)
{
    static const uint8_t ops[4] = {OFCCL__BOOT_MIN, OFCCL__BOOT_MAX, OFCCL__BOOT_MAX,
                                   OFCCL__BOOT_MAX};
    uint64_t in[4] = {mine != 0 ? (uint64_t)comm->rank : UINT64_MAX, *id,
                      comm->rank == 0 ? released : 0, *need_all},
             out[4];
    ofccl__err_t e;
    int rc = x->allreduce(x->arg, in, out, 4, ops, &e);

    if (rc && mine == 0)
        mine = ofccl__comm_fail(comm, rc, "comm setup: status exchange: %s", e.msg);
    if (mine == 0 && out[0] != UINT64_MAX)
        mine = ofccl__comm_fail(comm, OFCCL_ERR_REMOTE_ERROR,
                                "comm setup: rank %llu failed to create its side of the "
                                "communicator (its own error says why)",
                                (unsigned long long)out[0]);
    if (mine == 0) {
        *id = (uint32_t)out[1];
        *need_all = out[3] != 0;
        note_clock_offset(comm, released, out[2]);
    }
    return mine;
}
