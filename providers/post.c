/*
 * Posting, whatever the transport: argument checks, op descriptors from the
 * fixed pool, and the -EAGAIN retry FIFO behind which a new op waits its
 * turn. Nothing here allocates or blocks.
 *
 * Locking: the endpoint's mutex guards the pool, the FIFO and the counters
 * (a progress thread and an aborting thread may call in), and is held around
 * the backend's post. It is never held while a handler runs, so handlers may
 * post again.
 */
#include <inttypes.h>
#include <string.h>

#include "prov_impl.h"
#include "util.h"

const char *ofccl__tp_op_name(const ofccl__ep_t *ep, const struct ofccl__tp_op *op)
{
    (void)ep;
    switch (op->kind) {
    case OFCCL__OP_WRITE:
        return "RMA write";
    case OFCCL__OP_WRITEDATA:
        return "RMA write with data";
    case OFCCL__OP_WRITE_DC:
        return "RMA write (delivery complete)";
    case OFCCL__OP_READ:
        return "RMA read";
    case OFCCL__OP_ATOMIC_ADD:
        return "atomic add";
    default:
        return "operation";
    }
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
                     struct ofccl__tp_op *tmpl, ofccl__err_t *e)
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
    tmpl->src_kind = lmr != NULL ? lmr->kind : ofccl__mem_kind_of(src);
    /* Both addressing modes: base is the address under virtual addressing, else 0. */
    tmpl->raddr = rk->base + roff;
    tmpl->key = rk->key;
    return 0;
}

/* Take a descriptor, copy the template in, and post it or queue it. */
static int submit(ofccl__ep_t *ep, const struct ofccl__tp_op *tmpl, void *op_ctx, ofccl__err_t *e)
{
    struct ofccl__tp_op *op;
    int ret;

    pthread_mutex_lock(&ep->lock);
    if (ep->stopped) {
        pthread_mutex_unlock(&ep->lock);
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_STATE,
                           "rank %d: %s to peer %d: the endpoint is shut down", ep->params.rank,
                           ep->be->op_name(ep, tmpl), tmpl->peer);
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
    op->src_kind = tmpl->src_kind;
    op->ex = NULL;
    op->kind = tmpl->kind;
    op->step = 0;
    op->operand = tmpl->operand;
    op->result = 0;
    atomic_fetch_add_explicit(&ep->pending, 1, memory_order_relaxed);
    /* Behind queued ops, a new one waits its turn: posting order is kept. */
    if (ep->rq_head != NULL) {
        ofccl__tp_rq_push(ep, op);
        ret = 0;
    } else {
        ret = ofccl__tp_post(ep, op);
    }
    if (ret == -EAGAIN)
        ofccl__tp_rq_push(ep, op);
    else if (ret != 0)
        ofccl__tp_op_free(ep, op);
    pthread_mutex_unlock(&ep->lock);
    if (ret == 0 || ret == -EAGAIN)
        atomic_fetch_add_explicit(&ep->prov->bytes[ep->be->peer_class(ep, tmpl->peer)], tmpl->len,
                                  memory_order_relaxed);
    /* tcp;ofi_rxm opens the connection on the first post: EMFILE here is
     * this rank's descriptor limit, not the peer's doing. */
    if (ret != 0 && ret != -EAGAIN)
        return ofccl__limit_fail(ep->prov->log, e, -ret, ep->be->strerror(-ret), 0,
                                 OFCCL_ERR_PROVIDER, "rank %d: posting %s to peer %d (%zu bytes)",
                                 ep->params.rank, ep->be->op_name(ep, tmpl), tmpl->peer, tmpl->len);
    return 0;
}

int ofccl__ep_write(ofccl__ep_t *ep, int peer, const void *src, size_t len, const ofccl__mr_t *lmr,
                    const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx, ofccl__err_t *e)
{
    struct ofccl__tp_op t;
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
    struct ofccl__tp_op t;
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
    struct ofccl__tp_op t;
    int ret = check_rma(ep, "RMA write", peer, src, len, lmr, rk, roff, &t, e);

    if (ret != 0)
        return ret;
    t.kind = OFCCL__OP_WRITE_DC;
    return submit(ep, &t, op_ctx, e);
}

int ofccl__ep_read(ofccl__ep_t *ep, int peer, void *dst, size_t len, const ofccl__mr_t *lmr,
                   const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx, ofccl__err_t *e)
{
    struct ofccl__tp_op t;
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
    struct ofccl__tp_op t;
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
    t.kind = OFCCL__OP_ATOMIC_ADD;
    return submit(ep, &t, op_ctx, e);
}
