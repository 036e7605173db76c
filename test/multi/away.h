/*
 * Shared by the tests in which one rank posts and then stays away (the pull
 * reduce-scatter's grains, test_take.c; the all-gather's takes,
 * test_gather_take.c): the pause and a gather of one counter from every
 * rank. Their context and world communicator come from world.h (world_run).
 */
#ifndef OFCCL_TEST_AWAY_H
#define OFCCL_TEST_AWAY_H

#include <time.h>

#include "world.h"

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

#endif
