/*
 * The context and world communicator of a multi-rank CUnit test program:
 * world_open creates both (and sets rank and size), world_close tears them
 * down, world_run does both around one suite. The tests read ctx, comm,
 * rank and size. Programs that never open a context include cu.h alone.
 */
#ifndef OFCCL_TEST_WORLD_H
#define OFCCL_TEST_WORLD_H

#include <stdbool.h>
#include <stdio.h>

#include "cu.h"
#include "ofccl.h"

static ofccl_ctx_t *ctx;
static ofccl_comm_t *comm;
static int rank, size;

/* Creates the context from `params` (NULL: the defaults; an error buffer is
 * added when it has none) and its world communicator. 0, or 1 after saying
 * why on stderr (the context is then destroyed). */
static inline int world_open(const ofccl_ctx_params_t *params)
{
    char err[512] = "";
    ofccl_ctx_params_t p = params ? *params : (ofccl_ctx_params_t){.size = sizeof(p)};
    int rc;

    if (p.errbuf == NULL) {
        p.errbuf = err;
        p.errlen = sizeof(err);
    }
    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), p.errbuf);
        return 1;
    }
    if ((rc = ofccl_comm_world(ctx, &comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s: %s\n", ofccl_strerror(rc),
                ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    return 0;
}

/* Destroys the communicator and the context, after a barrier when `barrier`
 * is set (so nobody tears down while a peer still signals it). 0 when every
 * step worked, else 1. */
static inline int world_close(bool barrier)
{
    int rc = barrier && ofccl_barrier(comm) != 0;

    if (ofccl_comm_destroy(comm) != 0 || ofccl_ctx_destroy(ctx) != 0)
        rc = 1;
    return rc;
}

/* Default context and world communicator; rank 0 prints "name: N ranks,
 * provider"; runs `tests` as suite `name`. 0 when all passed and the
 * teardown worked. */
static inline int world_run(const char *name, const cu_test_t *tests)
{
    int rc;

    if (world_open(NULL) != 0)
        return 1;
    if (rank == 0)
        printf("%s: %d ranks, %s\n", name, size, ofccl_ctx_provider(ctx));
    rc = cu_run(name, tests);
    if (world_close(true) != 0)
        rc = 1;
    return rc;
}

#endif
