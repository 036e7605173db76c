/*
 * The collectives at one rank (test_one_rank.c runs them): all-gather as a
 * copy, reduce-scatter as the op applied to the one input, and buckets of
 * uneven tensors, for every dtype, op and memory kind, checked element by
 * element, bit for bit, against values encoded here without the library.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "elements.h"
#include "one_rank.h"

/* ---- elements, encoded without the library ---- */
const size_t esz[OFCCL_DTYPE_COUNT] = {4, 8, 2, 2, 1};
static const char *const dt_names[] = {"f32", "f64", "bf16", "f16", "u8"};

/* Inputs: multiples of 1/8 in [-32, 32), exact in every dtype. */
static double input(size_t i, unsigned salt)
{
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ salt * 0xC2B2AE3Dull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (double)((int)(h % 512) - 256) / 8.0;
}

/* What reducing the one input x gives (docs/reductions.md, n = 1, d = 1). */
static double expect_rs(ofccl_dtype_t dt, ofccl_redop_t op, double x)
{
    double r;

    if (dt == OFCCL_F64)
        return op.kind == OFCCL_OP_PREMUL_SUM ? x * op.scalar : x;
    r = op.kind == OFCCL_OP_PREMUL_SUM ? (double)((float)x * (float)op.scalar) : x;
    if (dt == OFCCL_F32)
        return (float)r;
    {
        char one[8];
        store(dt, one, 0, r); /* the final rounding to the 16-bit dtype */
        return load(dt, one, 0);
    }
}

/* Compare n elements against want(i); report the first mismatch. */
static bool check(const char *what, ofccl_dtype_t dt, const void *buf, size_t n,
                  double (*want)(size_t i, const void *arg), const void *arg)
{
    for (size_t i = 0; i < n; i++) {
        double got = load(dt, buf, i), w = want(i, arg);
        if (isnan(got) && isnan(w)) /* 0 * inf: which NaN is not specified */
            continue;
        if (!(got == w) || signbit(got) != signbit(w)) {
            fprintf(stderr, "\n  %s (%s, %s): element %zu of %zu is %.17g, expected %.17g\n", what,
                    dt_names[dt], provider, i, n, got, w);
            return false;
        }
    }
    return true;
}

/* ---- memory of three kinds ---- */
enum { MEM_PLAIN, MEM_POOL, MEM_REG, MEM_KINDS };
static const char *const mem_names[] = {"user memory", "pool buffer", "registered memory"};

typedef struct mem {
    void *p;
    int kind;
    ofccl_mem_t *mh;
} mem_t;

static void *mem_get(mem_t *m, size_t bytes, int kind)
{
    m->kind = kind;
    m->mh = NULL;
    m->p = NULL;
    bytes = bytes ? bytes : 8;
    if (kind == MEM_POOL) {
        CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, bytes, &m->p), 0);
        return m->p;
    }
    m->p = malloc(bytes);
    CU_ASSERT_FATAL(m->p != NULL);
    if (kind == MEM_REG)
        CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, m->p, bytes, &m->mh), 0);
    return m->p;
}

static void mem_put(mem_t *m)
{
    if (m->kind == MEM_POOL) {
        CU_ASSERT_EQUAL(ofccl_buffer_free(comm, m->p), 0);
        return;
    }
    if (m->kind == MEM_REG)
        CU_ASSERT_EQUAL(ofccl_mem_deregister(m->mh), 0);
    free(m->p);
}

typedef struct exp_arg {
    ofccl_dtype_t dt;
    ofccl_redop_t op;
    unsigned salt;
    size_t base; /* index of the first element in the tensor */
} exp_arg_t;

static double want_copy(size_t i, const void *arg)
{
    const exp_arg_t *a = arg;
    char one[8];

    store(a->dt, one, 0, input(a->base + i, a->salt)); /* exact, but for bytes */
    return load(a->dt, one, 0);
}

static double want_rs(size_t i, const void *arg)
{
    const exp_arg_t *a = arg;
    return expect_rs(a->dt, a->op, input(a->base + i, a->salt));
}

void test_allgather(void)
{
    unsigned salt = 1;

    for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
        for (int mk = 0; mk < MEM_KINDS; mk++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                for (int inplace = 0; inplace < 2; inplace++, salt++) {
                    size_t n = counts[k], bytes = n * esz[dt];
                    exp_arg_t a = {(ofccl_dtype_t)dt, {OFCCL_OP_SUM, 1}, salt, 0};
                    mem_t rm, sm;
                    char *recv = mem_get(&rm, bytes, mk), *send;
                    ofccl_req_t *req = NULL;
                    char what[96];

                    send = inplace ? recv : mem_get(&sm, bytes, mk);
                    memset(recv, 0xff, bytes ? bytes : 1); /* NaN in every dtype */
                    for (size_t i = 0; i < n; i++)
                        store(dt, send, i, input(i, salt));
                    CU_ASSERT_EQUAL(ofccl_allgather(comm, send, recv, n, dt, &req), 0);
                    CU_ASSERT_EQUAL_FATAL(finish(req), 0);
                    snprintf(what, sizeof(what), "all-gather of %zu, %s, %s", n, mem_names[mk],
                             inplace ? "in place" : "out of place");
                    CU_ASSERT(check(what, dt, recv, n, want_copy, &a));
                    if (!inplace) /* the source is untouched */
                        CU_ASSERT(check(what, dt, send, n, want_copy, &a));
                    if (!inplace)
                        mem_put(&sm);
                    mem_put(&rm);
                }
}

static const ofccl_redop_t ops[] = {
    {OFCCL_OP_SUM, 0},          {OFCCL_OP_AVG, 0},
    {OFCCL_OP_PREMUL_SUM, 0.5}, {OFCCL_OP_PREMUL_SUM, -3},
    {OFCCL_OP_PREMUL_SUM, 0.1}, {OFCCL_OP_PREMUL_SUM, 1e-3},
    {OFCCL_OP_PREMUL_SUM, 0},   {OFCCL_OP_PREMUL_SUM, 1e300}, /* inf in f32 types */
};

void test_reduce_scatter(void)
{
    unsigned salt = 1000;

    for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]) && dt != OFCCL_U8; o++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                for (int inplace = 0; inplace < 2; inplace++, salt++) {
                    int mk = (int)(salt % MEM_KINDS);
                    size_t n = counts[k], bytes = n * esz[dt];
                    exp_arg_t a = {(ofccl_dtype_t)dt, ops[o], salt, 0};
                    mem_t rm, sm;
                    char *send = mem_get(&sm, bytes, mk), *recv;
                    ofccl_req_t *req = NULL;
                    char what[128];

                    recv = inplace ? send : mem_get(&rm, bytes, mk);
                    if (!inplace)
                        memset(recv, 0xff, bytes ? bytes : 1);
                    for (size_t i = 0; i < n; i++)
                        store(dt, send, i, input(i, salt));
                    CU_ASSERT_EQUAL(ofccl_reduce_scatter(comm, send, recv, n, dt, ops[o], &req), 0);
                    CU_ASSERT_EQUAL_FATAL(finish(req), 0);
                    snprintf(what, sizeof(what), "reduce-scatter of %zu, op %d scalar %g, %s, %s",
                             n, (int)ops[o].kind, ops[o].scalar, mem_names[mk],
                             inplace ? "in place" : "out of place");
                    CU_ASSERT(check(what, dt, recv, n, want_rs, &a));
                    if (!inplace) {
                        CU_ASSERT(check(what, dt, send, n, want_copy, &a));
                        mem_put(&rm);
                    }
                    mem_put(&sm);
                }
}

/* A bucket of uneven tensors, one of them empty with NULL pointers. */
static const size_t tcounts[] = {1, 0, 17, 1000, 3, 65537, 2};
#define NT (sizeof(tcounts) / sizeof(tcounts[0]))

static void bucket_round(int coll, ofccl_dtype_t dt, ofccl_redop_t op, int inplace, int mk,
                         unsigned salt)
{
    ofccl_tensor_t t[NT];
    mem_t fm[NT], sm[NT];
    ofccl_req_t *req = NULL;
    char what[128];
    int rc;

    for (size_t k = 0; k < NT; k++) {
        size_t bytes = tcounts[k] * esz[dt];
        if (tcounts[k] == 0) {
            t[k] = (ofccl_tensor_t){0, NULL, NULL};
            continue;
        }
        t[k].count = tcounts[k];
        t[k].full = mem_get(&fm[k], bytes, mk);
        t[k].shard = inplace ? t[k].full : mem_get(&sm[k], bytes, mk);
        /* AG reads the shard and writes full; RS the other way round. */
        void *in = coll == 0 ? t[k].shard : t[k].full, *out = coll == 0 ? t[k].full : t[k].shard;
        if (out != in)
            memset(out, 0xff, bytes);
        for (size_t i = 0; i < tcounts[k]; i++)
            store(dt, in, i, input(i, salt + (unsigned)k));
    }
    rc = coll == 0 ? ofccl_bucket_allgather(comm, t, (int)NT, dt, &req)
                   : ofccl_bucket_reduce_scatter(comm, t, (int)NT, dt, op, &req);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(finish(req), 0);
    for (size_t k = 0; k < NT; k++) {
        exp_arg_t a = {dt, op, salt + (unsigned)k, 0};
        if (tcounts[k] == 0)
            continue;
        snprintf(what, sizeof(what), "bucket %s, tensor %zu of %zu elements, %s, %s",
                 coll == 0 ? "all-gather" : "reduce-scatter", k, tcounts[k], mem_names[mk],
                 inplace ? "in place" : "out of place");
        CU_ASSERT(check(what, dt, coll == 0 ? t[k].full : t[k].shard, tcounts[k],
                        coll == 0 ? want_copy : want_rs, &a));
        if (!inplace)
            mem_put(&sm[k]);
        mem_put(&fm[k]);
    }
}

void test_bucket(void)
{
    unsigned salt = 5000;

    for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
        for (int inplace = 0; inplace < 2; inplace++)
            for (int mk = 0; mk < MEM_KINDS; mk++, salt += 100) {
                bucket_round(0, (ofccl_dtype_t)dt, ops[0], inplace, mk, salt);
                if (dt != OFCCL_U8) /* bytes are never reduced (diag-* checks the refusal) */
                    bucket_round(1, (ofccl_dtype_t)dt, ops[(salt / 100) % 8], inplace, mk,
                                 salt + 50);
            }
    /* An empty bucket is a valid collective too. */
    {
        ofccl_req_t *req = NULL;
        CU_ASSERT_EQUAL(ofccl_bucket_allgather(comm, NULL, 0, OFCCL_F32, &req), 0);
        CU_ASSERT_EQUAL(finish(req), 0);
        CU_ASSERT_EQUAL(ofccl_bucket_reduce_scatter(comm, NULL, 0, OFCCL_BF16, ops[1], &req), 0);
        CU_ASSERT_EQUAL(finish(req), 0);
    }
}
