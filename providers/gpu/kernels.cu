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
/* Has this rank given up (its abort word, in host memory, read over PCIe
 * once per block)? Every thread of the block gets the same answer. */
static __device__ bool block_quits(const volatile unsigned long long *abort)
{
    __shared__ int quit;

    if (threadIdx.x == 0)
        quit = abort != nullptr && *abort != 0;
    __syncthreads();
    return quit != 0;
}

extern "C" __global__ void __launch_bounds__(512) ofccl_copy(struct ofccl_copy_args a)
{
    if (block_quits(a.abort))
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
    const char *src;                 /* this rank's copy of the data (the root's source) */
    char *next;                      /* the successor's buffer, NULL for the last rank */
    unsigned long long len;          /* bytes */
    unsigned long long chunk;        /* bytes per chunk, a multiple of 16 * blockDim.x */
    volatile unsigned long long *in; /* [gridDim.x] flags the predecessor sets here (NULL: root) */
    unsigned long long *out;         /* [gridDim.x] the successor's flags (NULL: last rank) */
    unsigned long long base;         /* flag value of chunk c is base + c + 1 */
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
            unsigned long long v16 =
                ((uintptr_t)s | (uintptr_t)d | lo) & 15 ? lo : lo + (hi - lo) / 16 * 16;
            const unsigned long long step = blockDim.x * 16ull;
            unsigned long long i = lo + threadIdx.x * 16;
            for (; i + 3 * step < v16; i += 4 * step) {
                uint4 x0 = __ldcg((const uint4 *)(s + i)),
                      x1 = __ldcg((const uint4 *)(s + i + step));
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

/* Arguments of ofccl_signal (kernel.c fills the same layout). */
struct ofccl_signal_args {
    unsigned long long *flag[8]; /* 64-bit words to set (peers' flags, host memory) */
    unsigned long long value;
    const volatile unsigned long long *abort; /* nonzero: set nothing (may be NULL) */
    int n;
};

/* Tell the destinations of the copies before it on the stream that the data
 * is there, unless this rank gave up (its abort word): a stream the host
 * released after a failure then signals nothing, and no peer takes a DONE
 * for data that never came. One thread: the system-scope fence orders the
 * earlier kernels' stores (stream order) before the flags. */
extern "C" __global__ void ofccl_signal(struct ofccl_signal_args a)
{
    if (threadIdx.x != 0 || blockIdx.x != 0 || (a.abort != nullptr && *a.abort != 0))
        return;
    __threadfence_system();
    for (int i = 0; i < a.n; i++)
        *(volatile unsigned long long *)a.flag[i] = a.value;
}

/* ---- reduction (reduce-scatter) ---- */

#define OFCCL_REDUCE_SRCS 16

/* Arguments of ofccl_reduce (kernel.c fills the same layout). dtype and kind
 * are ofccl_dtype_t and the redop kind: f32 0, f64 1, bf16 2, f16 3; sum 0,
 * avg 1, premul sum 2. */
struct ofccl_reduce_args {
    const void *src[OFCCL_REDUCE_SRCS]; /* in the order they are summed */
    void *dst;
    unsigned long long count; /* elements */
    const volatile unsigned long long *abort;
    double scalar; /* premul sum: the factor (rounded to f32 below f64) */
    int nsrc;
    int dtype;
    int kind;
    int ndiv; /* divide the sum by this (avg), 0: not */
};

/* 32-bit word w of a vector, and its setting (w a constant once unrolled:
 * the vector stays in registers). */
static __device__ unsigned vword(const uint4 &v, int w)
{
    return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}
static __device__ void vset(uint4 &v, int w, unsigned x)
{
    if (w == 0)
        v.x = x;
    else if (w == 1)
        v.y = x;
    else if (w == 2)
        v.z = x;
    else
        v.w = x;
}

static __device__ float bf16_get(unsigned short h)
{
    return __uint_as_float((unsigned)h << 16);
}
/* Round to nearest even; a NaN stays a quiet NaN with its sign and top
 * payload bits (lib/core/reduce_cvt.h does the same). */
static __device__ unsigned short bf16_put(float x)
{
    unsigned u = __float_as_uint(x);
    return (u & 0x7fffffffu) > 0x7f800000u
               ? (unsigned short)((u | 0x00400000u) >> 16)
               : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static __device__ float f16_get(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
static __device__ unsigned short f16_put(float x)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

/* One dtype: its accumulator, element j of a 16-byte vector (E of them),
 * and element i of an array. Every operation is rounded on its own
 * (__fadd_rn and friends are never fused into an FMA), so a result has the
 * bits of ofccl's CPU reduction of the same sources in the same order
 * (lib/core/reduce.c, docs/reductions.md). */
struct red_f32 {
    typedef float acc;
    enum { E = 4 };
    static __device__ float vget(const uint4 &v, int j)
    {
        return __uint_as_float(vword(v, j));
    }
    static __device__ void vput(uint4 &v, int j, float x)
    {
        vset(v, j, __float_as_uint(x));
    }
    static __device__ float get(const void *p, size_t i)
    {
        return ((const float *)p)[i];
    }
    static __device__ void put(void *p, size_t i, float x)
    {
        ((float *)p)[i] = x;
    }
};
struct red_f64 {
    typedef double acc;
    enum { E = 2 };
    static __device__ double vget(const uint4 &v, int j)
    {
        return __hiloint2double((int)vword(v, 2 * j + 1), (int)vword(v, 2 * j));
    }
    static __device__ void vput(uint4 &v, int j, double x)
    {
        vset(v, 2 * j, (unsigned)__double2loint(x));
        vset(v, 2 * j + 1, (unsigned)__double2hiint(x));
    }
    static __device__ double get(const void *p, size_t i)
    {
        return ((const double *)p)[i];
    }
    static __device__ void put(void *p, size_t i, double x)
    {
        ((double *)p)[i] = x;
    }
};
template <float (*GET)(unsigned short), unsigned short (*PUT)(float)> struct red_half {
    typedef float acc;
    enum { E = 8 };
    static __device__ float vget(const uint4 &v, int j)
    {
        return GET((unsigned short)(vword(v, j / 2) >> (16 * (j & 1))));
    }
    static __device__ void vput(uint4 &v, int j, float x)
    {
        unsigned w = j & 1 ? vword(v, j / 2) : 0;
        vset(v, j / 2, w | (unsigned)PUT(x) << (16 * (j & 1)));
    }
    static __device__ float get(const void *p, size_t i)
    {
        return GET(((const unsigned short *)p)[i]);
    }
    static __device__ void put(void *p, size_t i, float x)
    {
        ((unsigned short *)p)[i] = PUT(x);
    }
};
typedef red_half<bf16_get, bf16_put> red_bf16;
typedef red_half<f16_get, f16_put> red_f16;

static __device__ float red_add(float a, float b)
{
    return __fadd_rn(a, b);
}
static __device__ double red_add(double a, double b)
{
    return __dadd_rn(a, b);
}
static __device__ float red_mul(float a, float b)
{
    return __fmul_rn(a, b);
}
static __device__ double red_mul(double a, double b)
{
    return __dmul_rn(a, b);
}
static __device__ float red_div(float a, float b)
{
    return __fdiv_rn(a, b);
}
static __device__ double red_div(double a, double b)
{
    return __ddiv_rn(a, b);
}

/* Elements [E v, E v + E) of every source (16 bytes each) summed into x: the
 * first source, then the others in order. Every source's vector is loaded
 * before the first addition, so a thread has all its loads in flight. */
template <class T, bool PREMUL>
static __device__ void red_vec(const ofccl_reduce_args &a, size_t v, typename T::acc c,
                               typename T::acc x[T::E])
{
    uint4 in[OFCCL_REDUCE_SRCS];

#pragma unroll
    for (int k = 0; k < OFCCL_REDUCE_SRCS; k++)
        if (k < a.nsrc)
            in[k] = __ldcg((const uint4 *)a.src[k] + v);
#pragma unroll
    for (int j = 0; j < T::E; j++) {
        x[j] = T::vget(in[0], j);
        if (PREMUL)
            x[j] = red_mul(x[j], c);
    }
#pragma unroll
    for (int k = 1; k < OFCCL_REDUCE_SRCS; k++)
        if (k < a.nsrc)
#pragma unroll
            for (int j = 0; j < T::E; j++) {
                typename T::acc y = T::vget(in[k], j);
                x[j] = red_add(x[j], PREMUL ? red_mul(y, c) : y);
            }
}

template <class T, bool PREMUL> static __device__ void red_run(const ofccl_reduce_args &a)
{
    typedef typename T::acc A;
    const A c = (A)a.scalar, div = (A)a.ndiv;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uintptr_t align = (uintptr_t)a.dst;
    size_t nvec;

    for (int k = 0; k < a.nsrc; k++)
        align |= (uintptr_t)a.src[k];
    nvec = (align & 15) == 0 ? a.count / T::E : 0;
    for (size_t i = tid; i < nvec; i += stride) {
        A x[T::E];
        uint4 o = make_uint4(0, 0, 0, 0);
        red_vec<T, PREMUL>(a, i, c, x);
#pragma unroll
        for (int j = 0; j < T::E; j++)
            T::vput(o, j, a.ndiv ? red_div(x[j], div) : x[j]);
        ((uint4 *)a.dst)[i] = o;
    }
    /* The tail, and buffers not 16-byte aligned: element by element. */
    for (size_t e = nvec * T::E + tid; e < a.count; e += stride) {
        A x = T::get(a.src[0], e);
        if (PREMUL)
            x = red_mul(x, c);
        for (int k = 1; k < a.nsrc; k++) {
            A y = T::get(a.src[k], e);
            x = red_add(x, PREMUL ? red_mul(y, c) : y);
        }
        T::put(a.dst, e, a.ndiv ? red_div(x, div) : x);
    }
}

template <class T> static __device__ void red_kind(const ofccl_reduce_args &a)
{
    if (a.kind == 2)
        red_run<T, true>(a);
    else
        red_run<T, false>(a);
}

/* dst = the sources reduced element by element (sum, average or
 * pre-multiplied sum), in source order. A rank that gave up (its abort word
 * set) writes nothing. dst may be exactly the first source (in place). */
extern "C" __global__ void __launch_bounds__(512) ofccl_reduce(struct ofccl_reduce_args a)
{
    if (block_quits(a.abort))
        return;
    switch (a.dtype) {
    case 0:
        red_kind<red_f32>(a);
        break;
    case 1:
        red_kind<red_f64>(a);
        break;
    case 2:
        red_kind<red_bf16>(a);
        break;
    case 3:
        red_kind<red_f16>(a);
        break;
    }
}
