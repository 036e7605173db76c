/*
 * Communicator churn: many create/destroy cycles with a random pause of 0-2 ms
 * per rank between ofccl_comm_world and ofccl_comm_destroy, so that some rank
 * destroys its communicator while a slower one is still inside
 * ofccl_comm_world. Every call must succeed: creation completes collectively
 * (no rank returns before every rank has mapped what it needs from its peers)
 * and destroy never pulls memory a peer may still be mapping. The second test
 * runs one small all-gather per cycle before the pause and checks it element
 * by element. The transport comes from OFCCL_PROVIDER; the job from mpirun or
 * the TCP rendezvous.
 * Usage: test_churn [cycles]   (default 200)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#define TIME_LIMIT_S 100.0 /* per test: fail (not hang) well inside meson's timeout */

static ofccl_ctx_t *ctx;
static int rank, size, cycles = 200;
static int broken; /* a test failed: ranks are out of step, later tests cannot run */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A different pause on every rank and cycle, the same on every run: 0-2 ms. */
static unsigned pause_us(int cycle, unsigned salt)
{
    uint64_t h =
        ((uint64_t)rank * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)cycle * 0xC2B2AE3D27D4EB4Full) ^ salt;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    /* A quarter of the time none: the race is widest when a rank destroys at once. */
    return h % 4 == 0 ? 0 : (unsigned)(h >> 2) % 2001;
}

static float value(int r, int cycle, size_t i)
{
    return (float)(r * 1000 + cycle % 997) + (float)i / 64.0f;
}

/* One cycle: create, optionally all-gather `count` floats and check them, pause, destroy. */
static int cycle_once(int c, size_t count, float *send, float *recv)
{
    ofccl_comm_t *comm;
    ofccl_req_t *req;
    int rc = ofccl_comm_world(ctx, &comm), rc2;

    if (rc) {
        fprintf(stderr, "rank %d: cycle %d: ofccl_comm_world: %s: %s\n", rank, c,
                ofccl_strerror(rc), ofccl_ctx_last_error(ctx));
        return rc;
    }
    if (count > 0) {
        for (size_t i = 0; i < count; i++)
            send[i] = value(rank, c, i);
        memset(recv, 0xff, count * (size_t)size * sizeof(float)); /* NaN poison */
        rc = ofccl_allgather(comm, send, recv, count, OFCCL_F32, &req);
        if (rc == 0) {
            rc = ofccl_wait(req);
            if (ofccl_req_free(req) != 0 && rc == 0)
                rc = OFCCL_ERR_INTERNAL;
        }
        if (rc)
            fprintf(stderr, "rank %d: cycle %d: all-gather of %zu: %s: %s\n", rank, c, count,
                    ofccl_strerror(rc), ofccl_comm_last_error(comm));
        for (int r = 0; rc == 0 && r < size; r++)
            for (size_t i = 0; i < count; i++)
                if (recv[(size_t)r * count + i] != value(r, c, i)) {
                    fprintf(stderr,
                            "rank %d: cycle %d: all-gather of %zu: element %zu of rank %d is "
                            "%g, expected %g\n",
                            rank, c, count, i, r, recv[(size_t)r * count + i], value(r, c, i));
                    rc = OFCCL_ERR_CORRUPT;
                    break;
                }
    }
    usleep(pause_us(c, count > 0));
    rc2 = ofccl_comm_destroy(comm);
    if (rc2)
        fprintf(stderr, "rank %d: cycle %d: ofccl_comm_destroy: %s: %s\n", rank, c,
                ofccl_strerror(rc2), ofccl_ctx_last_error(ctx));
    return rc ? rc : rc2;
}

static void churn(size_t max_count)
{
    float *send = malloc(max_count ? max_count * sizeof(float) : 1);
    float *recv = malloc(max_count ? max_count * sizeof(float) * (size_t)size : 1);
    double t0 = now_s();
    int c, failed = 0;

    if (broken) {
        CU_FAIL("not run: an earlier test failed and left the ranks out of step");
        return;
    }
    CU_ASSERT_FATAL(send != NULL && recv != NULL);
    for (c = 0; c < cycles && !failed; c++) {
        /* 1..256 elements, varying per cycle (the same on every rank), and every
         * fifth cycle 8-9 Ki elements: past OFCCL_EAGER_BYTES, so both the eager
         * and the descriptor path run right before a destroy. */
        size_t count = max_count == 0 ? 0
                       : c % 5 == 4   ? max_count - (size_t)c % 1024
                                      : 1 + (size_t)(c * 37) % 256;
        if (cycle_once(c, count, send, recv) != 0)
            failed = 1;
        if (now_s() - t0 > TIME_LIMIT_S) {
            fprintf(stderr, "rank %d: only %d of %d cycles done in %.0f s\n", rank, c + 1, cycles,
                    TIME_LIMIT_S);
            failed = 1;
        }
    }
    broken |= failed;
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(c, cycles);
    if (rank == 0)
        printf("\n  %d cycles in %.2f s (%.1f ms each) ", c, now_s() - t0,
               (now_s() - t0) * 1e3 / (c ? c : 1));
    free(send);
    free(recv);
}

static void test_create_destroy(void)
{
    churn(0);
}

static void test_create_allgather_destroy(void)
{
    churn(9216);
}

int main(int argc, char **argv)
{
    char err[512] = "";
    /* A rank that failed leaves the others in ofccl_comm_world: let them fail
     * in seconds, not in the default minute. */
    const char *const settings[] = {"BOOT_TIMEOUT_MS=15000", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    static const cu_test_t tests[] = {
        {"create, pause 0-2 ms, destroy", test_create_destroy},
        {"create, all-gather, pause 0-2 ms, destroy", test_create_allgather_destroy},
        {NULL, NULL},
    };
    ofccl_comm_t *comm;
    int rc;

    if (argc > 1)
        cycles = atoi(argv[1]);
    if (cycles < 1 || cycles > 100000) {
        fprintf(stderr, "usage: test_churn [cycles 1..100000]\n");
        return 2;
    }
    rc = ofccl_ctx_create(&p, &ctx);
    if (rc) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    /* Rank and size without keeping a communicator open across the tests. */
    rc = ofccl_comm_world(ctx, &comm);
    if (rc == 0) {
        ofccl_comm_rank(comm, &rank);
        ofccl_comm_size(comm, &size);
        rc = ofccl_barrier(comm);
        if (ofccl_comm_destroy(comm) != 0)
            rc = rc ? rc : 1;
    }
    if (rc) {
        fprintf(stderr, "first communicator: %s: %s\n", ofccl_strerror(rc),
                ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    if (rank == 0)
        printf("churn: %d ranks on %s, %d cycles per test\n", size, ofccl_ctx_provider(ctx),
               cycles);
    rc = cu_run("churn", tests);
    if (ofccl_ctx_destroy(ctx) != 0)
        rc = 1;
    return rc;
}
