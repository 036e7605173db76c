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
 *    largest finite value become +-inf (bf16: at or above 0x1.ffp127,
 *    halfway between the bf16 maximum 0x1.fep127 and 2^128; f16: at or above
 *    65520, halfway between 65504 and 65536). f16 subnormals (multiples of 2^-24) are rounded to
 * nearest even; 2^-25 becomes +0, anything above it 2^-24. bf16 subnormals come out of the same
 * rule (the f32 bits are rounded at bit 16). The sign of zero is kept. NaN becomes a quiet NaN with
 * the same sign and the top payload bits.
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
 *    result there is an f32 subnormal that matters. (The f32 arithmetic of
 *    the reduction itself does see bf16/f32 subnormals: an application that
 *    turns on FTZ/DAZ gets them flushed, as in any other f32 code.)
 *
 * Structure, and why: the work goes by blocks of OFCCL__RED_BLOCK elements.
 * One or two sources are reduced straight into dst in one fused loop; with
 * more, f32 and bf16 sum the first nsrc - 1 sources by strips of 32 elements
 * in vector registers (see strip_f), and f16 and f64 put the first two into
 * an f32/f64 accumulator on the stack and add the middle ones to it; the
 * last one is added and written out in the same loop, so each byte is loaded
 * and stored once, as in a plain a+b loop. Every
 * element of dst depends only on the same element of the sources, which is
 * what makes dst == srcs[k] safe. Full blocks have a compile-time trip count
 * so gcc vectorises them even at -O2 (its "very cheap" cost model refuses
 * loops that need a scalar epilogue); the tail block runs the same code with
 * a runtime count. On x86-64 the kernels also exist for AVX2 and AVX-512,
 * chosen at run time (see isa_best()), and on CPUs with AVX512-BF16 bf16 has
 * a kernel of its own that rounds with vcvtne2ps2bf16 (reduce_bf16.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "reduce_bf16.h"
#include "reduce_cvt.h"

#define OFCCL__RED_BLOCK 512

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
    case OFCCL_U8:
        return 1;
    default:
        return 0;
    }
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
 * One loop shape per (dtype, kind, divide); every argument that selects a
 * shape is a constant at its call site, so each inlined copy is a straight,
 * branch-free loop. The sources and dst are not restrict-qualified: dst may
 * be a source. The pragma tells the vectoriser that no iteration depends on
 * another (true for exact aliasing, and partial overlap is refused up front),
 * so gcc vectorises without a runtime overlap check, which its -O2 cost model
 * would not accept. Non-premul ops multiply by c = 1, which is exact and keeps
 * the number of loop copies down. */

#if defined(__clang__)
#define OFCCL__NO_LOOP_DEPS _Pragma("clang loop vectorize(assume_safety)")
/* Sanitizer builds cannot vectorise; that is not worth a warning per loop. */
#pragma clang diagnostic ignored "-Wpass-failed"
#elif defined(__GNUC__)
#define OFCCL__NO_LOOP_DEPS _Pragma("GCC ivdep")
#else
#define OFCCL__NO_LOOP_DEPS
#endif

enum {
    K_ONE,  /* dst = post(p(a))                 nsrc == 1 */
    K_TWO,  /* dst = post(p(a) + p(b))          nsrc == 2 */
    K_ACC2, /* acc = p(a) + p(b)                first two of nsrc >= 3 */
    K_ADD,  /* acc = acc + p(a)                 middle sources */
    K_LAST, /* dst = post(acc + p(a))           last source of nsrc >= 3 */
};

OFCCL__ALWAYS_INLINE float load_f(int t, const void *p, size_t i)
{
    if (t == OFCCL_BF16)
        return cvt_bf16_f32(((const uint16_t *)p)[i]);
    if (t == OFCCL_F16)
        return cvt_f16_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

OFCCL__ALWAYS_INLINE void store_f(int t, void *p, size_t i, float v)
{
    if (t == OFCCL_BF16)
        ((uint16_t *)p)[i] = cvt_f32_bf16(v);
    else if (t == OFCCL_F16)
        ((uint16_t *)p)[i] = cvt_f32_f16(v);
    else
        ((float *)p)[i] = v;
}

/* f32 accumulation for f32, bf16 and f16 (`t`). The product and the sum are
 * separate statements so that clang's default -ffp-contract=on cannot fuse
 * them. */
OFCCL__ALWAYS_INLINE void kern_f(int t, int kind, int divide, void *d, float *acc, const void *a,
                                 const void *b, size_t n, float c, float div)
{
    OFCCL__NO_LOOP_DEPS
    for (size_t i = 0; i < n; i++) {
        float x = load_f(t, a, i) * c;

        if (kind == K_TWO || kind == K_ACC2) {
            float y = load_f(t, b, i) * c;
            x = x + y;
        } else if (kind == K_ADD || kind == K_LAST) {
            x = acc[i] + x;
        }
        if (kind == K_ACC2 || kind == K_ADD)
            acc[i] = x;
        else
            store_f(t, d, i, divide ? x / div : x);
    }
}

/* The same for f64, accumulating in f64. */
OFCCL__ALWAYS_INLINE void kern_d(int kind, int divide, double *d, double *acc, const double *a,
                                 const double *b, size_t n, double c, double div)
{
    OFCCL__NO_LOOP_DEPS
    for (size_t i = 0; i < n; i++) {
        double x = a[i] * c;

        if (kind == K_TWO || kind == K_ACC2) {
            double y = b[i] * c;
            x = x + y;
        } else if (kind == K_ADD || kind == K_LAST) {
            x = acc[i] + x;
        }
        if (kind == K_ACC2 || kind == K_ADD)
            acc[i] = x;
        else
            d[i] = divide ? x / div : x;
    }
}

/* ---- many sources: strips summed in registers ----
 * With three or more sources, f32 and bf16 go by strips of OFCCL__RED_STRIP
 * elements: the first nsrc - 1 sources are summed in vector registers, in
 * source order, and written to the accumulator once; then the last source is
 * added and the result stored by the K_LAST loop. Every source advances one
 * strip at a time, so all of them stream together. Summing each source over a
 * whole block before the next (the accumulator going through L1 once per
 * source) measured 2-5x slower at 8 and 16 sources with every core of a
 * 16-core host reducing at once (`git log -S OFCCL__RED_STRIP`). The values and their
 * order are those of the block loops; f16 (conversion-bound) and f64 keep
 * them. GCC and clang vector extensions: 8 x f32, split into two SSE2
 * registers in the baseline table. */
#define OFCCL__RED_STRIP 32 /* four vectors of 8 f32: strip_f */
#if defined(__GNUC__)
#define OFCCL__RED_STRIPS 1
typedef float v8f_t __attribute__((vector_size(32)));
typedef uint32_t v8u_t __attribute__((vector_size(32)));
typedef uint16_t v8h_t __attribute__((vector_size(16)));

/* *out = p(x) for the 8 elements at element i of source p (f32 or bf16).
 * (Through a pointer: a vector returned by value warns about the ABI in the
 * SSE2 table.) */
OFCCL__ALWAYS_INLINE void vload_mul(int t, const char *p, size_t i, float c, v8f_t *out)
{
    v8f_t x;

    if (t == OFCCL_BF16) {
        v8h_t h;
        v8u_t u;

        memcpy(&h, p + i * 2, sizeof(h));
        u = __builtin_convertvector(h, v8u_t) << 16;
        memcpy(&x, &u, sizeof(x));
    } else {
        memcpy(&x, p + i * 4, sizeof(x));
    }
    *out = x * c;
}

/* acc[0, STRIP) = ((p0 + p1) + p2) + ... + p(nsrc-2) at element `off`; four
 * named vectors, not an array, so the compiler keeps them in registers. */
OFCCL__ALWAYS_INLINE void strip_f(int t, float *acc, const void *const *srcs, int nsrc, size_t off,
                                  float c)
{
    const char *p0 = (const char *)srcs[0], *p1 = (const char *)srcs[1];
    v8f_t a0, a1, a2, a3, x0, x1, x2, x3;

    vload_mul(t, p0, off, c, &a0);
    vload_mul(t, p0, off + 8, c, &a1);
    vload_mul(t, p0, off + 16, c, &a2);
    vload_mul(t, p0, off + 24, c, &a3);
    for (int k = 1; k < nsrc - 1; k++) {
        const char *pk = k == 1 ? p1 : (const char *)srcs[k];

        vload_mul(t, pk, off, c, &x0);
        vload_mul(t, pk, off + 8, c, &x1);
        vload_mul(t, pk, off + 16, c, &x2);
        vload_mul(t, pk, off + 24, c, &x3);
        a0 = a0 + x0;
        a1 = a1 + x1;
        a2 = a2 + x2;
        a3 = a3 + x3;
    }
    memcpy(acc, &a0, sizeof(a0));
    memcpy(acc + 8, &a1, sizeof(a1));
    memcpy(acc + 16, &a2, sizeof(a2));
    memcpy(acc + 24, &a3, sizeof(a3));
}
#endif

/* One block of `n` elements at element `off`. One or two sources go straight
 * to dst; more go through the accumulator, by strips where they can (above),
 * the last source fused with the output: ((p0 + p1) + p2) + ... in every
 * case. */
OFCCL__ALWAYS_INLINE void block_f(int t, int divide, void *dst, const void *const *srcs, int nsrc,
                                  size_t off, size_t n, float c, float div)
{
    size_t es = t == OFCCL_F32 ? 4 : 2;
    char *d = (char *)dst + off * es;
#define OFCCL__SRC(k) ((const char *)srcs[k] + off * es)

    if (nsrc == 1) {
        kern_f(t, K_ONE, divide, d, NULL, OFCCL__SRC(0), NULL, n, c, div);
    } else if (nsrc == 2) {
        kern_f(t, K_TWO, divide, d, NULL, OFCCL__SRC(0), OFCCL__SRC(1), n, c, div);
    } else {
        float acc[OFCCL__RED_BLOCK] OFCCL__ALIGNED(64);
        size_t done = 0;

#ifdef OFCCL__RED_STRIPS
        if (t != OFCCL_F16)
            for (; n - done >= OFCCL__RED_STRIP; done += OFCCL__RED_STRIP) {
                strip_f(t, acc, srcs, nsrc, off + done, c);
                kern_f(t, K_LAST, divide, d + done * es, acc,
                       (const char *)srcs[nsrc - 1] + (off + done) * es, NULL, OFCCL__RED_STRIP, c,
                       div);
            }
        if (done == n)
            return;
        d += done * es;
        off += done;
        n -= done;
#endif
        kern_f(t, K_ACC2, 0, NULL, acc, OFCCL__SRC(0), OFCCL__SRC(1), n, c, div);
        for (int k = 2; k < nsrc - 1; k++)
            kern_f(t, K_ADD, 0, NULL, acc, OFCCL__SRC(k), NULL, n, c, div);
        kern_f(t, K_LAST, divide, d, acc, OFCCL__SRC(nsrc - 1), NULL, n, c, div);
    }
#undef OFCCL__SRC
}

OFCCL__ALWAYS_INLINE void block_d(int divide, void *dst, const void *const *srcs, int nsrc,
                                  size_t off, size_t n, double c, double div)
{
    double *d = (double *)dst + off;
#define OFCCL__SRC(k) ((const double *)srcs[k] + off)

    if (nsrc == 1) {
        kern_d(K_ONE, divide, d, NULL, OFCCL__SRC(0), NULL, n, c, div);
    } else if (nsrc == 2) {
        kern_d(K_TWO, divide, d, NULL, OFCCL__SRC(0), OFCCL__SRC(1), n, c, div);
    } else {
        double acc[OFCCL__RED_BLOCK] OFCCL__ALIGNED(64);

        kern_d(K_ACC2, 0, NULL, acc, OFCCL__SRC(0), OFCCL__SRC(1), n, c, div);
        for (int k = 2; k < nsrc - 1; k++)
            kern_d(K_ADD, 0, NULL, acc, OFCCL__SRC(k), NULL, n, c, div);
        kern_d(K_LAST, divide, d, acc, OFCCL__SRC(nsrc - 1), NULL, n, c, div);
    }
#undef OFCCL__SRC
}

/* Elements [start, end). Full blocks pass the constant OFCCL__RED_BLOCK as `n`
 * (vectorised without an epilogue); the tail passes the remainder. */
OFCCL__ALWAYS_INLINE void reduce_f(int t, int divide, void *dst, const void *const *srcs, int nsrc,
                                   size_t start, size_t end, float c, float div)
{
    size_t off = start;

    for (; end - off >= OFCCL__RED_BLOCK; off += OFCCL__RED_BLOCK)
        block_f(t, divide, dst, srcs, nsrc, off, OFCCL__RED_BLOCK, c, div);
    if (off < end)
        block_f(t, divide, dst, srcs, nsrc, off, end - off, c, div);
}

OFCCL__ALWAYS_INLINE void reduce_d(int divide, void *dst, const void *const *srcs, int nsrc,
                                   size_t start, size_t end, double c, double div)
{
    size_t off = start;

    for (; end - off >= OFCCL__RED_BLOCK; off += OFCCL__RED_BLOCK)
        block_d(divide, dst, srcs, nsrc, off, OFCCL__RED_BLOCK, c, div);
    if (off < end)
        block_d(divide, dst, srcs, nsrc, off, end - off, c, div);
}

/*
 * One out-of-line entry per (dtype, divide), each with its own specialised
 * loops, gathered in a table indexed [dtype][divide]. On x86-64 the same C is
 * also compiled for AVX2 and for AVX-512 (F, BW, VL) and the widest table the
 * CPU and OS support is used: the 16-bit conversions are instruction-bound,
 * and wider vectors, vpackusdw and mask registers make them 2-4x faster than
 * the SSE2 baseline. None of these targets enables FMA, so every table gives
 * the same bits, but for which payload comes out where two NaNs meet: that is
 * the compiler's operand order (built by gcc 12 or clang 14, the SSE2 code
 * keeps x's NaN in x * c, the AVX code c's). An entry does elements
 * [off, off + count): ofccl__reduce passes 0, the bf16 kernel of
 * reduce_bf16.c one of the call's blocks to redo.
 */
typedef void (*red_fn_t)(void *dst, const void *const *srcs, int nsrc, size_t off, size_t count,
                         double c, int ndiv);

/* One table entry, doing elements [o, o + n): _F for the types that
 * accumulate in f32 (DT), _D for f64; DIV 1 divides by ndiv (AVG). */
#define OFCCL__RED_ENTRY(NAME, ATTR, CALL)                                                         \
    ATTR static void NAME(void *d, const void *const *s, int ns, size_t o, size_t n, double c,     \
                          int v)                                                                   \
    {                                                                                              \
        CALL;                                                                                      \
    }
#define OFCCL__RED_ENTRY_F(NAME, ATTR, DT, DIV)                                                    \
    OFCCL__RED_ENTRY(NAME, ATTR, reduce_f(DT, DIV, d, s, ns, o, o + n, (float)c, (float)v))
#define OFCCL__RED_ENTRY_D(NAME, ATTR, DIV)                                                        \
    OFCCL__RED_ENTRY(NAME, ATTR, reduce_d(DIV, d, s, ns, o, o + n, c, (double)v))

#define OFCCL__RED_TABLE(SFX, ATTR)                                                                \
    OFCCL__RED_ENTRY_F(f32_sum_##SFX, ATTR, OFCCL_F32, 0)                                          \
    OFCCL__RED_ENTRY_F(f32_div_##SFX, ATTR, OFCCL_F32, 1)                                          \
    OFCCL__RED_ENTRY_F(bf16_sum_##SFX, ATTR, OFCCL_BF16, 0)                                        \
    OFCCL__RED_ENTRY_F(bf16_div_##SFX, ATTR, OFCCL_BF16, 1)                                        \
    OFCCL__RED_ENTRY_F(f16_sum_##SFX, ATTR, OFCCL_F16, 0)                                          \
    OFCCL__RED_ENTRY_F(f16_div_##SFX, ATTR, OFCCL_F16, 1)                                          \
    OFCCL__RED_ENTRY_D(f64_sum_##SFX, ATTR, 0)                                                     \
    OFCCL__RED_ENTRY_D(f64_div_##SFX, ATTR, 1)                                                     \
    static const red_fn_t table_##SFX[OFCCL_DTYPE_COUNT][2] = {                                    \
        [OFCCL_F32] = {f32_sum_##SFX, f32_div_##SFX},                                              \
        [OFCCL_F64] = {f64_sum_##SFX, f64_div_##SFX},                                              \
        [OFCCL_BF16] = {bf16_sum_##SFX, bf16_div_##SFX},                                           \
        [OFCCL_F16] = {f16_sum_##SFX, f16_div_##SFX},                                              \
    };

OFCCL__RED_TABLE(base, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OFCCL__RED_X86 1
OFCCL__RED_TABLE(avx2, __attribute__((target("avx2"))))
OFCCL__RED_TABLE(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))
#endif

#ifdef OFCCL__RED_AVX512BF16
_Static_assert(OFCCL__BF16_BLOCK == OFCCL__RED_BLOCK, "reduce_bf16.c redoes whole blocks");

/* The avx512 table with reduce_bf16.c's bf16 kernel, which rounds with
 * vcvtne2ps2bf16 and hands the blocks that instruction would round
 * differently back to bf16_*_avx512 (ofccl__bf16_redo_avx512), and all of
 * the work under DAZ. */
static void bf16_sum_avx512bf16(void *d, const void *const *s, int ns, size_t o, size_t n, double c,
                                int v)
{
    if (ofccl__bf16_avx512bf16(0, d, s, ns, o, n, c, v) != 0)
        bf16_sum_avx512(d, s, ns, o, n, c, v);
}

static void bf16_div_avx512bf16(void *d, const void *const *s, int ns, size_t o, size_t n, double c,
                                int v)
{
    if (ofccl__bf16_avx512bf16(1, d, s, ns, o, n, c, v) != 0)
        bf16_div_avx512(d, s, ns, o, n, c, v);
}

static const red_fn_t table_avx512bf16[OFCCL_DTYPE_COUNT][2] = {
    [OFCCL_F32] = {f32_sum_avx512, f32_div_avx512},
    [OFCCL_F64] = {f64_sum_avx512, f64_div_avx512},
    [OFCCL_BF16] = {bf16_sum_avx512bf16, bf16_div_avx512bf16},
    [OFCCL_F16] = {f16_sum_avx512, f16_div_avx512},
};

/* The very functions of the avx512 table, not another inlined copy of their
 * code: a copy may give other NaN payloads where two NaNs meet (clang orders
 * the operands of x * c differently in one). */
void ofccl__bf16_redo_avx512(int divide, void *dst, const void *const *srcs, int nsrc, size_t off,
                             size_t n, double c, int ndiv)
{
    table_avx512[OFCCL_BF16][divide != 0](dst, srcs, nsrc, off, n, c, ndiv);
}
#endif

/* The kernel sets, narrowest first. */
enum { ISA_BASE, ISA_AVX2, ISA_AVX512, ISA_AVX512BF16, ISA_COUNT };

static const char *const isa_names[ISA_COUNT] = {"base", "avx2", "avx512", "avx512bf16"};

/* Whether this binary has kernel set `isa` and this CPU and OS can run it
 * (__builtin_cpu_supports checks that the OS saves the vector state too).
 * Cheap: a few loads of a table libgcc / compiler-rt fill in before main. */
static int isa_usable(int isa)
{
    switch (isa) {
    case ISA_BASE:
        return 1;
#ifdef OFCCL__RED_X86
    case ISA_AVX2:
        return __builtin_cpu_supports("avx2");
    case ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#endif
#ifdef OFCCL__RED_AVX512BF16
    case ISA_AVX512BF16:
        return isa_usable(ISA_AVX512) && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bf16");
#endif
    default:
        return 0;
    }
}

static const red_fn_t (*isa_table(int isa))[2]
{
    switch (isa) {
#ifdef OFCCL__RED_X86
    case ISA_AVX2:
        return table_avx2;
    case ISA_AVX512:
        return table_avx512;
#endif
#ifdef OFCCL__RED_AVX512BF16
    case ISA_AVX512BF16:
        return table_avx512bf16;
#endif
    default:
        return table_base;
    }
}

/* The widest kernel set this CPU can run. */
static int isa_best(void)
{
    int isa = ISA_COUNT - 1;

    while (isa > ISA_BASE && !isa_usable(isa))
        isa--;
    return isa;
}

const char *ofccl__reduce_isa(void)
{
    return isa_names[isa_best()];
}

/* dst may equal a source (each block of every source is read before the dst
 * block is written) but must not partly overlap one: that would read elements
 * already overwritten. */
static int partial_overlap(const void *dst, const void *src, size_t bytes)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;

    return d != s && d < s + bytes && s < d + bytes;
}

static int reduce_with(const red_fn_t (*table)[2], ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                       const void *const *srcs, int nsrc, size_t count, int ndiv)
{
    size_t esize = ofccl_dtype_size(dtype);
    double c;

    if (esize == 0 || (unsigned)op.kind >= OFCCL_OP_COUNT || nsrc < 1 || ndiv < 0)
        return OFCCL_ERR_INVALID_ARG;
    if (table[dtype][0] == NULL) /* bytes (u8) are moved, never reduced */
        return OFCCL_ERR_NOT_SUPPORTED;
    if (count == 0)
        return 0;
    if (dst == NULL || srcs == NULL || count > SIZE_MAX / esize)
        return OFCCL_ERR_INVALID_ARG;
    for (int k = 0; k < nsrc; k++)
        if (srcs[k] == NULL || partial_overlap(dst, srcs[k], count * esize))
            return OFCCL_ERR_INVALID_ARG;

    /* SUM and AVG multiply by 1, which is exact: one loop shape for all ops. */
    c = op.kind == OFCCL_OP_PREMUL_SUM ? op.scalar : 1.0;
    table[dtype][ndiv > 0](dst, srcs, nsrc, 0, count, c, ndiv);
    return 0;
}

int ofccl__reduce(ofccl_dtype_t dtype, ofccl_redop_t op, void *dst, const void *const *srcs,
                  int nsrc, size_t count, int ndiv)
{
    return reduce_with(isa_table(isa_best()), dtype, op, dst, srcs, nsrc, count, ndiv);
}

int ofccl__reduce_on(const char *isa, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                     const void *const *srcs, int nsrc, size_t count, int ndiv)
{
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(isa, isa_names[i]) == 0)
            return isa_usable(i)
                       ? reduce_with(isa_table(i), dtype, op, dst, srcs, nsrc, count, ndiv)
                       : OFCCL_ERR_NOT_SUPPORTED;
    return OFCCL_ERR_INVALID_ARG;
}
