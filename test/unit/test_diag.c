/*
 * Messages of calls that fail locally, on one rank (singleton bootstrap):
 * each says what happened, never what an earlier call left behind.
 *  - a barrier (or collective, or allocation) after ofccl_comm_abort says the
 *    communicator was aborted;
 *  - ofccl_buffer_alloc(SIZE_MAX) names the size asked for (no wrapped "0");
 *  - ofccl_shard_range with a NULL output replaces the last error.
 * Usage: test_diag <provider>
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cu.h"
#include "ofccl.h"

static const char *provider = "local";
static ofccl_ctx_t *ctx;
static ofccl_comm_t *comm;

static int open_world(void)
{
    char prov[64], err[512];
    const char *settings[] = {"BOOT=singleton", prov, NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};

    snprintf(prov, sizeof(prov), "PROVIDER=%s", provider);
    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "ctx: %s\n", err);
        return -1;
    }
    if (ofccl_comm_world(ctx, &comm) != 0) {
        fprintf(stderr, "comm: %s\n", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return -1;
    }
    return 0;
}

static void close_world(void)
{
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

static void test_after_abort(void)
{
    ofccl_req_t *req = NULL;
    float x[4] = {1, 2, 3, 4}, y[4];
    void *buf = NULL;

    CU_ASSERT_EQUAL_FATAL(open_world(), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_abort(comm), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), OFCCL_ERR_ABORTED);
    printf("barrier after abort: %s\n", ofccl_comm_last_error(comm));
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "ofccl_barrier"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "aborted"));
    CU_ASSERT_EQUAL(ofccl_allgather(comm, x, y, 4, OFCCL_F32, &req), OFCCL_ERR_ABORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "aborted"));
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 4096, &buf), OFCCL_ERR_ABORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "ofccl_buffer_alloc"));
    close_world();
}

static void test_alloc_too_big(void)
{
    char want[32];
    void *buf = NULL;

    CU_ASSERT_EQUAL_FATAL(open_world(), 0);
    snprintf(want, sizeof(want), "%zu", (size_t)SIZE_MAX);
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, SIZE_MAX, &buf), OFCCL_ERR_NO_MEMORY);
    CU_ASSERT_PTR_NULL(buf);
    printf("buffer_alloc(SIZE_MAX): %s\n", ofccl_comm_last_error(comm));
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), want));
    /* Not sticky: the communicator stays usable. */
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 4096, &buf), 0);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, buf), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    close_world();
}

static void test_shard_range_null(void)
{
    size_t off = 7, n = 7;
    void *buf = NULL;

    CU_ASSERT_EQUAL_FATAL(open_world(), 0);
    /* Leave an unrelated error behind first. */
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 0, &buf), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_shard_range(comm, 10, NULL, &n), OFCCL_ERR_INVALID_ARG);
    printf("shard_range(NULL): %s\n", ofccl_comm_last_error(comm));
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "ofccl_shard_range"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "offset"));
    CU_ASSERT_EQUAL(ofccl_shard_range(comm, 10, &off, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "shard_count"));
    CU_ASSERT_EQUAL(ofccl_shard_range(comm, 10, &off, &n), 0);
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT_EQUAL(n, 10);
    close_world();
}

/* Bytes move (all-gather) but are never reduced; the communicator stays usable. */
static void test_u8(void)
{
    uint8_t in[5] = {1, 2, 250, 4, 5}, out[5] = {0};
    ofccl_req_t *req = NULL;
    int ok = 1;

    CU_ASSERT_EQUAL_FATAL(open_world(), 0);
    CU_ASSERT_EQUAL(
        ofccl_reduce_scatter(comm, in, out, 5, OFCCL_U8, (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req),
        OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "u8"));
    CU_ASSERT_EQUAL(ofccl_allgather(comm, in, out, 5, OFCCL_U8, &req), 0);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    for (int k = 0; k < 5; k++)
        ok &= out[k] == in[k];
    CU_ASSERT_TRUE(ok);
    close_world();
}

/* Context memory: usable by collectives at once, freed once, refused while registered. */
static void test_mem_alloc(void)
{
    float *a = NULL, *b = NULL;
    ofccl_mem_t *mh = NULL;
    ofccl_req_t *req = NULL;
    int ok = 1;

    CU_ASSERT_EQUAL_FATAL(open_world(), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_alloc(ctx, 4096, (void **)&a), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_alloc(ctx, 4096, (void **)&b), 0);
    CU_ASSERT_EQUAL((uintptr_t)a % 4096, 0);
    for (int k = 0; k < 1024; k++)
        a[k] = (float)k;
    CU_ASSERT_EQUAL(ofccl_allgather(comm, a, b, 1024, OFCCL_F32, &req), 0);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    for (int k = 0; k < 1024; k++)
        ok &= b[k] == (float)k;
    CU_ASSERT_TRUE(ok);
    CU_ASSERT_EQUAL(ofccl_mem_free(ctx, a + 1), OFCCL_ERR_INVALID_ARG); /* not the start */
    CU_ASSERT_EQUAL(ofccl_mem_register(ctx, a, 64, &mh), 0);
    CU_ASSERT_EQUAL(ofccl_mem_free(ctx, a), OFCCL_ERR_BUSY);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(mh), 0);
    CU_ASSERT_EQUAL(ofccl_mem_free(ctx, a), 0);
    CU_ASSERT_EQUAL(ofccl_mem_free(ctx, a), OFCCL_ERR_INVALID_ARG); /* twice */
    CU_ASSERT_EQUAL(ofccl_mem_alloc(ctx, 0, (void **)&a), OFCCL_ERR_INVALID_ARG);
    /* b is left for ofccl_ctx_destroy to release (LeakSanitizer checks). */
    close_world();
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"calls after an abort say it was aborted", test_after_abort},
        {"buffer_alloc(SIZE_MAX) names the size", test_alloc_too_big},
        {"shard_range with a NULL output sets the last error", test_shard_range_null},
        {"u8 moves but is never reduced", test_u8},
        {"ofccl_mem_alloc memory needs no staging and is freed once", test_mem_alloc},
        {NULL, NULL},
    };
    if (argc > 1)
        provider = argv[1];
    return cu_run("diag", tests);
}
