/* ofccl_allgather / ofccl_reduce_scatter: validate, resolve memory (registered,
 * pool or staged), pick the algorithm and start the request. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "pool.h"
#include "util.h"

static const char *const dtype_names[] = {"f32", "f64", "bf16", "f16", "u8"};

static size_t round8(size_t v)
{
    return (v + 7) & ~(size_t)7;
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    const char *x = a, *y = b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* Checks shared by both collectives; on success *block is the bytes per rank. */
static int check_args(ofccl_comm_t *comm, const char *what, const void *sendbuf, void *recvbuf,
                      size_t count, ofccl_dtype_t dtype, ofccl_req_t **req, size_t *block)
{
    size_t esize = ofccl_dtype_size(dtype);

    if (req == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: req is NULL", what);
    if (esize == 0)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: unsupported dtype %d (supported: f32, f64, bf16, f16, u8)",
                                what, (int)dtype);
    if (count > SIZE_MAX / esize / (size_t)comm->size)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: count %zu of %s overflows the address space with %d ranks",
                                what, count, dtype_names[dtype], comm->size);
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: %s is NULL", what,
                                sendbuf == NULL ? "sendbuf" : "recvbuf");
    *block = count * esize;
    return 0;
}

/* A buffer inside a pool buffer or registered range must fit in it: that much
 * ofccl can check (plain malloc'd memory it cannot). */
static int check_room(ofccl_comm_t *comm, const char *what, const char *name, const void *buf,
                      size_t need)
{
    size_t room = need ? ofccl__mem_known_room(comm, buf) : SIZE_MAX;

    if (room < need)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: %s is too small: %zu bytes needed, the pool buffer or "
                                "registered range holding it has %zu from there",
                                what, name, need, room);
    return 0;
}

int ofccl__check_redop(ofccl_comm_t *comm, const char *what, ofccl_dtype_t dtype, ofccl_redop_t op)
{
    if (dtype == OFCCL_U8)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "%s: u8 is raw bytes, which have no sum: reduce a typed dtype "
                                "(f32, f64, bf16, f16)",
                                what);
    if ((unsigned)op.kind >= OFCCL_OP_COUNT)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: unsupported op %d (supported: sum, avg, premul-sum)", what,
                                (int)op.kind);
    if (op.kind == OFCCL_OP_PREMUL_SUM && !isfinite(op.scalar))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: premul scalar must be finite",
                                what);
    return 0;
}

/* One rank: the collective is a local copy or a local reduction. */
static int local_only(ofccl__req_t *r)
{
    int rc = 0;

    if (r->coll == OFCCL__AG) {
        if (r->block && r->sendbuf != r->recvbuf)
            memmove(r->recvbuf, r->sendbuf, r->block);
    } else if (r->block) {
        const void *src = r->sendbuf;
        rc = ofccl__reduce(r->dtype, r->op, r->recvbuf, &src, 1, r->count,
                           r->op.kind == OFCCL_OP_AVG ? 1 : 0);
    }
    r->seq = r->comm->coll->next_seq++;
    r->status = rc;
    r->state = OFCCL__REQ_DONE;
    return rc;
}

int ofccl__post_allgather(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    size_t total = r->block * (size_t)comm->size;
    char *own;
    int rc;

    r->algo = ofccl__algo_select(comm, OFCCL__AG, r->block);
    if (comm->size == 1)
        return local_only(r);
    if (ofccl__eager_ok(comm, r->algo, r->bucket, r->block)) {
        /* Small: straight into the peers' control regions, no staging, no registration. */
        r->algo = &ofccl__ag_eager;
        return ofccl__coll_start(r);
    }
    if (r->bucket) {
        /* The flat bucket lives in staging (its layout after it); own shards
         * are packed into our region. */
        rc = ofccl__stage_acquire(comm, OFCCL__AG, round8(total) + ofccl__layout_bytes(r),
                                  &r->staging_idx, &r->dst);
        if (rc)
            return rc;
        ofccl__layout_publish(r, (char *)r->dst.ptr + round8(total));
        r->sendbuf = (char *)r->dst.ptr + (size_t)comm->rank * r->block;
        ofccl__bucket_copy_in(r, (void *)r->sendbuf);
    } else {
        const ofccl__mr_t *mr = ofccl__mem_find(comm, r->recvbuf, total);
        if (mr != NULL) {
            r->dst = (ofccl__mem_ref_t){r->recvbuf, mr};
        } else {
            rc = ofccl__stage_acquire(comm, OFCCL__AG, total, &r->staging_idx, &r->dst);
            if (rc)
                return rc;
            r->copy_out = r->recvbuf;
        }
    }
    /* Our own block goes where the result needs it anyway; we send from there,
     * so the source is registered whatever the caller passed. */
    own = (char *)r->dst.ptr + (size_t)comm->rank * r->block;
    if (r->sendbuf != own && r->block && r->algo->id == OFCCL__ALGO_DIRECT &&
        !ofccl__ep_caps(comm->ep)->mr_local) {
        /* Out of place, direct, and the provider reads unregistered sources:
         * send straight from sendbuf, and let the algorithm copy our block
         * behind the sends, chunk by chunk, while each chunk is in cache
         * (copying it all first, then sending from the copy, read and wrote
         * it once more than needed: 1.6-2.9x slower from 8 MiB up). */
        r->src =
            (ofccl__mem_ref_t){(void *)r->sendbuf, ofccl__mem_find(comm, r->sendbuf, r->block)};
        r->own_dst = own;
    } else {
        if (r->sendbuf != own && r->block)
            memcpy(own, r->sendbuf, r->block);
        r->src = (ofccl__mem_ref_t){own, r->dst.mr};
    }
    if (r->sendbuf != own && r->block && r->copy_out)
        comm->ctx->stats.staged_bytes += r->block;
    rc = ofccl__coll_start(r);
    if (rc && r->staging_idx >= 0)
        ofccl__stage_release(comm, OFCCL__AG, r->staging_idx);
    return rc;
}

/* Reduce-scatter on a provider that maps peers' memory: peers read our source
 * in place, so it must be memory they can map; anything else is copied into
 * staging first (logged once per communicator: it costs a copy). A bucket's
 * flat input is packed into staging anyway, its flat output after it. */
static int post_rs_pull(ofccl__req_t *r, const ofccl__mr_t *smr)
{
    ofccl_comm_t *comm = r->comm;
    size_t total = r->block * (size_t)comm->size;
    int rc;

    r->algo = &ofccl__rs_pull;
    if (r->bucket) {
        size_t need = round8(ofccl__bucket_extra(r));
        rc = ofccl__stage_acquire(comm, OFCCL__RS, need + ofccl__layout_bytes(r) + 1,
                                  &r->staging_idx, &r->src);
        if (rc)
            return rc;
        ofccl__layout_publish(r, (char *)r->src.ptr + need);
        r->out = (char *)r->src.ptr + total;
        ofccl__bucket_copy_in(r, r->src.ptr);
    } else if (smr != NULL && smr->shared && (smr->access & OFCCL__ACC_REMOTE_READ)) {
        r->src = (ofccl__mem_ref_t){(void *)r->sendbuf, smr};
    } else {
        rc = ofccl__stage_acquire(comm, OFCCL__RS, total ? total : 1, &r->staging_idx, &r->src);
        if (rc)
            return rc;
        if (total)
            memcpy(r->src.ptr, r->sendbuf, total);
        comm->ctx->stats.staged_bytes += total;
        if (!comm->coll->pull_staged_noted) {
            comm->coll->pull_staged_noted = 1;
            OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL,
                        "rank %d: reduce-scatter sendbuf %p is not an ofccl_buffer_alloc buffer: "
                        "peers cannot read it in place, so it is copied to staging first (noted "
                        "once per communicator)",
                        comm->rank, r->sendbuf);
        }
    }
    r->dst = r->src; /* what the descriptor announces: the region peers read */
    rc = ofccl__coll_start(r);
    if (rc && r->staging_idx >= 0)
        ofccl__stage_release(comm, OFCCL__RS, r->staging_idx);
    return rc;
}

int ofccl__post_reduce_scatter(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const ofccl__prov_caps_t *caps = ofccl__ep_caps(comm->ep);
    size_t n = (size_t)comm->size, total = r->block * n, need, dst_bytes, fwd_bytes = 0;
    const ofccl__mr_t *smr;
    ofccl__mem_ref_t stage;
    int copy_src, rc;

    r->algo = ofccl__algo_select(comm, OFCCL__RS, r->block);
    if (comm->size == 1)
        return local_only(r);
    r->out = r->recvbuf;
    if (ofccl__eager_ok(comm, r->algo, r->bucket, r->block)) {
        r->algo = &ofccl__rs_eager;
        return ofccl__coll_start(r);
    }
    if (caps->peer_map && r->algo->id == OFCCL__ALGO_DIRECT)
        return post_rs_pull(r, r->bucket ? NULL : ofccl__mem_find(comm, r->sendbuf, total));
    if (r->bucket) {
        copy_src = 0;
    } else {
        smr = ofccl__mem_find(comm, r->sendbuf, total);
        /* Unregistered sources are fine unless the provider (or strict mode)
         * demands registered local buffers: then they are staged. */
        copy_src = smr == NULL && caps->mr_local;
        r->src = (ofccl__mem_ref_t){(void *)r->sendbuf, smr};
    }
    dst_bytes = r->algo->id == OFCCL__ALGO_RING ? total - r->block : total;
    if (r->algo->id == OFCCL__ALGO_RING)
        fwd_bytes = total - r->block;
    dst_bytes = (dst_bytes + 63) & ~(size_t)63;
    fwd_bytes = (fwd_bytes + 63) & ~(size_t)63;
    need = round8(dst_bytes + fwd_bytes + (copy_src ? total : 0) +
                  (r->bucket ? ofccl__bucket_extra(r) : 0));
    rc = ofccl__stage_acquire(comm, OFCCL__RS, need + ofccl__layout_bytes(r), &r->staging_idx,
                              &stage);
    if (rc)
        return rc;
    if (r->bucket)
        ofccl__layout_publish(r, (char *)stage.ptr + need);
    r->dst = stage;
    r->fwd = (ofccl__mem_ref_t){(char *)stage.ptr + dst_bytes, stage.mr};
    if (r->bucket) {
        /* Flat input (packed from the tensors) then the flat output. */
        char *flat = (char *)stage.ptr + dst_bytes + fwd_bytes;
        r->src = (ofccl__mem_ref_t){flat, stage.mr};
        r->out = flat + total;
        ofccl__bucket_copy_in(r, flat);
    }
    if (copy_src) {
        void *copy = (char *)stage.ptr + dst_bytes + fwd_bytes;
        if (total) /* count 0 may come with NULL buffers */
            memcpy(copy, r->sendbuf, total);
        comm->ctx->stats.staged_bytes += total;
        r->src = (ofccl__mem_ref_t){copy, stage.mr};
    }
    rc = ofccl__coll_start(r);
    if (rc)
        ofccl__stage_release(comm, OFCCL__RS, r->staging_idx);
    return rc;
}

/* Claim a slot, fill in the arguments and post; the slot is released on failure. */
static int post(ofccl_comm_t *comm, int coll, const void *sendbuf, void *recvbuf, size_t count,
                ofccl_dtype_t dtype, ofccl_redop_t op, size_t block, ofccl_req_t **req)
{
    ofccl__req_t *r;
    int rc = ofccl__coll_begin(comm, coll, &r);

    if (rc)
        return rc;
    r->sendbuf = sendbuf;
    r->recvbuf = recvbuf;
    r->count = count;
    r->dtype = dtype;
    r->esize = ofccl_dtype_size(dtype);
    r->block = block;
    r->op = op;
    rc = coll == OFCCL__AG ? ofccl__post_allgather(r) : ofccl__post_reduce_scatter(r);
    if (rc) {
        r->state = OFCCL__REQ_FREE;
        return rc;
    }
    *req = r;
    return 0;
}

static int ofccl_allgather_unlocked(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, ofccl_dtype_t dtype, ofccl_req_t **req)
{
    size_t block;
    int rc = check_args(comm, "ofccl_allgather", sendbuf, recvbuf, count, dtype, req, &block);

    if (rc == 0)
        rc = check_room(comm, "ofccl_allgather", "sendbuf", sendbuf, block);
    if (rc == 0)
        rc = check_room(comm, "ofccl_allgather", "recvbuf", recvbuf, block * (size_t)comm->size);
    if (rc)
        return rc;
    /* In place is sendbuf == recvbuf + rank * block; any other overlap is a bug. */
    if (sendbuf != (char *)recvbuf + (size_t)comm->rank * block &&
        overlaps(sendbuf, block, recvbuf, block * (size_t)comm->size))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_allgather: sendbuf overlaps recvbuf but is not this "
                                "rank's block (in place means sendbuf == recvbuf + rank * count)");
    return post(comm, OFCCL__AG, sendbuf, recvbuf, count, dtype, (ofccl_redop_t){OFCCL_OP_SUM, 1},
                block, req);
}

static int ofccl_reduce_scatter_unlocked(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, ofccl_dtype_t dtype, ofccl_redop_t op,
                                         ofccl_req_t **req)
{
    size_t block;
    int rc =
        check_args(comm, "ofccl_reduce_scatter", sendbuf, recvbuf, recvcount, dtype, req, &block);

    if (rc == 0)
        rc = ofccl__check_redop(comm, "ofccl_reduce_scatter", dtype, op);
    if (rc == 0)
        rc = check_room(comm, "ofccl_reduce_scatter", "sendbuf", sendbuf,
                        block * (size_t)comm->size);
    if (rc == 0)
        rc = check_room(comm, "ofccl_reduce_scatter", "recvbuf", recvbuf, block);
    if (rc)
        return rc;
    if (recvbuf != (const char *)sendbuf + (size_t)comm->rank * block &&
        overlaps(sendbuf, block * (size_t)comm->size, recvbuf, block))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_reduce_scatter: recvbuf overlaps sendbuf but is not this "
                                "rank's block (in place means recvbuf == sendbuf + rank * "
                                "recvcount)");
    return post(comm, OFCCL__RS, sendbuf, recvbuf, recvcount, dtype, op, block, req);
}

/* Public entry points: the same calls under the context lock (progress.c). */
int ofccl_allgather(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                    ofccl_dtype_t dtype, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, ofccl_allgather_unlocked(comm, sendbuf, recvbuf, count, dtype, req));
}

int ofccl_reduce_scatter(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                         ofccl_dtype_t dtype, ofccl_redop_t op, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx,
                  ofccl_reduce_scatter_unlocked(comm, sendbuf, recvbuf, recvcount, dtype, op, req));
}
