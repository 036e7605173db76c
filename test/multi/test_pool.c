/*
 * Multi-rank: the pool's byte budget and growth, staging depth, the
 * progress thread (requests complete while the caller never calls progress),
 * and no watcher thread where only host memory is used.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "cu.h"
#include "util.h"

static int rank, size;

static int open_world(const char *const *settings, ofccl_ctx_t **ctx, ofccl_comm_t **comm)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    int rc = ofccl_ctx_create(&p, ctx);

    if (rc) {
        fprintf(stderr, "ctx: %s\n", err);
        return rc;
    }
    rc = ofccl_comm_world(*ctx, comm);
    if (rc)
        fprintf(stderr, "comm: %s\n", ofccl_ctx_last_error(*ctx));
    ofccl_comm_rank(*comm, &rank);
    ofccl_comm_size(*comm, &size);
    return rc;
}

static int gather_check(ofccl_comm_t *comm, size_t count)
{
    float *in = malloc(count * 4 + 4), *out = malloc(count * 4 * (size_t)size + 4);
    ofccl_req_t *req;
    int rc, wrong = 0;

    for (size_t j = 0; j < count; j++)
        in[j] = (float)(rank * 1000003 + (int)j % 1000);
    rc = ofccl_allgather(comm, in, out, count, OFCCL_F32, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
        for (int r = 0; r < size && rc == 0; r++)
            for (size_t j = 0; j < count; j++)
                wrong += out[(size_t)r * count + j] != (float)(r * 1000003 + (int)j % 1000);
    }
    free(in);
    free(out);
    return rc ? rc : (wrong ? -1000 : 0);
}

static void test_budget(void)
{
    const char *const settings[] = {"POOL_BYTES=256K", "AG_BUFFERS=1", NULL};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    void *big = NULL;

    CU_ASSERT_EQUAL_FATAL(open_world(settings, &ctx, &comm), 0);
    CU_ASSERT_EQUAL(gather_check(comm, 1000), 0);
    /* 1 MiB of staging does not fit a 256 KiB budget: a clear error ... */
    CU_ASSERT_EQUAL(gather_check(comm, (1u << 20) / 4 / (size_t)size + 1), OFCCL_ERR_OVER_BUDGET);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "OFCCL_POOL_BYTES"));
    CU_ASSERT_EQUAL(ofccl_buffer_alloc(comm, 1u << 20, &big), OFCCL_ERR_OVER_BUDGET);
    CU_ASSERT_PTR_NULL(big);
    /* ... and the communicator stays usable. */
    CU_ASSERT_EQUAL(gather_check(comm, 2000), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

static void test_growth_and_depth(void)
{
    const char *const settings[] = {"AG_BUFFERS=2", NULL};
    ofccl_stats_t st = {.size = sizeof(st)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_req_t *req[3];
    float *in = calloc(4096, 4), *out[3];
    uint64_t grows;

    CU_ASSERT_EQUAL_FATAL(open_world(settings, &ctx, &comm), 0);
    CU_ASSERT_EQUAL(gather_check(comm, 100), 0);
    ofccl_ctx_stats(ctx, &st);
    grows = st.pool_grows;
    CU_ASSERT_EQUAL(gather_check(comm, 50000), 0); /* bigger bucket: staging grows */
    ofccl_ctx_stats(ctx, &st);
    CU_ASSERT_TRUE(st.pool_grows > grows);
    grows = st.pool_grows;
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(gather_check(comm, 40000), 0); /* fits: no more growth */
    ofccl_ctx_stats(ctx, &st);
    CU_ASSERT_EQUAL(st.pool_grows, grows);
    /* Two staging buffers: a third outstanding staged all-gather is refused. */
    for (int k = 0; k < 3; k++)
        out[k] = malloc(4096 * 4 * (size_t)size);
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out[0], 4096, OFCCL_F32, &req[0]), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out[1], 4096, OFCCL_F32, &req[1]), 0);
    CU_ASSERT_EQUAL(ofccl_allgather(comm, in, out[2], 4096, OFCCL_F32, &req[2]), OFCCL_ERR_AGAIN);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "OFCCL_AG_BUFFERS"));
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), OFCCL_ERR_BUSY);
    CU_ASSERT_EQUAL(ofccl_wait(req[0]), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req[0]), 0);
    CU_ASSERT_EQUAL(ofccl_wait(req[1]), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req[1]), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req[1]), OFCCL_ERR_INVALID_ARG); /* double free */
    CU_ASSERT_EQUAL(gather_check(comm, 4096), 0);
    for (int k = 0; k < 3; k++)
        free(out[k]);
    free(in);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

static int req_state(ofccl_ctx_t *ctx, ofccl_req_t *req)
{
    int s;
    ofccl__ctx_lock(ctx);
    s = req->state;
    ofccl__ctx_unlock(ctx);
    return s;
}

static void test_progress_thread(void)
{
    const char *const settings[] = {"PROGRESS_THREAD=1", NULL};
    size_t count = 200000;
    float *in = malloc(count * 4), *out = malloc(count * 4 * (size_t)size);
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_req_t *req;
    uint64_t deadline;
    int wrong = 0;

    CU_ASSERT_EQUAL_FATAL(open_world(settings, &ctx, &comm), 0);
    for (size_t j = 0; j < count; j++)
        in[j] = (float)(rank + (int)(j % 7));
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, count, OFCCL_F32, &req), 0);
    /* The caller computes and never calls into ofccl: the thread must finish it. */
    deadline = ofccl__now_ns() + 20000000000ull;
    while (req_state(ctx, req) == OFCCL__REQ_ACTIVE && ofccl__now_ns() < deadline) {
        volatile double x = 0;
        for (int i = 0; i < 100000; i++)
            x += i * 0.5;
    }
    CU_ASSERT_EQUAL(req_state(ctx, req), OFCCL__REQ_DONE);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    for (int r = 0; r < size; r++)
        for (size_t j = 0; j < count; j++)
            wrong += out[(size_t)r * count + j] != (float)(r + (int)(j % 7));
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
    free(in);
    free(out);
}

/* Threads of this process now (/proc/self/task). */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    while (d != NULL && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

/* The watcher of stream-ordered (GPU) requests starts with the first one: a
 * process that posts only host-memory collectives never has it. */
static void test_no_watcher(void)
{
    size_t count = 4096;
    float *in = malloc(count * 4 * (size_t)size), *out = malloc(count * 4 * (size_t)size);
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_req_t *req;
    int before, wrong = 0;

    CU_ASSERT_EQUAL_FATAL(open_world(NULL, &ctx, &comm), 0);
    for (size_t j = 0; j < count * (size_t)size; j++)
        in[j] = (float)(rank + (int)(j % 5));
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    before = threads();
    for (int k = 0; k < 20; k++) {
        CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, count, OFCCL_F32, &req), 0);
        CU_ASSERT_EQUAL(ofccl_wait(req), 0);
        CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
        CU_ASSERT_EQUAL_FATAL(ofccl_reduce_scatter(comm, in, out, count, OFCCL_F32,
                                                   (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req),
                              0);
        CU_ASSERT_EQUAL(ofccl_wait(req), 0);
        CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
        for (size_t j = 0; j < count; j++) { /* block `rank` of every rank's input, summed */
            int want = 0;
            for (int r = 0; r < size; r++)
                want += r + (int)(((size_t)rank * count + j) % 5);
            wrong += out[j] != (float)want;
        }
    }
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(ctx->thread_on, 0);
    CU_ASSERT_EQUAL(threads(), before);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
    free(in);
    free(out);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"pool budget: clear error, communicator usable", test_budget},
        {"staging grows only when needed; depth bounds outstanding", test_growth_and_depth},
        {"progress thread completes requests on its own", test_progress_thread},
        {"host-memory collectives start no watcher thread", test_no_watcher},
        {NULL, NULL},
    };
    return cu_run("pool", tests);
}
