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

/* Staged: what arrived in staging is copied to the caller's buffer, as it
 * lands where the algorithm says where (out_step), else at the end. */
static void copy_out(ofccl__req_t *r)
{
    if (r->algo->landed != NULL)
        ofccl__staged_landed(r);
    else
        ofccl__staged_out(r, 0, r->block);
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
        rc = ofccl__stage_acquire_on(comm, OFCCL__BC, ofccl__stage_kind(r), r->block ? r->block : 1,
                                     &r->staging_idx, &r->dst);
        if (rc)
            return rc;
        if (root && r->block) {
            if ((rc = ofccl__exec_io_copy(r, r->dst.ptr, buf, r->block)) != 0)
                return rc;
            if (r->dst.kind == OFCCL__MEM_HOST)
                comm->ctx->stats.staged_bytes += r->block;
        } else if (!root) {
            r->copy_out = buf;
            r->finish = copy_out;
            if (r->algo->landed != NULL)
                r->out_step = ofccl__staged_landed;
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
