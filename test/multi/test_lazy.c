/*
 * Multi-rank: peers resolved on demand (OFCCL_BOOT_EXCHANGE). Under mpirun
 * (PMIx: records fetched by direct modex) or the TCP rendezvous (records
 * all-gathered, endpoints still inserted on first use).
 * Usage:
 *   test_lazy check lazy|all   a ring all-gather and reduce-scatter (OFCCL_ALGO_AG/RS=ring)
 *                              resolve exactly the ring neighbours under lazy on a provider
 *                              that inserts peers one at a time, every peer otherwise; data
 *                              checked element by element, then a split communicator. On
 *                              fake hosts (OFCCL_TEST_HOST_RPH=k: rank r on host r / k) with
 *                              the per-peer transport, the host's peers are resolved at
 *                              creation, and a hierarchical all-gather first adds exactly
 *                              the rail peers (same index on the other hosts); after the
 *                              ring collectives a direct all-gather resolves every peer
 *   test_lazy mismatch FIELD R  rank R runs with a setting the others do not have: its ring
 *                              neighbours get MISMATCH naming FIELD and rank R, every other
 *                              rank REMOTE_ERROR naming a rank
 *   test_lazy corrupt R        rank R publishes a corrupt record instead of creating the
 *                              communicator: its neighbours, which fetch it on demand, get
 *                              CORRUPT naming rank R; the others REMOTE_ERROR (its status
 *                              says it succeeded: the peers' own checks must catch it)
 *   test_lazy late             rank 0 closes its context right after creation; the others
 *                              then resolve every peer, rank 0's record included (the TCP
 *                              rendezvous root serves records until every rank has closed)
 */
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_impl.h"
#include "engine_impl.h"
#include "util.h"
#include "world.h"

#define COUNT 1001 /* elements per rank: odd, so chunks align to nothing */

static bool want_lazy;   /* OFCCL_BOOT_EXCHANGE=lazy */
static bool expect_lazy; /* lazy mode on a provider that adds peers one at a time */
static bool host_first;  /* ... and that adds the host's peers at creation */
static int rph;          /* ranks per fake host (OFCCL_TEST_HOST_RPH), 0: one host */

static int boot_rank(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_RANK");

    if (v == NULL)
        v = getenv("OFCCL_BOOT_RANK");
    return v ? atoi(v) : -1;
}

static bool is_neighbour(int r, int of, int n)
{
    return r != of && (r == (of + 1) % n || r == (of + n - 1) % n);
}

static bool same_host(int a, int b)
{
    return rph <= 0 || a / rph == b / rph;
}

/* Same index within its host, another host: the hierarchical algorithms'
 * inter-host partners. */
static bool is_rail_peer(int r, int of)
{
    return rph > 0 && !same_host(r, of) && r % rph == of % rph;
}

static uint64_t resolved_now(void)
{
    ofccl_stats_t st = {.size = sizeof(st)};

    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &st), 0);
    return st.peers_resolved;
}

static float value(int r, int i)
{
    return (float)((r * 7919 + i * 31) % 1000) - 500.0f;
}

static int wait_req(ofccl_comm_t *c, int rc, ofccl_req_t **req)
{
    if (rc == 0) {
        rc = ofccl_wait(*req);
        ofccl_req_free(*req);
    }
    if (rc != 0)
        fprintf(stderr, "rank %d: %d %s: %s\n", rank, rc, ofccl_strerror(rc),
                ofccl_comm_last_error(c));
    return rc;
}

/* All-gather on c (c_rank of c_size), checked against the independent pattern. */
static void check_allgather(ofccl_comm_t *c, int c_rank, int c_size)
{
    float *send = NULL, *recv = NULL;
    ofccl_req_t *req = NULL;
    int bad = 0;

    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(c, COUNT * sizeof(float), (void **)&send), 0);
    CU_ASSERT_EQUAL_FATAL(
        ofccl_buffer_alloc(c, (size_t)c_size * COUNT * sizeof(float), (void **)&recv), 0);
    for (int i = 0; i < COUNT; i++)
        send[i] = value(c_rank, i);
    CU_ASSERT_EQUAL(wait_req(c, ofccl_allgather(c, send, recv, COUNT, OFCCL_F32, &req), &req), 0);
    for (int r = 0; r < c_size; r++)
        for (int i = 0; i < COUNT; i++)
            bad += recv[(size_t)r * COUNT + (size_t)i] != value(r, i);
    CU_ASSERT_EQUAL(bad, 0);
    ofccl_buffer_free(c, send);
    ofccl_buffer_free(c, recv);
}

static void check_reduce_scatter(void)
{
    float *send = NULL, *recv = NULL;
    ofccl_req_t *req = NULL;
    int bad = 0;

    CU_ASSERT_EQUAL_FATAL(
        ofccl_buffer_alloc(comm, (size_t)size * COUNT * sizeof(float), (void **)&send), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, COUNT * sizeof(float), (void **)&recv), 0);
    for (int b = 0; b < size; b++)
        for (int i = 0; i < COUNT; i++)
            send[(size_t)b * COUNT + (size_t)i] = value(rank + b, i);
    CU_ASSERT_EQUAL(wait_req(comm,
                             ofccl_reduce_scatter(comm, send, recv, COUNT, OFCCL_F32,
                                                  (ofccl_redop_t){.kind = OFCCL_OP_SUM}, &req),
                             &req),
                    0);
    for (int i = 0; i < COUNT; i++) {
        float want = 0.0f; /* small integers: every order of summation is exact */
        for (int r = 0; r < size; r++)
            want += value(r + rank, i);
        bad += recv[i] != want;
    }
    CU_ASSERT_EQUAL(bad, 0);
    ofccl_buffer_free(comm, send);
    ofccl_buffer_free(comm, recv);
}

/* Which peers the collectives so far have used, besides the host's peers
 * (resolved at creation where the transport adds them first). */
static bool used_ring, used_rail, used_all;

/* Exactly the peers used so far are resolved (lazy), or every peer. */
static void check_resolved(void)
{
    int n = 0;

    for (int p = 0; p < size; p++) {
        bool used = used_all || (host_first && same_host(p, rank)) ||
                    (used_ring && is_neighbour(p, rank, size)) ||
                    (used_rail && is_rail_peer(p, rank));
        bool want = p != rank && (!expect_lazy || used);
        CU_ASSERT_EQUAL(ofccl__comm_resolved(comm, p) && p != rank, want);
        if ((ofccl__comm_resolved(comm, p) && p != rank) != want)
            fprintf(stderr, "rank %d: peer %d %s\n", rank, p,
                    want ? "not resolved, but used" : "resolved, but not used");
        n += want;
    }
    CU_ASSERT_EQUAL(resolved_now(), (uint64_t)n);
}

static void test_creation(void)
{
    /* The per-peer transport is lazy for its fabric half. */
    if (want_lazy && strstr(ofccl_ctx_provider(ctx), "+local") != NULL)
        CU_ASSERT_TRUE(host_first);
    check_resolved();
    CU_ASSERT_EQUAL(comm->resolved != NULL, expect_lazy);
}

/* Every rank switches the all-gather algorithm at the same point of the
 * program (the setting is read per collective), so all choose alike. */
static void force_allgather(const char *algo)
{
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(
        ofccl__config_parse(OFCCL__CFG_ALGO_AG, algo, &ctx->cfg.v[OFCCL__CFG_ALGO_AG], &e), 0);
}

/* Every host is named as the bootstrap knows it (PMIX_HOSTNAME from the job
 * data, or the rendezvous root's table of the ranks' hostnames), also hosts
 * whose records are not read yet, not by index ("host #1"). The simulated
 * hosts all run on this machine, so every name is its hostname. */
static void test_host_names(void)
{
    char me[64] = "";

    if (rph <= 0 || size == rph)
        return; /* one host */
    CU_ASSERT_EQUAL_FATAL(gethostname(me, sizeof(me) - 1), 0);
    for (int r = 0; r < size; r++) {
        if (strcmp(ofccl__comm_host(comm, r), me) != 0)
            fprintf(stderr, "rank %d: rank %d is on \"%s\", want \"%s\"\n", rank, r,
                    ofccl__comm_host(comm, r), me);
        CU_ASSERT_STRING_EQUAL(ofccl__comm_host(comm, r), me);
    }
}

static void test_hier_allgather(void)
{
    if (rph <= 0 || size % rph != 0 || size == rph)
        return; /* one host: no hierarchy */
    force_allgather("hier");
    check_allgather(comm, rank, size);
    used_rail = true;
    check_resolved();
    force_allgather("ring");
}

static void test_ring_collectives(void)
{
    ofccl_stats_t st = {.size = sizeof(st)};

    check_allgather(comm, rank, size);
    used_ring = true;
    check_resolved();
    check_reduce_scatter();
    check_resolved();
    /* Write contexts come with the peers a collective uses, not with the
     * communicator's size: collectives over two neighbours need one block
     * (were the hierarchical ones run first, they may have needed more). */
    CU_ASSERT_EQUAL(ofccl_ctx_stats(ctx, &st), 0);
    CU_ASSERT(st.op_contexts >= OFCCL__WOP_BLOCK);
    if (rph <= 0 || size == rph)
        CU_ASSERT_EQUAL(st.op_contexts, OFCCL__WOP_BLOCK);
}

static void test_direct_allgather(void)
{
    force_allgather("direct");
    check_allgather(comm, rank, size);
    used_all = true;
    check_resolved();
    force_allgather("ring");
}

static void test_dump_counts(void)
{
    char line[96], *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ofccl_dump_state(ctx, f), 0);
    fclose(f);
    snprintf(line, sizeof(line), "%llu of %d peers resolved", (unsigned long long)resolved_now(),
             size - 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, line));
    free(text);
}

static void test_split(void)
{
    ofccl_comm_t *half = NULL;
    uint64_t before = resolved_now();
    int hr = -1, hs = 0;

    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(comm, rank % 2, rank, &half), 0);
    CU_ASSERT_EQUAL(ofccl_comm_rank(half, &hr), 0);
    CU_ASSERT_EQUAL(ofccl_comm_size(half, &hs), 0);
    CU_ASSERT_EQUAL(hr, rank / 2);
    CU_ASSERT_EQUAL(hs, (size - rank % 2 + 1) / 2);
    /* A split is built from the parent's records: all its members at once. */
    CU_ASSERT_EQUAL(resolved_now(), before + (uint64_t)(hs - 1));
    check_allgather(half, hr, hs);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(half), 0);
    /* The parent still works, and a barrier resolves what it needs. */
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    check_allgather(comm, rank, size);
}

static int run_check(const char *mode)
{
    static const cu_test_t tests[] = {
        {"only the host's peers resolved at creation (lazy)", test_creation},
        {"other hosts named by the bootstrap, not by index", test_host_names},
        {"hierarchical all-gather resolves only the host and rail peers", test_hier_allgather},
        {"ring all-gather and reduce-scatter resolve only the neighbours", test_ring_collectives},
        {"direct all-gather resolves every peer", test_direct_allgather},
        {"ofccl_dump_state reports the count", test_dump_counts},
        {"split communicator and barrier", test_split},
        {NULL, NULL},
    };
    int rc;

    if (world_open(NULL) != 0)
        return 1;
    want_lazy = strcmp(mode, "lazy") == 0;
    expect_lazy = want_lazy && ofccl__prov_caps(ctx->prov)->add_peer;
    host_first = expect_lazy && ofccl__prov_caps(ctx->prov)->add_host_first;
    rph = getenv("OFCCL_TEST_HOST_RPH") ? atoi(getenv("OFCCL_TEST_HOST_RPH")) : 0;
    if (rank == 0)
        printf("lazy: %d ranks, %s, %s exchange, peers resolved %s\n", size,
               ofccl_ctx_provider(ctx), mode,
               host_first    ? "on this host at creation, on other hosts on first use"
               : expect_lazy ? "on first use"
                             : "at creation");
    rc = cu_run("lazy", tests);
    if (world_close(true) != 0)
        rc = 1;
    return rc;
}

/* Creation fails everywhere: `code` and the text `what` where rank `odd`'s
 * neighbours read its record, REMOTE_ERROR naming a rank elsewhere. */
static int expect_failure(int odd, int code, const char *what)
{
    ofccl_ctx_params_t p = {.size = sizeof(p)};
    char odd_name[32];
    const char *msg;
    int rc, r = boot_rank(), n;

    if (ofccl_ctx_create(&p, &ctx) != 0)
        return 1;
    n = ctx->boot->size;
    rc = ofccl_comm_world(ctx, &comm);
    msg = ofccl_ctx_last_error(ctx);
    printf("rank %d: %s: %s\n", r, ofccl_strerror(rc), msg);
    snprintf(odd_name, sizeof(odd_name), "rank %d ", odd);
    if (r == odd || is_neighbour(r, odd, n)) {
        CU_ASSERT_EQUAL(rc, code);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, what));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, odd_name));
    } else {
        CU_ASSERT_EQUAL(rc, OFCCL_ERR_REMOTE_ERROR);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rank "));
    }
    CU_ASSERT_PTR_NULL(comm);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
    return 0;
}

static const char *g_field;
static int g_odd;

static void test_mismatch(void)
{
    expect_failure(g_odd, OFCCL_ERR_MISMATCH, g_field);
}

/* Rank g_odd takes part in both exchanges of a world communicator's creation
 * (publish, status) with a record that is not one. */
static void test_corrupt(void)
{
    static const uint8_t ops[4] = {OFCCL__BOOT_MIN, OFCCL__BOOT_MAX, OFCCL__BOOT_MAX,
                                   OFCCL__BOOT_MAX};
    ofccl_ctx_params_t p = {.size = sizeof(p)};
    /* failed rank (none), communicator number, rank 0's clock, need all records (no) */
    uint64_t status[4] = {UINT64_MAX, 1, 0, 0}, out[4];
    uint8_t junk[200];
    ofccl__boot_pub_t *pub = NULL;
    ofccl__err_t e;

    if (boot_rank() != g_odd) {
        expect_failure(g_odd, OFCCL_ERR_CORRUPT, "blob from rank");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_create(&p, &ctx), 0);
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    CU_ASSERT_EQUAL(
        ofccl__boot_publish(ctx->boot, true, junk, sizeof(junk), ofccl__setup_slot(), &pub, &e), 0);
    /* The status exchange of a lazily created world communicator: "fine". */
    CU_ASSERT_EQUAL(ofccl__boot_allreduce(ctx->boot, status, out, 4, ops, &e), 0);
    ofccl__boot_pub_free(pub);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

/* Rank 0 leaves at once; the others resolve every peer afterwards. */
static void test_late(void)
{
    ofccl_ctx_params_t p = {.size = sizeof(p)};
    struct timespec nap = {0, 300 * 1000 * 1000};

    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_create(&p, &ctx), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_world(ctx, &comm), 0);
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    CU_ASSERT_EQUAL(resolved_now(), 0u);
    if (rank != 0) {
        nanosleep(&nap, NULL); /* rank 0 is in its finalize by now */
        for (int peer = 0; peer < size; peer++) {
            int rc = ofccl__comm_resolve(comm, peer);
            if (rc != 0)
                fprintf(stderr, "rank %d: %s\n", rank, ofccl_comm_last_error(comm));
            CU_ASSERT_EQUAL(rc, 0);
        }
        CU_ASSERT_EQUAL(resolved_now(), (uint64_t)(size - 1));
    }
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

int main(int argc, char **argv)
{
    static const cu_test_t mismatch_tests[] = {
        {"a setting differing on one rank fails creation everywhere", test_mismatch},
        {NULL, NULL},
    };
    static const cu_test_t corrupt_tests[] = {
        {"a corrupt record fetched on demand names its rank", test_corrupt},
        {NULL, NULL},
    };

    if (argc >= 3 && strcmp(argv[1], "check") == 0)
        return run_check(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "mismatch") == 0) {
        g_field = argv[2];
        g_odd = atoi(argv[3]);
        return cu_run("lazy-mismatch", mismatch_tests);
    }
    static const cu_test_t late_tests[] = {
        {"records are served after rank 0 closed its context", test_late},
        {NULL, NULL},
    };

    if (argc >= 2 && strcmp(argv[1], "late") == 0)
        return cu_run("lazy-late", late_tests);
    if (argc >= 3 && strcmp(argv[1], "corrupt") == 0) {
        g_odd = atoi(argv[2]);
        return cu_run("lazy-corrupt", corrupt_tests);
    }
    fprintf(stderr,
            "usage: test_lazy check lazy|all | mismatch FIELD RANK | corrupt RANK | late\n");
    return 2;
}
