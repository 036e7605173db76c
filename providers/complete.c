/*
 * Completions, whatever the transport: draining the backend's completion
 * queue, turning each entry into one callback, re-posting what waits in the
 * retry FIFO, and ofccl__ep_progress. Every loop is bounded by the pool size
 * or by the caller's `max`; nothing allocates.
 *
 * What a queue entry means is gathered under the endpoint's lock and
 * delivered after it is released, so handlers may post again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "prov_impl.h"
#include "util.h"

/* Entries read per backend cq_read call. */
#define CQ_BATCH 16

/* What a completion means to the caller. EV_STEP_FAILED: posting the next
 * step of a multi-step op failed with `err`; the message is built on delivery. */
enum ev_type { EV_DONE, EV_ERROR, EV_DATA, EV_STEP_FAILED };
struct ev {
    int type;
    void *op_ctx;
    int peer;
    int status;
    int err;
    size_t len;
    const char *what;
    uint64_t data;
};

/* Errors that say the peer (or the path to it) refused or vanished. */
static int map_status(int err)
{
    switch (err) {
    case EACCES:
    case EKEYREJECTED:
    case EREMOTEIO:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case ENOTCONN:
    case ETIMEDOUT:
    /* ofccl cancels nothing on a live endpoint: the provider gave up on
     * the op because the connection to the peer went away. */
    case ECANCELED:
        return OFCCL_ERR_REMOTE_ERROR;
    default:
        return OFCCL_ERR_PROVIDER;
    }
}

/* Caller holds ep->lock. The backend advanced `op` to its next step (e.g. a
 * write's fencing read): post it, or queue it behind the FIFO. Returns
 * whether `ev` was filled (the post failed for good). */
static bool post_next_step(ofccl__ep_t *ep, struct ofccl__tp_op *op, struct ev *ev)
{
    int ret;

    if (ep->rq_head != NULL) {
        ofccl__tp_rq_push(ep, op);
        return false;
    }
    ret = ep->be->post(ep, op);
    if (ret == -EAGAIN)
        ofccl__tp_rq_push(ep, op);
    if (ret == 0 || ret == -EAGAIN)
        return false;
    ev->type = EV_STEP_FAILED;
    ev->op_ctx = op->op_ctx;
    ev->peer = op->peer;
    ev->status = OFCCL_ERR_PROVIDER;
    ev->err = -ret;
    ev->len = op->len;
    ev->what = ep->be->op_name(ep, op);
    ofccl__tp_op_free(ep, op);
    return true;
}

/* Caller holds ep->lock. Returns whether `ev` was filled. */
static bool classify(ofccl__ep_t *ep, const struct ofccl__tp_cqe *c, struct ev *ev)
{
    /* Our own ops first: sockets sets FI_REMOTE_CQ_DATA on the initiator's
     * completion of a writedata too, so the flag alone does not mean "remote". */
    if (ofccl__tp_is_op(ep, c->op)) {
        struct ofccl__tp_op *op = c->op;
        if (c->flags & OFCCL__CQE_NEXT)
            return post_next_step(ep, op, ev);
        ev->type = EV_DONE;
        ev->op_ctx = op->op_ctx;
        ev->peer = op->peer;
        ofccl__tp_op_free(ep, op);
        return true;
    }
    if (c->flags & OFCCL__CQE_DATA) {
        ev->type = EV_DATA;
        ev->data = c->data;
        return true;
    }
    OFCCL__DEBUG(ep->prov->log, OFCCL__SUB_PROV, "rank %d: ignoring CQ entry flags 0x%x context %p",
                 ep->params.rank, c->flags, c->op);
    return false;
}

/* Caller holds ep->lock. Reads the error entry; fills `ev` and `msg` when it
 * belongs to one of our ops. Returns <0 on a CQ failure. */
static int read_error(ofccl__ep_t *ep, struct ev *ev, bool *have, char *msg, size_t msglen)
{
    struct ofccl__tp_cqerr err;
    int ret;

    memset(&err, 0, sizeof(err));
    *have = false;
    ret = ep->be->cq_readerr(ep, &err);
    if (ret == -EAGAIN || ret == 0)
        return 0;
    if (ret < 0)
        return ret;
    if (!ofccl__tp_is_op(ep, err.op)) {
        /* Not one of ours (e.g. a peer's access the provider refused here):
         * nobody to call back, but it must not vanish silently. */
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: CQ error not tied to a local op (flags 0x%" PRIx64 "): %s "
                    "(provider: %s)",
                    ep->params.rank, err.flags, ep->be->strerror(err.err), err.text);
        return 0;
    }
    {
        struct ofccl__tp_op *op = err.op;
        char why[256];
        /* Out of descriptors or memory here is this rank's limit, whichever
         * peer the op was for: say which, not "the peer failed". */
        int limit = ofccl__limit_explain(err.err, 0, why, sizeof(why));

        snprintf(msg, msglen, "rank %d: %s to peer %d (%zu bytes) failed: %s (provider: %s)%s%s",
                 ep->params.rank, ep->be->op_name(ep, op), op->peer, op->len,
                 ep->be->strerror(err.err), err.text, limit ? "; " : "", limit ? why : "");
        ev->type = EV_ERROR;
        ev->op_ctx = op->op_ctx;
        ev->peer = op->peer;
        ev->status = limit ? limit : map_status(err.err);
        ofccl__tp_op_free(ep, op);
        *have = true;
    }
    return 0;
}

static void deliver(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h, const struct ev *ev,
                    const char *msg)
{
    char buf[OFCCL__ERRMSG_LEN];

    switch (ev->type) {
    case EV_DONE:
        if (h->on_done != NULL)
            h->on_done(h->arg, ev->op_ctx);
        break;
    case EV_STEP_FAILED:
        snprintf(buf, sizeof(buf), "rank %d: %s to peer %d (%zu bytes) failed: %s", ep->params.rank,
                 ev->what, ev->peer, ev->len, ep->be->strerror(ev->err));
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV, "%s", buf);
        if (h->on_error != NULL)
            h->on_error(h->arg, ev->op_ctx, ev->peer, ev->status, buf);
        break;
    case EV_ERROR:
        if (h->on_error != NULL)
            h->on_error(h->arg, ev->op_ctx, ev->peer, ev->status, msg);
        break;
    case EV_DATA:
        if (h->on_remote_data != NULL)
            h->on_remote_data(h->arg, ev->data);
        break;
    }
}

/* Deliver a batch, turning the injected completion (OFCCL_FAULT) into an error. */
static void deliver_batch(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h, struct ev *evs, int nev)
{
    for (int i = 0; i < nev; i++) {
        char msg[OFCCL__ERRMSG_LEN];

        if (evs[i].type == EV_DONE &&
            ofccl__fault_hit(&ep->prov->f_comps, ep->prov->fault.cq_error_at,
                             ep->prov->fault.cq_error_at)) {
            snprintf(msg, sizeof(msg),
                     "rank %d: operation to peer %d failed: injected CQ error entry "
                     "(OFCCL_FAULT)",
                     ep->params.rank, evs[i].peer);
            evs[i].type = EV_ERROR;
            evs[i].status = OFCCL_ERR_REMOTE_ERROR;
            OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV, "%s", msg);
            deliver(ep, h, &evs[i], msg);
            continue;
        }
        deliver(ep, h, &evs[i], NULL);
    }
}

/* Read up to `max` completions and deliver them. Returns handled count or <0. */
static int drain_cq(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h, int max, ofccl__err_t *e)
{
    int handled = 0, left = max;

    while (left > 0) {
        struct ofccl__tp_cqe ents[CQ_BATCH];
        struct ev evs[CQ_BATCH];
        char msg[OFCCL__ERRMSG_LEN];
        int want = OFCCL__MIN(left, CQ_BATCH), nev = 0, n;

        pthread_mutex_lock(&ep->lock);
        if (ep->stopped) { /* shut down: nothing will complete */
            pthread_mutex_unlock(&ep->lock);
            break;
        }
        n = ep->be->cq_read(ep, ents, want);
        if (n == OFCCL__TP_ERR_AVAIL) {
            bool have;
            int ret = read_error(ep, &evs[0], &have, msg, sizeof(msg));
            pthread_mutex_unlock(&ep->lock);
            if (ret < 0)
                return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                                   "rank %d: reading an error completion failed: %s",
                                   ep->params.rank, ep->be->strerror(-ret));
            left--;
            if (have) {
                OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV, "%s", msg);
                deliver(ep, h, &evs[0], msg);
                handled++;
            }
            continue;
        }
        if (n <= 0) {
            pthread_mutex_unlock(&ep->lock);
            if (n == 0)
                break;
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: reading the completion queue failed: %s", ep->params.rank,
                               ep->be->strerror(-n));
        }
        for (int i = 0; i < n; i++)
            if (classify(ep, &ents[i], &evs[nev]))
                nev++;
        pthread_mutex_unlock(&ep->lock);
        deliver_batch(ep, h, evs, nev);
        handled += nev;
        left -= n;
        if (n < want)
            break; /* the queue is empty for now */
    }
    return handled;
}

/* Re-post queued ops in order until one meets -EAGAIN again. An op that
 * fails for good completes through on_error (it was accepted). An op to a
 * peer whose process has exited (ofccl__ep_peer_gone) stays queued without
 * holding up the ops behind it: shm refuses ops to a dead peer it never
 * connected to with -EAGAIN for ever, and a failure notice to a live peer
 * must not wait behind them. Order is kept per peer. */
static int drain_retry(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h)
{
    struct ofccl__tp_op *prev = NULL; /* the last op left queued for a gone peer */
    int handled = 0, gone = -2;       /* -2: not asked yet */

    for (unsigned bound = ep->params.ops_inflight; bound > 0; bound--) {
        struct ofccl__tp_op *op;
        char msg[OFCCL__ERRMSG_LEN];
        ofccl__err_t re;
        struct ev ev;
        int ret;

        pthread_mutex_lock(&ep->lock);
        op = prev != NULL ? prev->next : ep->rq_head;
        if (op == NULL) {
            pthread_mutex_unlock(&ep->lock);
            break;
        }
        ret = ofccl__tp_post(ep, op);
        if (ret == -EAGAIN) {
            if (gone == -2)
                gone = ep->be->peer_gone(ep, NULL);
            if (gone >= 0 && op->peer == gone)
                prev = op;
            pthread_mutex_unlock(&ep->lock);
            if (prev == op)
                continue;
            break;
        }
        if (prev != NULL)
            prev->next = op->next;
        else
            ep->rq_head = op->next;
        if (ep->rq_tail == op)
            ep->rq_tail = prev;
        if (ret == 0) {
            pthread_mutex_unlock(&ep->lock);
            continue;
        }
        ev.status =
            ofccl__limit_fail(NULL, &re, -ret, ep->be->strerror(-ret), 0, OFCCL_ERR_PROVIDER,
                              "rank %d: %s to peer %d (%zu bytes) failed when re-posted",
                              ep->params.rank, ep->be->op_name(ep, op), op->peer, op->len);
        ofccl__strlcpy(msg, re.msg, sizeof(msg));
        ev.type = EV_ERROR;
        ev.op_ctx = op->op_ctx;
        ev.peer = op->peer;
        ofccl__tp_op_free(ep, op);
        pthread_mutex_unlock(&ep->lock);
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV, "%s", msg);
        deliver(ep, h, &ev, msg);
        handled++;
    }
    return handled;
}

int ofccl__ep_progress(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h, int max, ofccl__err_t *e)
{
    int done, retried;

    if (ep == NULL || h == NULL || max <= 0)
        return ofccl__fail(ep ? ep->prov->log : NULL, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__ep_progress: bad arguments (max %d)", max);
    /* Idle (no op of ours outstanding, nothing from any peer): nothing to
     * deliver, and no lock taken to find that out. */
    if (atomic_load_explicit(&ep->pending, memory_order_relaxed) == 0 && ep->be->idle(ep))
        return 0;
    /* Reading the queue first frees descriptors and, on rxm, advances the
     * connection set-up that made the queued ops return EAGAIN. */
    done = drain_cq(ep, h, max, e);
    if (done < 0)
        return done;
    retried = drain_retry(ep, h);
    return done + retried;
}
