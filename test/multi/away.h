/*
 * Shared by the tests in which one rank posts and then stays away (the pull
 * reduce-scatter's grains, test_take.c; the all-gather's takes,
 * test_gather_take.c): the pause, a counter of ofccl_stats_t read on every
 * rank, and the world communicator they run on, set up by away_setup.
 */
#ifndef OFCCL_TEST_AWAY_H
#define OFCCL_TEST_AWAY_H

#include <stdio.h>
#include <time.h>

#include "cu.h"
#include "ofccl.h"

static ofccl_ctx_t *ctx;
static ofccl_comm_t *comm;
static int rank, size;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Every rank's `mine`, gathered (plain memory: staged, small: eager). */
static void gather_u64(uint64_t mine, uint64_t *all)
{
    ofccl_req_t *req = NULL;

    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, &mine, all, 8, OFCCL_U8, &req), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
}

/* Context and world communicator; runs `tests` as suite `name`; 0 when all
 * passed and the teardown worked. */
static int away_run(const char *name, const cu_test_t *tests)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    int rc;

    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    if ((rc = ofccl_comm_world(ctx, &comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    if (rank == 0)
        printf("%s: %d ranks, %s\n", name, size, ofccl_ctx_provider(ctx));
    rc = cu_run(name, tests);
    if (ofccl_barrier(comm) || ofccl_comm_destroy(comm) || ofccl_ctx_destroy(ctx))
        rc = 1;
    return rc;
}

#endif
