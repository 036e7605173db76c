/*
 * ofccl_broadcast and ofccl_bucket_broadcast: check the arguments, resolve
 * the memory, choose the algorithm and start the request. In place: every
 * rank passes its buffer; the root's content ends up in all of them.
 */
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "pool.h"
#include "util.h"

static size_t round8(size_t v)
{
    return (v + 7) & ~(size_t)7;
}

/* Staged: what arrived in staging is copied to the caller's buffer at the end. */
static void copy_out(ofccl__req_t *r)
{
    if (r->block > 0) {
        ofccl__exec_io_copy(r, r->copy_out, r->dst.ptr, r->block);
        r->comm->ctx->stats.staged_bytes += r->block;
    }
}

/* Where the buffer is, for the chosen algorithm: peers read the root's in
 * place (pull: it must be memory they can map), or write into every other
 * rank's (it must be registered, else it goes through staging). */
static int resolve_memory(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    bool root = comm->rank == r->root, read = (r->algo->buffers & OFCCL__BUF_PEERS_READ) != 0;
    void *buf = r->recvbuf;
    const ofccl__mr_t *mr = ofccl__mem_find(comm, buf, r->block);
    int rc;

    if (read && !root) {
        r->out = buf; /* read from the root straight into it */
        return 0;
    }
    if (mr != NULL && (!read || (mr->shared && (mr->access & OFCCL__ACC_REMOTE_READ)))) {
        r->dst = ofccl__mem_ref(buf, mr);
    } else if (root && !read && !ofccl__comm_caps(comm)->mr_local && ofccl__exec_io_on_host(r)) {
        r->dst = ofccl__mem_ref(buf, NULL); /* the provider reads unregistered sources */
    } else {
        rc = ofccl__stage_acquire(comm, OFCCL__BC, r->block ? r->block : 1, &r->staging_idx,
                                  &r->dst);
        if (rc)
            return rc;
        if (root && r->block) {
            if ((rc = ofccl__exec_io_copy(r, r->dst.ptr, buf, r->block)) != 0)
                return rc;
            comm->ctx->stats.staged_bytes += r->block;
        } else if (!root) {
            r->copy_out = buf;
            r->finish = copy_out;
        }
    }
    r->src = r->dst;
    return 0;
}

/* A bucket: the flat buffer lives in staging on every rank (its layout after
 * it); the root packs its tensors, the others unpack at the end. */
static int resolve_bucket(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int rc = ofccl__stage_acquire(comm, OFCCL__BC, round8(r->block) + ofccl__layout_bytes(r),
                                  &r->staging_idx, &r->dst);

    if (rc)
        return rc;
    ofccl__layout_publish(r, (char *)r->dst.ptr + round8(r->block));
    if (comm->rank == r->root)
        ofccl__bucket_copy_in(r, r->dst.ptr);
    r->src = r->dst;
    r->out = r->dst.ptr;
    return 0;
}

int ofccl__post_broadcast(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int rc;

    /* Device memory the transport does not take runs staged in host memory. */
    if ((rc = ofccl__resolve_device(r, r->recvbuf, r->block)) != 0)
        return rc;
    r->algo = ofccl__choose(comm, OFCCL__BC, r->block, r->bucket, ofccl__mem_flags(r));
    r->sendbuf = r->recvbuf;
    if (r->algo->flags & OFCCL__ALGO_EAGER) /* straight into the peers' control regions */
        return ofccl__coll_start(r);
    rc = r->bucket ? resolve_bucket(r) : resolve_memory(r);
    if (rc == 0)
        rc = ofccl__coll_start(r);
    if (rc && r->staging_idx >= 0)
        ofccl__stage_release(comm, OFCCL__BC, r->staging_idx);
    return rc;
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
    return rc != 0 ? rc : ofccl__post_bc(comm, buf, count, dtype, root, block, req);
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
