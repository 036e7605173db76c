/*
 * Host reduction kernels (see reduce.h for the contract, docs/reductions.md for
 * the user-facing semantics).
 *
 * Rounding, exactly:
 *
 *  - bf16/f16 -> f32 is exact (every bf16 and f16 value is an f32 value,
 *    including f16 subnormals, which become f32 normals). NaN payloads are
 *    kept bit for bit (a signalling NaN stays signalling in the f32 bits).
 *  - f32 -> bf16 / f32 -> f16 round to nearest, ties to even, on the value
 *    (not on the encoding): finite values whose rounded magnitude exceeds the
 *    largest finite value become +-inf (bf16: at or above 0x1.ff8p127, which
 *    is the FLT_MAX tie; f16: at or above 65520, halfway between 65504 and
 *    65536). f16 subnormals (multiples of 2^-24) are rounded to nearest even;
 *    2^-25 becomes +0, anything above it 2^-24. bf16 subnormals come out of the
 *    same rule (the f32 bits are rounded at bit 16). The sign of zero is kept.
 *    NaN becomes a quiet NaN with the same sign and the top payload bits.
 *  - The reduction of one element is, in f32 for f32/bf16/f16 and in f64 for
 *    f64, with each step rounded to nearest even:
 *        p_k = x_k               (SUM, AVG)
 *        p_k = x_k * c           (PREMUL_SUM; c = (float)scalar, or scalar for f64)
 *        s   = (((p_0 + p_1) + p_2) + ... + p_{n-1})      source order
 *        r   = s / ndiv          (only when ndiv > 0; a true division, never a
 *                                 multiplication by 1/ndiv, so r is the correctly
 *                                 rounded quotient of s)
 *        dst = round_to_dtype(r) (an identity for f32/f64)
 *    The result is therefore deterministic and independent of the block size,
 *    of the vector width and of the buffers' alignment. For bf16/f16 with AVG
 *    it is a double rounding (f32 quotient, then dtype), not the correctly
 *    rounded average of the exact sum.
 *  - The products and sums are separate statements so that clang's default
 *    -ffp-contract=on cannot fuse them; a build with -ffp-contract=fast on an
 *    FMA target (gcc in gnu mode) may fuse x*c+s and become slightly more
 *    accurate but not bit-identical to other builds. Never build this file
 *    with -ffast-math (it would turn the division into a reciprocal multiply
 *    and break NaN handling).
 *  - Conversions are integer bit manipulation except two exact-by-design float
 *    operations (the f16 subnormal paths), which rely on the default rounding
 *    mode (to nearest) and stay correct under FTZ/DAZ because no operand or
 *    result there is an f32 subnormal that matters.
 *
 * Why blocks: each block of OFCCL__RED_BLOCK elements is converted (and
 * scaled) from source 0 into an f32/f64 accumulator on the stack, the other
 * sources are added to it, and the block is divided and converted into dst.
 * Every source block is fully read before the dst block is written, which is
 * what makes dst == srcs[k] safe. Full blocks have a compile-time trip count
 * so gcc vectorises them even at -O2 (its "very cheap" cost model refuses
 * loops that need a scalar epilogue); the tail block runs the same code with a
 * runtime count.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"

#define OFCCL__RED_BLOCK 512

#if defined(__GNUC__)
#define OFCCL__ALWAYS_INLINE static inline __attribute__((always_inline))
#define OFCCL__ALIGNED(n) __attribute__((aligned(n)))
#else
#define OFCCL__ALWAYS_INLINE static inline
#define OFCCL__ALIGNED(n)
#endif

size_t ofccl_dtype_size(ofccl_dtype_t dtype)
{
    switch (dtype) {
    case OFCCL_F32:
        return 4;
    case OFCCL_F64:
        return 8;
    case OFCCL_BF16:
    case OFCCL_F16:
        return 2;
    default:
        return 0;
    }
}

/* ---- scalar conversions (inlined into the block loops) ---- */

OFCCL__ALWAYS_INLINE uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

OFCCL__ALWAYS_INLINE float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Branch-free select: gcc does not if-convert the f16 conversions' chained
 * ternaries (it sinks the float work into branches and gives up on the loop),
 * but it vectorises and/or/andnot with compare masks. */
OFCCL__ALWAYS_INLINE uint32_t sel(int cond, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)cond;

    return (a & m) | (b & ~m);
}

OFCCL__ALWAYS_INLINE float cvt_bf16_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

OFCCL__ALWAYS_INLINE uint16_t cvt_f32_bf16(float f)
{
    uint32_t u = f32_bits(f);
    /* Adding 0x7fff plus the kept LSB rounds the low half to nearest even; a
     * carry out of the mantissa bumps the exponent, which also turns values at
     * or above the FLT_MAX tie into inf. The wrap for negative NaNs is
     * harmless: NaNs take the other branch. */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* Truncating a NaN could clear every payload bit left and make it inf. */
    uint32_t quiet = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

OFCCL__ALWAYS_INLINE float cvt_f16_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t em = ((uint32_t)h & 0x7fffu) << 13; /* exponent and mantissa at f32 places */
    uint32_t normal = em + ((127u - 15u) << 23);
    uint32_t special = em + ((255u - 31u) << 23); /* exponent 31 -> 255, payload kept */
    /* A subnormal m * 2^-24 is (2^-14 + m * 2^-24) - 2^-14: an exact
     * subtraction of two f32 normals, cheaper to vectorise than normalising
     * with a leading-zero count. */
    float sub = bits_f32(em + (113u << 23)) - bits_f32(113u << 23);
    uint32_t r = sel(em >= (0x7c00u << 13), special, normal);
    r = sel(em < (0x0400u << 13), f32_bits(sub), r);
    return bits_f32(r | sign);
}

OFCCL__ALWAYS_INLINE uint16_t cvt_f32_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    /* f16 normal range [2^-14, 65520): rebias the exponent and round the 13
     * dropped bits to nearest even; the carry into the exponent is right. */
    uint32_t normal = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* Below 2^-14: in x + 0.5f the f32 ulp is 2^-24, the f16 subnormal step,
     * so the FPU rounds to the f16 subnormal (to nearest even) and the low
     * bits are the f16 encoding, 0x400 included when it rounds up to 2^-14.
     * The clamp keeps large values and NaNs out of the float add, so it never
     * raises invalid or overflow. */
    uint32_t small = sel(a < 0x38800000u, a, 0x38800000u);
    uint32_t sub = f32_bits(bits_f32(small) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
    uint32_t r = sel(a < 0x38800000u, sub, normal);
    r = sel(a >= 0x477ff000u, 0x7c00u, r);
    r = sel(a > 0x7f800000u, nan, r);
    return (uint16_t)(r | sign);
}

float ofccl__bf16_to_f32(uint16_t h)
{
    return cvt_bf16_f32(h);
}

uint16_t ofccl__f32_to_bf16(float f)
{
    return cvt_f32_bf16(f);
}

float ofccl__f16_to_f32(uint16_t h)
{
    return cvt_f16_f32(h);
}

uint16_t ofccl__f32_to_f16(float f)
{
    return cvt_f32_f16(f);
}

/* ---- block kernels ----
 * `first` and `scaled` are constants at every call site, so each inlined copy
 * is a straight loop without branches. */

OFCCL__ALWAYS_INLINE void in_f32(float *restrict acc, const float *restrict s, size_t n,
                                 float c, int first, int scaled)
{
    for (size_t i = 0; i < n; i++) {
        float x = s[i];
        if (scaled)
            x = x * c;
        acc[i] = first ? x : acc[i] + x;
    }
}

OFCCL__ALWAYS_INLINE void in_bf16(float *restrict acc, const uint16_t *restrict s, size_t n,
                                  float c, int first, int scaled)
{
    for (size_t i = 0; i < n; i++) {
        float x = cvt_bf16_f32(s[i]);
        if (scaled)
            x = x * c;
        acc[i] = first ? x : acc[i] + x;
    }
}

OFCCL__ALWAYS_INLINE void in_f16(float *restrict acc, const uint16_t *restrict s, size_t n,
                                 float c, int first, int scaled)
{
    for (size_t i = 0; i < n; i++) {
        float x = cvt_f16_f32(s[i]);
        if (scaled)
            x = x * c;
        acc[i] = first ? x : acc[i] + x;
    }
}

OFCCL__ALWAYS_INLINE void in_f64(double *restrict acc, const double *restrict s, size_t n,
                                 double c, int first, int scaled)
{
    for (size_t i = 0; i < n; i++) {
        double x = s[i];
        if (scaled)
            x = x * c;
        acc[i] = first ? x : acc[i] + x;
    }
}

OFCCL__ALWAYS_INLINE void out_f32(float *restrict d, const float *restrict acc, size_t n,
                                  float div, int divide)
{
    for (size_t i = 0; i < n; i++)
        d[i] = divide ? acc[i] / div : acc[i];
}

OFCCL__ALWAYS_INLINE void out_bf16(uint16_t *restrict d, const float *restrict acc, size_t n,
                                   float div, int divide)
{
    for (size_t i = 0; i < n; i++)
        d[i] = cvt_f32_bf16(divide ? acc[i] / div : acc[i]);
}

OFCCL__ALWAYS_INLINE void out_f16(uint16_t *restrict d, const float *restrict acc, size_t n,
                                  float div, int divide)
{
    for (size_t i = 0; i < n; i++)
        d[i] = cvt_f32_f16(divide ? acc[i] / div : acc[i]);
}

OFCCL__ALWAYS_INLINE void out_f64(double *restrict d, const double *restrict acc, size_t n,
                                  double div, int divide)
{
    for (size_t i = 0; i < n; i++)
        d[i] = divide ? acc[i] / div : acc[i];
}

/* One block of `n` elements starting at element `off` of every buffer. The
 * macro spells the same sequence for the four dtypes; the kernels it names
 * differ per dtype. */
#define OFCCL__RED_BLOCK_BODY(IN, OUT, ETYPE)                                                      \
    do {                                                                                           \
        const ETYPE *s0 = (const ETYPE *)srcs[0] + off;                                            \
        if (scaled)                                                                                \
            IN(acc, s0, n, c, 1, 1);                                                               \
        else                                                                                       \
            IN(acc, s0, n, c, 1, 0);                                                               \
        for (int k = 1; k < nsrc; k++) {                                                           \
            const ETYPE *sk = (const ETYPE *)srcs[k] + off;                                        \
            if (scaled)                                                                            \
                IN(acc, sk, n, c, 0, 1);                                                           \
            else                                                                                   \
                IN(acc, sk, n, c, 0, 0);                                                           \
        }                                                                                          \
        if (divide)                                                                                \
            OUT((ETYPE *)dst + off, acc, n, div, 1);                                               \
        else                                                                                       \
            OUT((ETYPE *)dst + off, acc, n, div, 0);                                               \
    } while (0)

OFCCL__ALWAYS_INLINE void block_f32(void *dst, const void *const *srcs, int nsrc, size_t off,
                                    size_t n, float c, int scaled, float div, int divide)
{
    float acc[OFCCL__RED_BLOCK] OFCCL__ALIGNED(64);
    OFCCL__RED_BLOCK_BODY(in_f32, out_f32, float);
}

OFCCL__ALWAYS_INLINE void block_bf16(void *dst, const void *const *srcs, int nsrc, size_t off,
                                     size_t n, float c, int scaled, float div, int divide)
{
    float acc[OFCCL__RED_BLOCK] OFCCL__ALIGNED(64);
    OFCCL__RED_BLOCK_BODY(in_bf16, out_bf16, uint16_t);
}

OFCCL__ALWAYS_INLINE void block_f16(void *dst, const void *const *srcs, int nsrc, size_t off,
                                    size_t n, float c, int scaled, float div, int divide)
{
    float acc[OFCCL__RED_BLOCK] OFCCL__ALIGNED(64);
    OFCCL__RED_BLOCK_BODY(in_f16, out_f16, uint16_t);
}

OFCCL__ALWAYS_INLINE void block_f64(void *dst, const void *const *srcs, int nsrc, size_t off,
                                    size_t n, double c, int scaled, double div, int divide)
{
    double acc[OFCCL__RED_BLOCK] OFCCL__ALIGNED(64);
    OFCCL__RED_BLOCK_BODY(in_f64, out_f64, double);
}

#undef OFCCL__RED_BLOCK_BODY

/* Full blocks pass the constant OFCCL__RED_BLOCK as `n` (vectorised without an
 * epilogue); the tail passes the remainder. */
static void reduce_f32(void *dst, const void *const *srcs, int nsrc, size_t count, float c,
                       int scaled, float div, int divide)
{
    size_t off = 0;

    for (; count - off >= OFCCL__RED_BLOCK; off += OFCCL__RED_BLOCK)
        block_f32(dst, srcs, nsrc, off, OFCCL__RED_BLOCK, c, scaled, div, divide);
    if (off < count)
        block_f32(dst, srcs, nsrc, off, count - off, c, scaled, div, divide);
}

static void reduce_bf16(void *dst, const void *const *srcs, int nsrc, size_t count, float c,
                        int scaled, float div, int divide)
{
    size_t off = 0;

    for (; count - off >= OFCCL__RED_BLOCK; off += OFCCL__RED_BLOCK)
        block_bf16(dst, srcs, nsrc, off, OFCCL__RED_BLOCK, c, scaled, div, divide);
    if (off < count)
        block_bf16(dst, srcs, nsrc, off, count - off, c, scaled, div, divide);
}

static void reduce_f16(void *dst, const void *const *srcs, int nsrc, size_t count, float c,
                       int scaled, float div, int divide)
{
    size_t off = 0;

    for (; count - off >= OFCCL__RED_BLOCK; off += OFCCL__RED_BLOCK)
        block_f16(dst, srcs, nsrc, off, OFCCL__RED_BLOCK, c, scaled, div, divide);
    if (off < count)
        block_f16(dst, srcs, nsrc, off, count - off, c, scaled, div, divide);
}

static void reduce_f64(void *dst, const void *const *srcs, int nsrc, size_t count, double c,
                       int scaled, double div, int divide)
{
    size_t off = 0;

    for (; count - off >= OFCCL__RED_BLOCK; off += OFCCL__RED_BLOCK)
        block_f64(dst, srcs, nsrc, off, OFCCL__RED_BLOCK, c, scaled, div, divide);
    if (off < count)
        block_f64(dst, srcs, nsrc, off, count - off, c, scaled, div, divide);
}

/* dst may equal a source (each block of every source is read before the dst
 * block is written) but must not partly overlap one: that would read elements
 * already overwritten. */
static int partial_overlap(const void *dst, const void *src, size_t bytes)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;

    return d != s && d < s + bytes && s < d + bytes;
}

int ofccl__reduce(ofccl_dtype_t dtype, ofccl_redop_t op, void *dst, const void *const *srcs,
                  int nsrc, size_t count, int ndiv)
{
    size_t esize = ofccl_dtype_size(dtype);
    int scaled = op.kind == OFCCL_OP_PREMUL_SUM;
    int divide = ndiv > 0;

    if (esize == 0 || (unsigned)op.kind >= OFCCL_OP_COUNT || nsrc < 1 || ndiv < 0)
        return OFCCL_ERR_INVALID_ARG;
    if (count == 0)
        return 0;
    if (dst == NULL || srcs == NULL || count > SIZE_MAX / esize)
        return OFCCL_ERR_INVALID_ARG;
    for (int k = 0; k < nsrc; k++)
        if (srcs[k] == NULL || partial_overlap(dst, srcs[k], count * esize))
            return OFCCL_ERR_INVALID_ARG;

    switch (dtype) {
    case OFCCL_F32:
        reduce_f32(dst, srcs, nsrc, count, (float)op.scalar, scaled, (float)ndiv, divide);
        break;
    case OFCCL_BF16:
        reduce_bf16(dst, srcs, nsrc, count, (float)op.scalar, scaled, (float)ndiv, divide);
        break;
    case OFCCL_F16:
        reduce_f16(dst, srcs, nsrc, count, (float)op.scalar, scaled, (float)ndiv, divide);
        break;
    default: /* OFCCL_F64: the dtype was checked above */
        reduce_f64(dst, srcs, nsrc, count, op.scalar, scaled, (double)ndiv, divide);
        break;
    }
    return 0;
}

/* ---- rate measurement (setup time only: allocates) ---- */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Ordinary finite values (no subnormals, no NaN), so the timing is the common
 * case and not a microcode assist. */
static void fill(ofccl_dtype_t dtype, void *buf, size_t count, int k)
{
    for (size_t i = 0; i < count; i++) {
        float v = 1.0f + (float)((i * 7 + (size_t)k * 13) % 251) * (1.0f / 256.0f);

        switch (dtype) {
        case OFCCL_F32:
            ((float *)buf)[i] = v;
            break;
        case OFCCL_F64:
            ((double *)buf)[i] = v;
            break;
        case OFCCL_BF16:
            ((uint16_t *)buf)[i] = cvt_f32_bf16(v);
            break;
        default:
            ((uint16_t *)buf)[i] = cvt_f32_f16(v);
            break;
        }
    }
}

/*
 * Output bytes per second of a SUM (ndiv 0, the intermediate-step case) over
 * `bytes` of output with `nsrc` distinct malloc'd sources: one warm-up call,
 * then repetitions for at least 50 ms (3 to 1000 of them), best repetition
 * reported. Returns 0 for bad arguments or when memory runs out.
 */
double ofccl__reduce_rate(ofccl_dtype_t dtype, int nsrc, size_t bytes)
{
    size_t esize = ofccl_dtype_size(dtype), count;
    ofccl_redop_t op = {OFCCL_OP_SUM, 1.0};
    void **bufs;
    double best = 0.0, start;
    int ok = 1;

    if (esize == 0 || nsrc < 1 || bytes < esize)
        return 0.0;
    count = bytes / esize;
    bytes = count * esize;
    bufs = calloc((size_t)nsrc + 1, sizeof(*bufs));
    if (bufs == NULL)
        return 0.0;
    for (int k = 0; k <= nsrc && ok; k++) {
        bufs[k] = malloc(bytes);
        if (bufs[k] == NULL)
            ok = 0;
        else
            fill(dtype, bufs[k], count, k);
    }
    if (ok)
        ok = ofccl__reduce(dtype, op, bufs[nsrc], (const void *const *)bufs, nsrc, count, 0) == 0;
    start = now_s();
    for (int rep = 0; ok && rep < 1000 && (rep < 3 || now_s() - start < 0.05); rep++) {
        double t0 = now_s(), dt;

        ofccl__reduce(dtype, op, bufs[nsrc], (const void *const *)bufs, nsrc, count, 0);
        dt = now_s() - t0;
        if (best == 0.0 || dt < best)
            best = dt;
    }
    for (int k = 0; k <= nsrc; k++)
        free(bufs[k]);
    free(bufs);
    if (!ok || best <= 0.0)
        return 0.0;
    return (double)bytes / best;
}
