/*
 * ofccl's GPU kernels, compiled at build time by nvcc into a fat binary
 * (sm_80, sm_90, and PTX for later GPUs) that cuda.c loads through the
 * driver API. C linkage: the host side looks them up by name.
 */
#include <stdint.h>

/* Arguments of ofccl_copy, passed by value (kernel.c fills the same layout). */
struct ofccl_copy_args {
    void *dst[8];
    const void *src;
    unsigned long long len;
    const volatile unsigned long long *abort; /* nonzero there: copy nothing (may be NULL) */
    int ndst;
};

/* Copy `len` bytes from src to every destination: each 16-byte vector of the
 * source is read once and stored to all destinations, so a push to n peers
 * reads local memory once. Blocks stride over the vectors; the tail and
 * misaligned buffers go byte by byte. A rank that gave up (its abort word
 * set by the host: a peer died, a deadline passed) writes nothing into the
 * peers' memory. */
extern "C" __global__ void __launch_bounds__(512) ofccl_copy(struct ofccl_copy_args a)
{
    __shared__ int quit;

    /* One read of the abort word (host memory, over PCIe) per block. */
    if (threadIdx.x == 0)
        quit = a.abort != nullptr && *a.abort != 0;
    __syncthreads();
    if (quit)
        return;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uintptr_t align = (uintptr_t)a.src;
    size_t n16, i;

    for (int d = 0; d < a.ndst; d++)
        align |= (uintptr_t)a.dst[d];
    n16 = (align & 15) == 0 ? a.len / 16 : 0;
    const uint4 *s = (const uint4 *)a.src;
    for (i = tid; i + stride < n16; i += 2 * stride) {
        uint4 v0 = s[i], v1 = s[i + stride];
        for (int d = 0; d < a.ndst; d++) {
            uint4 *o = (uint4 *)a.dst[d];
            o[i] = v0;
            o[i + stride] = v1;
        }
    }
    if (i < n16) {
        uint4 v0 = s[i];
        for (int d = 0; d < a.ndst; d++)
            ((uint4 *)a.dst[d])[i] = v0;
    }
    for (size_t b = n16 * 16 + tid; b < a.len; b += stride) {
        unsigned char v = ((const unsigned char *)a.src)[b];
        for (int d = 0; d < a.ndst; d++)
            ((unsigned char *)a.dst[d])[b] = v;
    }
}
