/*
 * Local transport: the data path. A write's bytes go into the peer's mapping
 * through the executor of the memory kinds involved (exec_ops.h), or by
 * process_vm_writev; an atomic is a CPU atomic. Once the bytes are in place
 * the op is published: a write with data puts the data in the target's ring
 * for this source, and the completion is queued for the next CQ read. The
 * host's executor copies at post, so its ops are published at once; a copy
 * still in flight (a device's) waits in the endpoint's list of busy ops,
 * which every CQ read tests in order, so a signal never runs ahead of its
 * data. Every function runs under the endpoint's lock except idle, which
 * only loads.
 *
 * The writer reads the target's ring head only when its cached copy says the
 * ring is full, and the target stores the head only when it took entries:
 * polling an empty ring moves no cache line.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "local.h"
#include "util.h"

static void complete(struct ofccl__lx *lx, unsigned cap, struct ofccl__tp_op *op, int err, int what,
                     int perrno)
{
    struct lx_comp *c = &lx->cq[lx->cq_tail % cap];

    c->op = op;
    c->err = err;
    c->what = what;
    c->perrno = perrno;
    lx->cq_tail++;
}

static int cma_write(int pid, const void *src, size_t len, uint64_t raddr)
{
    size_t done = 0;

    /* Bounded: each call moves at least one byte or fails. */
    while (done < len) {
        struct iovec l = {.iov_base = (char *)src + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = process_vm_writev(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return n == 0 ? EIO : errno;
        done += (size_t)n;
    }
    return 0;
}

static int cma_read(int pid, void *dst, size_t len, uint64_t raddr)
{
    size_t done = 0;

    while (done < len) {
        struct iovec l = {.iov_base = (char *)dst + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return n == 0 ? EIO : errno;
        done += (size_t)n;
    }
    return 0;
}

static int read_now(ofccl__ep_t *ep, struct ofccl__tp_op *op, int *what, int *perrno)
{
    ofccl__mem_kind_t kind;
    uint64_t cma;
    char *src;
    int err = ofccl__lx_resolve(ep, op, OFCCL__ACC_REMOTE_READ, &src, &cma, &kind, what, perrno);

    if (err == 0 && kind != OFCCL__MEM_HOST) {
        *what = W_DEV_ACCESS;
        err = EOPNOTSUPP;
    } else if (err == 0 && src != NULL && op->len > 0)
        memcpy((void *)op->src, src, op->len);
    else if (err == 0 && src == NULL &&
             (*perrno = cma_read(ofccl__lx_of(ep)->peers[op->peer].pid, (void *)op->src, op->len,
                                 cma)) != 0) {
        *what = W_CMA;
        err = *perrno == EPERM ? EACCES : EREMOTEIO;
    }
    return err;
}

/* Room in the target's ring for one more entry from this source. */
static bool ring_room(struct lx_peer *p)
{
    uint64_t tail = atomic_load_explicit(&p->ring->tail, memory_order_relaxed);

    /* The head the target moves is read only when the ring looks full:
     * reading it on every post would pull its cache line over each time. */
    if (tail - p->head_seen >= LX_RING)
        p->head_seen = atomic_load_explicit(&p->ring->head, memory_order_acquire);
    return tail - p->head_seen < LX_RING;
}

/* The op's bytes are in place: its CQ data into the target's ring (room was
 * checked), its completion queued. */
static void publish(struct ofccl__lx *lx, unsigned cap, struct ofccl__tp_op *op)
{
    if (op->kind == OFCCL__OP_WRITEDATA) {
        struct lx_ring *ring = lx->peers[op->peer].ring;
        uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);

        /* The data (even non-temporal stores of a large memcpy) before the entry. */
        atomic_thread_fence(memory_order_seq_cst);
        ring->ent[tail % LX_RING] = op->data;
        atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    }
    complete(lx, cap, op, 0, W_KIND, 0);
}

/* Copy a write's bytes into the peer's mapping at `dst` (of memory kind
 * `kind`) through the executor of the kinds involved: 0 done, 1 in flight
 * (the op joins the busy list), or an errno value. */
static int copy_in(ofccl__ep_t *ep, struct ofccl__tp_op *op, char *dst, ofccl__mem_kind_t kind)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    const ofccl__exec_t *ex = ofccl__tp_exec(ep, kind, op->src_kind);
    int rc;

    if (ex == NULL)
        return EOPNOTSUPP;
    if (op->len == 0)
        return 0;
    rc = ex->ops->copy(ex->state, dst, op->src, op->len, &op->ticket);
    if (rc < 0)
        return EIO;
    if (rc == OFCCL__EXEC_POSTED) {
        op->ex = ex;
        op->next = NULL;
        if (lx->busy_tail != NULL)
            lx->busy_tail->next = op;
        else
            lx->busy_head = op;
        lx->busy_tail = op;
        atomic_fetch_add_explicit(&lx->busy, 1, memory_order_relaxed);
        return 1;
    }
    return 0;
}

/* Publish the busy ops whose copies are done, in the order they were posted;
 * stops at one still in flight, or whose target's ring is full. */
static void drain_busy(ofccl__ep_t *ep)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    unsigned cap = ep->params.ops_inflight;
    struct ofccl__tp_op *op;

    while ((op = lx->busy_head) != NULL) {
        int rc = op->ex->ops->test(op->ex->state, op->ticket);

        if (rc == 0 ||
            (rc > 0 && op->kind == OFCCL__OP_WRITEDATA && !ring_room(&lx->peers[op->peer])))
            return;
        lx->busy_head = op->next;
        if (lx->busy_head == NULL)
            lx->busy_tail = NULL;
        op->next = NULL;
        atomic_fetch_sub_explicit(&lx->busy, 1, memory_order_relaxed);
        if (rc > 0)
            publish(lx, cap, op);
        else
            complete(lx, cap, op, EIO, W_COPY, 0);
    }
}

int ofccl__lx_post(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    unsigned cap = ep->params.ops_inflight;
    bool atomic = op->kind == OFCCL__OP_ATOMIC_ADD;
    ofccl__mem_kind_t dk;
    uint64_t cma;
    int what = W_KIND, perrno = 0, err;
    char *dst;

    switch (op->kind) {
    case OFCCL__OP_WRITEDATA:
        if (!ring_room(&lx->peers[op->peer]))
            return -EAGAIN; /* the target has not drained its ring yet */
        break;
    case OFCCL__OP_WRITE:
    case OFCCL__OP_WRITE_DC: /* placed when the post returns: completion is delivery */
    case OFCCL__OP_ATOMIC_ADD:
        break;
    case OFCCL__OP_READ:
        err = read_now(ep, op, &what, &perrno);
        complete(lx, cap, op, err, what, perrno);
        return 0;
    default:
        complete(lx, cap, op, ENOSYS, W_KIND, 0);
        return 0;
    }
    err = ofccl__lx_resolve(ep, op,
                            atomic ? (unsigned)OFCCL__ACC_REMOTE_ATOMIC
                                   : (unsigned)(OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC),
                            &dst, &cma, &dk, &what, &perrno);
    if (err == 0 && atomic) {
        if (dk != OFCCL__MEM_HOST) {
            what = W_DEV_ACCESS;
            err = EOPNOTSUPP;
        } else if (dst == NULL) {
            what = W_ATOMIC_CMA;
            err = EOPNOTSUPP;
        } else {
            op->result = __atomic_fetch_add((uint64_t *)(void *)dst, op->operand, __ATOMIC_SEQ_CST);
        }
    } else if (err == 0 && dst != NULL) {
        err = copy_in(ep, op, dst, dk);
        if (err == 1)
            return 0; /* published once the copy is done (drain_busy) */
        what = W_COPY;
    } else if (err == 0 && op->src_kind != OFCCL__MEM_HOST) {
        what = W_COPY; /* process_vm_writev reads host memory only */
        err = EOPNOTSUPP;
    } else if (err == 0) {
        perrno = cma_write(lx->peers[op->peer].pid, op->src, op->len, cma);
        if (perrno != 0) {
            what = W_CMA;
            err = perrno == EPERM ? EACCES : perrno == ESRCH ? ECONNRESET : EREMOTEIO;
        }
    }
    if (err == 0)
        publish(lx, cap, op);
    else
        complete(lx, cap, op, err, what, perrno);
    return 0;
}

int ofccl__lx_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    unsigned cap = ep->params.ops_inflight;
    int size = ep->params.size, count = 0;

    if (lx->busy_head != NULL)
        drain_busy(ep);
    if (lx->ndrefs > 0 && lx->busy_head == NULL) /* never under a copy in flight */
        ofccl__lx_dev_sweep(lx);
    while (count < n && lx->cq_head != lx->cq_tail) {
        struct lx_comp *c = &lx->cq[lx->cq_head % cap];
        if (c->err != 0)
            return count > 0 ? count : OFCCL__TP_ERR_AVAIL;
        ents[count].op = c->op;
        ents[count].data = 0;
        ents[count].flags = 0;
        count++;
        lx->cq_head++;
    }
    for (int i = 0; i < size && count < n; i++) {
        int src = (lx->next_src + i) % size;
        struct lx_ring *ring = ofccl__lx_ring(lx->seg, src);
        uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

        /* A tail further ahead than the ring holds is a broken peer: take what
         * the ring can hold; the engine validates every entry it is given. */
        if (tail - head > LX_RING)
            tail = head + LX_RING;
        if (head == tail)
            continue; /* no store: the line stays shared with the writer */
        for (; head != tail && count < n; head++, count++) {
            ents[count].op = NULL;
            ents[count].data = ring->ent[head % LX_RING];
            ents[count].flags = OFCCL__CQE_DATA;
        }
        atomic_store_explicit(&ring->head, head, memory_order_release);
    }
    lx->next_src = size > 0 ? (lx->next_src + 1) % size : 0;
    return count;
}

bool ofccl__lx_idle(const ofccl__ep_t *ep)
{
    struct lx_seg *seg = ofccl__lx_of(ep)->seg;

    if (atomic_load_explicit(&ofccl__lx_of(ep)->busy, memory_order_relaxed) != 0)
        return false; /* copies in flight: their completions are still to come */
    for (int src = 0; src < ep->params.size; src++) {
        struct lx_ring *ring = ofccl__lx_ring(seg, src);
        if (atomic_load_explicit(&ring->tail, memory_order_acquire) !=
            atomic_load_explicit(&ring->head, memory_order_relaxed))
            return false;
    }
    return true;
}

int ofccl__lx_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    unsigned cap = ep->params.ops_inflight;
    struct lx_comp *c;

    if (lx->cq_head == lx->cq_tail || lx->cq[lx->cq_head % cap].err == 0)
        return -EAGAIN;
    c = &lx->cq[lx->cq_head % cap];
    err->op = c->op;
    err->err = c->err;
    err->flags = 0;
    ofccl__lx_why(c->what, c->perrno, err->text, sizeof(err->text));
    lx->cq_head++;
    return 1;
}
