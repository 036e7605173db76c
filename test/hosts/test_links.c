/*
 * Ranks whose own link constants differ still choose alike. Each rank
 * replaces the local copy rate its context measured with a figure of its own
 * (rank 0: 100 MB/s, slow enough that on its own figures the cost model picks
 * another all-gather at 1 MiB; the others 20 GB/s plus their rank), then
 * creates the world communicator. Checked: the communicator's constants are
 * the lower median of every rank's figure (computed here), the same on every
 * rank; every rank's choice for each collective and size is the same (all
 * ranks' choices gathered and compared); rank 0's own figures would have
 * chosen differently; and all-gather, reduce-scatter and broadcast give the
 * values computed here, element by element.
 * Run on fake hosts (run_tcpboot.sh with OFCCL_TEST_HOST_RPH).
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cost.h"
#include "cu.h"

#define NSIZES 6
static const size_t sizes[NSIZES] = {4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
static const int colls[3] = {OFCCL__AG, OFCCL__RS, OFCCL__BC};

static ofccl_ctx_t *ctx;
static ofccl_comm_t *comm;
static int rank, size;

static uint32_t rate_of(int r)
{
    return r == 0 ? 100 : 20000 + (uint32_t)r;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int wait_one(ofccl_req_t *req)
{
    int rc = ofccl_wait(req);
    ofccl_req_free(req);
    return rc;
}

static void test_constants(void)
{
    uint32_t *v = calloc((size_t)size, sizeof(*v));

    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    for (int r = 0; r < size; r++)
        v[r] = rate_of(r);
    qsort(v, (size_t)size, sizeof(*v), cmp_u32);
    CU_ASSERT_EQUAL(comm->link[OFCCL__LINK_LOCAL].mbps, v[(size - 1) / 2]);
    CU_ASSERT_EQUAL(comm->link[OFCCL__LINK_LOCAL].source, OFCCL__LINK_MEASURED);
    CU_ASSERT_EQUAL(ctx->link[OFCCL__LINK_LOCAL].mbps, rate_of(rank));
    printf("rank %d: own local rate %u MB/s, agreed %u MB/s\n", rank, rate_of(rank),
           comm->link[OFCCL__LINK_LOCAL].mbps);
    free(v);
}

/* Every rank's choices, gathered: equal everywhere. */
static void test_same_choices(void)
{
    int32_t mine[3 * NSIZES], *all = calloc((size_t)size, sizeof(mine));
    ofccl_req_t *req = NULL;
    int wrong = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(all);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < NSIZES; k++)
            mine[c * NSIZES + k] = ofccl__choose(comm, colls[c], sizes[k], 0, 0)->wire_id;
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, mine, all, sizeof(mine), OFCCL_U8, &req), 0);
    CU_ASSERT_EQUAL_FATAL(wait_one(req), 0);
    for (int r = 0; r < size; r++)
        wrong += memcmp(all + (size_t)r * 3 * NSIZES, mine, sizeof(mine)) != 0;
    CU_ASSERT_EQUAL(wrong, 0);
    free(all);
}

/* On its own figures rank 0 would take another all-gather at 1 MiB. */
static void test_own_figures_differ(void)
{
    ofccl__cost_topo_t t;
    unsigned valid = ofccl__choose_valid(comm, OFCCL__AG);
    int agreed = ofccl__choose_model(comm, OFCCL__AG, 1 << 20), own;

    ofccl__cost_topo_of(comm, &t);
    t.beta[OFCCL__LINK_LOCAL] = rate_of(rank) * 1e6;
    own = ofccl__cost_pick(&t, OFCCL__AG, 1 << 20, valid);
    printf("rank %d: all-gather of 1 MiB per rank: agreed %s, on its own figures %s\n", rank,
           ofccl__cost_cand_name(agreed), ofccl__cost_cand_name(own));
    CU_ASSERT_EQUAL(agreed == own, rank != 0);
}

static float val(int r, size_t i)
{
    return (float)((r * 7 + (int)(i % 1009)) % 64);
}

static void test_collectives(void)
{
    for (int k = 1; k < NSIZES; k += 2) {
        size_t n = sizes[k] / sizeof(float), bad = 0;
        float *in = malloc(n * sizeof(float) * (size_t)size),
              *out = malloc(n * sizeof(float) * (size_t)size);
        ofccl_req_t *req = NULL;

        CU_ASSERT_PTR_NOT_NULL_FATAL(in);
        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        for (size_t i = 0; i < n; i++)
            in[i] = val(rank, i);
        CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, n, OFCCL_F32, &req), 0);
        CU_ASSERT_EQUAL_FATAL(wait_one(req), 0);
        for (int r = 0; r < size; r++)
            for (size_t i = 0; i < n; i++)
                bad += out[(size_t)r * n + i] != val(r, i);
        for (size_t i = 0; i < n * (size_t)size; i++)
            in[i] = val(rank, i);
        CU_ASSERT_EQUAL_FATAL(ofccl_reduce_scatter(comm, in, out, n, OFCCL_F32,
                                                   (ofccl_redop_t){OFCCL_OP_SUM, 0}, &req),
                              0);
        CU_ASSERT_EQUAL_FATAL(wait_one(req), 0);
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, (size_t)rank * n + i);
            bad += out[i] != want;
        }
        for (size_t i = 0; i < n; i++)
            out[i] = rank == 1 ? val(1, i) : -1.0f;
        CU_ASSERT_EQUAL_FATAL(ofccl_broadcast(comm, out, n, OFCCL_F32, 1, &req), 0);
        CU_ASSERT_EQUAL_FATAL(wait_one(req), 0);
        for (size_t i = 0; i < n; i++)
            bad += out[i] != val(1, i);
        CU_ASSERT_EQUAL(bad, 0);
        free(in);
        free(out);
    }
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"constants: the median of every rank's", test_constants},
        {"every rank chooses alike", test_same_choices},
        {"rank 0's own figures would choose otherwise", test_own_figures_differ},
        {"collectives correct", test_collectives},
        {NULL, NULL},
    };
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    int rc;

    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s\n", err);
        return 1;
    }
    /* What this rank "measured" (white box: the context's own figure). */
    ctx->link[OFCCL__LINK_LOCAL] =
        (ofccl__link_t){200, rate_of(ctx->boot->rank), OFCCL__LINK_MEASURED};
    if (ofccl_comm_world(ctx, &comm) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    ofccl_comm_set_timeout(comm, 120000);
    rc = cu_run("links", tests);
    if (ofccl_comm_destroy(comm) || ofccl_ctx_destroy(ctx))
        rc = 1;
    return rc;
}
