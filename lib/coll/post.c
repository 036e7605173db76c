/*
 * What the collective entry points share: argument checks (every one names
 * the call and the argument), the one-rank case, and the posting step:
 * whether the GPU peer class serves the buffers (asked before a slot is
 * claimed, since placing them may grow its pool, a collective), claiming
 * and filling the request, and handing it to the peer class's stream
 * program or to the host engine, which runs on the memory in place or
 * staged (ofccl__resolve_device). The entry points never ask a buffer's
 * memory kind (test/layers/check_layers.py).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "pool.h"
#include "util.h"

const char *ofccl__dtype_name(ofccl_dtype_t dtype)
{
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "u8"};
    return (unsigned)dtype < OFCCL_DTYPE_COUNT ? names[dtype] : "?";
}

bool ofccl__overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    const char *x = a, *y = b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* Checks shared by both collectives; on success *block is the bytes per rank. */
int ofccl__check_args(ofccl_comm_t *comm, const char *what, const void *sendbuf, void *recvbuf,
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
                                what, count, ofccl__dtype_name(dtype), comm->size);
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: %s is NULL", what,
                                sendbuf == NULL ? "sendbuf" : "recvbuf");
    *block = count * esize;
    return 0;
}

/* A buffer inside a pool buffer or registered range must fit in it: that much
 * ofccl can check (plain malloc'd memory it cannot). */
int ofccl__check_room(ofccl_comm_t *comm, const char *what, const char *name, const void *buf,
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
int ofccl__post_local(ofccl__req_t *r)
{
    int rc = 0;

    if (r->coll == OFCCL__AG) {
        /* Distinct or the same: any other overlap is refused by the entry point. */
        if (r->block && r->sendbuf != r->recvbuf)
            rc = ofccl__exec_io_copy(r, r->recvbuf, r->sendbuf, r->block);
    } else if (r->block) {
        const void *src = r->sendbuf;
        rc = ofccl__exec_io_reduce(r, r->op, r->recvbuf, &src, 1, r->count,
                                   r->op.kind == OFCCL_OP_AVG ? 1 : 0);
    }
    ofccl__coll_done_now(r, rc);
    return rc;
}

int ofccl__resolve_device(ofccl__req_t *r, void *buf, size_t len)
{
    ofccl_comm_t *comm = r->comm;
    int rc;

    if (ofccl__exec_io_on_host(r))
        return 0;
    if (!r->bucket && comm->dev_reg && len > 0 && ofccl__mem_find(comm, buf, len) == NULL &&
        (rc = ofccl__mem_call_register(r, buf, len)) != 0)
        return rc;
    if (r->bucket || len == 0 || ofccl__mem_find(comm, buf, len) == NULL) {
        ofccl__exec_staged(r);
        return 0;
    }
    r->drain = true;
    comm->ctx->stats.hmem_bytes += len;
    return 0;
}

int ofccl__post_failed(ofccl__req_t *r, int rc)
{
    r->state = OFCCL__REQ_FREE;
    ofccl__mem_call_release(r);
    return rc;
}

int ofccl__post_peer_class(ofccl__req_t *r, const ofccl__gwhere_t *where)
{
    r->algo = ofccl__choose(r->comm, r->coll, r->block, r->bucket, OFCCL__MEM_PEER_CLASS);
    ofccl__gpu_place(r, where);
    return ofccl__coll_start(r);
}

/* Claim a slot, fill in the arguments and post; the slot is released on failure. */
int ofccl__post(ofccl_comm_t *comm, int coll, const void *sendbuf, void *recvbuf, size_t count,
                ofccl_dtype_t dtype, ofccl_redop_t op, size_t block, ofccl_req_t **req)
{
    ofccl__gwhere_t where;
    ofccl__req_t *r;
    int peer =
        ofccl__gpu_admit(comm, coll == OFCCL__AG ? "ofccl_allgather" : "ofccl_reduce_scatter", coll,
                         sendbuf, recvbuf, block, &where);
    int rc = peer < 0 ? peer : ofccl__coll_begin(comm, coll, &r);

    if (rc)
        return rc;
    r->sendbuf = sendbuf;
    r->recvbuf = recvbuf;
    r->count = count;
    r->dtype = dtype;
    r->esize = ofccl_dtype_size(dtype);
    r->block = block;
    r->op = op;
    if (peer)
        rc = ofccl__post_peer_class(r, &where);
    else if ((rc = ofccl__exec_choose(r, ofccl__mem_kind_of(sendbuf),
                                      ofccl__mem_kind_of(recvbuf))) == 0)
        rc = comm->size == 1     ? ofccl__post_local(r)
             : coll == OFCCL__AG ? ofccl__post_allgather(r)
                                 : ofccl__post_reduce_scatter(r);
    if (rc)
        return ofccl__post_failed(r, rc);
    *req = r;
    return 0;
}

int ofccl__post_bc(ofccl_comm_t *comm, void *buf, size_t count, ofccl_dtype_t dtype, int root,
                   size_t block, ofccl_req_t **req)
{
    ofccl__gwhere_t where;
    ofccl__req_t *r;
    int peer = ofccl__gpu_admit(comm, "ofccl_broadcast", OFCCL__BC, NULL, buf, block, &where);
    int rc = peer < 0 ? peer : ofccl__check_room(comm, "ofccl_broadcast", "buf", buf, block);

    if (rc == 0)
        rc = ofccl__coll_begin(comm, OFCCL__BC, &r);
    if (rc)
        return rc;
    r->sendbuf = r->recvbuf = buf;
    r->count = count;
    r->dtype = dtype;
    r->esize = ofccl_dtype_size(dtype);
    r->block = block;
    r->root = root;
    r->op = (ofccl_redop_t){OFCCL_OP_SUM, 1};
    if (peer)
        rc = ofccl__post_peer_class(r, &where);
    else if ((rc = ofccl__exec_choose(r, ofccl__mem_kind_of(buf), OFCCL__MEM_HOST)) == 0 &&
             comm->size == 1)
        ofccl__coll_done_now(r, 0); /* the root's buffer is the result */
    else if (rc == 0)
        rc = ofccl__post_broadcast(r);
    if (rc)
        return ofccl__post_failed(r, rc);
    *req = r;
    return 0;
}

int ofccl__allgather_blocking(ofccl_comm_t *comm, const void *in, void *out, size_t bytes)
{
    ofccl_req_t *req = NULL;
    int rc = ofccl__post(comm, OFCCL__AG, in, out, bytes, OFCCL_U8,
                         (ofccl_redop_t){OFCCL_OP_SUM, 1}, bytes, &req);

    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    return rc;
}
