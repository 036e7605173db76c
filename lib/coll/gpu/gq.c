/*
 * What every stream program of the GPU peer class shares (the programs:
 * gcoll.c all-gather and broadcast, grs.c reduce-scatter, gpush.c weight
 * push): the flag words of a request's version v (its sequence number + 1,
 * the same on every rank), where its buffer lies (locate, prepare), its
 * beginning and end on the stream, READY and DONE, and the engine's hooks
 * for a request whose program is on the stream: progress (its end event and
 * its peers' published arguments, checked with the engine's own check), what
 * it still waits for from each peer, how a failure releases this rank's
 * stream with host stores alone, and the teardown's quiesce.
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

static uint64_t flag_here(const ofccl__gcomm_t *gc, size_t word)
{
    return atomic_load_explicit(&gc->fh[gc->comm->rank][word], memory_order_acquire);
}

/* Publish this rank's arguments for the request's slot: peers compare. */
static void fp_publish(ofccl__req_t *r, const struct ofccl__grq *q)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    _Atomic uint64_t *w = &gc->fh[r->comm->rank][ofccl__gf_fp(r->comm->size, r->slot)];
    uint64_t v[FP_WORDS] = {ofccl__gq_v(r)};

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
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    const ofccl_comm_t *comm = r->comm;
    const _Atomic uint64_t *mine = &gc->fh[comm->rank][ofccl__gf_fp(comm->size, r->slot)];

    for (int p = 0; p < comm->size; p++) {
        const _Atomic uint64_t *w = &gc->fh[p][ofccl__gf_fp(comm->size, r->slot)];
        uint64_t v[FP_WORDS];
        int rc;

        if (p == comm->rank ||
            atomic_load_explicit(&w[FP_SEQ], memory_order_acquire) != ofccl__gq_v(r))
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

/* A bucket's bytes move on the communicator's stream (the padding left as
 * it is: it is gathered or reduced into padding, never copied out). */
static int stream_copy(ofccl__req_t *r, void *dst, const void *src, size_t len, void *e)
{
    return ofccl__gq_copy(ofccl__gq_gc(r), dst, src, len, e);
}

int ofccl__gq_begin(ofccl__req_t *r, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);

    fp_publish(r, ofccl__gq_rq(r));
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
    if (ofccl__gq_rq(r)->bucket && (r->coll != OFCCL__BC || r->root == r->comm->rank)) {
        const ofccl__bucket_io_t io = {stream_copy, NULL, e};
        return ofccl__bucket_pack(r, ofccl__gq_rq(r)->peer[r->comm->rank] + ofccl__gq_rq(r)->off,
                                  &io);
    }
    return 0;
}

int ofccl__gq_end(ofccl__req_t *r, size_t bytes, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    struct ofccl__grq *q = ofccl__gq_rq(r);
    int rc = 0;

    if (q->bucket && (r->coll != OFCCL__BC || r->root != r->comm->rank)) {
        const ofccl__bucket_io_t io = {stream_copy, NULL, e};
        const char *flat = q->peer[r->comm->rank] + q->off;
        rc = ofccl__bucket_unpack(r, flat, flat + (size_t)r->comm->rank * r->block, &io);
    } else if (q->stage != NULL && bytes > 0)
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
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    int rc = 0;

    for (int i = 0; rc == 0 && i < n; i++)
        rc = ofccl__gpu_wait_flag(
            gc->g, gc->dev, gc->comm->stream,
            ofccl__gq_flag(gc, r->comm->rank, ofccl__gf_done(r->comm->size, from[i])),
            ofccl__gq_v(r), e);
    return rc;
}

int ofccl__gq_say_ready(ofccl__req_t *r, const int *to, int n, ofccl__err_t *e)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    int rc = 0;

    for (int i = 0; rc == 0 && i < n; i++)
        rc = ofccl__gpu_write_flag(gc->g, gc->dev, gc->comm->stream,
                                   ofccl__gq_flag(gc, to[i], ofccl__gf_ready(r->comm->rank)),
                                   ofccl__gq_v(r), e);
    return rc;
}

/* Whether this rank writes into p's output in this collective, and whether
 * p writes into this rank's (a reduce-scatter's ranks read instead). */
static void roles(const ofccl__req_t *r, int p, bool *to_p, bool *from_p)
{
    const struct ofccl__grq *q = ofccl__gq_rq(r);
    int me = r->comm->rank, n = r->comm->size;
    bool ag = q->coll == OFCCL__AG, chain = q->coll == OFCCL__BC && q->chain;

    *to_p = ag || (chain ? p == (me + 1) % n && (p - q->root + n) % n != 0 : me == q->root);
    *from_p = ag || (chain ? me != q->root && p == (me - 1 + n) % n : p == q->root);
    if (q->roles != NULL) /* an algorithm's own (the weight push) */
        q->roles(r, p, to_p, from_p);
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
        const char *owed = p != r->comm->rank ? ofccl__gq_waits_on(r, p) : NULL;
        if (owed == NULL || !ofccl__dead_known(r->comm, p, &code, why, sizeof(why)))
            continue;
        ofccl__gq_unwind(r);
        ofccl__notice_send(r->comm, r->seq, OFCCL__NOTICE_EXITED, p, -1);
        return ofccl__coll_fail(
            r, code, "%s; not complete after %llu ms; waiting for rank %d (%s)", why,
            (unsigned long long)((ofccl__coarse_ns() - r->start_ns) / 1000000), p, owed);
    }
    return 0;
}

int ofccl__gq_progress(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
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
const char *ofccl__gq_waits_on(const ofccl__req_t *r, int p)
{
    const ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    const struct ofccl__grq *q = &gc->rq[r->slot];
    int me = r->comm->rank, n = r->comm->size;
    bool chain = q->coll == OFCCL__BC && q->chain, writes_to_p, p_writes_here;

    roles(r, p, &writes_to_p, &p_writes_here);
    if (r->finished || p == me)
        return NULL;
    /* Reduce-scatter: this rank reads p's input once p says READY, and
     * waits for p's DONE reading its own. */
    if (q->coll == OFCCL__RS && flag_here(gc, ofccl__gf_ready(p)) < ofccl__gq_v(r))
        return "its input is not readable yet: its GPU stream has not reached this collective";
    if (q->coll == OFCCL__RS)
        return flag_here(gc, ofccl__gf_done(n, p)) < ofccl__gq_v(r)
                   ? "it has not finished reading this rank's input"
                   : NULL;
    if (writes_to_p && flag_here(gc, ofccl__gf_ready(p)) < ofccl__gq_v(r))
        return "its GPU stream has not reached this collective";
    /* The chain's data flags live in GPU memory: the host cannot read them. */
    if (p_writes_here && (chain || flag_here(gc, ofccl__gf_done(n, p)) < ofccl__gq_v(r)))
        return "its data has not arrived on this GPU";
    return NULL;
}

/* p said READY for this collective where it says it to this rank (a rank
 * this one writes to, every rank of a reduce-scatter); where it says
 * nothing, this rank cannot tell, and does not blame it. */
bool ofccl__gq_reached(const ofccl__req_t *r, int p)
{
    bool to_p, from_p;

    roles(r, p, &to_p, &from_p);
    if (!to_p && ofccl__gq_rq(r)->coll != OFCCL__RS)
        return true;
    return flag_here(ofccl__gq_gc(r), ofccl__gf_ready(p)) >= ofccl__gq_v(r);
}

/* Release this rank's stream for good (the request failed): the abort word
 * first (the kernels then copy nothing and signal nothing: a receiver never
 * sees DONE for data that did not come), then every flag it may wait on.
 * The copy-engine streams' READY waits are left alone where the peer may be
 * alive: released, they would copy into an output that peer may be using;
 * into a peer known gone they may go (its memory stays mapped here). */
void ofccl__gq_unwind(ofccl__req_t *r)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    struct ofccl__grq *q = ofccl__gq_rq(r);
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
        ofccl__gq_unwind(r);
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
int ofccl__gq_stream_wait(ofccl__req_t *r, ofccl_stream_t stream)
{
    ofccl__gcomm_t *gc = ofccl__gq_gc(r);
    ofccl__err_t e = {0};
    int rc = ofccl__gpu_stream_wait_event(gc->g, gc->dev, stream, gc->done[r->slot], &e);

    return rc ? ofccl__comm_fail(r->comm, rc, "ofccl_req_stream_wait: %s", e.msg) : 0;
}
