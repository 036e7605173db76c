/*
 * How a rank waits, with ranks forked by the test itself (TCP bootstrap):
 *  - the progress rule: two communicators waited in opposite orders on two
 *    ranks complete (waiting on one drives every communicator of the context);
 *  - waiting on a stopped peer until the deadline costs little CPU (a waiting
 *    call naps once nothing has moved for OFCCL_SPIN_US);
 *  - after a rank is killed, the survivors' message names that rank and its
 *    host, and never a rank whose data arrived.
 * Usage: test_waiting <provider>
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Rank r's block: element i is r * 1e6 + i (exact in f32 below 2^24). */
static void fill(float *x, size_t n, int r, int salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(r * 1000000 + salt * 100000 + (int)(i % 99991));
}

static int check(const float *out, size_t n, int size, int salt)
{
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++)
            if (out[(size_t)r * n + i] != (float)(r * 1000000 + salt * 100000 + (int)(i % 99991))) {
                fprintf(stderr, "salt %d: block %d element %zu is %g\n", salt, r, i,
                        (double)out[(size_t)r * n + i]);
                return 1;
            }
    return 0;
}

/* ---- two communicators, posted and waited in opposite orders ---- */
enum { ORDER_COUNT = 256 << 10 }; /* 1 MiB of f32 per rank: many progress passes */

static int opposite_orders(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *a)
{
    ofccl_comm_t *b = NULL, *comms[2];
    ofccl_req_t *req[2] = {NULL, NULL};
    float *in[2], *out[2];
    int rc = 0, size;

    if (ofccl_comm_world(ctx, &b) != 0) {
        fprintf(stderr, "rank %d: second comm: %s\n", rank, ofccl_ctx_last_error(ctx));
        return 30;
    }
    comms[0] = a;
    comms[1] = b;
    ofccl_comm_size(a, &size);
    for (int k = 0; k < 2; k++) {
        ofccl_comm_set_timeout(comms[k], 10000); /* the old rule hung until here */
        in[k] = malloc(ORDER_COUNT * sizeof(float));
        out[k] = calloc((size_t)size * ORDER_COUNT, sizeof(float));
        fill(in[k], ORDER_COUNT, rank, k);
    }
    /* Rank 0 posts and waits A then B; rank 1 B then A. */
    for (int j = 0; j < 2 && rc == 0; j++) {
        int k = rank == 0 ? j : 1 - j;
        if (ofccl_allgather(comms[k], in[k], out[k], ORDER_COUNT, OFCCL_F32, &req[k]) != 0)
            rc = 31;
    }
    for (int j = 0; j < 2 && rc == 0; j++) {
        int k = rank == 0 ? j : 1 - j;
        int w = ofccl_wait(req[k]);
        if (w != 0) {
            fprintf(stderr, "rank %d: wait on comm %c: %s: %s\n", rank, 'A' + k, ofccl_strerror(w),
                    ofccl_comm_last_error(comms[k]));
            rc = 32;
        }
    }
    for (int k = 0; k < 2; k++) {
        if (rc == 0 && check(out[k], ORDER_COUNT, size, k) != 0)
            rc = 33;
        if (req[k] != NULL)
            ofccl_req_free(req[k]);
        free(in[k]);
        free(out[k]);
    }
    if (ofccl_comm_destroy(b) != 0)
        rc = rc ? rc : 34;
    return rc;
}

static void test_opposite_orders(void)
{
    int st[FORK_MAX];

    nranks = 2;
    run(opposite_orders, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(exited_ok(st[1]));
}

/* ---- waiting on a stopped peer ---- */
#define IDLE_WAIT_MS 10000

static int stopped_peer(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_req_t *req;
    float *in, *out;
    double t0, c0, cpu, took;
    int rc;

    (void)ctx;
    if (rank == 1) {
        raise(SIGSTOP); /* rank 0 kills it when done */
        return 0;
    }
    usleep(200000); /* let rank 1 stop */
    ofccl_comm_set_timeout(comm, IDLE_WAIT_MS);
    in = calloc(ORDER_COUNT, sizeof(float));
    out = calloc(2 * (size_t)ORDER_COUNT, sizeof(float));
    if (ofccl_allgather(comm, in, out, ORDER_COUNT, OFCCL_F32, &req) != 0)
        return 40;
    t0 = now_s();
    c0 = cpu_s();
    rc = ofccl_wait(req);
    cpu = cpu_s() - c0;
    took = now_s() - t0;
    printf("stopped peer (%s): %s after %.2f s, %.3f s of CPU: %s\n", provider, ofccl_strerror(rc),
           took, cpu, ofccl_comm_last_error(comm));
    kill(fork_pid[1], SIGKILL);
    ofccl_req_free(req);
    free(in);
    free(out);
    if (rc != OFCCL_ERR_TIMEOUT || took < IDLE_WAIT_MS / 1000.0 - 0.5)
        return 41;
    if (cpu >= 1.0)
        return 42;
    if (strstr(ofccl_comm_last_error(comm), "rank 1 on") == NULL)
        return 43;
    return 0;
}

static void test_stopped_peer(void)
{
    int st[FORK_MAX];

    nranks = 2;
    run(stopped_peer, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(WIFSIGNALED(st[1]) || exited_ok(st[1]));
}

/* ---- three ranks, one killed: name it, not the survivor ---- */
static int one_killed(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_req_t *req;
    float *in, *out;
    char other[32];
    const char *msg;
    int rc;

    (void)ctx;
    if (rank == 2)
        raise(SIGKILL);
    ofccl_comm_set_timeout(comm, 3000);
    in = calloc(ORDER_COUNT, sizeof(float));
    out = calloc(3 * (size_t)ORDER_COUNT, sizeof(float));
    fill(in, ORDER_COUNT, rank, 0);
    if (ofccl_allgather(comm, in, out, ORDER_COUNT, OFCCL_F32, &req) != 0)
        return 50;
    rc = ofccl_wait(req);
    msg = ofccl_comm_last_error(comm);
    printf("one killed (%s): rank %d got %s: %s\n", provider, rank, ofccl_strerror(rc), msg);
    ofccl_req_free(req);
    free(in);
    free(out);
    snprintf(other, sizeof(other), "rank %d on", 1 - rank);
    if (rc != OFCCL_ERR_TIMEOUT && rc != OFCCL_ERR_REMOTE_ERROR)
        return 51;
    if (strstr(msg, "rank 2 on") == NULL && strstr(msg, "rank 2 (pid") == NULL)
        return 52;
    if (strstr(msg, other) != NULL) /* the survivor's data arrived: never blamed */
        return 53;
    return 0;
}

static void test_one_killed(void)
{
    int st[FORK_MAX];

    nranks = 3;
    run(one_killed, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(exited_ok(st[1]));
    CU_ASSERT_TRUE(WIFSIGNALED(st[2]));
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"two communicators waited in opposite orders", test_opposite_orders},
        {"waiting on a stopped peer costs little CPU", test_stopped_peer},
        {"a killed rank is named, survivors are not", test_one_killed},
        {NULL, NULL},
    };
    if (argc > 1)
        provider = argv[1];
    return cu_run("waiting", tests);
}
