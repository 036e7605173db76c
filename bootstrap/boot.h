/*
 * Bootstrap: rank discovery and blob exchange behind a small ops interface.
 * The only code in ofccl that calls PMIx_*. Used while creating communicators
 * (and registering windows), never on the data path.
 */
#ifndef OFCCL_BOOTSTRAP_BOOT_H
#define OFCCL_BOOTSTRAP_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "log.h"

typedef struct ofccl__boot ofccl__boot_t;

typedef struct ofccl__boot_ops {
    size_t size;      /* sizeof(ofccl__boot_ops_t): the table can grow */
    const char *name; /* "pmix", "tcp", "singleton" */
    /* Every rank contributes `len` (<= slot) bytes; on return out[r * slot] holds
     * rank r's bytes and lens[r] their length. Collective; bounded by the timeout. */
    int (*allgather)(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                     size_t *lens, ofccl__err_t *e);
    /* Collective; bounded by the timeout. */
    int (*barrier)(ofccl__boot_t *b, ofccl__err_t *e);
    /* Release everything; local. */
    void (*finalize)(ofccl__boot_t *b);
} ofccl__boot_ops_t;

struct ofccl__boot {
    const ofccl__boot_ops_t *ops;
    int rank, size;
    int local_rank, local_size;
    char hostname[64];
    char job[64]; /* PMIx namespace, "tcp:<root>", or "singleton" */
    uint64_t timeout_ms;
    const ofccl__log_t *log;
    uint64_t seq; /* exchanges done so far (makes keys unique) */
    void *impl;
};

typedef struct ofccl__boot_params {
    const char *method; /* "auto", "pmix", "tcp", "singleton" */
    uint64_t timeout_ms;
    const char *root;          /* TCP rendezvous "host:port" ("" = unset) */
    int rank;                  /* TCP rendezvous rank (-1 = unset) */
    int size;                  /* TCP rendezvous size (0 = unset) */
    const char *launcher_vars; /* launcher variables seen in the environment ("" = none) */
    const ofccl__log_t *log;
} ofccl__boot_params_t;

/* auto: tcp when `root` is set; else PMIx; PMIx unreachable -> singleton when
 * no launcher variables are set, else OFCCL_ERR_BOOTSTRAP naming the likely
 * misconfiguration (e.g. srun without --mpi=pmix). */
int ofccl__boot_open(const ofccl__boot_params_t *p, ofccl__boot_t **out, ofccl__err_t *e);
void ofccl__boot_close(ofccl__boot_t *b);

static inline int ofccl__boot_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out,
                                        size_t slot, size_t *lens, ofccl__err_t *e)
{
    return b->ops->allgather(b, in, len, out, slot, lens, e);
}
static inline int ofccl__boot_barrier(ofccl__boot_t *b, ofccl__err_t *e)
{
    return b->ops->barrier(b, e);
}

/* Backends (each in its own file). */
int ofccl__boot_pmix_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, int *unreachable,
                          ofccl__err_t *e);
int ofccl__boot_tcp_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e);
int ofccl__boot_singleton_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e);

#endif
