/* Shared by outside.c (the API walks, main) and outside_coll.c (the random
 * sequence of collectives and its checks). Built only against ofccl.h. */
#ifndef OFCCL_TEST_OUTSIDE_H
#define OFCCL_TEST_OUTSIDE_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <ofccl.h>

#define MAX_OUT 4        /* requests outstanding at once */
#define MAX_TENSORS 6    /* tensors per bucket */
#define WAIT_LIMIT_S 120 /* a request not done by then is a failure, not a hang */

enum { AG, RS, BAG, BRS, KINDS };

extern ofccl_ctx_t *ctx;
extern ofccl_comm_t *comm;
extern int rank, size;
extern unsigned long failures;
extern unsigned long long checked, done_by_kind[KINDS]; /* elements compared; collectives done */
extern uint64_t rng_s;                                  /* the seeded sequence's state */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (failures++ < 20) {                                                                     \
            fprintf(stderr, "rank %d: ", rank);                                                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)
#define EXPECT_RC(call, want)                                                                      \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (want))                                                                         \
            FAIL("%s:%d: %s returned %d (%s), expected %d (%s)", __FILE__, __LINE__, #call, rc_,   \
                 ofccl_strerror(rc_), (want), ofccl_strerror(want));                               \
    } while (0)
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL("%s:%d: expected %s", __FILE__, __LINE__, #cond);                                 \
    } while (0)

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* First element and length of rank r's shard of a count-element tensor. */
void shard_of(size_t count, int r, size_t *off, size_t *len);
/* The seeded random sequence of ncoll collectives, every result checked. */
int run_sequence(unsigned ncoll, size_t max_elems);

#endif
