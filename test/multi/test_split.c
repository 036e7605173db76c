/*
 * ofccl_comm_split, multi-rank (mpirun or the TCP rendezvous; provider from
 * OFCCL_PROVIDER): split by parity and by blocks, with collectives on both
 * halves at once and on the parent between them, checked element by element;
 * ranking by key; OFCCL_UNDEFINED; a split of a split; the parent destroyed
 * before its child; a bad color refused on every rank with the parent still
 * usable.
 * Usage: test_split
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "ofccl.h"

static ofccl_ctx_t *ctx;
static ofccl_comm_t *world;
static int wrank, wsize;

/* Element i of world rank r's input to collective `salt`: exact in f32. */
static float val(int r, size_t i, int salt)
{
    return (float)(r * 4096 + (int)(i % 4093) + salt * 7);
}

/* All-gather on `c` whose member of rank k is world rank members[k]. */
static int check_allgather(ofccl_comm_t *c, const int *members, size_t count, int salt)
{
    int rank, size, bad = 0;
    ofccl_req_t *req;
    float *in, *out;

    ofccl_comm_rank(c, &rank);
    ofccl_comm_size(c, &size);
    in = malloc(count * sizeof(float));
    out = calloc(count * (size_t)size, sizeof(float));
    for (size_t i = 0; i < count; i++)
        in[i] = val(wrank, i, salt);
    if (ofccl_allgather(c, in, out, count, OFCCL_F32, &req) != 0 || ofccl_wait(req) != 0) {
        fprintf(stderr, "world rank %d: all-gather: %s\n", wrank, ofccl_comm_last_error(c));
        bad = 1;
    } else {
        ofccl_req_free(req);
        for (int k = 0; k < size && !bad; k++)
            for (size_t i = 0; i < count; i++)
                if (out[(size_t)k * count + i] != val(members[k], i, salt)) {
                    fprintf(stderr, "world rank %d: block %d element %zu is %g\n", wrank, k, i,
                            (double)out[(size_t)k * count + i]);
                    bad = 1;
                    break;
                }
    }
    free(in);
    free(out);
    return bad;
}

/* Reduce-scatter (sum) on `c`: block k summed over the members. */
static int check_reduce_scatter(ofccl_comm_t *c, const int *members, size_t count, int salt)
{
    int rank, size, bad = 0;
    ofccl_req_t *req;
    float *in, *out;

    ofccl_comm_rank(c, &rank);
    ofccl_comm_size(c, &size);
    in = malloc(count * (size_t)size * sizeof(float));
    out = calloc(count, sizeof(float));
    for (size_t i = 0; i < count * (size_t)size; i++)
        in[i] = val(wrank, i, salt);
    if (ofccl_reduce_scatter(c, in, out, count, OFCCL_F32, (ofccl_redop_t){OFCCL_OP_SUM, 1},
                             &req) != 0 ||
        ofccl_wait(req) != 0) {
        fprintf(stderr, "world rank %d: reduce-scatter: %s\n", wrank, ofccl_comm_last_error(c));
        bad = 1;
    } else {
        ofccl_req_free(req);
        for (size_t i = 0; i < count && !bad; i++) {
            float want = 0;
            for (int k = 0; k < size; k++)
                want += val(members[k], (size_t)rank * count + i, salt);
            if (out[i] != want) {
                fprintf(stderr, "world rank %d: element %zu is %g, expected %g\n", wrank, i,
                        (double)out[i], (double)want);
                bad = 1;
            }
        }
    }
    free(in);
    free(out);
    return bad;
}

/* The members of `color` in world rank order, or reversed (key = -rank). */
static int members_of(int (*color_of)(int), int color, int reversed, int *out)
{
    int n = 0;

    for (int r = 0; r < wsize; r++)
        if (color_of(r) == color)
            out[n++] = r;
    for (int i = 0; reversed && i < n / 2; i++) {
        int t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    return n;
}

static int parity(int r)
{
    return r % 2;
}
static int block(int r)
{
    return r / 2;
}

static void split_and_check(int (*color_of)(int), int reversed)
{
    ofccl_comm_t *c = NULL;
    int members[64], n = members_of(color_of, color_of(wrank), reversed, members), rank = -1,
                     size = -1;

    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(world, color_of(wrank), reversed ? -wrank : wrank, &c),
                          0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    ofccl_comm_rank(c, &rank);
    ofccl_comm_size(c, &size);
    CU_ASSERT_EQUAL(size, n);
    CU_ASSERT(rank >= 0 && rank < n && members[rank] == wrank);
    /* Both halves at once, the parent in between. */
    CU_ASSERT_EQUAL(check_allgather(c, members, 1000 + (size_t)wsize, 1), 0);
    {
        int all[64];
        for (int r = 0; r < wsize; r++)
            all[r] = r;
        CU_ASSERT_EQUAL(check_allgather(world, all, 333, 2), 0);
    }
    CU_ASSERT_EQUAL(check_reduce_scatter(c, members, 70000, 3), 0);
    CU_ASSERT_EQUAL(check_allgather(c, members, 3, 4), 0); /* eager-sized */
    CU_ASSERT_EQUAL(ofccl_barrier(c), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(c), 0);
}

static void test_parity(void)
{
    split_and_check(parity, 0);
}

static void test_blocks_reversed(void)
{
    split_and_check(block, 1);
}

/* Rank 0 takes no part; a split of the others' communicator; the parent goes first. */
static void test_undefined_and_nested(void)
{
    ofccl_comm_t *c = NULL, *cc = NULL;
    int members[64], n = 0;

    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(world, wrank == 0 ? OFCCL_UNDEFINED : 7, 0, &c), 0);
    if (wrank == 0) {
        CU_ASSERT_PTR_NULL(c);
        return;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    /* In c (world ranks 1..n-1), split again by world-rank parity. */
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(c, wrank % 2, wrank, &cc), 0);
    for (int r = 1; r < wsize; r++)
        if (r % 2 == wrank % 2)
            members[n++] = r;
    CU_ASSERT_EQUAL(ofccl_comm_destroy(c), 0); /* the parent first */
    CU_ASSERT_EQUAL(check_allgather(cc, members, 2049, 5), 0);
    CU_ASSERT_EQUAL(check_reduce_scatter(cc, members, 1500, 6), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(cc), 0);
}

/* A color below 0 other than OFCCL_UNDEFINED: refused on every rank; the
 * parent stays usable. */
static void test_bad_color(void)
{
    ofccl_comm_t *c = (ofccl_comm_t *)&c;
    int all[64];

    CU_ASSERT_EQUAL(ofccl_comm_split(world, wrank == 1 ? -5 : 0, 0, &c), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(world), "rank 1 passed color -5"));
    CU_ASSERT_EQUAL(ofccl_comm_split(world, 0, 0, NULL), OFCCL_ERR_INVALID_ARG);
    for (int r = 0; r < wsize; r++)
        all[r] = r;
    CU_ASSERT_EQUAL(check_allgather(world, all, 17, 8), 0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"split by parity, collectives on both halves and the parent", test_parity},
        {"split by blocks, ranked by key (reversed)", test_blocks_reversed},
        {"OFCCL_UNDEFINED, a split of a split, parent destroyed first", test_undefined_and_nested},
        {"a bad color is refused everywhere, the parent stays usable", test_bad_color},
        {NULL, NULL},
    };
    char err[512];
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    int rc;

    if (ofccl_ctx_create(&p, &ctx) != 0 || ofccl_comm_world(ctx, &world) != 0) {
        fprintf(stderr, "setup: %s\n", ctx ? ofccl_ctx_last_error(ctx) : err);
        return 1;
    }
    ofccl_comm_rank(world, &wrank);
    ofccl_comm_size(world, &wsize);
    if (wsize < 3 || wsize > 64) {
        fprintf(stderr, "test_split needs 3 to 64 ranks, got %d\n", wsize);
        return 1;
    }
    rc = cu_run("split", tests);
    if (ofccl_comm_destroy(world) != 0 || ofccl_ctx_destroy(ctx) != 0)
        rc = 1;
    return rc;
}
