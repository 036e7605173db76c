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
