/*
 * Collectives whose arguments differ across ranks in ways the flat size hides,
 * with ranks forked by the test itself (TCP bootstrap): each must fail with
 * OFCCL_ERR_MISMATCH on every rank before data lands, naming what differs in
 * the user's terms (tensor index, element counts, the scalar), never succeed.
 *  - buckets whose tensors pad to the same size in another order (3+5, 5+3),
 *    for all-gather and reduce-scatter;
 *  - buckets with a different number of tensors;
 *  - a bucket collective against a flat one;
 *  - reduce-scatter with different premul scalars.
 * Matching buckets run first and are checked element by element.
 * Usage: test_layout <provider>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

#define BIG 20000 /* elements: above the eager threshold, so descriptors carry it */

/* A bucket of two tensors of (a, b) elements; full[k] = k + 1, shards sliced from it. */
static int bucket_ag(ofccl_comm_t *comm, int rank, size_t a, size_t b, int ntensors)
{
    size_t counts[3] = {a, b, 7};
    ofccl_tensor_t t[3];
    ofccl_req_t *req;
    float *full[3], *shard[3];
    int rc, bad = 0;

    for (int k = 0; k < ntensors; k++) {
        size_t off, n;
        ofccl_shard_range(comm, counts[k], &off, &n);
        full[k] = calloc(counts[k], sizeof(float));
        shard[k] = malloc((n ? n : 1) * sizeof(float));
        for (size_t i = 0; i < n; i++)
            shard[k][i] = (float)(off + i + 1 + 1000 * k);
        t[k] = (ofccl_tensor_t){counts[k], full[k], shard[k]};
    }
    rc = ofccl_bucket_allgather(comm, t, ntensors, OFCCL_F32, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    for (int k = 0; k < ntensors; k++) {
        for (size_t i = 0; rc == 0 && i < counts[k]; i++)
            bad += full[k][i] != (float)(i + 1 + 1000 * k);
        free(full[k]);
        free(shard[k]);
    }
    if (bad)
        fprintf(stderr, "rank %d: %d wrong elements\n", rank, bad);
    return bad ? -1000 : rc;
}

static int expect_mismatch(const char *what, int rank, int rc, ofccl_comm_t *comm,
                           const char *must1, const char *must2)
{
    const char *msg = ofccl_comm_last_error(comm);

    printf("%s (%s): rank %d: %s: %s\n", what, provider, rank, ofccl_strerror(rc), msg);
    if (rc != OFCCL_ERR_MISMATCH)
        return 60;
    if (strstr(msg, must1) == NULL || (must2 != NULL && strstr(msg, must2) == NULL))
        return 61;
    return 0;
}

static int reordered_ag(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    int rc;

    (void)ctx;
    ofccl_comm_set_timeout(comm, 10000);
    if ((rc = bucket_ag(comm, rank, 3, 5, 2)) != 0) /* the same on both: must work */
        return 62;
    rc = rank == 0 ? bucket_ag(comm, rank, 3, 5, 2) : bucket_ag(comm, rank, 5, 3, 2);
    return expect_mismatch("3+5 vs 5+3 all-gather", rank, rc, comm, "tensor 0",
                           rank == 0 ? "rank 1's has 5 elements, rank 0's has 3"
                                     : "rank 0's has 3 elements, rank 1's has 5");
}

static int tensor_count(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    ofccl_comm_set_timeout(comm, 10000);
    /* 3+5 against 3+5+7: the third tensor fits the same 128-byte padding. */
    return expect_mismatch("2 vs 3 tensors", rank, bucket_ag(comm, rank, 3, 5, rank == 0 ? 2 : 3),
                           comm, "tensors", rank == 0 ? "bucket of 3 tensors" : "bucket of 2");
}

static int bucket_vs_flat(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    float *in = calloc(BIG, sizeof(float)), *out = calloc(2 * (size_t)BIG, sizeof(float));
    ofccl_req_t *req;
    int rc;

    (void)ctx;
    ofccl_comm_set_timeout(comm, 10000);
    if (rank == 0) {
        rc = bucket_ag(comm, rank, BIG, BIG, 2);
    } else if ((rc = ofccl_allgather(comm, in, out, BIG, OFCCL_F32, &req)) == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    free(in);
    free(out);
    return expect_mismatch("bucket vs flat", rank, rc, comm, "bucket", NULL);
}

static int bucket_rs(ofccl_comm_t *comm, size_t a, size_t b)
{
    size_t counts[2] = {a, b};
    ofccl_tensor_t t[2];
    ofccl_req_t *req;
    float *full[2], *shard[2];
    int rc;

    for (int k = 0; k < 2; k++) {
        full[k] = calloc(counts[k], sizeof(float));
        shard[k] = calloc(counts[k], sizeof(float));
        t[k] = (ofccl_tensor_t){counts[k], full[k], shard[k]};
    }
    rc =
        ofccl_bucket_reduce_scatter(comm, t, 2, OFCCL_BF16, (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    for (int k = 0; k < 2; k++) {
        free(full[k]);
        free(shard[k]);
    }
    return rc;
}

static int reordered_rs(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    ofccl_comm_set_timeout(comm, 10000);
    return expect_mismatch("3+5 vs 5+3 reduce-scatter", rank,
                           rank == 0 ? bucket_rs(comm, 3, 5) : bucket_rs(comm, 5, 3), comm,
                           "tensor 0", NULL);
}

static int premul(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    float *in = calloc(2 * (size_t)BIG, sizeof(float)), *out = calloc(BIG, sizeof(float));
    ofccl_redop_t op = {OFCCL_OP_PREMUL_SUM, rank == 0 ? 0.5 : 0.25};
    ofccl_req_t *req;
    int rc;

    (void)ctx;
    ofccl_comm_set_timeout(comm, 10000);
    rc = ofccl_reduce_scatter(comm, in, out, BIG, OFCCL_F32, op, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    free(in);
    free(out);
    return expect_mismatch("premul 0.5 vs 0.25", rank, rc, comm, "premul scalar",
                           rank == 0 ? "with 0.5" : "with 0.25");
}

static void both_ok(scenario_fn fn)
{
    int st[FORK_MAX];

    nranks = 2;
    run(fn, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(exited_ok(st[1]));
}

static void test_reordered_ag(void)
{
    both_ok(reordered_ag);
}
static void test_tensor_count(void)
{
    both_ok(tensor_count);
}
static void test_bucket_vs_flat(void)
{
    both_ok(bucket_vs_flat);
}
static void test_reordered_rs(void)
{
    both_ok(reordered_rs);
}
static void test_premul(void)
{
    both_ok(premul);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"all-gather buckets 3+5 vs 5+3 name tensor 0", test_reordered_ag},
        {"buckets with 2 vs 3 tensors", test_tensor_count},
        {"a bucket collective against a flat one", test_bucket_vs_flat},
        {"reduce-scatter buckets 3+5 vs 5+3", test_reordered_rs},
        {"premul scalars 0.5 vs 0.25 are named", test_premul},
        {NULL, NULL},
    };
    if (argc > 1)
        provider = argv[1];
    return cu_run("layout", tests);
}
