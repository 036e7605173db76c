/*
 * The whole public API on a communicator of one rank, where every collective
 * is a local copy (all-gather) or the op applied to the one input
 * (reduce-scatter), done before the call returns. Every function of ofccl.h
 * is called with valid and invalid arguments; results are checked element by
 * element, bit for bit (at one rank docs/reductions.md leaves no rounding
 * freedom: the result is the input, or input * scalar rounded once).
 * The collectives themselves are in one_rank_coll.c.
 * Usage: test_one_rank PROVIDER [singleton|env]
 *   singleton: OFCCL_BOOT=singleton (no launcher needed, whatever the environment)
 *   env: the bootstrap the environment gives (mpirun -np 1, TCP rendezvous of 1)
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "one_rank.h"

const char *provider = "local";
ofccl_ctx_t *ctx;
ofccl_comm_t *comm;
static const char *boot = "singleton";

/* A request completed at post time must be safe for test, wait and free, and
 * unusable after free. */
int finish(ofccl_req_t *req)
{
    int done = -1, rc;

    rc = ofccl_test(req, &done);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(done, 1);
    rc = ofccl_wait(req);
    CU_ASSERT_EQUAL(ofccl_wait(req), rc); /* waiting twice gives the same answer */
    CU_ASSERT_EQUAL(ofccl_test(req, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_test(req, &done), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_wait(req), OFCCL_ERR_INVALID_ARG);
    return rc;
}

const size_t counts[NCOUNTS] = {0, 1, 2, 7, 31, 1031, 65537};

/* ---- tests ---- */
static void test_version_and_strings(void)
{
    int ma = -1, mi = -1, pa = -1;
    char v[64];

    ofccl_version(&ma, &mi, &pa);
    CU_ASSERT_EQUAL(ma, OFCCL_VERSION_MAJOR);
    CU_ASSERT_EQUAL(mi, OFCCL_VERSION_MINOR);
    CU_ASSERT_EQUAL(pa, OFCCL_VERSION_PATCH);
    ofccl_version(NULL, NULL, NULL); /* each output is optional */
    snprintf(v, sizeof(v), "%d.%d.%d", ma, mi, pa);
    CU_ASSERT_STRING_EQUAL(ofccl_version_string(), v);
#define X_CHECK(name, code, text)                                                                  \
    CU_ASSERT_STRING_EQUAL(ofccl_strerror(OFCCL_ERR_##name), text);                                \
    CU_ASSERT_EQUAL(OFCCL_ERR_##name, code);
    OFCCL_ERROR_LIST(X_CHECK)
#undef X_CHECK
    CU_ASSERT_PTR_NOT_NULL(ofccl_strerror(-1000));
    CU_ASSERT_PTR_NOT_NULL(ofccl_strerror(1));
    CU_ASSERT_STRING_EQUAL(ofccl_strerror(OFCCL_SUCCESS), "success");
    for (int d = 0; d < OFCCL_DTYPE_COUNT; d++)
        CU_ASSERT_EQUAL(ofccl_dtype_size((ofccl_dtype_t)d), esz[d]);
    CU_ASSERT_EQUAL(ofccl_dtype_size(OFCCL_DTYPE_COUNT), 0);
    CU_ASSERT_EQUAL(ofccl_dtype_size((ofccl_dtype_t)-1), 0);
}

static void test_ctx_arguments(void)
{
    char err[256] = "";
    const char *const bad[] = {"PROVIDER=no-such-transport", "BOOT=singleton", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = bad, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *c = NULL;
    ofccl_stats_t st = {.size = sizeof(st)};

    CU_ASSERT_EQUAL(ofccl_ctx_create(&p, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT(strstr(err, "NULL") != NULL);
    p.size = 8; /* an uninitialised struct */
    CU_ASSERT_EQUAL(ofccl_ctx_create(&p, &c), OFCCL_ERR_INVALID_ARG);
    p.size = sizeof(p);
    err[0] = '\0';
    CU_ASSERT(ofccl_ctx_create(&p, &c) < 0);
    CU_ASSERT_PTR_NULL(c); /* outputs are set only on success */
    CU_ASSERT(strstr(err, "no-such-transport") != NULL);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(ofccl_ctx_last_error(NULL));
    CU_ASSERT_STRING_EQUAL(ofccl_ctx_provider(NULL), "");
    CU_ASSERT(strlen(ofccl_ctx_provider(ctx)) > 0);
    CU_ASSERT_EQUAL(ofccl_progress(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_progress(ctx), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(NULL, &st), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, NULL), OFCCL_ERR_INVALID_ARG);
    st.size = 8;
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &st), OFCCL_ERR_INVALID_ARG);
    st.size = sizeof(st);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &st), 0);
    CU_ASSERT_EQUAL(st.size, sizeof(st));
    /* The state dump: nothing pending on a one-rank communicator. */
    CU_ASSERT_EQUAL(ofccl_dump_state(NULL, stderr), OFCCL_ERR_INVALID_ARG);
    {
        char text[2048] = "";
        FILE *f = tmpfile();
        CU_ASSERT_EQUAL_FATAL(ofccl_dump_state(ctx, f), 0);
        rewind(f);
        text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
        fclose(f);
        CU_ASSERT(strstr(text, "rank 0 of 1") != NULL);
        CU_ASSERT(strstr(text, "no pending request") != NULL);
        CU_ASSERT(strstr(text, "0 pending request(s)") != NULL);
    }
    /* A context with a communicator open is busy. */
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), OFCCL_ERR_BUSY);
    CU_ASSERT(strstr(ofccl_ctx_last_error(ctx), "still open") != NULL);
}

static void test_comm_queries(void)
{
    int v = -1;
    size_t off = 99, n = 99;
    ofccl_comm_t *c = NULL;

    CU_ASSERT_EQUAL(ofccl_comm_world(NULL, &c), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_world(ctx, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(ofccl_comm_rank(comm, &v), 0);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(ofccl_comm_size(comm, &v), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(ofccl_comm_local_rank(comm, &v), 0);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(ofccl_comm_local_size(comm, &v), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(ofccl_comm_rank(comm, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_size(comm, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_local_rank(comm, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_local_size(comm, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_rank(NULL, &v), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_size(NULL, &v), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_local_rank(NULL, &v), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_local_size(NULL, &v), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(ofccl_comm_last_error(NULL));
    CU_ASSERT_PTR_NOT_NULL(ofccl_comm_last_error(comm));
    CU_ASSERT_EQUAL(ofccl_comm_set_timeout(comm, 0), 0);
    CU_ASSERT_EQUAL(ofccl_comm_set_timeout(comm, UINT64_MAX), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_set_timeout(NULL, 1000), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_set_timeout(comm, 60000), 0);
    CU_ASSERT_EQUAL(ofccl_comm_abort(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_barrier(NULL), OFCCL_ERR_INVALID_ARG);
    for (int k = 0; k < 3; k++)
        CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    /* One rank owns every element. */
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        CU_ASSERT_EQUAL(ofccl_shard_range(comm, counts[k], &off, &n), 0);
        CU_ASSERT_EQUAL(off, 0);
        CU_ASSERT_EQUAL(n, counts[k]);
    }
    CU_ASSERT_EQUAL(ofccl_shard_range(comm, SIZE_MAX, &off, &n), 0);
    CU_ASSERT_EQUAL(n, SIZE_MAX);
    CU_ASSERT_EQUAL(ofccl_shard_range(NULL, 5, &off, &n), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_shard_range(comm, 5, NULL, &n), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_shard_range(comm, 5, &off, NULL), OFCCL_ERR_INVALID_ARG);
}

/* Every argument error returns INVALID_ARG, says so, and leaves the communicator usable. */
static void test_argument_errors(void)
{
    float a[8] = {0}, b[8] = {0};
    ofccl_req_t *req = NULL;
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0}, nan_op = {OFCCL_OP_PREMUL_SUM, NAN};
    ofccl_redop_t inf_op = {OFCCL_OP_PREMUL_SUM, INFINITY};
    ofccl_redop_t bad_op = {OFCCL_OP_COUNT, 0}, neg_op = {(ofccl_op_kind_t)-1, 0};
    ofccl_tensor_t t = {4, a, b}, tnull_full = {4, NULL, b}, tnull_shard = {4, a, NULL};
    void *pool = NULL;

#define BAD(call)                                                                                  \
    do {                                                                                           \
        req = NULL;                                                                                \
        CU_ASSERT_EQUAL(call, OFCCL_ERR_INVALID_ARG);                                              \
        CU_ASSERT_PTR_NULL(req);                                                                   \
    } while (0)
    BAD(ofccl_allgather(NULL, a, b, 4, OFCCL_F32, &req));
    BAD(ofccl_allgather(comm, a, b, 4, OFCCL_F32, NULL));
    BAD(ofccl_allgather(comm, a, b, 4, OFCCL_DTYPE_COUNT, &req));
    BAD(ofccl_allgather(comm, a, b, 4, (ofccl_dtype_t)-1, &req));
    BAD(ofccl_allgather(comm, NULL, b, 4, OFCCL_F32, &req));
    BAD(ofccl_allgather(comm, a, NULL, 4, OFCCL_F32, &req));
    BAD(ofccl_allgather(comm, a + 1, a, 4, OFCCL_F32, &req)); /* overlap, not in place */
    BAD(ofccl_allgather(comm, a, a + 2, 4, OFCCL_F32, &req));
    BAD(ofccl_allgather(comm, a, b, SIZE_MAX / 2, OFCCL_F32, &req)); /* overflows */
    CU_ASSERT(strstr(ofccl_comm_last_error(comm), "overflow") != NULL);
    BAD(ofccl_reduce_scatter(NULL, a, b, 4, OFCCL_F32, sum, &req));
    BAD(ofccl_reduce_scatter(comm, a, b, 4, OFCCL_F32, sum, NULL));
    BAD(ofccl_reduce_scatter(comm, a, b, 4, OFCCL_DTYPE_COUNT, sum, &req));
    BAD(ofccl_reduce_scatter(comm, a, b, 4, OFCCL_F32, bad_op, &req));
    BAD(ofccl_reduce_scatter(comm, a, b, 4, OFCCL_F32, neg_op, &req));
    BAD(ofccl_reduce_scatter(comm, a, b, 4, OFCCL_F32, nan_op, &req));
    BAD(ofccl_reduce_scatter(comm, a, b, 4, OFCCL_F32, inf_op, &req));
    BAD(ofccl_reduce_scatter(comm, NULL, b, 4, OFCCL_F32, sum, &req));
    BAD(ofccl_reduce_scatter(comm, a, NULL, 4, OFCCL_F32, sum, &req));
    BAD(ofccl_reduce_scatter(comm, a, a + 1, 4, OFCCL_F32, sum, &req));
    /* A pool buffer too small for the count is caught. */
    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, 16, &pool), 0);
    BAD(ofccl_allgather(comm, a, pool, 8, OFCCL_F32, &req));
    BAD(ofccl_reduce_scatter(comm, pool, b, 8, OFCCL_F32, sum, &req));
    CU_ASSERT(strstr(ofccl_comm_last_error(comm), "too small") != NULL);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, pool), 0);
    BAD(ofccl_bucket_allgather(NULL, &t, 1, OFCCL_F32, &req));
    BAD(ofccl_bucket_allgather(comm, &t, 1, OFCCL_F32, NULL));
    BAD(ofccl_bucket_allgather(comm, &t, -1, OFCCL_F32, &req));
    BAD(ofccl_bucket_allgather(comm, NULL, 1, OFCCL_F32, &req));
    BAD(ofccl_bucket_allgather(comm, &t, 1, OFCCL_DTYPE_COUNT, &req));
    BAD(ofccl_bucket_allgather(comm, &tnull_full, 1, OFCCL_F32, &req));
    BAD(ofccl_bucket_allgather(comm, &tnull_shard, 1, OFCCL_F32, &req));
    BAD(ofccl_bucket_reduce_scatter(NULL, &t, 1, OFCCL_F32, sum, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, &t, 1, OFCCL_F32, sum, NULL));
    BAD(ofccl_bucket_reduce_scatter(comm, &t, -1, OFCCL_F32, sum, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, NULL, 1, OFCCL_F32, sum, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, &t, 1, (ofccl_dtype_t)7, sum, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, &t, 1, OFCCL_F32, bad_op, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, &t, 1, OFCCL_F32, nan_op, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, &tnull_full, 1, OFCCL_F32, sum, &req));
    BAD(ofccl_bucket_reduce_scatter(comm, &tnull_shard, 1, OFCCL_F32, sum, &req));
    {
        ofccl_tensor_t part = {4, a, a + 1}; /* shard overlaps full, not in place */
        BAD(ofccl_bucket_reduce_scatter(comm, &part, 1, OFCCL_F32, sum, &req));
    }
    BAD(ofccl_test(NULL, &(int){0}));
    BAD(ofccl_wait(NULL));
    BAD(ofccl_req_free(NULL));
#undef BAD
    /* Still usable: an all-gather works and is exact. */
    for (int i = 0; i < 4; i++)
        a[i] = (float)i + 0.5f;
    CU_ASSERT_EQUAL(ofccl_allgather(comm, a, b, 4, OFCCL_F32, &req), 0);
    CU_ASSERT_EQUAL(finish(req), 0);
    CU_ASSERT(memcmp(a, b, 4 * sizeof(float)) == 0);
}

/* Eight requests may be outstanding; the ninth waits for one to be freed. */
static void test_outstanding(void)
{
    double src[9], dst[9];
    ofccl_req_t *req[9];
    ofccl_redop_t avg = {OFCCL_OP_AVG, 0};

    for (int k = 0; k < 9; k++)
        src[k] = k * 0.25, dst[k] = -1;
    for (int k = 0; k < 8; k++)
        CU_ASSERT_EQUAL_FATAL(
            k % 2 ? ofccl_allgather(comm, &src[k], &dst[k], 1, OFCCL_F64, &req[k])
                  : ofccl_reduce_scatter(comm, &src[k], &dst[k], 1, OFCCL_F64, avg, &req[k]),
            0);
    CU_ASSERT_EQUAL(ofccl_allgather(comm, &src[8], &dst[8], 1, OFCCL_F64, &req[8]),
                    OFCCL_ERR_AGAIN);
    CU_ASSERT_EQUAL(ofccl_progress(ctx), 0);
    /* Waited in reverse order, then the ninth fits. */
    for (int k = 7; k >= 0; k--) {
        CU_ASSERT_EQUAL(finish(req[k]), 0);
        CU_ASSERT_EQUAL(dst[k], src[k]);
    }
    CU_ASSERT_EQUAL(ofccl_allgather(comm, &src[8], &dst[8], 1, OFCCL_F64, &req[8]), 0);
    CU_ASSERT_EQUAL(finish(req[8]), 0);
    CU_ASSERT_EQUAL(dst[8], src[8]);
}

static void test_memory(void)
{
    ofccl_stats_t s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};
    void *p = NULL, *q = NULL;
    char *user = malloc(1 << 16), stack[16];
    ofccl_mem_t *m1 = NULL, *m2 = NULL;

    CU_ASSERT_FATAL(user != NULL);
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 0, &p), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 64, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(NULL, 64, &p), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &s0), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, 100000, &p), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, 1, &q), 0);
    CU_ASSERT(p != NULL && q != NULL && p != q);
    memset(p, 0x5a, 100000); /* all of it is ours */
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &s1), 0);
    CU_ASSERT(s1.pool_bytes >= s0.pool_bytes + 100001);
    CU_ASSERT(s1.registrations >= s0.registrations + 2);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, stack), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_free(NULL, p), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, p), 0);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, p), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, q), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &s1), 0);
    CU_ASSERT_EQUAL(s1.pool_bytes, s0.pool_bytes);

    CU_ASSERT_EQUAL(ofccl_mem_register(NULL, user, 64, &m1), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_mem_register(ctx, NULL, 64, &m1), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_mem_register(ctx, user, 0, &m1), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_mem_register(ctx, user, 64, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_mem_register(ctx, (void *)(UINTPTR_MAX - 8), 64, &m1),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(m1);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &s0), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, user, 1 << 16, &m1), 0);
    /* A range inside a registered one is a cache hit. */
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, user + 4096, 4096, &m2), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &s1), 0);
    CU_ASSERT_EQUAL(s1.reg_cache_hits, s0.reg_cache_hits + 1);
    /* Used by a collective: then it is registered on the endpoint, once. */
    {
        ofccl_req_t *req;
        for (int k = 0; k < 1024; k++)
            ((float *)user)[k] = (float)k;
        CU_ASSERT_EQUAL(ofccl_allgather(comm, user, user + 8192, 1024, OFCCL_F32, &req), 0);
        CU_ASSERT_EQUAL(finish(req), 0);
        CU_ASSERT(memcmp(user, user + 8192, 4096) == 0);
    }
    CU_ASSERT_EQUAL(ofccl_mem_deregister(m2), 0);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(m1), 0);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(m1), OFCCL_ERR_STATE); /* gone */
    free(user);
}

/* Abort: every later call fails with ABORTED; only destroy remains useful. */
static void test_abort(void)
{
    ofccl_comm_t *c = NULL;
    float a[4] = {1, 2, 3, 4}, b[4];
    ofccl_tensor_t t = {4, b, a};
    ofccl_req_t *req = NULL;
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0};
    void *p = NULL;
    int v;

    CU_ASSERT_EQUAL_FATAL(ofccl_comm_world(ctx, &c), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(c), 0);
    CU_ASSERT_EQUAL(ofccl_comm_abort(c), 0);
    CU_ASSERT_EQUAL(ofccl_comm_abort(c), 0); /* idempotent */
    CU_ASSERT_EQUAL(ofccl_barrier(c), OFCCL_ERR_ABORTED);
    CU_ASSERT(strstr(ofccl_comm_last_error(c), "aborted") != NULL);
    CU_ASSERT_EQUAL(ofccl_allgather(c, a, b, 4, OFCCL_F32, &req), OFCCL_ERR_ABORTED);
    CU_ASSERT_EQUAL(ofccl_reduce_scatter(c, a, b, 4, OFCCL_F32, sum, &req), OFCCL_ERR_ABORTED);
    CU_ASSERT_EQUAL(ofccl_bucket_allgather(c, &t, 1, OFCCL_F32, &req), OFCCL_ERR_ABORTED);
    CU_ASSERT_EQUAL(ofccl_bucket_reduce_scatter(c, &t, 1, OFCCL_F32, sum, &req), OFCCL_ERR_ABORTED);
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(c, 64, &p), OFCCL_ERR_ABORTED);
    CU_ASSERT_PTR_NULL(req);
    CU_ASSERT_PTR_NULL(p);
    /* The other communicator of the context is not affected. */
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(c), 0);
    CU_ASSERT_EQUAL(ofccl_progress(ctx), 0);
    /* A destroyed communicator is a stale handle. */
    CU_ASSERT_EQUAL(ofccl_comm_rank(c, &v), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_barrier(c), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_allgather(c, a, b, 4, OFCCL_F32, &req), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_comm_abort(c), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(c), OFCCL_ERR_STATE);
    CU_ASSERT_PTR_NOT_NULL(ofccl_comm_last_error(c));
}

int main(int argc, char **argv)
{
    char err[512] = "", prov[64];
    const char *settings[] = {prov, NULL, NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    static const cu_test_t tests[] = {
        {"version, error strings, dtype sizes", test_version_and_strings},
        {"context arguments and stats", test_ctx_arguments},
        {"communicator queries, barrier, shard_range", test_comm_queries},
        {"all-gather: copy, every dtype and memory kind", test_allgather},
        {"reduce-scatter: op on the one input", test_reduce_scatter},
        {"buckets of uneven tensors", test_bucket},
        {"argument errors", test_argument_errors},
        {"eight outstanding requests", test_outstanding},
        {"pool buffers, registration, stats", test_memory},
        {"abort, then every call", test_abort},
        {NULL, NULL},
    };
    int rc, size = 0;

    if (argc > 1)
        provider = argv[1];
    if (argc > 2)
        boot = argv[2];
    snprintf(prov, sizeof(prov), "PROVIDER=%s", provider);
    if (strcmp(boot, "singleton") == 0)
        settings[1] = "BOOT=singleton";
    else if (strcmp(boot, "env") != 0) {
        fprintf(stderr, "usage: test_one_rank PROVIDER [singleton|env]\n");
        return 2;
    }
    rc = ofccl_ctx_create(&p, &ctx);
    if (rc) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    rc = ofccl_comm_world(ctx, &comm);
    if (rc == 0 && (ofccl_comm_size(comm, &size) != 0 || size != 1)) {
        fprintf(stderr, "this test needs a job of one rank, not %d\n", size);
        ofccl_comm_destroy(comm);
        rc = 1;
    }
    if (rc) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    printf("one rank on %s (%s bootstrap)\n", ofccl_ctx_provider(ctx), boot);
    rc = cu_run("one-rank", tests);
    if (ofccl_comm_destroy(comm) != 0 || ofccl_ctx_destroy(ctx) != 0)
        rc = 1;
    /* Stale handles after destruction. */
    ofccl_stats_t st = {.size = sizeof(st)};
    if (ofccl_ctx_stats(ctx, &st) != OFCCL_ERR_STATE || ofccl_ctx_destroy(ctx) != OFCCL_ERR_STATE ||
        ofccl_progress(ctx) != OFCCL_ERR_STATE || ofccl_comm_world(ctx, &comm) != OFCCL_ERR_STATE) {
        fprintf(stderr, "calls on a destroyed context do not return OFCCL_ERR_STATE\n");
        rc = 1;
    }
    return rc;
}
