/*
 * Nothing hangs a GPU caller (docs/reliability.md, "GPU collectives"): rank 1
 * SIGKILLed, or ending with _exit(0), right before a collective (all-gather,
 * reduce-scatter, broadcast, bucketed all-gather, weight push); rank 1 alive
 * but never posting (a stalled peer, with a 2 s deadline); and the
 * communicator aborted from another thread while the stream waits. The
 * "-staged" cases run the ranks as two hosts, where the all-gather is staged
 * through host memory by the host engine and the stream waits for its end
 * word. The
 * survivors post the collective and then only wait for their stream, as a
 * torch user synchronizing the device does: no ofccl call runs until the
 * stream is released, so only the watcher can release it. Each survivor
 * asserts that its stream went on within 1 s of the death (the deadline or
 * the abort), that ofccl_wait then names rank 1 with the expected code, that
 * the next post fails at once, and that no watcher thread ran before the
 * first stream-ordered post.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "gtest.h"

#define BLOCK 4096 /* bytes per rank */

const char *watch_case; /* the scenario's name: watch-{kill,exit}-{ag,rs,bc,bucket,push}, ... */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool is(const char *suffix)
{
    size_t n = strlen(watch_case), k = strlen(suffix);

    return n >= k && strcmp(watch_case + n - k, suffix) == 0;
}

/* The collective of the scenario, posted on the communicator's stream. */
static int post(ofccl_comm_t *comm, int rank, int n, char *buf, void **shard,
                ofccl_push_plan_t *plan, ofccl_req_t **req)
{
    if (is("-rs"))
        return ofccl_reduce_scatter(comm, buf, buf + (size_t)rank * BLOCK, BLOCK / 4, OFCCL_F32,
                                    (ofccl_redop_t){OFCCL_OP_SUM, 1}, req);
    if (is("-bc"))
        return ofccl_broadcast(comm, buf, (size_t)n * BLOCK, OFCCL_U8, 0, req);
    if (is("-bucket")) {
        size_t off, len;
        ofccl_tensor_t t[2];
        ofccl_shard_range(comm, (size_t)n * BLOCK / 2, &off, &len);
        t[0] = (ofccl_tensor_t){(size_t)n * BLOCK / 2, buf, buf + off};
        t[1] = (ofccl_tensor_t){(size_t)n * BLOCK / 2, buf + (size_t)n * BLOCK / 2,
                                buf + (size_t)n * BLOCK / 2 + off};
        return ofccl_bucket_allgather(comm, t, 2, OFCCL_U8, req);
    }
    if (is("-push"))
        return ofccl_push_bucket(plan, 0, shard, NULL, 0, req);
    return ofccl_allgather(comm, buf + (size_t)rank * BLOCK, buf, BLOCK, OFCCL_U8, req);
}

/* Every rank sends its third of one tensor and receives the whole. */
static int make_plan(ofccl_comm_t *comm, int n, ofccl_push_plan_t **plan)
{
    static const int all[] = {0, 1, 2, 3, 4, 5, 6, 7};
    size_t count = (size_t)n * BLOCK;
    ofccl_push_spec_t sp = {.size = sizeof(sp),
                            .nsenders = n,
                            .senders = all,
                            .nreceivers = n,
                            .receivers = all,
                            .ntensors = 1,
                            .counts = &count,
                            .gpu = 1};

    return ofccl_push_plan_create(comm, &sp, plan);
}

static void *abort_later(void *arg)
{
    usleep(300000);
    ofccl_comm_abort(arg);
    return NULL;
}

int gpu_watch(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    bool staged = is("-staged"), abort_it = is("-abort");
    bool stall = is("-stall") || strstr(watch_case, "-stall-") != NULL;
    int n, rc, done = 0, want, local;
    char *buf = NULL;
    void *shard[1] = {NULL};
    ofccl_push_plan_t *plan = NULL;
    ofccl_req_t *req = NULL, *again = NULL;
    ofccl__gpu_stream_t s;
    ofccl__gpu_event_t ev;
    ofccl__err_t e;
    pthread_t th;
    double t0, waited;

    if (gpu_up(rank) || ofccl_comm_size(comm, &n) != 0 || ofccl_comm_local_rank(comm, &local) != 0)
        return 70;
    if (staged) /* the library takes its host's local rank's GPU */
        dev = local % ofccl__gpu_device_count(gpu);
    ofccl_comm_set_timeout(comm, stall ? 2000 : 20000);
    /* Across hosts the GPU memory is plain device memory, staged by the host
     * engine; on one host, the peer class's pool. */
    if (staged && (buf = dmalloc((size_t)n * BLOCK)) == NULL)
        return 71;
    if ((!staged && ofccl_gpu_buffer_alloc(comm, (size_t)n * BLOCK, (void **)&buf) != 0) ||
        ofccl__gpu_stream_create(gpu, dev, &s, &e) != 0 ||
        ofccl__gpu_event_create(gpu, dev, false, &ev, &e) != 0 ||
        ofccl_comm_set_stream(comm, s) != 0 ||
        (is("-push") && (make_plan(comm, n, &plan) != 0 || (shard[0] = dmalloc(BLOCK)) == NULL)))
        return printf("rank %d: setup: %s\n", rank, ofccl_comm_last_error(comm)), 71;
    if (ctx->thread_on)
        return printf("rank %d: a watcher runs before any stream-ordered request\n", rank), 72;
    /* Across hosts the GPU state is set up by the first GPU collective (a
     * collective step): one before anyone dies. */
    if (staged && (post(comm, rank, n, buf, shard, plan, &req) != 0 || ofccl_wait(req) != 0 ||
                   ofccl_req_free(req) != 0))
        return printf("rank %d: first all-gather: %s\n", rank, ofccl_comm_last_error(comm)), 71;
    ofccl_barrier(comm);
    if (rank == 1) {
        if (strstr(watch_case, "-exit-"))
            _exit(0);
        if (strstr(watch_case, "-kill-"))
            raise(SIGKILL);
        /* Stalled: alive, never posting, until the others have given up. */
        sleep(4);
        return 0;
    }
    if (abort_it)
        pthread_create(&th, NULL, abort_later, comm);
    t0 = now_s();
    if ((rc = post(comm, rank, n, buf, shard, plan, &req)) != 0)
        return printf("rank %d: post: %s\n", rank, ofccl_comm_last_error(comm)), 73;
    if (!ctx->thread_on)
        return printf("rank %d: no watcher after a stream-ordered post\n", rank), 74;
    /* Only the GPU from here: the stream goes on once the watcher releases it. */
    ofccl__gpu_event_record(gpu, dev, ev, s, &e);
    while ((done = ofccl__gpu_event_query(gpu, dev, ev, &e)) == 0 && now_s() < t0 + 10)
        usleep(1000);
    waited = now_s() - t0;
    if (abort_it)
        pthread_join(th, NULL);
    rc = ofccl_wait(req);
    want = stall ? OFCCL_ERR_TIMEOUT : abort_it ? OFCCL_ERR_ABORTED : OFCCL_ERR_REMOTE_ERROR;
    printf("rank %d: %s: stream released after %.3f s; then %s: %s\n", rank, watch_case, waited,
           ofccl_strerror(rc), ofccl_comm_last_error(comm));
    ofccl_req_free(req);
    if (done != 1 || waited > (stall ? 3.5 : abort_it ? 1.3 : 1.0) || (stall && waited < 1.5))
        return printf("rank %d: the stream was not released in time\n", rank), 75;
    if (rc != want || (!abort_it && strstr(ofccl_comm_last_error(comm), "rank 1") == NULL))
        return printf("rank %d: expected %s naming rank 1\n", rank, ofccl_strerror(want)), 76;
    /* The communicator is failed: the next post says so at once. */
    rc = post(comm, rank, n, buf, shard, plan, &again);
    if (rc != want || again != NULL)
        return printf("rank %d: the next post gave %s\n", rank, ofccl_strerror(rc)), 77;
    if (plan != NULL && ofccl_push_plan_destroy(plan) != 0)
        return 78;
    if (shard[0] != NULL)
        ofccl__gpu_mem_free(gpu, dev, shard[0]);
    if (staged)
        ofccl__gpu_mem_free(gpu, dev, buf);
    return 0;
}
