/* The scalar conversions between f32 and bf16 / f16 that reduce.c's block
 * loops inline (branch-free, so gcc vectorises them); the rounding rules are
 * in reduce.c's opening comment. Private to reduce.c. */
#ifndef OFCCL_CORE_REDUCE_CVT_H
#define OFCCL_CORE_REDUCE_CVT_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define OFCCL__ALWAYS_INLINE static inline __attribute__((always_inline))
#define OFCCL__ALIGNED(n) __attribute__((aligned(n)))
#else
#define OFCCL__ALWAYS_INLINE static inline
#define OFCCL__ALIGNED(n)
#endif

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
 * but it vectorises and/or/andnot with compare masks. The compares below are
 * on values under 2^31 cast to int32_t: SSE2 has signed 32-bit compares only,
 * and an unsigned one costs two extra instructions per vector. */
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
    uint32_t nan = 0u - (uint32_t)((int32_t)(u & 0x7fffffffu) > 0x7f800000);
    /* Adding 0x7fff plus the kept LSB rounds the low half to nearest even; a
     * carry out of the mantissa bumps the exponent, which also turns values at
     * or above the FLT_MAX tie into inf. A NaN is truncated instead, with its
     * quiet bit set, as rounding could carry it into inf or the sign. All of
     * it stays in 32 bits with one shift and one narrowing at the end, which
     * is what keeps the SSE2 code short. */
    uint32_t bias = ~nan & (0x7fffu + ((u >> 16) & 1u));
    return (uint16_t)(((u | (nan & 0x00400000u)) + bias) >> 16);
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
    uint32_t r = sel((int32_t)em >= 0x7c00 << 13, special, normal);
    r = sel((int32_t)em < 0x0400 << 13, f32_bits(sub), r);
    return bits_f32(r | sign);
}

OFCCL__ALWAYS_INLINE uint16_t cvt_f32_f16(float f)
{
    /* Every candidate below holds the f16 encoding in bits 13..28 and there is
     * one shift and one narrowing at the end: when the selects produce 16-bit
     * values instead, gcc narrows each operand separately and the loop gets
     * twice as long. */
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 3) & 0x10000000u;
    uint32_t a = u & 0x7fffffffu;
    /* f16 normal range [2^-14, 65520): rebias the exponent and round the 13
     * dropped bits to nearest even; the carry into the exponent is right. */
    uint32_t normal = a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u);
    /* Below 2^-14: in x + 0.5f the f32 ulp is 2^-24, the f16 subnormal step,
     * so the FPU rounds to the f16 subnormal (to nearest even) and the low
     * bits are the f16 encoding, 0x400 included when it rounds up to 2^-14.
     * The clamp keeps large values and NaNs out of the float add, so it never
     * raises invalid or overflow. */
    uint32_t small = sel((int32_t)a < 0x38800000, a, 0x38800000u);
    uint32_t sub = (f32_bits(bits_f32(small) + 0.5f) - 0x3f000000u) << 13;
    uint32_t nan = (0x7e00u << 13) | (a & 0x007fe000u); /* quiet, top payload bits */
    uint32_t r = sel((int32_t)a < 0x38800000, sub, normal);
    r = sel((int32_t)a >= 0x477ff000, 0x7c00u << 13, r);
    r = sel((int32_t)a > 0x7f800000, nan, r);
    return (uint16_t)((r | sign) >> 13);
}

#endif
