/*
 * Launching ofccl's kernels: the fat binary is loaded once per device (in
 * its primary context) on first use, and each kernel found by name.
 */
#include <string.h>

#include "gpu_impl.h"
#include "util.h"

#define COPY_THREADS 512

/* The layout of struct ofccl_copy_args in kernels.cu. */
struct copy_args {
    void *dst[OFCCL__GPU_COPY_DSTS];
    const void *src;
    unsigned long long len;
    const void *abort;
    int ndst;
};

/* Caller is inside the device's context. */
static int copy_fn(ofccl__gpu_t *g, int dev, CUfunction *fn, ofccl__err_t *e)
{
    struct ofccl__gpu_dev *d = &g->dev[dev];
    int res = CUDA_SUCCESS;

    pthread_mutex_lock(&g->lock);
    if (d->module == NULL) {
        CUmodule m = NULL;
        res = ofccl__gpu_fn.cuModuleLoadData(&m, ofccl__gpu_fatbin);
        if (res == CUDA_SUCCESS)
            d->module = m;
    }
    if (res == CUDA_SUCCESS && d->copy_fn == NULL) {
        CUfunction f = NULL;
        res = ofccl__gpu_fn.cuModuleGetFunction(&f, (CUmodule)d->module, "ofccl_copy");
        if (res == CUDA_SUCCESS)
            d->copy_fn = f;
        ofccl__gpu_fn.cuDeviceGetAttribute(&d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                           d->cu);
    }
    pthread_mutex_unlock(&g->lock);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res,
                                 "loading ofccl's GPU kernels (built for sm_80 and sm_90, with "
                                 "PTX for later GPUs)");
    *fn = (CUfunction)d->copy_fn;
    return 0;
}

int ofccl__gpu_copy_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *dsts,
                           int ndst, const void *src, size_t len, int sms, const void *abort,
                           ofccl__err_t *e)
{
    struct copy_args a;
    void *params[] = {&a};
    CUfunction fn = NULL;
    unsigned blocks;
    size_t vecs;
    int res, rc;

    if (ndst < 1 || ndst > OFCCL__GPU_COPY_DSTS)
        return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "copy kernel: %d destinations (1 to %d)", ndst, OFCCL__GPU_COPY_DSTS);
    if (len == 0)
        return 0;
    if ((res = ofccl__gpu_enter(g, dev)) != CUDA_SUCCESS) {
        ofccl__gpu_leave(g);
        return ofccl__gpu_cufail(g, e, res, "copy kernel");
    }
    if ((rc = copy_fn(g, dev, &fn, e)) != 0) {
        ofccl__gpu_leave(g);
        return rc;
    }
    memset(&a, 0, sizeof(a));
    memcpy(a.dst, dsts, (size_t)ndst * sizeof(*dsts));
    a.src = src;
    a.len = len;
    a.abort = abort;
    a.ndst = ndst;
    /* Two vectors per thread per pass; no more blocks than the SMs granted. */
    vecs = (len + 15) / 16;
    blocks = (unsigned)OFCCL__MIN((vecs + 2 * COPY_THREADS - 1) / (2 * COPY_THREADS),
                                  (size_t)OFCCL__MAX(sms, 1));
    res = ofccl__gpu_fn.cuLaunchKernel(fn, blocks, 1, 1, COPY_THREADS, 1, 1, 0, (CUstream)s, params,
                                       NULL);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "launching ofccl's copy kernel");
    return 0;
}
