/*
 * Buckets of GPU tensors: an all-gather, a reduce-scatter or a broadcast of
 * many tensors as one collective of the GPU peer class. The bucket's flat
 * buffer (bucket.c's layout: every rank's region holds its shard of each
 * tensor in a slot of ceil(N_t / n) elements; a broadcast's one region holds
 * the whole tensors) is the communicator's scratch in the symmetric pool. On
 * the stream, before the collective, this rank's shards (all-gather), every
 * rank's piece of each full tensor (reduce-scatter) or the root's tensors
 * (broadcast) are copied into the flat buffer; after it, the result is copied
 * out into the tensors. No host memory and no host wait: the copies are
 * enqueued with the collective. Slot padding is left as it is: it is
 * gathered or reduced into padding, never copied out.
 */
#include <string.h>

#include "gcomm.h"
#include "util.h"

int ofccl__gbucket_pack(ofccl__req_t *r, char *out, ofccl__err_t *e)
{
    const ofccl__gcomm_t *gc = r->comm->gpu;
    int n = r->comm->size, me = r->comm->rank, rc = 0;
    char *at = out + (r->coll == OFCCL__AG ? (size_t)me * r->block : 0);

    for (int t = 0; rc == 0 && t < r->ntensors; t++) {
        const ofccl_tensor_t *x = &r->tensors[t].t;
        if (r->coll == OFCCL__BC) {
            rc = ofccl__gq_copy(gc, at, x->full, x->count * r->esize, e);
            at += x->count * r->esize;
        } else if (r->coll == OFCCL__RS) { /* piece q of the tensor into region q */
            size_t c = ofccl__bucket_chunk(x->count, n);
            for (int q = 0; rc == 0 && q < n; q++)
                rc = ofccl__gq_copy(gc, at + (size_t)q * r->block,
                                    (const char *)x->full + (size_t)q * c * r->esize,
                                    ofccl__bucket_shard(x->count, n, q) * r->esize, e);
            at += c * r->esize;
        } else {
            rc = ofccl__gq_copy(gc, at, x->shard, ofccl__bucket_shard(x->count, n, me) * r->esize,
                                e);
            at += ofccl__bucket_chunk(x->count, n) * r->esize;
        }
    }
    return rc;
}

int ofccl__gbucket_unpack(ofccl__req_t *r, const char *out, ofccl__err_t *e)
{
    const ofccl__gcomm_t *gc = r->comm->gpu;
    int n = r->comm->size, rc = 0;
    size_t off = 0;

    for (int t = 0; rc == 0 && t < r->ntensors; t++) {
        const ofccl_tensor_t *x = &r->tensors[t].t;
        size_t c = ofccl__bucket_chunk(x->count, n);
        if (r->coll == OFCCL__BC) {
            rc = ofccl__gq_copy(gc, x->full, out + off, x->count * r->esize, e);
            off += x->count * r->esize;
            continue;
        }
        if (r->coll == OFCCL__RS) { /* this rank's reduced piece into its shard */
            rc = ofccl__gq_copy(gc, x->shard, out + (size_t)r->comm->rank * r->block + off,
                                ofccl__bucket_shard(x->count, n, r->comm->rank) * r->esize, e);
            off += c * r->esize;
            continue;
        }
        for (int q = 0; rc == 0 && q < n; q++)
            rc = ofccl__gq_copy(gc, (char *)x->full + (size_t)q * c * r->esize,
                                out + (size_t)q * r->block + off,
                                ofccl__bucket_shard(x->count, n, q) * r->esize, e);
        off += c * r->esize;
    }
    return rc;
}

/* The flat buffer's region (bytes), as ofccl__bucket_setup sizes it, or 0
 * where the arguments are wrong (the setup then says how). */
static size_t region_bytes(const ofccl_comm_t *comm, int coll, const ofccl_tensor_t *tensors,
                           int ntensors, size_t esize)
{
    size_t align = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_ALIGN), total = 0;

    if (esize == 0 || ntensors < 0 || (ntensors > 0 && tensors == NULL))
        return 0;
    for (int t = 0; t < ntensors; t++) {
        size_t c = coll == OFCCL__BC ? tensors[t].count
                                     : ofccl__bucket_chunk(tensors[t].count, comm->size);
        if (tensors[t].count > SIZE_MAX / 4 / esize || total > SIZE_MAX / 4 / (size_t)comm->size)
            return 0;
        total += c * esize;
    }
    return (total + align - 1) / align * align;
}

/* A pointer of the bucket that this rank reads or writes: a non-empty full
 * tensor, or a non-empty shard (all-gather, reduce-scatter). An empty shard
 * may point past its tensor's end, which is no memory at all. */
static const void *used(const ofccl_comm_t *comm, int coll, const ofccl_tensor_t *x, int k)
{
    if (k == 0)
        return x->count > 0 ? x->full : NULL;
    return coll != OFCCL__BC && ofccl__bucket_shard(x->count, comm->size, comm->rank) > 0 ? x->shard
                                                                                          : NULL;
}

/* Every pointer this rank uses on this communicator's GPU. */
static int on_this_gpu(ofccl_comm_t *comm, const char *what, int coll, const ofccl__gcomm_t *gc,
                       const ofccl_tensor_t *tensors, int ntensors)
{
    for (int t = 0; t < ntensors; t++) {
        for (int k = 0; k < 2; k++) {
            const void *p = used(comm, coll, &tensors[t], k);
            int kind = p != NULL ? ofccl__mem_kind_of(p) : gc->dev;
            if (kind != gc->dev)
                return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                        "%s: tensor %d's %s is %s %d, this communicator's GPU is "
                                        "%d: a bucket is all on this rank's GPU or all in host "
                                        "memory",
                                        what, t, k ? "shard" : "full",
                                        kind < 0 ? "host memory, not on GPU" : "on GPU",
                                        kind < 0 ? gc->dev : kind, gc->dev);
        }
    }
    return 0;
}

int ofccl__gpu_admit_bucket(ofccl_comm_t *comm, const char *what, int coll,
                            const ofccl_tensor_t *tensors, int ntensors, ofccl_dtype_t dtype,
                            ofccl__gwhere_t *where)
{
    const void *gpu_ptr = NULL;
    size_t region;
    ofccl__gcomm_t *gc;
    int rc;

    if (ofccl__gpu_process(&comm->ctx->log, false) == NULL || tensors == NULL)
        return 0;
    /* Any GPU pointer makes it a GPU bucket (on_this_gpu then refuses one
     * that mixes host and GPU memory, naming the tensor). */
    for (int t = 0; t < ntensors && gpu_ptr == NULL; t++)
        for (int k = 0; k < 2 && gpu_ptr == NULL; k++) {
            const void *p = used(comm, coll, &tensors[t], k);
            gpu_ptr = p != NULL && ofccl__mem_kind_of(p) >= 0 ? p : NULL;
        }
    if (gpu_ptr == NULL)
        return 0;
    if ((rc = ofccl__gcomm_get(comm, &gc)) != 0 ||
        (rc = on_this_gpu(comm, what, coll, gc, tensors, ntensors)) != 0)
        return rc;
    /* Not the peer class: the host engine stages the bucket (bucket.c). */
    if (gc->path != OFCCL__GPATH_P2P || comm->size == 1 ||
        (coll == OFCCL__RS && comm->size > OFCCL__GPU_REDUCE_SRCS))
        return 0;
    /* The flat buffer is the scratch, which may grow (collective). */
    region = region_bytes(comm, coll, tensors, ntensors, ofccl_dtype_size(dtype));
    rc = ofccl__gpu_locate(
        gc, NULL, OFCCL__MAX(coll != OFCCL__BC ? region * (size_t)comm->size : region, (size_t)1),
        where);
    where->stage = NULL; /* unpacked on the stream, not copied out */
    return rc != 0 ? rc : 1;
}
