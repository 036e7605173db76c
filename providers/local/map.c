/*
 * Local transport: reaching a peer's registered memory. Every access checks
 * the key, access and bounds in the peer's registration table, then uses
 * the peer's memfd mapped here once per registration (remapped when the key
 * of its slot changes). Writes and reads go through it; peer_map hands the
 * pointer itself to the engine for plain stores and loads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "local.h"
#include "util.h"

#define LX_MAPS_MIN 8u /* first size of a peer's map table */

static int fail_at(int *what, int w, int err)
{
    *what = w;
    return err;
}

/* The map of a peer's registration slot. A peer's table grows (doubling) to
 * the highest slot used here, once, next to the mmap a new registration needs
 * anyway: peers use a handful of slots each, and a table of all LX_REGIONS
 * slots per peer would cost 24 KiB per peer, 24 MiB per rank and communicator
 * at 1,024 ranks. NULL: out of memory. */
static struct lx_map *peer_slot_map(struct lx_peer *p, unsigned slot)
{
    if (slot >= p->nmaps) {
        unsigned n = p->nmaps > 0 ? p->nmaps : LX_MAPS_MIN;
        struct lx_map *grown;

        while (n <= slot)
            n *= 2;
        n = OFCCL__MIN(n, LX_REGIONS);
        grown = realloc(p->maps, n * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        memset(grown + p->nmaps, 0, (n - p->nmaps) * sizeof(*grown));
        p->maps = grown;
        p->nmaps = n;
    }
    return &p->maps[slot];
}

int ofccl__lx_resolve(ofccl__ep_t *ep, const struct ofccl__tp_op *op, unsigned need, char **dst,
                      uint64_t *cma, ofccl__mem_kind_t *kind, int *what, int *perrno)
{
    struct lx_peer *p = &ofccl__lx_of(ep)->peers[op->peer];
    unsigned slot = (unsigned)(op->key & ((1u << LX_SLOT_BITS) - 1));
    struct lx_region *reg;
    struct lx_map *m;
    uint64_t foff, rlen, off;

    *dst = NULL;
    *cma = 0;
    *kind = OFCCL__MEM_HOST;
    if (slot >= LX_REGIONS)
        return fail_at(what, W_KEY, EKEYREJECTED);
    reg = &p->seg->regions[slot];
    if (atomic_load_explicit(&reg->key, memory_order_acquire) != op->key)
        return fail_at(what, W_KEY, EKEYREJECTED);
    if ((reg->access & need) == 0)
        return fail_at(what, W_ACCESS, EACCES);
    rlen = reg->len;
    off = op->raddr;
    /* Inside a composite whose fabric addresses by virtual address, the key's
     * base is the owner's address of the region. */
    if (ep->prov->caps.virt_addr) {
        if (off < reg->vaddr)
            return fail_at(what, W_BOUNDS, EREMOTEIO);
        off -= reg->vaddr;
    }
    if (off > rlen || op->len > rlen - off)
        return fail_at(what, W_BOUNDS, EREMOTEIO);
    if (op->peer == ep->params.rank) {
        *dst = (char *)(uintptr_t)reg->vaddr + off;
        *kind = reg->dev;
        return 0;
    }
    if (reg->fd < 0 && reg->dev < 0) {
        *cma = reg->vaddr + off;
        return 0;
    }
    foff = reg->foff;
    m = peer_slot_map(p, slot);
    if (m == NULL) {
        *perrno = ENOMEM;
        return fail_at(what, W_MAP, ENOMEM);
    }
    if (m->key != op->key && reg->dev >= 0) { /* a peer's GPU memory */
        int dev = op->src_kind != OFCCL__MEM_HOST ? op->src_kind : ofccl__lx_of(ep)->dev;
        int err;
        ofccl__lx_unmap(m);
        if ((err = ofccl__lx_dev_map(ep, p, reg, dev, m, perrno)) != 0)
            return fail_at(what, W_DEV_MAP, err);
        if (atomic_load_explicit(&reg->key, memory_order_acquire) != op->key) {
            ofccl__lx_unmap(m);
            return fail_at(what, W_KEY, EKEYREJECTED);
        }
        if (ofccl__lx_dev_track(ofccl__lx_of(ep), op->peer, slot) != 0) {
            ofccl__lx_unmap(m);
            *perrno = ENOMEM;
            return fail_at(what, W_MAP, ENOMEM);
        }
        m->key = op->key;
    } else if (m->key != op->key) {
        ofccl__lx_unmap(m);
        m->base = ofccl__lx_map_remote_fd(p->pid, reg->fd, &m->len);
        if (m->base == NULL) {
            /* Out of descriptors or address space is this process's own
             * limit: the error carries that errno, so it is not taken for
             * the target's failure. */
            *perrno = errno;
            return fail_at(what, W_MAP,
                           errno == EMFILE || errno == ENFILE || errno == ENOMEM ? errno
                                                                                 : EREMOTEIO);
        }
        /* Still the same registration after the open: the fd was the right one. */
        if (atomic_load_explicit(&reg->key, memory_order_acquire) != op->key || foff > m->len ||
            rlen > m->len - foff) {
            ofccl__lx_unmap(m);
            return fail_at(what, W_KEY, EKEYREJECTED);
        }
        m->key = op->key;
    }
    *dst = m->base + foff + off;
    *kind = m->gpu ? m->dev : OFCCL__MEM_HOST;
    return 0;
}

const char *ofccl__lx_why(int what, int perrno, char *buf, size_t len)
{
    switch (what) {
    case W_KEY:
        snprintf(buf, len,
                 "the key is not registered at the target (deregistered, or never "
                 "valid)");
        break;
    case W_ACCESS:
        snprintf(buf, len, "the target's region does not grant this access");
        break;
    case W_BOUNDS:
        snprintf(buf, len, "the bytes lie outside the target's region");
        break;
    case W_MAP:
        snprintf(buf, len, "mapping the target's shared memory through /proc failed: %s",
                 strerror(perrno));
        break;
    case W_CMA:
        snprintf(buf, len, "process_vm_writev into the target failed: %s%s", strerror(perrno),
                 perrno == EPERM ? " (ptrace access between the ranks is restricted, e.g. by "
                                   "kernel.yama.ptrace_scope; use ofccl_buffer_alloc buffers)"
                                 : "");
        break;
    case W_ATOMIC_CMA:
        snprintf(buf, len, "atomics need a region in ofccl shared memory at the target");
        break;
    case W_NOT_SHARED:
        snprintf(buf, len, "the target's region is not in ofccl shared memory");
        break;
    case W_DEV_MAP:
        snprintf(buf, len,
                 perrno == ENODEV
                     ? "the target's region is GPU memory and this rank has no GPU to map it with"
                     : "mapping the target's GPU memory (CUDA IPC) failed (the log says why)");
        break;
    case W_DEV_ACCESS:
        snprintf(buf, len,
                 "the target's region is GPU memory, which the local provider only "
                 "writes (no reads, atomics or mappings)");
        break;
    case W_COPY:
        snprintf(buf, len,
                 "no executor copies between the source's and the target's memory kinds, "
                 "or its copy failed");
        break;
    default:
        snprintf(buf, len, "operation not supported by the local provider");
        break;
    }
    return buf;
}

int ofccl__lx_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                       ofccl__err_t *e)
{
    struct ofccl__tp_op op = {.peer = peer, .key = rk->key, .raddr = rk->base + roff, .len = len};
    int what = W_KIND, perrno = 0, rc;
    ofccl__mem_kind_t dk;
    uint64_t cma;
    char *dst, why[256];

    *ptr = NULL;
    if (roff > rk->len || len > rk->len - roff)
        rc = fail_at(&what, W_BOUNDS, EREMOTEIO);
    else
        rc = ofccl__lx_resolve(ep, &op, access, &dst, &cma, &dk, &what, &perrno);
    if (rc == 0 && dst == NULL) /* not in shared memory: only process_vm_writev reaches it */
        rc = fail_at(&what, W_NOT_SHARED, EOPNOTSUPP);
    if (rc == 0 && dk != OFCCL__MEM_HOST)
        rc = fail_at(&what, W_DEV_ACCESS, EOPNOTSUPP);
    if (rc != 0) {
        if (ofccl__limit_explain(rc, len, why, sizeof(why)) != 0)
            return ofccl__limit_fail(ep->prov->log, e, rc, NULL, len, OFCCL_ERR_NO_MEMORY,
                                     "rank %d: mapping %zu bytes of peer %d's region",
                                     ep->params.rank, len, peer);
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_REMOTE_ERROR,
                           "rank %d: mapping %zu bytes of peer %d's region: %s", ep->params.rank,
                           len, peer, ofccl__lx_why(what, perrno, why, sizeof(why)));
    }
    *ptr = dst;
    *kind = OFCCL__MEM_HOST; /* a memfd mapped here: plain loads and stores */
    return 0;
}
