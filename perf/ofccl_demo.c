/*
 * The main job: bucketed all-gather and reduce-scatter across every rank of
 * the job, as FSDP does them — a bucket of uneven tensors, sharded by the
 * library, gathered and reduced — with every element of the last iteration
 * checked against values computed independently on each rank, and a
 * bandwidth table in nccl-tests style. Exits non-zero if anything is wrong.
 * Usage: ofccl_demo [max_bytes] [iters]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ofccl.h"

#define NT 7 /* tensors per bucket */

static int rank, size;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Multiples of 1/8 in [-16, 16): exact in f32 and bf16, sums exact in f32. */
static float value(int r, int t, size_t j)
{
    uint32_t h = (uint32_t)r * 2654435761u ^ (uint32_t)t * 40503u ^ (uint32_t)j * 2246822519u;
    h ^= h >> 13;
    return (float)((int)(h % 256) - 128) / 8.0f;
}

static void put(ofccl_dtype_t dt, void *p, size_t i, float v)
{
    if (dt == OFCCL_F32) {
        ((float *)p)[i] = v;
    } else {
        uint32_t b;
        memcpy(&b, &v, 4);
        ((uint16_t *)p)[i] = (uint16_t)(b >> 16); /* exact: v has few significant bits */
    }
}

static float get(ofccl_dtype_t dt, const void *p, size_t i)
{
    uint32_t b;
    float v;
    if (dt == OFCCL_F32)
        return ((const float *)p)[i];
    b = (uint32_t)((const uint16_t *)p)[i] << 16;
    memcpy(&v, &b, 4);
    return v;
}

static size_t shard(size_t count, int r, size_t *first)
{
    size_t c = (count + (size_t)size - 1) / (size_t)size;
    *first = (size_t)r * c < count ? (size_t)r * c : count;
    return count - *first < c ? count - *first : c;
}

static int run(ofccl_comm_t *comm, int coll, ofccl_dtype_t dt, size_t bytes, int iters, double *us,
               long *wrong)
{
    size_t es = dt == OFCCL_F32 ? 4 : 2, total = bytes / es, used = 0;
    ofccl_tensor_t t[NT];
    ofccl_redop_t sum = {OFCCL_OP_SUM, 1.0};
    ofccl_req_t *req;
    int rc = 0;

    /* Uneven tensors: sizes in the ratio 1:2:...:NT, plus an odd remainder. */
    for (int k = 0; k < NT; k++) {
        size_t first, n;
        t[k].count = k == NT - 1 ? total - used : total * (size_t)(k + 1) / (NT * (NT + 1) / 2) + 3;
        used += t[k].count;
        n = shard(t[k].count, rank, &first);
        t[k].full = malloc(t[k].count * es + 8);
        t[k].shard = malloc(n * es + 8);
        if (coll == 0)
            for (size_t j = 0; j < n; j++)
                put(dt, t[k].shard, j, value(rank, k, first + j));
        else
            for (size_t j = 0; j < t[k].count; j++)
                put(dt, t[k].full, j, value(rank, k, j));
    }
    *us = 0;
    for (int it = -2; it < iters && rc == 0; it++) { /* two warm-up iterations */
        double t0 = now_us();
        rc = coll == 0 ? ofccl_bucket_allgather(comm, t, NT, dt, &req)
                       : ofccl_bucket_reduce_scatter(comm, t, NT, dt, sum, &req);
        if (rc == 0) {
            rc = ofccl_wait(req);
            ofccl_req_free(req);
        }
        if (it >= 0)
            *us += now_us() - t0;
    }
    *us /= iters;
    *wrong = 0;
    for (int k = 0; k < NT && rc == 0; k++) {
        size_t first, n = shard(t[k].count, rank, &first);
        if (coll == 0) {
            for (int r = 0; r < size; r++) {
                size_t f, m = shard(t[k].count, r, &f);
                for (size_t j = 0; j < m; j++)
                    *wrong += get(dt, t[k].full, f + j) != value(r, k, f + j);
            }
        } else {
            for (size_t j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int r = 0; r < size; r++) {
                    ref += value(r, k, first + j);
                    mag += fabs(value(r, k, first + j));
                }
                /* f32: exact; bf16: one rounding per reduction step */
                *wrong +=
                    fabs(get(dt, t[k].shard, j) - ref) > (dt == OFCCL_F32 ? 0 : mag * size / 128.0);
            }
        }
    }
    for (int k = 0; k < NT; k++) {
        free(t[k].full);
        free(t[k].shard);
    }
    return rc;
}

int main(int argc, char **argv)
{
    size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 64u << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 5;
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    long total_wrong = 0;
    int rc;

    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    if ((rc = ofccl_comm_world(ctx, &comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    if (rank == 0)
        printf("# ofccl %s: %d ranks, provider %s; buckets of %d uneven tensors, checked\n"
               "# %-4s %12s %5s %5s %11s %10s %10s %7s\n",
               ofccl_version_string(), size, ofccl_ctx_provider(ctx), NT, "coll", "size(B)", "type",
               "redop", "time(us)", "algbw", "busbw", "#wrong");
    for (int coll = 0; coll < 2; coll++)
        for (int d = 0; d < 2; d++)
            for (size_t bytes = 64u << 10; bytes <= max_bytes; bytes *= 4) {
                ofccl_dtype_t dt = d == 0 ? OFCCL_F32 : OFCCL_BF16;
                double us, algbw;
                long wrong;
                rc = run(comm, coll, dt, bytes, iters, &us, &wrong);
                if (rc) {
                    fprintf(stderr, "rank %d: %s\n", rank, ofccl_comm_last_error(comm));
                    return 1;
                }
                total_wrong += wrong;
                /* nccl-tests convention: bytes of the gathered buffer / reduce input. */
                algbw = (double)bytes / us / 1e3;
                if (rank == 0)
                    printf("  %-4s %12zu %5s %5s %11.1f %10.3f %10.3f %7ld\n",
                           coll == 0 ? "ag" : "rs", bytes, d == 0 ? "f32" : "bf16",
                           coll == 0 ? "-" : "sum", us, algbw, algbw * (size - 1) / (double)size,
                           wrong);
            }
    rc = ofccl_barrier(comm);
    ofccl_comm_destroy(comm);
    ofccl_ctx_destroy(ctx);
    if (rank == 0)
        printf("# %s\n", total_wrong || rc ? "FAILED"
                                           : "all elements correct on rank 0 "
                                             "(every rank checks its own)");
    return total_wrong || rc ? 1 : 0;
}
