/*
 * Multi-rank collectives: all-gather and reduce-scatter (flat and bucketed) for
 * f32, f64, bf16, f16 (and u8 bytes for all-gather) and sum, avg, premul, on random shapes from a
 * seeded generator, with poisoned outputs, checked element by element against a reference computed
 * independently in double precision on every rank. Provider, strict mode, signal path and algorithm
 * come from OFCCL_* variables. Usage: test_coll [seed] [rounds]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "elements.h"
#include "util.h"
#include "world.h"

static unsigned seed = 1, rounds = 3;

/* ---- a generator every rank runs identically ---- */
static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static void rng_seed(unsigned s, unsigned salt)
{
    rng_state = 0x9E3779B97F4A7C15ull ^ ((uint64_t)s << 20) ^ salt;
    for (int k = 0; k < 4; k++)
        rng();
}

/* ---- element encoding, written independently of the library ---- */
static const size_t esz[] = {4, 8, 2, 2, 1};

/* Inputs are multiples of 1/8 in [-32, 32): exact in every dtype, so the only
 * rounding the check has to allow for is the library's. */
static double input(int r, size_t blockidx, size_t j, unsigned salt)
{
    uint64_t h = (uint64_t)r * 0x9E3779B1u ^ blockidx * 0x85EBCA77u ^ j * 0xC2B2AE3Du ^ salt;
    h ^= h >> 15;
    h *= 0x2C1B3C6Dull;
    h ^= h >> 12;
    return (double)((int)(h % 512) - 256) / 8.0;
}

/* What load() reads back after store(): v itself, except for bytes. */
static double as_stored(ofccl_dtype_t dt, double v)
{
    return dt == OFCCL_U8 ? (double)((int)(v * 8) & 0xff) : v;
}

/* Allowed error relative to the sum of |terms|: one final rounding to the
 * dtype, plus, for the ring, one rounding per hop of the partial sums. */
static double tolerance(ofccl_dtype_t dt)
{
    static const double unit[] = {0x1p-23, 0x1p-52, 0x1p-8, 0x1p-11};
    return unit[dt] * (2.0 + size);
}

enum mem_kind { MEM_PLAIN, MEM_POOL, MEM_REGISTERED, MEM_KINDS };
static const char *const mem_names[] = {"plain", "pool", "registered"};

typedef struct buf {
    void *p;
    size_t bytes;
    int kind;
    ofccl_mem_t *mh;
} buf_t;

static int buf_get(buf_t *b, size_t bytes, int kind)
{
    b->bytes = bytes ? bytes : 1;
    b->kind = kind;
    b->mh = NULL;
    if (kind == MEM_POOL)
        return ofccl_buffer_alloc(comm, b->bytes, &b->p);
    b->p = malloc(b->bytes);
    if (b->p == NULL)
        return OFCCL_ERR_NO_MEMORY;
    if (kind == MEM_REGISTERED)
        return ofccl_mem_register(ctx, b->p, b->bytes, &b->mh);
    return 0;
}

static void buf_put(buf_t *b)
{
    if (b->kind == MEM_POOL) {
        CU_ASSERT_EQUAL(ofccl_buffer_free(comm, b->p), 0);
        return;
    }
    if (b->mh)
        CU_ASSERT_EQUAL(ofccl_mem_deregister(b->mh), 0);
    free(b->p);
}

static int wait_ok(ofccl_req_t *req, const char *what)
{
    int rc = ofccl_wait(req);
    if (rc)
        fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, ofccl_strerror(rc),
                ofccl_comm_last_error(comm));
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    return rc;
}

/* ---- all-gather ---- */
static void run_allgather(ofccl_dtype_t dt, size_t count, int kind, int in_place, unsigned salt)
{
    size_t es = esz[dt], wrong = 0;
    buf_t sb, rb;
    ofccl_req_t *req = NULL;
    const void *send;

    CU_ASSERT_EQUAL_FATAL(buf_get(&rb, count * es * (size_t)size, kind), 0);
    CU_ASSERT_EQUAL_FATAL(buf_get(&sb, count * es, kind), 0);
    memset(rb.p, 0xA5, rb.bytes); /* poison */
    send = in_place ? (char *)rb.p + (size_t)rank * count * es : sb.p;
    for (size_t j = 0; j < count; j++)
        store(dt, (void *)send, j, input(rank, 0, j, salt));
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, send, rb.p, count, dt, &req), 0);
    CU_ASSERT_EQUAL_FATAL(wait_ok(req, "allgather"), 0);
    for (int r = 0; r < size; r++)
        for (size_t j = 0; j < count; j++)
            wrong += load(dt, rb.p, (size_t)r * count + j) != as_stored(dt, input(r, 0, j, salt));
    if (wrong)
        fprintf(stderr, "rank %d: allgather dt %d count %zu %s%s: %zu wrong\n", rank, dt, count,
                mem_names[kind], in_place ? " in place" : "", wrong);
    CU_ASSERT_EQUAL(wrong, 0);
    buf_put(&sb);
    buf_put(&rb);
}

/* ---- reduce-scatter ---- */
static double reference(ofccl_redop_t op, size_t j, unsigned salt, double *mag)
{
    double s = 0, m = 0;
    for (int r = 0; r < size; r++) {
        double v = input(r, (size_t)rank, j, salt);
        if (op.kind == OFCCL_OP_PREMUL_SUM)
            v *= op.scalar;
        s += v;
        m += fabs(v);
    }
    *mag = m;
    return op.kind == OFCCL_OP_AVG ? s / size : s;
}

static void run_reduce_scatter(ofccl_dtype_t dt, ofccl_redop_t op, size_t count, int kind,
                               int in_place, unsigned salt)
{
    size_t es = esz[dt], wrong = 0;
    buf_t sb, rb;
    ofccl_req_t *req = NULL;
    void *recv;
    double worst = 0;

    CU_ASSERT_EQUAL_FATAL(buf_get(&sb, count * es * (size_t)size, kind), 0);
    CU_ASSERT_EQUAL_FATAL(buf_get(&rb, count * es, kind), 0);
    for (int b = 0; b < size; b++)
        for (size_t j = 0; j < count; j++)
            store(dt, sb.p, (size_t)b * count + j, input(rank, (size_t)b, j, salt));
    recv = in_place ? (char *)sb.p + (size_t)rank * count * es : rb.p;
    if (!in_place)
        memset(recv, 0xA5, count * es);
    CU_ASSERT_EQUAL_FATAL(ofccl_reduce_scatter(comm, sb.p, recv, count, dt, op, &req), 0);
    CU_ASSERT_EQUAL_FATAL(wait_ok(req, "reduce_scatter"), 0);
    for (size_t j = 0; j < count; j++) {
        double mag, ref = reference(op, j, salt, &mag), got = load(dt, recv, j);
        double err = fabs(got - ref), lim = tolerance(dt) * mag + 1e-300;
        if (!(err <= lim)) {
            if (wrong < 3)
                fprintf(stderr, "rank %d: rs dt %d op %d count %zu [%zu]: got %.9g want %.9g\n",
                        rank, dt, op.kind, count, j, got, ref);
            wrong++;
        }
        if (err > worst)
            worst = err;
    }
    CU_ASSERT_EQUAL(wrong, 0);
    buf_put(&sb);
    buf_put(&rb);
}

static size_t random_count(void)
{
    static const size_t edge[] = {0, 1, 3, 63, 64, 65, 1023};
    uint64_t x = rng();
    return x % 4 == 0 ? edge[(x >> 8) % 7] : (size_t)(x >> 12) % 20000 + 1;
}

static void test_allgather(void)
{
    for (unsigned it = 0; it < rounds; it++) {
        rng_seed(seed, it);
        for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
            run_allgather((ofccl_dtype_t)dt, random_count(), (int)(rng() % MEM_KINDS),
                          (int)(rng() % 3 == 0), it * 7 + (unsigned)dt);
    }
}

static void test_reduce_scatter(void)
{
    const ofccl_redop_t ops[] = {{OFCCL_OP_SUM, 1},
                                 {OFCCL_OP_AVG, 1},
                                 {OFCCL_OP_PREMUL_SUM, 0.25},
                                 {OFCCL_OP_PREMUL_SUM, -3.0}};
    for (unsigned it = 0; it < rounds; it++) {
        rng_seed(seed, 100 + it);
        for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
            for (size_t o = 0; o < 4 && dt != OFCCL_U8; o++)
                run_reduce_scatter((ofccl_dtype_t)dt, ops[o], random_count(),
                                   (int)(rng() % MEM_KINDS), (int)(rng() % 3 == 0),
                                   it * 31 + (unsigned)dt * 4 + (unsigned)o);
    }
}

/* A chunk size much smaller than the data makes every request pipeline. */
static void test_large(void)
{
    run_allgather(OFCCL_F32, (3u << 20) / 4 + 5, MEM_POOL, 0, 77);
    run_reduce_scatter(OFCCL_BF16, (ofccl_redop_t){OFCCL_OP_SUM, 1}, (1u << 20) + 3, MEM_PLAIN, 0,
                       78);
}

/* ---- buckets ---- */
static size_t shard_of(size_t count, int r, size_t *first)
{
    size_t c = (count + (size_t)size - 1) / (size_t)size;
    *first = (size_t)r * c < count ? (size_t)r * c : count;
    return count - *first < c ? count - *first : c;
}

static void test_buckets(void)
{
    for (unsigned it = 0; it < rounds; it++) {
        ofccl_tensor_t t[8];
        int n;
        size_t wrong = 0;
        ofccl_req_t *req = NULL;
        ofccl_dtype_t dt;

        rng_seed(seed, 500 + it);
        n = (int)(rng() % 8) + 1;
        dt = (ofccl_dtype_t)(rng() % OFCCL_DTYPE_COUNT);
        for (int k = 0; k < n; k++) {
            size_t first, len;
            t[k].count = rng() % 5 == 0 ? (size_t)(rng() % 4) : (size_t)(rng() % 3000);
            len = shard_of(t[k].count, rank, &first);
            t[k].full = malloc(t[k].count * esz[dt] + 1);
            t[k].shard = malloc(len * esz[dt] + 1);
            memset(t[k].full, 0xA5, t[k].count * esz[dt]);
            for (size_t j = 0; j < len; j++)
                store(dt, t[k].shard, j, input(rank, (size_t)k, first + j, it));
        }
        CU_ASSERT_EQUAL_FATAL(ofccl_bucket_allgather(comm, t, n, dt, &req), 0);
        CU_ASSERT_EQUAL_FATAL(wait_ok(req, "bucket allgather"), 0);
        for (int k = 0; k < n; k++)
            for (int r = 0; r < size; r++) {
                size_t first, len = shard_of(t[k].count, r, &first);
                for (size_t j = 0; j < len; j++)
                    wrong += load(dt, t[k].full, first + j) !=
                             as_stored(dt, input(r, (size_t)k, first + j, it));
            }
        CU_ASSERT_EQUAL(wrong, 0);

        /* The twin: every rank's full tensors reduced into each rank's shards. */
        for (int k = 0; k < n; k++) {
            size_t first, len = shard_of(t[k].count, rank, &first);
            for (size_t j = 0; j < t[k].count; j++)
                store(dt, t[k].full, j, input(rank, 1000 + (size_t)k, j, it));
            memset(t[k].shard, 0xA5, len * esz[dt]);
        }
        if (dt == OFCCL_U8) { /* bytes are never reduced; the communicator stays usable */
            CU_ASSERT_EQUAL(
                ofccl_bucket_reduce_scatter(comm, t, n, dt, (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req),
                OFCCL_ERR_NOT_SUPPORTED);
            CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "u8"));
            for (int k = 0; k < n; k++) {
                free(t[k].full);
                free(t[k].shard);
            }
            continue;
        }
        CU_ASSERT_EQUAL_FATAL(
            ofccl_bucket_reduce_scatter(comm, t, n, dt, (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req), 0);
        CU_ASSERT_EQUAL_FATAL(wait_ok(req, "bucket reduce_scatter"), 0);
        for (int k = 0; k < n; k++) {
            size_t first, len = shard_of(t[k].count, rank, &first);
            for (size_t j = 0; j < len; j++) {
                double ref = 0, mag = 0;
                for (int r = 0; r < size; r++) {
                    double v = input(r, 1000 + (size_t)k, first + j, it);
                    ref += v;
                    mag += fabs(v);
                }
                wrong += !(fabs(load(dt, t[k].shard, j) - ref) <= tolerance(dt) * mag);
            }
            free(t[k].full);
            free(t[k].shard);
        }
        CU_ASSERT_EQUAL(wrong, 0);
    }
}

/* FSDP overlaps the next layer's all-gather with the previous reduce-scatter:
 * AG(k+1) is posted while RS(k) and AG(k) are outstanding, and they are waited
 * for in another order than posted. Staged buffers, so the default depths
 * (2 all-gathers, 1 reduce-scatter) are what bounds the overlap. */
static void test_outstanding(void)
{
    enum { K = 4 };
    size_t count = 4099, wrong = 0;
    float *ag_in[K + 1], *ag_out[K + 1], *rs_in[K], *rs_out[K];
    ofccl_req_t *ag[K + 1], *rs[K];

    for (int k = 0; k <= K; k++) {
        ag_in[k] = malloc(count * 4);
        ag_out[k] = malloc(count * 4 * (size_t)size);
        for (size_t j = 0; j < count; j++)
            ag_in[k][j] = (float)input(rank, (size_t)k, j, 9);
        if (k == K)
            break;
        rs_in[k] = malloc(count * 4 * (size_t)size);
        rs_out[k] = malloc(count * 4);
        for (size_t j = 0; j < count * (size_t)size; j++)
            rs_in[k][j] = (float)input(rank, (size_t)k + 10, j, 9);
    }
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, ag_in[0], ag_out[0], count, OFCCL_F32, &ag[0]), 0);
    for (int k = 0; k < K; k++) {
        CU_ASSERT_EQUAL_FATAL(ofccl_reduce_scatter(comm, rs_in[k], rs_out[k], count, OFCCL_F32,
                                                   (ofccl_redop_t){OFCCL_OP_SUM, 1}, &rs[k]),
                              0);
        CU_ASSERT_EQUAL_FATAL(
            ofccl_allgather(comm, ag_in[k + 1], ag_out[k + 1], count, OFCCL_F32, &ag[k + 1]), 0);
        CU_ASSERT_EQUAL(wait_ok(rs[k], "outstanding rs"), 0);
        CU_ASSERT_EQUAL(wait_ok(ag[k], "outstanding ag"), 0);
    }
    CU_ASSERT_EQUAL(wait_ok(ag[K], "outstanding ag"), 0);
    for (int k = 0; k <= K; k++) {
        for (int r = 0; r < size; r++)
            for (size_t j = 0; j < count; j++)
                wrong += ag_out[k][(size_t)r * count + j] != (float)input(r, (size_t)k, j, 9);
        free(ag_in[k]);
        free(ag_out[k]);
        if (k == K)
            break;
        for (size_t j = 0; j < count; j++) {
            double ref = 0;
            for (int r = 0; r < size; r++)
                ref += input(r, (size_t)k + 10, (size_t)rank * count + j, 9);
            wrong += fabs(rs_out[k][j] - ref) > 1e-4;
        }
        free(rs_in[k]);
        free(rs_out[k]);
    }
    CU_ASSERT_EQUAL(wrong, 0);
}

static void test_registration_cache(void)
{
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    size_t count = 10000;
    float *in = malloc(count * 4), *out = malloc(count * 4 * (size_t)size);
    ofccl_mem_t *m1, *m2, *m3;
    ofccl_req_t *req;

    for (size_t j = 0; j < count; j++)
        in[j] = (float)rank;
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, out, count * 4 * (size_t)size, &m1), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, in, count * 4, &m3), 0);
    /* First collective registers on this communicator; later ones hit the cache. */
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, count, OFCCL_F32, &req), 0);
    CU_ASSERT_EQUAL_FATAL(wait_ok(req, "registered"), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &before), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, out, count * 4 * (size_t)size, &m2), 0);
    CU_ASSERT_PTR_EQUAL(m1, m2);
    for (int i = 0; i < 5; i++) {
        memset(out, 0, count * 4 * (size_t)size);
        CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, count, OFCCL_F32, &req), 0);
        CU_ASSERT_EQUAL_FATAL(wait_ok(req, "registered"), 0);
        for (int r = 0; r < size; r++)
            CU_ASSERT_EQUAL(out[(size_t)r * count + count - 1], (float)r);
    }
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &after), 0);
    CU_ASSERT_EQUAL(after.registrations, before.registrations); /* no new registration */
    CU_ASSERT_TRUE(after.reg_cache_hits > before.reg_cache_hits);
    /* Zero-copy: only our own block is copied into place, nothing is staged. */
    CU_ASSERT_EQUAL(after.staged_bytes, before.staged_bytes);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(m2), 0);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(m1), 0);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(m3), 0);
    free(in);
    free(out);
}

static void test_bad_arguments(void)
{
    float a[64] = {0}, b[64 * 64] = {0};
    ofccl_req_t *req = NULL;

    CU_ASSERT_EQUAL(ofccl_allgather(comm, a, b, 4, (ofccl_dtype_t)9, &req), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "dtype"));
    CU_ASSERT_EQUAL(ofccl_reduce_scatter(comm, b, a, 4, OFCCL_F32, (ofccl_redop_t){7, 1}, &req),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "op"));
    CU_ASSERT_EQUAL(ofccl_reduce_scatter(comm, b, a, 4, OFCCL_F32,
                                         (ofccl_redop_t){OFCCL_OP_PREMUL_SUM, NAN}, &req),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_allgather(comm, NULL, b, 4, OFCCL_F32, &req), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_allgather(comm, a, b, 4, OFCCL_F32, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_allgather(comm, a, b, SIZE_MAX / 2, OFCCL_F32, &req),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "overflow"));
    if (size > 1) {
        /* Overlapping but not in place. */
        CU_ASSERT_EQUAL(ofccl_allgather(comm, b + 1 + (size_t)rank * 4, b, 4, OFCCL_F32, &req),
                        OFCCL_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "overlaps"));
    }
    {
        /* Too small, where ofccl can know it: a 64-byte pool buffer as the output. */
        void *small = NULL;
        CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, 64, &small), 0);
        CU_ASSERT_EQUAL(ofccl_allgather(comm, a, small, 16, OFCCL_F32, &req),
                        size > 1 ? OFCCL_ERR_INVALID_ARG : 0);
        if (size > 1) {
            CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "too small"));
        } else {
            CU_ASSERT_EQUAL(wait_ok(req, "small"), 0);
        }
        CU_ASSERT_EQUAL(ofccl_buffer_free(comm, small), 0);
    }
    CU_ASSERT_EQUAL(ofccl_test(NULL, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, a), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 0, (void **)&req), OFCCL_ERR_INVALID_ARG);
    /* The communicator is still usable after all of these. */
    run_allgather(OFCCL_F32, 33, MEM_PLAIN, 0, 5);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"all-gather, every dtype, random shapes", test_allgather},
        {"reduce-scatter, every dtype and op, random shapes", test_reduce_scatter},
        {"large, pipelined", test_large},
        {"buckets of uneven tensors", test_buckets},
        {"outstanding requests completed out of order", test_outstanding},
        {"registration cache and zero-copy", test_registration_cache},
        {"bad arguments, communicator stays usable", test_bad_arguments},
        {NULL, NULL},
    };
    int rc;

    if (argc > 1)
        seed = (unsigned)strtoul(argv[1], NULL, 0);
    if (argc > 2)
        rounds = (unsigned)strtoul(argv[2], NULL, 0);
    if (world_open(NULL) != 0)
        return 1;
    if (rank == 0)
        printf("coll: %d ranks, %s, signals %s, seed %u\n", size, ofccl_ctx_provider(ctx),
               comm->signal_mode == OFCCL__SIGNAL_CQDATA ? "cqdata" : "atomic", seed);
    rc = cu_run("coll", tests);
    if (world_close(true) != 0)
        rc = 1;
    return rc;
}
