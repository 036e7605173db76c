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
 * write into a peer that may be gone.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "util.h"

/* A request's published words in its slot of the flag region: its sequence
 * number + 1 (written last: the rest is in), the engine's argument words
 * (ofccl__args_words), and where its buffer is (pool segment or
 * registration number, and offset), which must match too. */
enum { FP_SEQ, FP_ARGS, FP_SEG = FP_ARGS + OFCCL__ARGS_WORDS, FP_OFF, FP_WORDS };
_Static_assert((int)FP_WORDS == (int)OFCCL__GF_FP_WORDS, "a slot's published words");

static ofccl__gcomm_t *gc_of(const ofccl__req_t *r)
{
    return r->comm->gpu;
}

static struct ofccl__grq *q_of(const ofccl__req_t *r)
{
    return &gc_of(r)->rq[r->slot];
}

static uint64_t v_of(const ofccl__req_t *r)
{
    return ofccl__gq_v(r);
}

static void *flag(const ofccl__gcomm_t *gc, int rank, size_t word)
{
    return ofccl__gq_flag(gc, rank, word);
}

static uint64_t flag_here(const ofccl__gcomm_t *gc, size_t word)
{
    return atomic_load_explicit(&gc->fh[gc->comm->rank][word], memory_order_acquire);
}

/* Publish this rank's arguments for the request's slot: peers compare. */
static void fp_publish(ofccl__req_t *r, const struct ofccl__grq *q)
{
    ofccl__gcomm_t *gc = gc_of(r);
    _Atomic uint64_t *w = &gc->fh[r->comm->rank][ofccl__gf_fp(r->comm->size, r->slot)];
    uint64_t v[FP_WORDS] = {v_of(r)};

    ofccl__args_words(r, &v[FP_ARGS]);
    v[FP_SEG] = q->serial;
    v[FP_OFF] = q->off;
    for (int i = FP_WORDS - 1; i >= 0; i--) /* the sequence last: it says the rest is in */
        atomic_store_explicit(&w[i], v[i],
                              i == FP_SEQ ? memory_order_release : memory_order_relaxed);
}

/* Every peer's published arguments for this collective against ours: the
 * engine's check (named as a descriptor's), then where the buffer is. */
static int fp_check(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = gc_of(r);
    const ofccl_comm_t *comm = r->comm;
    const _Atomic uint64_t *mine = &gc->fh[comm->rank][ofccl__gf_fp(comm->size, r->slot)];

    for (int p = 0; p < comm->size; p++) {
        const _Atomic uint64_t *w = &gc->fh[p][ofccl__gf_fp(comm->size, r->slot)];
        uint64_t v[FP_WORDS];
        int rc;

        if (p == comm->rank || atomic_load_explicit(&w[FP_SEQ], memory_order_acquire) != v_of(r))
            continue;
        for (int f = FP_ARGS; f < FP_WORDS; f++)
            v[f] = atomic_load_explicit(&w[f], memory_order_relaxed);
        if ((rc = ofccl__args_check(r, p, &v[FP_ARGS])) != 0)
            return rc;
        for (int f = FP_SEG; f < FP_WORDS; f++) {
            uint64_t b = atomic_load_explicit(&mine[f], memory_order_relaxed);
            if (v[f] == b)
                continue;
            ofccl__notice_mismatch(r->comm, r->seq, p, OFCCL__FIELD_NONE);
            return ofccl__coll_fail(
                r, OFCCL_ERR_MISMATCH,
                "rank %d posted it on the GPU with buffer (%s) %llu, rank %d with %llu (every "
                "rank passes a GPU pool buffer at the same offset, or memory at the same offset "
                "of its own registration made at the same point, or every rank other memory)",
                p, f == FP_SEG ? "pool segment or registration number" : "offset in it",
                (unsigned long long)v[f], comm->rank, (unsigned long long)b);
        }
    }
    return 0;
}

int ofccl__gpu_locate(ofccl__gcomm_t *gc, void *out, size_t bytes, ofccl__gwhere_t *w)
{
    int rc;

    w->stage = NULL;
    if ((w->seg = ofccl__gpool_find(gc, out, bytes, &w->off)) != NULL)
        return 0;
    if ((rc = ofccl__greg_find(gc, out, bytes, &w->seg, &w->off)) != 0 || w->seg != NULL)
        return rc;
    /* Not pool memory: the peers write into the scratch buffer, which is
     * copied out at the end, on the stream. */
    if ((rc = ofccl__gpool_scratch(gc, bytes, &w->seg, &w->off)) != 0)
        return rc;
    w->stage = out;
    return 0;
}

void ofccl__gpu_prepare(ofccl__req_t *r, ofccl__gcomm_t *gc, const ofccl__gwhere_t *w)
{
    struct ofccl__grq *q = &gc->rq[r->slot];

    memset(q, 0, sizeof(*q));
    q->req = r;
    q->coll = r->coll;
    q->root = r->coll == OFCCL__BC ? r->root : -1;
    q->ce = gc->sms == 0;
    q->off = w->off;
    q->serial = w->seg->serial;
    q->peer = w->seg->peer;
    q->stage = w->stage;
    r->algo_state = q;
}

int ofccl__gq_ce_streams(ofccl__gcomm_t *gc, ofccl__err_t *e)
{
    const ofccl_comm_t *comm = gc->comm;
    int rc = 0;

    if (gc->ce == NULL && (gc->ce = calloc((size_t)comm->size, sizeof(*gc->ce))) == NULL)
        return OFCCL_ERR_NO_MEMORY;
    if (gc->fork == NULL)
        rc = ofccl__gpu_event_create(gc->g, gc->dev, false, &gc->fork, e);
    for (int p = 0; rc == 0 && p < comm->size; p++)
        if (p != comm->rank && gc->ce[p] == NULL)
            rc = ofccl__gpu_stream_create(gc->g, gc->dev, &gc->ce[p], e);
    return rc;
}

/* Push `len` bytes from `src` to offset `dst_off` of every peer in `to` (its
 * output), each once it is READY, then set DONE[me] there. */
static int push(ofccl__req_t *r, const int *to, int nto, const void *src, size_t dst_off,
                size_t len, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = gc_of(r);
    struct ofccl__grq *q = q_of(r);
    const ofccl_comm_t *comm = r->comm;
    int me = comm->rank, n = comm->size, rc = 0;
    uint64_t v = v_of(r);

    if (!q->ce) {
        void *dst[OFCCL__GPU_COPY_DSTS];
        /* Where the source is not already in this rank's output (an
         * all-gather out of place), its own copy goes in the first launch. */
        char *own = q->peer[me] + dst_off;
        bool mine = own != (const char *)src && r->coll == OFCCL__AG;
        for (int i = 0; rc == 0 && i < nto; i++)
            rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                      flag(gc, me, ofccl__gf_ready(to[i])), v, e);
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
                                        flag(gc, me, OFCCL__GF_ABORT), e);
        }
        /* DONE by a kernel that reads the abort word: a stream released
         * after a failure skips the copies and must skip these too. */
        for (int i = 0; rc == 0 && i < nto; i += OFCCL__GPU_COPY_DSTS) {
            int k = OFCCL__MIN(nto - i, OFCCL__GPU_COPY_DSTS);
            for (int j = 0; j < k; j++)
                dst[j] = flag(gc, to[i + j], ofccl__gf_done(n, me));
            rc = ofccl__gpu_signal(gc->g, gc->dev, gc->comm->stream, dst, k, v,
                                   flag(gc, me, OFCCL__GF_ABORT), e);
        }
        return rc;
    }
    if ((rc = ofccl__gq_ce_streams(gc, e)) == 0)
        rc = ofccl__gpu_event_record(gc->g, gc->dev, gc->fork, gc->comm->stream, e);
    for (int i = 0; rc == 0 && i < nto; i++) {
        ofccl__gpu_stream_t s = gc->ce[to[i]];
        rc = ofccl__gpu_stream_wait_event(gc->g, gc->dev, s, gc->fork, e);
        if (rc == 0)
            rc =
                ofccl__gpu_wait_flag(gc->g, gc->dev, s, flag(gc, me, ofccl__gf_ready(to[i])), v, e);
        if (rc == 0)
            rc = ofccl__gpu_copy(gc->g, gc->dev, s, q->peer[to[i]] + dst_off, src, len, e);
        if (rc == 0)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, s, flag(gc, to[i], ofccl__gf_done(n, me)), v,
                                       e);
        if (rc == 0)
            rc = ofccl__gpu_write_flag(gc->g, gc->dev, s, flag(gc, me, ofccl__gf_sent(n, to[i])), v,
                                       e);
    }
    /* The caller's stream goes on once every push is out. */
    for (int i = 0; rc == 0 && i < nto; i++)
        rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                  flag(gc, me, ofccl__gf_sent(n, to[i])), v, e);
    return rc;
}

int ofccl__gq_begin(ofccl__req_t *r, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = gc_of(r);

    fp_publish(r, q_of(r));
    if (gc->done[r->slot] == NULL) {
        int rc = ofccl__gpu_event_create(gc->g, gc->dev, false, &gc->done[r->slot], e);
        if (rc)
            return rc;
    }
    if (gc->last != NULL) {
        int rc = ofccl__gpu_stream_wait_event(gc->g, gc->dev, gc->comm->stream, gc->last, e);
        if (rc)
            return rc;
    }
    /* A bucket's tensors into the flat buffer (this rank's shards into its
     * region, all-gather; every piece, reduce-scatter; the root's tensors,
     * broadcast). */
    if (q_of(r)->bucket && (r->coll != OFCCL__BC || r->root == r->comm->rank))
        return ofccl__gbucket_pack(r, q_of(r)->peer[r->comm->rank] + q_of(r)->off, e);
    return 0;
}

int ofccl__gq_end(ofccl__req_t *r, size_t bytes, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = gc_of(r);
    struct ofccl__grq *q = q_of(r);
    int rc = 0;

    if (q->bucket && (r->coll != OFCCL__BC || r->root != r->comm->rank))
        rc = ofccl__gbucket_unpack(r, q->peer[r->comm->rank] + q->off, e);
    else if (q->stage != NULL && bytes > 0)
        rc = ofccl__gpu_copy(gc->g, gc->dev, gc->comm->stream, q->stage,
                             q->peer[r->comm->rank] + q->off, bytes, e);
    if (rc == 0)
        rc = ofccl__gpu_event_record(gc->g, gc->dev, gc->done[r->slot], gc->comm->stream, e);
    if (rc == 0)
        gc->last = gc->done[r->slot];
    return rc;
}

int ofccl__gq_wait_done(ofccl__req_t *r, const int *from, int n, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = gc_of(r);
    int rc = 0;

    for (int i = 0; rc == 0 && i < n; i++)
        rc = ofccl__gpu_wait_flag(gc->g, gc->dev, gc->comm->stream,
                                  flag(gc, r->comm->rank, ofccl__gf_done(r->comm->size, from[i])),
                                  v_of(r), e);
    return rc;
}

int ofccl__gq_say_ready(ofccl__req_t *r, const int *to, int n, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = gc_of(r);
    int rc = 0;

    for (int i = 0; rc == 0 && i < n; i++)
        rc = ofccl__gpu_write_flag(gc->g, gc->dev, gc->comm->stream,
                                   flag(gc, to[i], ofccl__gf_ready(r->comm->rank)), v_of(r), e);
    return rc;
}

static int failed(ofccl__req_t *r, int rc, const ofccl__err_t *e)
{
    return ofccl__coll_fail(r, rc, "enqueuing it on the GPU stream: %s", e->msg);
}

static int ag_start(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = gc_of(r);
    struct ofccl__grq *q = q_of(r);
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
                                       flag(gc, peers[i], ofccl__gf_done(n, me)), v_of(r), &e);
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
    ofccl__gcomm_t *gc = gc_of(r);
    struct ofccl__grq *q = q_of(r);
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
                    rc = ofccl__gpu_write_flag(gc->g, gc->dev, gc->comm->stream,
                                               flag(gc, gc->peers[i], ofccl__gf_done(n, me)),
                                               v_of(r), &e);
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
                                      flag(gc, me, ofccl__gf_ready(succ)), v_of(r), &e);
        if (rc == 0)
            rc =
                ofccl__gpu_chain(gc->g, gc->dev, gc->comm->stream, src, next, r->block,
                                 chain_chunk(gc, r->block), gc->sms, me == root ? NULL : gc->dflags,
                                 last ? NULL : gc->dflags_seg->peer[succ] + gc->dflags_off,
                                 v_of(r) << 24, flag(gc, me, OFCCL__GF_ABORT), &e);
    }
    if (rc == 0)
        rc = ofccl__gq_end(r, r->block, &e);
    return rc ? failed(r, rc, &e) : 0;
}

static const char *waits_on(const ofccl__req_t *r, int p);
static void unwind_req(ofccl__req_t *r);

/* Whether this rank writes into p's output in this collective, and whether
 * p writes into this rank's (a reduce-scatter's ranks read instead). */
static void roles(const ofccl__req_t *r, int p, bool *to_p, bool *from_p)
{
    const struct ofccl__grq *q = &gc_of(r)->rq[r->slot];
    int me = r->comm->rank, n = r->comm->size;
    bool ag = q->coll == OFCCL__AG, chain = q->coll == OFCCL__BC && q->chain;

    *to_p = ag || (chain ? p == (me + 1) % n && (p - q->root + n) % n != 0 : me == q->root);
    *from_p = ag || (chain ? me != q->root && p == (me - 1 + n) % n : p == q->root);
    if (q->coll == OFCCL__PUSH)
        ofccl__gpush_roles(r, p, to_p, from_p);
    if (q->coll == OFCCL__RS)
        *to_p = *from_p = false;
}

/* A peer this request still waits for is known gone: release the stream at
 * once, with host stores alone (no CUDA call: the driver may hold one while
 * it takes the dead process's memory back), tell the others, and fail the
 * request naming the peer and what it owed. */
static int peer_gone(ofccl__req_t *r)
{
    char why[256];
    int code;

    for (int p = 0; p < r->comm->size; p++) {
        const char *owed = p != r->comm->rank ? waits_on(r, p) : NULL;
        if (owed == NULL || !ofccl__dead_known(r->comm, p, &code, why, sizeof(why)))
            continue;
        unwind_req(r);
        ofccl__notice_send(r->comm, r->seq, OFCCL__NOTICE_EXITED, p, -1);
        return ofccl__coll_fail(
            r, code, "%s; not complete after %llu ms; waiting for rank %d (%s)", why,
            (unsigned long long)((ofccl__coarse_ns() - r->start_ns) / 1000000), p, owed);
    }
    return 0;
}

static int progress(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = gc_of(r);
    ofccl__err_t e = {0};
    bool done;
    int rc;

    /* The end first, the arguments after: every peer whose data the end
     * waited for published its arguments before it sent any, so a mismatch
     * cannot slip between the two reads. */
    rc = ofccl__gpu_event_query(gc->g, gc->dev, gc->done[r->slot], &e);
    if (rc < 0)
        return ofccl__coll_fail(r, rc, "waiting for its end on the GPU: %s", e.msg);
    done = rc == 1;
    if ((rc = fp_check(r)) != 0 || (!done && (rc = peer_gone(r)) != 0))
        return rc;
    r->finished = done;
    return 0;
}

/* What this rank still waits for from p (the engine names it on failure):
 * the READY of a rank it writes to, the DONE of a rank that writes to it. */
static const char *waits_on(const ofccl__req_t *r, int p)
{
    const ofccl__gcomm_t *gc = gc_of(r);
    const struct ofccl__grq *q = &gc->rq[r->slot];
    int me = r->comm->rank, n = r->comm->size;
    bool chain = q->coll == OFCCL__BC && q->chain, writes_to_p, p_writes_here;

    roles(r, p, &writes_to_p, &p_writes_here);
    if (r->finished || p == me)
        return NULL;
    /* Reduce-scatter: this rank reads p's input once p says READY, and
     * waits for p's DONE reading its own. */
    if (q->coll == OFCCL__RS && flag_here(gc, ofccl__gf_ready(p)) < v_of(r))
        return "its input is not readable yet: its GPU stream has not reached this collective";
    if (q->coll == OFCCL__RS)
        return flag_here(gc, ofccl__gf_done(n, p)) < v_of(r)
                   ? "it has not finished reading this rank's input"
                   : NULL;
    if (writes_to_p && flag_here(gc, ofccl__gf_ready(p)) < v_of(r))
        return "its GPU stream has not reached this collective";
    /* The chain's data flags live in GPU memory: the host cannot read them. */
    if (p_writes_here && (chain || flag_here(gc, ofccl__gf_done(n, p)) < v_of(r)))
        return "its data has not arrived on this GPU";
    return NULL;
}

/* p said READY for this collective where it says it to this rank (a rank
 * this one writes to, every rank of a reduce-scatter); where it says
 * nothing, this rank cannot tell, and does not blame it. */
static bool reached(const ofccl__req_t *r, int p)
{
    bool to_p, from_p;

    roles(r, p, &to_p, &from_p);
    if (!to_p && q_of(r)->coll != OFCCL__RS)
        return true;
    return flag_here(gc_of(r), ofccl__gf_ready(p)) >= v_of(r);
}

/* Release this rank's stream for good (the request failed): the abort word
 * first (the kernels then copy nothing and signal nothing: a receiver never
 * sees DONE for data that did not come), then every flag it may wait on.
 * The copy-engine streams' READY waits are left alone where the peer may be
 * alive: released, they would copy into an output that peer may be using;
 * into a peer known gone they may go (its memory stays mapped here). */
static void unwind_req(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = gc_of(r);
    struct ofccl__grq *q = q_of(r);
    int me = r->comm->rank, n = r->comm->size, code;
    char why[8];

    if (q->released)
        return;
    q->released = true;
    atomic_store_explicit(&gc->fh[me][OFCCL__GF_ABORT], 1, memory_order_seq_cst);
    for (int p = 0; p < n; p++) {
        /* The copy kernel's waits are on the caller's stream, and it reads
         * the abort word. */
        if (!q->ce || (p != me && (ofccl__comm_gone(r->comm, p) ||
                                   ofccl__dead_known(r->comm, p, &code, why, sizeof(why)))))
            atomic_store_explicit(&gc->fh[me][ofccl__gf_ready(p)], OFCCL__GFLAG_ABORT,
                                  memory_order_release);
        atomic_store_explicit(&gc->fh[me][ofccl__gf_done(n, p)], OFCCL__GFLAG_ABORT,
                              memory_order_release);
        atomic_store_explicit(&gc->fh[me][ofccl__gf_sent(n, p)], OFCCL__GFLAG_ABORT,
                              memory_order_release);
    }
}

/* Until `ev` is done or the deadline: 1 done, 0 not, or an error. */
static int settle(const ofccl__gcomm_t *gc, ofccl__gpu_event_t ev, uint64_t deadline)
{
    ofccl__err_t e;
    int rc;

    while ((rc = ofccl__gpu_event_query(gc->g, gc->dev, ev, &e)) == 0 && ofccl__now_ns() < deadline)
        sched_yield();
    return rc;
}

bool ofccl__gpu_quiesce(ofccl__gcomm_t *gc)
{
    uint64_t deadline = ofccl__now_ns() + 2000000000ull;
    ofccl__gpu_event_t ev = NULL;
    ofccl__err_t e;
    bool all = true;

    for (int s = 0; s < OFCCL__GPU_SLOTS; s++) {
        ofccl__req_t *r = gc->rq[s].req;
        if (r == NULL || r->state != OFCCL__REQ_ACTIVE || r->algo_state != &gc->rq[s] ||
            gc->done[s] == NULL)
            continue;
        unwind_req(r);
        all &= settle(gc, gc->done[s], deadline) == 1;
    }
    /* The copy-engine streams too: one still waiting for a READY that never
     * came (a peer that may be alive) would read the flag region after it
     * is gone. */
    for (int p = 0; all && gc->ce != NULL && p < gc->comm->size; p++) {
        if (gc->ce[p] == NULL)
            continue;
        if (ev == NULL && ofccl__gpu_event_create(gc->g, gc->dev, false, &ev, &e) != 0)
            return false;
        all = ofccl__gpu_event_record(gc->g, gc->dev, ev, gc->ce[p], &e) == 0 &&
              settle(gc, ev, deadline) == 1;
    }
    if (ev != NULL)
        ofccl__gpu_event_destroy(gc->g, gc->dev, ev);
    return all;
}

/* The caller's `stream` waits for the request's end event. */
static int stream_wait(ofccl__req_t *r, ofccl_stream_t stream)
{
    ofccl__gcomm_t *gc = gc_of(r);
    ofccl__err_t e = {0};
    int rc = ofccl__gpu_stream_wait_event(gc->g, gc->dev, stream, gc->done[r->slot], &e);

    return rc ? ofccl__comm_fail(r->comm, rc, "ofccl_req_stream_wait: %s", e.msg) : 0;
}

#define GPU_ALGO(var, nm, kind, st)                                                                \
    const ofccl__algo_t var = {                                                                    \
        .size = sizeof(ofccl__algo_t),                                                             \
        .name = nm,                                                                                \
        .coll = kind,                                                                              \
        .wire_id = OFCCL__WIRE_GPU,                                                                \
        .flags = OFCCL__ALGO_STREAM,                                                               \
        .start = st,                                                                               \
        .progress = progress,                                                                      \
        .waits_on = waits_on,                                                                      \
        .reached = reached,                                                                        \
        .unwind = unwind_req,                                                                      \
        .stream_wait = stream_wait,                                                                \
    }
GPU_ALGO(ofccl__gpu_ag, "gpu", OFCCL__AG, ag_start);
GPU_ALGO(ofccl__gpu_bc, "gpu", OFCCL__BC, bc_start);
GPU_ALGO(ofccl__gpu_rs, "gpu", OFCCL__RS, ofccl__grs_start);
GPU_ALGO(ofccl__gpu_push, "gpu", OFCCL__PUSH, ofccl__gpush_start);
