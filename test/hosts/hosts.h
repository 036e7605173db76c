/* What the simulated-host drivers share: one CUnit suite on the world
 * communicator (world.h; the TCP rendezvous variables come from cluster.sh),
 * with a timeout and settings of their own. */
#ifndef OFCCL_TEST_HOSTS_H
#define OFCCL_TEST_HOSTS_H

#include "world.h"

/* Exit status of the whole rank: 0 when every test passed. `settings`
 * (NULL-terminated "NAME=value", or NULL) override the environment. */
static int hosts_run_suite(const char *suite, const cu_test_t *tests, int timeout_ms,
                           const char *const *settings)
{
    ofccl_ctx_params_t p = {.size = sizeof(p), .settings = settings};
    int rc;

    if (world_open(&p) != 0)
        return 1;
    if (timeout_ms > 0)
        ofccl_comm_set_timeout(comm, (uint64_t)timeout_ms);
    rc = cu_run(suite, tests);
    if (world_close(false) != 0)
        rc = 1;
    return rc;
}

#endif
