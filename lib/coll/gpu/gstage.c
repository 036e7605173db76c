/*
 * GPU memory where the GPU peer class does not fit (a rank on another host,
 * GPUs without P2P, a transport that cannot map peers' memory), and the
 * collectives it does not run yet (reduce-scatter): the GPU buffers are
 * staged through host memory, on the host. The caller's buffers are copied
 * to a host bounce buffer of the communicator, the host collective runs on
 * it, and its result is copied back: the request returned is complete. The
 * first such call on a communicator logs why (gapi.c).
 */
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "util.h"

static int bounce(ofccl__gcomm_t *gc, size_t bytes, char **out)
{
    if (gc->host_stage_len < bytes) {
        void *p = realloc(gc->host_stage, bytes);
        if (p == NULL)
            return ofccl__comm_fail(gc->comm, OFCCL_ERR_NO_MEMORY,
                                    "staging GPU memory: no %zu bytes of host memory", bytes);
        gc->host_stage = p;
        gc->host_stage_len = bytes;
    }
    *out = gc->host_stage;
    return 0;
}

int ofccl__gpu_stage(ofccl__gcomm_t *gc, int coll, const void *sendbuf, void *recvbuf, size_t count,
                     ofccl_dtype_t dtype, ofccl_redop_t op, int root, size_t block,
                     ofccl_req_t **req)
{
    ofccl_comm_t *comm = gc->comm;
    size_t n = (size_t)comm->size;
    size_t in = coll == OFCCL__RS ? block * n : block;
    size_t out = coll == OFCCL__AG ? block * n : block;
    ofccl__err_t e = {0};
    ofccl_req_t *r = NULL;
    char *h = NULL;
    int rc;

    if ((rc = bounce(gc, in + out + 1, &h)) != 0)
        return rc;
    if (gc->g == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED, "GPU memory: %s", gc->why);
    /* The host may read the buffers only once the caller's stream is there. */
    bool copy_in = in > 0 && (coll != OFCCL__BC || comm->rank == root);
    if (ofccl__gpu_stream_sync(gc->g, gc->dev, gc->stream, &e) != 0 ||
        (copy_in && ofccl__gpu_copy_sync(gc->g, gc->dev, coll == OFCCL__BC ? h + in : h,
                                         coll == OFCCL__BC ? recvbuf : sendbuf, in, &e) != 0))
        return ofccl__comm_fail(comm, e.code, "staging GPU memory to the host: %s", e.msg);
    if (coll == OFCCL__AG)
        rc = ofccl_allgather(comm, h, h + in, count, dtype, &r);
    else if (coll == OFCCL__RS)
        rc = ofccl_reduce_scatter(comm, h, h + in, count, dtype, op, &r);
    else
        rc = ofccl_broadcast(comm, h + in, count, dtype, root, &r);
    if (rc)
        return rc;
    if ((rc = ofccl_wait(r)) != 0) {
        *req = r; /* the caller learns it from the request, as any failed one */
        return 0;
    }
    comm->ctx->stats.staged_bytes += in + out;
    if (out > 0 && ofccl__gpu_copy_sync(gc->g, gc->dev, recvbuf, h + in, out, &e) != 0) {
        ofccl_req_free(r);
        return ofccl__comm_fail(comm, e.code, "staging the result back to the GPU: %s", e.msg);
    }
    *req = r;
    return 0;
}
