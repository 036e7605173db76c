/*
 * Stream-ordered collectives of the GPU peer class, as engine requests whose
 * algorithm enqueues the whole collective at once (OFCCL__ALGO_STREAM):
 *
 *   wait for this communicator's previous GPU collective (its end event);
 *   copy this rank's block into place (all-gather out of place);
 *   READY: tell each peer its output takes writes for collective v (a
 *     stream write of v into READY[me] of the peer's flag region);
 *   for each peer: wait until READY[peer] >= v here, then push this rank's
 *     block into the peer's output (the copy kernel, one launch for all
 *     peers, or one copy-engine stream per peer), then DONE[me] = v there;
 *   wait until DONE[peer] >= v here for every peer that writes here;
 *   copy a staged output out of the pool; record the end event.
 *
 * v is the request's sequence number + 1, the same on every rank. The host
 * takes no part: it only polls the end event (ofccl_test, ofccl_wait), checks
 * the arguments the peers published for the same collective (MISMATCH), and
 * on a failure (deadline, dead peer, abort) writes the abort value into its
 * own region, which releases its stream: the kernel then copies nothing, and
 * the copy-engine streams, still waiting for a READY that never came, never
 * write into a peer that may be gone (gq.c, shared by every program).
 */
#include <string.h>

#include "gcomm.h"
#include "util.h"

/* Push `len` bytes from `src` to offset `dst_off` of every peer in `to` (its
 * output), each once it is READY, then set DONE[me] there. */
static int push(ofccl__req_t *r, const int *to, int nto, const void *src, size_t dst_off,
                size_t len, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    struct ofccl__grq *q = ofccl__gq_rq(r);
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, n = comm->size, rc = 0;
    uint64_t v = ofccl__gq_v(r);

    if (!q->ce) {
        void *dst[OFCCL__GPU_COPY_DSTS];
        /* Where the source is not already in this rank's output (an
         * all-gather out of place), its own copy goes in the first launch. */
        char *own = q->peer[me] + dst_off;
        bool mine = own != (const char *)src && r->coll == OFCCL__AG;
        for (int i = 0; rc == 0 && i < nto; i++)
            rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                      ofccl__gq_flag(gc, me, ofccl__gf_ready(to[i])), v, e);
        /* One launch per group of up to 8 destinations. */
        for (int i = 0; rc == 0 && i < nto;) {
            int k = OFCCL__MIN(nto - i, OFCCL__GPU_COPY_DSTS - (mine ? 1 : 0));
            for (int j = 0; j < k; j++)
                dst[j] = q->peer[to[i + j]] + dst_off;
            i += k;
            if (mine)
                dst[k++] = own;
            mine = false;
            rc = ofccl__gpu_copy_kernel(gc->g, gc->dev, gc->comm->stream, dst, k, src, len, gc->sms,
                                        ofccl__gq_flag(gc, me, OFCCL__GF_ABORT), e);
        }
        /* DONE by a kernel that reads the abort word: a stream released
         * after a failure skips the copies and must skip these too. */
        for (int i = 0; rc == 0 && i < nto; i += OFCCL__GPU_COPY_DSTS) {
            int k = OFCCL__MIN(nto - i, OFCCL__GPU_COPY_DSTS);
            for (int j = 0; j < k; j++)
                dst[j] = ofccl__gq_flag(gc, to[i + j], ofccl__gf_done(n, me));
            rc = ofccl__gpu_signal(gc->g, gc->dev, gc->comm->stream, dst, k, v,
                                   ofccl__gq_flag(gc, me, OFCCL__GF_ABORT), e);
        }
        return rc;
    }
    if ((rc = ofccl__gq_ce_streams(gc, e)) == 0)
        rc = ofccl__gpu_event_record(gc->g, gc->dev, gc->fork, gc->comm->stream, e);
    for (int i = 0; rc == 0 && i < nto; i++) {
        ofccl__gpu_stream_t s = gc->ce[to[i]];
        rc = ofccl__gpu_stream_wait_event(gc->g, gc->dev, s, gc->fork, e);
        if (rc == 0)
            rc = ofccl__gpu_wait_flag(gc->g, gc->dev, s,
                                      ofccl__gq_flag(gc, me, ofccl__gf_ready(to[i])), v, e);
        if (rc == 0)
            rc = ofccl__gpu_copy(gc->g, gc->dev, s, q->peer[to[i]] + dst_off, src, len, e);
        if (rc == 0)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, s,
                                       ofccl__gq_flag(gc, to[i], ofccl__gf_done(n, me)), v, e);
        if (rc == 0)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, s,
                                       ofccl__gq_flag(gc, me, ofccl__gf_sent(n, to[i])), v, e);
    }
    /* The caller's stream goes on once every push is out. */
    for (int i = 0; rc == 0 && i < nto; i++)
        rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                  ofccl__gq_flag(gc, me, ofccl__gf_sent(n, to[i])), v, e);
    return rc;
}

static int failed(ofccl__req_t *r, int rc, const ofccl__err_t *e)
{
    return ofccl__coll_fail(r, rc, "enqueuing it on the GPU stream: %s", e->msg);
}

static int ag_start(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    struct ofccl__grq *q = ofccl__gq_rq(r);
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, n = comm->size, *peers = gc->peers, np = n - 1, rc;
    char *own = q->peer[me] + q->off + (size_t)me * r->block;
    ofccl__err_t e = {0};

    rc = ofccl__gq_begin(r, &e);
    /* Out of place: this rank's own block goes by the copy engine (the kernel
     * path stores it with the peers' in the same pass, push()). */
    if (rc == 0 && r->sendbuf != own && r->block && q->ce)
        rc = ofccl__gpu_copy(gc->g, gc->dev, gc->comm->stream, own, r->sendbuf, r->block, &e);
    if (rc == 0)
        rc = ofccl__gq_say_ready(r, peers, np, &e);
    if (rc == 0 && r->block)
        rc = push(r, peers, np, r->sendbuf, q->off + (size_t)me * r->block, r->block, &e);
    else if (rc == 0) /* nothing to move: only the DONE flags */
        for (int i = 0; rc == 0 && i < np; i++)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, gc->comm->stream,
                                       ofccl__gq_flag(gc, peers[i], ofccl__gf_done(n, me)),
                                       ofccl__gq_v(r), &e);
    if (rc == 0)
        rc = ofccl__gq_wait_done(r, peers, np, &e);
    if (rc == 0)
        rc = ofccl__gq_end(r, r->block * (size_t)n, &e);
    return rc ? failed(r, rc, &e) : 0;
}

/* Chunk of the broadcast chain: enough chunks to fill the chain, each a
 * few hundred KiB to 4 MiB. */
static size_t chain_chunk(const ofccl__gcomm_t *gc, size_t len)
{
    size_t c = len / 16;

    if (gc->chain_bytes > 0)
        return gc->chain_bytes;
    return OFCCL__MIN(OFCCL__MAX(c, (size_t)256 << 10), (size_t)4 << 20);
}

/* Below this, the root pushes to every rank (one launch of the copy kernel
 * for all of them): a chain's hops cost more than they save. Measured on
 * 4 x H200: the chain 13-54 GB/s from 1 to 16 MiB, pushing 22-101; level at
 * 32 MiB, the chain ahead beyond. */
#define BC_CHAIN_MIN ((size_t)32 << 20)
#define BC_CE_MIN ((size_t)16 << 20)

/* Broadcast along a pipelined chain root, root + 1, ... (the copy kernel's
 * chain: device flags per chunk, no host or stream operation per chunk); on
 * the copy engines alone, or below BC_CHAIN_MIN, the root pushes to every
 * rank. */
static int bc_start(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    struct ofccl__grq *q = ofccl__gq_rq(r);
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, n = comm->size, root = r->root, rc;
    int pos = (me - root + n) % n, pred = (me - 1 + n) % n, succ = (me + 1) % n;
    bool last = pos == n - 1;
    ofccl__err_t e = {0};

    rc = ofccl__gq_begin(r, &e);
    if (me == root)
        q->stage = NULL; /* the root's own buffer is its output */
    /* Two ranks: one copy from the root, by a copy engine from 16 MiB (on
     * 2 x H200: 227-364 GB/s from 16 to 512 MiB, the copy kernel 167-231). */
    if (n == 2 && r->block >= BC_CE_MIN)
        q->ce = true;
    q->chain = !q->ce && r->block >= BC_CHAIN_MIN;
    if (!q->chain) {
        if (me == root) {
            if (rc == 0 && r->block)
                rc = push(r, gc->peers, n - 1, r->recvbuf, q->off, r->block, &e);
            else if (rc == 0)
                for (int i = 0; rc == 0 && i < n - 1; i++)
                    rc = ofccl__gpu_write_flag(
                        gc->g, gc->dev, gc->comm->stream,
                        ofccl__gq_flag(gc, gc->peers[i], ofccl__gf_done(n, me)), ofccl__gq_v(r),
                        &e);
        } else {
            if (rc == 0)
                rc = ofccl__gq_say_ready(r, &root, 1, &e);
            if (rc == 0)
                rc = ofccl__gq_wait_done(r, &root, 1, &e);
        }
    } else {
        const char *src = me == root ? r->recvbuf : q->peer[me] + q->off;
        char *next = last ? NULL : q->peer[succ] + q->off;
        if (rc == 0 && me != root)
            rc = ofccl__gq_say_ready(r, &pred, 1, &e);
        if (rc == 0 && !last)
            rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                      ofccl__gq_flag(gc, me, ofccl__gf_ready(succ)), ofccl__gq_v(r),
                                      &e);
        if (rc == 0)
            rc =
                ofccl__gpu_chain(gc->g, gc->dev, gc->comm->stream, src, next, r->block,
                                 chain_chunk(gc, r->block), gc->sms, me == root ? NULL : gc->dflags,
                                 last ? NULL : gc->dflags_seg->peer[succ] + gc->dflags_off,
                                 ofccl__gq_v(r) << 24, ofccl__gq_flag(gc, me, OFCCL__GF_ABORT), &e);
    }
    if (rc == 0)
        rc = ofccl__gq_end(r, r->block, &e);
    return rc ? failed(r, rc, &e) : 0;
}

OFCCL__GPU_ALGO(ofccl__gpu_ag, OFCCL__AG, ag_start);
OFCCL__GPU_ALGO(ofccl__gpu_bc, OFCCL__BC, bc_start);
