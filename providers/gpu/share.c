/*
 * The caller's own GPU memory, shared with the other processes of a host.
 *
 * Memory from cuMemAlloc / cudaMalloc (and PyTorch's caching allocator
 * without expandable segments) is shared by CUDA IPC: a handle of the whole
 * allocation, mapped by the peer once, the range at an offset in it.
 *
 * Virtual-memory allocations (cuMemCreate'd pieces mapped side by side into a
 * reserved range, as PyTorch's expandable segments are) have no IPC handle.
 * Each piece behind the range is exported as a POSIX file descriptor (the
 * piece must have been created with that handle type requested: PyTorch's
 * are); the peer imports the pieces, maps them one after the other into a
 * range of its own and gets the same bytes at the same offsets. The pieces
 * are found by asking the driver for the mapping each address falls in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_impl.h"
#include "util.h"

_Atomic long ofccl__gpu_nmapped;

long ofccl__gpu_mappings(void)
{
    return ofccl__gpu_nmapped;
}

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

uint64_t ofccl__gpu_buffer_id(ofccl__gpu_t *g, const void *p)
{
    unsigned long long id = 0;

    if (g == NULL || ofccl__gpu_fn.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                                         dptr(p)) != CUDA_SUCCESS)
        return 0;
    return id;
}

bool ofccl__gpu_ipc_capable(ofccl__gpu_t *g, const void *p)
{
    int capable = 0;

    return g != NULL &&
           ofccl__gpu_fn.cuPointerGetAttribute(&capable,
                                               CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                               dptr(p)) == CUDA_SUCCESS &&
           capable;
}

void ofccl__gpu_share_clear(ofccl__gpu_share_t *s)
{
    for (int i = 0; i < s->npieces; i++)
        if (s->fd[i] >= 0) {
            close(s->fd[i]);
            s->fd[i] = -1;
        }
}

/* The mapping (a cuMemMap'd piece) holding address a: its start and size. */
static int mapping_of(CUdeviceptr a, CUdeviceptr *base, size_t *len)
{
    int res = ofccl__gpu_fn.cuPointerGetAttribute(base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, a);

    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuPointerGetAttribute(len, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, a);
    return res;
}

/* Every piece behind [p, p + len) as a descriptor. */
static int export_vmm(ofccl__gpu_t *g, const void *p, size_t len, ofccl__gpu_share_t *s,
                      ofccl__err_t *e)
{
    CUdeviceptr a = dptr(p), end = dptr(p) + (len ? len : 1), base = 0;
    size_t plen = 0;
    int res;

    s->kind = OFCCL__GPU_SHARE_VMM;
    while (a < end) {
        CUmemGenericAllocationHandle h;
        int fd = -1;
        if ((res = mapping_of(a, &base, &plen)) != CUDA_SUCCESS || plen == 0)
            return ofccl__gpu_cufail(g, e, res ? res : CUDA_ERROR_INVALID_VALUE,
                                     "finding the virtual-memory piece behind GPU memory "
                                     "(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)");
        if (s->npieces == OFCCL__GPU_SHARE_PIECES)
            return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                               "GPU memory of %zu bytes spans more than %d virtual-memory "
                               "pieces: register it in parts",
                               len, OFCCL__GPU_SHARE_PIECES);
        if (s->npieces == 0)
            s->offset = (size_t)(dptr(p) - base);
        if ((res = ofccl__gpu_fn.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)base)) !=
            CUDA_SUCCESS)
            return ofccl__gpu_cufail(g, e, res,
                                     "sharing GPU memory: it is neither a cuMemAlloc/cudaMalloc "
                                     "allocation nor virtual memory the driver knows "
                                     "(cuMemRetainAllocationHandle)");
        res = ofccl__gpu_fn.cuMemExportToShareableHandle(
            &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        ofccl__gpu_fn.cuMemRelease(h);
        if (res != CUDA_SUCCESS) {
            ofccl__gpu_cufail(g, e, res, "cuMemExportToShareableHandle");
            return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                               "virtual GPU memory made without a shareable handle type cannot "
                               "reach other processes (create it with "
                               "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested, as PyTorch's "
                               "expandable segments are): %s",
                               e->msg);
        }
        s->fd[s->npieces] = fd;
        s->piece_len[s->npieces++] = plen;
        s->map_len += plen;
        a = base + plen;
    }
    return 0;
}

int ofccl__gpu_share_export(ofccl__gpu_t *g, int dev, const void *p, size_t len,
                            ofccl__gpu_share_t *s, ofccl__err_t *e)
{
    CUipcMemHandle h;
    CUdeviceptr base = 0;
    size_t alen = 0;
    int res, capable = 0;

    memset(s, 0, sizeof(*s));
    for (int i = 0; i < OFCCL__GPU_SHARE_PIECES; i++)
        s->fd[i] = -1;
    if ((res = ofccl__gpu_enter(g, dev)) != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "sharing GPU memory");
    s->buffer_id = ofccl__gpu_buffer_id(g, p);
    ofccl__gpu_fn.cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                        dptr(p));
    if (capable) {
        s->kind = OFCCL__GPU_SHARE_IPC;
        if ((res = ofccl__gpu_fn.cuMemGetAddressRange(&base, &alen, dptr(p))) == CUDA_SUCCESS)
            res = ofccl__gpu_fn.cuIpcGetMemHandle(&h, base);
        ofccl__gpu_leave(g);
        if (res != CUDA_SUCCESS)
            return ofccl__gpu_cufail(g, e, res, "sharing GPU memory (cuIpcGetMemHandle)");
        if (dptr(p) + len > base + alen)
            return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                               "GPU memory %p + %zu bytes runs past its allocation (%zu bytes "
                               "at %p)",
                               p, len, alen, (void *)(uintptr_t)base);
        memcpy(s->ipc, &h, sizeof(h));
        s->offset = (size_t)(dptr(p) - base);
        s->map_len = alen;
        return 0;
    }
    res = export_vmm(g, p, len, s, e);
    ofccl__gpu_leave(g);
    if (res != 0)
        ofccl__gpu_share_clear(s);
    return res;
}

/* Unmap every piece of a reserved range (each as it was mapped), then free
 * the range. */
static void unmap_range(CUdeviceptr va, size_t len)
{
    CUdeviceptr a = va, b = 0;
    size_t l = 0;

    while (a < va + len && mapping_of(a, &b, &l) == CUDA_SUCCESS && l > 0) {
        ofccl__gpu_fn.cuMemUnmap(b, l);
        a = b + l;
    }
    ofccl__gpu_fn.cuMemAddressFree(va, len);
}

static int open_vmm(ofccl__gpu_t *g, int dev, ofccl__gpu_share_t *s, CUdeviceptr *va)
{
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t at = 0;
    int res;

    acc.location.id = (int)g->dev[dev].cu;
    if ((res = ofccl__gpu_fn.cuMemAddressReserve(va, s->map_len, 0, 0, 0)) != CUDA_SUCCESS)
        return res;
    for (int i = 0; i < s->npieces && res == CUDA_SUCCESS; i++) {
        CUmemGenericAllocationHandle h;
        res = ofccl__gpu_fn.cuMemImportFromShareableHandle(
            &h, (void *)(uintptr_t)s->fd[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(s->fd[i]);
        s->fd[i] = -1;
        if (res != CUDA_SUCCESS)
            break;
        /* The mapping holds the memory: the handle goes at once. */
        res = ofccl__gpu_fn.cuMemMap(*va + at, s->piece_len[i], 0, h, 0);
        ofccl__gpu_fn.cuMemRelease(h);
        at += s->piece_len[i];
    }
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemSetAccess(*va, s->map_len, &acc, 1);
    if (res != CUDA_SUCCESS)
        unmap_range(*va, s->map_len);
    return res;
}

int ofccl__gpu_share_open(ofccl__gpu_t *g, int dev, ofccl__gpu_share_t *s, void **base,
                          ofccl__err_t *e)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    int res = ofccl__gpu_enter(g, dev);

    if (res == CUDA_SUCCESS && s->kind == OFCCL__GPU_SHARE_IPC) {
        memcpy(&h, s->ipc, sizeof(h));
        res = ofccl__gpu_fn.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    } else if (res == CUDA_SUCCESS) {
        res = open_vmm(g, dev, s, &p);
    }
    ofccl__gpu_leave(g);
    ofccl__gpu_share_clear(s);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res,
                                 s->kind == OFCCL__GPU_SHARE_IPC
                                     ? "mapping a peer's GPU memory (cuIpcOpenMemHandle)"
                                     : "mapping a peer's virtual GPU memory (cuMemMap)");
    ofccl__gpu_nmapped++;
    *base = (void *)(uintptr_t)p;
    return 0;
}

void ofccl__gpu_share_close(ofccl__gpu_t *g, int dev, int kind, void *base, size_t map_len)
{
    ofccl__gpu_nmapped--;
    if (ofccl__gpu_enter(g, dev) == CUDA_SUCCESS) {
        if (kind == OFCCL__GPU_SHARE_IPC)
            ofccl__gpu_fn.cuIpcCloseMemHandle(dptr(base));
        else
            unmap_range(dptr(base), map_len);
    }
    ofccl__gpu_leave(g);
}

int ofccl__gpu_vmm_alloc(ofccl__gpu_t *g, int dev, size_t piece, int npieces, void **ptr,
                         size_t *total, ofccl__err_t *e)
{
    CUmemAllocationProp prop = {0};
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUdeviceptr va = 0;
    size_t gran = 0, len;
    int res = ofccl__gpu_enter(g, dev);

    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)g->dev[dev].cu;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    acc.location.id = prop.location.id;
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemGetAllocationGranularity(&gran, &prop,
                                                          CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    len = gran ? (piece + gran - 1) / gran * gran : piece;
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemAddressReserve(&va, len * (size_t)npieces, 0, 0, 0);
    for (int i = 0; res == CUDA_SUCCESS && i < npieces; i++) {
        CUmemGenericAllocationHandle h;
        if ((res = ofccl__gpu_fn.cuMemCreate(&h, len, &prop, 0)) != CUDA_SUCCESS)
            break;
        res = ofccl__gpu_fn.cuMemMap(va + len * (size_t)i, len, 0, h, 0);
        ofccl__gpu_fn.cuMemRelease(h);
    }
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemSetAccess(va, len * (size_t)npieces, &acc, 1);
    if (res != CUDA_SUCCESS && va != 0)
        unmap_range(va, len * (size_t)npieces);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "allocating virtual GPU memory (cuMemCreate)");
    *ptr = (void *)(uintptr_t)va;
    *total = len * (size_t)npieces;
    return 0;
}

void ofccl__gpu_vmm_free(ofccl__gpu_t *g, int dev, void *ptr, size_t total)
{
    if (ofccl__gpu_enter(g, dev) == CUDA_SUCCESS)
        unmap_range(dptr(ptr), total);
    ofccl__gpu_leave(g);
}

/* Peers' allocations mapped here by CUDA IPC, once per process and device
 * however many endpoints reach them (CUDA maps an allocation once per
 * context): keyed by the exporting process and the allocation's id there. */
struct ipc_map {
    int pid, dev, refs;
    uint64_t id;
    void *base;
    struct ipc_map *next;
};
static struct ipc_map *ipc_maps;
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;

int ofccl__gpu_ipc_map(ofccl__gpu_t *g, int dev, int pid, uint64_t id,
                       const uint8_t handle[OFCCL__GPU_IPC_BYTES], void **base, ofccl__err_t *e)
{
    struct ipc_map *m;
    int rc = 0;

    pthread_mutex_lock(&ipc_lock);
    for (m = ipc_maps; id != 0 && m != NULL; m = m->next) /* no id (0): never shared */
        if (m->pid == pid && m->id == id && m->dev == dev)
            break;
    if (m == NULL && (m = calloc(1, sizeof(*m))) == NULL)
        rc = ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                         "mapping a peer's GPU memory: no memory");
    else if (m->refs == 0 && (rc = ofccl__gpu_ipc_open(g, dev, handle, &m->base, e)) == 0) {
        *m = (struct ipc_map){pid, dev, 0, id, m->base, ipc_maps};
        ipc_maps = m;
    } else if (m->refs == 0) {
        free(m);
    }
    if (rc == 0) {
        m->refs++;
        *base = m->base;
    }
    pthread_mutex_unlock(&ipc_lock);
    return rc;
}

void ofccl__gpu_ipc_unmap(ofccl__gpu_t *g, int dev, void *base)
{
    pthread_mutex_lock(&ipc_lock);
    for (struct ipc_map **at = &ipc_maps; *at != NULL; at = &(*at)->next) {
        struct ipc_map *m = *at;
        if (m->base != base || m->dev != dev)
            continue;
        if (--m->refs == 0) {
            *at = m->next;
            ofccl__gpu_ipc_close(g, dev, base);
            free(m);
        }
        break;
    }
    pthread_mutex_unlock(&ipc_lock);
}
