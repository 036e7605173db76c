/*
 * Private to the PMIx bootstrap: what pmix.c (discovery and exchange),
 * pmix_hosts.c (the host table) and pmix_events.c (failure events) share.
 */
#ifndef OFCCL_BOOTSTRAP_PMIX_IMPL_H
#define OFCCL_BOOTSTRAP_PMIX_IMPL_H

#include <pmix.h>

#include "boot.h"

struct pmix_watch;

typedef struct pmix_boot {
    pmix_proc_t me;
    pmix_proc_t all;          /* the whole namespace: fences and job-level keys */
    struct pmix_watch *watch; /* failure events (pmix_events.c); NULL: not watched */
} pmix_boot_t;

int ofccl__pmix_watch(ofccl__boot_t *b, ofccl__boot_dead_fn dead, void *arg, ofccl__err_t *e);
void ofccl__pmix_unwatch(ofccl__boot_t *b);

/* Integer job data of any integer type as u64; negatives rejected. 0 or -1. */
int ofccl__pmix_value_u64(const pmix_value_t *v, uint64_t *out);
/* Every rank's `len` bytes (at most `slot`), into out[r * slot], lens[r]. */
int ofccl__pmix_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                          size_t *lens, ofccl__err_t *e);
/* b->host_of / nhosts (and host_names where the job data has them). */
int ofccl__pmix_hosts(ofccl__boot_t *b, pmix_boot_t *pb, ofccl__err_t *e);

#endif
