/*
 * Singleton bootstrap: one rank, nobody to talk to. Used when a program is
 * started by hand with no launcher, so that a one-rank job needs no setup.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot.h"
#include "util.h"

static int singleton_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                               size_t *lens, ofccl__err_t *e)
{
    if (len > slot || (len > 0 && (in == NULL || out == NULL)) || lens == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allgather: %zu bytes do not fit a %zu-byte slot", len, slot);
    if (len > 0 && out != in)
        memmove(out, in, len);
    lens[0] = len;
    b->seq++;
    return 0;
}

static int singleton_barrier(ofccl__boot_t *b, ofccl__err_t *e)
{
    return 0;
}

static void singleton_finalize(ofccl__boot_t *b) {}

static const ofccl__boot_ops_t singleton_ops = {
    .size = sizeof(ofccl__boot_ops_t),
    .name = "singleton",
    .allgather = singleton_allgather,
    .barrier = singleton_barrier,
    .finalize = singleton_finalize,
    .watch = ofccl__boot_watch_none,
    .unwatch = ofccl__boot_unwatch_none,
    .publish = ofccl__boot_publish_none,
    .get = ofccl__boot_get_none,
    .allreduce = ofccl__boot_allreduce_none,
};

int ofccl__boot_singleton_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e)
{
    b->host_of = calloc(1, sizeof(*b->host_of));
    if (b->host_of == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory opening the singleton bootstrap");
    b->nhosts = 1;
    b->ops = &singleton_ops;
    b->rank = 0;
    b->size = 1;
    b->local_rank = 0;
    b->local_size = 1;
    if (gethostname(b->hostname, sizeof(b->hostname) - 1) != 0)
        ofccl__strlcpy(b->hostname, "localhost", sizeof(b->hostname));
    b->hostname[sizeof(b->hostname) - 1] = '\0';
    ofccl__strlcpy(b->job, "singleton", sizeof(b->job));
    b->impl = NULL;
    return 0;
}
