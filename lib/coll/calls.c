/*
 * The collectives' public entry points: all-gather, reduce-scatter and
 * broadcast, flat and bucketed. Each checks its arguments (args.c) under the
 * context lock and posts (post.c); none asks which memory a buffer is.
 */
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "util.h"

static int allgather_unlocked(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              ofccl_dtype_t dtype, ofccl_req_t **req)
{
    size_t block;
    int rc =
        ofccl__check_args(comm, "ofccl_allgather", sendbuf, recvbuf, count, dtype, req, &block);

    if (rc == 0)
        rc = ofccl__check_room(comm, "ofccl_allgather", "sendbuf", sendbuf, block);
    if (rc == 0)
        rc = ofccl__check_room(comm, "ofccl_allgather", "recvbuf", recvbuf,
                               block * (size_t)comm->size);
    if (rc)
        return rc;
    /* In place is sendbuf == recvbuf + rank * block; any other overlap is a bug. */
    if (sendbuf != (char *)recvbuf + (size_t)comm->rank * block &&
        ofccl__overlaps(sendbuf, block, recvbuf, block * (size_t)comm->size))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_allgather: sendbuf overlaps recvbuf but is not this "
                                "rank's block (in place means sendbuf == recvbuf + rank * count)");
    return ofccl__post(comm, "ofccl_allgather", OFCCL__AG, sendbuf, recvbuf, count, dtype,
                       (ofccl_redop_t){OFCCL_OP_SUM, 1}, -1, block, req);
}

static int bucket_allgather_unlocked(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                     ofccl_dtype_t dtype, ofccl_req_t **req)
{
    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (req == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "ofccl_bucket_allgather: req is NULL");
    return ofccl__post_bucket(comm, "ofccl_bucket_allgather", OFCCL__AG, tensors, n, dtype, -1,
                              (ofccl_redop_t){OFCCL_OP_SUM, 1.0}, req);
}

/* Public entry points: the same calls under the context lock (lock.c). */
int ofccl_allgather(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                    ofccl_dtype_t dtype, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, allgather_unlocked(comm, sendbuf, recvbuf, count, dtype, req));
}

int ofccl_bucket_allgather(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                           ofccl_dtype_t dtype, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, bucket_allgather_unlocked(comm, tensors, n, dtype, req));
}

static int reduce_scatter_unlocked(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t recvcount, ofccl_dtype_t dtype, ofccl_redop_t op,
                                   ofccl_req_t **req)
{
    size_t block;
    int rc = ofccl__check_args(comm, "ofccl_reduce_scatter", sendbuf, recvbuf, recvcount, dtype,
                               req, &block);

    if (rc == 0)
        rc = ofccl__check_redop(comm, "ofccl_reduce_scatter", dtype, op);
    if (rc == 0)
        rc = ofccl__check_room(comm, "ofccl_reduce_scatter", "sendbuf", sendbuf,
                               block * (size_t)comm->size);
    if (rc == 0)
        rc = ofccl__check_room(comm, "ofccl_reduce_scatter", "recvbuf", recvbuf, block);
    if (rc)
        return rc;
    if (recvbuf != (const char *)sendbuf + (size_t)comm->rank * block &&
        ofccl__overlaps(sendbuf, block * (size_t)comm->size, recvbuf, block))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_reduce_scatter: recvbuf overlaps sendbuf but is not this "
                                "rank's block (in place means recvbuf == sendbuf + rank * "
                                "recvcount)");
    return ofccl__post(comm, "ofccl_reduce_scatter", OFCCL__RS, sendbuf, recvbuf, recvcount, dtype,
                       op, -1, block, req);
}

static int bucket_reduce_scatter_unlocked(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                          ofccl_dtype_t dtype, ofccl_redop_t op, ofccl_req_t **req)
{
    int rc;

    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (req == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_bucket_reduce_scatter: req is NULL");
    if ((rc = ofccl__check_redop(comm, "ofccl_bucket_reduce_scatter", dtype, op)) != 0)
        return rc;
    return ofccl__post_bucket(comm, "ofccl_bucket_reduce_scatter", OFCCL__RS, tensors, n, dtype, -1,
                              op, req);
}

int ofccl_reduce_scatter(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                         ofccl_dtype_t dtype, ofccl_redop_t op, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx,
                  reduce_scatter_unlocked(comm, sendbuf, recvbuf, recvcount, dtype, op, req));
}

int ofccl_bucket_reduce_scatter(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                ofccl_dtype_t dtype, ofccl_redop_t op, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, bucket_reduce_scatter_unlocked(comm, tensors, n, dtype, op, req));
}

static int check_root(ofccl_comm_t *comm, const char *what, int root)
{
    if (root < 0 || root >= comm->size)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: root %d is not a rank of this communicator (0..%d)", what,
                                root, comm->size - 1);
    return 0;
}

static int broadcast_locked(ofccl_comm_t *comm, void *buf, size_t count, ofccl_dtype_t dtype,
                            int root, ofccl_req_t **req)
{
    size_t block;
    int rc = ofccl__check_args(comm, "ofccl_broadcast", buf, buf, count, dtype, req, &block);

    if (rc == 0)
        rc = check_root(comm, "ofccl_broadcast", root);
    if (rc == 0)
        rc = ofccl__check_room(comm, "ofccl_broadcast", "buf", buf, block);
    return rc != 0 ? rc
                   : ofccl__post(comm, "ofccl_broadcast", OFCCL__BC, NULL, buf, count, dtype,
                                 (ofccl_redop_t){OFCCL_OP_SUM, 1}, root, block, req);
}

static int bucket_broadcast_locked(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                   ofccl_dtype_t dtype, int root, ofccl_req_t **req)
{
    int rc;

    if (req == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "ofccl_bucket_broadcast: req is NULL");
    if ((rc = check_root(comm, "ofccl_bucket_broadcast", root)) != 0)
        return rc;
    return ofccl__post_bucket(comm, "ofccl_bucket_broadcast", OFCCL__BC, tensors, n, dtype, root,
                              (ofccl_redop_t){OFCCL_OP_SUM, 1}, req);
}

/* Public entry points: the same calls under the context lock (lock.c). */
int ofccl_broadcast(ofccl_comm_t *comm, void *buf, size_t count, ofccl_dtype_t dtype, int root,
                    ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, broadcast_locked(comm, buf, count, dtype, root, req));
}

int ofccl_bucket_broadcast(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                           ofccl_dtype_t dtype, int root, ofccl_req_t **req)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, bucket_broadcast_locked(comm, tensors, n, dtype, root, req));
}
