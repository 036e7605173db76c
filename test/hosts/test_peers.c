/*
 * Which transport carries each peer's traffic in a job across hosts
 * (OFCCL_PEER_TRANSPORT). With "auto", peers on this rank's host go through
 * the local shared-memory transport and the others through the fabric
 * provider; with "fabric", every peer through the fabric provider. Ranks are
 * placed host-major, RPH per host: by cluster.sh (namespaces), or on one
 * machine by OFCCL_HOST_ID (run_tcpboot.sh with OFCCL_TEST_HOST_RPH).
 *
 * Each rank checks the class its endpoint gives every peer against that
 * placement, then runs an all-gather and a reduce-scatter, checks every
 * element against values computed here, and checks that the bytes each
 * transport carried (ofccl_ctx_stats) are what the algorithm moves, plus at
 * most a little control traffic. Both collectives move the same blocks:
 * direct, one block to each peer; hier (H hosts of L ranks), one block (its
 * own, or its host's partial of a peer's) to each of the H-1 ranks of its
 * rail on other hosts, and H blocks (its rail's, or its contributions to
 * them) to each of the L-1 other ranks of its host. With hier, a
 * hierarchical broadcast too (OFCCL_ALGO_BC=hier): its data and its bytes per
 * transport (test_bcast_bytes).
 * Usage: test_peers RPH auto|fabric [direct|hier] (the OFCCL_PEER_TRANSPORT,
 * OFCCL_ALGO_AG, OFCCL_ALGO_RS and OFCCL_ALGO_BC it sets)
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "hosts.h"

#define COUNT (256 * 1024) /* floats per rank: 1 MiB blocks */
#define SLACK (64 * 1024)  /* descriptors, signals, barrier words */

static int rph;
static bool want_auto; /* OFCCL_PEER_TRANSPORT=auto */
static bool mixed;     /* auto across hosts with several ranks on a host */
static bool hier;      /* OFCCL_ALGO_AG, _RS and _BC=hier */

static bool same_host(int p)
{
    return p / rph == rank / rph;
}

static void test_classes(void)
{
    const char *prov = ofccl_ctx_provider(ctx);
    int wrong = 0;

    CU_ASSERT_FATAL(size > rph && size % rph == 0);
    mixed = want_auto && rph > 1;
    CU_ASSERT_EQUAL(strstr(prov, "+local") != NULL, mixed);
    for (int p = 0; p < size; p++) {
        int want = mixed && same_host(p) ? OFCCL__PEER_LOCAL : OFCCL__PEER_FABRIC;
        int got = ofccl__ep_peer_class(comm->ep, p);
        if (got != want) {
            fprintf(stderr, "rank %d: peer %d goes through class %d, expected %d (%s)\n", rank, p,
                    got, want, prov);
            wrong++;
        }
    }
    CU_ASSERT_EQUAL(wrong, 0);
    if (rank == 0)
        printf("provider %s\n", prov);
}

static float value(int r, size_t i)
{
    return (float)(r * COUNT + (int)i); /* exact: below 2^24 for up to 64 ranks */
}

static void check_bytes(const char *what, uint64_t got, uint64_t want)
{
    CU_ASSERT_TRUE(got >= want && got <= want + SLACK);
    if (got < want || got > want + SLACK)
        fprintf(stderr, "rank %d: %s carried %llu bytes, expected %llu (+ up to %d)\n", rank, what,
                (unsigned long long)got, (unsigned long long)want, SLACK);
}

static void check_delta(const char *what, uint64_t got, uint64_t blocks)
{
    check_bytes(what, got, blocks * COUNT * sizeof(float));
}

/* Traffic of the setup and of earlier tests is behind every rank: a barrier,
 * then the counters; once the collective posted (`rc`, `req`) is done, again. */
static void stats_before(ofccl_stats_t *before)
{
    CU_ASSERT_EQUAL_FATAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_stats(ctx, before), 0);
}

static void stats_after(int rc, ofccl_req_t *req, ofccl_stats_t *after)
{
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    ofccl_req_free(req);
    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_stats(ctx, after), 0);
}

/* Blocks this rank sends to peers on its host, and to other hosts. */
static void check_moved(const ofccl_stats_t *before, const ofccl_stats_t *after)
{
    int hosts = size / rph;
    uint64_t same = hier ? (uint64_t)hosts * (uint64_t)(rph - 1) : (uint64_t)rph - 1;
    uint64_t other = hier ? (uint64_t)hosts - 1 : (uint64_t)(size - rph);

    check_delta("the local transport", after->local_bytes - before->local_bytes, mixed ? same : 0);
    check_delta("the fabric", after->fabric_bytes - before->fabric_bytes,
                mixed ? other : same + other);
}

static void test_bytes(void)
{
    float *send = malloc(COUNT * sizeof(float));
    float *recv = malloc((size_t)size * COUNT * sizeof(float));
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    ofccl_req_t *req = NULL;
    size_t bad = 0;
    int rc;

    CU_ASSERT_FATAL(send != NULL && recv != NULL && size <= 64);
    for (size_t i = 0; i < COUNT; i++)
        send[i] = value(rank, i);
    memset(recv, 0xff, (size_t)size * COUNT * sizeof(float));
    stats_before(&before);
    rc = ofccl_allgather(comm, send, recv, COUNT, OFCCL_F32, &req);
    stats_after(rc, req, &after);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < COUNT; i++)
            bad += recv[(size_t)r * COUNT + i] != value(r, i);
    CU_ASSERT_EQUAL(bad, 0);
    if (bad)
        fprintf(stderr, "rank %d: %zu elements differ\n", rank, bad);
    check_moved(&before, &after);
    free(send);
    free(recv);
}

/* Rank r's contribution to element i of rank b's block: small integers, so
 * every sum is exact in f32 whatever the order. */
static float contribution(int r, int b, size_t i)
{
    return (float)((int)((i * 7 + (size_t)b * 13 + (size_t)r * 5) % 512) - 256);
}

static void test_rs_bytes(void)
{
    float *send = malloc((size_t)size * COUNT * sizeof(float));
    float *recv = malloc(COUNT * sizeof(float));
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    ofccl_req_t *req = NULL;
    size_t bad = 0;
    int rc;

    CU_ASSERT_FATAL(send != NULL && recv != NULL && size <= 64);
    for (int b = 0; b < size; b++)
        for (size_t i = 0; i < COUNT; i++)
            send[(size_t)b * COUNT + i] = contribution(rank, b, i);
    memset(recv, 0xff, COUNT * sizeof(float));
    stats_before(&before);
    rc = ofccl_reduce_scatter(comm, send, recv, COUNT, OFCCL_F32, (ofccl_redop_t){OFCCL_OP_SUM, 1},
                              &req);
    stats_after(rc, req, &after);
    for (size_t i = 0; i < COUNT; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += contribution(r, rank, i);
        bad += recv[i] != want;
    }
    CU_ASSERT_EQUAL(bad, 0);
    if (bad)
        fprintf(stderr, "rank %d: reduce-scatter: %zu elements differ\n", rank, bad);
    check_moved(&before, &after);
    free(send);
    free(recv);
}

/* Hierarchical broadcast (OFCCL_ALGO_BC=hier) of 1 MiB from the last rank (on
 * the last host): slice i (of L) goes along rail i from the root's host,
 * host after host, so each rank but those of the host before the root's sends
 * one slice over the fabric (each byte crosses to each host once); within a
 * host each rank sends its slice to the others but the root, the root each
 * rank's slice and its own. Data checked byte by byte. */
static void test_bcast_bytes(void)
{
    const size_t bytes = COUNT * sizeof(float), slice = bytes / (size_t)rph;
    uint8_t *buf = malloc(bytes);
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    ofccl_req_t *req = NULL;
    int hosts = size / rph, root = size - 1, hop = (rank / rph - root / rph + hosts) % hosts, rc;
    uint64_t fabric = hop + 1 < hosts ? slice : 0, local;
    size_t bad = 0;

    if (!hier)
        return;
    if (rank == root)
        local = 2 * (uint64_t)(rph - 1) * slice;
    else
        local = (uint64_t)(hop == 0 ? rph - 2 : rph - 1) * slice;
    CU_ASSERT_FATAL(buf != NULL && bytes % (size_t)rph == 0);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = rank == root ? (uint8_t)(i * 7 + i / 251) : 0xA5;
    stats_before(&before);
    rc = ofccl_broadcast(comm, buf, bytes, OFCCL_U8, root, &req);
    stats_after(rc, req, &after);
    for (size_t i = 0; i < bytes; i++)
        bad += buf[i] != (uint8_t)(i * 7 + i / 251);
    CU_ASSERT_EQUAL(bad, 0);
    check_bytes("broadcast: the local transport", after.local_bytes - before.local_bytes,
                mixed ? local : 0);
    check_bytes("broadcast: the fabric", after.fabric_bytes - before.fabric_bytes,
                mixed ? fabric : fabric + local);
    free(buf);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"each peer's transport follows its host", test_classes},
        {"all-gather: data exact, bytes per transport", test_bytes},
        {"reduce-scatter: data exact, bytes per transport", test_rs_bytes},
        {"hierarchical broadcast: data exact, bytes per transport", test_bcast_bytes},
        {NULL, NULL},
    };
    static char transport[64], algo[64], algo_rs[64], algo_bc[64];
    const char *const settings[] = {algo, algo_rs, transport, algo_bc, NULL};

    rph = argc > 2 ? atoi(argv[1]) : 0;
    if (rph < 1 || (strcmp(argv[2], "auto") != 0 && strcmp(argv[2], "fabric") != 0)) {
        fprintf(stderr, "usage: test_peers RANKS_PER_HOST auto|fabric [direct|hier]\n");
        return 2;
    }
    hier = argc > 3 && strcmp(argv[3], "hier") == 0;
    if (argc > 3 && !hier && strcmp(argv[3], "direct") != 0) {
        fprintf(stderr, "usage: test_peers RANKS_PER_HOST auto|fabric [direct|hier]\n");
        return 2;
    }
    snprintf(algo, sizeof(algo), "ALGO_AG=%s", hier ? "hier" : "direct");
    snprintf(algo_rs, sizeof(algo_rs), "ALGO_RS=%s", hier ? "hier" : "direct");
    snprintf(algo_bc, sizeof(algo_bc), "ALGO_BC=%s", hier ? "hier" : "auto");
    want_auto = strcmp(argv[2], "auto") == 0;
    snprintf(transport, sizeof(transport), "PEER_TRANSPORT=%s", argv[2]);
    return hosts_run_suite("peers", tests, 0, settings);
}
