/*
 * Executors (providers/exec_ops.h): the registry's choice by memory kind,
 * and the local transport with an executor that completes after post, as a
 * device's copy engine does. Its writes must stay unpublished (no CQ data at
 * the target, no completion at the initiator, the endpoint not idle) until
 * the executor says the copy is done, then publish in post order; a failed
 * copy completes its op with an error. Every wait has a 10 s deadline.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cu.h"
#include "exec_ops.h"
#include "localpair.h"

/* ---- the registry ---- */

static int dummy_test(void *state, uint64_t ticket)
{
    (void)state;
    (void)ticket;
    return 1;
}

static const ofccl__exec_ops_t dev_ops = {
    .size = sizeof(ofccl__exec_ops_t),
    .name = "dev",
    .copy = ofccl__exec_host_copy,
    .fill = ofccl__exec_host_fill,
    .reduce = ofccl__exec_stub_reduce,
    .test = dummy_test,
    OFCCL__EXEC_NO_STREAMS,
};

static void test_registry(void)
{
    ofccl__exec_reg_t reg;
    int s0, s1;

    ofccl__exec_reg_init(&reg);
    CU_ASSERT_EQUAL(ofccl__mem_kind_of(&reg), OFCCL__MEM_HOST);
    CU_ASSERT_PTR_EQUAL(ofccl__exec_find(&reg, OFCCL__MEM_HOST, OFCCL__MEM_HOST)->ops,
                        &ofccl__exec_host_ops);
    CU_ASSERT_PTR_NULL(ofccl__exec_find(&reg, 0, OFCCL__MEM_HOST));
    CU_ASSERT_EQUAL(ofccl__exec_reg_add(&reg, 0, &dev_ops, &s0), 0);
    CU_ASSERT_EQUAL(ofccl__exec_reg_add(&reg, 1, &dev_ops, &s1), 0);
    /* Device memory on either side: that device's; both: the destination's. */
    CU_ASSERT_PTR_EQUAL(ofccl__exec_find(&reg, 0, OFCCL__MEM_HOST)->state, &s0);
    CU_ASSERT_PTR_EQUAL(ofccl__exec_find(&reg, OFCCL__MEM_HOST, 1)->state, &s1);
    CU_ASSERT_PTR_EQUAL(ofccl__exec_find(&reg, 1, 0)->state, &s1);
    CU_ASSERT_EQUAL(ofccl__exec_find(&reg, OFCCL__MEM_HOST, OFCCL__MEM_HOST)->kind,
                    OFCCL__MEM_HOST);
    /* Replacing keeps one entry per kind; the table fills up. */
    CU_ASSERT_EQUAL(ofccl__exec_reg_add(&reg, 0, &dev_ops, &s1), 0);
    CU_ASSERT_EQUAL(reg.n, 3);
    for (int k = 2; k < OFCCL__EXEC_MAX - 1; k++)
        CU_ASSERT_EQUAL(ofccl__exec_reg_add(&reg, k, &dev_ops, NULL), 0);
    CU_ASSERT_EQUAL(ofccl__exec_reg_add(&reg, 99, &dev_ops, NULL), OFCCL_ERR_RESOURCE);
}

/* ---- an executor that copies when told to ---- */

#define LATER_MAX 8
struct later {
    struct {
        void *dst;
        const void *src;
        size_t len;
    } q[LATER_MAX];
    unsigned posted, done; /* tickets are post numbers */
    bool fail;             /* the next copy done fails */
};

static int later_copy(void *state, void *dst, const void *src, size_t len, uint64_t *ticket)
{
    struct later *l = state;

    if (l->posted - l->done == LATER_MAX)
        return OFCCL_ERR_AGAIN;
    l->q[l->posted % LATER_MAX].dst = dst;
    l->q[l->posted % LATER_MAX].src = src;
    l->q[l->posted % LATER_MAX].len = len;
    *ticket = l->posted++;
    return OFCCL__EXEC_POSTED;
}

static int later_test(void *state, uint64_t ticket)
{
    struct later *l = state;

    if (ticket >= l->done)
        return 0;
    return l->fail ? OFCCL_ERR_PROVIDER : 1;
}

/* The "device" finishes the oldest copy. */
static void later_run_one(struct later *l)
{
    memcpy(l->q[l->done % LATER_MAX].dst, l->q[l->done % LATER_MAX].src,
           l->q[l->done % LATER_MAX].len);
    l->done++;
}

static const ofccl__exec_ops_t later_ops = {
    .size = sizeof(ofccl__exec_ops_t),
    .name = "later",
    .copy = later_copy,
    .fill = ofccl__exec_host_fill,
    .reduce = ofccl__exec_stub_reduce,
    .test = later_test,
    OFCCL__EXEC_NO_STREAMS,
};

static int open_pair_with(struct pair *p, const ofccl__exec_reg_t *reg, ofccl__err_t *e)
{
    ofccl__prov_params_t pp = {.provider = "local", .domain = "", .strict = false, .log = &g_log};
    ofccl__ep_params_t ep = {.ops_inflight = 32, .execs = reg};
    return pair_open(p, &pp, &ep, e);
}

static void test_local_later(void)
{
    struct later l = {0};
    ofccl__exec_reg_t reg;
    struct pair p;
    ofccl__err_t e;
    uint32_t *src = calloc(1, REGION), *win;
    ofccl__mr_t *wmr = NULL;
    ofccl__rkey_t wrk;

    CU_ASSERT_FATAL(src != NULL);
    ofccl__exec_reg_init(&reg);
    /* Host memory moved by the late executor: the path a device's takes. */
    CU_ASSERT_EQUAL_FATAL(ofccl__exec_reg_add(&reg, OFCCL__MEM_HOST, &later_ops, &l), 0);
    CU_ASSERT_EQUAL_FATAL(open_pair_with(&p, &reg, &e), 0);
    win = ofccl__prov_mem_alloc(p.ep[1], REGION);
    CU_ASSERT_FATAL(win != NULL);
    memset(win, 0xee, REGION);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, REGION, OFCCL__ACC_REMOTE_WRITE, &wmr, &e),
                          0);
    wrk = rkey_of(wmr);
    for (int i = 0; i < 256; i++)
        src[i] = pattern(i, 5);

    /* Two writes with data, one plain write: none lands or completes yet. */
    CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, src, 512, NULL, &wrk, 0, 11, (void *)1, &e), 0);
    CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src + 128, 256, NULL, &wrk, 512, (void *)2, &e), 0);
    CU_ASSERT_EQUAL(
        ofccl__ep_writedata(p.ep[0], 1, src + 192, 256, NULL, &wrk, 768, 12, (void *)3, &e), 0);
    spin(&p, 3, 5 * 1000 * 1000);
    CU_ASSERT_EQUAL(p.st[0].n_done, 0);
    CU_ASSERT_EQUAL(p.st[1].n_data, 0);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 3);
    CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 0, REGION, 0xee), 0);

    /* The first copy done: its data and completion, nothing more. */
    later_run_one(&l);
    {
        struct counts c = {.done0 = 1, .err0 = 0, .data1 = 1};
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
    }
    spin(&p, 3, 5 * 1000 * 1000);
    CU_ASSERT_EQUAL(p.st[0].n_done, 1);
    CU_ASSERT_PTR_EQUAL(p.st[0].last_ctx, (void *)1);
    CU_ASSERT_EQUAL(p.st[1].n_data, 1);
    CU_ASSERT_EQUAL(p.st[1].data[0], 11);
    CU_ASSERT_EQUAL(check_words(win, 0, 128, 5), 0);
    CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 512, REGION, 0xee), 0);

    /* The rest: in post order. */
    later_run_one(&l);
    later_run_one(&l);
    {
        struct counts c = {.done0 = 3, .err0 = 0, .data1 = 2};
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
    }
    CU_ASSERT_PTR_EQUAL(p.st[0].last_ctx, (void *)3);
    CU_ASSERT_EQUAL(p.st[1].data[1], 12);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);
    CU_ASSERT_EQUAL(check_words(win, 0, 256, 5), 0);

    /* A copy that fails: its op completes with an error, no data travels. */
    l.fail = true;
    CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, src, 64, NULL, &wrk, 0, 13, (void *)4, &e), 0);
    later_run_one(&l);
    {
        struct counts c = {.done0 = 3, .err0 = 1, .data1 = 2};
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
    }
    spin(&p, 3, 5 * 1000 * 1000);
    CU_ASSERT_EQUAL(p.st[1].n_data, 2);
    CU_ASSERT_EQUAL(p.st[0].n_err, 1);

    CU_ASSERT_EQUAL(ofccl__mr_dereg(wmr), 0);
    pair_close(&p);
    ofccl__prov_mem_free(win);
    free(src);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"registry: an executor per memory kind", test_registry},
        {"local transport: writes publish once their copies are done", test_local_later},
        {NULL, NULL},
    };

    local_log_init();
    return cu_run("exec", tests);
}
