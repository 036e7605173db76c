/*
 * The chooser's cost model (lib/coll/cost.c) and its link constants
 * (lib/core/links.c), without a job: predicted times against the formulas of
 * docs/scaling.md written out here for each shape, the crossovers they imply
 * (solved here by hand), the decisions docs/performance.md measured, and the
 * agreement of per-rank constants (configured must match; measured -> median).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "cost.h"
#include "cu.h"

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

/* Local copies at 10 GB/s and 0.2 us; fabric tcp-like, 13.5 us and 2.5 GB/s,
 * its bytes copied on the rank's core. */
static ofccl__cost_topo_t topo(int n, int hosts, int width, bool local_peers, bool peer_map)
{
    ofccl__cost_topo_t t = {.n = n,
                            .hosts = hosts,
                            .width = width,
                            .local_peers = local_peers,
                            .peer_map = peer_map,
                            .fabric_cpu = true,
                            .streams = 13,
                            .chunk = 512 * 1024,
                            .alpha = {0.2e-6, 13.5e-6},
                            .beta = {10e9, 2.5e9}};
    return t;
}

static const unsigned all_ag =
    (1u << OFCCL__CAND_DIRECT) | (1u << OFCCL__CAND_RING) | (1u << OFCCL__CAND_HIER);
static const unsigned all_bc =
    (1u << OFCCL__CAND_DIRECT) | (1u << OFCCL__CAND_CHAIN) | (1u << OFCCL__CAND_HIER);

static bool near(double got, double want)
{
    return fabs(got - want) <= 1e-9 * fabs(want) + 1e-15;
}

/* One host, local transport: direct reads each peer's block once, the ring
 * adds n-2 latencies, so direct (pull) wins at every size and rank count. The
 * reduce-scatter: direct (pull) sums n inputs where they lie, (n + 1) b read
 * and written at twice the copy rate; each of the ring's n - 1 steps copies
 * b and sums two inputs (3 b). */
static void test_local_one_host(void)
{
    for (int n = 2; n <= 64; n *= 2) {
        ofccl__cost_topo_t t = topo(n, 1, n, true, true);
        for (double b = 1024; b <= 1024 * MIB; b *= 4) {
            double d = 0.2e-6 + (n - 1) * b / 10e9,
                   r = (n - 1) * (0.2e-6 + b / 10e9 + 1.5 * b / 10e9);
            CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_DIRECT, (size_t)b), d));
            CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_RING, (size_t)b), r));
            CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_DIRECT, (size_t)b),
                           0.2e-6 + (n + 1) * b / 20e9));
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
            /* broadcast: every reader pulls the root's buffer at once */
            CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__BC, OFCCL__CAND_DIRECT, (size_t)b),
                           0.2e-6 + b / 10e9));
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__BC, (size_t)b, all_bc), OFCCL__CAND_DIRECT);
        }
        /* one host: no hierarchical shape */
        CU_ASSERT(isinf(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_HIER, 1 << 20)));
    }
}

/* One host over the fabric (tcp): direct with n-1 streams per endpoint,
 * slowed by (n-1)/13 past 13 of them; ring (n-1)(a + b/B). Up to 14 ranks
 * direct always; from 15 the ring wins above
 *   (n-2) a < (n-1) b/B ((n-1)/13 - 1)  <=>  b > 13 (n-2) a B / ((n-1)(n-14)).
 * The reduce-scatter's sums add to tcp's copies on the same core: direct's one
 * sum of n inputs against the ring's n - 1 of two keeps direct up to 17 ranks
 * at every size; at 32 the ring's fewer streams win again for large blocks. */
static void test_fabric_one_host_crossover(void)
{
    const double a = 13.5e-6, B = 2.5e9;

    for (int n = 2; n <= 14; n++) {
        ofccl__cost_topo_t t = topo(n, 1, n, false, false);
        for (double b = 1024; b <= 1024 * MIB; b *= 2)
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
    }
    for (int n = 15; n <= 64; n++) {
        ofccl__cost_topo_t t = topo(n, 1, n, false, false);
        double cross = 13.0 * (n - 2) * a * B / ((n - 1) * (double)(n - 14));
        size_t b = 1 << 20;
        CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_DIRECT, b),
                       a + (n - 1) * (double)b * ((n - 1) / 13.0) / B));
        CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_RING, b),
                       (n - 1) * (a + (double)b / B)));
        CU_ASSERT(
            near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_DIRECT, b),
                 a + (n - 1) * (double)b * ((n - 1) / 13.0) / B + (n + 1) * (double)b / 20e9));
        CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_RING, b),
                       (n - 1) * (a + (double)b / B + 1.5 * (double)b / 10e9)));
        CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 0.97), all_ag),
                        OFCCL__CAND_DIRECT);
        CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 1.03), all_ag),
                        OFCCL__CAND_RING);
        for (double bb = 1024; n <= 17 && bb <= 1024 * MIB; bb *= 2)
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, (size_t)bb, all_ag),
                            OFCCL__CAND_DIRECT);
        if (n >= 18)
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, 64 << 20, all_ag), OFCCL__CAND_RING);
    }
    /* the figure: 16 ranks from about 200 KiB per block */
    CU_ASSERT(fabs(13.0 * 14 * a * B / (15 * 2.0) - 204750) < 1);
}

/* One host over a fast fabric whose NIC moves the bytes (50 GB/s, 2 us): the
 * reduce-scatter's sums, not the fabric, bound the ring's steps (1.5 b at 10
 * GB/s against b at 50), so at 16 ranks direct's one sum of 16 inputs (8.5 b)
 * beats the ring's 15 sums of two (22.5 b) at every size, while the
 * all-gather, with nothing to sum, takes the ring above
 * 14 a / (b/B (15/13 - 1) 15) = 606.7 KB. At tcp's 2.5 GB/s such a fabric
 * would bound every step, and the reduce-scatter's ring cost what the
 * all-gather's does. */
static void test_fabric_sums(void)
{
    ofccl__cost_topo_t t = topo(16, 1, 16, false, false);
    const double a = 2e-6, B = 50e9, cross = 14 * a * B * 13 / (15 * 2.0);

    t.fabric_cpu = false;
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_RING, 1 << 20),
                   ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_RING, 1 << 20)));
    t.alpha[OFCCL__LINK_FABRIC] = a;
    t.beta[OFCCL__LINK_FABRIC] = B;
    CU_ASSERT(
        near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_RING, 1 << 20), 15 * 1.5 * MIB / 10e9));
    CU_ASSERT(
        near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_DIRECT, 1 << 20), a + 17 * MIB / 20e9));
    CU_ASSERT(fabs(cross - 606667) < 1);
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 0.97), all_ag),
                    OFCCL__CAND_DIRECT);
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 1.03), all_ag),
                    OFCCL__CAND_RING);
    for (double b = 1024; b <= 1024 * MIB; b *= 2)
        CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
}

/* Two hosts of four ranks joined by a 117.5 MB/s link (perf/hosts/bench.sh)
 * with same-host peers on the local transport: at large blocks the link
 * carries 16 blocks per host for direct, 7 one after the other for the ring
 * and 4 for hier, whose second phase (3 x 2 blocks at 10 GB/s) overlaps. */
static void test_two_hosts_link_limited(void)
{
    ofccl__cost_topo_t t = topo(8, 2, 4, true, false);
    double C = 117.5e6, b = 8 * MIB, d, r, h, t1, t2;

    t.beta[OFCCL__LINK_FABRIC] = C;
    d = 13.5e-6 + 16 * b / C;
    r = 7 * (13.5e-6 + b / C);
    t1 = 13.5e-6 + 4 * b / C;
    t2 = 0.2e-6 + 3 * 2 * b / 10e9;
    h = t1 + t2 * (512 * KIB / b);
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_DIRECT, (size_t)b), d));
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_RING, (size_t)b), r));
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_HIER, (size_t)b), h));
    /* measured at 1-16 MiB: ring / hier 1.6-2.0, direct / hier 3.8-4.8 (docs/performance.md) */
    CU_ASSERT(r / h > 1.7 && r / h < 1.8);
    CU_ASSERT(d / h > 3.9 && d / h < 4.1);
    for (double bb = 16 * KIB; bb <= 64 * MIB; bb *= 2)
        CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)bb, all_ag), OFCCL__CAND_HIER);
    /* the reduce-scatter alike, its sums (4 inputs of 2 b, then 2 of b) far
     * below the link; without hier the ring, at the link's 4/7 vs 1/4 */
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__RS, OFCCL__CAND_HIER, (size_t)b),
                   t1 + (t2 + 5 * 2 * b / 20e9) * (512 * KIB / b)));
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, (size_t)b, all_ag), OFCCL__CAND_HIER);
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, (size_t)b, all_ag & ~(1u << OFCCL__CAND_HIER)),
                    OFCCL__CAND_RING);
    /* a block within one chunk: the phases run one after the other */
    b = 128 * KIB;
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__AG, OFCCL__CAND_HIER, (size_t)b),
                   13.5e-6 + 4 * b / C + 0.2e-6 + 6 * b / 10e9));
}

/* Two hosts of two ranks, every peer through the fabric: direct puts 4 blocks
 * per host on the link (2 ranks x 2 remote peers), the ring 3 in turn:
 * a + 4b/B = 3(a + b/B) at b = 2aB. */
static void test_two_hosts_fabric_crossover(void)
{
    ofccl__cost_topo_t t = topo(4, 2, 2, false, false);
    double cross = 2 * 13.5e-6 * 2.5e9;
    unsigned flat = all_ag & ~(1u << OFCCL__CAND_HIER);

    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 0.97), flat),
                    OFCCL__CAND_DIRECT);
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 1.03), flat),
                    OFCCL__CAND_RING);
}

/* OFCCL_LINK_STREAMS=7, an endpoint slowed past 7 streams: the all-gather's
 * ring from 9 ranks above 7 (n-2) a B / ((n-1)(n-8)), 27 KiB per block at 16;
 * 1000 streams: direct at every size up to 64 ranks. */
static void test_streams_setting(void)
{
    const double a = 13.5e-6, B = 2.5e9;

    for (int n = 9; n <= 64; n++) {
        ofccl__cost_topo_t t = topo(n, 1, n, false, false);
        double cross = 7.0 * (n - 2) * a * B / ((n - 1) * (double)(n - 8));
        t.streams = 7;
        CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 0.97), all_ag),
                        OFCCL__CAND_DIRECT);
        CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)(cross * 1.03), all_ag),
                        OFCCL__CAND_RING);
        t.streams = 1000;
        for (double b = 1024; b <= 1024 * MIB; b *= 4)
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
    }
    CU_ASSERT(fabs(7.0 * 14 * a * B / (15 * 8.0) - 27563) < 1);
}

/* Two ranks: direct and the ring move the same block once and sum it once, so
 * they tie at every size, on every kind of link, and ties go to direct. */
static void test_two_ranks_tie(void)
{
    for (int k = 0; k < 4; k++) {
        ofccl__cost_topo_t t = topo(2, 1, 2, k & 1, k & 1);
        t.fabric_cpu = (k & 2) != 0;
        for (double b = 8; b <= 1024 * MIB; b *= 1.37) {
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__AG, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
            CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__RS, (size_t)b, all_ag), OFCCL__CAND_DIRECT);
        }
    }
}

/* Broadcast over tcp at 3 ranks: direct a + 2S/B, chain (k + 1)(a + c/B) with
 * c = min(512 KiB, S), k = S / c: a single chunk never pays, and from two
 * chunks on the chain wins once S/(2B) > 2a + ..., here at 1 MiB. */
static void test_bcast_chain(void)
{
    ofccl__cost_topo_t t = topo(3, 1, 3, false, false);
    const double a = 13.5e-6, B = 2.5e9, c = 512 * KIB;

    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__BC, 512 * 1024, all_bc), OFCCL__CAND_DIRECT);
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__BC, OFCCL__CAND_CHAIN, 1 << 20), 3 * (a + c / B)));
    CU_ASSERT(near(ofccl__cost_time(&t, OFCCL__BC, OFCCL__CAND_DIRECT, 1 << 20), a + 2 * MIB / B));
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__BC, 1 << 20, all_bc), OFCCL__CAND_CHAIN);
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__BC, 64 << 20, all_bc), OFCCL__CAND_CHAIN);
    /* only valid candidates; none: COUNT */
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__BC, 64 << 20, 1u << OFCCL__CAND_DIRECT),
                    OFCCL__CAND_DIRECT);
    CU_ASSERT_EQUAL(ofccl__cost_pick(&t, OFCCL__BC, 64 << 20, 0), OFCCL__CAND_COUNT);
}

static void test_link_parse(void)
{
    ofccl__link_t l;
    ofccl__err_t e;
    bool conf;

    CU_ASSERT_EQUAL(ofccl__link_parse(OFCCL__CFG_LINK_LOCAL, "0.5:12.5", &l, &conf, &e), 0);
    CU_ASSERT(conf);
    CU_ASSERT_EQUAL(l.alpha_ns, 500);
    CU_ASSERT_EQUAL(l.mbps, 12500);
    CU_ASSERT_EQUAL(l.source, OFCCL__LINK_CONFIGURED);
    CU_ASSERT_EQUAL(ofccl__link_parse(OFCCL__CFG_LINK_FABRIC, "auto", &l, &conf, &e), 0);
    CU_ASSERT(!conf);
    static const char *const bad[] = {"x", "1", "1:", ":2", "1:0", "-1:2", "1:2x", "1:2:3"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        CU_ASSERT_EQUAL(ofccl__link_parse(OFCCL__CFG_LINK_FABRIC, bad[k], &l, &conf, &e),
                        OFCCL_ERR_CONFIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_LINK_FABRIC"));
    }
    CU_ASSERT(ofccl__link_copy_mbps() > 100); /* any machine copies faster than 100 MB/s */
}

/* Four ranks' constants: measured ones agree on the median, the same on
 * every rank; a configured one that differs is a MISMATCH naming it. */
static void test_links_agree(void)
{
    ofccl_ctx_t *ctx = calloc(1, sizeof(*ctx));
    ofccl__link_t all[4][OFCCL__LINK_CLASSES];
    static const uint32_t mbps[4] = {9000, 3000, 12000, 5000};

    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    ofccl__log_init(&ctx->log);
    for (int r = 0; r < 4; r++) {
        all[r][0] = (ofccl__link_t){200, mbps[r], OFCCL__LINK_MEASURED};
        all[r][1] = (ofccl__link_t){13500, 2500, OFCCL__LINK_DEFAULT};
    }
    for (int me = 0; me < 4; me++) {
        ofccl_comm_t comm = {.ctx = ctx, .rank = me, .size = 4};
        CU_ASSERT_EQUAL(ofccl__links_agree(&comm, (const ofccl__link_t(*)[2])all), 0);
        CU_ASSERT_EQUAL(comm.link[0].mbps, 5000); /* lower median of 3000 5000 9000 12000 */
        CU_ASSERT_EQUAL(comm.link[0].alpha_ns, 200);
        CU_ASSERT_EQUAL(comm.link[0].source, OFCCL__LINK_MEASURED);
        CU_ASSERT_EQUAL(comm.link[1].source, OFCCL__LINK_DEFAULT);
    }
    for (int r = 0; r < 4; r++)
        all[r][1] = (ofccl__link_t){2000, 50000, OFCCL__LINK_CONFIGURED};
    {
        ofccl_comm_t comm = {.ctx = ctx, .rank = 1, .size = 4};
        CU_ASSERT_EQUAL(ofccl__links_agree(&comm, (const ofccl__link_t(*)[2])all), 0);
        CU_ASSERT_EQUAL(comm.link[1].mbps, 50000);
    }
    all[3][1].mbps = 25000;
    for (int me = 0; me < 4; me++) {
        ofccl_comm_t comm = {.ctx = ctx, .rank = me, .size = 4};
        CU_ASSERT_EQUAL(ofccl__links_agree(&comm, (const ofccl__link_t(*)[2])all),
                        OFCCL_ERR_MISMATCH);
        CU_ASSERT_PTR_NOT_NULL(strstr(comm.err.msg, "OFCCL_LINK_FABRIC"));
    }
    free(ctx);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"one host, local transport: direct at every size", test_local_one_host},
        {"one host over tcp: ring crossover from 15 ranks", test_fabric_one_host_crossover},
        {"one host, fast fabric: the ring's sums bound it", test_fabric_sums},
        {"2 x 4 behind a 117.5 MB/s link: hier, ratios", test_two_hosts_link_limited},
        {"2 x 2 over the fabric: direct/ring crossover", test_two_hosts_fabric_crossover},
        {"OFCCL_LINK_STREAMS moves the crossover", test_streams_setting},
        {"two ranks: direct and ring tie, direct wins", test_two_ranks_tie},
        {"broadcast: chain against direct", test_bcast_chain},
        {"OFCCL_LINK_* values", test_link_parse},
        {"ranks agree on the constants", test_links_agree},
        {NULL, NULL},
    };
    return cu_run("cost", tests);
}
