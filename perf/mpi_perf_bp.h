/*
 * Broadcast and weight push references in mpi_perf (mpi_perf_bp.c): one size
 * of each, timed and checked as ofccl_perf's, one row per size.
 */
#ifndef OFCCL_MPI_PERF_BP_H
#define OFCCL_MPI_PERF_BP_H

#include <mpi.h>

#include "perfutil.h"

typedef struct mpi_bp {
    int rank, size;
    perf_dtype_t dt; /* broadcast element type (push moves bytes) */
    int iters, warmup, check;
    int root;            /* broadcast root */
    int nsenders;        /* push: ranks 0 .. nsenders-1 hold the shards */
    size_t bucket_bytes; /* push bucket size */
    size_t maxb;         /* largest size of the sweep */
    char *buf;           /* broadcast buffer / the bucket on rank 0 and receivers */
    char *shards;        /* push: this sender's shards */
    MPI_Comm senders;    /* ranks 0 .. nsenders-1 (MPI_COMM_NULL elsewhere) */
    MPI_Comm bcast;      /* rank 0 and the receivers (MPI_COMM_NULL elsewhere) */
} mpi_bp_t;

/* Buffers and communicators (collective); 0, or -1 out of memory. */
int mpi_bp_setup(mpi_bp_t *b);
void mpi_bp_teardown(mpi_bp_t *b);
/* One size: a row on rank 0, wrong elements (all ranks) added to *wrong;
 * MPI_SUCCESS or an MPI error code. */
int mpi_bp_bcast_size(mpi_bp_t *b, perf_out_t *out, size_t bytes, long *wrong);
int mpi_bp_push_size(mpi_bp_t *b, perf_out_t *out, size_t bytes, long *wrong);

#endif
