/*
 * The request engine: a collective is a state machine (post -> progress ->
 * complete) advanced only from counters. Claiming a slot, planning and
 * announcing, the per-request progress loop (its deadline and dead-peer
 * checks: verdict.c), and completion. Algorithms (lib/coll) plug in through
 * ofccl__algo_t, and reach their peers through peer_access.c; the engine runs
 * what they hand it and never names one.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "exec.h"
#include "util.h"
#include "pool.h"
#include "trace.h"

/* ---- init ---- */
int ofccl__coll_init(ofccl_comm_t *comm)
{
    ofccl__coll_state_t *cs = calloc(1, sizeof(*cs));
    size_t n = (size_t)comm->size;

    if (cs == NULL)
        return OFCCL_ERR_NO_MEMORY;
    comm->coll = cs;
    cs->desc_flag = calloc(OFCCL__SLOTS * n, 1);
    cs->desc_seen = calloc(OFCCL__SLOTS * n, sizeof(uint64_t));
    cs->eager_seen = calloc(OFCCL__EAGER_RING * n, 1);
    if (!cs->desc_flag || !cs->desc_seen || !cs->eager_seen)
        return OFCCL_ERR_NO_MEMORY;
    /* Everything a request needs is allocated here, once: none on the data path. */
    for (int s = 0; s < OFCCL__SLOTS; s++) {
        ofccl__req_t *r = &cs->reqs[s];
        r->comm = comm;
        r->slot = (unsigned)s;
        /* The per-peer state a new collective starts from zero, in one
         * block so that posting clears it with one memset. */
        r->peer_state_bytes = n * (sizeof(*r->sig_mask) + 5 * sizeof(uint32_t) + 3);
        r->sig_mask = calloc(1, r->peer_state_bytes);
        if (r->sig_mask != NULL) {
            r->sent = (uint32_t *)(r->sig_mask + n);
            r->inflight = r->sent + n;
            r->sig_next = r->inflight + n;
            r->from_cnt = r->sig_next + n;
            r->out_cnt = r->from_cnt + n;
            r->writes_to_me = (uint8_t *)(r->out_cnt + n);
            r->i_write_to = r->writes_to_me + n;
            r->peer_ready = r->i_write_to + n;
        }
        r->peer_rk = calloc(n, sizeof(*r->peer_rk));
        r->peer_off = calloc(n, sizeof(*r->peer_off));
        r->unit_cnt = calloc(OFCCL__MAX_UNITS, sizeof(*r->unit_cnt));
        r->seen = calloc(2 * n, sizeof(*r->seen));
        r->to = calloc(3 * n, sizeof(*r->to)); /* and from, awaiting */
        if (r->to != NULL) {
            r->from = r->to + n;
            r->awaiting = r->from + n;
        }
        r->srcs = calloc(n, sizeof(*r->srcs));
        r->priv = calloc(1, OFCCL__ALGO_PRIV_FIXED + n * OFCCL__ALGO_PRIV_PER_PEER);
        if (comm->ctx->trace != NULL && (r->tr = calloc(n, sizeof(*r->tr))) == NULL)
            return OFCCL_ERR_NO_MEMORY;
        if (!r->sig_mask || !r->peer_rk || !r->peer_off || !r->unit_cnt || !r->seen || !r->to ||
            !r->srcs || !r->priv)
            return OFCCL_ERR_NO_MEMORY;
    }
    cs->eager_bytes = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_EAGER_BYTES);
    cs->eager_slot = ofccl__ctrl_eager_slot_bytes(comm->size, cs->eager_bytes);
    ofccl__comm_set_sink(comm, OFCCL__SIG_COLL, ofccl__on_coll_signal, comm);
    ofccl__comm_set_sink(comm, OFCCL__SIG_DESC, ofccl__on_desc_signal, comm);
    ofccl__comm_set_sink(comm, OFCCL__SIG_EAGER, ofccl__on_eager_signal, comm);
    return 0;
}

void ofccl__coll_fini(ofccl_comm_t *comm)
{
    ofccl__coll_state_t *cs = comm->coll;

    if (cs == NULL)
        return;
    for (int s = 0; s < OFCCL__SLOTS; s++) {
        ofccl__req_t *r = &cs->reqs[s];
        free(r->sig_mask); /* and the rest of the per-peer state block */
        free(r->peer_rk);
        free(r->peer_off);
        free(r->unit_cnt);
        free(r->seen);
        free(r->to); /* and from, awaiting */
        free(r->srcs);
        free(r->priv);
        free(r->tensors);
        free(r->tr);
    }
    free(cs->desc_flag);
    free(cs->desc_seen);
    free(cs->eager_seen);
    ofccl__wops_free(cs);
    free(cs);
    comm->coll = NULL;
}

/* ---- posting ---- */
static void req_reset(ofccl__req_t *r)
{
    memset(r->sig_mask, 0, r->peer_state_bytes);
    r->status = 0;
    r->finished = 0;
    r->finishing = 0;
    /* Host memory until the entry point learns its buffers' kinds. */
    r->exec = r->io = &r->comm->ctx->execs.ex[0];
    r->exec_busy = r->io_busy = false;
    r->stream_ord = r->gated = false;
    r->mark = 0;
    r->in_pieces = r->in_passed = 0;
    r->in_ready = SIZE_MAX;
    r->call_mem = NULL;
    r->word = NULL;
    r->arrived = 0;
    r->reduced = 0;
    r->descs_sent = 0;
    r->nto = r->nfrom = r->nawait = 0; /* no peers until planned */
    r->ops_out = 0;
    r->flush_ns = 0;
    r->named = 0;
    r->copy_out = NULL;
    r->finish = NULL;
    r->out_step = NULL;
    r->tag = 0;
    r->algo_state = NULL;
    r->win2 = ofccl__mem_ref(NULL, NULL);
    r->out = NULL;
    r->staging_idx = -1;
    r->bucket = 0;
    r->src = r->dst = r->fwd = ofccl__mem_ref(NULL, NULL);
}

/* Claim the next sequence number's slot. */
int ofccl__coll_begin(ofccl_comm_t *comm, int coll, ofccl__req_t **out)
{
    ofccl__coll_state_t *cs = comm->coll;
    ofccl__req_t *r = &cs->reqs[cs->next_seq % OFCCL__SLOTS];

    int rc = ofccl__comm_check_at(comm, ofccl__coll_name(coll), ofccl__pos_coll(cs->next_seq));

    if (rc)
        return rc;
    if (r->state != OFCCL__REQ_FREE)
        return ofccl__comm_fail(comm, OFCCL_ERR_AGAIN,
                                "%s: %d collectives already outstanding (request of #%llu not "
                                "freed); complete and free one first",
                                ofccl__coll_name(coll), OFCCL__SLOTS, (unsigned long long)r->seq);
    req_reset(r);
    r->coll = coll;
    r->seq = cs->next_seq;
    *out = r;
    return 0;
}

/* A stream-ordered request: no plan, descriptors or units; its algorithm
 * enqueues it whole, and a failure to do so releases what it enqueued. */
static int stream_start(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__err_t e;
    int rc;

    /* Its program is on the caller's stream: nothing for the engine to gate. */
    r->stream_ord = r->gated = false;
    /* Nobody polls a stream: something must watch it (progress.c). */
    if ((rc = ofccl__watch_arm(comm->ctx, false, &e)) != 0)
        return ofccl__comm_fail(comm, rc, "%s: %s", ofccl__coll_name(r->coll), e.msg);
    r->start_ns = ofccl__coarse_ns();
    r->deadline_ns = ofccl__comm_deadline(comm, r->start_ns);
    r->state = OFCCL__REQ_ACTIVE;
    ofccl__coll_history(r, 0);
    comm->coll->all_pairs[r->seq % OFCCL__SLOTS] = false;
    comm->coll->next_seq++;
    if ((rc = r->algo->start(r)) != 0 && r->algo->unwind != NULL)
        r->algo->unwind(r);
    return rc;
}

static int begin_moving(ofccl__req_t *r);

/* Plan, announce and activate a prepared request. */
int ofccl__coll_start(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    /* Unit numbers identify their writer (direct: writer * nchunks + chunk). */
    size_t max_units = OFCCL__MAX_UNITS / (size_t)comm->size;
    int rc;

    r->seq = comm->coll->next_seq;
#ifdef OFCCL_FAULT_INJECTION
    if (comm->ctx->kill_at != 0 && r->seq + 1 == comm->ctx->kill_at) {
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_COLL,
                    "OFCCL_FAULT: killing this rank at collective #%llu",
                    (unsigned long long)r->seq);
        raise(SIGKILL);
    }
#endif
    if (r->algo->flags & OFCCL__ALGO_STREAM)
        return stream_start(r);
    r->dst_need = (uint64_t)comm->size * r->block;
    if (r->algo->flags & OFCCL__ALGO_EAGER) {
        /* One {header, block} per writer, counted per ring slot, not per unit. */
        r->depth = 1;
        r->chunk = r->block;
        r->nchunks = 1;
    } else {
        r->depth = (unsigned)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_DEPTH);
        r->chunk = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_CHUNK_BYTES);
        r->chunk -= r->chunk % r->esize;
        r->nchunks = r->block ? (unsigned)((r->block + r->chunk - 1) / r->chunk) : 0;
        if (r->nchunks > max_units) { /* keep unit numbers within the signal's bits */
            r->nchunks = (unsigned)max_units;
            r->chunk = (r->block + max_units - 1) / max_units;
            r->chunk += (r->esize - r->chunk % r->esize) % r->esize;
            r->nchunks = (unsigned)((r->block + r->chunk - 1) / r->chunk);
        }
    }
    r->unit_span = 0;
    if (r->algo->priv_fixed > OFCCL__ALGO_PRIV_FIXED ||
        r->algo->priv_per_peer > OFCCL__ALGO_PRIV_PER_PEER)
        return ofccl__coll_fail(r, OFCCL_ERR_INTERNAL,
                                "the algorithm keeps more state than a request holds");
    memset(r->priv, 0, r->algo->priv_fixed + (size_t)comm->size * r->algo->priv_per_peer);
    rc = r->algo->plan(r);
    if (rc)
        return rc;
    ofccl__peer_lists(r);
    /* Lazily created: the peers this collective exchanges with, before
     * anything is posted (their control regions' keys included). */
    if (comm->resolved != NULL &&
        (rc = ofccl__comm_resolve_set(comm, r->i_write_to, r->writes_to_me)) != 0)
        return rc;
    /* Unit numbers are step * nchunks + chunk, with fewer steps than ranks,
     * unless the plan says how many it uses: clear only those (the whole
     * table is 64 KiB, longer than a small collective). */
    if (!(r->algo->flags & OFCCL__ALGO_EAGER))
        memset(r->unit_cnt, 0,
               sizeof(*r->unit_cnt) *
                   OFCCL__MIN((size_t)OFCCL__MAX_UNITS,
                              r->unit_span ? (size_t)r->unit_span
                                           : (size_t)comm->size * OFCCL__MAX(r->nchunks, 1u)));
    r->fingerprint = ofccl__fingerprint(r);
    for (unsigned i = 0; i < r->nfrom && comm->signal_mode == OFCCL__SIGNAL_ATOMIC; i++) {
        /* Atomic path: counters are monotonic, remember where we start. */
        int p = r->from[i];
        r->seen[p] = atomic_load_explicit(&comm->ctrl[ofccl__ctrl_arr_cnt(comm->size, r->slot, p)],
                                          memory_order_acquire);
        r->seen[comm->size + p] = r->seen[p];
    }
    /* Stream-ordered: the caller's stream is marked behind the copies into
     * staging and waits for the request's end; the request itself waits for
     * the mark (req_progress) before it announces or moves anything. */
    if (r->stream_ord) {
        ofccl__err_t e;
        if ((rc = ofccl__watch_arm(comm->ctx, true, &e)) != 0)
            return ofccl__comm_fail(comm, rc, "%s: %s", ofccl__coll_name(r->coll), e.msg);
        if ((rc = ofccl__exec_enter(r)) != 0)
            return rc;
    }
    /* Deadlines are seconds and the history reports milliseconds: the coarse
     * clock (a memory read) is precise enough and costs no timer read. */
    r->start_ns = ofccl__coarse_ns();
    r->deadline_ns = ofccl__comm_deadline(comm, r->start_ns);
    if (comm->ctx->trace != NULL)
        ofccl__trace_req_start(r);
    r->state = OFCCL__REQ_ACTIVE;
    ofccl__coll_history(r, 0);
    comm->coll->all_pairs[r->seq % OFCCL__SLOTS] = (r->algo->flags & OFCCL__ALGO_ALL_PAIRS) != 0;
    comm->coll->next_seq++;
    if (r->stream_ord) {
        OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_COLL,
                     "%s #%llu posted, stream-ordered: %s, %zu bytes per rank",
                     ofccl__coll_name(r->coll), (unsigned long long)r->seq, r->algo->name,
                     r->block);
        return 0; /* the rest once the caller's stream reaches it (req_progress) */
    }
    return begin_moving(r);
}

/* What a request does first once it may touch its buffers: announce them
 * (descriptors) and let the algorithm start. */
static int begin_moving(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int rc;

    if (r->algo->flags & OFCCL__ALGO_EAGER) {
        /* No descriptors: every destination is a known slot of a control region. */
        for (unsigned i = 0; i < r->nto; i++) {
            int p = r->to[i];
            r->peer_ready[p] = 1;
            r->peer_rk[p] = comm->peer_ctrl[p];
            r->peer_off[p] = ofccl__eager_in_offset(comm, r->seq, comm->rank);
        }
        r->nawait = 0;
        r->descs_sent = r->nfrom;
    } else if ((rc = ofccl__desc_send(r)) != 0) {
        return rc;
    }
    if (r->algo->start != NULL && (rc = r->algo->start(r)) < 0)
        return rc;
    OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_COLL,
                 "%s #%llu posted: %s, %zu bytes per rank, %u chunks of %zu, depth %u",
                 ofccl__coll_name(r->coll), (unsigned long long)r->seq, r->algo->name, r->block,
                 r->nchunks, r->chunk, r->depth);
    return 0;
}

/* Run the finish step once; the request is done once its executor work (the
 * finish step's copies, or what a failed request left in flight) is, and only
 * then is its staging released. Called again from progress until then. */
static void complete(ofccl__req_t *r)
{
    if (!r->finishing) {
        r->finishing = 1;
        ofccl__ctx_moved(r->comm->ctx);
        ofccl__coll_history(r, 1);
        r->finish_ns = 0;
        if (r->status == 0 && r->finish != NULL) {
            if (r->comm->ctx->trace != NULL)
                r->finish_ns = ofccl__now_ns();
            r->finish(r);
        }
    }
    if (!ofccl__exec_idle(r) && (ofccl__exec_pump(r), !ofccl__exec_idle(r)))
        return;
    /* Failed before the caller's stream reached it: the copies into its
     * staging are still on that stream, so the staging waits for them. */
    if (r->gated && ofccl__exec_gate(r) == 0)
        return;
    if (ofccl__exec_in_done(r) == 0)
        return;
    if (r->algo == NULL) { /* completed at post (ofccl__coll_done_now) */
        r->state = OFCCL__REQ_DONE;
        return;
    }
    if (r->status != 0 && r->algo != NULL && r->algo->unwind != NULL)
        r->algo->unwind(r);
    if (r->stream_ord) /* the caller's stream goes on: host stores alone */
        ofccl__exec_release(r);
    if (r->comm->ctx->trace != NULL)
        ofccl__trace_req_done(r, r->finish_ns);
    if (r->staging_idx >= 0) {
        ofccl__stage_release(r->comm, r->coll, r->staging_idx);
        r->staging_idx = -1;
    }
    r->state = OFCCL__REQ_DONE;
    if (r->call_mem != NULL) {
        r->src = r->dst = ofccl__mem_ref(NULL, NULL);
        ofccl__mem_call_release(r);
    }
}

/* Not complete while a delivered write's signal (atomic path) is not posted yet,
 * or while a descriptor we are owed has not arrived: even a collective with
 * nothing to send must consume it, or it would be mistaken for the next
 * collective's on this slot. */
static int signals_owed(const ofccl__req_t *r)
{
    if (r->nawait > 0)
        return 1;
    /* Nothing is owed to a peer that is gone (its writes failed). */
    for (unsigned i = 0; i < r->nto; i++)
        if (r->sig_mask[r->to[i]] && !ofccl__comm_gone(r->comm, r->to[i]))
            return 1;
    for (unsigned i = 0; i < r->nfrom; i++)
        if (r->sig_mask[r->from[i]] && !ofccl__comm_gone(r->comm, r->from[i]))
            return 1;
    return 0;
}

/* After a mismatch the peers are alive and wait for our descriptors: deliver
 * them (within a second) before the request completes, so that each peer finds
 * the difference itself and names it rather than timing out or seeing this
 * rank leave. 1 while that is still going on. */
static bool flush_descriptors(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    uint64_t now = ofccl__coarse_ns();
    bool pending = r->status == OFCCL_ERR_MISMATCH &&
                   (r->descs_sent < r->nfrom || r->ops_out > 0 || ofccl__layout_busy(comm));

    /* A peer that has not posted yet writes its descriptor here when it does:
     * leaving before would fail that write ("peer gone") instead of letting it
     * find the difference in ours. Not once a mismatch notice about this
     * collective went out or came in: every rank knows, and one that had not
     * posted yet refuses to (it would be waited for in vain). */
    for (unsigned i = 0; i < r->nfrom && !pending && r->status == OFCCL_ERR_MISMATCH; i++)
        pending = (r->sig_mask[r->from[i]] >> 63) != 0;
    for (unsigned i = 0; i < r->nawait && !pending && r->status == OFCCL_ERR_MISMATCH &&
                         !ofccl__notice_told(comm, r->seq);
         i++)
        pending = ofccl__desc_owed(r, r->awaiting[i]);
    /* Failure notices to the other ranks go out before we may leave. */
    pending |= ofccl__notice_busy(comm);
    if (!pending)
        return false;
    if (comm->ops_pending > 0) /* their completions come from the endpoint */
        ofccl__comm_progress(comm);
    if (r->flush_ns == 0)
        r->flush_ns = now + 1000000000ull;
    if (now > r->flush_ns)
        return false;
    if (r->status == OFCCL_ERR_MISMATCH && ofccl__desc_send(r) == 0 &&
        comm->signal_mode == OFCCL__SIGNAL_ATOMIC)
        ofccl__desc_pump(r);
    return true;
}

static int req_progress(ofccl__req_t *r, bool check_clock)
{
    ofccl_comm_t *comm = r->comm;
    int rc;

    if (r->state != OFCCL__REQ_ACTIVE)
        return 0;
    if (r->finishing) {
        complete(r);
        return 0;
    }
    /* Work an executor completes later (a device's): tested on every pass. */
    if (!ofccl__exec_idle(r))
        ofccl__exec_pump(r);
    /* Stream-ordered and gated: nothing moves before the caller's stream
     * has reached the request (its mark); the clock runs meanwhile. */
    if (r->gated && r->status == 0 && ofccl__exec_gate(r) == 1 && (rc = begin_moving(r)) != 0 &&
        r->status == 0)
        r->status = rc;
    /* A failure at this collective or an earlier one: this one cannot
     * complete on every rank. One after it does not concern it. */
    if (r->status == 0 && ofccl__comm_covers(comm, ofccl__pos_coll(r->seq)))
        r->status = comm->sticky;
    if (r->status == 0 && !(r->algo->flags & (OFCCL__ALGO_EAGER | OFCCL__ALGO_STREAM)) &&
        comm->size > 1) {
        int from = ofccl__eager_sender(comm, r->seq);
        if (from >= 0)
            ofccl__notice_mismatch(comm, r->seq, from, OFCCL__FIELD_PATH);
        if (from >= 0)
            ofccl__coll_fail(r, OFCCL_ERR_MISMATCH,
                             "rank %d posted it on the eager path, rank %d on the descriptor one: "
                             "the count (or OFCCL_EAGER_BYTES) differs",
                             from, comm->rank);
    }
    if (r->gated) {
        /* not yet: only the clock and the failures below */
    } else if (r->status == 0 && (r->algo->flags & OFCCL__ALGO_STREAM)) {
        /* Its algorithm polls the stream's end (and the peers' arguments). */
        if (!r->finished && (rc = r->algo->progress(r)) != 0 && rc != OFCCL_ERR_AGAIN &&
            r->status == 0)
            r->status = rc;
    } else if (r->status == 0) {
        rc = 0;
        if (!(r->algo->flags & OFCCL__ALGO_EAGER)) { /* eager: no descriptors (coll_start) */
            rc = ofccl__desc_send(r);
            if (rc == 0)
                rc = ofccl__desc_take(r);
        }
        if (rc == 0 && comm->signal_mode == OFCCL__SIGNAL_ATOMIC) {
            ofccl__arrivals_fold(r);
            rc = ofccl__desc_pump(r);
        }
        if (rc == 0 && !r->finished)
            rc = r->algo->progress(r);
        if (rc == 0 && r->out_step != NULL)
            r->out_step(r);
        if (rc == 0 && comm->signal_mode == OFCCL__SIGNAL_ATOMIC)
            rc = ofccl__sig_pump(r);
        if (rc && rc != OFCCL_ERR_AGAIN && r->status == 0)
            r->status = rc;
    }
    if (r->status == 0 && !r->gated && r->finished && r->ops_out == 0 && !signals_owed(r) &&
        r->descs_sent == r->nfrom && ofccl__exec_idle(r)) {
        complete(r);
        return 0;
    }
    /* Deadlines are seconds and a dead peer is polled per millisecond: a
     * clock read on every pass of a spinning wait would be most of its cost. */
    if (check_clock && r->status == 0)
        ofccl__coll_check_failed(r);
    /* Failed first on a peer's mismatch notice (read when an op to a peer
     * that left after it failed): the descriptors and eager headers that
     * landed here stay readable, and may show this rank the field itself
     * (its message then names it, after the notice's). */
    if (r->status != 0 && !r->named && comm->notice_first &&
        comm->notice_in == OFCCL__NOTICE_MISMATCH) {
        r->named = 1;
        (void)(r->algo->flags & OFCCL__ALGO_EAGER ? ofccl__eager_arrived(r) : ofccl__desc_take(r));
    }
    if (r->status != 0 && flush_descriptors(r))
        return 0;
    /* A failed request completes once its own ops are back (or the comm is dead). */
    if (r->status != 0 && (r->ops_out == 0 || comm->sticky))
        complete(r);
    return 0;
}

void ofccl__coll_progress_req(ofccl__req_t *r)
{
    req_progress(r, false);
}

int ofccl__coll_progress(ofccl_comm_t *comm, bool check_clock)
{
    int rc = ofccl__comm_progress(comm);

    for (int s = 0; s < OFCCL__SLOTS; s++)
        req_progress(&comm->coll->reqs[s], check_clock);
    return rc;
}

void ofccl__coll_done_now(ofccl__req_t *r, int status)
{
    r->seq = r->comm->coll->next_seq++;
    r->algo = NULL;
    /* On device memory its copies went on the caller's stream, in order:
     * nothing for the stream or the request to wait for. */
    r->gated = r->stream_ord = false;
    r->status = status;
    r->state = OFCCL__REQ_DONE;
    if (!ofccl__exec_idle(r)) { /* done once its executor's copies are (progress) */
        r->state = OFCCL__REQ_ACTIVE;
        r->finishing = 1;
    }
}

bool ofccl__coll_lockfree_watch(const ofccl__req_t *r)
{
    return r->state == OFCCL__REQ_ACTIVE && r->algo != NULL &&
           (r->algo->flags & OFCCL__ALGO_EAGER) && r->comm->peer_ctrl_at != NULL;
}

bool ofccl__coll_uses(const ofccl_comm_t *comm, const void *algo_state, bool unfreed)
{
    for (int s = 0; comm->coll != NULL && s < OFCCL__SLOTS; s++) {
        const ofccl__req_t *r = &comm->coll->reqs[s];
        if ((r->state == OFCCL__REQ_ACTIVE || (unfreed && r->state != OFCCL__REQ_FREE)) &&
            r->algo_state == algo_state)
            return true;
    }
    return false;
}
