/*
 * Weight push on GPU memory (a plan made with spec.gpu = 1): trainer shards on
 * their GPUs go straight into the rollout ranks' GPU bucket buffers, one
 * stream-ordered collective per bucket, by the copy engines (no SM taken from
 * the trainer's or the rollout's kernels).
 *
 * The plan's two receive buffers are symmetric GPU pool buffers of the
 * largest bucket, allocated on every rank when the plan is made (every rank
 * then maps every receiver's). Bucket k lands in buffer k % 2. As enqueued:
 *
 *   receiver: READY to every sender (its buffer takes bucket k);
 *   sender: per receiver, on that receiver's copy-engine stream, wait for
 *     its READY, copy each of this sender's pieces of the bucket's tensors
 *     into it (ofccl__push_piece: the same pieces as the host path), then
 *     DONE[me] there; its own pieces, when it receives too, on its stream;
 *   receiver: wait for every sender's DONE; the end event.
 *
 * Failures, mismatches (the bucket, the plan's tag) and the host's part are
 * those of every GPU collective (gcoll.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "pool.h"
#include "push.h"
#include "util.h"

int ofccl__gpu_push_setup(ofccl_push_plan_t *pl)
{
    ofccl_comm_t *comm = pl->comm;
    ofccl__gcomm_t *gc;
    int rc;

    if ((rc = ofccl__gcomm_get(comm, &gc)) != 0)
        return rc;
    if (gc->path != OFCCL__GPATH_P2P && !comm->dev_reg)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "ofccl_push_plan_create: a GPU plan needs the GPU peer class or a "
                                "transport that takes GPU memory: %s",
                                gc->why);
    pl->gpu = true; /* from here the plan's buffers are the GPU pool's, freed there */
    for (int b = 0; b < 2; b++)
        if ((rc = ofccl__gpool_alloc(gc, OFCCL__MAX(pl->max_recv_bytes, (size_t)1), &pl->buf[b])) !=
            0)
            return rc;
    /* The host engine's plan: the buffers registered with the transport
     * (both or neither: ofccl__gpu_push_free drops them by gpu_engine). */
    for (int b = 0; b < 2 && gc->path != OFCCL__GPATH_P2P; b++)
        if ((rc = ofccl__pool_register(comm, pl->buf[b],
                                       OFCCL__MAX(pl->max_recv_bytes, (size_t)1))) != 0) {
            if (b == 1)
                ofccl__pool_unregister(comm, pl->buf[0]);
            return rc;
        }
    pl->gpu_engine = gc->path != OFCCL__GPATH_P2P;
    return 0;
}

void ofccl__gpu_push_free(ofccl_push_plan_t *pl)
{
    ofccl__gcomm_t *gc = ofccl__gcomm_of(pl->comm);

    for (int b = 0; b < 2; b++) {
        if (pl->buf[b] != NULL && pl->gpu_engine)
            ofccl__pool_unregister(pl->comm, pl->buf[b]);
        if (pl->buf[b] != NULL && gc != NULL)
            ofccl__gpool_free(gc, pl->buf[b]);
    }
}

bool ofccl__gpu_push_busy(const ofccl_push_plan_t *pl)
{
    const ofccl__gcomm_t *gc = ofccl__gcomm_of(pl->comm);

    for (int s = 0; gc != NULL && s < OFCCL__GPU_SLOTS; s++) {
        const ofccl__req_t *r = gc->rq[s].req;
        if (r != NULL && r->state != OFCCL__REQ_FREE && r->algo == &ofccl__gpu_push &&
            gc->rq[s].plan == pl)
            return true;
    }
    return false;
}

/* The bucket's pointers: a sender's non-empty shards on this GPU; a
 * receiver's buf NULL (or the plan's own buffer). */
static int check_args(ofccl_push_plan_t *pl, ofccl__gcomm_t *gc, int k, void *const *shards,
                      const size_t *used, void *buf)
{
    ofccl_comm_t *comm = pl->comm;

    if (buf != NULL && buf != pl->buf[k % 2])
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_push_bucket: a GPU plan receives into its own symmetric "
                                "buffers: pass buf NULL and read bucket %d from ofccl_push_buffer",
                                k);
    for (int t = pl->first[k]; pl->me_send >= 0 && t < pl->first[k + 1]; t++) {
        size_t s0;
        int kind;
        if (ofccl__push_shard(pl, t, pl->me_send, &s0) == 0 || (used != NULL && used[t] <= s0))
            continue; /* nothing of this tensor moves from here */
        kind = ofccl__mem_kind_of(shards[t]);
        if (kind != gc->dev)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "ofccl_push_bucket: shards[%d] is %s, not memory of this "
                                    "rank's GPU %d (a GPU plan takes GPU shards)",
                                    t,
                                    shards[t] == NULL ? "NULL"
                                    : kind < 0        ? "host memory"
                                                      : "on another GPU",
                                    gc->dev);
    }
    return 0;
}

int ofccl__gpu_push_bucket(ofccl_push_plan_t *pl, int k, void *const *shards, const size_t *used,
                           void *buf, ofccl__req_t **out)
{
    ofccl_comm_t *comm = pl->comm;
    ofccl__gcomm_t *gc = ofccl__gcomm_of(comm);
    ofccl__gwhere_t where = {0};
    ofccl__req_t *r;
    int rc;

    if (gc == NULL || !gc->ready)
        return ofccl__comm_fail(comm, OFCCL_ERR_STATE, "ofccl_push_bucket: no GPU state");
    if ((rc = check_args(pl, gc, k, shards, used, buf)) != 0)
        return rc;
    where.seg = ofccl__gpool_find(gc, pl->buf[k % 2], 1, &where.off);
    if (where.seg == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INTERNAL,
                                "ofccl_push_bucket: the plan's GPU buffer is not in the pool");
    if ((rc = ofccl__coll_begin(comm, OFCCL__PUSH, &r)) != 0)
        return rc;
    r->dtype = OFCCL_U8;
    r->esize = 1;
    r->count = (size_t)k;
    r->block = (size_t)k; /* peers compare it: ranks posting other buckets mismatch */
    r->tag = pl->tag;
    r->op = (ofccl_redop_t){OFCCL_OP_SUM, 1};
    r->recvbuf = pl->buf[k % 2];
    pl->bucket[r->slot] = k;
    pl->shards[r->slot] = shards;
    ofccl__push_set_used(pl, r->slot, k, used);
    r->algo = &ofccl__gpu_push;
    ofccl__gpu_prepare(r, gc, &where);
    gc->rq[r->slot].ce = true; /* the copy engines always; their READY waits stay */
    gc->rq[r->slot].plan = pl;
    gc->rq[r->slot].roles = ofccl__gpush_roles;
    if ((rc = ofccl__coll_start(r)) != 0) {
        r->state = OFCCL__REQ_FREE;
        return rc;
    }
    *out = r;
    return 0;
}

void ofccl__gpush_roles(const ofccl__req_t *r, int p, bool *to_p, bool *from_p)
{
    const ofccl_push_plan_t *pl = r->comm->gpu->rq[r->slot].plan;

    *to_p = pl->me_send >= 0 && ofccl__push_index(pl->receivers, pl->nreceivers, p) >= 0;
    *from_p = pl->me_recv >= 0 && ofccl__push_index(pl->senders, pl->nsenders, p) >= 0;
}

/* This sender's pieces of bucket k for receiver j, copied on stream s into
 * `dst` (receiver j's buffer). */
static int copy_pieces(ofccl__req_t *r, const ofccl_push_plan_t *pl, int j, char *dst,
                       ofccl__gpu_stream_t s, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = r->comm->gpu;
    int k = pl->bucket[r->slot], rc = 0;

    for (int t = pl->first[k]; rc == 0 && t < pl->first[k + 1]; t++) {
        size_t so, dof, len;
        ofccl__push_piece(pl, t, pl->me_send, j, &so, &dof, &len);
        len = ofccl__push_used(pl, r->slot, t, so, len);
        if (len)
            rc = ofccl__gpu_copy(gc->g, gc->dev, s, dst + dof,
                                 (const char *)pl->shards[r->slot][t] + so, len, e);
    }
    return rc;
}

static int send_all(ofccl__req_t *r, const ofccl_push_plan_t *pl, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = r->comm->gpu;
    struct ofccl__grq *q = &gc->rq[r->slot];
    int me = r->comm->rank, n = r->comm->size, rc;
    uint64_t v = ofccl__gq_v(r);

    if ((rc = ofccl__gq_ce_streams(gc, e)) == 0)
        rc = ofccl__gpu_event_record(gc->g, gc->dev, gc->fork, gc->comm->stream, e);
    for (int j = 0; rc == 0 && j < pl->nreceivers; j++) {
        int p = pl->receivers[j];
        ofccl__gpu_stream_t s = gc->ce[p];
        if (p == me) /* its own pieces: on its stream */
            continue;
        rc = ofccl__gpu_stream_wait_event(gc->g, gc->dev, s, gc->fork, e);
        if (rc == 0)
            rc = ofccl__gpu_wait_flag(gc->g, gc->dev, s, ofccl__gq_flag(gc, me, ofccl__gf_ready(p)),
                                      v, e);
        if (rc == 0)
            rc = copy_pieces(r, pl, j, q->peer[p] + q->off, s, e);
        if (rc == 0)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, s,
                                       ofccl__gq_flag(gc, p, ofccl__gf_done(n, me)), v, e);
        if (rc == 0)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, s,
                                       ofccl__gq_flag(gc, me, ofccl__gf_sent(n, p)), v, e);
    }
    if (rc == 0 && pl->me_recv >= 0)
        rc = copy_pieces(r, pl, pl->me_recv, q->peer[me] + q->off, gc->comm->stream, e);
    for (int j = 0; rc == 0 && j < pl->nreceivers; j++)
        if (pl->receivers[j] != me)
            rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                      ofccl__gq_flag(gc, me, ofccl__gf_sent(n, pl->receivers[j])),
                                      v, e);
    return rc;
}

int ofccl__gpush_start(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = r->comm->gpu;
    const ofccl_push_plan_t *pl = gc->rq[r->slot].plan;
    int me = r->comm->rank, no = 0, rc, *others = malloc(sizeof(int) * (size_t)pl->nsenders);
    ofccl__err_t e = {0};

    if (others == NULL)
        return ofccl__coll_fail(r, OFCCL_ERR_NO_MEMORY, "no memory");
    for (int i = 0; i < pl->nsenders; i++)
        if (pl->senders[i] != me)
            others[no++] = pl->senders[i];
    rc = ofccl__gq_begin(r, &e);
    if (rc == 0 && pl->me_recv >= 0)
        rc = ofccl__gq_say_ready(r, others, no, &e);
    if (rc == 0 && pl->me_send >= 0)
        rc = send_all(r, pl, &e);
    if (rc == 0 && pl->me_recv >= 0)
        rc = ofccl__gq_wait_done(r, others, no, &e);
    if (rc == 0)
        rc = ofccl__gq_end(r, 0, &e);
    free(others);
    return rc ? ofccl__coll_fail(r, rc, "enqueuing it on the GPU stream: %s", e.msg) : 0;
}

OFCCL__GPU_ALGO(ofccl__gpu_push, OFCCL__PUSH, ofccl__gpush_start);
