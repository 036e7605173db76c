/*
 * GPU memory across hosts, hierarchically: the GPU peer class within each
 * host (its ranks as a communicator of their own, on the composite transport
 * that maps same-host peers' flag regions: caps.peer_map_some), staging
 * through host memory (gstage.c) only between hosts. Used where the ranks
 * span hosts with as many on each (node_width > 1) and OFCCL_GPU_HIER=1 (off
 * by default: its steps cost more than they save below tens of MiB on
 * simulated hosts, docs/gpu.md). Two communicators of the caller's are made
 * at the
 * first such collective (collective: every rank gets there together, the
 * path being agreed): `local`, the ranks of this host ordered by their index
 * i on it, and `rail`, the ranks with this rank's index i ordered by host h.
 * Rank (h, i) is node_rank[h * W + i] of the caller's communicator.
 *
 *   all-gather:     the rail's all-gather of this rank's block (staged) into
 *                   H blocks, then for each host h the local all-gather of
 *                   block h: host h's W blocks, copied to their ranks' places;
 *   reduce-scatter: the blocks of each local index gathered together (W x H
 *                   device copies), the local reduce-scatter of H blocks (the
 *                   host's partial sums), then the rail's reduce-scatter of
 *                   them (staged); avg divides on both (by W, then by H);
 *   broadcast:      the root's rail broadcasts (staged), then each host's
 *                   local broadcast from the rank with the root's index.
 *
 * The call returns once everything is done (as staging does): the request
 * it hands out is complete. The sub-communicators run on the caller's
 * stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "util.h"

static int sub_failed(ofccl__gcomm_t *gc, ofccl_comm_t *sub, int rc, const char *what)
{
    return ofccl__comm_fail(gc->comm, rc, "%s across hosts (%s): %s", what,
                            sub == gc->hier_local ? "within this host" : "between hosts",
                            sub != NULL ? ofccl_comm_last_error(sub) : "");
}

/* Post on a sub-communicator and wait for it on the host. */
static int done(ofccl__gcomm_t *gc, ofccl_comm_t *sub, int rc, ofccl_req_t *r, const char *what)
{
    if (rc == 0)
        rc = ofccl_wait(r);
    if (r != NULL && rc != OFCCL_ERR_AGAIN)
        ofccl_req_free(r);
    return rc ? sub_failed(gc, sub, rc, what) : 0;
}

static int setup(ofccl__gcomm_t *gc)
{
    ofccl_comm_t *comm = gc->comm;
    int h = comm->node_of[comm->rank], i = comm->node_idx[comm->rank], rc;

    if (gc->hier_local != NULL)
        return 0;
    if ((rc = ofccl_comm_split(comm, h, i, &gc->hier_local)) != 0 ||
        (rc = ofccl_comm_split(comm, i, h, &gc->hier_rail)) != 0)
        return rc;
    OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL,
                "rank %d: communicator %u: GPU memory across %d hosts of %d ranks: the GPU peer "
                "class within each host, staged between them",
                comm->rank, comm->id, comm->nnodes, comm->node_width);
    return 0;
}

/* A device buffer of the communicator's for the intermediate blocks. */
static int tmp(ofccl__gcomm_t *gc, size_t bytes, char **out)
{
    ofccl__err_t e = {0};
    void *p = NULL;

    if (gc->hier_tmp_len < bytes) {
        if (gc->hier_tmp != NULL)
            ofccl__gpu_mem_free(gc->g, gc->dev, gc->hier_tmp);
        gc->hier_tmp = NULL;
        gc->hier_tmp_len = 0;
        if (ofccl__gpu_mem_alloc(gc->g, gc->dev, bytes, &p, &e) != 0)
            return ofccl__comm_fail(gc->comm, e.code, "GPU memory across hosts: %s", e.msg);
        gc->hier_tmp = p;
        gc->hier_tmp_len = bytes;
    }
    *out = gc->hier_tmp;
    return 0;
}

static int copy(ofccl__gcomm_t *gc, void *dst, const void *src, size_t len)
{
    ofccl__err_t e = {0};
    int rc = ofccl__gq_copy(gc, dst, src, len, &e);

    return rc ? ofccl__comm_fail(gc->comm, rc, "GPU memory across hosts: %s", e.msg) : 0;
}

static int all_gather(ofccl__gcomm_t *gc, const void *in, char *out, size_t count, size_t esize,
                      ofccl_dtype_t dt)
{
    ofccl_comm_t *comm = gc->comm;
    int H = comm->nnodes, W = comm->node_width, rc;
    size_t block = count * esize;
    char *t;
    ofccl_req_t *r = NULL;

    if ((rc = tmp(gc, block * (size_t)(H + W), &t)) != 0)
        return rc;
    rc = ofccl_allgather(gc->hier_rail, in, t, count, dt, &r);
    if ((rc = done(gc, gc->hier_rail, rc, r, "all-gather")) != 0)
        return rc;
    for (int h = 0; h < H; h++) {
        char *mine = t + (size_t)H * block;
        r = NULL;
        rc = ofccl_allgather(gc->hier_local, t + (size_t)h * block, mine, count, dt, &r);
        if ((rc = done(gc, gc->hier_local, rc, r, "all-gather")) != 0)
            return rc;
        for (int i = 0; i < W && rc == 0; i++)
            rc = copy(gc, out + (size_t)comm->node_rank[h * W + i] * block,
                      mine + (size_t)i * block, block);
        if (rc)
            return rc;
    }
    return 0;
}

static int reduce_scatter(ofccl__gcomm_t *gc, const char *in, void *out, size_t count, size_t esize,
                          ofccl_dtype_t dt, ofccl_redop_t op)
{
    ofccl_comm_t *comm = gc->comm;
    int H = comm->nnodes, W = comm->node_width, me = comm->node_idx[comm->rank], rc = 0;
    size_t block = count * esize;
    ofccl_redop_t local = op, rail = op;
    char *t;
    ofccl_req_t *r = NULL;

    if (op.kind == OFCCL_OP_PREMUL_SUM) /* the factor once, within the host */
        rail = (ofccl_redop_t){OFCCL_OP_SUM, 1};
    if ((rc = tmp(gc, block * (size_t)(H * W), &t)) != 0)
        return rc;
    /* Local index i's blocks (one per host) side by side: i's part of the input. */
    for (int i = 0; i < W && rc == 0; i++)
        for (int h = 0; h < H && rc == 0; h++)
            rc = copy(gc, t + ((size_t)i * H + (size_t)h) * block,
                      in + (size_t)comm->node_rank[h * W + i] * block, block);
    if (rc)
        return rc;
    rc = ofccl_reduce_scatter(gc->hier_local, t, t + (size_t)me * H * block, count * (size_t)H, dt,
                              local, &r);
    if ((rc = done(gc, gc->hier_local, rc, r, "reduce-scatter")) != 0)
        return rc;
    r = NULL;
    rc = ofccl_reduce_scatter(gc->hier_rail, t + (size_t)me * H * block, out, count, dt, rail, &r);
    return done(gc, gc->hier_rail, rc, r, "reduce-scatter");
}

static int broadcast(ofccl__gcomm_t *gc, void *buf, size_t count, ofccl_dtype_t dt, int root)
{
    ofccl_comm_t *comm = gc->comm;
    int ri = comm->node_idx[root], rh = comm->node_of[root], rc;
    ofccl_req_t *r = NULL;

    if (comm->node_idx[comm->rank] == ri) {
        rc = ofccl_broadcast(gc->hier_rail, buf, count, dt, rh, &r);
        if ((rc = done(gc, gc->hier_rail, rc, r, "broadcast")) != 0)
            return rc;
        r = NULL;
    }
    rc = ofccl_broadcast(gc->hier_local, buf, count, dt, ri, &r);
    return done(gc, gc->hier_local, rc, r, "broadcast");
}

int ofccl__ghier(ofccl__gcomm_t *gc, int coll, const void *sendbuf, void *recvbuf, size_t count,
                 ofccl_dtype_t dtype, ofccl_redop_t op, int root, ofccl_req_t **req)
{
    ofccl_comm_t *comm = gc->comm;
    size_t esize = ofccl_dtype_size(dtype);
    ofccl__req_t *r;
    int rc;

    if ((rc = setup(gc)) != 0)
        return rc;
    ofccl_comm_set_stream(gc->hier_local, gc->stream);
    ofccl_comm_set_stream(gc->hier_rail, gc->stream);
    gc->hier_local->timeout_ms = gc->hier_rail->timeout_ms = comm->timeout_ms;
    if ((rc = ofccl__coll_begin(comm, coll, &r)) != 0)
        return rc;
    if (coll == OFCCL__AG)
        rc = all_gather(gc, sendbuf, recvbuf, count, esize, dtype);
    else if (coll == OFCCL__RS)
        rc = reduce_scatter(gc, sendbuf, recvbuf, count, esize, dtype, op);
    else
        rc = broadcast(gc, recvbuf, count, dtype, root);
    if (rc == 0) {
        ofccl__err_t e = {0};
        rc = ofccl__gpu_stream_sync(gc->g, gc->dev, gc->stream, &e);
        if (rc)
            rc = ofccl__comm_fail(comm, rc, "GPU memory across hosts: %s", e.msg);
    }
    if (rc) {
        r->state = OFCCL__REQ_FREE;
        return rc;
    }
    ofccl__coll_done_now(r, 0);
    *req = r;
    return 0;
}

void ofccl__ghier_fini(ofccl__gcomm_t *gc)
{
    if (gc->hier_tmp != NULL)
        ofccl__gpu_mem_free(gc->g, gc->dev, gc->hier_tmp);
    if (gc->hier_local != NULL)
        ofccl_comm_destroy(gc->hier_local);
    if (gc->hier_rail != NULL)
        ofccl_comm_destroy(gc->hier_rail);
    gc->hier_tmp = NULL;
    gc->hier_local = gc->hier_rail = NULL;
}
