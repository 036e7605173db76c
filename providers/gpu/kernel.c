/*
 * Launching ofccl's kernels: the fat binary is loaded once per device (in
 * its primary context) on first use, and each kernel found by name.
 */
#include <string.h>

#include "gpu_impl.h"
#include "kernel_args.h"
#include "util.h"

#define COPY_THREADS OFCCL__GPU_COPY_THREADS

const char *const ofccl__gpu_kernel_names[OFCCL__GPU_KERNELS] = {"ofccl_copy", "ofccl_chain",
                                                                 "ofccl_reduce", "ofccl_signal"};

/* Kernel k of device dev, loaded on first use; the caller is inside the
 * device's context. */
static int kernel_of(ofccl__gpu_t *g, int dev, int k, CUfunction *fn, ofccl__err_t *e)
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
    if (res == CUDA_SUCCESS && d->fn[k] == NULL) {
        CUfunction f = NULL;
        res =
            ofccl__gpu_fn.cuModuleGetFunction(&f, (CUmodule)d->module, ofccl__gpu_kernel_names[k]);
        if (res == CUDA_SUCCESS)
            d->fn[k] = f;
    }
    pthread_mutex_unlock(&g->lock);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res,
                                 "loading ofccl's GPU kernels (built for sm_80 and sm_90, with "
                                 "PTX for later GPUs)");
    *fn = (CUfunction)d->fn[k];
    return 0;
}

int ofccl__gpu_load_kernels(ofccl__gpu_t *g, int dev, ofccl__err_t *e)
{
    CUfunction fn = NULL;
    int res = ofccl__gpu_enter(g, dev), rc = 0;

    if (res != CUDA_SUCCESS) {
        ofccl__gpu_leave(g);
        return ofccl__gpu_cufail(g, e, res, "loading ofccl's GPU kernels");
    }
    for (int k = 0; rc == 0 && k < OFCCL__GPU_KERNELS; k++)
        rc = kernel_of(g, dev, k, &fn, e);
    ofccl__gpu_leave(g);
    return rc;
}

/* Launch kernel k with one by-value argument block. */
static int launch(ofccl__gpu_t *g, int dev, int k, ofccl__gpu_stream_t s, unsigned blocks,
                  void *args, ofccl__err_t *e)
{
    void *params[] = {args};
    CUfunction fn = NULL;
    int res, rc;

    if ((res = ofccl__gpu_enter(g, dev)) != CUDA_SUCCESS) {
        ofccl__gpu_leave(g);
        return ofccl__gpu_cufail(g, e, res, ofccl__gpu_kernel_names[k]);
    }
    if ((rc = kernel_of(g, dev, k, &fn, e)) != 0) {
        ofccl__gpu_leave(g);
        return rc;
    }
    res = ofccl__gpu_fn.cuLaunchKernel(fn, blocks, 1, 1, COPY_THREADS, 1, 1, 0, (CUstream)s, params,
                                       NULL);
    ofccl__gpu_leave(g);
    if (res != CUDA_SUCCESS)
        return ofccl__gpu_cufail(g, e, res, "launching an ofccl kernel");
    return 0;
}

/* Blocks for `vecs` 16-byte vectors at `per` per thread per pass: no more
 * than the SMs granted, and none without work. */
static unsigned grid(size_t vecs, size_t per, int sms)
{
    size_t span = per * COPY_THREADS;

    return (unsigned)OFCCL__MIN((vecs + span - 1) / span, (size_t)OFCCL__MAX(sms, 1));
}

int ofccl__gpu_copy_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *dsts,
                           int ndst, const void *src, size_t len, int sms, const void *abort,
                           ofccl__err_t *e)
{
    struct ofccl__copy_args a;
    size_t vecs;

    if (ndst < 1 || ndst > OFCCL__GPU_COPY_DSTS)
        return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "copy kernel: %d destinations (1 to %d)", ndst, OFCCL__GPU_COPY_DSTS);
    if (len == 0)
        return 0;
    memset(&a, 0, sizeof(a));
    memcpy(a.dst, dsts, (size_t)ndst * sizeof(*dsts));
    a.src = src;
    a.len = len;
    a.abort = abort;
    a.ndst = ndst;
    /* Two vectors per thread per pass. */
    vecs = (len + 15) / 16;
    return launch(g, dev, OFCCL__GPU_K_COPY, s, grid(vecs, 2, sms), &a, e);
}

int ofccl__gpu_chain(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, const void *src, void *next,
                     size_t len, size_t chunk, int blocks, void *in, void *out, uint64_t base,
                     const void *abort, ofccl__err_t *e)
{
    struct ofccl__chain_args a = {src, next, len, chunk, in, out, base, abort};
    size_t unit;

    blocks = OFCCL__MIN(OFCCL__MAX(blocks, 1), OFCCL__GPU_CHAIN_BLOCKS);
    unit = (size_t)16 * (size_t)blocks;
    if (len == 0)
        return 0;
    a.chunk = (OFCCL__MAX(chunk, unit) + unit - 1) / unit * unit;
    return launch(g, dev, OFCCL__GPU_K_CHAIN, s, (unsigned)blocks, &a, e);
}

int ofccl__gpu_reduce_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *dst,
                             const void *const *srcs, int nsrc, size_t count, int dtype, int kind,
                             double scalar, int ndiv, int sms, const void *abort, ofccl__err_t *e)
{
    static const size_t esize[] = {4, 8, 2, 2};
    struct ofccl__reduce_args a;
    size_t vecs;

    if (nsrc < 1 || nsrc > OFCCL__GPU_REDUCE_SRCS || dtype < 0 || dtype > 3 || kind < 0 ||
        kind > 2 || ndiv < 0)
        return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "reduction kernel: %d sources (1 to %d), dtype %d, kind %d, divisor %d",
                           nsrc, OFCCL__GPU_REDUCE_SRCS, dtype, kind, ndiv);
    if (count == 0)
        return 0;
    memset(&a, 0, sizeof(a));
    memcpy(a.src, srcs, (size_t)nsrc * sizeof(*srcs));
    a.dst = dst;
    a.count = count;
    a.abort = abort;
    a.scalar = scalar;
    a.nsrc = nsrc;
    a.dtype = dtype;
    a.kind = kind;
    a.ndiv = ndiv;
    /* One vector per thread per pass. */
    vecs = (count * esize[dtype] + 15) / 16;
    return launch(g, dev, OFCCL__GPU_K_REDUCE, s, grid(vecs, 1, sms), &a, e);
}

int ofccl__gpu_signal(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *flags, int n,
                      uint64_t value, const void *abort, ofccl__err_t *e)
{
    struct ofccl__signal_args a;
    void *params[] = {&a};
    CUfunction fn = NULL;
    int res, rc;

    if (n < 1 || n > OFCCL__GPU_COPY_DSTS)
        return ofccl__fail(g->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "signal kernel: %d flags (1 to %d)", n, OFCCL__GPU_COPY_DSTS);
    memset(&a, 0, sizeof(a));
    memcpy(a.flag, flags, (size_t)n * sizeof(*flags));
    a.value = value;
    a.abort = abort;
    a.n = n;
    if ((res = ofccl__gpu_enter(g, dev)) != CUDA_SUCCESS) {
        ofccl__gpu_leave(g);
        return ofccl__gpu_cufail(g, e, res, "ofccl_signal");
    }
    if ((rc = kernel_of(g, dev, OFCCL__GPU_K_SIGNAL, &fn, e)) != 0) {
        ofccl__gpu_leave(g);
        return rc;
    }
    /* One thread does it all. */
    res = ofccl__gpu_fn.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, params, NULL);
    ofccl__gpu_leave(g);
    return res != CUDA_SUCCESS ? ofccl__gpu_cufail(g, e, res, "launching ofccl_signal") : 0;
}
