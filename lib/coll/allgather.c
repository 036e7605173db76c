/*
 * ofccl_allgather and ofccl_bucket_allgather: check the arguments and post
 * (post.c); for the host engine, resolve the memory (registered, pool or
 * staged), choose the algorithm and start the request.
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

/* Staged: at completion, what ofccl__staged_landed has not copied
 * (everything where the algorithm does not say where units land), and this
 * rank's own block. */
static void copy_out(ofccl__req_t *r)
{
    size_t total = r->block * (size_t)r->comm->size;

    if (r->algo->landed == NULL) {
        ofccl__staged_out(r, 0, total);
        return;
    }
    ofccl__staged_landed(r);
    ofccl__staged_out(r, (size_t)r->comm->rank * r->block, r->block);
}

int ofccl__post_allgather(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    size_t total = r->block * (size_t)comm->size;
    char *own;
    int rc;

    /* Device memory the transport does not take runs staged in host memory:
     * the own block goes in on the caller's stream, the result out at the
     * end, and the algorithm works on host memory between. */
    if ((rc = ofccl__resolve_device(r, r->recvbuf, total)) != 0)
        return rc;
    r->algo = ofccl__choose(comm, OFCCL__AG, r->block, r->bucket, ofccl__mem_flags(r));
    if (r->algo->flags & OFCCL__ALGO_EAGER) /* straight into the peers' control regions */
        return ofccl__coll_start(r);
    if (r->bucket) {
        /* The flat bucket lives in staging (its layout after it); own shards
         * are packed into our region. */
        rc = ofccl__stage_acquire(comm, OFCCL__AG, round8(total) + ofccl__layout_bytes(r),
                                  &r->staging_idx, &r->dst);
        if (rc)
            return rc;
        ofccl__layout_publish(r, (char *)r->dst.ptr + round8(total));
        r->sendbuf = (char *)r->dst.ptr + (size_t)comm->rank * r->block;
        ofccl__bucket_copy_in(r, r->dst.ptr);
    } else {
        const ofccl__mr_t *mr = ofccl__mem_find(comm, r->recvbuf, total);
        if (mr != NULL) {
            r->dst = ofccl__mem_ref(r->recvbuf, mr);
        } else {
            rc = ofccl__stage_acquire_on(comm, OFCCL__AG, ofccl__stage_kind(r), total,
                                         &r->staging_idx, &r->dst);
            if (rc)
                return rc;
            r->copy_out = r->recvbuf;
            r->finish = copy_out;
            if (r->algo->landed != NULL)
                r->out_step = ofccl__staged_landed;
        }
    }
    /* Our own block goes where the result needs it anyway; we send from there,
     * so the source is registered whatever the caller passed. */
    own = (char *)r->dst.ptr + (size_t)comm->rank * r->block;
    if (r->sendbuf != own && r->block && (r->algo->buffers & OFCCL__BUF_OWN_BEHIND) &&
        !ofccl__comm_caps(comm)->mr_local && ofccl__exec_io_on_host(r)) {
        /* Out of place, an algorithm that can, and the provider reads
         * unregistered sources: send straight from sendbuf, and let the
         * algorithm copy our block behind the sends, chunk by chunk, while
         * each chunk is in cache (copying it all first, then sending from the
         * copy, read and wrote it once more than needed: 1.6-2.9x slower from
         * 8 MiB up). */
        r->src = ofccl__mem_ref((void *)r->sendbuf, ofccl__mem_find(comm, r->sendbuf, r->block));
    } else {
        if (r->sendbuf != own && r->block &&
            (rc = r->algo->buffers & OFCCL__BUF_OWN_PIECES
                      ? ofccl__exec_io_copy_in(r, own, r->sendbuf, r->block)
                      : ofccl__exec_io_copy(r, own, r->sendbuf, r->block)) != 0)
            return rc;
        r->src = ofccl__mem_ref(own, r->dst.mr);
    }
    if (r->sendbuf != own && r->block && r->copy_out && r->dst.kind == OFCCL__MEM_HOST)
        comm->ctx->stats.staged_bytes += r->block;
    /* Where peers can map our block (ofccl memory), announce it, so that
     * ranks waiting for it can copy it themselves (takes). */
    if ((r->algo->buffers & OFCCL__BUF_SHOW_SRC) && r->block && comm->peer_ctrl_at != NULL &&
        r->src.mr != NULL && r->src.mr->shared && (r->src.mr->access & OFCCL__ACC_REMOTE_READ))
        r->win2 = r->src;
    rc = ofccl__coll_start(r);
    if (rc && r->staging_idx >= 0)
        ofccl__stage_release(comm, OFCCL__AG, r->staging_idx);
    return rc;
}
