/*
 * Reduce-scatter on GPU memory: f32, f64, bf16 and f16; sum, average and
 * pre-multiplied sum; in place and not, the input in the pool, in registered
 * memory and in other GPU memory (staged into the pool); uneven sizes. Every
 * rank makes every rank's input itself and checks each element of its block:
 * bit for bit against ofccl's CPU reduction of the same sources in the same
 * order (docs/reductions.md), and for f32 and f64 also bit for bit against a
 * replay of that order written here, for bf16 and f16 within the documented
 * bound of a reference computed in double. Bucketed, every dtype and
 * operator: six tensors of uneven sizes, in place and not. The same
 * reduce-scatter ten times: the same bits every time. Then a
 * reduce-scatter whose operator differs on the last rank: MISMATCH on every
 * rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gtest.h"
#include "reduce.h"

static int nranks; /* the communicator's size */

/* Element i of rank r's input, as f32: a few magnitudes, both signs, exact
 * in bf16 and f16 where the dtype is 16-bit (the 16-bit inputs are made
 * from these and converted back, so the reference sees what the GPU does). */
static float value_of(int r, size_t i, unsigned salt)
{
    uint32_t h = (uint32_t)(r + 1) * 2654435761u ^ (uint32_t)i * 40503u ^ salt * 97u;
    float m = (float)((h >> 8) & 0xffff) / 65536.0f;

    h ^= h >> 13;
    return (h & 1 ? -m : m) * (float)(1 << ((h >> 1) % 6));
}

static uint16_t to_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;

    memcpy(&f, &u, 4);
    return f;
}

/* f16 of a value the generator makes (normal, |x| < 64, 16 mantissa bits at
 * most): exact after truncating to 10 mantissa bits. */
static uint16_t to_f16(float f)
{
    int ex;
    float m = frexpf(fabsf(f), &ex); /* f = m * 2^ex, m in [0.5, 1) */
    uint16_t sign = f < 0 ? 0x8000 : 0;

    if (f == 0)
        return sign;
    if (ex - 1 < -14) /* below the normal range: flush the generator's tiny value */
        return sign;
    uint32_t mant = (uint32_t)(m * 2048.0f) & 0x3ff; /* 11 bits, the leading one dropped */
    return (uint16_t)(sign | (uint16_t)((ex - 1 + 15) << 10) | (uint16_t)mant);
}

static float from_f16(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    float m = (float)(h & 0x3ff);
    float v = e == 0 ? ldexpf(m, -24) : ldexpf(1024.0f + m, e - 25);

    return h & 0x8000 ? -v : v;
}

/* Rank r's input of `n` blocks of `count` elements in dtype dt (bytes), and
 * the same values as doubles. */
static void make_input(int r, int n, size_t count, ofccl_dtype_t dt, unsigned salt, void *out,
                       double *vals)
{
    for (size_t i = 0; i < count * (size_t)n; i++) {
        float f = value_of(r, i, salt);
        double v = f;
        switch (dt) {
        case OFCCL_F32:
            ((float *)out)[i] = f;
            break;
        case OFCCL_F64:
            v = (double)f + (double)value_of(r + 7, i, salt) * 0x1p-30;
            ((double *)out)[i] = v;
            break;
        case OFCCL_BF16:
            ((uint16_t *)out)[i] = to_bf16(f);
            v = from_bf16(((uint16_t *)out)[i]);
            break;
        default:
            ((uint16_t *)out)[i] = to_f16(f);
            v = from_f16(((uint16_t *)out)[i]);
            break;
        }
        if (vals != NULL)
            vals[i] = v;
    }
}

/* The documented order replayed for f32 (own block first, then the others
 * in rank order; each step rounded). */
static float replay_f32(const float *const *src, int n, int me, size_t i, ofccl_redop_t op)
{
    float c = op.kind == OFCCL_OP_PREMUL_SUM ? (float)op.scalar : 1.0f;
    volatile float acc = src[me][i] * c;

    for (int p = 0; p < n; p++) {
        if (p == me)
            continue;
        volatile float x = src[p][i] * c;
        acc = acc + x;
    }
    return op.kind == OFCCL_OP_AVG ? acc / (float)n : acc;
}

static double replay_f64(const double *const *src, int n, int me, size_t i, ofccl_redop_t op)
{
    double c = op.kind == OFCCL_OP_PREMUL_SUM ? op.scalar : 1.0;
    volatile double acc = src[me][i] * c;

    for (int p = 0; p < n; p++) {
        if (p == me)
            continue;
        volatile double x = src[p][i] * c;
        acc = acc + x;
    }
    return op.kind == OFCCL_OP_AVG ? acc / (double)n : acc;
}

static double got_of(ofccl_dtype_t dt, const void *p, size_t i)
{
    switch (dt) {
    case OFCCL_F32:
        return ((const float *)p)[i];
    case OFCCL_F64:
        return ((const double *)p)[i];
    case OFCCL_BF16:
        return from_bf16(((const uint16_t *)p)[i]);
    default:
        return from_f16(((const uint16_t *)p)[i]);
    }
}

/* Check block `me` of the result against the CPU reduction (bits), the
 * replay (f32, f64: bits) and the double reference (16-bit: the bound).
 * Not `exact` (staged: the host's algorithm picks its own order): against
 * the double reference within the bound for every dtype. */
static int check(int me, int n, size_t count, ofccl_dtype_t dt, ofccl_redop_t op, void *const *in,
                 double *const *vals, const void *got, const char *what, int exact)
{
    size_t es = ofccl_dtype_size(dt), block = count * es;
    const void *srcs[64];
    char *cpu = malloc(block + 1);
    int k = 1, bad = 0;
    double c = op.kind == OFCCL_OP_PREMUL_SUM ? op.scalar : 1.0;
    /* direct's bound for bf16 and f16 (docs/reductions.md); the ring's and
     * hier's where the order is the host's, (n + 2) units of the dtype */
    double rel = dt == OFCCL_BF16 ? 0x1p-8 + (n + 3) * 0x1p-24 : 0x1p-11 + (n + 3) * 0x1p-24;

    if (!exact)
        rel = dt == OFCCL_BF16  ? (n + 2) * 0x1p-8
              : dt == OFCCL_F16 ? (n + 2) * 0x1p-11
              : dt == OFCCL_F32 ? (n + 2) * 0x1p-23
                                : (n + 2) * 0x1p-52;

    srcs[0] = (const char *)in[me] + (size_t)me * block;
    for (int p = 0; p < n; p++)
        if (p != me)
            srcs[k++] = (const char *)in[p] + (size_t)me * block;
    if (ofccl__reduce(dt, op, cpu, srcs, n, count, op.kind == OFCCL_OP_AVG ? n : 0) != 0) {
        free(cpu);
        return printf("rank %d: CPU reduction refused\n", me), 1;
    }
    for (size_t i = 0; i < count && !bad; i++) {
        size_t at = (size_t)me * count + i;
        const float *f[64];
        const double *d[64];
        for (int p = 0; p < n; p++) {
            f[p] = (const float *)in[p] + (size_t)me * count;
            d[p] = (const double *)in[p] + (size_t)me * count;
        }
        if (!exact) {
            double ref = 0, mag = 0, div = op.kind == OFCCL_OP_AVG ? n : 1;
            for (int p = 0; p < n; p++) {
                ref += vals[p][at] * c;
                mag += fabs(vals[p][at] * c);
            }
            if (fabs(got_of(dt, got, i) - ref / div) > rel * mag / div + 0x1p-24) {
                printf("rank %d: reduce-scatter (%s, dtype %d): element %zu is %.9g, %.9g "
                       "expected\n",
                       me, what, dt, i, got_of(dt, got, i), ref / div);
                bad = 1;
            }
        } else if (memcmp((const char *)got + i * es, cpu + i * es, es) != 0) {
            printf("rank %d: reduce-scatter (%s, dtype %d, op %d, %zu elements): element %zu is "
                   "%.9g, the CPU reduction %.9g (bits differ)\n",
                   me, what, dt, op.kind, count, i, got_of(dt, got, i), got_of(dt, cpu, i));
            bad = 1;
        } else if (dt == OFCCL_F32 && ((const float *)got)[i] != replay_f32(f, n, me, i, op)) {
            printf("rank %d: reduce-scatter (%s, f32): element %zu is %.9g, the replay %.9g\n", me,
                   what, i, ((const float *)got)[i], replay_f32(f, n, me, i, op));
            bad = 1;
        } else if (dt == OFCCL_F64 && ((const double *)got)[i] != replay_f64(d, n, me, i, op)) {
            printf("rank %d: reduce-scatter (%s, f64): element %zu is %.17g, the replay %.17g\n",
                   me, what, i, ((const double *)got)[i], replay_f64(d, n, me, i, op));
            bad = 1;
        } else if (dt == OFCCL_BF16 || dt == OFCCL_F16) {
            double ref = 0, mag = 0, div = op.kind == OFCCL_OP_AVG ? n : 1;
            for (int p = 0; p < n; p++) {
                ref += vals[p][at] * c;
                mag += fabs(vals[p][at] * c);
            }
            ref /= div;
            mag /= div;
            if (fabs(got_of(dt, got, i) - ref) > rel * mag + 0x1p-24) {
                printf("rank %d: reduce-scatter (%s, dtype %d): element %zu is %.9g, %.9g "
                       "expected (bound %.3g)\n",
                       me, what, dt, i, got_of(dt, got, i), ref, rel * mag);
                bad = 1;
            }
        }
    }
    free(cpu);
    return bad;
}

/* One reduce-scatter. where: 0 pool in place, 1 pool, 2 other GPU memory,
 * 3 registered memory, 4 other GPU memory in place. 0 when every element is
 * right. */
int gpu_rs_check(int me, ofccl_comm_t *comm, size_t count, int where, ofccl_dtype_t dt,
                 ofccl_redop_t op, unsigned salt, int exact)
{
    static const char *const label[] = {"pool, in place", "pool", "other GPU memory",
                                        "registered memory", "other GPU memory, in place"};
    int n, bad = 0, rc;
    size_t es, block, total;
    void *in[64], *dbuf = NULL, *dout = NULL, *got;
    double *vals[64];
    ofccl_req_t *req;

    if (ofccl_comm_size(comm, &nranks) != 0 || nranks > 64)
        return 1;
    n = nranks;
    es = ofccl_dtype_size(dt);
    block = count * es;
    total = block * (size_t)n;
    got = malloc(block + 1);

    for (int p = 0; p < n; p++) {
        in[p] = malloc(total + 1);
        vals[p] = malloc((total / es + 1) * sizeof(double));
        make_input(p, n, count, dt, salt, in[p], vals[p]);
    }
    if (where < 2)
        rc = ofccl_gpu_buffer_alloc(comm, total, &dbuf);
    else
        rc = (dbuf = dmalloc(total)) == NULL;
    if (rc == 0 && where == 3)
        rc = ofccl_gpu_register(comm, dbuf, total ? total : 1);
    if (rc != 0) {
        printf("rank %d: input buffer (%s): %s\n", me, label[where], ofccl_comm_last_error(comm));
        return 1;
    }
    dout = where == 0 || where == 4 ? (char *)dbuf + (size_t)me * block : dmalloc(block);
    put(dbuf, in[me], total);
    memset(got, 0xee, block);
    if (where != 0 && where != 4)
        put(dout, got, block);
    rc = ofccl_reduce_scatter(comm, dbuf, dout, count, dt, op, &req);
    if (rc == 0 && (rc = ofccl_wait(req)) == 0)
        ofccl_req_free(req);
    if (rc != 0) {
        printf("rank %d: reduce-scatter (%s): %s: %s\n", me, label[where], ofccl_strerror(rc),
               ofccl_comm_last_error(comm));
        bad = 1;
    } else {
        get(got, dout, block);
        bad = check(me, n, count, dt, op, in, vals, got, label[where], exact);
    }
    if (where == 3)
        ofccl_gpu_deregister(comm, dbuf);
    if (where < 2)
        ofccl_gpu_buffer_free(comm, dbuf);
    else
        ofccl__gpu_mem_free(gpu, dev, dbuf);
    if (where != 0 && where != 4)
        ofccl__gpu_mem_free(gpu, dev, dout);
    for (int p = 0; p < n; p++) {
        free(in[p]);
        free(vals[p]);
    }
    free(got);
    return bad;
}

/* A bucketed reduce-scatter of six tensors of uneven sizes (empty, fewer
 * elements than ranks, not a multiple of them, a megabyte), every other
 * shard in place: each rank's shard of each tensor checked bit for bit
 * against the CPU reduction of the same slices in the same order. */
#define NT 6
static int rs_bucket(int me, ofccl_comm_t *comm, ofccl_dtype_t dt, ofccl_redop_t op, unsigned salt)
{
    static const size_t counts[NT] = {0, 1, 3, 4099, 1 << 18, 77};
    size_t es = ofccl_dtype_size(dt);
    ofccl_tensor_t t[NT];
    void *own[NT] = {0}, *in[64];
    ofccl_req_t *req = NULL;
    int n = nranks, bad = 0, rc;

    for (int k = 0; k < NT; k++) {
        size_t c = (counts[k] + (size_t)n - 1) / (size_t)n, s0 = (size_t)me * c;
        size_t len = s0 >= counts[k] ? 0 : counts[k] - s0 < c ? counts[k] - s0 : c;
        void *h = malloc(counts[k] * es + 1);
        make_input(me, 1, counts[k], dt, salt + (unsigned)k * 31, h, NULL);
        t[k].count = counts[k];
        t[k].full = dmalloc(counts[k] * es);
        put(t[k].full, h, counts[k] * es);
        t[k].shard = k % 2 ? (char *)t[k].full + s0 * es : (own[k] = dmalloc(len * es));
        free(h);
    }
    rc = ofccl_bucket_reduce_scatter(comm, t, NT, dt, op, &req);
    if (rc == 0 && (rc = ofccl_wait(req)) == 0)
        ofccl_req_free(req);
    if (rc != 0) {
        printf("rank %d: bucketed reduce-scatter: %s: %s\n", me, ofccl_strerror(rc),
               ofccl_comm_last_error(comm));
        bad = 1;
    }
    for (int k = 0; k < NT; k++) {
        size_t c = (counts[k] + (size_t)n - 1) / (size_t)n, s0 = (size_t)me * c;
        size_t len = s0 >= counts[k] ? 0 : counts[k] - s0 < c ? counts[k] - s0 : c;
        char *got = malloc(len * es + 1), *cpu = malloc(len * es + 1);
        const void *srcs[64];
        int j = 1;
        for (int p = 0; p < n; p++) {
            in[p] = malloc(counts[k] * es + 1);
            make_input(p, 1, counts[k], dt, salt + (unsigned)k * 31, in[p], NULL);
        }
        srcs[0] = (char *)in[me] + s0 * es;
        for (int p = 0; p < n; p++)
            if (p != me)
                srcs[j++] = (char *)in[p] + s0 * es;
        if (!bad && len > 0) {
            get((uint8_t *)got, t[k].shard, len * es);
            ofccl__reduce(dt, op, cpu, srcs, n, len, op.kind == OFCCL_OP_AVG ? n : 0);
            for (size_t i = 0; i < len && !bad; i++)
                if (memcmp(got + i * es, cpu + i * es, es) != 0) {
                    printf("rank %d: bucketed reduce-scatter (dtype %d, op %d): tensor %d "
                           "element %zu of the shard is %.9g, the CPU reduction %.9g\n",
                           me, dt, op.kind, k, i, got_of(dt, got, i), got_of(dt, cpu, i));
                    bad = 1;
                }
        }
        for (int p = 0; p < n; p++)
            free(in[p]);
        free(got);
        free(cpu);
        ofccl__gpu_mem_free(gpu, dev, t[k].full);
        if (own[k] != NULL)
            ofccl__gpu_mem_free(gpu, dev, own[k]);
    }
    return bad;
}

/* Determinism: the same reduce-scatter ten times (bf16 and f32, sum,
 * 1 Mi elements per rank, from the pool), every run's bits those of the
 * first. */
static int rs_repeat(int me, ofccl_comm_t *comm, ofccl_dtype_t dt)
{
    size_t count = 1 << 20, es = ofccl_dtype_size(dt), block = count * es;
    size_t total = block * (size_t)nranks;
    char *h = malloc(total + 1), *first = malloc(block + 1), *got = malloc(block + 1);
    void *in = NULL, *out = dmalloc(block);
    int bad = 0;

    if (ofccl_gpu_buffer_alloc(comm, total, &in) != 0)
        return 1;
    make_input(me, nranks, count, dt, 777, h, NULL);
    put(in, (uint8_t *)h, total);
    for (int run = 0; run < 10 && !bad; run++) {
        ofccl_req_t *req;
        int rc =
            ofccl_reduce_scatter(comm, in, out, count, dt, (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req);
        if (rc == 0 && (rc = ofccl_wait(req)) == 0)
            ofccl_req_free(req);
        get((uint8_t *)(run ? got : first), out, block);
        if (rc != 0 || (run && memcmp(got, first, block) != 0)) {
            printf("rank %d: reduce-scatter run %d (dtype %d): %s\n", me, run, dt,
                   rc ? ofccl_comm_last_error(comm) : "other bits than run 0");
            bad = 1;
        }
    }
    ofccl_gpu_buffer_free(comm, in);
    ofccl__gpu_mem_free(gpu, dev, out);
    free(h);
    free(first);
    free(got);
    return bad;
}

int gpu_reduce_scatter(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    static const size_t counts[] = {0, 1, 7, 1000, 4097, 65536, 300001};
    static const ofccl_dtype_t dts[] = {OFCCL_F32, OFCCL_F64, OFCCL_BF16, OFCCL_F16};
    const ofccl_redop_t ops[] = {{OFCCL_OP_SUM, 1}, {OFCCL_OP_AVG, 1}, {OFCCL_OP_PREMUL_SUM, 0.3}};
    unsigned salt = 1;
    int bad = 0;

    (void)ctx;
    if (gpu_up(rank) || ofccl_comm_size(comm, &nranks) != 0 || nranks > 64)
        return 70;
    ofccl_comm_set_timeout(comm, 20000);
    for (int where = 0; where < 4; where++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(*counts); c++)
            for (int d = 0; d < 4; d++)
                for (int o = 0; o < 3; o++)
                    if (where == 1 || (o == 2 && (d == 0 || d == 2)) || c == 4)
                        bad |=
                            gpu_rs_check(rank, comm, counts[c], where, dts[d], ops[o], salt++, 1);
    for (int d = 0; d < 4 && !bad; d++)
        for (int o = 0; o < 3 && !bad; o++)
            bad |= rs_bucket(rank, comm, dts[d], ops[o], salt++);
    bad |= !bad && (rs_repeat(rank, comm, OFCCL_BF16) || rs_repeat(rank, comm, OFCCL_F32));
    if (bad)
        return 60;
    /* The last rank averages, the others sum: MISMATCH everywhere, naming
     * the reduction; then the communicator is unusable but destroys cleanly. */
    {
        ofccl_redop_t op = {rank == nranks - 1 ? OFCCL_OP_AVG : OFCCL_OP_SUM, 1};
        ofccl_req_t *req;
        void *buf;
        int rc;
        if (ofccl_gpu_buffer_alloc(comm, 4096 * (size_t)nranks, &buf) != 0)
            return 61;
        rc = ofccl_reduce_scatter(comm, buf, (char *)buf + (size_t)rank * 4096, 1024, OFCCL_F32, op,
                                  &req);
        if (rc == 0)
            rc = ofccl_wait(req);
        printf("rank %d: GPU reduce-scatter with an operator that differs: %s: %s\n", rank,
               ofccl_strerror(rc), ofccl_comm_last_error(comm));
        if (rc == 0)
            ofccl_req_free(req);
        if (rc != OFCCL_ERR_MISMATCH)
            return 62;
    }
    return 0;
}
