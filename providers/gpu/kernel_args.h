/*
 * Private to providers/gpu/ (with CUDA): the by-value argument blocks of
 * ofccl's kernels, laid out as kernels.cu declares them (struct
 * ofccl_copy_args, ofccl_chain_args, ofccl_reduce_args, ofccl_signal_args). kernel.c fills them
 * for a launch; the emulated device (test/gpu/emu/emu_stream.c) reads them back.
 */
#ifndef OFCCL_PROVIDERS_GPU_KERNEL_ARGS_H
#define OFCCL_PROVIDERS_GPU_KERNEL_ARGS_H

#include "gpu.h"

#define OFCCL__GPU_COPY_THREADS 512 /* threads per block of every kernel */

enum {
    OFCCL__GPU_K_COPY,
    OFCCL__GPU_K_CHAIN,
    OFCCL__GPU_K_REDUCE,
    OFCCL__GPU_K_SIGNAL,
    OFCCL__GPU_KERNELS
};

/* The kernels' names in the fat binary, by OFCCL__GPU_K_*. */
extern const char *const ofccl__gpu_kernel_names[OFCCL__GPU_KERNELS];

struct ofccl__copy_args {
    void *dst[OFCCL__GPU_COPY_DSTS];
    const void *src;
    unsigned long long len;
    const void *abort;
    int ndst;
};

struct ofccl__chain_args {
    const void *src;
    void *next;
    unsigned long long len, chunk;
    void *in, *out;
    unsigned long long base;
    const void *abort;
};

struct ofccl__reduce_args {
    const void *src[OFCCL__GPU_REDUCE_SRCS];
    void *dst;
    unsigned long long count;
    const void *abort;
    double scalar;
    int nsrc, dtype, kind, ndiv;
};

struct ofccl__signal_args {
    void *flag[OFCCL__GPU_COPY_DSTS];
    unsigned long long value;
    const void *abort;
    int n;
};

#endif
