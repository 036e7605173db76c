/*
 * Private to providers/gpu/ (with CUDA): the driver's entry points as loaded,
 * and the process's driver handle.
 */
#ifndef OFCCL_PROVIDERS_GPU_IMPL_H
#define OFCCL_PROVIDERS_GPU_IMPL_H

#include <cuda.h>
#include <pthread.h>

#include "gpu.h"

#define FN(name) __typeof__(&name) name
struct ofccl__gpu_fns {
    FN(cuInit);
    FN(cuDriverGetVersion);
    FN(cuGetErrorString);
    FN(cuGetErrorName);
    FN(cuDeviceGetCount);
    FN(cuDeviceGet);
    FN(cuDeviceGetName);
    FN(cuDeviceGetAttribute);
    FN(cuDeviceGetPCIBusId);
    FN(cuDeviceGetByPCIBusId);
    FN(cuDeviceTotalMem);
    FN(cuDeviceCanAccessPeer);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuDevicePrimaryCtxRelease);
    FN(cuCtxGetCurrent);
    FN(cuCtxSetCurrent);
    FN(cuCtxGetDevice);
    FN(cuPointerGetAttribute);
    FN(cuMemAlloc);
    FN(cuMemGetInfo);
    FN(cuMemFree);
    FN(cuMemGetAddressRange);
    FN(cuIpcGetMemHandle);
    FN(cuIpcOpenMemHandle);
    FN(cuIpcCloseMemHandle);
    FN(cuMemHostRegister);
    FN(cuMemHostUnregister);
    FN(cuMemHostGetDevicePointer);
    FN(cuStreamCreate);
    FN(cuStreamDestroy);
    FN(cuStreamWaitEvent);
    FN(cuStreamSynchronize);
    FN(cuStreamWaitValue64);
    FN(cuStreamWriteValue64);
    FN(cuEventCreate);
    FN(cuEventDestroy);
    FN(cuEventRecord);
    FN(cuEventQuery);
    FN(cuEventSynchronize);
    FN(cuEventElapsedTime);
    FN(cuMemcpyAsync);
    FN(cuMemcpy);
    FN(cuModuleLoadData);
    FN(cuModuleGetFunction);
    FN(cuModuleUnload);
    FN(cuLaunchKernel);
    FN(cuMemRetainAllocationHandle);
    FN(cuMemExportToShareableHandle);
    FN(cuMemImportFromShareableHandle);
    FN(cuMemRelease);
    FN(cuMemCreate);
    FN(cuMemAddressReserve);
    FN(cuMemAddressFree);
    FN(cuMemMap);
    FN(cuMemUnmap);
    FN(cuMemSetAccess);
    FN(cuMemGetAllocationGranularity);
};
#undef FN
extern struct ofccl__gpu_fns ofccl__gpu_fn;

#include "kernel_args.h"

struct ofccl__gpu_dev {
    CUdevice cu;
    void *ctx;                    /* the primary context, retained on first use (CUcontext) */
    void *module;                 /* ofccl's kernels, loaded on first launch (CUmodule) */
    void *fn[OFCCL__GPU_KERNELS]; /* each found on first launch (CUfunction) */
};

struct ofccl__gpu {
    const ofccl__log_t *log; /* the first opener's */
    void *dl;
    int version;
    int ndev;
    int refs;
    pthread_mutex_t lock; /* guards dev[].ctx and dev[].module */
    struct ofccl__gpu_dev dev[OFCCL__GPU_MAX_DEVICES];
};

/* Make device `dev`'s primary context current for this thread (a CUresult);
 * ofccl__gpu_leave puts the caller's back. Not nested. */
int ofccl__gpu_enter(ofccl__gpu_t *g, int dev);
void ofccl__gpu_leave(ofccl__gpu_t *g);
/* Peers' memory mapped into this process (ofccl__gpu_mappings). */
extern _Atomic long ofccl__gpu_nmapped;
/* Fail `e` with a CUDA result's name and text: "<what>: CUDA error N (...)". */
int ofccl__gpu_cufail(const ofccl__gpu_t *g, ofccl__err_t *e, int res, const char *what);

/* The kernels' fat binary (sm_80, sm_90, PTX), generated at build time. */
extern const unsigned char ofccl__gpu_fatbin[];
extern const size_t ofccl__gpu_fatbin_len;

#endif
