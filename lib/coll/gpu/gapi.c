/*
 * GPU memory in the public API: the symmetric pool (ofccl_gpu_buffer_alloc),
 * the caller's own memory registered (ofccl_gpu_register), and the admission
 * of a collective whose buffers the driver says are GPU memory, as the
 * posting step asks it (lib/coll/post.c): the GPU peer class where it fits
 * (all-gather, reduce-scatter, broadcast), else the host engine, which moves
 * it through the transport as GPU memory where every rank's transport takes
 * it (FI_HMEM, ghmem.c's agreement: all-gather, broadcast) and otherwise
 * stages it through host memory inside the request (ofccl__resolve_device).
 */
#include <stdio.h>
#include <string.h>

#include "gcomm.h"
#include "pool.h"
#include "util.h"

#define NOTE_STAGED 7 /* ofccl__comm_note_once bit: staging said once */

int ofccl__gpu_admit(ofccl_comm_t *comm, const char *what, int coll, const void *sendbuf,
                     void *recvbuf, const int kinds[2], size_t block, ofccl__gwhere_t *where)
{
    int ks = kinds[0], kr = kinds[1];
    ofccl__gcomm_t *gc;
    int rc;

    if (ks != kr && sendbuf != NULL && recvbuf != NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: sendbuf is %s%d, recvbuf %s%d: both must be host memory or "
                                "both memory of this rank's GPU",
                                what, ks < 0 ? "host memory" : "on GPU ", ks < 0 ? 0 : ks,
                                kr < 0 ? "host memory" : "on GPU ", kr < 0 ? 0 : kr);
    if ((rc = ofccl__gcomm_get(comm, &gc)) != 0)
        return rc;
    if (kr != gc->dev && ks != gc->dev)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: the buffers are on GPU %d, this communicator's GPU is %d (the "
                                "current device at its first GPU call)",
                                what, kr >= 0 ? kr : ks, gc->dev);
    /* Not the peer class: the host engine, on the GPU memory itself where
     * the transport takes it (FI_HMEM, comm->dev_reg), else staged through
     * host memory inside the request; stream-ordered, returning at once. */
    if (gc->path != OFCCL__GPATH_P2P || comm->size == 1 ||
        (coll == OFCCL__RS && comm->size > OFCCL__GPU_REDUCE_SRCS)) {
        if (gc->path != OFCCL__GPATH_P2P && ofccl__comm_note_once(comm, NOTE_STAGED))
            OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL, "rank %d: communicator %u: %s",
                        comm->rank, comm->id, gc->why);
        return 0;
    }
    /* Where the peers reach this rank's memory: the output it writes into
     * (all-gather, broadcast), the input they read (reduce-scatter). */
    rc = ofccl__gpu_locate(gc, coll == OFCCL__RS ? (void *)sendbuf : recvbuf,
                           coll != OFCCL__BC ? block * (size_t)comm->size : block, where);
    return rc != 0 ? rc : 1;
}

int ofccl__gpu_admit_bucket(ofccl_comm_t *comm, const char *what, int coll, ofccl__mem_kind_t kind,
                            size_t block, ofccl__gwhere_t *where)
{
    ofccl__gcomm_t *gc;
    int rc;

    if ((rc = ofccl__gcomm_get(comm, &gc)) != 0)
        return rc;
    if (kind != gc->dev)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: the tensors are on GPU %d, this communicator's GPU is %d (the "
                                "current device at its first GPU call)",
                                what, kind, gc->dev);
    /* Not the peer class: the host engine stages the bucket (bucket.c). */
    if (gc->path != OFCCL__GPATH_P2P || comm->size == 1 ||
        (coll == OFCCL__RS && comm->size > OFCCL__GPU_REDUCE_SRCS))
        return 0;
    /* The flat buffer is the scratch, which may grow (collective). */
    rc = ofccl__gpu_locate(
        gc, NULL, OFCCL__MAX(coll != OFCCL__BC ? block * (size_t)comm->size : block, (size_t)1),
        where);
    where->stage = NULL; /* unpacked on the stream, not copied out */
    return rc != 0 ? rc : 1;
}

void ofccl__gpu_place(ofccl__req_t *r, const ofccl__gwhere_t *where)
{
    ofccl__gcomm_t *gc = r->comm->gpu;

    if (r->bucket) {
        /* all-gather: this rank's region into the flat buffer; reduce-scatter:
         * the flat buffer into this rank's region (in place); broadcast: the
         * flat buffer. Packed and unpacked on the stream, not by the host. */
        char *flat = where->seg->peer[r->comm->rank] + where->off;
        char *mine = flat + (r->coll != OFCCL__BC ? (size_t)r->comm->rank * r->block : 0);
        r->sendbuf = r->coll == OFCCL__RS ? flat : mine;
        r->recvbuf = r->coll == OFCCL__AG ? flat : mine;
        r->finish = NULL;
    }
    ofccl__gpu_prepare(r, gc, where);
    gc->rq[r->slot].bucket = r->bucket != 0;
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
    if (gc->path == OFCCL__GPATH_P2P)
        return ofccl__greg_add(gc, ptr, bytes);
    if (!comm->dev_reg)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "ofccl_gpu_register: GPU memory of this communicator is staged "
                                "through host memory, not mapped by its peers: %s",
                                gc->why);
    /* The host engine moves GPU memory through the transport: registered
     * with it as any memory (the context's cache), for this rank alone. */
    if (ptr == NULL || bytes == 0 || ofccl__mem_kind_of(ptr) != gc->dev)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_gpu_register: %zu bytes at %p: not memory of this rank's "
                                "GPU %d",
                                bytes, ptr, gc->dev);
    return ofccl__pool_register(comm, ptr, bytes);
}

static int deregister_locked(ofccl_comm_t *comm, void *ptr)
{
    ofccl__gcomm_t *gc = ofccl__gcomm_of(comm);

    if (gc == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_gpu_deregister: communicator %u has no GPU memory "
                                "registered",
                                comm->id);
    return gc->path == OFCCL__GPATH_P2P ? ofccl__greg_drop(gc, ptr)
                                        : ofccl__pool_unregister(comm, ptr);
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
