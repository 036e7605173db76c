/* Shared by the reduction tests: a seeded generator, f32 bit casts, an
 * independent reference for the 16-bit formats (double arithmetic, ldexp and
 * nearbyint instead of bit tricks) and the op cases. */
#ifndef OFCCL_TEST_UNIT_REDREF_H
#define OFCCL_TEST_UNIT_REDREF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reduce.h"

/* ---- seeded generator (splitmix64): the same inputs on every run ---- */

static uint64_t rng_state;

static inline void rng_seed(uint64_t seed)
{
    rng_state = seed;
}

static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double rng_unit(void)
{
    return (double)(rng_next() >> 11) * 0x1p-53;
}

static inline float bits_to_float(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t float_to_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

/* ---- independent reference for the 16-bit formats ---- */

typedef struct fmt {
    const char *name;
    int mant_bits; /* stored fraction bits */
    int exp_bits;
    uint16_t quiet_bit;
    float (*to_f32)(uint16_t);
    uint16_t (*from_f32)(float);
} fmt_t;

static const fmt_t bf16_fmt = {"bf16", 7, 8, 0x0040, ofccl__bf16_to_f32, ofccl__f32_to_bf16};
static const fmt_t f16_fmt = {"f16", 10, 5, 0x0200, ofccl__f16_to_f32, ofccl__f32_to_f16};

static inline int fmt_bias(const fmt_t *f)
{
    return (1 << (f->exp_bits - 1)) - 1;
}

static inline int fmt_is_nan(const fmt_t *f, uint16_t h)
{
    unsigned e = (h >> f->mant_bits) & ((1u << f->exp_bits) - 1);

    return e == (1u << f->exp_bits) - 1 && (h & ((1u << f->mant_bits) - 1)) != 0;
}

/* The value an encoding stands for, from the IEEE field definitions. */
static inline double fmt_decode(const fmt_t *f, uint16_t h)
{
    unsigned emax = (1u << f->exp_bits) - 1;
    unsigned e = (h >> f->mant_bits) & emax;
    unsigned m = h & ((1u << f->mant_bits) - 1);
    double sign = (h & 0x8000) ? -1.0 : 1.0;

    if (e == emax)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexp((double)m, 1 - fmt_bias(f) - f->mant_bits);
    return sign * ldexp((double)(m | (1u << f->mant_bits)), (int)e - fmt_bias(f) - f->mant_bits);
}

static inline double fmt_max(const fmt_t *f)
{
    return ldexp(2.0 - ldexp(1.0, -f->mant_bits), fmt_bias(f));
}

/* Round x to the format: scale so the format's ulp at x is 1, let nearbyint
 * (default mode: ties to even) pick the integer, overflow when the rounded
 * magnitude is above the largest finite value. */
static inline double fmt_round(const fmt_t *f, double x)
{
    int e, lead;
    double ulp, r;

    if (x == 0.0 || isnan(x) || isinf(x))
        return x;
    frexp(x, &e);
    lead = e - 1;
    if (lead < 1 - fmt_bias(f))
        lead = 1 - fmt_bias(f); /* subnormals share the smallest exponent's ulp */
    ulp = ldexp(1.0, lead - f->mant_bits);
    r = nearbyint(x / ulp) * ulp;
    if (fabs(r) > fmt_max(f))
        return copysign(INFINITY, x);
    return r;
}
typedef struct red_case {
    ofccl_op_kind_t kind;
    double scalar;
    int ndiv; /* -1: pass nsrc */
} red_case_t;

#endif
