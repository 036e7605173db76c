/*
 * ofccl_push_bucket: post bucket k of a push on this rank, as a sender (from
 * its shards), a receiver (into its buffer), or both. Every rank of the plan's
 * communicator posts the plan's buckets in the same order.
 */
#include <stdio.h>
#include <string.h>

#include "pool.h"
#include "push.h"
#include "util.h"

/* Staged receive: the bucket is copied to the caller's buffer at the end. */
static void copy_out(ofccl__req_t *r)
{
    if (r->block > 0) {
        ofccl__exec_copy(r, r->copy_out, r->dst.ptr, r->block);
        r->comm->ctx->stats.staged_bytes += r->block;
    }
}

/* The receiver's destination: the caller's buffer (registered, else staged)
 * or the plan's own buffer k % 2. */
static int resolve_recv(ofccl__req_t *r, ofccl_push_plan_t *pl, int k, void *buf, size_t len)
{
    ofccl_comm_t *comm = r->comm;
    size_t need = pl->bucket_bytes_mine[k];
    const ofccl__mr_t *mr;
    int rc;

    if (buf == NULL) {
        if (pl->buf[k % 2] == NULL &&
            (rc = ofccl_buffer_alloc(comm, pl->max_recv_bytes ? pl->max_recv_bytes : 1,
                                     &pl->buf[k % 2])) != 0)
            return rc;
        buf = pl->buf[k % 2];
        len = pl->max_recv_bytes;
    }
    if (len < need)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_push_bucket: bucket %d needs a %zu-byte receive buffer, "
                                "%zu bytes given (ofccl_push_plan_info gives the largest)",
                                k, need, len);
    r->block = need;
    mr = ofccl__mem_find(comm, buf, need);
    if (mr != NULL) {
        r->dst = ofccl__mem_ref(buf, mr);
        return 0;
    }
    rc = ofccl__stage_acquire(comm, OFCCL__PUSH, need ? need : 1, &r->staging_idx, &r->dst);
    if (rc == 0) {
        r->copy_out = buf;
        r->finish = copy_out;
    }
    return rc;
}

/* A provider that reads only registered sources gets the shards packed. */
static int resolve_send(ofccl__req_t *r, ofccl_push_plan_t *pl, int k, void *const *shards)
{
    ofccl_comm_t *comm = r->comm;
    size_t *soff = pl->soff + (size_t)r->slot * (size_t)pl->ntensors, total = 0;
    int rc;

    for (int t = pl->first[k]; t < pl->first[k + 1]; t++) {
        size_t s0, bytes = ofccl__push_shard(pl, t, pl->me_send, &s0) * pl->esize[t];
        if (ofccl__push_used(pl, r->slot, t, 0, bytes) > 0 && shards[t] == NULL)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "ofccl_push_bucket: shards[%d] is NULL but this sender owns "
                                    "%zu bytes of tensor %d",
                                    t, bytes, t);
        soff[t] = total;
        total += (bytes + 63) & ~(size_t)63;
    }
    if (!ofccl__comm_caps(comm)->mr_local)
        return 0;
    rc = ofccl__stage_acquire(comm, OFCCL__PUSH, total ? total : 1, &r->staging_idx, &r->src);
    for (int t = pl->first[k]; rc == 0 && t < pl->first[k + 1]; t++) {
        size_t s0, bytes = ofccl__push_shard(pl, t, pl->me_send, &s0) * pl->esize[t];
        bytes = ofccl__push_used(pl, r->slot, t, 0, bytes);
        if (bytes)
            rc = ofccl__exec_copy(r, (char *)r->src.ptr + soff[t], shards[t], bytes);
        comm->ctx->stats.staged_bytes += bytes;
    }
    return rc;
}

/* Where this sender's shards of bucket k live (the first one given). */
static ofccl__mem_kind_t shards_kind(const ofccl_push_plan_t *pl, int k, void *const *shards)
{
    for (int t = pl->first[k]; shards != NULL && t < pl->first[k + 1]; t++)
        if (shards[t] != NULL)
            return ofccl__mem_kind_of(shards[t]);
    return OFCCL__MEM_HOST;
}

static int push_bucket_locked(ofccl_push_plan_t *pl, int k, void *const *shards, const size_t *used,
                              void *buf, size_t len, ofccl_req_t **req)
{
    ofccl_comm_t *comm = pl->comm;
    ofccl__req_t *r;
    int rc;

    if (req == NULL || k < 0 || k >= pl->nbuckets)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_push_bucket: %s (the plan has %d buckets)",
                                req == NULL ? "req is NULL" : "no such bucket", pl->nbuckets);
    if (pl->me_send >= 0 && shards == NULL && pl->first[k + 1] > pl->first[k])
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_push_bucket: this rank is a sender: shards is NULL");
    if (pl->gpu && !pl->gpu_engine) {
        if ((rc = ofccl__gpu_push_bucket(pl, k, shards, used, buf, &r)) == 0)
            *req = r;
        return rc;
    }
    if (pl->gpu_engine && buf != NULL && buf != pl->buf[k % 2])
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_push_bucket: a GPU plan receives into its own buffers: "
                                "pass buf NULL and read bucket %d from ofccl_push_buffer",
                                k);
    if ((!pl->gpu && shards != NULL &&
         (rc = ofccl__gpu_refuse(comm, "ofccl_push_bucket", "shards",
                                 (const void *const *)shards + pl->first[k],
                                 pl->first[k + 1] - pl->first[k], sizeof(void *))) != 0) ||
        (!pl->gpu && (rc = ofccl__gpu_refuse(comm, "ofccl_push_bucket", "buf",
                                             (const void *const *)&buf, 1, sizeof(void *))) != 0) ||
        (rc = ofccl__coll_begin(comm, OFCCL__PUSH, &r)) != 0)
        return rc;
    if (pl->gpu_engine) { /* its own buffer k % 2, checked above */
        buf = pl->buf[k % 2];
        len = pl->max_recv_bytes;
    }
    r->dtype = OFCCL_U8;
    r->esize = 1;
    r->count = (size_t)k; /* ranks posting different buckets: a count mismatch */
    r->block = 0;
    r->tag = pl->tag;
    r->algo_state = pl;
    r->algo = &ofccl__push_algo;
    r->op = (ofccl_redop_t){OFCCL_OP_SUM, 1};
    pl->bucket[r->slot] = k;
    pl->shards[r->slot] = shards;
    ofccl__push_set_used(pl, r->slot, k, used);
    rc = ofccl__exec_choose(
        r, buf != NULL && pl->me_recv >= 0 ? ofccl__mem_kind_of(buf) : OFCCL__MEM_HOST,
        pl->me_send >= 0 ? shards_kind(pl, k, shards) : OFCCL__MEM_HOST);
    if (rc == 0 && pl->me_recv >= 0)
        rc = resolve_recv(r, pl, k, buf, len);
    if (rc == 0 && pl->me_send >= 0)
        rc = resolve_send(r, pl, k, shards);
    if (rc == 0)
        rc = ofccl__coll_start(r);
    if (rc) {
        if (r->staging_idx >= 0)
            ofccl__stage_release(comm, OFCCL__PUSH, r->staging_idx);
        r->state = OFCCL__REQ_FREE;
        return rc;
    }
    *req = r;
    return 0;
}

int ofccl_push_bucket(ofccl_push_plan_t *plan, int bucket, void *const *shards, void *buf,
                      size_t len, ofccl_req_t **req)
{
    if (plan == NULL)
        return OFCCL_ERR_INVALID_ARG;
    OFCCL__CHECK_HANDLE(plan->comm);
    OFCCL__LOCKED(plan->comm->ctx, push_bucket_locked(plan, bucket, shards, NULL, buf, len, req));
}

int ofccl_push_bucket_used(ofccl_push_plan_t *plan, int bucket, void *const *shards,
                           const size_t *used, void *buf, size_t len, ofccl_req_t **req)
{
    if (plan == NULL)
        return OFCCL_ERR_INVALID_ARG;
    OFCCL__CHECK_HANDLE(plan->comm);
    OFCCL__LOCKED(plan->comm->ctx, push_bucket_locked(plan, bucket, shards, used, buf, len, req));
}

int ofccl_push_buffer(const ofccl_push_plan_t *plan, int bucket, void **buf)
{
    if (plan == NULL || buf == NULL || bucket < 0 || bucket >= plan->nbuckets ||
        plan->me_recv < 0 || plan->buf[bucket % 2] == NULL)
        return OFCCL_ERR_INVALID_ARG;
    *buf = plan->buf[bucket % 2];
    return 0;
}
