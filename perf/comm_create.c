/*
 * Communicator creation cost, one rank of it (run under a launcher; see
 * perf/comm_create.sh): after a warm-up world communicator, create and
 * destroy `reps` more, each followed by two all-gathers of one f64 per rank:
 * the first pays for resolving the peers it uses (OFCCL_BOOT_EXCHANGE=lazy),
 * the second does not. Rank 0 prints one line: ranks, exchange mode, the
 * median over reps of the slowest rank's creation time, first and second
 * all-gather, and the peers each rank holds after them (most over ranks).
 * Usage: comm_create [reps]   (default 9)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ofccl.h"

#define STEPS 3 /* create, first all-gather, second all-gather */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int allgather_f64(ofccl_comm_t *comm, const double *in, double *out, size_t count)
{
    ofccl_req_t *req = NULL;
    int rc = ofccl_allgather(comm, in, out, count, OFCCL_F64, &req);

    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    return rc;
}

/* One round: create, two all-gathers; t[] gets this rank's times, *peers the
 * peers it holds afterwards. The communicator is returned for the caller's
 * all-gather of the times. */
static int round_once(ofccl_ctx_t *ctx, double t[STEPS], uint64_t *peers, ofccl_comm_t **out)
{
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    ofccl_comm_t *comm = NULL;
    double *buf = NULL, one = 1.0, t0;
    int rc, size = 0;

    ofccl_ctx_stats(ctx, &before);
    t0 = now_s();
    rc = ofccl_comm_world(ctx, &comm);
    t[0] = now_s() - t0;
    if (rc)
        return rc;
    ofccl_comm_size(comm, &size);
    buf = malloc((size_t)size * sizeof(double));
    for (int k = 1; k < STEPS && rc == 0 && buf != NULL; k++) {
        t0 = now_s();
        rc = allgather_f64(comm, &one, buf, 1);
        t[k] = now_s() - t0;
    }
    free(buf);
    ofccl_ctx_stats(ctx, &after);
    *peers = after.peers_resolved - before.peers_resolved;
    *out = comm;
    return rc ? rc : buf == NULL ? OFCCL_ERR_NO_MEMORY : 0;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 9, rank = 0, size = 0, rc;
    const char *mode = getenv("OFCCL_BOOT_EXCHANGE");
    ofccl_ctx_params_t p = {.size = sizeof(p)};
    ofccl_ctx_t *ctx = NULL;
    ofccl_comm_t *warm = NULL;
    double *med = NULL, *all = NULL;
    uint64_t peers_max = 0;

    if (reps < 1 || reps > 1000 || ofccl_ctx_create(&p, &ctx) != 0 ||
        ofccl_comm_world(ctx, &warm) != 0) {
        fprintf(stderr, "comm_create: setup failed: %s\n", ctx ? ofccl_ctx_last_error(ctx) : "");
        return 1;
    }
    ofccl_comm_rank(warm, &rank);
    ofccl_comm_size(warm, &size);
    med = calloc((size_t)reps * STEPS, sizeof(double));
    all = calloc((size_t)size * (STEPS + 1), sizeof(double));
    rc = med && all ? ofccl_barrier(warm) : OFCCL_ERR_NO_MEMORY;
    for (int i = 0; i < reps && rc == 0; i++) {
        double t[STEPS + 1] = {0};
        uint64_t peers = 0;
        ofccl_comm_t *comm = NULL;

        rc = round_once(ctx, t, &peers, &comm);
        t[STEPS] = (double)peers;
        /* The slowest rank's times: the collective cost. */
        if (rc == 0)
            rc = allgather_f64(comm, t, all, STEPS + 1);
        for (int r = 0; r < size && rc == 0; r++) {
            for (int k = 0; k < STEPS; k++)
                if (all[r * (STEPS + 1) + k] > med[(size_t)k * reps + i])
                    med[(size_t)k * reps + i] = all[r * (STEPS + 1) + k];
            if (all[r * (STEPS + 1) + STEPS] > (double)peers_max)
                peers_max = (uint64_t)all[r * (STEPS + 1) + STEPS];
        }
        if (comm != NULL && ofccl_comm_destroy(comm) != 0 && rc == 0)
            rc = OFCCL_ERR_STATE;
    }
    if (rc != 0) {
        fprintf(stderr, "comm_create: rank %d: %s: %s\n", rank, ofccl_strerror(rc),
                ofccl_ctx_last_error(ctx));
    } else if (rank == 0) {
        for (int k = 0; k < STEPS; k++)
            qsort(med + (size_t)k * reps, (size_t)reps, sizeof(double), cmp_double);
        printf("ranks %d exchange %s provider %s create_ms %.3f first_ag_ms %.3f second_ag_ms "
               "%.3f peers_held %llu\n",
               size, mode ? mode : "auto", ofccl_ctx_provider(ctx), med[reps / 2] * 1e3,
               med[(size_t)reps + reps / 2] * 1e3, med[2 * (size_t)reps + reps / 2] * 1e3,
               (unsigned long long)peers_max);
    }
    if (ofccl_barrier(warm) != 0 || ofccl_comm_destroy(warm) != 0 || ofccl_ctx_destroy(ctx) != 0)
        rc = 1;
    free(med);
    free(all);
    return rc ? 1 : 0;
}
