/*
 * Private to the PMIx bootstrap: what pmix.c (discovery and exchange) and
 * pmix_events.c (failure events) share.
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

#endif
