/*
 * The PMIx bootstrap under a real PMIx server: run as
 *   mpirun --oversubscribe -np N test_boot_pmix N
 * Every rank runs the same tests in the same order (they are collective).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "boot.h"
#include "cu.h"
#include "util.h"

static ofccl__log_t lg;
static int nranks;

static ofccl__boot_params_t params(uint64_t timeout_ms)
{
    ofccl__boot_params_t p = {
        .method = "pmix",
        .timeout_ms = timeout_ms,
        .root = "",
        .rank = -1,
        .size = 0,
        /* Under mpirun these are set; with a server they must not matter. */
        .launcher_vars = "OMPI_COMM_WORLD_RANK,PMIX_RANK",
        .log = &lg,
    };
    return p;
}

static size_t payload_len(int rank, int round)
{
    return round == 0 ? 8 + 29 * (size_t)rank : (rank % 2 == 0 ? 0 : 300 + (size_t)rank);
}

static void fill(uint8_t *p, size_t n, int rank, int round)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rank * 17 + round * 5 + i * 3);
}

/* Allgather a blob.c blob from every rank and validate each one. */
static void exchange_blobs(ofccl__boot_t *b, int round)
{
    const size_t slot = OFCCL__BLOB_HDR + 512;
    uint8_t payload[512], in[OFCCL__BLOB_HDR + 512], want[512];
    uint8_t *out = calloc((size_t)b->size, slot);
    size_t *lens = calloc((size_t)b->size, sizeof(*lens));
    size_t len = payload_len(b->rank, round), n;
    ofccl__err_t e;

    CU_ASSERT_FATAL(out != NULL && lens != NULL);
    ofccl__err_clear(&e);
    fill(payload, len, b->rank, round);
    n = ofccl__blob_encode(in, sizeof(in), OFCCL__BLOB_TEST, (uint32_t)b->rank, payload, len);
    CU_ASSERT_EQUAL(n, OFCCL__BLOB_HDR + len);
    CU_ASSERT_EQUAL(ofccl__boot_allgather(b, in, n, out, slot, lens, &e), 0);
    for (int r = 0; r < b->size; r++) {
        const void *p = NULL;
        size_t plen = 0;
        int rc = ofccl__blob_decode(out + (size_t)r * slot, lens[r], OFCCL__BLOB_TEST, (uint32_t)r,
                                    &p, &plen, &e);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(plen, payload_len(r, round));
        if (rc == 0 && plen == payload_len(r, round)) {
            fill(want, plen, r, round);
            CU_ASSERT_EQUAL(memcmp(p, want, plen), 0);
        } else {
            fprintf(stderr, "rank %d: blob of rank %d: %s\n", b->rank, r, e.msg);
        }
    }
    free(out);
    free(lens);
}

static void test_open_exchange_close(void)
{
    ofccl__boot_params_t p = params(30000);
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_STRING_EQUAL(b->ops->name, "pmix");
    CU_ASSERT_EQUAL(b->size, nranks);
    CU_ASSERT(b->rank >= 0 && b->rank < b->size);
    CU_ASSERT(b->local_rank >= 0 && b->local_rank < b->local_size);
    CU_ASSERT(b->local_size >= 1 && b->local_size <= b->size);
    CU_ASSERT(b->hostname[0] != '\0');
    CU_ASSERT(b->job[0] != '\0');
    exchange_blobs(b, 0);
    CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
    exchange_blobs(b, 1); /* even ranks contribute empty blobs' payloads */
    CU_ASSERT_EQUAL(b->seq, 2);
    {
        /* Empty contributions travel as zero-length PMIx byte objects. */
        char out[8 * 64];
        size_t lens[64];
        if (b->size <= 64) {
            CU_ASSERT_EQUAL(ofccl__boot_allgather(b, "odd!", b->rank % 2 ? 4 : 0, out, 8, lens, &e),
                            0);
            for (int r = 0; r < b->size; r++) {
                CU_ASSERT_EQUAL(lens[r], r % 2 ? 4u : 0u);
                if (r % 2)
                    CU_ASSERT_EQUAL(memcmp(out + 8 * r, "odd!", 4), 0);
            }
        }
    }
    CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
    ofccl__boot_close(b);
}

/* Everybody agrees on local values: gather (hostname, local rank, local
 * size) and check the local ranks on each host are 0..n-1. */
static void test_local_ranks_consistent(void)
{
    ofccl__boot_params_t p = params(30000);
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    char me[80];
    char *all;
    size_t *lens;

    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    all = calloc((size_t)b->size, sizeof(me));
    lens = calloc((size_t)b->size, sizeof(*lens));
    memset(me, 0, sizeof(me));
    memcpy(me, b->hostname, 64);
    me[64] = (char)b->local_rank;
    me[65] = (char)b->local_size;
    CU_ASSERT_EQUAL(ofccl__boot_allgather(b, me, sizeof(me), all, sizeof(me), lens, &e), 0);
    for (int r = 0; r < b->size; r++) {
        const char *x = all + (size_t)r * sizeof(me);
        int seen = 0, lower = 0;
        for (int q = 0; q < b->size; q++) {
            const char *y = all + (size_t)q * sizeof(me);
            if (strcmp(x, y) == 0) {
                seen++;
                lower += q < r;
            }
        }
        CU_ASSERT_EQUAL(lens[r], sizeof(me));
        CU_ASSERT_EQUAL(x[65], seen); /* local size = ranks on that host */
        /* Open MPI numbers local ranks by global rank (by-slot mapping). */
        CU_ASSERT_EQUAL(x[64], lower);
    }
    free(all);
    free(lens);
    ofccl__boot_close(b);
}

/* A rank that publishes more than the others' slot is named as corrupt; the
 * exchange still completed, so the bootstrap stays usable. */
static void test_oversized_contribution(void)
{
    ofccl__boot_params_t p = params(30000);
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    uint8_t in[128], *out;
    size_t *lens, slot;
    int last, rc;
    char want[32];

    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    last = b->size - 1;
    slot = b->rank == last ? 128 : 64;
    out = calloc((size_t)b->size, 128);
    lens = calloc((size_t)b->size, sizeof(*lens));
    memset(in, 0xab, sizeof(in));
    ofccl__err_clear(&e);
    rc = ofccl__boot_allgather(b, in, b->rank == last ? 100 : 10, out, slot, lens, &e);
    if (b->rank == last || b->size == 1) {
        CU_ASSERT_EQUAL(rc, 0);
    } else {
        snprintf(want, sizeof(want), "rank %d", last);
        CU_ASSERT_EQUAL(rc, OFCCL_ERR_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
    }
    exchange_blobs(b, 0);
    CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
    free(out);
    free(lens);
    ofccl__boot_close(b);
}

/* Two bootstraps in one process: PMIx_Init is reference counted, and closing
 * one must leave the other working. */
static void test_two_at_once(void)
{
    ofccl__boot_params_t p = params(30000);
    ofccl__boot_t *a = NULL, *b = NULL;
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_EQUAL(a->rank, b->rank);
    CU_ASSERT_STRING_EQUAL(a->job, b->job);
    exchange_blobs(a, 0);
    exchange_blobs(b, 1); /* same key "ofccl.0" as a's first exchange */
    exchange_blobs(a, 1);
    CU_ASSERT_EQUAL(ofccl__boot_barrier(a, &e), 0);
    ofccl__boot_close(a);
    exchange_blobs(b, 0);
    CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
    ofccl__boot_close(b);

    /* And a fresh one after everything was finalized. */
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &a, &e), 0);
    exchange_blobs(a, 0);
    CU_ASSERT_EQUAL(ofccl__boot_barrier(a, &e), 0);
    ofccl__boot_close(a);
}

/* Every rank holds the same host table, hosts numbered by their lowest rank,
 * and its own host's ranks are PMIx's local ranks (all here: one machine). */
static void test_host_table(void)
{
    ofccl__boot_params_t p = params(30000);
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    int *all, here = 0, next = 0;
    size_t *lens;

    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b->host_of);
    CU_ASSERT_EQUAL(b->nhosts, 1);
    for (int r = 0; r < b->size; r++) {
        CU_ASSERT(b->host_of[r] >= 0 && b->host_of[r] <= next);
        next += b->host_of[r] == next;
        here += b->host_of[r] == b->host_of[b->rank];
    }
    CU_ASSERT_EQUAL(next, b->nhosts);
    CU_ASSERT_EQUAL(here, b->local_size);
    all = calloc((size_t)b->size * (size_t)b->size, sizeof(*all));
    lens = calloc((size_t)b->size, sizeof(*lens));
    CU_ASSERT_FATAL(all != NULL && lens != NULL);
    CU_ASSERT_EQUAL(ofccl__boot_allgather(b, b->host_of, (size_t)b->size * sizeof(int), all,
                                          (size_t)b->size * sizeof(int), lens, &e),
                    0);
    for (int r = 0; r < b->size; r++)
        CU_ASSERT_EQUAL(
            memcmp(all + (size_t)r * (size_t)b->size, b->host_of, (size_t)b->size * sizeof(int)),
            0);
    free(all);
    free(lens);
    ofccl__boot_close(b);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"open, exchange, close", test_open_exchange_close},
        {"local ranks consistent", test_local_ranks_consistent},
        {"oversized contribution", test_oversized_contribution},
        {"two bootstraps at once", test_two_at_once},
        {"host table", test_host_table},
        {NULL, NULL},
    };

    if (argc != 2 || atoi(argv[1]) < 1) {
        fprintf(stderr, "usage: mpirun -np N %s N\n", argv[0]);
        return 2;
    }
    nranks = atoi(argv[1]);
    ofccl__log_init(&lg);
    return cu_run("boot-pmix", tests);
}
