/* What the simulated-host drivers share: joining the world communicator
 * (the TCP rendezvous variables come from cluster.sh), running one CUnit
 * suite on it, and tearing both down. */
#ifndef OFCCL_TEST_HOSTS_H
#define OFCCL_TEST_HOSTS_H

#include <stdio.h>

#include "cu.h"
#include "ofccl.h"

static ofccl_ctx_t *ctx;
static ofccl_comm_t *comm;
static int rank, size;

/* Exit status of the whole rank: 0 when every test passed. `settings`
 * (NULL-terminated "NAME=value", or NULL) override the environment. */
static int hosts_run_suite(const char *suite, const cu_test_t *tests, int timeout_ms,
                           const char *const *settings)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    int rc;

    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    if ((rc = ofccl_comm_world(ctx, &comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    if (timeout_ms > 0)
        ofccl_comm_set_timeout(comm, (uint64_t)timeout_ms);
    rc = cu_run(suite, tests);
    if (ofccl_comm_destroy(comm) || ofccl_ctx_destroy(ctx))
        rc = 1;
    return rc;
}

#endif
