/*
 * The libfabric data path: one op posted with fi_*, and the CQ read back
 * into the generic completions. The choices made per op live here: a
 * delivery-complete write is fi_writemsg(FI_DELIVERY_COMPLETE) or, where the
 * provider refuses the flag, a write followed by a zero-length read; an
 * atomic add is fi_atomicmsg(FI_DELIVERY_COMPLETE) or fi_fetch_atomic. So do
 * the receives FI_RX_CQ_DATA providers need: re-posted here as they are
 * consumed, never seen by the generic code.
 *
 * Every function runs under the endpoint's lock (prov_impl.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fabric.h"
#include "util.h"

/* A row may forbid delivery-complete atomics even where the flag is accepted. */
static bool dc_atomic(const ofccl__prov_caps_t *c)
{
    return c->delivery_complete && !(c->quirks & OFCCL__Q_NO_DC_ATOMIC);
}

static ssize_t post_atomic(struct ofccl__fab_ep *f, const ofccl__prov_caps_t *c,
                           struct ofccl__tp_op *op)
{
    fi_addr_t dest = ofccl__fab_dest(f, op->peer);

    if (dc_atomic(c)) {
        struct fi_ioc ioc = {.addr = &op->operand, .count = 1};
        struct fi_rma_ioc rioc = {.addr = op->raddr, .count = 1, .key = op->key};
        void *desc = f->ops_desc;
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
        return fi_atomicmsg(f->ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
    }
    /* The old value has to come back from the target, so the completion
     * implies the add was applied there. */
    return fi_fetch_atomic(f->ep, &op->operand, 1, f->ops_desc, &op->result, f->ops_desc, dest,
                           op->raddr, op->key, FI_UINT64, FI_SUM, op);
}

static ssize_t post_write_dc(struct ofccl__fab_ep *f, const ofccl__prov_caps_t *c,
                             struct ofccl__tp_op *op)
{
    fi_addr_t dest = ofccl__fab_dest(f, op->peer);

    if (op->step == FAB_STEP_FENCE)
        /* Posted only once the write completed locally; the target answers it
         * after the write on the same path, so its completion means placed. */
        return fi_read(f->ep, NULL, 0, NULL, dest, op->raddr, op->key, op);
    if (!c->delivery_complete) {
        /* Without FI_DELIVERY_COMPLETE: write, then (from its completion) a
         * zero-length read of the same region; needs remote read access there. */
        op->step = FAB_STEP_STAGED;
        return fi_write(f->ep, op->src, op->len, op->desc, dest, op->raddr, op->key, op);
    }
    {
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
        return fi_writemsg(f->ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
    }
}

int ofccl__fab_post(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    fi_addr_t dest = ofccl__fab_dest(f, op->peer);
    ssize_t ret;

    switch (op->kind) {
    case OFCCL__OP_WRITE:
        ret = fi_write(f->ep, op->src, op->len, op->desc, dest, op->raddr, op->key, op);
        break;
    case OFCCL__OP_WRITEDATA:
        ret =
            fi_writedata(f->ep, op->src, op->len, op->desc, op->data, dest, op->raddr, op->key, op);
        break;
    case OFCCL__OP_WRITE_DC:
        ret = post_write_dc(f, &ep->prov->caps, op);
        break;
    case OFCCL__OP_READ:
        ret = fi_read(f->ep, (void *)op->src, op->len, op->desc, dest, op->raddr, op->key, op);
        break;
    case OFCCL__OP_ATOMIC_ADD:
        ret = post_atomic(f, &ep->prov->caps, op);
        break;
    default:
        ret = -FI_EINVAL;
        break;
    }
    return (int)ret;
}

ssize_t ofccl__fab_post_rx(struct ofccl__fab_ep *f, struct ofccl__fab_rx *rx)
{
    return fi_recv(f->ep, NULL, 0, NULL, FI_ADDR_UNSPEC, &rx->fctx);
}

/* Integer compares: op_context may be NULL or any pointer the provider chose. */
static bool is_rx(const struct ofccl__fab_ep *f, const void *ctx)
{
    uintptr_t p = (uintptr_t)ctx, b = (uintptr_t)f->rx;
    return f->rx != NULL && p >= b && p < b + f->n_rx * sizeof(*f->rx) &&
           (p - b) % sizeof(*f->rx) == 0;
}

/* A consumed receive goes straight back; one the provider refuses for now
 * waits for the next CQ read. */
static void rx_repost(ofccl__ep_t *ep, struct ofccl__fab_rx *rx)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    ssize_t ret = f->rx_wait != NULL ? -FI_EAGAIN : ofccl__fab_post_rx(f, rx);

    if (ret == -FI_EAGAIN) {
        rx->next = f->rx_wait;
        f->rx_wait = rx;
    } else if (ret != 0) {
        OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: re-posting a receive for CQ data failed: %s (one fewer stays posted)",
                    ep->params.rank, fi_strerror((int)-ret));
    }
}

/* Post the receives that met EAGAIN, until one meets it again. */
static void rx_retry(ofccl__ep_t *ep)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);

    while (f->rx_wait != NULL) {
        struct ofccl__fab_rx *rx = f->rx_wait;
        ssize_t ret = ofccl__fab_post_rx(f, rx);

        if (ret == -FI_EAGAIN)
            return;
        f->rx_wait = rx->next;
        if (ret != 0)
            OFCCL__WARN(ep->prov->log, OFCCL__SUB_PROV,
                        "rank %d: re-posting a receive for CQ data failed: %s", ep->params.rank,
                        fi_strerror((int)-ret));
    }
}

/* What one CQ entry means; false for a receive that carried nothing. */
static bool convert(ofccl__ep_t *ep, const struct fi_cq_data_entry *ent, struct ofccl__tp_cqe *c)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);

    c->op = ent->op_context;
    c->data = ent->data;
    c->flags = 0;
    if (ofccl__tp_is_op(ep, ent->op_context)) {
        struct ofccl__tp_op *op = ent->op_context;
        /* The write before its fencing read: the same descriptor goes on. */
        if (op->kind == OFCCL__OP_WRITE_DC && op->step == FAB_STEP_STAGED) {
            op->step = FAB_STEP_FENCE;
            c->flags = OFCCL__CQE_NEXT;
        }
        return true;
    }
    if (is_rx(f, ent->op_context)) {
        rx_repost(ep, ent->op_context);
        c->op = NULL;
        if (!(ent->flags & FI_REMOTE_CQ_DATA))
            return false;
    }
    /* Providers without FI_RX_CQ_DATA report it without consuming a receive. */
    if (ent->flags & FI_REMOTE_CQ_DATA)
        c->flags = OFCCL__CQE_DATA;
    return true;
}

int ofccl__fab_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    struct fi_cq_data_entry fents[16];
    ssize_t got;
    int count = 0;

    if (f->rx_wait != NULL)
        rx_retry(ep);
    got = fi_cq_read(f->cq, fents, (size_t)OFCCL__MIN(n, (int)OFCCL__ARRAY_LEN(fents)));
    if (got == -FI_EAVAIL)
        return OFCCL__TP_ERR_AVAIL;
    if (got == -FI_EAGAIN)
        return 0;
    if (got < 0)
        return (int)got;
    for (ssize_t i = 0; i < got; i++)
        if (convert(ep, &fents[i], &ents[count]))
            count++;
    return count;
}

int ofccl__fab_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *out)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    struct fi_cq_err_entry err;
    const char *ptext;
    ssize_t ret;

    memset(&err, 0, sizeof(err));
    ret = fi_cq_readerr(f->cq, &err, 0);
    if (ret < 0)
        return (int)ret;
    if (is_rx(f, err.op_context)) {
        /* A cancelled receive means the endpoint is closing; others go back. */
        if (err.err != FI_ECANCELED)
            rx_repost(ep, err.op_context);
        return 0;
    }
    out->op = err.op_context;
    out->err = err.err;
    out->flags = err.flags;
    ptext = fi_cq_strerror(f->cq, err.prov_errno, err.err_data, out->text, sizeof(out->text));
    if (ptext != NULL && ptext != out->text && ptext[0] != '\0')
        ofccl__strlcpy(out->text, ptext, sizeof(out->text));
    return 1;
}

const char *ofccl__fab_strerror(int err)
{
    return fi_strerror(err);
}

const char *ofccl__fab_op_name(const ofccl__ep_t *ep, const struct ofccl__tp_op *op)
{
    if (op->kind == OFCCL__OP_ATOMIC_ADD && !dc_atomic(&ep->prov->caps))
        return "atomic fetch-add";
    if (op->kind == OFCCL__OP_WRITE_DC && op->step == FAB_STEP_FENCE)
        return "fencing read after RMA write";
    if (op->kind == OFCCL__OP_WRITE_DC && !ep->prov->caps.delivery_complete)
        return "RMA write (before its fencing read)";
    return ofccl__tp_op_name(ep, op);
}
