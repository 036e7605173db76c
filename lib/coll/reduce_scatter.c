/*
 * ofccl_reduce_scatter and ofccl_bucket_reduce_scatter: check the arguments
 * and post (post.c); for the host engine, resolve the memory (peers write
 * into staging, or read the source in place where their memory maps), choose
 * the algorithm and start the request.
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

/* Where the output is ofccl memory that peers can map, announce it, so that
 * ranks done with their own block can take grains of this one (pull). */
static void announce_out(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const ofccl__mr_t *omr;

    if (!(r->algo->buffers & OFCCL__BUF_SHOW_OUT) || comm->peer_ctrl_at == NULL || r->block == 0)
        return;
    omr = r->bucket ? r->src.mr : ofccl__mem_find(comm, r->out, r->block);
    if (omr != NULL && omr->shared && (omr->access & OFCCL__ACC_REMOTE_WRITE))
        r->win2 = ofccl__mem_ref(r->out, omr);
}

/* An algorithm whose peers read our source in place (a provider that maps
 * peers' memory): it must be memory they can map; anything else is copied
 * into staging first (logged once per communicator: it costs a copy). A
 * bucket's flat input is packed into staging anyway, its flat output after
 * it. */
static int post_rs_pull(ofccl__req_t *r, const ofccl__mr_t *smr)
{
    ofccl_comm_t *comm = r->comm;
    size_t total = r->block * (size_t)comm->size;
    int rc;

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
        r->src = ofccl__mem_ref((void *)r->sendbuf, smr);
    } else {
        rc = ofccl__stage_acquire(comm, OFCCL__RS, total ? total : 1, &r->staging_idx, &r->src);
        if (rc)
            return rc;
        if (total && (rc = ofccl__exec_io_copy(r, r->src.ptr, r->sendbuf, total)) != 0)
            return rc;
        comm->ctx->stats.staged_bytes += total;
        if (ofccl__comm_note_once(comm, OFCCL__NOTE_PULL_STAGED))
            OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL,
                        "rank %d: reduce-scatter sendbuf %p is not an ofccl_buffer_alloc buffer: "
                        "peers cannot read it in place, so it is copied to staging first (noted "
                        "once per communicator)",
                        comm->rank, r->sendbuf);
    }
    r->dst = r->src; /* what the descriptor announces: the region peers read */
    announce_out(r);
    rc = ofccl__coll_start(r);
    if (rc && r->staging_idx >= 0)
        ofccl__stage_release(comm, OFCCL__RS, r->staging_idx);
    return rc;
}

/* Staged output (the caller's is device memory): copied out at the end. */
static void copy_out(ofccl__req_t *r)
{
    if (r->block > 0) {
        ofccl__exec_io_copy(r, r->copy_out, r->out, r->block);
        r->comm->ctx->stats.staged_bytes += r->block;
    }
}

/* Device memory where every peer's writes into this GPU land before their
 * signal (comm->dev_landed): the peers write their pieces into staging on
 * this GPU and its executor sums them with this rank's own piece, read in
 * place, into the output; nothing goes through host memory. */
static int post_rs_device(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    size_t total = r->block * (size_t)comm->size;
    int rc;

    r->algo = ofccl__choose(comm, OFCCL__RS, r->block, 0, ofccl__mem_flags(r));
    r->src = ofccl__mem_ref((void *)r->sendbuf, ofccl__mem_find(comm, r->sendbuf, total));
    r->out = r->recvbuf;
    rc = ofccl__stage_acquire_on(comm, OFCCL__RS, r->exec->kind, total ? total : 1, &r->staging_idx,
                                 &r->dst);
    if (rc)
        return rc;
    comm->ctx->stats.hmem_bytes += total;
    rc = ofccl__coll_start(r);
    if (rc)
        ofccl__stage_release(comm, OFCCL__RS, r->staging_idx);
    return rc;
}

int ofccl__post_reduce_scatter(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    const ofccl__prov_caps_t *caps = ofccl__comm_caps(comm);
    size_t n = (size_t)comm->size, total = r->block * n, need, dst_bytes, fwd_bytes = 0;
    bool dev = !ofccl__exec_io_on_host(r);
    const ofccl__mr_t *smr;
    ofccl__mem_ref_t stage;
    int copy_src, rc;

    if (dev && comm->dev_landed && !r->bucket)
        return post_rs_device(r);
    /* Other device memory: the sums are the host's, on staging; the input
     * goes in on the caller's stream and the result out at the end. */
    if (dev)
        ofccl__exec_staged(r);
    r->algo = ofccl__choose(comm, OFCCL__RS, r->block, r->bucket, ofccl__mem_flags(r));
    r->out = r->recvbuf;
    if (r->algo->flags & OFCCL__ALGO_EAGER) /* straight into the peers' control regions */
        return ofccl__coll_start(r);
    if (r->algo->buffers & OFCCL__BUF_PEERS_READ)
        return post_rs_pull(r, r->bucket ? NULL : ofccl__mem_find(comm, r->sendbuf, total));
    if (r->bucket) {
        copy_src = 0;
    } else {
        smr = ofccl__mem_find(comm, r->sendbuf, total);
        /* Unregistered sources are fine unless the provider (or strict mode)
         * demands registered local buffers: then they are staged, as device
         * memory always is. */
        copy_src = (smr == NULL && caps->mr_local) || dev;
        r->src = ofccl__mem_ref((void *)r->sendbuf, smr);
    }
    dst_bytes = total;
    if (r->algo->staging != NULL)
        r->algo->staging(r, &dst_bytes, &fwd_bytes);
    dst_bytes = (dst_bytes + 63) & ~(size_t)63;
    fwd_bytes = (fwd_bytes + 63) & ~(size_t)63;
    need = round8(dst_bytes + fwd_bytes + (copy_src ? round8(total) : 0) +
                  (dev && !r->bucket ? r->block : 0) + (r->bucket ? ofccl__bucket_extra(r) : 0));
    rc = ofccl__stage_acquire(comm, OFCCL__RS, need + ofccl__layout_bytes(r), &r->staging_idx,
                              &stage);
    if (rc)
        return rc;
    if (r->bucket)
        ofccl__layout_publish(r, (char *)stage.ptr + need);
    r->dst = stage;
    r->fwd = ofccl__mem_ref((char *)stage.ptr + dst_bytes, stage.mr);
    if (r->bucket) {
        /* Flat input (packed from the tensors) then the flat output. */
        char *flat = (char *)stage.ptr + dst_bytes + fwd_bytes;
        r->src = ofccl__mem_ref(flat, stage.mr);
        r->out = flat + total;
        ofccl__bucket_copy_in(r, flat);
    }
    if (dev && !r->bucket) { /* the staged output, after the staged input */
        r->out = (char *)stage.ptr + dst_bytes + fwd_bytes + round8(total);
        r->copy_out = r->recvbuf;
        r->finish = copy_out;
    }
    if (copy_src) {
        void *copy = (char *)stage.ptr + dst_bytes + fwd_bytes;
        /* count 0 may come with NULL buffers */
        if (total && (rc = ofccl__exec_io_copy(r, copy, r->sendbuf, total)) != 0) {
            ofccl__stage_release(comm, OFCCL__RS, r->staging_idx);
            return rc;
        }
        comm->ctx->stats.staged_bytes += total;
        r->src = ofccl__mem_ref(copy, stage.mr);
    }
    rc = ofccl__coll_start(r);
    if (rc)
        ofccl__stage_release(comm, OFCCL__RS, r->staging_idx);
    return rc;
}
