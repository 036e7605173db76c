/*
 * ofccl__reduce for every dtype, op and a spread of source counts and odd
 * lengths against a double-precision reference with the tolerances derived in
 * docs/reductions.md; special values, aliasing, bad arguments.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "redref.h"

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
        {"reduce f32", test_reduce_f32},
        {"reduce f64", test_reduce_f64},
        {"reduce bf16", test_reduce_bf16},
        {"reduce f16", test_reduce_f16},
        {"reduce special values", test_reduce_special},
        {"reduce aliasing", test_reduce_aliasing},
        {"reduce bad arguments", test_reduce_bad_args},
        {"dtype sizes", test_dtype_size},
        {"reduce rate", test_reduce_rate},
        {NULL, NULL},
    };

    return cu_run("reduce", tests);
}
