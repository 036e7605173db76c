/*
 * The pull reduce-scatter's shared grains (local transport, OFCCL_RS_GRAIN):
 * a rank done with its own block takes the grains left in other ranks' blocks
 * whose output is ofccl memory. One rank (the "sleeper") posts and then stays
 * away for a while without driving progress; the others must reduce its whole
 * block for it where its output is ofccl memory, and must leave it alone where
 * it is not. Results are checked element by element against a reference
 * computed here, and two runs in which different ranks take the grains must
 * give the same bits. Which rank reduced what is read from
 * ofccl_stats_t.reduced_for_peers, gathered from every rank.
 * Usage: test_take (run with OFCCL_PROVIDER=local and a small OFCCL_RS_GRAIN)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "away.h"
#include "cu.h"
#include "elements.h"
#include "ofccl.h"

static uint64_t taken_here(void)
{
    ofccl_stats_t s = {.size = sizeof(s)};

    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_stats(ctx, &s), 0);
    return s.reduced_for_peers;
}

static int wait_ok(ofccl_req_t *req)
{
    int rc = ofccl_wait(req);

    if (rc)
        fprintf(stderr, "rank %d: reduce_scatter: %s: %s\n", rank, ofccl_strerror(rc),
                ofccl_comm_last_error(comm));
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    return rc;
}

/* Post, and on `sleeper` stay away `ms` before waiting. */
static void rs_once(const void *in, void *out, size_t count, ofccl_dtype_t dt, ofccl_redop_t op,
                    int sleeper, unsigned ms)
{
    ofccl_req_t *req = NULL;

    CU_ASSERT_EQUAL_FATAL(ofccl_reduce_scatter(comm, in, out, count, dt, op, &req), 0);
    if (rank == sleeper)
        sleep_ms(ms);
    CU_ASSERT_EQUAL_FATAL(wait_ok(req), 0);
}

/* Exact inputs: small integers, so any order of the sum gives the same f32. */
static float exact_in(int r, size_t b, size_t j)
{
    return (float)((int)((r * 131u + b * 17u + j * 7u) % 61u) - 30);
}

static size_t exact_wrong(const float *out, size_t count)
{
    size_t wrong = 0;

    for (size_t j = 0; j < count; j++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += exact_in(r, (size_t)rank, j);
        if (out[j] != want && wrong++ < 3)
            fprintf(stderr, "rank %d: [%zu] = %g, want %g\n", rank, j, out[j], want);
    }
    return wrong;
}

enum out_kind { OUT_POOL, OUT_PLAIN, OUT_IN_PLACE };

/* One reduce-scatter of exact f32 inputs in pool memory while `sleeper` stays
 * away, this rank's output of kind `kind` (malloc'd outputs cannot be mapped
 * by peers). Gathers every rank's bytes reduced for peers during it. */
static void run_exact(int sleeper, int kind, size_t count, uint64_t *taken)
{
    float *in = NULL, *own = NULL, *out;
    uint64_t before = taken_here();

    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, count * 4 * (size_t)size, (void **)&in), 0);
    for (int b = 0; b < size; b++)
        for (size_t j = 0; j < count; j++)
            in[(size_t)b * count + j] = exact_in(rank, (size_t)b, j);
    if (kind == OUT_PLAIN)
        own = malloc(count * 4);
    else if (kind == OUT_POOL)
        CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, count * 4, (void **)&own), 0);
    out = kind == OUT_IN_PLACE ? in + (size_t)rank * count : own;
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    if (kind != OUT_IN_PLACE)
        memset(out, 0xA5, count * 4);
    rs_once(in, out, count, OFCCL_F32, (ofccl_redop_t){OFCCL_OP_SUM, 1}, sleeper, 500);
    CU_ASSERT_EQUAL(exact_wrong(out, count), 0);
    gather_u64(taken_here() - before, taken);
    if (kind == OUT_PLAIN)
        free(own);
    else if (kind == OUT_POOL)
        CU_ASSERT_EQUAL(ofccl_buffer_free(comm, own), 0);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, in), 0);
}

static uint64_t sum_but(const uint64_t *v, int skip)
{
    uint64_t s = 0;

    for (int r = 0; r < size; r++)
        s += r == skip ? 0 : v[r];
    return s;
}

/* The sleeper's whole block is reduced by the others, out of place and in
 * place. Only the sleeper's output can be mapped, so what the others took is
 * exactly its block; it takes nothing, since all is taken when it wakes. */
static void test_away(void)
{
    size_t count = 16384 + 5; /* not a whole number of grains */
    uint64_t *taken = calloc((size_t)size, 8);

    CU_ASSERT_PTR_NOT_NULL_FATAL(taken);
    for (int in_place = 0; in_place < 2; in_place++) {
        int sleeper = in_place ? 0 : size - 1;

        run_exact(sleeper,
                  rank != sleeper ? OUT_PLAIN
                  : in_place      ? OUT_IN_PLACE
                                  : OUT_POOL,
                  count, taken);
        CU_ASSERT_EQUAL(taken[sleeper], 0);
        CU_ASSERT_EQUAL(sum_but(taken, sleeper), count * 4);
        if (rank == 0)
            printf("\n  sleeper %d%s: others took %llu of its %zu bytes", sleeper,
                   in_place ? " (in place)" : "", (unsigned long long)sum_but(taken, sleeper),
                   count * 4);
    }
    free(taken);
}

/* An output peers cannot map is reduced by its owner only: with every output
 * plain nobody takes anything; with only the sleeper's plain, the others take
 * at most each other's blocks. */
static void test_plain_output(void)
{
    size_t count = 8192;
    uint64_t *taken = calloc((size_t)size, 8);

    CU_ASSERT_PTR_NOT_NULL_FATAL(taken);
    run_exact(size - 1, OUT_PLAIN, count, taken);
    CU_ASSERT_EQUAL(sum_but(taken, -1), 0);
    run_exact(0, rank == 0 ? OUT_PLAIN : OUT_POOL, count, taken);
    CU_ASSERT_EQUAL(taken[0], 0);
    CU_ASSERT(sum_but(taken, 0) <= (uint64_t)(size - 2) * count * 4);
    free(taken);
}

/* Inputs whose sums round: the order of the sources matters. */
static double rough_in(int r, size_t b, size_t j)
{
    uint64_t h = ((uint64_t)r * 0x9E3779B1u) ^ (b * 0x85EBCA77u) ^ (j * 0xC2B2AE3Du);

    h ^= h >> 15;
    h *= 0x2C1B3C6Dull;
    h ^= h >> 12;
    return (double)(h % 200003) / 7919.0 - 12.5;
}

/* v as an element of dt holds it. */
static double stored(ofccl_dtype_t dt, double v)
{
    double tmp; /* room and alignment for any dtype */

    store(dt, &tmp, 0, v);
    return load(dt, &tmp, 0);
}

/* Two runs with different sleepers (so different ranks take the grains) give
 * the same bits, and both are within rounding of a double reference. */
static void test_same_bits(void)
{
    static const ofccl_dtype_t dts[] = {OFCCL_F32, OFCCL_BF16};
    static const ofccl_redop_t ops[] = {
        {OFCCL_OP_SUM, 1}, {OFCCL_OP_AVG, 1}, {OFCCL_OP_PREMUL_SUM, 0.3}};
    size_t count = 3 * 2048 + 7;

    for (int d = 0; d < 2; d++) {
        for (int o = 0; o < 3; o++) {
            size_t es = dts[d] == OFCCL_F32 ? 4 : 2, wrong = 0;
            char *in = NULL, *out[2] = {NULL, NULL};

            CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, count * es * (size_t)size, (void **)&in),
                                  0);
            for (int k = 0; k < 2; k++)
                CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, count * es, (void **)&out[k]), 0);
            for (int b = 0; b < size; b++)
                for (size_t j = 0; j < count; j++)
                    store(dts[d], in, (size_t)b * count + j, rough_in(rank, (size_t)b, j));
            rs_once(in, out[0], count, dts[d], ops[o], 0, 100);
            rs_once(in, out[1], count, dts[d], ops[o], size - 1, 100);
            CU_ASSERT_EQUAL(memcmp(out[0], out[1], count * es), 0);
            for (size_t j = 0; j < count; j++) {
                double want = 0, mag = 0, got = load(dts[d], out[0], j);
                for (int r = 0; r < size; r++) {
                    double v = stored(dts[d], rough_in(r, (size_t)rank, j));
                    v = ops[o].kind == OFCCL_OP_PREMUL_SUM ? v * ops[o].scalar : v;
                    want += v;
                    mag += fabs(v);
                }
                if (ops[o].kind == OFCCL_OP_AVG)
                    want /= size, mag /= size;
                wrong += !(fabs(got - want) <= mag * (es == 4 ? 0x1p-21 : 0x1p-6) * (2 + size));
            }
            CU_ASSERT_EQUAL(wrong, 0);
            for (int k = 0; k < 2; k++)
                CU_ASSERT_EQUAL(ofccl_buffer_free(comm, out[k]), 0);
            CU_ASSERT_EQUAL(ofccl_buffer_free(comm, in), 0);
        }
    }
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"a rank away: the others reduce its block", test_away},
        {"plain outputs are reduced by their owners", test_plain_output},
        {"the same bits whoever reduces", test_same_bits},
        {NULL, NULL},
    };

    return world_run("take", tests);
}
