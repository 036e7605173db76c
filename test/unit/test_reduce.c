/*
 * Reduction kernel unit tests: the 16-bit conversions exhaustively and against
 * a reference written another way (double arithmetic, ldexp and nearbyint
 * instead of bit tricks), and ofccl__reduce for every dtype, op and a spread
 * of source counts and odd lengths against a double-precision reference with
 * the tolerances derived in docs/reductions.md; bf16 bit for bit, every
 * pattern against special operands, against a scalar replay and across the
 * kernel sets this CPU runs (the AVX512-BF16 one must equal AVX-512's).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "cu.h"
#include "reduce.h"

/* ---- seeded generator (splitmix64): the same inputs on every run ---- */

static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
    rng_state = seed;
}

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void)
{
    return (double)(rng_next() >> 11) * 0x1p-53;
}

static float bits_to_float(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t float_to_bits(float f)
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

static int fmt_bias(const fmt_t *f)
{
    return (1 << (f->exp_bits - 1)) - 1;
}

static int fmt_is_nan(const fmt_t *f, uint16_t h)
{
    unsigned e = (h >> f->mant_bits) & ((1u << f->exp_bits) - 1);

    return e == (1u << f->exp_bits) - 1 && (h & ((1u << f->mant_bits) - 1)) != 0;
}

/* The value an encoding stands for, from the IEEE field definitions. */
static double fmt_decode(const fmt_t *f, uint16_t h)
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

static double fmt_max(const fmt_t *f)
{
    return ldexp(2.0 - ldexp(1.0, -f->mant_bits), fmt_bias(f));
}

/* Round x to the format: scale so the format's ulp at x is 1, let nearbyint
 * (default mode: ties to even) pick the integer, overflow when the rounded
 * magnitude is above the largest finite value. */
static double fmt_round(const fmt_t *f, double x)
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

/* Checks one f32 -> 16-bit conversion; returns 0 when right, and prints the
 * first few failures. */
static int check_round(const fmt_t *f, float x, int *reported)
{
    uint16_t got = f->from_f32(x);
    int ok;

    if (isnan(x)) {
        ok = fmt_is_nan(f, got) && !!(got & 0x8000) == !!signbit(x) && (got & f->quiet_bit);
    } else {
        double want = fmt_round(f, (double)x), have = fmt_decode(f, got);

        ok = !fmt_is_nan(f, got) && have == want && !!signbit(have) == !!signbit(want);
    }
    if (!ok && (*reported)++ < 5)
        fprintf(stderr, "%s: f32 %#010x (%a) -> %#06x, want %a\n", f->name, float_to_bits(x),
                (double)x, got, fmt_round(f, (double)x));
    return ok ? 0 : 1;
}

static void roundtrip_all(const fmt_t *f)
{
    int bad_decode = 0, bad_back = 0;

    for (uint32_t h = 0; h <= 0xffff; h++) {
        float x = f->to_f32((uint16_t)h);
        uint16_t back = f->from_f32(x);

        if (fmt_is_nan(f, (uint16_t)h)) {
            /* NaN stays NaN with its sign; a quiet NaN keeps every bit, a
             * signalling one comes back quieted with its payload. */
            bad_decode += !isnan(x) || !!signbit(x) != !!(h & 0x8000);
            bad_back += back != (h | f->quiet_bit);
        } else {
            double want = fmt_decode(f, (uint16_t)h);

            bad_decode += (double)x != want || !!signbit(x) != !!signbit(want);
            bad_back += back != h;
        }
    }
    CU_ASSERT_EQUAL(bad_decode, 0);
    CU_ASSERT_EQUAL(bad_back, 0);
}

static void test_bf16_roundtrip(void)
{
    roundtrip_all(&bf16_fmt);
}

static void test_f16_roundtrip(void)
{
    roundtrip_all(&f16_fmt);
}

/* bf16 keeps the top 16 bits of an f32: every top half with low halves at and
 * around the halfway point 0x8000, at the extremes, and at random. */
static void test_bf16_rounding_sweep(void)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    int bad = 0, reported = 0;

    rng_seed(1);
    for (uint32_t hi = 0; hi <= 0xffff; hi++) {
        for (size_t j = 0; j < sizeof(lows) / sizeof(lows[0]); j++)
            bad += check_round(&bf16_fmt, bits_to_float(hi << 16 | lows[j]), &reported);
        bad += check_round(&bf16_fmt, bits_to_float(hi << 16 | (rng_next() & 0xffff)), &reported);
    }
    for (int i = 0; i < (1 << 20); i++)
        bad += check_round(&bf16_fmt, bits_to_float((uint32_t)rng_next()), &reported);
    CU_ASSERT_EQUAL(bad, 0);
}

/* f16: for every finite f16 value, the value itself, the exact midpoint to its
 * successor (an f32 value: it needs 12 significant bits) and the f32 values
 * just above and below that midpoint, for both signs; then random f32 bits
 * over the whole range and concentrated on f16's exponent range. */
static void test_f16_rounding_sweep(void)
{
    int bad = 0, reported = 0;

    for (uint32_t h = 0; h < 0x7c00; h++) {
        double v = fmt_decode(&f16_fmt, (uint16_t)h);
        double next = h == 0x7bff ? 65536.0 : fmt_decode(&f16_fmt, (uint16_t)(h + 1));
        float mid = (float)((v + next) / 2);
        float xs[4] = {(float)v, mid, nextafterf(mid, INFINITY), nextafterf(mid, -INFINITY)};

        CU_ASSERT_EQUAL_FATAL((double)mid, (v + next) / 2);
        for (int j = 0; j < 4; j++) {
            bad += check_round(&f16_fmt, xs[j], &reported);
            bad += check_round(&f16_fmt, -xs[j], &reported);
        }
    }
    rng_seed(2);
    for (int i = 0; i < (1 << 20); i++) {
        uint32_t u = (uint32_t)rng_next();
        uint32_t near = (u & 0x807fffffu) | ((uint32_t)(96 + (u >> 23) % 48) << 23);

        bad += check_round(&f16_fmt, bits_to_float(u), &reported);
        bad += check_round(&f16_fmt, bits_to_float(near), &reported);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Hand-written cases: each expected encoding worked out on paper. */
static void test_conversion_cases(void)
{
    static const struct {
        uint32_t f32;
        uint16_t bf16, f16;
    } cases[] = {
        {0x00000000, 0x0000, 0x0000}, /* +0 */
        {0x80000000, 0x8000, 0x8000}, /* -0 keeps its sign */
        {0x3f800000, 0x3f80, 0x3c00}, /* 1 */
        {0x3f808000, 0x3f80, 0x3c04}, /* 1 + 2^-8: bf16 tie, stays even */
        {0x3f818000, 0x3f82, 0x3c0c}, /* 1 + 3*2^-8: bf16 tie, up to even */
        {0x3f808001, 0x3f81, 0x3c04}, /* just above the bf16 tie */
        {0x3f807fff, 0x3f80, 0x3c04}, /* just below the bf16 tie */
        {0x3f801000, 0x3f80, 0x3c00}, /* 1 + 2^-11: f16 tie, stays even */
        {0x3f803000, 0x3f80, 0x3c02}, /* 1 + 3*2^-11: f16 tie, up to even */
        {0x3f801001, 0x3f80, 0x3c01}, /* just above the f16 tie */
        {0x477fe000, 0x4780, 0x7bff}, /* 65504, f16 max */
        {0x477fefff, 0x4780, 0x7bff}, /* just below 65520 */
        {0x477ff000, 0x4780, 0x7c00}, /* 65520: tie between max and 2^16 -> inf */
        {0xc77ff000, 0xc780, 0xfc00}, /* -65520 -> -inf */
        {0x7f7fffff, 0x7f80, 0x7c00}, /* FLT_MAX: bf16 overflows too */
        {0x7f7f7fff, 0x7f7f, 0x7c00}, /* below the bf16 max tie */
        {0x7f7f8000, 0x7f80, 0x7c00}, /* bf16 max tie, 0x7f7f odd -> inf */
        {0x7f800000, 0x7f80, 0x7c00}, /* +inf */
        {0xff800000, 0xff80, 0xfc00}, /* -inf */
        {0x7fc00000, 0x7fc0, 0x7e00}, /* quiet NaN */
        {0x7f800001, 0x7fc0, 0x7e00}, /* signalling NaN, payload below both cuts: quieted */
        {0xffa00000, 0xffe0, 0xff00}, /* negative signalling NaN with payload */
        {0x33800000, 0x3380, 0x0001}, /* 2^-24, smallest f16 subnormal */
        {0x33000000, 0x3300, 0x0000}, /* 2^-25: tie between 0 and 2^-24 -> 0 */
        {0x33000001, 0x3300, 0x0001}, /* just above 2^-25 */
        {0xb3000001, 0xb300, 0x8001}, /* negative */
        {0x33c00000, 0x33c0, 0x0002}, /* 1.5*2^-24: tie between 1 and 2 ulps -> 2 */
        {0x33a00000, 0x33a0, 0x0001}, /* 1.25*2^-24 -> 1 */
        {0x34200000, 0x3420, 0x0002}, /* 2.5*2^-24: tie between 2 and 3 ulps -> 2 */
        {0x34400000, 0x3440, 0x0003}, /* 3*2^-24, exact */
        {0x387fc000, 0x3880, 0x03ff}, /* largest f16 subnormal */
        {0x387fe000, 0x3880, 0x0400}, /* halfway to 2^-14: tie, up to even 0x400 */
        {0x38800000, 0x3880, 0x0400}, /* 2^-14, smallest f16 normal */
        {0x00000001, 0x0000, 0x0000}, /* smallest f32 subnormal */
        {0x00008000, 0x0000, 0x0000}, /* f32 subnormal, bf16 tie -> even 0 */
        {0x00018000, 0x0002, 0x0000}, /* bf16 subnormal tie -> even 2 */
        {0x00010001, 0x0001, 0x0000}, /* bf16 subnormal, just above 1 */
        {0x00800000, 0x0080, 0x0000}, /* FLT_MIN */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        float x = bits_to_float(cases[i].f32);
        uint16_t b = ofccl__f32_to_bf16(x), h = ofccl__f32_to_f16(x);

        if (b != cases[i].bf16 || h != cases[i].f16)
            fprintf(stderr, "case %#010x: bf16 %#06x (want %#06x), f16 %#06x (want %#06x)\n",
                    cases[i].f32, b, cases[i].bf16, h, cases[i].f16);
        CU_ASSERT_EQUAL(b, cases[i].bf16);
        CU_ASSERT_EQUAL(h, cases[i].f16);
    }
}

/* ---- ofccl__reduce against a double-precision reference ---- */

static const ofccl_dtype_t all_dtypes[] = {OFCCL_F32, OFCCL_F64, OFCCL_BF16, OFCCL_F16};

static const char *dtype_name(ofccl_dtype_t t)
{
    static const char *names[] = {"f32", "f64", "bf16", "f16"};

    return names[t];
}

/* Element i of a buffer of `t`, as the kernel sees it (the 16-bit decoders are
 * checked exhaustively above). */
static double get(ofccl_dtype_t t, const void *buf, size_t i)
{
    switch (t) {
    case OFCCL_F32:
        return ((const float *)buf)[i];
    case OFCCL_F64:
        return ((const double *)buf)[i];
    case OFCCL_BF16:
        return ofccl__bf16_to_f32(((const uint16_t *)buf)[i]);
    default:
        return ofccl__f16_to_f32(((const uint16_t *)buf)[i]);
    }
}

static void put(ofccl_dtype_t t, void *buf, size_t i, double v)
{
    switch (t) {
    case OFCCL_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case OFCCL_F64:
        ((double *)buf)[i] = v;
        break;
    case OFCCL_BF16:
        ((uint16_t *)buf)[i] = ofccl__f32_to_bf16((float)v);
        break;
    default:
        ((uint16_t *)buf)[i] = ofccl__f32_to_f16((float)v);
        break;
    }
}

/* Random signs and exponents, so sums cancel; f16 also gets subnormals. */
static double random_value(ofccl_dtype_t t)
{
    double v = ldexp(1.0 + rng_unit(), (int)(rng_next() % 12) - 6);

    if (t == OFCCL_F16 && rng_next() % 16 == 0)
        v = ldexp(rng_unit(), -14);
    return rng_next() & 1 ? -v : v;
}

/* |result - exact| <= rel * sum|p_k| / d + abs (docs/reductions.md). */
static void tolerance(ofccl_dtype_t t, int nsrc, double *rel, double *abs_err)
{
    switch (t) {
    case OFCCL_F64:
        *rel = (nsrc + 2) * 0x1p-53;
        *abs_err = (nsrc + 2) * 0x1p-1074;
        break;
    case OFCCL_F32:
        *rel = (nsrc + 2) * 0x1p-24;
        *abs_err = (nsrc + 2) * 0x1p-150;
        break;
    case OFCCL_BF16:
        *rel = 0x1p-8 + (nsrc + 3) * 0x1p-24;
        *abs_err = 0x1p-134 + (nsrc + 2) * 0x1p-150;
        break;
    default:
        *rel = 0x1p-11 + (nsrc + 3) * 0x1p-24;
        *abs_err = 0x1p-25 + (nsrc + 2) * 0x1p-150;
        break;
    }
}

/* The documented evaluation order replayed in scalar code: f32 (f64 for f64)
 * products, left-to-right sum, one division, one final rounding. Used only
 * where the product is exact, so FMA contraction cannot make it differ. */
static void emulate(ofccl_dtype_t t, void *out, size_t i, const void *const *srcs, int nsrc,
                    double scalar, int scaled, int ndiv)
{
    if (t == OFCCL_F64) {
        double s = get(t, srcs[0], i) * (scaled ? scalar : 1.0);

        for (int k = 1; k < nsrc; k++) {
            double p = get(t, srcs[k], i) * (scaled ? scalar : 1.0);
            s = s + p;
        }
        put(t, out, i, ndiv > 0 ? s / ndiv : s);
    } else {
        float c = scaled ? (float)scalar : 1.0f;
        float s = (float)get(t, srcs[0], i) * c;

        for (int k = 1; k < nsrc; k++) {
            float p = (float)get(t, srcs[k], i) * c;
            s = s + p;
        }
        s = ndiv > 0 ? s / (float)ndiv : s;
        if (t == OFCCL_F32)
            ((float *)out)[i] = s;
        else
            put(t, out, i, s);
    }
}

typedef struct red_case {
    ofccl_op_kind_t kind;
    double scalar;
    int ndiv; /* -1: pass nsrc */
} red_case_t;

static const red_case_t red_cases[] = {
    {OFCCL_OP_SUM, 0.0, 0},         {OFCCL_OP_AVG, 0.0, -1}, /* last step of avg */
    {OFCCL_OP_AVG, 0.0, 7},                                  /* divides by ndiv, not nsrc */
    {OFCCL_OP_AVG, 0.0, 0}, /* intermediate avg step: no division */
    {OFCCL_OP_PREMUL_SUM, 0.25, 0}, {OFCCL_OP_PREMUL_SUM, -3.0, 0}, {OFCCL_OP_PREMUL_SUM, -3.0, 3},
};

/* Runs one configuration; returns the number of wrong elements (0 = pass). */
static int run_case(ofccl_dtype_t t, const red_case_t *rc, int nsrc, size_t count)
{
    size_t es = ofccl_dtype_size(t), pad = 8;
    size_t shift = count % 2; /* odd counts also run on odd-element-aligned buffers */
    ofccl_redop_t op = {rc->kind, rc->scalar};
    int ndiv = rc->ndiv < 0 ? nsrc : rc->ndiv, scaled = rc->kind == OFCCL_OP_PREMUL_SUM;
    int exact_products = t == OFCCL_BF16 || t == OFCCL_F16 || !scaled || rc->scalar == 0.25;
    unsigned char *mem[8], *out, *want, *inplace;
    const void *srcs[8];
    double rel, abs_err;
    int bad = 0, rc_call;

    tolerance(t, nsrc, &rel, &abs_err);
    for (int k = 0; k < nsrc; k++) {
        mem[k] = malloc((count + pad) * es);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mem[k]);
        srcs[k] = mem[k] + shift * es;
        for (size_t i = 0; i < count; i++)
            put(t, (void *)srcs[k], i, random_value(t));
    }
    out = malloc((count + pad) * es);
    want = malloc((count + pad) * es);
    inplace = malloc((count + pad) * es);
    CU_ASSERT_FATAL(out != NULL && want != NULL && inplace != NULL);
    memset(out, 0xa5, (count + pad) * es);

    rc_call = ofccl__reduce(t, op, out + shift * es, srcs, nsrc, count, ndiv);
    CU_ASSERT_EQUAL(rc_call, 0);
    for (size_t i = 0; i < count; i++) {
        double sum = 0.0, mag = 0.0, ref, got = get(t, out + shift * es, i);

        for (int k = 0; k < nsrc; k++) {
            double p = get(t, srcs[k], i) * (scaled ? rc->scalar : 1.0);
            sum += p;
            mag += fabs(p);
        }
        ref = ndiv > 0 ? sum / ndiv : sum;
        mag = ndiv > 0 ? mag / ndiv : mag;
        if (!(fabs(got - ref) <= rel * mag + abs_err)) {
            if (bad < 3)
                fprintf(stderr, "%s op %d scalar %g ndiv %d nsrc %d count %zu [%zu]: %a vs %a\n",
                        dtype_name(t), rc->kind, rc->scalar, ndiv, nsrc, count, i, got, ref);
            bad++;
        }
        if (exact_products) {
            emulate(t, want, i, srcs, nsrc, rc->scalar, scaled, ndiv);
            if (memcmp(want + i * es, out + (shift + i) * es, es) != 0) {
                if (bad < 3)
                    fprintf(stderr, "%s nsrc %d count %zu [%zu]: not the documented order\n",
                            dtype_name(t), nsrc, count, i);
                bad++;
            }
        }
    }
    /* Nothing written outside [0, count). */
    for (size_t b = 0; b < shift * es; b++)
        bad += out[b] != 0xa5;
    for (size_t b = (shift + count) * es; b < (count + pad) * es; b++)
        bad += out[b] != 0xa5;

    /* In place: dst == srcs[0] gives the same bits. */
    memcpy(inplace, srcs[0], count * es);
    {
        const void *isrcs[8];

        memcpy(isrcs, srcs, sizeof(isrcs[0]) * (size_t)nsrc);
        isrcs[0] = inplace;
        CU_ASSERT_EQUAL(ofccl__reduce(t, op, inplace, isrcs, nsrc, count, ndiv), 0);
        bad += count > 0 && memcmp(inplace, out + shift * es, count * es) != 0;
    }

    for (int k = 0; k < nsrc; k++)
        free(mem[k]);
    free(out);
    free(want);
    free(inplace);
    return bad;
}

static void reduce_matrix(ofccl_dtype_t t)
{
    static const int nsrcs[] = {1, 2, 3, 8};
    static const size_t counts[] = {0, 1, 7, 255, 256, 257, 1000, 4099};
    int failed = 0;

    rng_seed(0x5eed0000u + (uint64_t)t);
    for (size_t c = 0; c < sizeof(red_cases) / sizeof(red_cases[0]); c++)
        for (size_t n = 0; n < sizeof(nsrcs) / sizeof(nsrcs[0]); n++)
            for (size_t l = 0; l < sizeof(counts) / sizeof(counts[0]); l++)
                failed += run_case(t, &red_cases[c], nsrcs[n], counts[l]) != 0;
    CU_ASSERT_EQUAL(failed, 0);
}

static void test_reduce_f32(void)
{
    reduce_matrix(OFCCL_F32);
}

static void test_reduce_f64(void)
{
    reduce_matrix(OFCCL_F64);
}

static void test_reduce_bf16(void)
{
    reduce_matrix(OFCCL_BF16);
}

static void test_reduce_f16(void)
{
    reduce_matrix(OFCCL_F16);
}

/* Exact values: the f32 accumulator lets f16 average past 65504, infinities
 * and NaNs propagate, signed zeros and subnormals survive. */
static void test_reduce_special(void)
{
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0.0};
    uint16_t a[6], b[6], out[6];
    const void *srcs[2] = {a, b};
    float fa[2] = {-0.0f, 1.0f}, fb[2] = {-0.0f, -1.0f}, fo[2];
    const void *fsrcs[2] = {fa, fb};

    /* f16: 60000+60000 overflows, its average does not; 2^-24 + 2^-24. */
    a[0] = b[0] = ofccl__f32_to_f16(60000.0f);
    a[1] = b[1] = 0x0001;
    a[2] = 0x7c00, b[2] = 0xfc00; /* inf + -inf */
    a[3] = 0x7e00, b[3] = 0x3c00; /* NaN + 1 */
    a[4] = 0x8000, b[4] = 0x8000; /* -0 + -0 */
    a[5] = 0x7c00, b[5] = 0x3c00; /* inf + 1 */
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F16, sum, out, srcs, 2, 6, 0), 0);
    CU_ASSERT_EQUAL(out[0], 0x7c00);
    CU_ASSERT_EQUAL(out[1], 0x0002);
    CU_ASSERT_TRUE(fmt_is_nan(&f16_fmt, out[2]));
    CU_ASSERT_TRUE(fmt_is_nan(&f16_fmt, out[3]));
    CU_ASSERT_EQUAL(out[4], 0x8000);
    CU_ASSERT_EQUAL(out[5], 0x7c00);
    CU_ASSERT_EQUAL(
        ofccl__reduce(OFCCL_F16, (ofccl_redop_t){OFCCL_OP_AVG, 0.0}, out, srcs, 2, 1, 2), 0);
    CU_ASSERT_EQUAL(out[0], a[0]);

    /* bf16: NaN + 1 is NaN (truncation alone could give inf), max + max is inf. */
    a[0] = 0x7f81, b[0] = 0x3f80;
    a[1] = b[1] = 0x7f7f;
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_BF16, sum, out, srcs, 2, 2, 0), 0);
    CU_ASSERT_TRUE(fmt_is_nan(&bf16_fmt, out[0]));
    CU_ASSERT_EQUAL(out[1], 0x7f80);

    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, fo, fsrcs, 2, 2, 0), 0);
    CU_ASSERT_EQUAL(float_to_bits(fo[0]), 0x80000000u);
    CU_ASSERT_EQUAL(float_to_bits(fo[1]), 0x00000000u);
}

/* ---- bf16, bit for bit: every pattern, every kernel set ---- */

/* What runs against all 65536 bf16 patterns as the other source(s): zeros,
 * subnormals of both signs, FLT_MIN and its negative neighbours (their sums
 * with the patterns land in the subnormals), the largest values (sums that
 * overflow, or just do not), 1 and 2^-8 (1 + 2^-8 is a rounding tie),
 * infinities and NaNs with payloads, quiet and signalling, of both signs. */
static const uint16_t bf16_others[] = {
    0x0000, 0x8000,                         /* +-0 */
    0x0001, 0x8001, 0x0040, 0x007f, 0x807f, /* subnormals */
    0x0080, 0x8080, 0x8081, 0x00ff,         /* FLT_MIN, -FLT_MIN, -(FLT_MIN + ulp), 2^-126 * 1.99 */
    0x7f7f, 0xff7f, 0x7f7e, 0x7f00, 0x7e80, /* max, -max, below max, 2^127, 2^126 */
    0x3f80, 0xbf80, 0x3b80, 0xbb80, 0x3f81, /* 1, -1, 2^-8, -2^-8, 1 + 2^-7 */
    0x7f80, 0xff80,                         /* +-inf */
    0x7fc0, 0xffc1, 0x7f81, 0xff85, 0x7fff, /* NaN: quiet, payloads, signalling */
};

/* Ops as (kind, scalar, divisor; -1 divides by nsrc). The scalars 1/3 and the
 * divisor 3 give f32 results with low bits set, subnormal ones included, so
 * the final rounding has work (and ties) everywhere; a NaN scalar makes every
 * vector go through the exact path. */
static const red_case_t bf16_cases[] = {
    {OFCCL_OP_SUM, 0.0, 0},
    {OFCCL_OP_AVG, 0.0, -1},
    {OFCCL_OP_AVG, 0.0, 3},
    {OFCCL_OP_PREMUL_SUM, 0.25, 0},
    {OFCCL_OP_PREMUL_SUM, -3.0, 0},
    {OFCCL_OP_PREMUL_SUM, 1.0 / 3.0, 0},
    {OFCCL_OP_PREMUL_SUM, 1.0 / 3.0, 2},
    {OFCCL_OP_PREMUL_SUM, NAN, 0},
};

/* Call lengths, used in turn along the 65536 patterns: short vectors and
 * tails (1, 15, 31, 33, 1007 = 1000 + 7), exact vectors and blocks, and
 * lengths across several 512-element blocks, up to more than the 34 blocks
 * after which the fast kernel leaves NaN-filled data to the avx512 one. */
static const size_t bf16_lens[] = {1, 15, 33, 1007, 512, 4103, 32, 31, 64, 2000, 20000};

static const char *const kernel_sets[] = {"avx512bf16", "avx512", "avx2", "base"};

enum { BF16_N = 1 << 16 };

static int bf16_is_nan(uint16_t h)
{
    return (h & 0x7fff) > 0x7f80;
}

/* The documented evaluation in scalar f32: products, left-to-right sum, one
 * division, one rounding (the conversions are checked exhaustively above). */
static uint16_t bf16_reference(const uint16_t *x, int nsrc, float c, int ndiv)
{
    float s = ofccl__bf16_to_f32(x[0]) * c;

    for (int k = 1; k < nsrc; k++) {
        float p = ofccl__bf16_to_f32(x[k]) * c;
        s = s + p;
    }
    if (ndiv > 0)
        s = s / (float)ndiv;
    return ofccl__f32_to_bf16(s);
}

/* A NaN result where the reference has one. With several NaN operands, which
 * one comes out depends on the operand order the compiler picked for x + y
 * (x86 returns the first operand's), so any of them, quieted, is right, and
 * so is the default NaN when an invalid operation (inf - inf, 0 * inf) made
 * one of them. That the kernel sets agree on the choice is checked apart. */
static int bf16_nan_ok(uint16_t got, uint16_t want, const uint16_t *x, int nsrc, float c)
{
    volatile float inf = INFINITY;

    if (!bf16_is_nan(got) || !bf16_is_nan(want))
        return 0;
    if (got == want || got == ofccl__f32_to_bf16(inf - inf))
        return 1;
    for (int k = 0; k < nsrc; k++)
        if (bf16_is_nan(x[k]) && got == (x[k] | 0x0040))
            return 1;
    return isnan(c) && got == ofccl__f32_to_bf16(c);
}

typedef struct bf16_bufs {
    uint16_t *mem[4], *src[3], *out, *other, *inplace;
} bf16_bufs_t;

/* Buffers one element past 64-byte alignment, so no call starts aligned. */
static void bf16_bufs_open(bf16_bufs_t *b)
{
    for (int k = 0; k < 4; k++) {
        b->mem[k] = aligned_alloc(64, 3 * (BF16_N + 32) * sizeof(uint16_t));
        CU_ASSERT_PTR_NOT_NULL_FATAL(b->mem[k]);
    }
    for (int k = 0; k < 3; k++)
        b->src[k] = b->mem[k] + 1;
    b->out = b->mem[3] + 1;
    b->other = b->out + BF16_N + 32;
    b->inplace = b->other + BF16_N + 32;
    for (uint32_t i = 0; i < BF16_N; i++)
        b->src[0][i] = (uint16_t)i;
}

static void bf16_bufs_close(bf16_bufs_t *b)
{
    for (int k = 0; k < 4; k++)
        free(b->mem[k]);
}

/* ofccl__reduce (or kernel set `isa`) over the 65536 elements in calls of the
 * lengths above, starting the cycle at `phase`; into `dst`, or in place into
 * a copy of source 0 when dst is `inplace`. Returns the first error. */
static int bf16_run(const char *isa, bf16_bufs_t *b, uint16_t *dst, ofccl_redop_t op, int nsrc,
                    int ndiv, size_t phase)
{
    const void *srcs[3] = {b->src[0], b->src[1], b->src[2]};
    size_t nlens = sizeof(bf16_lens) / sizeof(bf16_lens[0]);

    if (dst == b->inplace) {
        memcpy(b->inplace, b->src[0], BF16_N * sizeof(uint16_t));
        srcs[0] = b->inplace;
    }
    for (size_t off = 0, j = phase; off < BF16_N; off += bf16_lens[j++ % nlens]) {
        size_t n = bf16_lens[j % nlens] < BF16_N - off ? bf16_lens[j % nlens] : BF16_N - off;
        const void *at[3] = {(const uint16_t *)srcs[0] + off, (const uint16_t *)srcs[1] + off,
                             (const uint16_t *)srcs[2] + off};
        int rc = isa ? ofccl__reduce_on(isa, OFCCL_BF16, op, dst + off, at, nsrc, n, ndiv)
                     : ofccl__reduce(OFCCL_BF16, op, dst + off, at, nsrc, n, ndiv);

        if (rc != 0)
            return rc;
    }
    return 0;
}

/* One op and nsrc, every pattern against source values y (and z): the
 * result of ofccl__reduce against the scalar reference, in place against out
 * of place, and against every other kernel set this CPU runs, bit for bit,
 * except which NaN comes out where several meet: that one must be one of the
 * inputs' NaNs (quieted), the scalar's, or the default NaN (bf16_nan_ok). The
 * operand order of `x * c` or `x + y` decides it, and compilers choose it per
 * copy of the code and per optimisation level: the base (SSE2) code returns
 * x's NaN from x * c and the AVX code c's; the ASan+UBSan build even
 * differs between the avx512 kernel called in place and out of place.
 * Returns the number of elements that differ; prints the first few. */
static int bf16_sweep(bf16_bufs_t *b, const red_case_t *rc, int nsrc, uint16_t y, uint16_t z,
                      size_t phase, int *reported)
{
    ofccl_redop_t op = {rc->kind, rc->scalar};
    int ndiv = rc->ndiv < 0 ? nsrc : rc->ndiv, bad = 0;
    float c = rc->kind == OFCCL_OP_PREMUL_SUM ? (float)rc->scalar : 1.0f;

    for (size_t i = 0; i < BF16_N; i++) {
        b->src[1][i] = y;
        b->src[2][i] = z;
    }
    CU_ASSERT_EQUAL_FATAL(bf16_run(NULL, b, b->out, op, nsrc, ndiv, phase), 0);
    for (size_t i = 0; i < BF16_N; i++) {
        uint16_t x[3] = {b->src[0][i], y, z};
        uint16_t want = bf16_reference(x, nsrc, c, ndiv), got = b->out[i];

        if (got != want && !bf16_nan_ok(got, want, x, nsrc, c)) {
            if ((*reported)++ < 5)
                fprintf(stderr,
                        "bf16 op %d scalar %g ndiv %d: %#06x %#06x %#06x (nsrc %d) -> %#06x, want "
                        "%#06x\n",
                        rc->kind, rc->scalar, ndiv, x[0], y, z, nsrc, got, want);
            bad++;
        }
    }
    CU_ASSERT_EQUAL_FATAL(bf16_run(NULL, b, b->inplace, op, nsrc, ndiv, phase + 3), 0);
    for (size_t i = 0; i < BF16_N; i++) {
        uint16_t x[3] = {b->src[0][i], y, z};
        if (b->inplace[i] != b->out[i] && !bf16_nan_ok(b->inplace[i], b->out[i], x, nsrc, c)) {
            if ((*reported)++ < 5)
                fprintf(stderr, "bf16 op %d nsrc %d: in place gives %#06x, out of place %#06x\n",
                        rc->kind, nsrc, b->inplace[i], b->out[i]);
            bad++;
        }
    }
    for (size_t s = 0; s < sizeof(kernel_sets) / sizeof(kernel_sets[0]); s++) {
        if (strcmp(kernel_sets[s], ofccl__reduce_isa()) == 0 ||
            bf16_run(kernel_sets[s], b, b->other, op, nsrc, ndiv, phase + 5) != 0)
            continue;
        for (size_t i = 0; i < BF16_N; i++) {
            uint16_t x[3] = {b->src[0][i], y, z};
            if (b->other[i] != b->out[i] && !bf16_nan_ok(b->other[i], b->out[i], x, nsrc, c)) {
                if ((*reported)++ < 5)
                    fprintf(stderr,
                            "bf16 op %d scalar %g nsrc %d: %s gives %#06x, %s %#06x for %#06x "
                            "%#06x %#06x\n",
                            rc->kind, rc->scalar, nsrc, ofccl__reduce_isa(), b->out[i],
                            kernel_sets[s], b->other[i], b->src[0][i], y, z);
                bad++;
            }
        }
    }
    return bad;
}

/* Which kernel sets run here, printed with the test; on a CPU with
 * AVX512-BF16 the fast one must be the one in use. */
static void bf16_report_kernels(void)
{
    static int done;

    if (done++)
        return;
    printf("\n    kernels in use: %s; also compared:", ofccl__reduce_isa());
    for (size_t s = 0; s < sizeof(kernel_sets) / sizeof(kernel_sets[0]); s++) {
        uint16_t one = 0x3f80, out;
        const void *src = &one;
        ofccl_redop_t sum = {OFCCL_OP_SUM, 0.0};

        if (strcmp(kernel_sets[s], ofccl__reduce_isa()) != 0 &&
            ofccl__reduce_on(kernel_sets[s], OFCCL_BF16, sum, &out, &src, 1, 1, 0) == 0)
            printf(" %s", kernel_sets[s]);
    }
    printf("\n    ");
#if defined(__x86_64__) &&                                                                         \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bf16"))
        CU_ASSERT_STRING_EQUAL(ofccl__reduce_isa(), "avx512bf16");
#endif
}

static void bf16_sweep_all(const int *nsrcs, size_t n_nsrcs, const red_case_t *cases, size_t ncases)
{
    size_t nothers = sizeof(bf16_others) / sizeof(bf16_others[0]), phase = 0;
    bf16_bufs_t b;
    int bad = 0, reported = 0;

    bf16_report_kernels();
    bf16_bufs_open(&b);
    for (size_t c = 0; c < ncases; c++)
        for (size_t n = 0; n < n_nsrcs; n++)
            for (size_t j = 0; j < nothers; j++, phase++)
                bad += bf16_sweep(&b, &cases[c], nsrcs[n], bf16_others[j],
                                  bf16_others[(j + 7) % nothers], phase, &reported);
    bf16_bufs_close(&b);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_reduce_bf16_every_pattern(void)
{
    static const int nsrcs[] = {1, 2, 3};

    bf16_sweep_all(nsrcs, 3, bf16_cases, sizeof(bf16_cases) / sizeof(bf16_cases[0]));
}

/* One call of test_reduce_bf16_lanes: n elements, the special one at `pos`,
 * dst `shift` elements past a 64-byte boundary; returns the wrong elements. */
static int bf16_lanes_case(int nsrc, int ndiv, size_t n, size_t pos, const uint16_t special[2],
                           size_t shift, int have_avx512, int *reported)
{
    enum { MAXN = 70 };
    /* sources one element past alignment; dst and the avx512 result apart */
    static uint16_t a[MAXN + 1], b[MAXN + 1], z[MAXN + 1];
    static uint16_t out[MAXN + 32] __attribute__((aligned(64))), ref[MAXN + 32];
    const void *srcs[3] = {a + 1, b + 1, z + 1};
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0.0};
    int bad = 0;

    for (size_t i = 0; i <= MAXN; i++)
        a[i] = 0x3f80, b[i] = 0x4000, z[i] = 0xc040; /* 1, 2, -3 */
    a[1 + pos] = special[0];
    b[1 + pos] = z[1 + pos] = special[1];
    CU_ASSERT_EQUAL_FATAL(ofccl__reduce(OFCCL_BF16, sum, out + shift, srcs, nsrc, n, ndiv), 0);
    if (have_avx512)
        CU_ASSERT_EQUAL_FATAL(ofccl__reduce_on("avx512", OFCCL_BF16, sum, ref, srcs, nsrc, n, ndiv),
                              0);
    for (size_t i = 0; i < n; i++) {
        uint16_t x[3] = {a[1 + i], b[1 + i], z[1 + i]}, got = out[shift + i];
        uint16_t want = bf16_reference(x, nsrc, 1.0f, ndiv);
        int ok = (got == want || bf16_nan_ok(got, want, x, nsrc, 1.0f)) &&
                 (!have_avx512 || got == ref[i]);

        if (!ok && (*reported)++ < 5)
            fprintf(stderr,
                    "bf16 lane %zu of %zu (special at %zu, dst +%zu), nsrc %d ndiv %d: %#06x, "
                    "want %#06x\n",
                    i, n, pos, shift, nsrc, ndiv, got, have_avx512 ? ref[i] : want);
        bad += !ok;
    }
    return bad;
}

/* One lane the fast rounding cannot do, at every position of every length up
 * to 70, with dst at every offset from a 64-byte boundary (so every split
 * into a first short vector, full ones and a short last one; even and odd
 * lanes are checked apart), the other lanes ordinary: a subnormal result
 * (3 * 2^-133, also divided by 2 and 3) or two NaNs with different payloads
 * (which one survives is for the exact code to decide). Each call is checked
 * against the reference and, NaN payloads included, against avx512. */
static void test_reduce_bf16_lanes(void)
{
    static const uint16_t specials[2][2] = {{0x0003, 0x0000}, {0x7f81, 0xffc5}};
    static const int ndivs[] = {0, 3};
    uint16_t one = 0x3f80, out;
    int bad = 0, reported = 0, have_avx512;
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0.0};

    have_avx512 =
        ofccl__reduce_on("avx512", OFCCL_BF16, sum, &out, (const void *[]){&one}, 1, 1, 0) == 0;
    for (int nsrc = 1; nsrc <= 3; nsrc++)
        for (size_t d = 0; d < 2; d++)
            for (size_t shift = 0; shift < 32; shift++)
                for (size_t n = 1; n <= 70; n++)
                    for (size_t pos = 0; pos < n; pos++)
                        for (int sp = 0; sp < 2; sp++)
                            bad += bf16_lanes_case(nsrc, ndivs[d], n, pos, specials[sp], shift,
                                                   have_avx512, &reported);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The same with MXCSR.DAZ (and FTZ) set by the application: the arithmetic
 * flushes subnormal inputs in the kernels and in the reference alike, and
 * the rounding must still be ours. vfpclassps takes subnormals for zeros
 * under DAZ (Zen 5 included), so the fast kernel must step aside then. */
static void test_reduce_bf16_daz(void)
{
#if defined(__x86_64__)
    static const int nsrcs[] = {2, 3};
    unsigned csr = _mm_getcsr();

    for (unsigned mode = 0; mode < 2; mode++) {
        _mm_setcsr(csr | 0x0040u | (mode ? 0x8000u : 0u)); /* DAZ, then DAZ + FTZ */
        bf16_sweep_all(nsrcs, 2, bf16_cases, 3);
        _mm_setcsr(csr);
    }
#endif
}

/* dst may also equal a later source exactly (each block is read before it is
 * written), but must not partly overlap any source. */
static void test_reduce_aliasing(void)
{
    float x[600], y[600], want[600];
    const void *srcs[2] = {x, y};
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0.0};

    for (int i = 0; i < 600; i++) {
        x[i] = (float)i;
        y[i] = 0.5f * (float)i;
        want[i] = 1.5f * (float)i;
    }
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, y, srcs, 2, 600, 0), 0);
    CU_ASSERT_EQUAL(memcmp(y, want, sizeof(want)), 0);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, x + 1, srcs, 2, 599, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, y + 1, srcs, 2, 2, 0), OFCCL_ERR_INVALID_ARG);
    /* Adjacent, not overlapping. */
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, x + 300, srcs, 2, 300, 0), 0);
}

static void test_reduce_bad_args(void)
{
    float a[4] = {1, 2, 3, 4}, out[4];
    const void *srcs[2] = {a, a};
    const void *nulls[2] = {a, NULL};
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0.0};
    ofccl_redop_t bad_op = {(ofccl_op_kind_t)OFCCL_OP_COUNT, 0.0};
    ofccl_redop_t neg_op = {(ofccl_op_kind_t)-1, 0.0};

    CU_ASSERT_EQUAL(ofccl__reduce((ofccl_dtype_t)OFCCL_DTYPE_COUNT, sum, out, srcs, 2, 4, 0),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce((ofccl_dtype_t)-1, sum, out, srcs, 2, 4, 0),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, bad_op, out, srcs, 2, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, neg_op, out, srcs, 2, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, srcs, 0, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, srcs, -1, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, srcs, 2, 4, -2), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, NULL, srcs, 2, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, NULL, 2, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, nulls, 2, 4, 0), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, srcs, 2, SIZE_MAX / 2, 0),
                    OFCCL_ERR_INVALID_ARG);
    /* Nothing to do: NULL buffers are fine, bad dtype/op/nsrc still are not. */
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, NULL, NULL, 2, 0, 0), 0);
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, NULL, NULL, 0, 0, 0), OFCCL_ERR_INVALID_ARG);
    /* The same source twice is allowed. */
    CU_ASSERT_EQUAL(ofccl__reduce(OFCCL_F32, sum, out, srcs, 2, 4, 0), 0);
    CU_ASSERT_EQUAL(out[3], 8.0f);
}

static void test_dtype_size(void)
{
    CU_ASSERT_EQUAL(ofccl_dtype_size(OFCCL_F32), 4);
    CU_ASSERT_EQUAL(ofccl_dtype_size(OFCCL_F64), 8);
    CU_ASSERT_EQUAL(ofccl_dtype_size(OFCCL_BF16), 2);
    CU_ASSERT_EQUAL(ofccl_dtype_size(OFCCL_F16), 2);
    CU_ASSERT_EQUAL(ofccl_dtype_size(OFCCL_DTYPE_COUNT), 0);
    CU_ASSERT_EQUAL(ofccl_dtype_size((ofccl_dtype_t)-1), 0);
}

/* The rate helper works and refuses bad arguments (its numbers are for perf,
 * not asserted here). */
static void test_reduce_rate(void)
{
    for (size_t i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
        CU_ASSERT_TRUE(ofccl__reduce_rate(all_dtypes[i], 2, 1 << 16) > 0.0);
    CU_ASSERT_EQUAL(ofccl__reduce_rate((ofccl_dtype_t)OFCCL_DTYPE_COUNT, 2, 1 << 16), 0.0);
    CU_ASSERT_EQUAL(ofccl__reduce_rate(OFCCL_F32, 0, 1 << 16), 0.0);
    CU_ASSERT_EQUAL(ofccl__reduce_rate(OFCCL_F64, 2, 4), 0.0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"bf16 round trip, all 65536 patterns", test_bf16_roundtrip},
        {"f16 round trip, all 65536 patterns", test_f16_roundtrip},
        {"f32 -> bf16 rounding vs reference", test_bf16_rounding_sweep},
        {"f32 -> f16 rounding vs reference", test_f16_rounding_sweep},
        {"conversion cases", test_conversion_cases},
        {"reduce f32", test_reduce_f32},
        {"reduce f64", test_reduce_f64},
        {"reduce bf16", test_reduce_bf16},
        {"reduce f16", test_reduce_f16},
        {"reduce special values", test_reduce_special},
        {"reduce bf16, every pattern, bit for bit", test_reduce_bf16_every_pattern},
        {"reduce bf16, hard lanes at every position", test_reduce_bf16_lanes},
        {"reduce bf16 under DAZ/FTZ, bit for bit", test_reduce_bf16_daz},
        {"reduce aliasing", test_reduce_aliasing},
        {"reduce bad arguments", test_reduce_bad_args},
        {"dtype sizes", test_dtype_size},
        {"reduce rate", test_reduce_rate},
        {NULL, NULL},
    };

    return cu_run("reduce", tests);
}
