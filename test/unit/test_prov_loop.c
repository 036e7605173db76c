/*
 * The provider layer end to end in one process: two endpoints on one domain
 * play rank 0 (A) and rank 1 (B) and move data with writedata, write and
 * atomic adds, on shm, tcp (domain lo) and sockets (domain lo), each in
 * normal and strict mode; then the errors the layer must catch or report.
 * Every wait is bounded by a 10 s deadline.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "provpair.h"

#define REGION 4096

static ofccl__log_t g_log;

static int open_pair(struct pair *p, const char *provider, const char *domain, bool strict,
                     ofccl__err_t *e)
{
    ofccl__prov_params_t pp = {
        .provider = provider, .domain = domain, .strict = strict, .log = &g_log};
    ofccl__ep_params_t ep = {.ops_inflight = 32, .rx_posted = 8};
    return pair_open(p, &pp, &ep, e);
}

static bool done_or_error(struct pair *p, const void *arg)
{
    const int *n = arg;
    return p->st[0].n_done + p->st[0].n_err >= *n;
}

struct bytes {
    const void *a, *b;
    size_t len;
};

static bool bytes_equal(struct pair *p, const void *arg)
{
    const struct bytes *x = arg;
    (void)p;
    return memcmp(x->a, x->b, x->len) == 0;
}

static ofccl__rkey_t rkey_of(const ofccl__mr_t *mr)
{
    return (ofccl__rkey_t){mr->base, mr->key, mr->len};
}

/*
 * Providers that turn a write to a deregistered key into an error completion
 * at the initiator, from what libfabric 1.17 does here. For the others the
 * test still asserts that nothing landed in the deregistered buffer.
 */
static bool detects_stale_keys(const char *prov_name)
{
    /* shm (offset mode) and tcp;ofi_rxm refuse the write at the target (their
     * logs say "unknown key") but complete it successfully at the initiator:
     * shm completes small writes at send time, tcp at transmit. */
    return strcmp(prov_name, "sockets") == 0;
}

static void stale_key(struct pair *p, const ofccl__mr_t *amr, uint8_t *a)
{
    const ofccl__prov_caps_t *caps = ofccl__prov_caps(p->prov);
    uint8_t *victim = calloc(1, REGION);
    ofccl__mr_t *vmr = NULL;
    ofccl__rkey_t rk;
    ofccl__err_t e;
    int target;

    CU_ASSERT_FATAL(victim != NULL);
    CU_ASSERT_EQUAL_FATAL(
        ofccl__mr_reg(p->ep[1], victim, REGION, OFCCL__ACC_REMOTE_WRITE, &vmr, &e), 0);
    rk = rkey_of(vmr);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(vmr), 0);

    memset(a, 0x5a, 12);
    target = p->st[0].n_done + p->st[0].n_err + 1;
    int before_err = p->st[0].n_err;
    CU_ASSERT_EQUAL(ofccl__ep_write(p->ep[0], 1, a, 12, amr, &rk, 0, (void *)0x77, &e), 0);
    CU_ASSERT_TRUE(wait_for(p, 3, done_or_error, &target));
    /* Let the target process the write too (shm completes small writes at
     * the initiator before the target has looked at them). */
    spin(p, 3, 100 * 1000 * 1000);
    if (p->st[0].n_err > before_err) {
        printf("\n    [%s%s] stale key -> on_error(status %d): %s\n", caps->name,
               caps->strict ? ", strict" : "", p->st[0].err_status, p->st[0].err_msg);
        CU_ASSERT_EQUAL(p->st[0].err_peer, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(p->st[0].err_msg, "peer 1"));
        CU_ASSERT_PTR_NOT_NULL(strstr(p->st[0].err_msg, "rank 0"));
        CU_ASSERT_TRUE(p->st[0].err_status == OFCCL_ERR_REMOTE_ERROR ||
                       p->st[0].err_status == OFCCL_ERR_PROVIDER);
    } else {
        printf("\n    [%s%s] stale key NOT detected: the write completed successfully\n",
               caps->name, caps->strict ? ", strict" : "");
        CU_ASSERT_FALSE(detects_stale_keys(caps->name));
    }
    /* Nothing may have landed in the deregistered buffer. */
    for (int i = 0; i < 12; i++)
        CU_ASSERT_EQUAL(victim[i], 0);
    free(victim);
}

/* More ops than descriptors: the pool runs dry (OFCCL_ERR_AGAIN), the caller
 * progresses and retries, and every write still lands exactly once. */
static void burst(struct pair *p, const ofccl__mr_t *amr, uint8_t *a, const ofccl__rkey_t *brk,
                  uint8_t *b)
{
    enum { N = 80, SZ = 32 };
    int posted = 0, agains = 0, done0 = p->st[0].n_done;
    uint64_t end = ofccl__now_ns() + DEADLINE_NS;
    ofccl__err_t e;

    for (int i = 0; i < N; i++)
        memset(a + i * SZ, 0x80 + i, SZ);
    while (posted < N && ofccl__now_ns() < end) {
        int ret = ofccl__ep_write(p->ep[0], 1, a + posted * SZ, SZ, amr, brk, (uint64_t)posted * SZ,
                                  (void *)(uintptr_t)(100 + posted), &e);
        if (ret == OFCCL_ERR_AGAIN) {
            agains++;
            CU_ASSERT_EQUAL(ofccl__ep_pending(p->ep[0]), 32);
            for (int r = 0; r < 2; r++)
                (void)ofccl__ep_progress(p->ep[r], &p->h[r], 8, &e);
            continue;
        }
        CU_ASSERT_EQUAL_FATAL(ret, 0);
        posted++;
    }
    CU_ASSERT_EQUAL(posted, N);
    CU_ASSERT_TRUE(agains > 0);
    {
        struct counts c = {done0 + N, 0, 0};
        struct bytes x = {a, b, (size_t)N * SZ};
        CU_ASSERT_TRUE(wait_for(p, 3, reached, &c));
        CU_ASSERT_TRUE(wait_for(p, 3, bytes_equal, &x));
    }
    CU_ASSERT_EQUAL(p->st[0].n_done, done0 + N);
    CU_ASSERT_EQUAL(p->st[0].n_err, 0);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p->ep[0]), 0);
}

static void run_loop(const char *provider, const char *domain, bool strict)
{
    struct pair p;
    ofccl__err_t e;
    const ofccl__prov_caps_t *caps;
    uint8_t *a, *b;
    uint64_t *ctr;
    ofccl__mr_t *amr = NULL, *bmr = NULL, *cmr = NULL;
    ofccl__rkey_t brk, crk;
    char buf[2048];
    int ret;

    ret = open_pair(&p, provider, domain, strict, &e);
    if (ret != 0) {
        fprintf(stderr, "\n    %s (%s, %s): %s\n", provider, domain, strict ? "strict" : "normal",
                e.msg);
        CU_FAIL("pair_open");
        pair_close(&p);
        return;
    }
    caps = ofccl__prov_caps(p.prov);
    ofccl__prov_caps_format(caps, buf, sizeof(buf));
    printf("\n---- caps: %s domain '%s' %s ----\n%s", provider, domain,
           strict ? "strict" : "normal", buf);
    if (strict) {
        CU_ASSERT_TRUE(caps->mr_local && caps->prov_key && caps->rx_cq_data);
        CU_ASSERT_TRUE(caps->cq_data_size <= 4);
    }

    a = aligned_alloc(64, REGION);
    b = aligned_alloc(64, REGION);
    ctr = aligned_alloc(64, 64);
    CU_ASSERT_FATAL(a && b && ctr);
    memset(a, 0, REGION);
    memset(b, 0, REGION);
    memset(ctr, 0, 64);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[0], a, REGION, OFCCL__ACC_LOCAL, &amr, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], b, REGION, OFCCL__ACC_REMOTE_WRITE, &bmr, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], ctr, 64, OFCCL__ACC_REMOTE_ATOMIC, &cmr, &e), 0);
    brk = rkey_of(bmr);
    crk = rkey_of(cmr);
    CU_ASSERT_EQUAL(bmr->base, caps->virt_addr ? (uint64_t)(uintptr_t)b : 0);
    /* libfabric memory is reached through ops only: no mapping is handed out. */
    {
        void *at = (void *)1;
        CU_ASSERT_FALSE(caps->peer_map);
        CU_ASSERT_FALSE(bmr->shared);
        CU_ASSERT_EQUAL(
            ofccl__ep_peer_map(p.ep[0], 1, &brk, 0, 64, OFCCL__ACC_REMOTE_WRITE, &at, &e),
            OFCCL_ERR_NOT_SUPPORTED);
        CU_ASSERT_PTR_NULL(at);
    }

    /* writedata: bytes land and B sees exactly one immediate. */
    memcpy(a, "hello, world", 12);
    {
        struct counts c = {1, 1, 0};
        struct bytes x = {a, b + 100, 12};
        CU_ASSERT_EQUAL(
            ofccl__ep_writedata(p.ep[0], 1, a, 12, amr, &brk, 100, 0x1234abcdu, (void *)1, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_TRUE(wait_for(&p, 3, bytes_equal, &x));
        spin(&p, 3, 50 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[1].n_data, 1);
        CU_ASSERT_EQUAL(p.st[1].last_data, 0x1234abcdu);
        CU_ASSERT_EQUAL(p.st[0].n_err, 0);
        CU_ASSERT_EQUAL(memcmp(b + 100, "hello, world", 12), 0);
    }

    /* plain write, unregistered source where the provider allows it */
    for (int i = 0; i < 256; i++)
        a[1024 + i] = (uint8_t)(i * 7 + 3);
    {
        struct counts c = {2, 1, 0};
        struct bytes x = {a + 1024, b + 2048, 256};
        CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, a + 1024, 256, caps->mr_local ? amr : NULL,
                                        &brk, 2048, (void *)2, &e),
                        0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_TRUE(wait_for(&p, 3, bytes_equal, &x));
        CU_ASSERT_EQUAL(p.st[1].n_data, 1);
    }

    /* zero-length writedata: only the immediate travels */
    {
        struct counts c = {3, 2, 0};
        CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, NULL, 0, NULL, &brk, 0, 7, (void *)3, &e),
                        0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        spin(&p, 3, 20 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[1].n_data, 2);
        CU_ASSERT_EQUAL(p.st[1].last_data, 7);
    }

    /* atomic add x3: completion means applied, so the value is final at once */
    if (caps->atomic_u64_sum) {
        struct counts c = {6, 2, 0};
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 5, &crk, 8, (void *)4, &e), 0);
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 7, &crk, 8, (void *)5, &e), 0);
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 11, &crk, 8, (void *)6, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_EQUAL(ctr[1], 23);
        CU_ASSERT_EQUAL(ctr[0], 0);
        CU_ASSERT_EQUAL(ctr[2], 0);
    } else {
        CU_FAIL("no 64-bit atomics");
    }
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);

    burst(&p, amr, a, &brk, b);

    /* write_dc: once it completes at A the bytes are at B, no more progress needed */
    for (int i = 0; i < 64; i++)
        a[3072 + i] = (uint8_t)(0xc0 ^ i);
    {
        struct counts c = {p.st[0].n_done + 1, 0, 0};
        CU_ASSERT_EQUAL(
            ofccl__ep_write_dc(p.ep[0], 1, a + 3072, 64, amr, &brk, 3072, (void *)7, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_EQUAL(memcmp(a + 3072, b + 3072, 64), 0);
    }

    /* argument errors: caught before anything is posted */
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 2, a, 8, amr, &brk, 0, NULL, &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "peer 2"));
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], -1, a, 8, amr, &brk, 0, NULL, &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, a, 16, amr, &brk, REGION - 8, NULL, &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "rank 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "peer 1"));
    CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 1, &crk, 4, NULL, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 1, &crk, 64, NULL, &e), OFCCL_ERR_INVALID_ARG);
    if (strict) {
        uint8_t local[16] = {0};
        CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, local, sizeof(local), NULL, &brk, 0, NULL, &e),
                        OFCCL_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "strict mode"));
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not registered"));
        /* 4 bytes of immediate in strict mode */
        CU_ASSERT_EQUAL(
            ofccl__ep_writedata(p.ep[0], 1, NULL, 0, NULL, &brk, 0, 1ull << 32, NULL, &e),
            OFCCL_ERR_INVALID_ARG);
    }
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);

    /* busy objects */
    CU_ASSERT_EQUAL(ofccl__ep_close(p.ep[1]), OFCCL_ERR_BUSY);
    CU_ASSERT_EQUAL(ofccl__prov_close(p.prov), OFCCL_ERR_BUSY);

    stale_key(&p, amr, a);
    /* B's handler must not have seen anything from the failed write. */
    CU_ASSERT_EQUAL(p.st[1].n_data, 2);

    CU_ASSERT_EQUAL(ofccl__mr_dereg(amr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(bmr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(cmr), 0);
    pair_close(&p);
    free(a);
    free(b);
    free(ctr);
}

static void test_shm_normal(void)
{
    run_loop("shm", "", false);
}

static void test_shm_strict(void)
{
    run_loop("shm", "", true);
}

static void test_tcp_normal(void)
{
    run_loop("tcp", "lo", false);
}

static void test_tcp_strict(void)
{
    run_loop("tcp", "lo", true);
}

static void test_sockets_normal(void)
{
    run_loop("sockets", "lo", false);
}

static void test_sockets_strict(void)
{
    run_loop("sockets", "lo", true);
}

/*
 * write_dc's fallback for providers that refuse FI_DELIVERY_COMPLETE: every
 * provider here accepts it, so the flag is cleared by hand (the caps struct is
 * const to users; this test pokes it on purpose) to run write + fencing read.
 */
static void test_write_dc_fallback(void)
{
    struct pair p;
    ofccl__err_t e;
    uint8_t *a = calloc(1, REGION), *b = calloc(1, REGION);
    ofccl__mr_t *amr = NULL, *bmr = NULL;
    ofccl__rkey_t brk;

    CU_ASSERT_FATAL(a && b);
    CU_ASSERT_EQUAL_FATAL(open_pair(&p, "shm", "", true, &e), 0);
    ((ofccl__prov_caps_t *)ofccl__prov_caps(p.prov))->delivery_complete = false;
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[0], a, REGION, OFCCL__ACC_LOCAL, &amr, &e), 0);
    /* The fencing read needs remote read access to the target region. */
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], b, REGION,
                                        OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_READ, &bmr, &e),
                          0);
    brk = rkey_of(bmr);
    for (int round = 0; round < 3; round++) {
        struct counts c = {round + 1, 0, 0};
        memset(a, 0x31 + round, 512);
        CU_ASSERT_EQUAL(ofccl__ep_write_dc(p.ep[0], 1, a, 512, amr, &brk, 1024, (void *)8, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_EQUAL(memcmp(a, b + 1024, 512), 0);
    }
    CU_ASSERT_EQUAL(p.st[0].n_done, 3);
    CU_ASSERT_EQUAL(p.st[0].n_err, 0);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(amr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(bmr), 0);
    pair_close(&p);
    free(a);
    free(b);
}

static void test_unknown_provider(void)
{
    ofccl__prov_params_t pp = {.provider = "foo", .domain = "", .strict = false, .log = &g_log};
    ofccl__prov_t *prov = NULL;
    ofccl__err_t e;

    CU_ASSERT_EQUAL(ofccl__prov_open(&pp, &prov, &e), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(prov);
    CU_ASSERT_EQUAL(e.code, OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "'foo'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "offers:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shm"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tcp;ofi_rxm"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_PROVIDER"));
}

static void test_unknown_domain(void)
{
    ofccl__prov_params_t pp = {
        .provider = "tcp", .domain = "nosuchnic0", .strict = false, .log = &g_log};
    ofccl__prov_t *prov = NULL;
    ofccl__err_t e;

    CU_ASSERT_EQUAL(ofccl__prov_open(&pp, &prov, &e), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(prov);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nosuchnic0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "lo")); /* lists the domains it has */
}

static void test_mr_invalid(void)
{
    ofccl__prov_params_t pp = {.provider = "shm", .domain = "", .strict = false, .log = &g_log};
    ofccl__ep_params_t epp = {.rank = 0, .size = 1, .ops_inflight = 4, .rx_posted = 4};
    ofccl__prov_t *prov = NULL;
    ofccl__ep_t *ep = NULL;
    ofccl__mr_t *mr = NULL;
    ofccl__err_t e;
    char buf[64];

    CU_ASSERT_EQUAL_FATAL(ofccl__prov_open(&pp, &prov, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &epp, &ep, &e), 0);
    CU_ASSERT_EQUAL(ofccl__mr_reg(ep, NULL, 64, OFCCL__ACC_LOCAL, &mr, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__mr_reg(ep, buf, 0, OFCCL__ACC_LOCAL, &mr, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__mr_reg(ep, buf, sizeof(buf), 0, &mr, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(mr);
    CU_ASSERT_EQUAL(ofccl__ep_close(ep), 0);
    CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
}

static void test_prov_list(void)
{
    ofccl__prov_dom_t d[64];
    ofccl__err_t e;
    int n = -1, lo = 0;
    char avail[512];

    CU_ASSERT_EQUAL(ofccl__prov_list("tcp", d, 64, &n, &e), 0);
    CU_ASSERT_TRUE(n > 0);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_STRING_EQUAL(d[i].prov_name, "tcp;ofi_rxm");
        lo += strcmp(d[i].domain, "lo") == 0;
        for (int k = 0; k < i; k++)
            CU_ASSERT_NOT_EQUAL(memcmp(&d[i], &d[k], sizeof(d[i])), 0);
    }
    CU_ASSERT_TRUE(lo >= 1);
    CU_ASSERT_EQUAL(ofccl__prov_list("", d, 64, &n, &e), 0);
    CU_ASSERT_TRUE(n > 0);
    CU_ASSERT_EQUAL(ofccl__prov_list("foo", d, 64, &n, &e), OFCCL_ERR_NOT_SUPPORTED);
    ofccl__prov_available(avail, sizeof(avail));
    CU_ASSERT_PTR_NOT_NULL(strstr(avail, "shm"));
    CU_ASSERT_EQUAL(strncmp(ofccl__prov_fabric_version(), "1.", 2), 0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"shm normal", test_shm_normal},
        {"shm strict", test_shm_strict},
        {"tcp lo normal", test_tcp_normal},
        {"tcp lo strict", test_tcp_strict},
        {"sockets lo normal", test_sockets_normal},
        {"sockets lo strict", test_sockets_strict},
        {"write_dc fallback (shm, forced)", test_write_dc_fallback},
        {"unknown provider", test_unknown_provider},
        {"unknown domain", test_unknown_domain},
        {"mr_reg invalid", test_mr_invalid},
        {"prov_list", test_prov_list},
        {NULL, NULL},
    };

    ofccl__log_init(&g_log);
    /* The negative tests log their warnings by design; keep output readable. */
    g_log.level = getenv("TEST_LOG_INFO") ? OFCCL__LOG_INFO : OFCCL__LOG_ERROR;
    return cu_run("prov-loop", tests);
}
