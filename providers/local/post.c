/*
 * Local transport: the data path. An op is carried out when it is posted
 * (a memcpy into the peer's mapping, a CPU atomic, or process_vm_writev) and
 * its completion queued for the next CQ read; a write with data also puts
 * the data in the target's ring for this source. Every function runs under
 * the endpoint's lock except idle, which only loads.
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
    uint64_t cma;
    char *src;
    int err = ofccl__lx_resolve(ep, op, OFCCL__ACC_REMOTE_READ, &src, &cma, what, perrno);

    if (err == 0 && src != NULL && op->len > 0)
        memcpy((void *)op->src, src, op->len);
    else if (err == 0 && src == NULL &&
             (*perrno = cma_read(ofccl__lx_of(ep)->peers[op->peer].pid, (void *)op->src, op->len,
                                 cma)) != 0) {
        *what = W_CMA;
        err = *perrno == EPERM ? EACCES : EREMOTEIO;
    }
    return err;
}

int ofccl__lx_post(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    unsigned cap = ep->params.ops_inflight;
    bool atomic = op->kind == OFCCL__OP_ATOMIC_ADD;
    struct lx_ring *ring = NULL;
    uint64_t tail = 0, cma;
    int what = W_KIND, perrno = 0, err;
    char *dst;

    switch (op->kind) {
    case OFCCL__OP_WRITEDATA: {
        struct lx_peer *p = &lx->peers[op->peer];
        ring = p->ring;
        tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        /* The head the target moves is read only when the ring looks full:
         * reading it on every post would pull its cache line over each time. */
        if (tail - p->head_seen >= LX_RING) {
            p->head_seen = atomic_load_explicit(&ring->head, memory_order_acquire);
            if (tail - p->head_seen >= LX_RING)
                return -EAGAIN; /* the target has not drained its ring yet */
        }
        break;
    }
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
                            &dst, &cma, &what, &perrno);
    if (err == 0 && atomic) {
        if (dst == NULL) {
            what = W_ATOMIC_CMA;
            err = EOPNOTSUPP;
        } else {
            op->result = __atomic_fetch_add((uint64_t *)(void *)dst, op->operand, __ATOMIC_SEQ_CST);
        }
    } else if (err == 0 && dst != NULL) {
        if (op->len > 0)
            memcpy(dst, op->src, op->len);
    } else if (err == 0) {
        perrno = cma_write(lx->peers[op->peer].pid, op->src, op->len, cma);
        if (perrno != 0) {
            what = W_CMA;
            err = perrno == EPERM ? EACCES : perrno == ESRCH ? ECONNRESET : EREMOTEIO;
        }
    }
    if (err == 0 && ring != NULL) {
        /* The data (even non-temporal stores of a large memcpy) before the entry. */
        atomic_thread_fence(memory_order_seq_cst);
        ring->ent[tail % LX_RING] = op->data;
        atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    }
    complete(lx, cap, op, err, what, perrno);
    return 0;
}

int ofccl__lx_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    unsigned cap = ep->params.ops_inflight;
    int size = ep->params.size, count = 0;

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
