/*
 * The data path: op descriptors from a fixed pool, RMA and atomic posting,
 * the -FI_EAGAIN retry FIFO, and CQ draining. Nothing here allocates or
 * blocks; every loop is bounded by the pool size or by the caller's `max`.
 *
 * Locking: the endpoint's mutex guards the pool, the FIFO and the counters
 * (a progress thread and an aborting thread may call in). It is never held
 * while a handler runs, so handlers may post again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "local.h"
#include "prov_impl.h"
#include "util.h"

/* CQ entries read per fi_cq_read call. */
#define CQ_BATCH 16

const char *ofccl__op_kind_name(int kind)
{
    switch (kind) {
    case OFCCL__OP_WRITE:
        return "RMA write";
    case OFCCL__OP_WRITEDATA:
        return "RMA write with data";
    case OFCCL__OP_ATOMIC_DC:
        return "atomic add";
    case OFCCL__OP_ATOMIC_FETCH:
        return "atomic fetch-add";
    case OFCCL__OP_RECV:
        return "receive for CQ data";
    case OFCCL__OP_WRITE_DC:
        return "RMA write (delivery complete)";
    case OFCCL__OP_WRITE_STAGE:
        return "RMA write (before its fencing read)";
    case OFCCL__OP_READ_FENCE:
        return "fencing read after RMA write";
    case OFCCL__OP_READ:
        return "RMA read";
    default:
        return "operation";
    }
}

ssize_t ofccl__op_post(ofccl__ep_t *ep, struct ofccl__op *op)
{
    fi_addr_t dest = (fi_addr_t)op->peer;

    if (ep->lx != NULL)
        return ofccl__lx_post(ep, op);
    switch (op->kind) {
    case OFCCL__OP_WRITE:
        return fi_write(ep->ep, op->src, op->len, op->desc, dest, op->raddr, op->key, op);
    case OFCCL__OP_WRITEDATA:
        return fi_writedata(ep->ep, op->src, op->len, op->desc, op->data, dest, op->raddr, op->key,
                            op);
    case OFCCL__OP_ATOMIC_DC: {
        struct fi_ioc ioc = {.addr = &op->operand, .count = 1};
        struct fi_rma_ioc rioc = {.addr = op->raddr, .count = 1, .key = op->key};
        void *desc = ep->ops_desc;
        struct fi_msg_atomic msg = {
            .msg_iov = &ioc,
            .desc = &desc,
            .iov_count = 1,
            .addr = dest,
            .rma_iov = &rioc,
            .rma_iov_count = 1,
            .datatype = FI_UINT64,
            .op = FI_SUM,
            .context = op,
            .data = 0,
        };
        /* Completion only once the target has applied the add. */
        return fi_atomicmsg(ep->ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
    }
    case OFCCL__OP_ATOMIC_FETCH:
        /* The old value has to come back from the target, so the completion
         * implies the add was applied there. */
        return fi_fetch_atomic(ep->ep, &op->operand, 1, ep->ops_desc, &op->result, ep->ops_desc,
                               dest, op->raddr, op->key, FI_UINT64, FI_SUM, op);
    case OFCCL__OP_RECV:
        return fi_recv(ep->ep, NULL, 0, NULL, FI_ADDR_UNSPEC, op);
    case OFCCL__OP_WRITE_DC: {
        struct iovec iov = {.iov_base = (void *)op->src, .iov_len = op->len};
        struct fi_rma_iov riov = {.addr = op->raddr, .len = op->len, .key = op->key};
        void *desc = op->desc;
        struct fi_msg_rma msg = {
            .msg_iov = &iov,
            .desc = &desc,
            .iov_count = 1,
            .addr = dest,
            .rma_iov = &riov,
            .rma_iov_count = 1,
            .context = op,
            .data = 0,
        };
        return fi_writemsg(ep->ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
    }
    case OFCCL__OP_WRITE_STAGE:
        return fi_write(ep->ep, op->src, op->len, op->desc, dest, op->raddr, op->key, op);
    case OFCCL__OP_READ_FENCE:
        /* Posted only once the write completed locally; the target answers it
         * after the write on the same path, so its completion means placed. */
        return fi_read(ep->ep, NULL, 0, NULL, dest, op->raddr, op->key, op);
    case OFCCL__OP_READ:
        return fi_read(ep->ep, (void *)op->src, op->len, op->desc, dest, op->raddr, op->key, op);
    default:
        return -FI_EINVAL;
    }
}

/* Post, unless an injected EAGAIN storm says the provider is "busy". */
static ssize_t post_or_storm(ofccl__ep_t *ep, struct ofccl__op *op)
{
    const ofccl__fault_t *f = &ep->prov->fault;

    if (op->kind != OFCCL__OP_RECV &&
        ofccl__fault_hit(&ep->prov->f_posts, f->eagain_from, f->eagain_to))
        return -FI_EAGAIN;
    return ofccl__op_post(ep, op);
}

/* Caller holds ep->lock. */
static void rq_push(ofccl__ep_t *ep, struct ofccl__op *op)
{
    op->next = NULL;
    if (ep->rq_tail != NULL)
        ep->rq_tail->next = op;
    else
        ep->rq_head = op;
    ep->rq_tail = op;
}

/* Caller holds ep->lock. */
static void rq_pop(ofccl__ep_t *ep)
{
    ep->rq_head = ep->rq_head->next;
    if (ep->rq_head == NULL)
        ep->rq_tail = NULL;
}

/* Caller holds ep->lock. */
static void op_free(ofccl__ep_t *ep, struct ofccl__op *op)
{
    op->kind = OFCCL__OP_FREE;
    op->op_ctx = NULL;
    op->next = ep->free_ops;
    ep->free_ops = op;
    atomic_fetch_sub_explicit(&ep->pending, 1, memory_order_relaxed);
}

/* Integer compares: op_context may be NULL or any pointer the provider chose. */
static bool in_array(const void *ctx, const struct ofccl__op *base, size_t n)
{
    uintptr_t p = (uintptr_t)ctx, b = (uintptr_t)base;
    return base != NULL && p >= b && p < b + n * sizeof(*base) && (p - b) % sizeof(*base) == 0;
}

static bool is_op(const ofccl__ep_t *ep, const void *ctx)
{
    return in_array(ctx, ep->ops, ep->params.ops_inflight);
}

static bool is_rx(const ofccl__ep_t *ep, const void *ctx)
{
    return in_array(ctx, ep->rx, ep->n_rx);
}

/* Pool exhausted is normal flow control: tell the caller, do not log. */
static int again(ofccl__err_t *e)
{
    if (e != NULL) {
        e->code = OFCCL_ERR_AGAIN;
        ofccl__strlcpy(e->msg, "every op descriptor is in use; progress, then retry",
                       sizeof(e->msg));
    }
    return OFCCL_ERR_AGAIN;
}

/* Checks shared by every RMA post; fills the remote address and local desc. */
static int check_rma(ofccl__ep_t *ep, const char *what, int peer, const void *src, size_t len,
                     const ofccl__mr_t *lmr, const ofccl__rkey_t *rk, uint64_t roff,
                     struct ofccl__op *tmpl, ofccl__err_t *e)
{
    const ofccl__prov_caps_t *c = &ep->prov->caps;
    const ofccl__log_t *log = ep->prov->log;
    int rank = ep->params.rank;

    if (peer < 0 || peer >= ep->params.size)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: %s to peer %d: no such peer (communicator of %d ranks)", rank,
                           what, peer, ep->params.size);
    if (rk == NULL || (len > 0 && src == NULL))
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: %s to peer %d: missing %s", rank, what, peer,
                           rk == NULL ? "remote key" : "source buffer");
    if (roff > rk->len || len > rk->len - roff)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: %s to peer %d: bytes [%" PRIu64 ", %" PRIu64
                           ") are beyond the peer's region of %" PRIu64 " bytes",
                           rank, what, peer, roff, roff + (uint64_t)len, rk->len);
    if (len > c->max_msg_size)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: %s to peer %d: %zu bytes exceed max_msg_size %zu of %s", rank,
                           what, peer, len, c->max_msg_size, c->name);
    if (len > 0 && lmr == NULL && c->mr_local) {
        if (c->strict)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                               "rank %d: strict mode: local buffer %p (%zu bytes) for %s to peer "
                               "%d is not registered (verbs would fail here); register it and "
                               "pass its region",
                               rank, src, len, what, peer);
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: local buffer %p (%zu bytes) for %s to peer %d is not "
                           "registered, and %s requires registered local buffers (FI_MR_LOCAL)",
                           rank, src, len, what, peer, c->name);
    }
    if (len > 0 && lmr != NULL) {
        uintptr_t s = (uintptr_t)src, b = (uintptr_t)lmr->addr;
        if (s < b || len > lmr->len || s - b > lmr->len - len)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                               "rank %d: %s to peer %d: local buffer %p (%zu bytes) is outside "
                               "the region passed with it (%p, %zu bytes)",
                               rank, what, peer, src, len, lmr->addr, lmr->len);
    }
    memset(tmpl, 0, sizeof(*tmpl));
    tmpl->peer = peer;
    tmpl->src = src;
    tmpl->len = len;
    tmpl->desc = lmr != NULL ? lmr->desc : NULL;
    /* Both addressing modes: base is the address under FI_MR_VIRT_ADDR, else 0. */
    tmpl->raddr = rk->base + roff;
    tmpl->key = rk->key;
    return 0;
}

/* Take a descriptor, copy the template in, and post it or queue it. */
static int submit(ofccl__ep_t *ep, const struct ofccl__op *tmpl, void *op_ctx, ofccl__err_t *e)
{
    struct ofccl__op *op;
    ssize_t ret;

    pthread_mutex_lock(&ep->lock);
    if (ep->stopped) {
        pthread_mutex_unlock(&ep->lock);
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_STATE,
                           "rank %d: %s to peer %d: the endpoint is shut down", ep->params.rank,
                           ofccl__op_kind_name(tmpl->kind), tmpl->peer);
    }
    op = ep->free_ops;
    if (op == NULL) {
        pthread_mutex_unlock(&ep->lock);
        return again(e);
    }
    ep->free_ops = op->next;
    op->next = NULL;
    op->op_ctx = op_ctx;
    op->src = tmpl->src;
    op->len = tmpl->len;
    op->desc = tmpl->desc;
    op->raddr = tmpl->raddr;
    op->key = tmpl->key;
    op->data = tmpl->data;
    op->peer = tmpl->peer;
    op->kind = tmpl->kind;
    op->operand = tmpl->operand;
    op->result = 0;
    atomic_fetch_add_explicit(&ep->pending, 1, memory_order_relaxed);
    /* Behind queued ops, a new one waits its turn: posting order is kept. */
    if (ep->rq_head != NULL) {
        rq_push(ep, op);
        pthread_mutex_unlock(&ep->lock);
        return 0;
    }
    ret = post_or_storm(ep, op);
    if (ret == -FI_EAGAIN)
        rq_push(ep, op);
    else if (ret != 0)
        op_free(ep, op);
    pthread_mutex_unlock(&ep->lock);
    /* tcp;ofi_rxm opens the connection on the first post: EMFILE here is
     * this rank's descriptor limit, not the peer's doing. */
    if (ret != 0 && ret != -FI_EAGAIN)
        return ofccl__limit_fail(ep->prov->log, e, (int)-ret, 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: posting %s to peer %d (%zu bytes)", ep->params.rank,
                                 ofccl__op_kind_name(tmpl->kind), tmpl->peer, tmpl->len);
    return 0;
}

int ofccl__ep_write(ofccl__ep_t *ep, int peer, const void *src, size_t len, const ofccl__mr_t *lmr,
                    const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx, ofccl__err_t *e)
{
    struct ofccl__op t;
    int ret = check_rma(ep, "RMA write", peer, src, len, lmr, rk, roff, &t, e);

    if (ret != 0)
        return ret;
    t.kind = OFCCL__OP_WRITE;
    return submit(ep, &t, op_ctx, e);
}

int ofccl__ep_writedata(ofccl__ep_t *ep, int peer, const void *src, size_t len,
                        const ofccl__mr_t *lmr, const ofccl__rkey_t *rk, uint64_t roff,
                        uint64_t data, void *op_ctx, ofccl__err_t *e)
{
    const ofccl__prov_caps_t *c = &ep->prov->caps;
    struct ofccl__op t;
    int ret = check_rma(ep, "RMA write with data", peer, src, len, lmr, rk, roff, &t, e);

    if (ret != 0)
        return ret;
    /* Bits beyond cq_data_size would be dropped silently by the fabric. */
    if (c->cq_data_size < 8 && (data >> (8 * c->cq_data_size)) != 0)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: RMA write with data to peer %d: immediate 0x%" PRIx64
                           " does not fit in the %zu bytes of CQ data %s",
                           ep->params.rank, peer, data, c->cq_data_size,
                           c->strict ? "strict mode allows" : "the provider carries");
    t.kind = OFCCL__OP_WRITEDATA;
    t.data = data;
    return submit(ep, &t, op_ctx, e);
}

int ofccl__ep_write_dc(ofccl__ep_t *ep, int peer, const void *src, size_t len,
                       const ofccl__mr_t *lmr, const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx,
                       ofccl__err_t *e)
{
    struct ofccl__op t;
    int ret = check_rma(ep, "RMA write", peer, src, len, lmr, rk, roff, &t, e);

    if (ret != 0)
        return ret;
    /* Without FI_DELIVERY_COMPLETE: write, then (from its completion) a
     * zero-length read of the same region; needs remote read access there. */
    t.kind = ep->prov->caps.delivery_complete ? OFCCL__OP_WRITE_DC : OFCCL__OP_WRITE_STAGE;
    return submit(ep, &t, op_ctx, e);
}

int ofccl__ep_read(ofccl__ep_t *ep, int peer, void *dst, size_t len, const ofccl__mr_t *lmr,
                   const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx, ofccl__err_t *e)
{
    struct ofccl__op t;
    int ret = check_rma(ep, "RMA read", peer, dst, len, lmr, rk, roff, &t, e);

    if (ret != 0)
        return ret;
    t.kind = OFCCL__OP_READ;
    return submit(ep, &t, op_ctx, e);
}

int ofccl__ep_atomic_add(ofccl__ep_t *ep, int peer, uint64_t value, const ofccl__rkey_t *rk,
                         uint64_t roff, void *op_ctx, ofccl__err_t *e)
{
    const ofccl__prov_caps_t *c = &ep->prov->caps;
    const ofccl__log_t *log = ep->prov->log;
    struct ofccl__op t;
    int ret;

    if (!c->atomic_u64_sum)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: atomic add to peer %d: %s has no 64-bit unsigned sum",
                           ep->params.rank, peer, c->name);
    if (roff % 8 != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: atomic add to peer %d: offset %" PRIu64
                           " is not 8-byte aligned",
                           ep->params.rank, peer, roff);
    /* The operand lives in the (registered) descriptor, so no local region. */
    ret = check_rma(ep, "atomic add", peer, NULL, 0, NULL, rk, roff, &t, e);
    if (ret != 0)
        return ret;
    if (roff > rk->len || rk->len - roff < 8)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: atomic add to peer %d: 8 bytes at offset %" PRIu64
                           " are beyond the peer's region of %" PRIu64 " bytes",
                           ep->params.rank, peer, roff, rk->len);
    t.len = 8;
    t.operand = value;
    /* A row may forbid delivery-complete atomics even where the flag is accepted. */
    t.kind = c->delivery_complete && !(c->quirks & OFCCL__Q_NO_DC_ATOMIC) ? OFCCL__OP_ATOMIC_DC
                                                                          : OFCCL__OP_ATOMIC_FETCH;
    return submit(ep, &t, op_ctx, e);
}

/* What a CQ entry means to the caller, gathered under the lock and
 * delivered after it is released. */
enum ev_type { EV_DONE, EV_ERROR, EV_DATA };
struct ev {
    int type;
    void *op_ctx;
    int peer;
    int status;
    uint64_t data;
};

/* Caller holds ep->lock. A consumed receive goes straight back, or to the FIFO. */
static void rx_repost(ofccl__ep_t *ep, struct ofccl__op *rx)
{
    ssize_t ret;

    if (ep->rq_head != NULL) {
        rq_push(ep, rx);
        return;
    }
    ret = ofccl__op_post(ep, rx);
    if (ret == -FI_EAGAIN)
        rq_push(ep, rx);
    else if (ret != 0)
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: re-posting a receive for CQ data failed: %s (one fewer stays posted)",
                    ep->params.rank, fi_strerror((int)-ret));
}

/* Caller holds ep->lock. The first half of a write_dc without delivery
 * complete finished: the same descriptor becomes its fencing read. */
static bool fence_after_write(ofccl__ep_t *ep, struct ofccl__op *op, struct ev *ev)
{
    ssize_t ret;

    op->kind = OFCCL__OP_READ_FENCE;
    if (ep->rq_head != NULL) {
        rq_push(ep, op);
        return false;
    }
    ret = ofccl__op_post(ep, op);
    if (ret == -FI_EAGAIN)
        rq_push(ep, op);
    if (ret == 0 || ret == -FI_EAGAIN)
        return false;
    OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                "rank %d: fencing read to peer %d after a %zu-byte write failed: %s",
                ep->params.rank, op->peer, op->len, fi_strerror((int)-ret));
    ev->type = EV_ERROR;
    ev->op_ctx = op->op_ctx;
    ev->peer = op->peer;
    ev->status = OFCCL_ERR_PROVIDER;
    op_free(ep, op);
    return true;
}

/* Caller holds ep->lock. Returns whether `ev` was filled. */
static bool classify(ofccl__ep_t *ep, const struct fi_cq_data_entry *ent, struct ev *ev)
{
    /* Our own ops first: sockets sets FI_REMOTE_CQ_DATA on the initiator's
     * completion of a writedata too, so the flag alone does not mean "remote". */
    if (is_op(ep, ent->op_context)) {
        struct ofccl__op *op = ent->op_context;
        if (op->kind == OFCCL__OP_WRITE_STAGE)
            return fence_after_write(ep, op, ev);
        ev->type = EV_DONE;
        ev->op_ctx = op->op_ctx;
        ev->peer = op->peer;
        op_free(ep, op);
        return true;
    }
    if (is_rx(ep, ent->op_context)) {
        rx_repost(ep, ent->op_context);
        if (!(ent->flags & FI_REMOTE_CQ_DATA))
            return false;
    }
    if (ent->flags & FI_REMOTE_CQ_DATA) {
        /* Providers without FI_RX_CQ_DATA report it without consuming a receive. */
        ev->type = EV_DATA;
        ev->data = ent->data;
        return true;
    }
    OFCCL__DEBUG(ep->prov->log, OFCCL__SUB_PROV,
                 "rank %d: ignoring CQ entry flags 0x%" PRIx64 " context %p", ep->params.rank,
                 (uint64_t)ent->flags, ent->op_context);
    return false;
}

/* Errors that say the peer (or the path to it) refused or vanished. */
static int map_status(int err)
{
    switch (err) {
    case FI_EACCES:
    case FI_EKEYREJECTED:
    case FI_EREMOTEIO:
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_EHOSTUNREACH:
    case FI_ENOTCONN:
    case FI_ETIMEDOUT:
    /* ofccl cancels nothing on a live endpoint: the provider gave up on
     * the op because the connection to the peer went away. */
    case FI_ECANCELED:
        return OFCCL_ERR_REMOTE_ERROR;
    default:
        return OFCCL_ERR_PROVIDER;
    }
}

static const char *cq_strerror(ofccl__ep_t *ep, const struct fi_cq_err_entry *err, char *buf,
                               size_t len)
{
    if (ep->lx != NULL)
        return ofccl__lx_strerror(err, buf, len);
    return fi_cq_strerror(ep->cq, err->prov_errno, err->err_data, buf, len);
}

/* Caller holds ep->lock. Reads the error entry; fills `ev` and `msg` when it
 * belongs to one of our ops. Returns <0 on a CQ failure. */
static int read_error(ofccl__ep_t *ep, struct ev *ev, bool *have, char *msg, size_t msglen)
{
    struct fi_cq_err_entry err;
    char pbuf[256] = "";
    const char *ptext;
    ssize_t ret;

    memset(&err, 0, sizeof(err));
    *have = false;
    ret = ep->lx != NULL ? ofccl__lx_cq_readerr(ep, &err) : fi_cq_readerr(ep->cq, &err, 0);
    if (ret == -FI_EAGAIN)
        return 0;
    if (ret < 0)
        return (int)ret;
    if (is_rx(ep, err.op_context)) {
        /* A cancelled receive means the endpoint is closing; others go back. */
        if (err.err != FI_ECANCELED)
            rx_repost(ep, err.op_context);
        return 0;
    }
    if (!is_op(ep, err.op_context)) {
        /* Not one of ours (e.g. a peer's access the provider refused here):
         * nobody to call back, but it must not vanish silently. */
        ptext = cq_strerror(ep, &err, pbuf, sizeof(pbuf));
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: CQ error not tied to a local op (flags 0x%" PRIx64 "): %s "
                    "(provider: %s)",
                    ep->params.rank, (uint64_t)err.flags, fi_strerror(err.err),
                    ptext != NULL && ptext[0] ? ptext : pbuf);
        return 0;
    }
    {
        struct ofccl__op *op = err.op_context;
        char why[256];
        /* Out of descriptors or memory here is this rank's limit, whichever
         * peer the op was for: say which, not "the peer failed". */
        int limit = ofccl__limit_explain(err.err, 0, why, sizeof(why));

        ptext = cq_strerror(ep, &err, pbuf, sizeof(pbuf));
        snprintf(msg, msglen, "rank %d: %s to peer %d (%zu bytes) failed: %s (provider: %s)%s%s",
                 ep->params.rank, ofccl__op_kind_name(op->kind), op->peer, op->len,
                 fi_strerror(err.err), ptext != NULL && ptext[0] ? ptext : pbuf, limit ? "; " : "",
                 limit ? why : "");
        ev->type = EV_ERROR;
        ev->op_ctx = op->op_ctx;
        ev->peer = op->peer;
        ev->status = limit ? limit : map_status(err.err);
        op_free(ep, op);
        *have = true;
    }
    return 0;
}

static void deliver(const ofccl__ep_handlers_t *h, const struct ev *ev, const char *msg)
{
    switch (ev->type) {
    case EV_DONE:
        if (h->on_done != NULL)
            h->on_done(h->arg, ev->op_ctx);
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

/* Read up to `max` CQ entries and deliver them. Returns handled count or <0. */
static int drain_cq(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h, int max, ofccl__err_t *e)
{
    int handled = 0, left = max;

    while (left > 0) {
        struct fi_cq_data_entry ents[CQ_BATCH];
        struct ev evs[CQ_BATCH];
        char msg[OFCCL__ERRMSG_LEN];
        size_t want = (size_t)OFCCL__MIN(left, CQ_BATCH);
        int nev = 0;
        ssize_t n;

        pthread_mutex_lock(&ep->lock);
        if (ep->stopped) { /* shut down: the CQ is closed, nothing will complete */
            pthread_mutex_unlock(&ep->lock);
            break;
        }
        n = ep->lx != NULL ? ofccl__lx_cq_read(ep, ents, want) : fi_cq_read(ep->cq, ents, want);
        if (n == -FI_EAVAIL) {
            bool have;
            int ret = read_error(ep, &evs[0], &have, msg, sizeof(msg));
            pthread_mutex_unlock(&ep->lock);
            if (ret < 0)
                return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                                   "rank %d: fi_cq_readerr failed: %s", ep->params.rank,
                                   fi_strerror(-ret));
            left--;
            if (have) {
                OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV, "%s", msg);
                deliver(h, &evs[0], msg);
                handled++;
            }
            continue;
        }
        if (n < 0) {
            pthread_mutex_unlock(&ep->lock);
            if (n == -FI_EAGAIN)
                break;
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: fi_cq_read failed: %s", ep->params.rank,
                               fi_strerror((int)-n));
        }
        for (ssize_t i = 0; i < n; i++)
            if (classify(ep, &ents[i], &evs[nev]))
                nev++;
        pthread_mutex_unlock(&ep->lock);
        for (int i = 0; i < nev; i++) {
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
                deliver(h, &evs[i], msg);
                continue;
            }
            deliver(h, &evs[i], NULL);
        }
        handled += nev;
        left -= (int)n;
        if ((size_t)n < want)
            break; /* the CQ is empty for now */
    }
    return handled;
}

/* Re-post queued ops in order until one meets -FI_EAGAIN again. An op that
 * fails for good completes through on_error (it was accepted). */
static int drain_retry(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h)
{
    int handled = 0;

    for (unsigned bound = ep->params.ops_inflight + ep->n_rx; bound > 0; bound--) {
        struct ofccl__op *op;
        char msg[OFCCL__ERRMSG_LEN];
        struct ev ev;
        ssize_t ret;

        pthread_mutex_lock(&ep->lock);
        op = ep->rq_head;
        if (op == NULL) {
            pthread_mutex_unlock(&ep->lock);
            break;
        }
        ret = post_or_storm(ep, op);
        if (ret == -FI_EAGAIN) {
            pthread_mutex_unlock(&ep->lock);
            break;
        }
        rq_pop(ep);
        if (ret == 0 || op->kind == OFCCL__OP_RECV) {
            if (ret != 0)
                OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                            "rank %d: re-posting a receive for CQ data failed: %s", ep->params.rank,
                            fi_strerror((int)-ret));
            pthread_mutex_unlock(&ep->lock);
            continue;
        }
        {
            ofccl__err_t re;
            ev.status = ofccl__limit_fail(NULL, &re, (int)-ret, 0, OFCCL_ERR_PROVIDER,
                                          "rank %d: %s to peer %d (%zu bytes) failed when "
                                          "re-posted",
                                          ep->params.rank, ofccl__op_kind_name(op->kind), op->peer,
                                          op->len);
            ofccl__strlcpy(msg, re.msg, sizeof(msg));
        }
        ev.type = EV_ERROR;
        ev.op_ctx = op->op_ctx;
        ev.peer = op->peer;
        op_free(ep, op);
        pthread_mutex_unlock(&ep->lock);
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV, "%s", msg);
        deliver(h, &ev, msg);
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
    /* Reading the CQ first frees descriptors and, on rxm, advances the
     * connection set-up that made the queued ops return EAGAIN. */
    /* Local and idle (no op of ours outstanding, no CQ data from any peer):
     * nothing to deliver, and no lock taken to find that out. */
    if (ep->lx != NULL && atomic_load_explicit(&ep->pending, memory_order_relaxed) == 0 &&
        ofccl__lx_rings_empty(ep))
        return 0;
    done = drain_cq(ep, h, max, e);
    if (done < 0)
        return done;
    retried = drain_retry(ep, h);
    return done + retried;
}
