/*
 * GPU memory in the public API: the symmetric pool (ofccl_gpu_buffer_alloc),
 * the caller's own memory registered (ofccl_gpu_register), and the routing of a collective whose
 * buffers the driver says are GPU memory: to the GPU peer class where it fits (all-gather,
 * reduce-scatter, broadcast), across hosts through the fabric as GPU memory
 * where every rank's transport takes it (ghmem.c: all-gather, broadcast),
 * else to the host engine, which stages it through host memory inside the
 * request (lib/coll/allgather.c and its twins).
 */
#include <stdio.h>
#include <string.h>

#include "gcomm.h"
#include "util.h"

#define NOTE_STAGED 7 /* ofccl__comm_note_once bit: staging said once */

int ofccl__gpu_route(ofccl_comm_t *comm, const char *what, int coll, const void *sendbuf,
                     void *recvbuf, size_t count, ofccl_dtype_t dtype, ofccl_redop_t op, int root,
                     size_t block, ofccl_req_t **req, int *rc)
{
    int ks = ofccl__mem_kind_of(sendbuf);
    int kr = ofccl__mem_kind_of(recvbuf);
    ofccl__gcomm_t *gc;
    ofccl__gwhere_t where;
    ofccl__req_t *r;
    size_t out;

    if (ks < 0 && kr < 0)
        return 0;
    if (ks != kr && sendbuf != NULL && recvbuf != NULL) {
        *rc = ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                               "%s: sendbuf is %s%d, recvbuf %s%d: both must be host memory or "
                               "both memory of this rank's GPU",
                               what, ks < 0 ? "host memory" : "on GPU ", ks < 0 ? 0 : ks,
                               kr < 0 ? "host memory" : "on GPU ", kr < 0 ? 0 : kr);
        return 1;
    }
    if ((*rc = ofccl__gcomm_get(comm, &gc)) != 0)
        return 1;
    if (kr != gc->dev && ks != gc->dev) {
        *rc = ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                               "%s: the buffers are on GPU %d, this communicator's GPU is %d (the "
                               "current device at its first GPU call)",
                               what, kr >= 0 ? kr : ks, gc->dev);
        return 1;
    }
    if (coll == OFCCL__RS && recvbuf != (const char *)sendbuf + (size_t)comm->rank * block &&
        ofccl__overlaps(sendbuf, block * (size_t)comm->size, recvbuf, block)) {
        *rc = ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                               "%s: recvbuf overlaps sendbuf but is not this rank's block (in "
                               "place means recvbuf == sendbuf + rank * recvcount)",
                               what);
        return 1;
    }
    if (gc->hmem && coll != OFCCL__RS) {
        if (ofccl__comm_note_once(comm, NOTE_STAGED))
            OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL, "rank %d: communicator %u: %s",
                        comm->rank, comm->id, gc->why);
        *rc = ofccl__ghmem(gc, coll, sendbuf, recvbuf, count, dtype, root, block, req);
        return 1;
    }
    /* Not the peer class: the host engine, staging the GPU memory through
     * host memory inside the request (stream-ordered, returning at once). */
    if (gc->path != OFCCL__GPATH_P2P || comm->size == 1 ||
        (coll == OFCCL__RS && comm->size > OFCCL__GPU_REDUCE_SRCS)) {
        if (gc->path != OFCCL__GPATH_P2P && ofccl__comm_note_once(comm, NOTE_STAGED))
            OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL, "rank %d: communicator %u: %s",
                        comm->rank, comm->id, gc->why);
        return 0;
    }
    /* Where the peers reach this rank's memory: the output it writes into
     * (all-gather, broadcast), the input they read (reduce-scatter). */
    out = coll != OFCCL__BC ? block * (size_t)comm->size : block;
    if ((*rc = ofccl__gpu_locate(gc, coll == OFCCL__RS ? (void *)sendbuf : recvbuf, out, &where)) !=
            0 ||
        (*rc = ofccl__coll_begin(comm, coll, &r)) != 0)
        return 1;
    r->sendbuf = coll == OFCCL__BC ? recvbuf : sendbuf;
    r->recvbuf = recvbuf;
    r->count = count;
    r->dtype = dtype;
    r->esize = ofccl_dtype_size(dtype);
    r->block = block;
    r->op = op;
    r->root = root;
    r->algo = coll == OFCCL__AG   ? &ofccl__gpu_ag
              : coll == OFCCL__RS ? &ofccl__gpu_rs
                                  : &ofccl__gpu_bc;
    ofccl__gpu_prepare(r, gc, &where);
    *rc = ofccl__coll_start(r);
    if (*rc) {
        r->state = OFCCL__REQ_FREE;
        return 1;
    }
    *req = r;
    return 1;
}

int ofccl__gpu_refuse(ofccl_comm_t *comm, const char *what, const char *role,
                      const void *const *ptrs, int n, size_t stride)
{
    const char *base = (const char *)ptrs;

    if (ofccl__gpu_process(&comm->ctx->log, false) == NULL)
        return 0; /* CUDA not in this process: no pointer is GPU memory */
    for (int i = 0; i < n; i++) {
        const void *p = *(const void *const *)(base + (size_t)i * stride);
        int k = ofccl__mem_kind_of(p);
        if (k >= 0)
            return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                    "%s: %s %d is memory of GPU %d: this call takes host memory "
                                    "only (GPU memory: all-gather, reduce-scatter and broadcast, "
                                    "flat or bucketed; the weight push through a plan made with "
                                    "gpu = 1)",
                                    what, role, i, k);
    }
    return 0;
}

static int buffer_alloc_locked(ofccl_comm_t *comm, size_t bytes, void **ptr)
{
    ofccl__gcomm_t *gc;
    int rc;

    if (ptr == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "ofccl_gpu_buffer_alloc: ptr is NULL");
    if ((rc = ofccl__comm_check(comm, "ofccl_gpu_buffer_alloc")) != 0 ||
        (rc = ofccl__gcomm_get(comm, &gc)) != 0)
        return rc;
    if (gc->g == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED, "ofccl_gpu_buffer_alloc: %s",
                                gc->why);
    return ofccl__gpool_alloc(gc, bytes, ptr);
}

static int buffer_free_locked(ofccl_comm_t *comm, void *ptr)
{
    ofccl__gcomm_t *gc = ofccl__gcomm_of(comm);

    if (gc == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_gpu_buffer_free: communicator %u has no GPU pool", comm->id);
    return ofccl__gpool_free(gc, ptr);
}

static int register_locked(ofccl_comm_t *comm, void *ptr, size_t bytes)
{
    ofccl__gcomm_t *gc;
    int rc;

    if ((rc = ofccl__comm_check(comm, "ofccl_gpu_register")) != 0 ||
        (rc = ofccl__gcomm_get(comm, &gc)) != 0)
        return rc;
    if (gc->path != OFCCL__GPATH_P2P)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "ofccl_gpu_register: GPU memory of this communicator is staged "
                                "through host memory, not mapped by its peers: %s",
                                gc->why);
    return ofccl__greg_add(gc, ptr, bytes);
}

static int deregister_locked(ofccl_comm_t *comm, void *ptr)
{
    ofccl__gcomm_t *gc = ofccl__gcomm_of(comm);

    if (gc == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_gpu_deregister: communicator %u has no GPU memory "
                                "registered",
                                comm->id);
    return ofccl__greg_drop(gc, ptr);
}

/* Public entry points: the same calls under the context lock (progress.c). */
int ofccl_gpu_buffer_alloc(ofccl_comm_t *comm, size_t bytes, void **ptr)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, buffer_alloc_locked(comm, bytes, ptr));
}

int ofccl_gpu_buffer_free(ofccl_comm_t *comm, void *ptr)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, buffer_free_locked(comm, ptr));
}

int ofccl_gpu_register(ofccl_comm_t *comm, void *ptr, size_t bytes)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, register_locked(comm, ptr, bytes));
}

int ofccl_gpu_deregister(ofccl_comm_t *comm, void *ptr)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, deregister_locked(comm, ptr));
}
