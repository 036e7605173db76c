/*
 * The composite transport (providers/mixed.c) in one process: provider
 * handles opened with same_host_local over tcp on loopback. Endpoints of
 * handles with equal host identities reach each other through the local
 * transport; with different identities, through tcp. Each pair moves a
 * write with CQ data and an atomic add, checked at the target, and the
 * bytes are counted under the class of transport that carried them, with
 * the peers inserted all at once or added one at a time (lazy creation: each
 * name routed to the half that reaches it). Where keys cannot be shared
 * (strict mode) the fabric provider is left alone.
 */
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "provpair.h"

static ofccl__log_t g_log;

static int open_mixed(const char *host, bool strict, int signal, ofccl__prov_t **prov,
                      ofccl__err_t *e)
{
    ofccl__prov_params_t pp = {.provider = "tcp",
                               .domain = "lo",
                               .strict = strict,
                               .log = &g_log,
                               .signal = signal,
                               .same_host_local = true,
                               .host_id = host};

    *prov = NULL;
    return ofccl__prov_open(&pp, prov, e);
}

static void test_caps(void)
{
    ofccl__prov_t *prov;
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(open_mixed("h0", false, OFCCL__PROV_SIGNAL_ATOMIC, &prov, &e), 0);
    CU_ASSERT_STRING_EQUAL(ofccl__prov_caps(prov)->name, "tcp;ofi_rxm+local");
    CU_ASSERT_FALSE(ofccl__prov_caps(prov)->peer_map);
    CU_ASSERT_EQUAL(ofccl__prov_caps(prov)->signal, OFCCL__PROV_SIGNAL_ATOMIC);
    /* Lazy creation: one peer at a time, the host's first. */
    CU_ASSERT_TRUE(ofccl__prov_caps(prov)->add_peer);
    CU_ASSERT_TRUE(ofccl__prov_caps(prov)->add_host_first);
    CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
    /* Strict mode: provider keys, which the local half cannot share. */
    CU_ASSERT_EQUAL_FATAL(open_mixed("h0", true, OFCCL__PROV_SIGNAL_AUTO, &prov, &e), 0);
    CU_ASSERT_STRING_EQUAL(ofccl__prov_caps(prov)->name, "tcp;ofi_rxm");
    CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
}

/* Rank 0 on a handle of host `h0`, rank 1 on one of `h1` (the same handle
 * when the names are equal and the peers are inserted all at once; with
 * by_one each rank adds itself and its peer one at a time): a write with
 * data and an atomic add from 0 to 1. */
static void move(const char *h0, const char *h1, int want_class, bool by_one)
{
    ofccl__ep_params_t epp = {.size = 2, .ops_inflight = 16};
    struct pair p;
    ofccl__prov_t *provs[2] = {NULL, NULL};
    char names[2][NAME_MAX_LEN], src[256];
    size_t lens[2];
    uint64_t before[OFCCL__PEER_CLASSES], after[OFCCL__PEER_CLASSES];
    ofccl__mr_t *mr = NULL;
    ofccl__rkey_t rk;
    struct counts c1 = {1, 1, 0}, c2 = {2, 1, 0};
    ofccl__err_t e;
    char *win;
    bool one = strcmp(h0, h1) == 0 && !by_one;

    if (one) {
        ofccl__prov_params_t pp = {.provider = "tcp",
                                   .domain = "lo",
                                   .strict = false,
                                   .log = &g_log,
                                   .same_host_local = true,
                                   .host_id = h0};
        CU_ASSERT_EQUAL_FATAL(pair_open(&p, &pp, &epp, &e), 0);
        provs[0] = provs[1] = p.prov;
    } else {
        memset(&p, 0, sizeof(p));
        CU_ASSERT_EQUAL_FATAL(open_mixed(h0, false, OFCCL__PROV_SIGNAL_AUTO, &provs[0], &e), 0);
        CU_ASSERT_EQUAL_FATAL(open_mixed(h1, false, OFCCL__PROV_SIGNAL_AUTO, &provs[1], &e), 0);
        for (int r = 0; r < 2; r++) {
            epp.rank = r;
            CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(provs[r], &epp, &p.ep[r], &e), 0);
            lens[r] = NAME_MAX_LEN;
            CU_ASSERT_EQUAL_FATAL(ofccl__ep_name(p.ep[r], names[r], &lens[r], &e), 0);
            p.h[r] = (ofccl__ep_handlers_t){&p.st[r], on_done, on_error, on_remote_data};
        }
        for (int r = 0; r < 2 && !by_one; r++)
            CU_ASSERT_EQUAL_FATAL(ofccl__ep_insert_peers(p.ep[r], names, NAME_MAX_LEN, lens, 2, &e),
                                  0);
        for (int r = 0; r < 2 && by_one; r++) {
            /* A name cut short is refused, naming the peer. */
            CU_ASSERT_EQUAL(ofccl__ep_add_peer(p.ep[r], 1 - r, names[1 - r], lens[1 - r] - 1, &e),
                            OFCCL_ERR_CORRUPT);
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "peer "));
            for (int q = 0; q < 2; q++)
                CU_ASSERT_EQUAL_FATAL(ofccl__ep_add_peer(p.ep[r], q, names[q], lens[q], &e), 0);
            /* Adding a peer again changes nothing. */
            CU_ASSERT_EQUAL(ofccl__ep_add_peer(p.ep[r], 1 - r, names[1 - r], lens[1 - r], &e), 0);
        }
    }
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(ofccl__ep_peer_class(p.ep[r], r), OFCCL__PEER_LOCAL);
        CU_ASSERT_EQUAL(ofccl__ep_peer_class(p.ep[r], 1 - r), want_class);
    }
    /* Memory peers write into is the local half's shared memory. */
    win = ofccl__prov_mem_alloc_on(provs[1], 4096);
    CU_ASSERT_PTR_NOT_NULL_FATAL(win);
    memset(win, 0, 4096);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, 4096,
                                        OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC, &mr,
                                        &e),
                          0);
    rk = (ofccl__rkey_t){mr->base, mr->key, mr->len};
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (char)(i * 7 + 1);
    ofccl__prov_bytes(provs[0], before);
    CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, src, sizeof(src), NULL, &rk, 64, 0x2a, &p, &e),
                    0);
    CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c1));
    CU_ASSERT_EQUAL(memcmp(win + 64, src, sizeof(src)), 0);
    CU_ASSERT_EQUAL(p.st[1].last_data, 0x2a);
    CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 5, &rk, 1024, &p, &e), 0);
    CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c2));
    CU_ASSERT_EQUAL(*(volatile uint64_t *)(void *)(win + 1024), 5);
    CU_ASSERT_EQUAL(p.st[0].n_err, 0);
    ofccl__prov_bytes(provs[0], after);
    CU_ASSERT_EQUAL(after[want_class] - before[want_class], sizeof(src) + 8);
    CU_ASSERT_EQUAL(after[1 - want_class], before[1 - want_class]);

    /* One signal sent, one arrived: nothing more comes. */
    spin(&p, 3, 20 * 1000 * 1000);
    CU_ASSERT_EQUAL(p.st[1].n_data, 1);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(mr), 0);
    if (one) {
        pair_close(&p);
    } else {
        for (int r = 0; r < 2; r++)
            CU_ASSERT_EQUAL(ofccl__ep_close(p.ep[r]), 0);
        for (int r = 0; r < 2; r++)
            CU_ASSERT_EQUAL(ofccl__prov_close(provs[r]), 0);
    }
    ofccl__prov_mem_free(win);
}

static void test_same_host(void)
{
    move("hostA", "hostA", OFCCL__PEER_LOCAL, false);
}

static void test_other_host(void)
{
    move("hostA", "hostB", OFCCL__PEER_FABRIC, false);
}

static void test_same_host_by_one(void)
{
    move("hostA", "hostA", OFCCL__PEER_LOCAL, true);
}

static void test_other_host_by_one(void)
{
    move("hostA", "hostB", OFCCL__PEER_FABRIC, true);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"composite caps, or the fabric alone where keys cannot be shared", test_caps},
        {"same host: through the local transport", test_same_host},
        {"other host: through tcp", test_other_host},
        {"same host, peers added one at a time: through the local transport",
         test_same_host_by_one},
        {"other host, peers added one at a time: through tcp", test_other_host_by_one},
        {NULL, NULL},
    };

    ofccl__log_init(&g_log);
    return cu_run("mixed", tests);
}
