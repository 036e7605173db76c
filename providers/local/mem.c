/*
 * Local transport: memory peers write into, and registrations.
 *
 * Every window peers may write into is its own memfd, so a peer can map it
 * through /proc/<pid>/fd/<n>. A registration publishes {key, fd, offset,
 * length, access} in the endpoint's segment (GPU memory: its IPC handle
 * instead of a memfd, gpu.c); peers read the table, never write it, and
 * check the key before every access.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "local.h"
#include "util.h"

void *ofccl__lx_mem_alloc(size_t len, intptr_t *cookie)
{
    int fd = memfd_create("ofccl-window", MFD_CLOEXEC), saved;
    void *addr;

    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)len) != 0)
        goto err_close;
    addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED)
        goto err_close;
    *cookie = fd;
    return addr;

err_close:
    saved = errno;
    close(fd);
    errno = saved; /* for ofccl__prov_mem_error */
    return NULL;
}

void ofccl__lx_mem_free(void *ptr, size_t len, intptr_t cookie)
{
    munmap(ptr, len);
    close((int)cookie);
}

int ofccl__lx_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    struct lx_region *reg = NULL;
    uint64_t k = 0, foff = 0;
    intptr_t fd = -1;
    unsigned slot = 0;

    for (unsigned i = 0; i < LX_REGIONS && reg == NULL; i++) {
        slot = (lx->next_slot + i) % LX_REGIONS;
        if (atomic_load_explicit(&lx->seg->regions[slot].key, memory_order_relaxed) == 0)
            reg = &lx->seg->regions[slot];
    }
    if (reg == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: local provider: all %u registrations of this endpoint are "
                           "in use",
                           ep->params.rank, LX_REGIONS);
    lx->next_slot = (slot + 1) % LX_REGIONS;
    /* Unpredictable high bits, the slot in the low ones; never 0 (= free). */
    while ((k >> LX_SLOT_BITS) == 0)
        if (ofccl__random_bytes(&k, sizeof(k)) != 0)
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                               "getrandom failed while choosing a memory key");
    k = (k & ~(((uint64_t)1 << LX_SLOT_BITS) - 1)) | slot;
    reg->dev = -1;
    if (mr->kind != OFCCL__MEM_HOST) {
        int rc = ofccl__lx_dev_export(ep, mr, reg, e);
        if (rc != 0)
            return rc;
        foff = reg->foff;
    } else if (!ofccl__tp_mem_find(&ofccl__local_backend, mr->addr, mr->len, &fd, &foff)) {
        fd = -1;
        foff = 0;
        if (mr->access & (OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC))
            OFCCL__INFO(ep->prov->log, OFCCL__SUB_MEM,
                        "rank %d: %zu bytes at %p are not ofccl shared memory: peers write "
                        "them with process_vm_writev",
                        ep->params.rank, mr->len, mr->addr);
    }
    reg->fd = (int32_t)fd;
    reg->access = mr->access;
    reg->foff = foff;
    reg->len = mr->len;
    reg->vaddr = (uint64_t)(uintptr_t)mr->addr;
    atomic_store_explicit(&reg->key, k, memory_order_release);
    mr->handle = reg;
    mr->key = k;
    mr->desc = NULL;
    mr->shared = fd >= 0;
    return 0;
}

int ofccl__lx_mr_dereg(ofccl__mr_t *mr)
{
    struct lx_region *reg = mr->handle;

    /* Peers check the key before every access: from here on they fail. */
    atomic_store_explicit(&reg->key, 0, memory_order_release);
    return 0;
}
