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

/* Arguments of ofccl_chain (kernel.c fills the same layout). */
struct ofccl_chain_args {
    const char *src;            /* this rank's copy of the data (the root's source) */
    char *next;                 /* the successor's buffer, NULL for the last rank */
    unsigned long long len;     /* bytes */
    unsigned long long chunk;   /* bytes per chunk, a multiple of 16 * blockDim.x */
    volatile unsigned long long *in; /* [gridDim.x] flags the predecessor sets here (NULL: root) */
    unsigned long long *out;    /* [gridDim.x] the successor's flags (NULL: last rank) */
    unsigned long long base;    /* flag value of chunk c is base + c + 1 */
    const volatile unsigned long long *abort; /* nonzero: give up (host memory) */
};

/* A pipelined chain (broadcast): chunk by chunk, block b waits until the
 * predecessor's block b has stored its slice of the chunk here, then stores
 * that slice into the successor's buffer and sets the successor's flag b. A
 * link carries the data once, and the chunks overlap along the chain. Every
 * rank runs the same grid, so slice b of a chunk is block b's on every rank. */
extern "C" __global__ void __launch_bounds__(512) ofccl_chain(struct ofccl_chain_args a)
{
    __shared__ int quit;
    const unsigned long long nchunks = (a.len + a.chunk - 1) / a.chunk;

    for (unsigned long long c = 0; c < nchunks; c++) {
        unsigned long long off = c * a.chunk;
        unsigned long long n = a.len - off < a.chunk ? a.len - off : a.chunk;
        /* A block's slice: a 16-byte multiple, at least 16 (a short chunk
         * leaves the last blocks nothing). */
        unsigned long long per = ((n + gridDim.x - 1) / gridDim.x + 15) & ~15ull;
        unsigned long long lo = blockIdx.x * per < n ? blockIdx.x * per : n;
        unsigned long long hi = lo + per < n ? lo + per : n;

        if (threadIdx.x == 0) {
            quit = 0;
            if (a.in != nullptr) {
                unsigned spins = 0;
                while (a.in[blockIdx.x] < a.base + c + 1)
                    if ((++spins & 1023) == 0 && a.abort != nullptr && *a.abort != 0) {
                        quit = 1;
                        break;
                    }
            } else if (a.abort != nullptr && *a.abort != 0) {
                quit = 1;
            }
        }
        __syncthreads();
        if (quit)
            return;
        if (a.next != nullptr && lo < hi) {
            const char *s = a.src + off;
            char *d = a.next + off;
            /* What the predecessor stored here is read past L1 (.cg), four
             * vectors in flight per thread. */
            unsigned long long v16 = ((uintptr_t)s | (uintptr_t)d | lo) & 15 ? lo : lo + (hi - lo) / 16 * 16;
            const unsigned long long step = blockDim.x * 16ull;
            unsigned long long i = lo + threadIdx.x * 16;
            for (; i + 3 * step < v16; i += 4 * step) {
                uint4 x0 = __ldcg((const uint4 *)(s + i)), x1 = __ldcg((const uint4 *)(s + i + step));
                uint4 x2 = __ldcg((const uint4 *)(s + i + 2 * step));
                uint4 x3 = __ldcg((const uint4 *)(s + i + 3 * step));
                *(uint4 *)(d + i) = x0;
                *(uint4 *)(d + i + step) = x1;
                *(uint4 *)(d + i + 2 * step) = x2;
                *(uint4 *)(d + i + 3 * step) = x3;
            }
            for (; i + 16 <= v16; i += step)
                *(uint4 *)(d + i) = __ldcg((const uint4 *)(s + i));
            for (unsigned long long b = v16 + threadIdx.x; b < hi; b += blockDim.x)
                d[b] = __ldcg((const signed char *)(s + b));
        }
        /* The block's stores, then (thread 0, a system-scope fence after the
         * barrier) the flag that says they are there. */
        __syncthreads();
        if (threadIdx.x == 0 && a.out != nullptr) {
            __threadfence_system();
            *(volatile unsigned long long *)&a.out[blockIdx.x] = a.base + c + 1;
        }
    }
}
