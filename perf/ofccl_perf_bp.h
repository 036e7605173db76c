/*
 * Broadcast and weight push in ofccl_perf (ofccl_perf_bp.c): one size of each,
 * timed and checked like the other collectives, one row per size.
 */
#ifndef OFCCL_PERF_BP_H
#define OFCCL_PERF_BP_H

#include "ofccl.h"
#include "perfutil.h"

typedef struct bp {
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    int rank, size;
    perf_dtype_t dt; /* broadcast element type (push moves bytes) */
    int iters, warmup, check;
    int root;            /* broadcast root */
    int push;            /* push runs (else nsenders is not used) */
    int nsenders;        /* push: ranks 0 .. nsenders-1 send, the others receive */
    size_t bucket_bytes; /* push bucket size */
    size_t maxb;         /* largest size of the sweep */
    char *buf;           /* broadcast buffer (pool), maxb bytes */
    char *shards;        /* push: this sender's shards (ofccl_mem_alloc) */
    double *xch;         /* pool buffer: 2 doubles per rank */
} bp_t;

/* Fill in the run's parameters (root, push, nsenders and bucket_bytes already
 * set, nsenders 0 for half the ranks), check them and allocate the buffers for
 * sizes up to maxb; 0 or an ofccl error code. */
int bp_open(bp_t *b, ofccl_ctx_t *ctx, ofccl_comm_t *comm, perf_dtype_t dt, int iters, int warmup,
            int check, size_t maxb);
void bp_teardown(bp_t *b);
/* One size of broadcast ("bc") or push ("push"): a row on rank 0, the wrong
 * elements (summed over ranks) added to *wrong; 0 or an ofccl error code. */
int bp_bcast_size(bp_t *b, perf_out_t *out, size_t bytes, long *wrong);
int bp_push_size(bp_t *b, perf_out_t *out, size_t bytes, long *wrong);

#endif
