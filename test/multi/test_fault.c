/*
 * Faults between ranks, with ranks forked by the test itself and joined
 * through the TCP bootstrap (a launcher would tear the job down when a rank
 * dies): a peer that never posts (timeout naming it), an abort from another
 * thread while a call blocks, a peer killed with SIGKILL, and collectives
 * posted with different arguments (mismatch naming the field). Each scenario
 * checks the survivors' error, how long it took, and a clean teardown.
 * Usage: test_fault <provider>
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

static int gather(ofccl_comm_t *comm, size_t count, ofccl_req_t **req, float **in, float **out)
{
    *in = calloc(count, 4);
    *out = calloc(count * 2, 4);
    return ofccl_allgather(comm, *in, *out, count, OFCCL_F32, req);
}

/* ---- a peer that never posts: TIMEOUT naming it, within the deadline ---- */
static int never_posts(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_req_t *req;
    float *in, *out;
    double t0;
    int rc;

    (void)ctx;
    if (rank == 1) {
        sleep(3); /* alive but not participating */
        return 0;
    }
    ofccl_comm_set_timeout(comm, 1500);
    if (gather(comm, 1000, &req, &in, &out) != 0)
        return 20;
    t0 = now_s();
    rc = ofccl_wait(req);
    printf("never-posts: rank 0 got %s after %.2f s: %s\n", ofccl_strerror(rc), now_s() - t0,
           ofccl_comm_last_error(comm));
    if (rc != OFCCL_ERR_TIMEOUT || now_s() - t0 > 3.5 ||
        strstr(ofccl_comm_last_error(comm), "rank 1") == NULL)
        return 21;
    ofccl_req_free(req);
    /* Sticky: the next call says so at once. */
    if (ofccl_barrier(comm) != OFCCL_ERR_TIMEOUT)
        return 22;
    free(in);
    free(out);
    return 0;
}

static void test_never_posts(void)
{
    int st[2];
    run(never_posts, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(exited_ok(st[1]));
}

/* ---- abort from another thread while a call blocks ---- */
static void *aborter(void *arg)
{
    usleep(300000);
    ofccl_comm_abort(arg);
    return NULL;
}

static int abort_wait(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    pthread_t th;
    ofccl_req_t *req;
    float *in, *out;
    double t0;
    int rc, rc2;

    (void)ctx;
    if (rank == 1) {
        sleep(2);
        return 0;
    }
    if (gather(comm, 1000, &req, &in, &out) != 0)
        return 30;
    pthread_create(&th, NULL, aborter, comm);
    t0 = now_s();
    rc = ofccl_wait(req);
    pthread_join(th, NULL);
    printf("abort: rank 0 got %s after %.2f s\n", ofccl_strerror(rc), now_s() - t0);
    if (rc != OFCCL_ERR_ABORTED || now_s() - t0 > 1.5)
        return 31;
    ofccl_req_free(req);
    /* A blocked barrier returns promptly too, and every later call reports the abort. */
    pthread_create(&th, NULL, aborter, comm);
    rc2 = ofccl_barrier(comm);
    pthread_join(th, NULL);
    if (rc2 != OFCCL_ERR_ABORTED ||
        ofccl_allgather(comm, in, out, 10, OFCCL_F32, &req) != OFCCL_ERR_ABORTED)
        return 32;
    free(in);
    free(out);
    return 0;
}

static void test_abort(void)
{
    int st[2];
    run(abort_wait, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(exited_ok(st[1]));
}

/* ---- a peer killed with SIGKILL ---- */
static int peer_dies(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_req_t *req;
    float *in, *out;
    double t0;
    int rc;

    (void)ctx;
    if (rank == 1)
        raise(SIGKILL);
    usleep(200000);
    ofccl_comm_set_timeout(comm, 3000);
    if (gather(comm, 100000, &req, &in, &out) != 0)
        return 40;
    t0 = now_s();
    rc = ofccl_wait(req);
    printf("peer-dies: rank 0 got %s after %.2f s: %s\n", ofccl_strerror(rc), now_s() - t0,
           ofccl_comm_last_error(comm));
    /* tcp sees the connection drop (REMOTE_ERROR) or the missing descriptor
     * at the deadline (TIMEOUT). */
    if ((rc != OFCCL_ERR_REMOTE_ERROR && rc != OFCCL_ERR_TIMEOUT) || now_s() - t0 > 4.5 ||
        strstr(ofccl_comm_last_error(comm), "1") == NULL)
        return 41;
    /* local and shm watch the peer's process: REMOTE_ERROR long before the deadline. */
    if (exits_seen_at_once() && (rc != OFCCL_ERR_REMOTE_ERROR || now_s() - t0 > 1.0 ||
                                 strstr(ofccl_comm_last_error(comm), "rank 1") == NULL))
        return 42;
    ofccl_req_free(req);
    free(in);
    free(out);
    return 0;
}

static void test_peer_dies(void)
{
    int st[2];
    run(peer_dies, st);
    CU_ASSERT_TRUE(exited_ok(st[0]));
    CU_ASSERT_TRUE(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL);
}

/* ---- mismatched arguments: MISMATCH naming the field, on both ranks ---- */
static int mismatch_kind;

static int mismatch(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    static float big_in[8192], big_out[8192 * 2];
    float in[64] = {0}, out[256] = {0};
    ofccl_req_t *req;
    const char *field = NULL;
    int rc;

    (void)ctx;
    ofccl_comm_set_timeout(comm, 5000);
    switch (mismatch_kind) {
    case 0: /* count */
        rc = ofccl_allgather(comm, in, out, rank ? 17 : 16, OFCCL_F32, &req);
        field = "count";
        break;
    case 1: /* dtype */
        rc = ofccl_allgather(comm, in, out, 16, rank ? OFCCL_BF16 : OFCCL_F32, &req);
        field = "dtype";
        break;
    case 2: /* op */
        rc = ofccl_reduce_scatter(comm, out, in, 16, OFCCL_F32,
                                  (ofccl_redop_t){rank ? OFCCL_OP_AVG : OFCCL_OP_SUM, 1}, &req);
        field = "reduction op";
        break;
    case 4: /* count across the eager threshold: one rank eager, the other not */
        rc = ofccl_allgather(comm, rank ? big_in : in, rank ? big_out : out, rank ? 8192 : 16,
                             OFCCL_F32, &req);
        field = "count";
        break;
    default: /* operation order */
        rc = rank ? ofccl_allgather(comm, in, out, 16, OFCCL_F32, &req)
                  : ofccl_reduce_scatter(comm, out, in, 16, OFCCL_F32,
                                         (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req);
        field = "operation";
        break;
    }
    if (rc != 0)
        return 50;
    rc = ofccl_wait(req);
    printf("mismatch %s: rank %d got %s: %s\n", field, rank, ofccl_strerror(rc),
           ofccl_comm_last_error(comm));
    ofccl_req_free(req);
    if (rc != OFCCL_ERR_MISMATCH || strstr(ofccl_comm_last_error(comm), field) == NULL ||
        strstr(ofccl_comm_last_error(comm), rank ? "rank 0" : "rank 1") == NULL)
        return 51;
    return 0;
}

static void test_mismatch(void)
{
    for (mismatch_kind = 0; mismatch_kind < 5; mismatch_kind++) {
        int st[2];
        run(mismatch, st);
        CU_ASSERT_TRUE(exited_ok(st[0]));
        CU_ASSERT_TRUE(exited_ok(st[1]));
    }
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"a peer that never posts: TIMEOUT naming it", test_never_posts},
        {"abort from another thread", test_abort},
        {"a peer killed with SIGKILL", test_peer_dies},
        {"mismatched count, dtype, op, order, and eager vs not", test_mismatch},
        {NULL, NULL},
    };
    if (argc > 1)
        provider = argv[1];
    return cu_run("fault", tests);
}
