/* Shared by test_one_rank.c (the API surface at one rank) and
 * one_rank_coll.c (its collectives, element by element). */
#ifndef OFCCL_TEST_MULTI_ONE_RANK_H
#define OFCCL_TEST_MULTI_ONE_RANK_H

#include <stddef.h>

#include "ofccl.h"

extern const char *provider;
extern ofccl_ctx_t *ctx;
extern ofccl_comm_t *comm;

/* Element counts the tests walk (0, 1, 2, 7, 31, 1031, 65537). */
enum { NCOUNTS = 7 };
extern const size_t counts[NCOUNTS];
/* Bytes per element of each dtype, written down here, not asked of the library. */
extern const size_t esz[OFCCL_DTYPE_COUNT];

/* Test, wait and free a request completed at post time; its status. */
int finish(ofccl_req_t *req);

void test_allgather(void);
void test_reduce_scatter(void);
void test_bucket(void);

#endif
