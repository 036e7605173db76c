/*
 * Writes of a collective and their signals: the op contexts a request hands
 * the provider, posting with the signal the communicator uses (CQ data, or on
 * the atomic path a delivery-complete write followed by an in-order counter
 * add), and turning what arrives into per-unit and per-writer counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "trace.h"
#include "util.h"

/* ---- write ops ---- */
struct ofccl__wop_block {
    struct ofccl__wop_block *next;
    ofccl__wop_t w[OFCCL__WOP_BLOCK];
};

/* The most ops a request keeps out: per peer it writes to, a window of data
 * writes and their signals; per peer that writes to it, a descriptor and its
 * count (the atomic path). Flow control keeps it below this; the bound keeps
 * a stalled peer from growing the pool. */
static unsigned wop_cap(const ofccl__req_t *r)
{
    return (r->nto + r->nfrom) * (2 * r->depth + 2) + 2;
}

ofccl__wop_t *ofccl__wop_get(ofccl__req_t *r)
{
    ofccl__coll_state_t *cs = r->comm->coll;
    ofccl__wop_t *w;

    if (r->ops_out >= wop_cap(r))
        return NULL;
    if (cs->wop_free == NULL) {
        struct ofccl__wop_block *b = calloc(1, sizeof(*b));
        if (b == NULL) {
            if (r->ops_out == 0) /* nothing of its own to wait for */
                ofccl__coll_fail(r, OFCCL_ERR_NO_MEMORY,
                                 "no memory for write contexts (%zu allocated)", cs->nwops);
            return NULL;
        }
        b->next = cs->wop_blocks;
        cs->wop_blocks = b;
        cs->nwops += OFCCL__WOP_BLOCK;
        for (int k = OFCCL__WOP_BLOCK - 1; k >= 0; k--) {
            b->w[k].next_free = cs->wop_free;
            cs->wop_free = &b->w[k];
        }
    }
    w = cs->wop_free;
    cs->wop_free = w->next_free;
    w->req = r;
    return w;
}

static void wop_put(ofccl__wop_t *w)
{
    ofccl__coll_state_t *cs = w->req->comm->coll;

    w->req = NULL;
    w->next_free = cs->wop_free;
    cs->wop_free = w;
}

uint64_t ofccl__coll_op_contexts(const ofccl_comm_t *comm)
{
    return comm->coll != NULL ? comm->coll->nwops : 0;
}

void ofccl__wops_free(ofccl__coll_state_t *cs)
{
    while (cs->wop_blocks != NULL) {
        struct ofccl__wop_block *b = cs->wop_blocks;
        cs->wop_blocks = b->next;
        free(b);
    }
    cs->wop_free = NULL;
    cs->nwops = 0;
}

void ofccl__peer_lists(ofccl__req_t *r)
{
    r->nto = r->nfrom = 0;
    for (int p = 0; p < r->comm->size; p++) {
        if (r->i_write_to[p])
            r->to[r->nto++] = p;
        if (r->writes_to_me[p])
            r->from[r->nfrom++] = p;
    }
    memcpy(r->awaiting, r->to, r->nto * sizeof(*r->to));
    r->nawait = r->nto;
}

static void wop_done(ofccl__op_t *op, int status, const char *msg)
{
    ofccl__wop_t *w = (ofccl__wop_t *)op, done = *w; /* w goes back to the pool first */
    ofccl__req_t *r = w->req;

    r->ops_out--;
    wop_put(w);
    if (status) {
        /* A write to a peer that is gone (comm.c on_error marked it): the
         * request fails only if it still needs something from that peer
         * (engine.c); what this rank received before it went stands. */
        if (status == OFCCL_ERR_REMOTE_ERROR && ofccl__comm_gone(r->comm, done.peer)) {
            if (!done.atomic && done.unit != UINT32_MAX)
                r->inflight[done.peer]--;
            return;
        }
        /* The communicator already holds the message: its first cause where
         * it had failed before (comm.c on_error), and the code goes with it. */
        if (r->status == 0)
            r->status = r->comm->sticky ? r->comm->sticky : status;
        return;
    }
    if (done.atomic || done.unit == UINT32_MAX) {
        if (!done.atomic && r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC) /* descriptor landed */
            r->sig_mask[done.peer] |= 1ull << 63; /* pumped separately: see ofccl__desc_pump() */
        return;
    }
    r->inflight[done.peer]--;
    if (r->comm->ctx->trace != NULL)
        ofccl__trace_chunk(r, done.peer, done.unit, done.len, done.t0);
    if (r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC) /* unit: the k-th write to the peer */
        r->sig_mask[done.peer] |= 1ull << (done.unit - r->sig_next[done.peer]);
}

/* Post one provider op for request r; `kind` 0 = write(+data), 1 = atomic add. */
int ofccl__wop_post(ofccl__req_t *r, ofccl__wop_t *w, int kind, const void *src,
                    const ofccl__mr_t *mr, size_t len, const ofccl__rkey_t *rk, uint64_t roff,
                    uint64_t data)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__err_t e;
    int rc;

    w->op.cb = wop_done;
    if (!ofccl__comm_resolved(comm, w->peer) && (rc = ofccl__comm_resolve(comm, w->peer)) != 0) {
        wop_put(w);
        return ofccl__coll_fail(r, rc, "%s", comm->err.msg);
    }
    if (kind == 1)
        rc = ofccl__ep_atomic_add(comm->ep, w->peer, 1, rk, roff, &w->op, &e);
    else if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
        rc = ofccl__ep_writedata(comm->ep, w->peer, src, len, mr, rk, roff, data, &w->op, &e);
    else
        rc = ofccl__ep_write_dc(comm->ep, w->peer, src, len, mr, rk, roff, &w->op, &e);
    if (rc == OFCCL_ERR_AGAIN) {
        wop_put(w);
        return rc;
    }
    if (rc) {
        wop_put(w);
        return ofccl__coll_fail(r, rc, "posting to peer %d: %s", w->peer, e.msg);
    }
    r->ops_out++;
    comm->ops_pending++;
    return 0;
}

int ofccl__coll_put(ofccl__req_t *r, int peer, const void *src, const ofccl__mr_t *mr, size_t len,
                    uint64_t dst_off, uint32_t unit)
{
    ofccl__wop_t *w;
    int rc;

    if (!r->peer_ready[peer] || r->inflight[peer] >= r->depth)
        return OFCCL_ERR_AGAIN;
    /* Atomic path: the peer counts our writes in the order we signal them, so
     * writes are numbered per peer (k = sent[peer]); delivered ones wait in a
     * 63-bit window behind the oldest unsignalled one (bit 63 is the
     * descriptor's); never post past it. */
    if (r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC && r->sent[peer] - r->sig_next[peer] >= 63)
        return OFCCL_ERR_AGAIN;
    w = ofccl__wop_get(r);
    if (w == NULL)
        return OFCCL_ERR_AGAIN;
    w->peer = peer;
    w->unit = r->sent[peer];
    w->atomic = 0;
    w->len = len;
    w->t0 = r->comm->ctx->trace != NULL ? ofccl__now_ns() : 0;
    /* A zero-length write only signals: it goes to the peer's control region,
     * whatever (if anything) the peer announced. */
    rc = ofccl__wop_post(
        r, w, 0, src, mr, len, len ? &r->peer_rk[peer] : &r->comm->peer_ctrl[peer],
        len ? r->peer_off[peer] + dst_off : 0,
        (r->algo->flags & OFCCL__ALGO_EAGER)
            ? ofccl__sig_encode(OFCCL__SIG_EAGER, r->comm->id,
                                (uint32_t)(r->seq % OFCCL__EAGER_RING) | (uint32_t)r->comm->rank
                                                                             << 4)
            : ofccl__sig_encode(OFCCL__SIG_COLL, r->comm->id, r->slot | unit << OFCCL__SLOT_BITS));
    if (rc == 0) {
        r->inflight[peer]++;
        r->sent[peer]++;
    }
    return rc;
}

/* Atomic path: signal delivered units in order, one add per unit. */
int ofccl__sig_pump(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (unsigned i = 0; i < r->nto; i++) {
        int p = r->to[i];
        while (r->sig_mask[p] & 1) {
            ofccl__wop_t *w = ofccl__wop_get(r);
            int rc;
            if (w == NULL)
                return 0;
            w->peer = p;
            w->unit = r->sig_next[p];
            w->atomic = 1;
            rc = ofccl__wop_post(
                r, w, 1, NULL, NULL, 0, &comm->peer_ctrl[p],
                ofccl__ctrl_arr_cnt(comm->size, r->slot, comm->rank) * sizeof(uint64_t), 0);
            if (rc == OFCCL_ERR_AGAIN)
                return 0;
            if (rc)
                return rc;
            r->sig_mask[p] >>= 1;
            r->sig_next[p]++;
        }
    }
    return 0;
}

/* Atomic path: a descriptor write landed (bit 63 of sig_mask): count it at the peer. */
int ofccl__desc_pump(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (unsigned i = 0; i < r->nfrom; i++) { /* descriptors went to the writers */
        int p = r->from[i];
        ofccl__wop_t *w;
        int rc;

        if (!(r->sig_mask[p] >> 63))
            continue;
        if ((w = ofccl__wop_get(r)) == NULL)
            return 0;
        w->peer = p;
        w->unit = UINT32_MAX;
        w->atomic = 1;
        rc = ofccl__wop_post(
            r, w, 1, NULL, NULL, 0, &comm->peer_ctrl[p],
            ofccl__ctrl_desc_cnt(comm->size, r->slot, comm->rank) * sizeof(uint64_t), 0);
        if (rc == OFCCL_ERR_AGAIN)
            return 0;
        if (rc)
            return rc;
        r->sig_mask[p] &= ~(1ull << 63);
    }
    return 0;
}

/* Atomic path: fold per-writer counters into unit arrivals. */
void ofccl__arrivals_fold(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (unsigned i = 0; i < r->nfrom; i++) {
        int p = r->from[i];
        uint64_t v = atomic_load_explicit(&comm->ctrl[ofccl__ctrl_arr_cnt(comm->size, r->slot, p)],
                                          memory_order_acquire);
        if (r->seen[p] < v)
            ofccl__ctx_moved(comm->ctx);
        while (r->seen[p] < v) {
            uint32_t unit =
                r->algo->unit_of(r, p, (uint32_t)(r->seen[p] - r->seen[comm->size + p]));
            if (unit < OFCCL__MAX_UNITS)
                r->unit_cnt[unit]++;
            r->from_cnt[p]++;
            r->arrived++;
            r->seen[p]++;
            if (comm->ctx->trace != NULL && r->seen[p] == v)
                ofccl__trace_req_in(r, p);
        }
    }
}

/* ---- signal sinks (CQ data path) ---- */
void ofccl__on_coll_signal(void *arg, uint32_t payload)
{
    ofccl_comm_t *comm = arg;
    ofccl__req_t *r = &comm->coll->reqs[payload & (OFCCL__SLOTS - 1)];
    uint32_t unit = payload >> OFCCL__SLOT_BITS;

    int from;

    if (r->state != OFCCL__REQ_ACTIVE || unit >= OFCCL__MAX_UNITS ||
        (from = r->algo->writer_of(r, unit)) < 0 || from >= comm->size || !r->writes_to_me[from]) {
        comm->corrupt_signals++;
        return;
    }
    r->unit_cnt[unit]++;
    r->from_cnt[from]++;
    r->arrived++;
    if (comm->ctx->trace != NULL)
        ofccl__trace_req_in(r, from);
}
