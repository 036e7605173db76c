/*
 * The local provider (providers/local/) in one process, what it refuses: a
 * deregistered key, missing access, bytes outside the region, atomics outside
 * shared memory (checked at the target); names that are not this host's
 * local-provider names; strict mode; and discovery. Every wait has a 10 s
 * deadline.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "localpair.h"

/* ---- what the target's registration table refuses ---- */

/* The op just posted fails, and only it: asserts its status and message. */
static void expect_refused(struct pair *p, int status, const char *text)
{
    struct counts c = {.done0 = p->st[0].n_done, .err0 = p->st[0].n_err + 1, .data1 = 0};
    int done = p->st[0].n_done, data = p->st[1].n_data;

    CU_ASSERT_TRUE(wait_for(p, 3, reached, &c));
    spin(p, 3, 20 * 1000 * 1000);
    printf("\n    refused (status %d): %s\n", p->st[0].err_status, p->st[0].err_msg);
    CU_ASSERT_EQUAL(p->st[0].n_done, done);
    CU_ASSERT_EQUAL(p->st[1].n_data, data); /* a refused writedata signals nothing */
    CU_ASSERT_EQUAL(p->st[0].err_peer, 1);
    CU_ASSERT_EQUAL(p->st[0].err_status, status);
    CU_ASSERT_PTR_NOT_NULL(strstr(p->st[0].err_msg, text));
    CU_ASSERT_PTR_NOT_NULL(strstr(p->st[0].err_msg, "peer 1"));
}

static void test_stale_key(void)
{
    struct pair p;
    ofccl__err_t e;
    uint8_t src[64];
    uint8_t *win, *plain = aligned_alloc(64, REGION);
    ofccl__mr_t *wmr = NULL, *pmr = NULL, *nmr = NULL;
    ofccl__rkey_t wrk, prk;

    CU_ASSERT_FATAL(plain != NULL);
    CU_ASSERT_EQUAL_FATAL(open_local_pair(&p, 32, &e), 0);
    win = ofccl__prov_mem_alloc(p.ep[1], REGION);
    CU_ASSERT_FATAL(win != NULL);
    memset(win, 0, REGION);
    memset(plain, 0, REGION);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, REGION,
                                        OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC, &wmr,
                                        &e),
                          0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], plain, REGION, OFCCL__ACC_REMOTE_WRITE, &pmr, &e),
                          0);
    wrk = rkey_of(wmr);
    prk = rkey_of(pmr);

    /* One good write first, so A holds a mapping of the window when the key dies. */
    memset(src, 0x11, sizeof(src));
    {
        struct counts c = {.done0 = 1, .err0 = 0, .data1 = 0};
        CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &wrk, 0, (void *)1, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_EQUAL(check_fill(win, 0, 64, 0x11), 0);
    }
    CU_ASSERT_EQUAL(ofccl__mr_dereg(wmr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(pmr), 0);
    /* A new registration must not revive the old key (slot reuse included). */
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, REGION, OFCCL__ACC_REMOTE_WRITE, &nmr, &e),
                          0);
    CU_ASSERT_NOT_EQUAL(nmr->key, wrk.key);

    memset(src, 0x5a, sizeof(src));
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &wrk, 0, (void *)2, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "key is not registered");
    CU_ASSERT_PTR_EQUAL(p.st[0].last_ctx, (void *)2);
    CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, src, 64, NULL, &wrk, 64, 9, (void *)3, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "key is not registered");
    CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 1, &wrk, 128, (void *)4, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "key is not registered");
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &prk, 0, (void *)5, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "key is not registered");
    /* Not a byte of either old buffer changed. */
    CU_ASSERT_EQUAL(check_fill(win, 0, 64, 0x11), 0);
    CU_ASSERT_EQUAL(check_fill(win, 64, REGION, 0), 0);
    CU_ASSERT_EQUAL(check_fill(plain, 0, REGION, 0), 0);
    CU_ASSERT_EQUAL(p.st[0].n_err, 4);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);

    /* The live key still works after the refusals. */
    {
        ofccl__rkey_t nrk = rkey_of(nmr);
        struct counts c = {.done0 = 2, .err0 = 4, .data1 = 0};
        CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &nrk, 256, (void *)6, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_EQUAL(check_fill(win, 256, 320, 0x5a), 0);
    }
    CU_ASSERT_EQUAL(ofccl__mr_dereg(nmr), 0);
    pair_close(&p);
    ofccl__prov_mem_free(win);
    free(plain);
}

static void test_target_checks(void)
{
    struct pair p;
    ofccl__err_t e;
    uint8_t src[64];
    uint8_t *ro, *wo;
    ofccl__mr_t *romr = NULL, *womr = NULL;
    ofccl__rkey_t rork, work, big;

    memset(src, 0x77, sizeof(src));
    CU_ASSERT_EQUAL_FATAL(open_local_pair(&p, 32, &e), 0);
    ro = ofccl__prov_mem_alloc(p.ep[1], REGION);
    wo = ofccl__prov_mem_alloc(p.ep[1], REGION);
    CU_ASSERT_FATAL(ro && wo);
    memset(ro, 0, REGION);
    memset(wo, 0, REGION);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], ro, REGION, OFCCL__ACC_REMOTE_READ, &romr, &e), 0);
    CU_ASSERT_EQUAL_FATAL(
        ofccl__mr_reg(p.ep[1], wo, REGION / 2, OFCCL__ACC_REMOTE_WRITE, &womr, &e), 0);
    rork = rkey_of(romr);
    work = rkey_of(womr);

    /* Read-only region: writes refused. Write-only region: atomics refused. */
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &rork, 0, (void *)1, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "does not grant this access");
    CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 1, &work, 0, (void *)2, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "does not grant this access");
    /* A peer claiming a longer region than registered: the target's length rules. */
    big = work;
    big.len = REGION;
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &big, REGION / 2, (void *)3, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "outside the target's region");
    CU_ASSERT_EQUAL(
        ofccl__ep_write(p.ep[0], 1, src, 64, NULL, &big, REGION / 2 - 32, (void *)4, &e), 0);
    expect_refused(&p, OFCCL_ERR_REMOTE_ERROR, "outside the target's region");
    CU_ASSERT_EQUAL(check_fill(ro, 0, REGION, 0), 0);
    CU_ASSERT_EQUAL(check_fill(wo, 0, REGION, 0), 0);
    CU_ASSERT_EQUAL(p.st[0].n_err, 4);
    CU_ASSERT_EQUAL(p.st[0].n_done, 0);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);

    CU_ASSERT_EQUAL(ofccl__mr_dereg(romr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(womr), 0);
    pair_close(&p);
    ofccl__prov_mem_free(ro);
    ofccl__prov_mem_free(wo);
}

/* ---- names that are not this host's local-provider names ---- */

/* Open rank 0 of a 2-rank endpoint, insert {its own name, `peer`} with the
 * peer's length `plen`, close it; returns the insert's result with its
 * message in `msg`. Closing must release the endpoint's own descriptors and
 * no others: descriptor 0 (kept open by main) stands for the process's. */
static int insert_with(ofccl__prov_t *prov, const char *peer, size_t plen, char *msg, size_t mlen)
{
    ofccl__ep_params_t epp = {.rank = 0, .size = 2, .ops_inflight = 4};
    char names[2][NAME_MAX_LEN];
    size_t lens[2] = {NAME_MAX_LEN, plen};
    ofccl__ep_t *ep = NULL;
    ofccl__err_t e;
    int ret;

    CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &epp, &ep, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_name(ep, names[0], &lens[0], &e), 0);
    memcpy(names[1], peer, NAME_MAX_LEN);
    ret = ofccl__ep_insert_peers(ep, names, NAME_MAX_LEN, lens, 2, &e);
    ofccl__strlcpy(msg, ret != 0 ? e.msg : "", mlen);
    if (ret != 0)
        printf("\n    refused name: %s (%s)\n", ofccl_strerror(ret), e.msg);
    /* A refused name leaves an endpoint that still closes cleanly. */
    CU_ASSERT_EQUAL(ofccl__ep_close(ep), 0);
    if (fcntl(0, F_GETFD) == -1) {
        CU_FAIL("closing the endpoint closed descriptor 0, which it never opened");
        (void)open("/dev/null", O_RDONLY); /* back as 0, so later tests are not disturbed */
    }
    return ret;
}

static void test_bad_names(void)
{
    ofccl__prov_t *prov = NULL;
    ofccl__ep_params_t b_params = {.rank = 1, .size = 2, .ops_inflight = 4};
    ofccl__ep_params_t c_params = {.rank = 1, .size = 3, .ops_inflight = 4};
    ofccl__ep_t *b = NULL, *c = NULL;
    char good[NAME_MAX_LEN] = {0}, bad[NAME_MAX_LEN], other[NAME_MAX_LEN] = {0};
    char boot[64] = "", msg[OFCCL__ERRMSG_LEN];
    size_t len = NAME_MAX_LEN, olen = NAME_MAX_LEN, tiny = 8;
    ofccl__err_t e;
    char *at;
    FILE *f;

    CU_ASSERT_EQUAL_FATAL(prov_open(&prov, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &b_params, &b, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &c_params, &c, &e), 0);
    CU_ASSERT_EQUAL(ofccl__ep_name(b, good, &tiny, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_name(b, good, &len, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_name(c, other, &olen, &e), 0);
    CU_ASSERT_EQUAL(len, olen);

    /* The well-formed name first, so every refusal below is for its one defect. */
    CU_ASSERT_EQUAL(insert_with(prov, good, len, msg, sizeof(msg)), 0);

    CU_ASSERT_EQUAL(insert_with(prov, good, len - 1, msg, sizeof(msg)), OFCCL_ERR_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "length"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "peer 1"));
    CU_ASSERT_EQUAL(insert_with(prov, good, len + 1, msg, sizeof(msg)), OFCCL_ERR_CORRUPT);
    CU_ASSERT_EQUAL(insert_with(prov, good, 0, msg, sizeof(msg)), OFCCL_ERR_CORRUPT);

    /* The magic ("ofcclLX2") opens the name. */
    memcpy(bad, good, sizeof(bad));
    CU_ASSERT_EQUAL(memcmp(bad, "ofcclLX2", 8), 0);
    bad[0] ^= 0x20;
    CU_ASSERT_EQUAL(insert_with(prov, bad, len, msg, sizeof(msg)), OFCCL_ERR_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "not a local-provider name"));

    /* Another host: the kernel's boot id differs. */
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(fgets(boot, sizeof(boot), f) != NULL);
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
    memcpy(bad, good, sizeof(bad));
    at = memmem(bad, len, boot, strlen(boot));
    CU_ASSERT_FATAL(at != NULL);
    at[0] = at[0] == '0' ? '1' : '0';
    CU_ASSERT_EQUAL(insert_with(prov, bad, len, msg, sizeof(msg)), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "another host"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "peer 1"));
    /* A boot id without its terminating NUL is not trusted either. */
    memcpy(bad, good, sizeof(bad));
    at = memmem(bad, len, boot, strlen(boot));
    CU_ASSERT_FATAL(at != NULL);
    memset(at, 'f', (size_t)(bad + len - at));
    CU_ASSERT_EQUAL(insert_with(prov, bad, len, msg, sizeof(msg)), OFCCL_ERR_NOT_SUPPORTED);

    /* A real endpoint of this host, but of a 3-rank communicator: not this peer. */
    CU_ASSERT_EQUAL(insert_with(prov, other, olen, msg, sizeof(msg)), OFCCL_ERR_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "is not peer 1"));

    CU_ASSERT_EQUAL(ofccl__ep_close(b), 0);
    CU_ASSERT_EQUAL(ofccl__ep_close(c), 0);
    CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
}

/* ---- what the provider refuses, and discovery ---- */

static void test_strict_refused(void)
{
    ofccl__prov_params_t pp = {.provider = "local", .domain = "", .strict = true, .log = &g_log};
    ofccl__prov_t *prov = NULL;
    ofccl__err_t e;

    CU_ASSERT_EQUAL(ofccl__prov_open(&pp, &prov, &e), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(prov);
    CU_ASSERT_EQUAL(e.code, OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "strict"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_PROVIDER=shm"));
}

static void test_discovery(void)
{
    ofccl__prov_dom_t d[64];
    ofccl__err_t e;
    char avail[512];
    int n = -1, locals = 0;

    CU_ASSERT_EQUAL(ofccl__prov_list("local", d, 64, &n, &e), 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_STRING_EQUAL(d[0].prov_name, "local");
    CU_ASSERT_STRING_EQUAL(d[0].domain, "local");
    CU_ASSERT_STRING_EQUAL(d[0].pci_busid, "");
    /* Every provider: local is listed once among the libfabric ones. */
    CU_ASSERT_EQUAL(ofccl__prov_list("", d, 64, &n, &e), 0);
    CU_ASSERT_TRUE(n > 1);
    for (int i = 0; i < n; i++)
        locals += strcmp(d[i].prov_name, "local") == 0;
    CU_ASSERT_EQUAL(locals, 1);
    /* No room: nothing written, no failure. */
    CU_ASSERT_EQUAL(ofccl__prov_list("local", d, 0, &n, &e), 0);
    CU_ASSERT_EQUAL(n, 0);
    ofccl__prov_available(avail, sizeof(avail));
    CU_ASSERT_TRUE(strcmp(avail, "local") == 0 || strncmp(avail, "local, ", 7) == 0 ||
                   strstr(avail, ", local,") != NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(avail, "shm"));
    CU_ASSERT_TRUE(ofccl__quirk_find("local") >= 0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"deregistered keys are refused", test_stale_key},
        {"access and bounds checked at the target", test_target_checks},
        {"bad names: length, magic, host, segment", test_bad_names},
        {"strict mode refused", test_strict_refused},
        {"discovery lists local", test_discovery},
        {NULL, NULL},
    };

    /* Descriptor 0 must be open for test_bad_names to watch it. */
    if (fcntl(0, F_GETFD) == -1 && open("/dev/null", O_RDONLY) != 0)
        return 2;
    local_log_init();
    return cu_run("prov-local-refuse", tests);
}
