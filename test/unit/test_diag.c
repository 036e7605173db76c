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

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"calls after an abort say it was aborted", test_after_abort},
        {"buffer_alloc(SIZE_MAX) names the size", test_alloc_too_big},
        {"shard_range with a NULL output sets the last error", test_shard_range_null},
        {NULL, NULL},
    };
    if (argc > 1)
        provider = argv[1];
    return cu_run("diag", tests);
}
