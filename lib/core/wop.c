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
ofccl__wop_t *ofccl__wop_get(ofccl__req_t *r)
{
    for (unsigned k = 0; k < r->nwops; k++)
        if (r->wops[k].req == NULL) {
            r->wops[k].req = r;
            return &r->wops[k];
        }
    return NULL;
}

static void wop_done(ofccl__op_t *op, int status, const char *msg)
{
    ofccl__wop_t *w = (ofccl__wop_t *)op;
    ofccl__req_t *r = w->req;

    r->ops_out--;
    w->req = NULL;
    if (status) {
        /* The communicator already holds the message: its first cause where
         * it had failed before (comm.c on_error), and the code goes with it. */
        if (r->status == 0)
            r->status = r->comm->sticky ? r->comm->sticky : status;
        return;
    }
    if (w->atomic || w->unit == UINT32_MAX) {
        if (!w->atomic && r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC) /* descriptor landed */
            r->sig_mask[w->peer] |= 1ull << 63; /* pumped separately: see ofccl__desc_pump() */
        return;
    }
    r->inflight[w->peer]--;
    if (r->comm->ctx->trace != NULL)
        ofccl__trace_chunk(r, w->peer, w->unit, w->len, w->t0);
    if (r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC) /* w->unit: the k-th write to the peer */
        r->sig_mask[w->peer] |= 1ull << (w->unit - r->sig_next[w->peer]);
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
        w->req = NULL;
        return ofccl__coll_fail(r, rc, "%s", comm->err.msg);
    }
    if (kind == 1)
        rc = ofccl__ep_atomic_add(comm->ep, w->peer, 1, rk, roff, &w->op, &e);
    else if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
        rc = ofccl__ep_writedata(comm->ep, w->peer, src, len, mr, rk, roff, data, &w->op, &e);
    else
        rc = ofccl__ep_write_dc(comm->ep, w->peer, src, len, mr, rk, roff, &w->op, &e);
    if (rc == OFCCL_ERR_AGAIN) {
        w->req = NULL;
        return rc;
    }
    if (rc) {
        w->req = NULL;
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

    for (int p = 0; p < comm->size; p++) {
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

    for (int p = 0; p < comm->size; p++) {
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

    for (int p = 0; p < comm->size; p++) {
        uint64_t v;
        if (!r->writes_to_me[p])
            continue;
        v = atomic_load_explicit(&comm->ctrl[ofccl__ctrl_arr_cnt(comm->size, r->slot, p)],
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
