/*
 * mpi_perf's broadcast and weight push references (-o bc | push | bp), with
 * the same sizes, layout and checks as ofccl_perf's (ofccl_perf_bp.c).
 *
 * Broadcast: MPI_Bcast of `bytes` from -R root.
 *
 * Push, as single-sender engines do it: ranks 0 .. S-1 hold the shards, the
 * others receive. Per bucket, the senders gather every tensor of the bucket to
 * rank 0 (one MPI_Gatherv per tensor within the senders, each sender's shard
 * at its offset, so the bucket arrives whole and in order), then rank 0
 * broadcasts the bucket to the receivers (MPI_Bcast on a communicator of rank
 * 0 and the receivers). Buckets go one after the other (blocking calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_perf_bp.h"

int mpi_bp_setup(mpi_bp_t *b)
{
    /* nsenders 0: broadcast only, no shards. */
    size_t shard = b->nsenders ? b->maxb / (size_t)b->nsenders + PERF_PUSH_NT * 64 + 64 : 64;

    if (posix_memalign((void **)&b->buf, 4096, b->maxb + 64) ||
        posix_memalign((void **)&b->shards, 4096, shard))
        return -1;
    memset(b->buf, 0, b->maxb + 64);
    memset(b->shards, 0, shard);
    MPI_Comm_split(MPI_COMM_WORLD, b->rank < b->nsenders ? 0 : MPI_UNDEFINED, b->rank, &b->senders);
    MPI_Comm_split(MPI_COMM_WORLD, b->rank == 0 || b->rank >= b->nsenders ? 0 : MPI_UNDEFINED,
                   b->rank, &b->bcast);
    return 0;
}

void mpi_bp_teardown(mpi_bp_t *b)
{
    if (b->senders != MPI_COMM_NULL)
        MPI_Comm_free(&b->senders);
    if (b->bcast != MPI_COMM_NULL)
        MPI_Comm_free(&b->bcast);
    free(b->buf);
    free(b->shards);
    b->buf = b->shards = NULL;
}

static void report(mpi_bp_t *b, perf_out_t *out, const char *coll, size_t bytes, size_t count,
                   const char *type, double us, long wrong, long *total_wrong)
{
    double maxus;
    long sum;

    MPI_Allreduce(&us, &maxus, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&wrong, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    *total_wrong += sum;
    if (b->rank == 0)
        perf_out_bytes(out, coll, bytes, count, type, maxus, sum, b->size);
}

int mpi_bp_bcast_size(mpi_bp_t *b, perf_out_t *out, size_t bytes, long *total_wrong)
{
    size_t es = perf_dtype_size(b->dt), count = bytes / es ? bytes / es : 1;
    double t0, us;
    long wrong = 0;
    int rc = MPI_SUCCESS;

    bytes = count * es;
    if (b->rank == b->root)
        perf_fill(b->dt, b->buf, count, b->size, b->root, 0, 0);
    for (int i = 0; i < b->warmup && rc == MPI_SUCCESS; i++)
        rc = MPI_Bcast(b->buf, (int)bytes, MPI_BYTE, b->root, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = perf_now_us();
    for (int i = 0; i < b->iters && rc == MPI_SUCCESS; i++)
        rc = MPI_Bcast(b->buf, (int)bytes, MPI_BYTE, b->root, MPI_COMM_WORLD);
    us = (perf_now_us() - t0) / b->iters;
    for (int it = 1; b->check && it <= b->iters && rc == MPI_SUCCESS; it++) {
        if (b->rank == b->root)
            perf_fill(b->dt, b->buf, count, b->size, b->root, it, 0);
        else
            memset(b->buf, 0xff, bytes);
        rc = MPI_Bcast(b->buf, (int)bytes, MPI_BYTE, b->root, MPI_COMM_WORLD);
        wrong += perf_check_values(b->dt, b->buf, count, b->size, b->root, it, 0);
    }
    if (rc != MPI_SUCCESS)
        return rc;
    report(b, out, "bc", bytes, count, perf_dtype_names[b->dt], us, wrong, total_wrong);
    return 0;
}

/* This sender's shard of tensor t, within b->shards (each on a cache line). */
static unsigned char *shard_at(mpi_bp_t *b, size_t bytes, int t)
{
    unsigned char *at = (unsigned char *)b->shards;
    size_t off;

    for (int u = 0; u < t; u++)
        at += (perf_push_shard(perf_push_tensor_bytes(bytes, u), b->nsenders, b->rank, &off) + 63) /
              64 * 64;
    return at;
}

static void fill_shards(mpi_bp_t *b, size_t bytes, int it)
{
    for (int t = 0; t < PERF_PUSH_NT && b->rank < b->nsenders; t++) {
        size_t off,
            n = perf_push_shard(perf_push_tensor_bytes(bytes, t), b->nsenders, b->rank, &off);
        unsigned char *p = shard_at(b, bytes, t);
        for (size_t i = 0; i < n; i++)
            p[i] = perf_push_byte(t, off + i, it);
    }
}

/* Bucket k (tensors first[k] .. first[k+1]-1, back to back in b->buf): gather
 * on the senders, broadcast to the receivers; receivers check with it > 0. */
static int push_bucket(mpi_bp_t *b, size_t bytes, const int *first, int k, int it, long *wrong)
{
    int n = b->nsenders, counts[n], displs[n], rc = MPI_SUCCESS;
    size_t len = 0;

    for (int t = first[k]; t < first[k + 1]; t++) {
        size_t tl = perf_push_tensor_bytes(bytes, t), off, mine;
        if (b->senders != MPI_COMM_NULL && rc == MPI_SUCCESS) {
            for (int i = 0; i < n; i++) {
                counts[i] = (int)perf_push_shard(tl, n, i, &off);
                displs[i] = (int)off;
            }
            mine = perf_push_shard(tl, n, b->rank, &off);
            rc = MPI_Gatherv(shard_at(b, bytes, t), (int)mine, MPI_BYTE, b->buf + len, counts,
                             displs, MPI_BYTE, 0, b->senders);
        }
        len += tl;
    }
    if (b->bcast != MPI_COMM_NULL && rc == MPI_SUCCESS)
        rc = MPI_Bcast(b->buf, (int)len, MPI_BYTE, 0, b->bcast);
    if (it > 0 && b->rank >= n) {
        len = 0;
        for (int t = first[k]; t < first[k + 1]; t++) {
            size_t tl = perf_push_tensor_bytes(bytes, t);
            for (size_t i = 0; i < tl; i++)
                *wrong += (unsigned char)b->buf[len + i] != perf_push_byte(t, i, it);
            len += tl;
        }
    }
    return rc;
}

static int push_once(mpi_bp_t *b, size_t bytes, const int *first, int nb, int it, long *wrong)
{
    int rc = MPI_SUCCESS;
    for (int k = 0; k < nb && rc == MPI_SUCCESS; k++)
        rc = push_bucket(b, bytes, first, k, it, wrong);
    return rc;
}

int mpi_bp_push_size(mpi_bp_t *b, perf_out_t *out, size_t bytes, long *total_wrong)
{
    int first[PERF_PUSH_NT + 1], nb, rc = MPI_SUCCESS;
    double t0, us;
    long wrong = 0;

    bytes = bytes < PERF_PUSH_NT ? PERF_PUSH_NT : bytes;
    nb = perf_push_buckets(bytes, b->bucket_bytes, first);
    fill_shards(b, bytes, 0);
    for (int i = 0; i < b->warmup && rc == MPI_SUCCESS; i++)
        rc = push_once(b, bytes, first, nb, 0, &wrong);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = perf_now_us();
    for (int i = 0; i < b->iters && rc == MPI_SUCCESS; i++)
        rc = push_once(b, bytes, first, nb, 0, &wrong);
    us = (perf_now_us() - t0) / b->iters;
    for (int it = 1; b->check && it <= b->iters && rc == MPI_SUCCESS; it++) {
        fill_shards(b, bytes, it);
        if (b->rank >= b->nsenders)
            memset(b->buf, 0xff, bytes);
        rc = push_once(b, bytes, first, nb, it, &wrong);
    }
    if (rc != MPI_SUCCESS)
        return rc;
    report(b, out, "push", bytes, (size_t)nb, "u8", us, wrong, total_wrong);
    return 0;
}
