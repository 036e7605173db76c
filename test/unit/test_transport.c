/*
 * The transport seam (providers/prov_impl.h) itself: every backend's
 * operations table is complete; what OFCCL_PROVIDER=auto means comes from the
 * quirk table; the signal method is the transport's choice, reported in
 * caps.signal, and a request it cannot meet fails when it is opened; memory
 * from ofccl__prov_mem_alloc is freed without its provider handle, by the
 * backend that made it. One process, no peers; every object is closed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "prov_impl.h"

static ofccl__log_t g_log;

static int open_prov(const char *name, int signal, ofccl__prov_t **prov, ofccl__err_t *e)
{
    /* Loopback for the network providers: nothing leaves this host. */
    const char *dom = strcmp(name, "tcp") == 0 || strcmp(name, "net") == 0 ? "lo" : "";
    ofccl__prov_params_t pp = {
        .provider = name, .domain = dom, .strict = false, .log = &g_log, .signal = signal};

    *prov = NULL;
    return ofccl__prov_open(&pp, prov, e);
}

/* Every slot filled (stubs, never NULL), so no caller ever tests for one.
 * The slots from `open` on are all function pointers: read them as such, so a
 * slot added later is checked too. */
static void check_table(const ofccl__backend_t *be)
{
    typedef void (*slot_fn)(void);
    size_t slots = 0;

    CU_ASSERT_EQUAL(be->size, sizeof(ofccl__backend_t));
    CU_ASSERT_PTR_NOT_NULL(be->name);
    CU_ASSERT_PTR_NOT_NULL(be->mem_what);
    for (size_t off = offsetof(ofccl__backend_t, open); off + sizeof(slot_fn) <= sizeof(*be);
         off += sizeof(slot_fn), slots++) {
        slot_fn fn;
        memcpy(&fn, (const char *)be + off, sizeof(fn));
        CU_ASSERT_TRUE(fn != NULL);
    }
    CU_ASSERT_TRUE(slots >= 24);
    CU_ASSERT_TRUE(be->open != NULL && be->peer_class != NULL); /* the first and the last */
}

static void test_tables_complete(void)
{
    size_t n = 0, any = 0;

    for (const ofccl__backend_t *be; (be = ofccl__tp_backend(n)) != NULL; n++) {
        check_table(be);
        any += be->serves == NULL;
    }
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(any, 1); /* exactly one backend takes every other name */
    /* The composite is never chosen by name, so discovery does not list it. */
    check_table(&ofccl__mixed_backend);
}

static void test_auto(void)
{
    static const struct {
        bool all_local, strict;
        const char *want, *why;
    } cases[] = {
        {true, false, "local", "all ranks share this host"},
        {true, true, "shm", "OFCCL_STRICT=1 rules out local"},
        {false, false, "tcp", "the job spans several hosts"},
        {false, true, "tcp", "the job spans several hosts"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char why[320] = "";
        const char *got = ofccl__prov_auto(cases[i].all_local, cases[i].strict, why, sizeof(why));
        int row = ofccl__quirk_find(got);

        CU_ASSERT_STRING_EQUAL(got, cases[i].want);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, cases[i].why));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "OFCCL_PROVIDER=auto"));
        /* The choice is data: the row says auto may take it and it fits. */
        CU_ASSERT_TRUE_FATAL(row >= 0);
        CU_ASSERT_TRUE(ofccl__quirks[row].flags & OFCCL__Q_AUTO);
        CU_ASSERT_TRUE(cases[i].all_local ||
                       !(ofccl__quirks[row].flags & OFCCL__Q_INTRA_NODE_ONLY));
        CU_ASSERT_TRUE(!cases[i].strict || (ofccl__quirks[row].flags & OFCCL__Q_STRICT_CAPABLE));
    }
    CU_ASSERT_STRING_EQUAL(ofccl__prov_auto(true, false, NULL, 0), "local");
}

static void test_signal_choice(void)
{
    static const struct {
        const char *prov;
        int ask, got;
    } cases[] = {
        {"local", OFCCL__PROV_SIGNAL_AUTO, OFCCL__PROV_SIGNAL_CQDATA},
        {"local", OFCCL__PROV_SIGNAL_CQDATA, OFCCL__PROV_SIGNAL_CQDATA},
        {"local", OFCCL__PROV_SIGNAL_ATOMIC, OFCCL__PROV_SIGNAL_ATOMIC},
        {"tcp", OFCCL__PROV_SIGNAL_AUTO, OFCCL__PROV_SIGNAL_CQDATA},
        {"tcp", OFCCL__PROV_SIGNAL_ATOMIC, OFCCL__PROV_SIGNAL_ATOMIC},
        {"shm", OFCCL__PROV_SIGNAL_ATOMIC, OFCCL__PROV_SIGNAL_ATOMIC},
    };
    ofccl__prov_t *prov;
    ofccl__err_t e;
    char buf[2048];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CU_ASSERT_EQUAL_FATAL(open_prov(cases[i].prov, cases[i].ask, &prov, &e), 0);
        CU_ASSERT_EQUAL(ofccl__prov_caps(prov)->signal, cases[i].got);
        ofccl__prov_caps_format(ofccl__prov_caps(prov), buf, sizeof(buf));
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, cases[i].got == OFCCL__PROV_SIGNAL_ATOMIC
                                               ? "signal             atomic"
                                               : "signal             cqdata"));
        CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
    }
    /* Not a method at all: refused before anything is opened. */
    CU_ASSERT_EQUAL(open_prov("local", 7, &prov, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(prov);
    /* libfabric's net provider has no 64-bit atomics: the request cannot be
     * met, and the message says what would work. */
    CU_ASSERT_EQUAL(open_prov("net", OFCCL__PROV_SIGNAL_ATOMIC, &prov, &e),
                    OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(prov);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_SIGNAL=atomic"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_SIGNAL=cqdata or auto"));
}

/* Memory outlives its provider handle and is freed by the backend that made
 * it: the local one's is shared (peers may map it), libfabric's is not. */
static void test_memory_registry(void)
{
    static const char *const provs[] = {"local", "tcp"};
    ofccl__ep_params_t epp = {.rank = 0, .size = 1, .ops_inflight = 4};

    for (size_t i = 0; i < sizeof(provs) / sizeof(provs[0]); i++) {
        ofccl__prov_t *prov;
        ofccl__ep_t *ep = NULL;
        ofccl__mr_t *mr = NULL;
        ofccl__err_t e;
        char *win, *odd;

        CU_ASSERT_EQUAL_FATAL(open_prov(provs[i], OFCCL__PROV_SIGNAL_AUTO, &prov, &e), 0);
        win = ofccl__prov_mem_alloc_on(prov, 10000);
        odd = ofccl__prov_mem_alloc_on(prov, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(win);
        CU_ASSERT_PTR_NOT_NULL_FATAL(odd);
        CU_ASSERT_EQUAL((uintptr_t)win % 4096, 0);
        CU_ASSERT_EQUAL((uintptr_t)odd % 4096, 0);
        memset(win, 0x5a, 3 * 4096); /* page-rounded: all of it is ours */
        CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &epp, &ep, &e), 0);
        CU_ASSERT_EQUAL(ofccl__ep_wait_fd(ep), -1);
        CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(ep, win + 4096, 4096, OFCCL__ACC_REMOTE_WRITE, &mr, &e),
                              0);
        CU_ASSERT_EQUAL(mr->shared, ofccl__prov_caps(prov)->peer_map);
        CU_ASSERT_EQUAL(ofccl__mr_dereg(mr), 0);
        CU_ASSERT_EQUAL(ofccl__ep_close(ep), 0);
        CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
        /* After the handle is gone: nothing here may touch it. */
        ofccl__prov_mem_free(win);
        ofccl__prov_mem_free(odd);
        ofccl__prov_mem_free(NULL);
    }
}

/* A transport without peer watching or mapping answers through its stubs. */
static void test_stubs(void)
{
    ofccl__ep_params_t epp = {.rank = 0, .size = 1, .ops_inflight = 4};
    ofccl__prov_t *prov;
    ofccl__ep_t *ep = NULL;
    ofccl__rkey_t rk = {0, 1, 64};
    ofccl__err_t e;
    void *ptr = &rk;
    int pid = 0;

    CU_ASSERT_EQUAL_FATAL(open_prov("tcp", OFCCL__PROV_SIGNAL_AUTO, &prov, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &epp, &ep, &e), 0);
    CU_ASSERT_EQUAL(ofccl__ep_peer_gone(ep, &pid), -1);
    CU_ASSERT_EQUAL(pid, -1);
    CU_ASSERT_EQUAL(ofccl__ep_peer_map(ep, 0, &rk, 0, 8, OFCCL__ACC_REMOTE_WRITE, &ptr, &e),
                    OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(ptr);
    CU_ASSERT_EQUAL(ofccl__ep_wait_fd(ep), -1);
    CU_ASSERT_EQUAL(ofccl__ep_close(ep), 0);
    CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"every backend table complete", test_tables_complete},
        {"auto from the quirk table", test_auto},
        {"signal method chosen by the transport", test_signal_choice},
        {"memory freed without its provider", test_memory_registry},
        {"stub slots answer", test_stubs},
        {NULL, NULL},
    };

    ofccl__log_init(&g_log);
    return cu_run("transport", tests);
}
