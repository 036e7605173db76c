/*
 * CUDA through the driver API, loaded at run time: dlopen("libcuda.so.1"),
 * then every entry point by its versioned name (cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2, and so on; SYM below expands the macro before naming it).
 * The library thus needs no CUDA at run time unless a GPU is used, and no
 * libcudart ever. Each call makes the device's primary context current (the
 * one PyTorch and the runtime API use) and puts the caller's back after.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_impl.h"
#include "util.h"

#define XSTR(x) STR(x)
#define STR(x) #x

struct ofccl__gpu_fns ofccl__gpu_fn;

/* Every entry point, by the name cuda.h gives it (macros expanded). */
#define SYM(name)                                                                                  \
    {                                                                                              \
        (void **)&ofccl__gpu_fn.name, XSTR(name)                                                   \
    }
static const struct {
    void **slot;
    const char *name;
} syms[] = {
    SYM(cuInit),
    SYM(cuDriverGetVersion),
    SYM(cuGetErrorString),
    SYM(cuGetErrorName),
    SYM(cuDeviceGetCount),
    SYM(cuDeviceGet),
    SYM(cuDeviceGetName),
    SYM(cuDeviceGetAttribute),
    SYM(cuDeviceGetPCIBusId),
    SYM(cuDeviceGetByPCIBusId),
    SYM(cuDeviceTotalMem),
    SYM(cuDeviceCanAccessPeer),
    SYM(cuDevicePrimaryCtxRetain),
    SYM(cuDevicePrimaryCtxRelease),
    SYM(cuCtxGetCurrent),
    SYM(cuCtxSetCurrent),
    SYM(cuCtxGetDevice),
    SYM(cuPointerGetAttribute),
    SYM(cuMemAlloc),
    SYM(cuMemGetInfo),
    SYM(cuMemFree),
    SYM(cuMemGetAddressRange),
    SYM(cuIpcGetMemHandle),
    SYM(cuIpcOpenMemHandle),
    SYM(cuIpcCloseMemHandle),
    SYM(cuMemHostRegister),
    SYM(cuMemHostUnregister),
    SYM(cuMemHostGetDevicePointer),
    SYM(cuStreamCreate),
    SYM(cuStreamDestroy),
    SYM(cuStreamWaitEvent),
    SYM(cuStreamSynchronize),
    SYM(cuStreamWaitValue64),
    SYM(cuStreamWriteValue64),
    SYM(cuEventCreate),
    SYM(cuEventDestroy),
    SYM(cuEventRecord),
    SYM(cuEventQuery),
    SYM(cuEventSynchronize),
    SYM(cuEventElapsedTime),
    SYM(cuMemcpyAsync),
    SYM(cuMemcpy),
    SYM(cuModuleLoadData),
    SYM(cuModuleGetFunction),
    SYM(cuModuleUnload),
    SYM(cuLaunchKernel),
    SYM(cuMemRetainAllocationHandle),
    SYM(cuMemExportToShareableHandle),
    SYM(cuMemImportFromShareableHandle),
    SYM(cuMemRelease),
    SYM(cuMemCreate),
    SYM(cuMemAddressReserve),
    SYM(cuMemAddressFree),
    SYM(cuMemMap),
    SYM(cuMemUnmap),
    SYM(cuMemSetAccess),
    SYM(cuMemGetAllocationGranularity),
};

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ofccl__gpu *the_gpu; /* one per process, refcounted */
/* A stand-in driver's (ofccl__gpu_use_driver), and its devices; NULL: libcuda */
static void (*stand_in)(struct ofccl__gpu_fns *fn, int ndev);
static int stand_in_devs;

bool ofccl__gpu_built(void)
{
    return true;
}

int ofccl__gpu_cufail(const ofccl__gpu_t *g, ofccl__err_t *e, int res, const char *what)
{
    const char *name = NULL, *text = NULL;

    if (ofccl__gpu_fn.cuGetErrorName != NULL)
        ofccl__gpu_fn.cuGetErrorName((CUresult)res, &name);
    if (ofccl__gpu_fn.cuGetErrorString != NULL)
        ofccl__gpu_fn.cuGetErrorString((CUresult)res, &text);
    return ofccl__fail(g != NULL ? g->log : NULL, OFCCL__SUB_PROV, e,
                       res == CUDA_ERROR_OUT_OF_MEMORY ? OFCCL_ERR_NO_MEMORY : OFCCL_ERR_PROVIDER,
                       "%s: CUDA error %d (%s: %s)", what, res, name ? name : "?",
                       text ? text : "?");
}

int ofccl__gpu_use_driver(void (*install)(struct ofccl__gpu_fns *fn, int ndev), int ndev)
{
    int rc = 0;

    pthread_mutex_lock(&open_lock);
    if (the_gpu != NULL || ofccl__gpu_fn.cuInit != NULL || ndev < 1 || install == NULL) {
        rc = OFCCL_ERR_STATE;
    } else {
        stand_in = install;
        stand_in_devs = ndev;
    }
    pthread_mutex_unlock(&open_lock);
    return rc;
}

static int load(ofccl__gpu_t *g, ofccl__err_t *e)
{
    int n = 0, res;

    if (stand_in != NULL)
        stand_in(&ofccl__gpu_fn, stand_in_devs);
    else
        g->dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g->dl == NULL && stand_in == NULL)
        return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "no GPU: the CUDA driver library (libcuda.so.1) is not here (%s)",
                           dlerror());
    for (size_t i = 0; i < OFCCL__ARRAY_LEN(syms) && stand_in == NULL; i++) {
        *syms[i].slot = dlsym(g->dl, syms[i].name);
        if (*syms[i].slot == NULL)
            return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                               "no GPU: the CUDA driver lacks %s (too old for this build, which "
                               "needs CUDA 12 or later)",
                               syms[i].name);
    }
    if ((res = ofccl__gpu_fn.cuInit(0)) != CUDA_SUCCESS) {
        ofccl__gpu_cufail(g, e, res, "no GPU: cuInit");
        return e->code = OFCCL_ERR_NOT_SUPPORTED;
    }
    ofccl__gpu_fn.cuDriverGetVersion(&g->version);
    if ((res = ofccl__gpu_fn.cuDeviceGetCount(&n)) != CUDA_SUCCESS || n <= 0)
        return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "no GPU: the CUDA driver sees no device");
    g->ndev = n < OFCCL__GPU_MAX_DEVICES ? n : OFCCL__GPU_MAX_DEVICES;
    return 0;
}

int ofccl__gpu_open(const ofccl__log_t *log, ofccl__gpu_t **out, ofccl__err_t *e)
{
    ofccl__gpu_t *g;
    int rc;

    pthread_mutex_lock(&open_lock);
    if (the_gpu != NULL) {
        the_gpu->refs++;
        *out = the_gpu;
        pthread_mutex_unlock(&open_lock);
        return 0;
    }
    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        pthread_mutex_unlock(&open_lock);
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "no memory for CUDA");
    }
    g->log = log;
    pthread_mutex_init(&g->lock, NULL);
    if ((rc = load(g, e)) != 0) {
        if (g->dl != NULL)
            dlclose(g->dl);
        free(g);
        memset(&ofccl__gpu_fn, 0, sizeof(ofccl__gpu_fn));
        pthread_mutex_unlock(&open_lock);
        return rc;
    }
    g->refs = 1;
    the_gpu = g;
    *out = g;
    pthread_mutex_unlock(&open_lock);
    return 0;
}

void ofccl__gpu_close(ofccl__gpu_t *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&open_lock);
    if (--g->refs > 0) {
        pthread_mutex_unlock(&open_lock);
        return;
    }
    /* The driver stays loaded (libcuda does not support being unloaded and
     * loaded again in one process); the contexts this process retained are
     * released. */
    for (int d = 0; d < g->ndev; d++) {
        if (g->dev[d].module != NULL) {
            ofccl__gpu_enter(g, d);
            ofccl__gpu_fn.cuModuleUnload((CUmodule)g->dev[d].module);
            ofccl__gpu_leave(g);
        }
        if (g->dev[d].ctx != NULL)
            ofccl__gpu_fn.cuDevicePrimaryCtxRelease(g->dev[d].cu);
    }
    the_gpu = NULL;
    pthread_mutex_destroy(&g->lock);
    free(g);
    pthread_mutex_unlock(&open_lock);
}

/* Has anything in the process loaded the CUDA driver? Every collective asks
 * about its buffers, so the answer "no" must cost next to nothing. A dlopen
 * with RTLD_NOLOAD searches the library path each time it finds nothing (ten
 * system calls), and even the loader's list (dl_iterate_phdr) takes its lock.
 * So the loader is asked at most once a millisecond (the coarse clock):
 * device memory exists only once the driver is loaded, initialized and has
 * allocated, hundreds of milliseconds after it was loaded, so no device
 * pointer can be taken for host memory. When asked, the loader's count of
 * the objects it ever loaded (dlpi_adds) says whether anything was loaded
 * since the last look; only then is its list walked for a libcuda.so*. */
#define LOOK_EVERY_NS 1000000ull
struct cuda_scan {
    unsigned long long seen, adds;
    bool first, found;
};

static _Atomic unsigned long long scanned_adds = ~0ull;
static _Atomic uint64_t look_after_ns; /* no look before then: the last found no driver */

static int scan_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct cuda_scan *s = arg;
    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    const char *base = strrchr(name, '/');

    if (s->first) {
        s->first = false;
        if (size < offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
            s->adds = ~0ull; /* no count from this loader: walk every time */
        else
            s->adds = info->dlpi_adds;
        if (s->adds != ~0ull && s->adds == s->seen)
            return 1; /* nothing loaded since: still no driver */
    }
    base = base != NULL ? base + 1 : name;
    s->found = strncmp(base, "libcuda.so", 10) == 0;
    return s->found;
}

static bool driver_maybe_loaded(unsigned long long *adds)
{
    struct cuda_scan s = {.seen = atomic_load_explicit(&scanned_adds, memory_order_relaxed),
                          .first = true};
    uint64_t now = ofccl__coarse_ns();

    *adds = ~0ull;
    if (now < atomic_load_explicit(&look_after_ns, memory_order_relaxed))
        return false;
    dl_iterate_phdr(scan_object, &s);
    if (!s.found && s.adds != ~0ull)
        atomic_store_explicit(&scanned_adds, s.adds, memory_order_relaxed);
    if (!s.found)
        atomic_store_explicit(&look_after_ns, now + LOOK_EVERY_NS, memory_order_relaxed);
    *adds = s.adds;
    return s.found;
}

ofccl__gpu_t *ofccl__gpu_process(const ofccl__log_t *log, bool load)
{
    static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;
    static ofccl__gpu_t *kept;
    static int tried;
    ofccl__err_t e = {0};

    if (!load && !tried && stand_in == NULL) {
        unsigned long long adds;
        if (!driver_maybe_loaded(&adds))
            return NULL;
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h == NULL) { /* a libcuda.so* that is not the driver's: not again until more loads */
            if (adds != ~0ull)
                atomic_store_explicit(&scanned_adds, adds, memory_order_relaxed);
            return NULL;
        }
        dlclose(h);
    }
    pthread_mutex_lock(&once_lock);
    if (!tried) {
        tried = 1;
        if (ofccl__gpu_open(NULL, &kept, &e) != 0) {
            kept = NULL;
            OFCCL__INFO(log, OFCCL__SUB_PROV, "%s", e.msg);
        }
    }
    pthread_mutex_unlock(&once_lock);
    return kept;
}

int ofccl__gpu_device_count(const ofccl__gpu_t *g)
{
    return g != NULL ? g->ndev : 0;
}

void ofccl__gpu_driver_version(const ofccl__gpu_t *g, char *buf, size_t len)
{
    snprintf(buf, len, "%d.%d", g->version / 1000, g->version % 1000 / 10);
}

/* The device's primary context, retained on first use. */
static int ctx_of(ofccl__gpu_t *g, int dev, CUcontext *ctx)
{
    struct ofccl__gpu_dev *d = &g->dev[dev];
    int res = CUDA_SUCCESS;

    pthread_mutex_lock(&g->lock);
    if (d->ctx == NULL) {
        CUcontext c = NULL;
        if ((res = ofccl__gpu_fn.cuDeviceGet(&d->cu, dev)) == CUDA_SUCCESS &&
            (res = ofccl__gpu_fn.cuDevicePrimaryCtxRetain(&c, d->cu)) == CUDA_SUCCESS)
            d->ctx = c;
    }
    *ctx = (CUcontext)d->ctx;
    pthread_mutex_unlock(&g->lock);
    return res;
}

/* The caller's current context is kept per thread, so that leave puts it back. */
static _Thread_local CUcontext saved_ctx;
static _Thread_local int entered;

int ofccl__gpu_enter(ofccl__gpu_t *g, int dev)
{
    CUcontext want = NULL, cur = NULL;
    int res;

    if (dev < 0 || dev >= g->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((res = ctx_of(g, dev, &want)) != CUDA_SUCCESS)
        return res;
    ofccl__gpu_fn.cuCtxGetCurrent(&cur);
    saved_ctx = cur;
    entered = cur != want;
    return entered ? ofccl__gpu_fn.cuCtxSetCurrent(want) : CUDA_SUCCESS;
}

void ofccl__gpu_leave(ofccl__gpu_t *g)
{
    (void)g;
    if (entered)
        ofccl__gpu_fn.cuCtxSetCurrent(saved_ctx);
    entered = 0;
}

int ofccl__gpu_device_info(ofccl__gpu_t *g, int dev, ofccl__gpu_dev_info_t *info, ofccl__err_t *e)
{
    CUdevice d;
    int res, v = 0;

    memset(info, 0, sizeof(*info));
    if ((res = ofccl__gpu_fn.cuDeviceGet(&d, dev)) != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "cuDeviceGet");
    ofccl__gpu_fn.cuDeviceGetName(info->name, (int)sizeof(info->name), d);
    ofccl__gpu_fn.cuDeviceGetPCIBusId(info->bus_id, (int)sizeof(info->bus_id), d);
    ofccl__gpu_fn.cuDeviceGetAttribute(&info->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    ofccl__gpu_fn.cuDeviceGetAttribute(&info->cc_major,
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    ofccl__gpu_fn.cuDeviceGetAttribute(&info->cc_minor,
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    ofccl__gpu_fn.cuDeviceTotalMem(&info->total_mem, d);
    ofccl__gpu_fn.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, d);
    info->mem_ops_64 = v != 0;
    v = 0;
    ofccl__gpu_fn.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, d);
    info->flush_remote = v != 0;
    v = 0;
    ofccl__gpu_fn.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, d);
    info->host_register = v != 0;
    /* Bus ids in lower case, as Linux and nvidia-smi print them. */
    for (char *c = info->bus_id; *c; c++)
        if (*c >= 'A' && *c <= 'F')
            *c = (char)(*c - 'A' + 'a');
    return 0;
}

int ofccl__gpu_current_device(ofccl__gpu_t *g, int fallback)
{
    CUcontext cur = NULL;
    CUdevice d;

    if (ofccl__gpu_fn.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != NULL &&
        ofccl__gpu_fn.cuCtxGetDevice(&d) == CUDA_SUCCESS) {
        for (int i = 0; i < g->ndev; i++) {
            CUdevice di;
            if (ofccl__gpu_fn.cuDeviceGet(&di, i) == CUDA_SUCCESS && di == d)
                return i;
        }
    }
    return g->ndev > 0 ? (fallback < 0 ? 0 : fallback) % g->ndev : -1;
}

int ofccl__gpu_device_by_bus(ofccl__gpu_t *g, const char *bus_id)
{
    CUdevice d;

    if (ofccl__gpu_fn.cuDeviceGetByPCIBusId(&d, bus_id) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < g->ndev; i++) {
        CUdevice di;
        if (ofccl__gpu_fn.cuDeviceGet(&di, i) == CUDA_SUCCESS && di == d)
            return i;
    }
    return -1;
}

bool ofccl__gpu_can_access(ofccl__gpu_t *g, int dev, int peer, char *why, size_t len)
{
    CUdevice a, b;
    int can = 0;

    if (dev == peer)
        return true;
    if (dev < 0 || peer < 0 || dev >= g->ndev || peer >= g->ndev) {
        snprintf(why, len, "device %d or %d is not visible in this process", dev, peer);
        return false;
    }
    if (ofccl__gpu_fn.cuDeviceGet(&a, dev) != CUDA_SUCCESS ||
        ofccl__gpu_fn.cuDeviceGet(&b, peer) != CUDA_SUCCESS ||
        ofccl__gpu_fn.cuDeviceCanAccessPeer(&can, a, b) != CUDA_SUCCESS || !can) {
        snprintf(why, len, "the driver says device %d cannot access device %d directly (no P2P)",
                 dev, peer);
        return false;
    }
    return true;
}

int ofccl__gpu_ptr_kind(ofccl__gpu_t *g, const void *p, uintptr_t *base, size_t *len)
{
    unsigned int type = 0;
    int ordinal = -1;
    CUdeviceptr b = 0;
    size_t l = 0;

    if (g == NULL || p == NULL ||
        ofccl__gpu_fn.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                            (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE)
        return -1;
    /* Managed memory is host-accessible: it travels as host memory. */
    {
        unsigned int managed = 0;
        if (ofccl__gpu_fn.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                                (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS &&
            managed)
            return -1;
    }
    if (ofccl__gpu_fn.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                            (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
        return -1;
    if (base != NULL || len != NULL) {
        ofccl__gpu_fn.cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                            (CUdeviceptr)(uintptr_t)p);
        ofccl__gpu_fn.cuPointerGetAttribute(&l, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                            (CUdeviceptr)(uintptr_t)p);
        if (base != NULL)
            *base = (uintptr_t)b;
        if (len != NULL)
            *len = l;
    }
    return ordinal;
}
