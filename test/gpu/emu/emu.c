/*
 * The emulated device (emu.h): its memory.
 *
 * Every range of emulated device memory this process can reach is a row of
 * one table: its own allocations (a memfd each, so a peer can map it through
 * /proc/<pid>/fd, which is what an IPC handle names), peers' allocations
 * mapped here, virtual-memory pieces mapped into reserved ranges, and host
 * memory registered for the device. The driver's pointer attributes, address
 * ranges and free memory are read from it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu.h"

#define GRANULE ((size_t)2 << 20)       /* virtual memory's granularity, as a real GPU's */
#define IPC_MAGIC 0x4f46454d55495043ull /* "OFEMUIPC" */

enum { R_ALLOC = 1, R_PEER, R_VMM_MAP, R_RESERVED, R_HOST };

/* A virtual-memory piece (a CUmemGenericAllocationHandle). */
typedef struct piece {
    int fd;
    size_t len;
    int dev, refs;
    uint64_t id;
} piece_t;

/* A range of device memory has two mappings: its device address (`base`,
 * what the driver hands out) reserved with no access, so that host code
 * touching device memory faults here as it would on a GPU, and the same
 * pages at `alias`, which only the emulated device (its streams and
 * kernels, emu_stream.c) reads and writes. */
typedef struct region {
    uintptr_t base, alias;
    size_t len;
    int kind, dev, fd; /* fd: R_ALLOC's memfd, R_PEER's opened copy */
    uint64_t id;
    piece_t *piece; /* R_VMM_MAP */
} region_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static region_t *regions;
static size_t nregions, cap;
static uint64_t next_id;

/* The device memory is made on: the current context's, else device 0. */
static int cur_dev(void)
{
    int d = ofccl__emu_current_dev();

    return d >= 0 ? d : 0;
}

/* ---- the table (callers hold mu) ---- */
static region_t *find(uintptr_t p, unsigned kinds)
{
    for (size_t i = 0; i < nregions; i++)
        if ((kinds >> regions[i].kind & 1) && p >= regions[i].base &&
            p < regions[i].base + regions[i].len)
            return &regions[i];
    return NULL;
}
#define DEVICE_KINDS (1u << R_ALLOC | 1u << R_PEER | 1u << R_VMM_MAP)

void *ofccl__emu_host_view(const void *p)
{
    uintptr_t a = (uintptr_t)p, out = a;
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find(a, DEVICE_KINDS | 1u << R_RESERVED);
    if (r != NULL)
        out = r->alias + (a - r->base);
    pthread_mutex_unlock(&mu);
    return (void *)out;
}

/* Reserve `len` bytes of address space with no access. */
static void *reserve(size_t len)
{
    return mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

static CUresult add(region_t r)
{
    if (nregions == cap) {
        size_t n = cap ? 2 * cap : 64;
        region_t *t = realloc(regions, n * sizeof(*t));
        if (t == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        regions = t;
        cap = n;
    }
    regions[nregions++] = r;
    return CUDA_SUCCESS;
}

static void drop(region_t *r)
{
    *r = regions[--nregions];
}

static size_t used_on(int dev)
{
    size_t n = 0;

    for (size_t i = 0; i < nregions; i++)
        if (regions[i].dev == dev && regions[i].kind == R_ALLOC)
            n += regions[i].len;
        else if (regions[i].dev == dev && regions[i].kind == R_VMM_MAP)
            n += regions[i].len; /* pieces are mapped once where they are made */
    return n;
}

static void piece_put(piece_t *p)
{
    if (--p->refs == 0) {
        close(p->fd);
        free(p);
    }
}

static size_t page_round(size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);

    return (len + pg - 1) / pg * pg;
}

/* ---- memory ---- */
static CUresult e_alloc(CUdeviceptr *p, size_t len)
{
    size_t l = page_round(len);
    int fd;
    void *at, *alias;
    CUresult res;

    if (len == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (used_on(cur_dev()) + l > OFCCL__EMU_MEM) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fd = memfd_create("ofccl-emulated-gpu", MFD_CLOEXEC);
    alias = fd >= 0 && ftruncate(fd, (off_t)l) == 0
                ? mmap(NULL, l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
    at = alias != MAP_FAILED ? reserve(l) : MAP_FAILED;
    if (at == MAP_FAILED) {
        if (alias != MAP_FAILED)
            munmap(alias, l);
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    res = add(
        (region_t){(uintptr_t)at, (uintptr_t)alias, l, R_ALLOC, cur_dev(), fd, ++next_id, NULL});
    pthread_mutex_unlock(&mu);
    if (res != CUDA_SUCCESS) {
        munmap(at, l);
        munmap(alias, l);
        close(fd);
        return res;
    }
    *p = (CUdeviceptr)(uintptr_t)at;
    return CUDA_SUCCESS;
}

/* Unmap the range of `kind` that starts at p (both its views) and close its
 * file. */
static CUresult unmap_at(CUdeviceptr p, int kind)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)p, 1u << kind);
    if (r == NULL || r->base != (uintptr_t)p) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    munmap((void *)r->base, r->len);
    munmap((void *)r->alias, r->len);
    close(r->fd);
    drop(r);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static CUresult e_free(CUdeviceptr p)
{
    ofccl__emu_device_sync(); /* as CUDA: the device's work first */
    return unmap_at(p, R_ALLOC);
}

static CUresult e_mem_info(size_t *free_bytes, size_t *total)
{
    pthread_mutex_lock(&mu);
    *total = OFCCL__EMU_MEM;
    *free_bytes = OFCCL__EMU_MEM - used_on(cur_dev());
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static CUresult e_range(CUdeviceptr *base, size_t *len, CUdeviceptr p)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)p, DEVICE_KINDS);
    if (r != NULL) {
        if (base != NULL)
            *base = (CUdeviceptr)r->base;
        if (len != NULL)
            *len = r->len;
    }
    pthread_mutex_unlock(&mu);
    return r != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult e_ptr_attr(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    CUresult res = CUDA_SUCCESS;
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)p, DEVICE_KINDS);
    if (r == NULL && a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE && find((uintptr_t)p, 1u << R_HOST))
        *(unsigned int *)data = CU_MEMORYTYPE_HOST;
    else if (r == NULL)
        res = CUDA_ERROR_INVALID_VALUE;
    else if (a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
    else if (a == CU_POINTER_ATTRIBUTE_IS_MANAGED)
        *(unsigned int *)data = 0;
    else if (a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        *(int *)data = r->dev;
    else if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
             a == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)
        *(CUdeviceptr *)data = (CUdeviceptr)r->base;
    else if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE || a == CU_POINTER_ATTRIBUTE_MAPPING_SIZE)
        *(size_t *)data = r->len;
    else if (a == CU_POINTER_ATTRIBUTE_BUFFER_ID)
        *(unsigned long long *)data = r->id;
    else if (a == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)
        *(int *)data = r->kind == R_ALLOC;
    else
        res = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&mu);
    return res;
}

/* An IPC handle names the allocation's memfd in the exporting process. */
struct ipc {
    uint64_t magic;
    int32_t pid, fd, dev, pad;
    uint64_t len;
};
_Static_assert(sizeof(struct ipc) <= sizeof(CUipcMemHandle), "an IPC handle holds it");

static CUresult e_ipc_get(CUipcMemHandle *h, CUdeviceptr p)
{
    struct ipc x;
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)p, 1u << R_ALLOC);
    if (r == NULL || r->base != (uintptr_t)p) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    x = (struct ipc){IPC_MAGIC, (int32_t)getpid(), r->fd, r->dev, 0, r->len};
    pthread_mutex_unlock(&mu);
    memset(h, 0, sizeof(*h));
    memcpy(h, &x, sizeof(x));
    return CUDA_SUCCESS;
}

static CUresult e_ipc_open(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
    char path[64];
    struct ipc x;
    void *at, *alias;
    int fd;
    CUresult res;

    memcpy(&x, &h, sizeof(x));
    if (x.magic != IPC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (x.pid == getpid()) /* as CUDA: not in the process that made it */
        return CUDA_ERROR_INVALID_CONTEXT;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", x.pid, x.fd);
    if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
        return CUDA_ERROR_MAP_FAILED;
    alias = mmap(NULL, x.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    at = alias != MAP_FAILED ? reserve(x.len) : MAP_FAILED;
    if (at == MAP_FAILED) {
        if (alias != MAP_FAILED)
            munmap(alias, x.len);
        close(fd);
        return CUDA_ERROR_MAP_FAILED;
    }
    pthread_mutex_lock(&mu);
    res =
        add((region_t){(uintptr_t)at, (uintptr_t)alias, x.len, R_PEER, x.dev, fd, ++next_id, NULL});
    pthread_mutex_unlock(&mu);
    if (res != CUDA_SUCCESS) {
        munmap(at, x.len);
        munmap(alias, x.len);
        close(fd);
        return res;
    }
    *p = (CUdeviceptr)(uintptr_t)at;
    return CUDA_SUCCESS;
}

static CUresult e_ipc_close(CUdeviceptr p)
{
    return unmap_at(p, R_PEER);
}

/* Host memory is the device's: registering only records it. */
static CUresult e_host_register(void *p, size_t len, unsigned int flags)
{
    CUresult res;

    pthread_mutex_lock(&mu);
    res = find((uintptr_t)p, 1u << R_HOST) != NULL
              ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
              : add((region_t){(uintptr_t)p, (uintptr_t)p, len, R_HOST, cur_dev(), -1, 0, NULL});
    pthread_mutex_unlock(&mu);
    return res;
}

static CUresult e_host_unregister(void *p)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)p, 1u << R_HOST);
    if (r != NULL && r->base == (uintptr_t)p)
        drop(r);
    pthread_mutex_unlock(&mu);
    return r != NULL ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

static CUresult e_host_devptr(CUdeviceptr *d, void *p, unsigned int flags)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)p, 1u << R_HOST);
    pthread_mutex_unlock(&mu);
    if (r == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* ---- virtual memory: pieces mapped into reserved ranges ---- */
static CUresult e_granularity(size_t *g, const CUmemAllocationProp *prop,
                              CUmemAllocationGranularity_flags opt)
{
    *g = GRANULE;
    return CUDA_SUCCESS;
}

static CUresult e_create(CUmemGenericAllocationHandle *h, size_t len,
                         const CUmemAllocationProp *prop, unsigned long long flags)
{
    piece_t *pc = calloc(1, sizeof(*pc));

    if (pc == NULL || len == 0 || len % GRANULE) {
        free(pc);
        return pc == NULL ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    pc->fd = memfd_create("ofccl-emulated-gpu-piece", MFD_CLOEXEC);
    if (pc->fd < 0 || ftruncate(pc->fd, (off_t)len) != 0) {
        if (pc->fd >= 0)
            close(pc->fd);
        free(pc);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pc->len = len;
    pc->dev = prop->location.id;
    pc->refs = 1;
    pthread_mutex_lock(&mu);
    pc->id = ++next_id;
    pthread_mutex_unlock(&mu);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)pc;
    return CUDA_SUCCESS;
}

static CUresult e_release(CUmemGenericAllocationHandle h)
{
    pthread_mutex_lock(&mu);
    piece_put((piece_t *)(uintptr_t)h);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static CUresult e_reserve(CUdeviceptr *va, size_t len, size_t align, CUdeviceptr addr,
                          unsigned long long flags)
{
    void *at = reserve(len), *alias = at != MAP_FAILED ? reserve(len) : MAP_FAILED;
    CUresult res;

    if (alias == MAP_FAILED) {
        if (at != MAP_FAILED)
            munmap(at, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&mu);
    res = add((region_t){(uintptr_t)at, (uintptr_t)alias, len, R_RESERVED, cur_dev(), -1, 0, NULL});
    pthread_mutex_unlock(&mu);
    if (res != CUDA_SUCCESS) {
        munmap(at, len);
        munmap(alias, len);
    } else {
        *va = (CUdeviceptr)(uintptr_t)at;
    }
    return res;
}

static CUresult e_addr_free(CUdeviceptr va, size_t len)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)va, 1u << R_RESERVED);
    if (r != NULL && r->base == (uintptr_t)va) {
        munmap((void *)va, len);
        munmap((void *)r->alias, len);
        drop(r);
    }
    pthread_mutex_unlock(&mu);
    return r != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult e_map(CUdeviceptr va, size_t len, size_t off, CUmemGenericAllocationHandle h,
                      unsigned long long flags)
{
    piece_t *pc = (piece_t *)(uintptr_t)h;
    region_t *rs;
    uintptr_t alias;
    void *at;
    CUresult res;

    pthread_mutex_lock(&mu);
    if ((rs = find((uintptr_t)va, 1u << R_RESERVED)) == NULL || off + len > pc->len) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The piece at the same offset of the range's alias; the device view
     * stays without access. */
    alias = rs->alias + ((uintptr_t)va - rs->base);
    at = mmap((void *)alias, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, pc->fd,
              (off_t)off);
    res = at == MAP_FAILED
              ? CUDA_ERROR_OUT_OF_MEMORY
              : add((region_t){(uintptr_t)va, alias, len, R_VMM_MAP, pc->dev, -1, pc->id, pc});
    if (res == CUDA_SUCCESS)
        pc->refs++;
    pthread_mutex_unlock(&mu);
    return res;
}

static CUresult e_unmap(CUdeviceptr va, size_t len)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)va, 1u << R_VMM_MAP);
    if (r == NULL || r->base != (uintptr_t)va || r->len != len) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The range stays reserved. */
    mmap((void *)r->alias, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
         -1, 0);
    piece_put(r->piece);
    drop(r);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static CUresult e_set_access(CUdeviceptr va, size_t len, const CUmemAccessDesc *d, size_t n)
{
    return CUDA_SUCCESS;
}

static CUresult e_retain(CUmemGenericAllocationHandle *h, void *addr)
{
    region_t *r;

    pthread_mutex_lock(&mu);
    r = find((uintptr_t)addr, 1u << R_VMM_MAP);
    if (r != NULL) {
        r->piece->refs++;
        *h = (CUmemGenericAllocationHandle)(uintptr_t)r->piece;
    }
    pthread_mutex_unlock(&mu);
    return r != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult e_export(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                         unsigned long long flags)
{
    int fd;

    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((fd = fcntl(((piece_t *)(uintptr_t)h)->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

static CUresult e_import(CUmemGenericAllocationHandle *h, void *os, CUmemAllocationHandleType type)
{
    piece_t *pc;
    struct stat st;
    int fd = (int)(uintptr_t)os;

    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((pc = calloc(1, sizeof(*pc))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((pc->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        free(pc);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pc->len = (size_t)st.st_size;
    pc->dev = -1; /* a peer's: mapped here, counted there */
    pc->refs = 1;
    pthread_mutex_lock(&mu);
    pc->id = ++next_id;
    pthread_mutex_unlock(&mu);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)pc;
    return CUDA_SUCCESS;
}

static CUresult e_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t len)
{
    memmove(ofccl__emu_host_view((void *)(uintptr_t)dst),
            ofccl__emu_host_view((const void *)(uintptr_t)src), len);
    return CUDA_SUCCESS;
}

void ofccl__emu_install(struct ofccl__gpu_fns *fn, int ndev)
{
    ofccl__emu_dev_install(fn, ndev);
    fn->cuPointerGetAttribute = e_ptr_attr;
    fn->cuMemAlloc = e_alloc;
    fn->cuMemGetInfo = e_mem_info;
    fn->cuMemFree = e_free;
    fn->cuMemGetAddressRange = e_range;
    fn->cuIpcGetMemHandle = e_ipc_get;
    fn->cuIpcOpenMemHandle = e_ipc_open;
    fn->cuIpcCloseMemHandle = e_ipc_close;
    fn->cuMemHostRegister = e_host_register;
    fn->cuMemHostUnregister = e_host_unregister;
    fn->cuMemHostGetDevicePointer = e_host_devptr;
    fn->cuMemcpy = e_memcpy;
    fn->cuMemRetainAllocationHandle = e_retain;
    fn->cuMemExportToShareableHandle = e_export;
    fn->cuMemImportFromShareableHandle = e_import;
    fn->cuMemRelease = e_release;
    fn->cuMemCreate = e_create;
    fn->cuMemAddressReserve = e_reserve;
    fn->cuMemAddressFree = e_addr_free;
    fn->cuMemMap = e_map;
    fn->cuMemUnmap = e_unmap;
    fn->cuMemSetAccess = e_set_access;
    fn->cuMemGetAllocationGranularity = e_granularity;
    ofccl__emu_stream_install(fn);
}
