/*
 * The 16-bit conversions (f32 <-> bf16, f16) exhaustively and against a
 * reference written another way (redref.h), plus hand-worked cases.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "redref.h"

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

int main(void)
{
    static const cu_test_t tests[] = {
        {"bf16 round trip, all 65536 patterns", test_bf16_roundtrip},
        {"f16 round trip, all 65536 patterns", test_f16_roundtrip},
        {"f32 -> bf16 rounding vs reference", test_bf16_rounding_sweep},
        {"f32 -> f16 rounding vs reference", test_f16_rounding_sweep},
        {"conversion cases", test_conversion_cases},
        {NULL, NULL},
    };

    return cu_run("convert", tests);
}
