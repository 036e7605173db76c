/*
 * bf16 reduction kernel for CPUs with AVX512-BF16 (reduce.c picks it at run
 * time). Same arithmetic as reduce.c, in the same order and by the same
 * blocks, written with intrinsics over 32 elements at a time; the difference
 * is the final f32 -> bf16 rounding, one vcvtne2ps2bf16 per 32 results
 * instead of about ten integer instructions per 16.
 *
 * That instruction rounds to nearest even as cvt_f32_bf16 does and ignores
 * MXCSR, but reads f32 subnormals as zero. Its NaNs match ours on Zen 5 (all
 * 2^32 inputs compared), but the two are not specified alike. So each vector
 * is classified before it counts (vfpclassps), and a block with an f32
 * subnormal or NaN in any lane is done again by the avx512 table's own
 * function (ofccl__bf16_redo_avx512). Redoing the arithmetic too, with the
 * very same code, matters for NaNs: which payload survives when two NaNs meet
 * depends on the operand order the compiler chose for `x * c` or `x + y`,
 * which differs even between inlined copies of one source. Every other lane
 * has seen no NaN on the way (NaN propagates), so its value is fixed by IEEE
 * arithmetic and its rounding by the instruction: reduce.c's bits. A normal
 * f32 never rounds to a bf16 subnormal (same exponent range), so the output
 * needs no check. Under MXCSR.DAZ vfpclassps reads subnormals as zeros too
 * (Intel's definition; Zen 5 does it), so then this kernel declines.
 */
#include <stdint.h>

#include "reduce_bf16.h"

#ifdef OFCCL__RED_AVX512BF16
#include <immintrin.h>

#define OFCCL__BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define OFCCL__BF16_INLINE static inline __attribute__((always_inline)) OFCCL__BF16_TARGET

/* Elements per block (a redone block must be one of reduce.c's) and per
 * vector; blocks left to reduce.c outright when the data keeps needing it. */
enum { BLOCK = OFCCL__BF16_BLOCK, VEC = 32, SKIP_BLOCKS = 32 };

/* 32 consecutive elements as f32: the even-numbered ones (the low halves of
 * the 32-bit words, shifted up) and the odd-numbered ones (the high halves,
 * masked). No lane-crossing shuffle on the way in; one on the way out. */
typedef struct v32 {
    __m512 even, odd;
} v32_t;

/* Loads p[0..32) (only the `live` ones when !full; the rest read as zero and
 * are never stored) times c. SUM multiplies by 1 as reduce.c does: that is not
 * always a no-op (FTZ flushes a subnormal product). */
OFCCL__BF16_INLINE v32_t load_mul(const uint16_t *p, int full, __mmask32 live, __m512 c)
{
    __m512i w = full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(live, p);
    __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
    v32_t v = {_mm512_mul_ps(even, c), _mm512_mul_ps(odd, c)};

    return v;
}

OFCCL__BF16_INLINE v32_t add(v32_t a, v32_t b)
{
    v32_t v = {_mm512_add_ps(a.even, b.even), _mm512_add_ps(a.odd, b.odd)};

    return v;
}

OFCCL__BF16_INLINE v32_t divide_by(v32_t a, __m512 d)
{
    v32_t v = {_mm512_div_ps(a.even, d), _mm512_div_ps(a.odd, d)};

    return v;
}

/* Rounds the `n` live elements of v to bf16 and stores them at d; returns 0,
 * or 1 without storing anything when a live lane is a subnormal or a NaN. */
OFCCL__BF16_INLINE int round_store(uint16_t *d, v32_t v, int full, size_t n)
{
    /* Word 2i of the result is even lane i (word i of the conversion), word
     * 2i + 1 odd lane i (word 16 + i). */
    static const uint16_t interleave[VEC] __attribute__((aligned(64))) = {
        0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31,
    };
    __mmask16 live_even = full ? 0xffff : (__mmask16)((1u << ((n + 1) / 2)) - 1);
    __mmask16 live_odd = full ? 0xffff : (__mmask16)((1u << (n / 2)) - 1);
    __m512i r;

    /* vfpclassps 0xa1: quiet NaN, signalling NaN or subnormal. */
    if (!_kortestz_mask16_u8(_mm512_mask_fpclass_ps_mask(live_even, v.even, 0xa1),
                             _mm512_mask_fpclass_ps_mask(live_odd, v.odd, 0xa1)))
        return 1;
    r = (__m512i)_mm512_cvtne2ps_pbh(v.odd, v.even);
    r = _mm512_permutexvar_epi16(_mm512_load_si512(interleave), r);
    if (full)
        _mm512_storeu_si512(d, r);
    else
        _mm512_mask_storeu_epi16(d, (__mmask32)((1u << n) - 1), r);
    return 0;
}

/* How the value of one output vector is formed, as in reduce.c. */
enum {
    K_ONE,  /* p(a)                  nsrc == 1 */
    K_TWO,  /* p(a) + p(b)           nsrc == 2 */
    K_LAST, /* acc + p(a)            last source of nsrc >= 3 */
};

/*
 * The vectors of a block of n elements: a first one of `head` elements, which
 * brings dst to a 64-byte boundary (and the sources, when they sit at the
 * same offset, as buffers from one allocator tend to), full ones, and a short
 * last one. With every 64-byte access split over two cache lines (malloc's
 * 16-byte alignment), 8 MiB runs were 40% slower. Vector number v keeps its
 * f32 partial sums at acc + 32 v.
 */
typedef struct grid {
    size_t head, n;
} grid_t;

enum { ACC_SLOTS = BLOCK / VEC + 2 };

/* The value of the vector at element j (len live elements) of the block,
 * divided if asked; `s` is its accumulator slot. */
OFCCL__BF16_INLINE v32_t out_value(int kind, int divide, int full, const uint16_t *a,
                                   const uint16_t *b, const float *s, size_t j, size_t len,
                                   __m512 c, __m512 div)
{
    __mmask32 live = full ? ~(__mmask32)0 : (__mmask32)((1u << len) - 1);
    v32_t x = load_mul(a + j, full, live, c);

    if (kind == K_TWO) {
        x = add(x, load_mul(b + j, full, live, c));
    } else if (kind == K_LAST) {
        v32_t sum = {_mm512_load_ps(s), _mm512_load_ps(s + 16)};
        x = add(sum, x);
    }
    return divide ? divide_by(x, div) : x;
}

OFCCL__BF16_INLINE int vec_out(int kind, int divide, int full, uint16_t *d, const uint16_t *a,
                               const uint16_t *b, const float *s, size_t j, size_t len, __m512 c,
                               __m512 div)
{
    return round_store(d + j, out_value(kind, divide, full, a, b, s, j, len, c, div), full, len);
}

/* Output of one block at element `off` of the sources, rounded into d (dst,
 * or a staging copy of the block); returns 1 as soon as a vector needs
 * reduce.c, else 0. `acc` is read for K_LAST only. */
OFCCL__BF16_INLINE int block_out(int kind, int divide, uint16_t *d, const void *const *srcs,
                                 int nsrc, const float *acc, size_t off, grid_t g, __m512 c,
                                 __m512 div)
{
    const uint16_t *a = (const uint16_t *)srcs[kind == K_LAST ? nsrc - 1 : 0] + off;
    const uint16_t *b = kind == K_TWO ? (const uint16_t *)srcs[1] + off : NULL;
    size_t j = g.head < g.n ? g.head : g.n, v = 1;

    if (j > 0 && vec_out(kind, divide, 0, d, a, b, acc, 0, j, c, div))
        return 1;
    for (; j + VEC <= g.n; j += VEC, v++)
        if (vec_out(kind, divide, 1, d, a, b, acc + v * VEC, j, VEC, c, div))
            return 1;
    return j < g.n && vec_out(kind, divide, 0, d, a, b, acc + v * VEC, j, g.n - j, c, div);
}

/* acc = p(src k) + p(src k + 1) (first) or acc + p(src k) (later) for the
 * vector at element j; its slot keeps the even/odd split: 16 even lanes,
 * then 16 odd ones. */
OFCCL__BF16_INLINE void vec_acc(int first, int full, float *s, const uint16_t *a, const uint16_t *b,
                                size_t j, size_t len, __m512 c)
{
    __mmask32 live = full ? ~(__mmask32)0 : (__mmask32)((1u << len) - 1);
    v32_t x = load_mul(a + j, full, live, c);

    if (first) {
        x = add(x, load_mul(b + j, full, live, c));
    } else {
        v32_t sum = {_mm512_load_ps(s), _mm512_load_ps(s + 16)};
        x = add(sum, x);
    }
    _mm512_store_ps(s, x.even);
    _mm512_store_ps(s + 16, x.odd);
}

/* vec_acc over the vectors of a block. */
OFCCL__BF16_INLINE void block_acc(int first, float *acc, const void *const *srcs, int k, size_t off,
                                  grid_t g, __m512 c)
{
    const uint16_t *a = (const uint16_t *)srcs[k] + off;
    const uint16_t *b = first ? (const uint16_t *)srcs[k + 1] + off : NULL;
    size_t j = g.head < g.n ? g.head : g.n, v = 1;

    if (j > 0)
        vec_acc(first, 0, acc, a, b, 0, j, c);
    for (; j + VEC <= g.n; j += VEC, v++)
        vec_acc(first, 1, acc + v * VEC, a, b, j, VEC, c);
    if (j < g.n)
        vec_acc(first, 0, acc + v * VEC, a, b, j, g.n - j, c);
}

/* Copies len elements (< 32) from s to d. */
OFCCL__BF16_INLINE void copy_short(uint16_t *d, const uint16_t *s, size_t len)
{
    __mmask32 live = (__mmask32)((1u << len) - 1);

    _mm512_mask_storeu_epi16(d, live, _mm512_maskz_loadu_epi16(live, s));
}

/* Copies a block from the staging copy to dst, by the same vectors. */
OFCCL__BF16_INLINE void unstage(uint16_t *d, const uint16_t *stage, grid_t g)
{
    size_t j = g.head < g.n ? g.head : g.n;

    if (j > 0)
        copy_short(d, stage, j);
    for (; j + VEC <= g.n; j += VEC)
        _mm512_storeu_si512(d + j, _mm512_loadu_si512(stage + j));
    if (j < g.n)
        copy_short(d + j, stage + j, g.n - j);
}

/* ((p0 + p1) + p2) + ... over elements [start, start + count), by blocks as
 * in reduce.c: one or two sources go straight to the output, more through an
 * f32 accumulator on the stack, the last source fused with the output.
 *
 * A block with a vector the fast rounding cannot do is done again, whole, by
 * the avx512 table's own function over the same element range, so it comes
 * out exactly as that table makes it: the same machine code on the same
 * block (its 512-element loop, or its tail loop for a last short block), NaN
 * payloads included in optimised builds (where two NaNs meet the survivor is
 * unspecified anyway; a sanitizer build picks differently per call site). Redoing needs the block's
 * sources intact: when dst is one of them (`staged`) the block is rounded into a stack copy first
 * and copied out once it is known good. After two redone blocks in a row the data is taken to be
 * all like that (all NaN, say) and the next SKIP_BLOCKS go to the table directly, in one call,
 * rather than through both kernels. */
OFCCL__BF16_INLINE void reduce_bf16(int divide, int staged, void *dst, const void *const *srcs,
                                    int nsrc, size_t start, size_t count, double scalar, int ndiv)
{
    __m512 c = _mm512_set1_ps((float)scalar), div = _mm512_set1_ps((float)ndiv);
    float acc[ACC_SLOTS * VEC] __attribute__((aligned(64)));
    uint16_t stage[BLOCK] __attribute__((aligned(64)));
    uintptr_t at = (uintptr_t)((uint16_t *)dst + start);
    /* Blocks are 1 KiB, so one head fits them all; none for odd addresses. */
    grid_t g = {at & 1 ? 0 : ((0 - at) & 63) / 2, 0};
    int redone = 0; /* blocks in a row redone */

    for (size_t off = start, end = start + count; off < end; off += g.n) {
        uint16_t *d = staged ? stage : (uint16_t *)dst + off;
        int bad;

        if (redone == 2) {
            g.n = end - off < SKIP_BLOCKS * BLOCK ? end - off : SKIP_BLOCKS * BLOCK;
            ofccl__bf16_redo_avx512(divide, dst, srcs, nsrc, off, g.n, scalar, ndiv);
            redone = 0;
            continue;
        }
        g.n = end - off < BLOCK ? end - off : BLOCK;
        if (nsrc == 1) {
            bad = block_out(K_ONE, divide, d, srcs, nsrc, acc, off, g, c, div);
        } else if (nsrc == 2) {
            bad = block_out(K_TWO, divide, d, srcs, nsrc, acc, off, g, c, div);
        } else {
            block_acc(1, acc, srcs, 0, off, g, c);
            for (int k = 2; k < nsrc - 1; k++)
                block_acc(0, acc, srcs, k, off, g, c);
            bad = block_out(K_LAST, divide, d, srcs, nsrc, acc, off, g, c, div);
        }
        if (bad) {
            ofccl__bf16_redo_avx512(divide, dst, srcs, nsrc, off, g.n, scalar, ndiv);
            redone++;
        } else {
            redone = 0;
            if (staged)
                unstage((uint16_t *)dst + off, stage, g);
        }
    }
}

OFCCL__BF16_TARGET int ofccl__bf16_avx512bf16(int divide, void *dst, const void *const *srcs,
                                              int nsrc, size_t off, size_t count, double c,
                                              int ndiv)
{
    int staged = 0;

    /* Under DAZ vfpclassps would let subnormals through to the rounding. */
    if (_mm_getcsr() & 0x0040u)
        return 1;
    for (int k = 0; k < nsrc; k++)
        staged |= dst == srcs[k];
    if (divide && staged)
        reduce_bf16(1, 1, dst, srcs, nsrc, off, count, c, ndiv);
    else if (divide)
        reduce_bf16(1, 0, dst, srcs, nsrc, off, count, c, ndiv);
    else if (staged)
        reduce_bf16(0, 1, dst, srcs, nsrc, off, count, c, ndiv);
    else
        reduce_bf16(0, 0, dst, srcs, nsrc, off, count, c, ndiv);
    return 0;
}

#else
typedef int ofccl__reduce_bf16_empty; /* ISO C wants something in a translation unit */
#endif
