/*
 * bf16 reduction bit for bit: every pattern against special operands, against
 * a scalar replay and across the kernel sets this CPU runs (the AVX512-BF16
 * one must equal AVX-512's), also under DAZ/FTZ.
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
#include "redref.h"

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
int main(void)
{
    static const cu_test_t tests[] = {
        {"reduce bf16, every pattern, bit for bit", test_reduce_bf16_every_pattern},
        {"reduce bf16, hard lanes at every position", test_reduce_bf16_lanes},
        {"reduce bf16 under DAZ/FTZ, bit for bit", test_reduce_bf16_daz},
        {NULL, NULL},
    };

    return cu_run("reduce-bf16", tests);
}
