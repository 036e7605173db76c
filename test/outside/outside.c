/*
 * ofccl from the outside: a program built only against the installed header
 * and library (pkg-config ofccl), as a user builds one. It walks every public
 * entry point, then runs a seeded random sequence of all-gathers,
 * reduce-scatters and their bucket variants (random counts from 0 to about a
 * million elements, dtypes, ops, premul scalars, in place or not, user / pool /
 * registered memory, several requests outstanding and waited in random order,
 * barriers) and checks every result element by element against a reference
 * each rank computes on its own from the inputs of all ranks, which are a
 * function of (rank, collective, tensor, index). Reductions are held to the
 * tolerance docs/reductions.md states; copies must be exact.
 *
 * The job comes from the launcher (mpirun: PMIx), the transport from
 * OFCCL_PROVIDER. Every rank draws the same sequence from the seed.
 * The sequence and its checks are in outside_coll.c.
 * Usage: outside [seed] [collectives] [max elements per rank buffer]
 * Exit status 0 when every check passed.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outside.h"

ofccl_ctx_t *ctx;
ofccl_comm_t *comm;
int rank, size;
unsigned long failures;
unsigned long long checked, done_by_kind[KINDS];
uint64_t rng_s;

/* ---- the rest of the API ---- */
static void walk_queries(void)
{
    int ma, mi, pa, v = -1;
    ofccl_stats_t st = {.size = sizeof(st)};
    char ver[32];

    ofccl_version(&ma, &mi, &pa);
    snprintf(ver, sizeof(ver), "%d.%d.%d", ma, mi, pa);
    EXPECT(strcmp(ver, ofccl_version_string()) == 0);
    EXPECT(ma == OFCCL_VERSION_MAJOR && mi == OFCCL_VERSION_MINOR); /* header and library agree */
    EXPECT(strcmp(ofccl_strerror(OFCCL_ERR_INVALID_ARG), "invalid argument") == 0);
    EXPECT(ofccl_strerror(12345) != NULL);
    EXPECT(ofccl_dtype_size(OFCCL_F32) == 4 && ofccl_dtype_size(OFCCL_F64) == 8 &&
           ofccl_dtype_size(OFCCL_BF16) == 2 && ofccl_dtype_size(OFCCL_F16) == 2 &&
           ofccl_dtype_size(OFCCL_DTYPE_COUNT) == 0);
    EXPECT(strlen(ofccl_ctx_provider(ctx)) > 0);
    EXPECT(ofccl_ctx_last_error(ctx) != NULL);
    EXPECT_RC(ofccl_comm_local_rank(comm, &v), 0);
    EXPECT(v >= 0 && v < size);
    EXPECT_RC(ofccl_comm_local_size(comm, &v), 0);
    EXPECT(v >= 1 && v <= size);
    EXPECT_RC(ofccl_comm_set_timeout(comm, 60000), 0);
    EXPECT_RC(ofccl_ctx_stats(ctx, &st), 0);
    EXPECT(st.size == sizeof(st));
    for (size_t count = 0; count < 40; count += 1 + count / 3) {
        size_t off = 1, len = 1, o2, l2;
        EXPECT_RC(ofccl_shard_range(comm, count, &off, &len), 0);
        shard_of(count, rank, &o2, &l2);
        if (off != o2 || len != l2)
            FAIL("ofccl_shard_range(%zu): [%zu, +%zu), expected [%zu, +%zu)", count, off, len, o2,
                 l2);
    }
    EXPECT_RC(ofccl_shard_range(comm, 5, NULL, NULL), OFCCL_ERR_INVALID_ARG);
}

/* Argument errors: INVALID_ARG, nothing posted, the communicator still usable. */
static void walk_errors(void)
{
    double a[16] = {0}, b[16 * 8] = {0};
    ofccl_req_t *req = NULL;
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0}, bad = {OFCCL_OP_COUNT, 0},
                  nan_op = {OFCCL_OP_PREMUL_SUM, NAN};
    ofccl_tensor_t t = {4, b, a}, t_null = {4, NULL, a};
    size_t off;

    EXPECT_RC(ofccl_allgather(NULL, a, b, 1, OFCCL_F64, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_allgather(comm, a, b, 1, OFCCL_F64, NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_allgather(comm, a, b, 1, OFCCL_DTYPE_COUNT, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_allgather(comm, NULL, b, 1, OFCCL_F64, &req), OFCCL_ERR_INVALID_ARG);
    /* Overlapping, but not in place: sendbuf one element past this rank's block. */
    off = (size_t)rank * 2 + 1;
    EXPECT_RC(ofccl_allgather(comm, b + off, b, 2, OFCCL_F64, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_reduce_scatter(comm, b, b + off, 2, OFCCL_F64, sum, &req),
              OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_reduce_scatter(comm, a, b, 1, OFCCL_F64, bad, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_reduce_scatter(comm, a, b, 1, OFCCL_F64, nan_op, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_reduce_scatter(comm, a, b, 1, (ofccl_dtype_t)-3, sum, &req),
              OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_bucket_allgather(comm, &t, -1, OFCCL_F64, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_bucket_allgather(comm, NULL, 2, OFCCL_F64, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_bucket_allgather(comm, &t_null, 1, OFCCL_F64, &req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_bucket_reduce_scatter(comm, &t, 1, OFCCL_F64, bad, &req),
              OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_bucket_reduce_scatter(comm, &t, 1, OFCCL_F64, nan_op, &req),
              OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_bucket_reduce_scatter(comm, &t, 1, OFCCL_DTYPE_COUNT, sum, &req),
              OFCCL_ERR_INVALID_ARG);
    EXPECT(req == NULL);
    EXPECT_RC(ofccl_test(NULL, NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_wait(NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_req_free(NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_buffer_alloc(comm, 0, (void **)&req), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_buffer_free(comm, a), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_mem_register(ctx, NULL, 8, NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_mem_deregister(NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_comm_rank(comm, NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_ctx_stats(ctx, NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_progress(NULL), OFCCL_ERR_INVALID_ARG);
    EXPECT_RC(ofccl_ctx_destroy(ctx), OFCCL_ERR_BUSY); /* a communicator is open */
}

/* A second communicator, aborted: every call on it fails, the first is unaffected. */
static void walk_abort(void)
{
    ofccl_comm_t *c2 = NULL;
    double a[4] = {1, 2, 3, 4}, b[4 * 8];
    ofccl_req_t *req = NULL;
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0};
    int rc = ofccl_comm_world(ctx, &c2);

    if (rc) {
        FAIL("second ofccl_comm_world: %s: %s", ofccl_strerror(rc), ofccl_ctx_last_error(ctx));
        return;
    }
    EXPECT_RC(ofccl_barrier(c2), 0);
    EXPECT_RC(ofccl_comm_abort(c2), 0);
    EXPECT_RC(ofccl_comm_abort(c2), 0);
    EXPECT_RC(ofccl_barrier(c2), OFCCL_ERR_ABORTED);
    EXPECT_RC(ofccl_allgather(c2, a, b, 4, OFCCL_F64, &req), OFCCL_ERR_ABORTED);
    EXPECT_RC(ofccl_reduce_scatter(c2, b, a, 4, OFCCL_F64, sum, &req), OFCCL_ERR_ABORTED);
    EXPECT(req == NULL);
    EXPECT(strlen(ofccl_comm_last_error(c2)) > 0);
    EXPECT_RC(ofccl_comm_destroy(c2), 0);
    EXPECT_RC(ofccl_comm_destroy(c2), OFCCL_ERR_STATE);
    EXPECT_RC(ofccl_barrier(comm), 0);
}

int main(int argc, char **argv)
{
    unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : (unsigned)time(NULL);
    unsigned ncoll = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 40;
    size_t max_elems = argc > 3 ? (size_t)strtoull(argv[3], NULL, 0) : 1000000;
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    double t0 = now_s();
    int rc;

    rc = ofccl_ctx_create(&p, &ctx);
    if (rc) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    rc = ofccl_comm_world(ctx, &comm);
    if (rc) {
        fprintf(stderr, "ofccl_comm_world: %s: %s\n", ofccl_strerror(rc),
                ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    EXPECT_RC(ofccl_comm_rank(comm, &rank), 0);
    EXPECT_RC(ofccl_comm_size(comm, &size), 0);
    rng_s = 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 1 | 1);
    if (rank == 0)
        printf("outside: seed %u, %u collectives, up to %zu elements, %d ranks on %s (ofccl %s)\n",
               seed, ncoll, max_elems, size, ofccl_ctx_provider(ctx), ofccl_version_string());
    walk_queries();
    walk_errors();
    rc = run_sequence(ncoll, max_elems);
    if (rc == 0)
        walk_abort();
    if (rc == 0) /* nobody tears down while a peer still signals it */
        EXPECT_RC(ofccl_barrier(comm), 0);
    EXPECT_RC(ofccl_comm_destroy(comm), 0);
    EXPECT_RC(ofccl_ctx_destroy(ctx), 0);
    if (failures)
        fprintf(stderr, "rank %d: %lu check(s) failed (seed %u)\n", rank, failures, seed);
    else if (rank == 0)
        printf("outside: all checks passed in %.1f s (rank 0: %llu all-gathers, %llu "
               "reduce-scatters, %llu bucket all-gathers, %llu bucket reduce-scatters, %llu "
               "elements compared)\n",
               now_s() - t0, done_by_kind[AG], done_by_kind[RS], done_by_kind[BAG],
               done_by_kind[BRS], checked);
    return failures ? 1 : 0;
}
