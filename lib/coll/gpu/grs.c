/*
 * Reduce-scatter on GPU memory, stream-ordered: each rank reduces its own
 * block by reading it out of every peer's input, mapped here (the input is
 * a pool buffer or registered memory at the same offset on every rank, else
 * it is copied into the scratch buffer first). As enqueued on the caller's
 * stream:
 *
 *   wait for this communicator's previous GPU collective (its end event);
 *   copy the input into the scratch buffer (input not pool memory);
 *   READY: tell each peer this rank's input is readable for collective v;
 *   wait until READY[peer] >= v here for every peer;
 *   the reduction kernel: block `me` of this rank's input first, then the
 *     peers' blocks `me` in rank order, into the output (any memory of this
 *     rank's GPU, in place included);
 *   DONE: tell each peer this rank is done reading its input;
 *   wait until DONE[peer] >= v here for every peer (then the caller may
 *     write its input again); the end event.
 *
 * The order is that of the CPU's direct reduce-scatter, and every operation
 * is rounded as there, so the result has the same bits
 * (docs/reductions.md). A reduction needs SMs: with OFCCL_GPU_SMS=0 (copies
 * by the copy engines) the kernel takes 8 of them. Failures,
 * mismatches and the host's part are those of every GPU collective
 * (gcoll.c).
 */
#include <string.h>

#include "gcomm.h"
#include "util.h"

int ofccl__grs_start(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = r->comm->gpu;
    struct ofccl__grq *q = &gc->rq[r->slot];
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, n = comm->size, np = n - 1, k = 1, rc;
    size_t mine = (size_t)me * r->block;
    char *in = q->peer[me] + q->off;
    const void *srcs[OFCCL__GPU_REDUCE_SRCS];
    uint64_t v = ofccl__gq_v(r);
    ofccl__err_t e = {0};

    q->ce = false; /* the kernel's READY waits are on the caller's stream */
    rc = ofccl__gq_begin(r, &e);
    if (rc == 0 && q->stage != NULL && r->block)
        rc = ofccl__gpu_copy(gc->g, gc->dev, gc->comm->stream, in, q->stage, r->block * (size_t)n,
                             &e);
    q->stage = NULL; /* the output is the caller's own: nothing to copy out */
    if (rc == 0)
        rc = ofccl__gq_say_ready(r, gc->peers, np, &e);
    for (int i = 0; rc == 0 && i < np; i++)
        rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                  ofccl__gq_flag(gc, me, ofccl__gf_ready(gc->peers[i])), v, &e);
    srcs[0] = in + mine;
    for (int p = 0; p < n; p++)
        if (p != me)
            srcs[k++] = q->peer[p] + q->off + mine;
    if (rc == 0)
        rc = ofccl__gpu_reduce_kernel(gc->g, gc->dev, gc->comm->stream, r->recvbuf, srcs, n,
                                      r->count, (int)r->dtype, (int)r->op.kind, r->op.scalar,
                                      r->op.kind == OFCCL_OP_AVG ? n : 0, ofccl__gq_reduce_sms(gc),
                                      ofccl__gq_flag(gc, me, OFCCL__GF_ABORT), &e);
    for (int i = 0; rc == 0 && i < np; i++)
        rc = ofccl__gpu_write_flag(gc->g, gc->dev, gc->comm->stream,
                                   ofccl__gq_flag(gc, gc->peers[i], ofccl__gf_done(n, me)), v, &e);
    if (rc == 0)
        rc = ofccl__gq_wait_done(r, gc->peers, np, &e);
    if (rc == 0)
        rc = ofccl__gq_end(r, 0, &e);
    if (rc)
        return ofccl__coll_fail(r, rc, "enqueuing it on the GPU stream: %s", e.msg);
    return 0;
}

OFCCL__GPU_ALGO(ofccl__gpu_rs, OFCCL__RS, ofccl__grs_start);
