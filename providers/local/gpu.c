/*
 * Local transport: GPU memory of the processes of this host.
 *
 * A registration of device memory publishes the CUDA IPC handle of the
 * allocation holding it, the allocation's id in the owner and the region's
 * offset in it, beside the usual key, access and length. A peer maps the
 * allocation once per process and device (ofccl__gpu_ipc_map: every
 * endpoint and registration inside it share the mapping) when it first
 * writes there, and remaps when the slot's key changes, as it does a memfd.
 * The write itself is a copy by the executor of this rank's GPU into the
 * mapping (post.c): GPU to GPU by the copy engines, P2P where the devices
 * have it, and published once the copy is done.
 *
 * Memory CUDA IPC cannot share (virtual-memory allocations without a legacy
 * IPC handle: PyTorch's expandable segments) is refused at registration,
 * naming why, without a warning: the engine then lands that collective in a
 * staging set on the GPU instead. A peer's mapping goes as soon as its owner
 * deregisters the region (ofccl__lx_dev_sweep), never under a copy.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "local.h"
#include "util.h"

int ofccl__lx_dev_export(ofccl__ep_t *ep, ofccl__mr_t *mr, struct lx_region *reg, ofccl__err_t *e)
{
    ofccl__gpu_t *g = ofccl__gpu_process(ep->prov->log, false);
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    size_t off = 0;
    int rc;

    if (g == NULL) /* a device kind was learned from the driver: it is loaded */
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                           "rank %d: local provider: GPU memory without a CUDA driver",
                           ep->params.rank);
    /* Said without a warning: the engine stages such a buffer instead. */
    if (!ofccl__gpu_ipc_capable(g, mr->addr))
        return ofccl__fail(NULL, 0, e, OFCCL_ERR_NOT_SUPPORTED,
                           "%zu bytes of GPU %d's memory at %p are a virtual-memory allocation, "
                           "which CUDA IPC cannot share",
                           mr->len, mr->kind, mr->addr);
    rc = ofccl__gpu_ipc_export(g, mr->kind, mr->addr, reg->ipc, &off, e);
    if (rc != 0) {
        char why[sizeof(e->msg)];
        ofccl__strlcpy(why, e->msg, sizeof(why));
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, rc,
                           "rank %d: local provider: %zu bytes of GPU %d's memory at %p cannot "
                           "be shared with this host's peers: %s",
                           ep->params.rank, mr->len, mr->kind, mr->addr, why);
    }
    reg->dev = mr->kind;
    reg->buffer_id = ofccl__gpu_buffer_id(g, mr->addr);
    reg->foff = off;
    if (lx->dev < 0)
        lx->dev = mr->kind;
    return 0;
}

int ofccl__lx_dev_map(ofccl__ep_t *ep, const struct lx_peer *p, const struct lx_region *reg,
                      int dev, struct lx_map *m, int *perrno)
{
    ofccl__gpu_t *g = ofccl__gpu_process(ep->prov->log, false);
    ofccl__err_t e = {0};
    void *base = NULL;

    if (g == NULL || dev < 0) { /* host memory written into a peer's GPU: no device here */
        *perrno = ENODEV;
        return EOPNOTSUPP;
    }
    if (ofccl__gpu_ipc_map(g, dev, p->pid, reg->buffer_id, reg->ipc, &base, &e) != 0) {
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV, "rank %d: local provider: %s", ep->params.rank,
                    e.msg);
        *perrno = EIO;
        return EREMOTEIO;
    }
    m->base = base;
    m->len = reg->foff + reg->len;
    m->gpu = true;
    m->dev = dev;
    return 0;
}

void ofccl__lx_unmap(struct lx_map *m)
{
    if (m->base != NULL && m->gpu)
        ofccl__gpu_ipc_unmap(ofccl__gpu_process(NULL, false), m->dev, m->base);
    else if (m->base != NULL)
        munmap(m->base, m->len);
    *m = (struct lx_map){0};
}

int ofccl__lx_dev_track(struct ofccl__lx *lx, int peer, unsigned slot)
{
    for (unsigned i = 0; i < lx->ndrefs; i++)
        if (lx->drefs[i].peer == peer && lx->drefs[i].slot == slot)
            return 0;
    if (lx->ndrefs == lx->drefs_cap) {
        unsigned cap = lx->drefs_cap ? 2 * lx->drefs_cap : 16;
        struct lx_dref *d = realloc(lx->drefs, cap * sizeof(*d));
        if (d == NULL)
            return ENOMEM;
        lx->drefs = d;
        lx->drefs_cap = cap;
    }
    lx->drefs[lx->ndrefs++] = (struct lx_dref){peer, slot};
    return 0;
}

void ofccl__lx_dev_sweep(struct ofccl__lx *lx)
{
    for (unsigned i = 0; i < lx->ndrefs;) {
        struct lx_peer *p = &lx->peers[lx->drefs[i].peer];
        unsigned slot = lx->drefs[i].slot;
        struct lx_map *m = slot < p->nmaps ? &p->maps[slot] : NULL;
        bool live =
            m != NULL && m->gpu && p->seg != NULL &&
            atomic_load_explicit(&p->seg->regions[slot].key, memory_order_acquire) == m->key;
        if (live) {
            i++;
            continue;
        }
        if (m != NULL && m->gpu)
            ofccl__lx_unmap(m);
        lx->drefs[i] = lx->drefs[--lx->ndrefs];
    }
}
