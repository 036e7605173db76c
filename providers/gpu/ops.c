/*
 * Device memory, CUDA IPC, host registration, streams, events, flags and
 * copies: thin calls into the driver, each in the device's primary context.
 * Nothing here waits unless its name says sync.
 */
#include <string.h>

#include "gpu_impl.h"
#include "util.h"

/* Run one driver call in device `dev`'s context; fail `e` naming `what`. */
#define IN_DEV(g, dev, e, what, call)                                                              \
    do {                                                                                           \
        int res_ = ofccl__gpu_enter((g), (dev));                                                   \
        if (res_ == CUDA_SUCCESS)                                                                  \
            res_ = (call);                                                                         \
        ofccl__gpu_leave(g);                                                                       \
        if (res_ != CUDA_SUCCESS)                                                                  \
            return ofccl__gpu_cufail((g), (e), res_, (what));                                      \
        return 0;                                                                                  \
    } while (0)

/* The same where nobody is told (releases on teardown paths). */
#define IN_DEV_QUIET(g, dev, call)                                                                 \
    do {                                                                                           \
        if (ofccl__gpu_enter((g), (dev)) == CUDA_SUCCESS)                                          \
            (void)(call);                                                                          \
        ofccl__gpu_leave(g);                                                                       \
    } while (0)

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

int ofccl__gpu_mem_alloc(ofccl__gpu_t *g, int dev, size_t len, void **ptr, ofccl__err_t *e)
{
    CUdeviceptr p = 0;
    int res = ofccl__gpu_enter(g, dev);

    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemAlloc(&p, len);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "allocating GPU memory (cuMemAlloc)");
    *ptr = (void *)(uintptr_t)p;
    return 0;
}

void ofccl__gpu_mem_free(ofccl__gpu_t *g, int dev, void *ptr)
{
    IN_DEV_QUIET(g, dev, ofccl__gpu_fn.cuMemFree(dptr(ptr)));
}

int ofccl__gpu_ipc_export(ofccl__gpu_t *g, int dev, const void *ptr,
                          uint8_t handle[OFCCL__GPU_IPC_BYTES], size_t *offset, ofccl__err_t *e)
{
    CUipcMemHandle h;
    CUdeviceptr base = 0;
    size_t len = 0;
    int res = ofccl__gpu_enter(g, dev);

    _Static_assert(sizeof(h) == OFCCL__GPU_IPC_BYTES, "CUipcMemHandle is 64 bytes");
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemGetAddressRange(&base, &len, dptr(ptr));
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuIpcGetMemHandle(&h, base);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res,
                                 "exporting GPU memory to the peers (cuIpcGetMemHandle: memory "
                                 "from cuMemAlloc/cudaMalloc can be shared, virtual-memory "
                                 "allocations cannot)");
    memcpy(handle, &h, sizeof(h));
    *offset = (size_t)(dptr(ptr) - base);
    return 0;
}

int ofccl__gpu_ipc_open(ofccl__gpu_t *g, int dev, const uint8_t handle[OFCCL__GPU_IPC_BYTES],
                        void **ptr, ofccl__err_t *e)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    int res;

    memcpy(&h, handle, sizeof(h));
    res = ofccl__gpu_enter(g, dev);
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "mapping a peer's GPU memory (cuIpcOpenMemHandle)");
    ofccl__gpu_nmapped++;
    *ptr = (void *)(uintptr_t)p;
    return 0;
}

void ofccl__gpu_ipc_close(ofccl__gpu_t *g, int dev, void *ptr)
{
    ofccl__gpu_nmapped--;
    IN_DEV_QUIET(g, dev, ofccl__gpu_fn.cuIpcCloseMemHandle(dptr(ptr)));
}

int ofccl__gpu_host_register(ofccl__gpu_t *g, int dev, void *p, size_t len, void **devptr,
                             ofccl__err_t *e)
{
    CUdeviceptr d = 0;
    int res = ofccl__gpu_enter(g, dev);

    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemHostRegister(
            p, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuMemHostGetDevicePointer(&d, p, 0);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "registering host memory for the GPU");
    *devptr = (void *)(uintptr_t)d;
    return 0;
}

void ofccl__gpu_host_unregister(ofccl__gpu_t *g, int dev, void *p)
{
    IN_DEV_QUIET(g, dev, ofccl__gpu_fn.cuMemHostUnregister(p));
}

int ofccl__gpu_stream_create(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t *s, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "creating a CUDA stream",
           ofccl__gpu_fn.cuStreamCreate((CUstream *)s, CU_STREAM_NON_BLOCKING));
}

void ofccl__gpu_stream_destroy(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s)
{
    IN_DEV_QUIET(g, dev, ofccl__gpu_fn.cuStreamDestroy((CUstream)s));
}

int ofccl__gpu_event_create(ofccl__gpu_t *g, int dev, bool timing, ofccl__gpu_event_t *ev,
                            ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "creating a CUDA event",
           ofccl__gpu_fn.cuEventCreate((CUevent *)ev,
                                       timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING));
}

void ofccl__gpu_event_destroy(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev)
{
    IN_DEV_QUIET(g, dev, ofccl__gpu_fn.cuEventDestroy((CUevent)ev));
}

int ofccl__gpu_event_record(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__gpu_stream_t s,
                            ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "recording a CUDA event",
           ofccl__gpu_fn.cuEventRecord((CUevent)ev, (CUstream)s));
}

int ofccl__gpu_event_query(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__err_t *e)
{
    int res = ofccl__gpu_enter(g, dev);

    if (res == CUDA_SUCCESS)
        res = ofccl__gpu_fn.cuEventQuery((CUevent)ev);
    ofccl__gpu_leave(g);
    if (res == CUDA_SUCCESS)
        return 1;
    if (res == CUDA_ERROR_NOT_READY)
        return 0;
    return ofccl__gpu_cufail(g, e, res, "waiting for the GPU (cuEventQuery)");
}

int ofccl__gpu_event_sync(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "waiting for a CUDA event", ofccl__gpu_fn.cuEventSynchronize((CUevent)ev));
}

float ofccl__gpu_event_ms(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t a, ofccl__gpu_event_t b)
{
    float ms = -1;

    IN_DEV_QUIET(g, dev, ofccl__gpu_fn.cuEventElapsedTime(&ms, (CUevent)a, (CUevent)b));
    return ms;
}

int ofccl__gpu_stream_wait_event(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s,
                                 ofccl__gpu_event_t ev, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "ordering CUDA streams (cuStreamWaitEvent)",
           ofccl__gpu_fn.cuStreamWaitEvent((CUstream)s, (CUevent)ev, 0));
}

int ofccl__gpu_wait_flag(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *flag,
                         uint64_t value, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "a stream wait on a flag (cuStreamWaitValue64)",
           ofccl__gpu_fn.cuStreamWaitValue64((CUstream)s, dptr(flag), value,
                                             CU_STREAM_WAIT_VALUE_GEQ));
}

int ofccl__gpu_write_flag(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *flag,
                          uint64_t value, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "a stream write of a flag (cuStreamWriteValue64)",
           ofccl__gpu_fn.cuStreamWriteValue64((CUstream)s, dptr(flag), value,
                                              CU_STREAM_WRITE_VALUE_DEFAULT));
}

int ofccl__gpu_copy(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *dst, const void *src,
                    size_t len, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "a GPU copy (cuMemcpyAsync)",
           ofccl__gpu_fn.cuMemcpyAsync(dptr(dst), dptr(src), len, (CUstream)s));
}

int ofccl__gpu_mem_info(ofccl__gpu_t *g, int dev, size_t *free_bytes, size_t *total,
                        ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "cuMemGetInfo", ofccl__gpu_fn.cuMemGetInfo(free_bytes, total));
}

int ofccl__gpu_stream_sync(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "waiting for a CUDA stream", ofccl__gpu_fn.cuStreamSynchronize((CUstream)s));
}

int ofccl__gpu_copy_sync(ofccl__gpu_t *g, int dev, void *dst, const void *src, size_t len,
                         ofccl__err_t *e)
{
    IN_DEV(g, dev, e, "a GPU copy (cuMemcpy)", ofccl__gpu_fn.cuMemcpy(dptr(dst), dptr(src), len));
}
