/*
 * The local provider (providers/local/) in one process, data path: two
 * endpoints play rank 0 (A) and rank 1 (B) of a two-rank communicator and map
 * each other's memfds through /proc/self/fd, as ranks of one host do through
 * /proc/<pid>. Covered: writes, writes with data, delivery-complete writes and
 * atomic adds into shared windows; writes into ordinary registered memory
 * (process_vm_writev); mapping a peer's window for plain stores (peer_map) and
 * what that refuses; the CQ-data ring filling up. Every wait has a 10 s
 * deadline. Refusals are in test_local_refuse.c.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "localpair.h"

/* ---- data into shared windows ---- */

static void test_shared_windows(void)
{
    struct pair p;
    ofccl__err_t e;
    const ofccl__prov_caps_t *caps;
    uint32_t *src = calloc(1, REGION), *win, *mine;
    uint64_t *ctr;
    ofccl__mr_t *wmr = NULL, *cmr = NULL, *mmr = NULL;
    ofccl__rkey_t wrk, crk, mrk;

    CU_ASSERT_FATAL(src != NULL);
    CU_ASSERT_EQUAL_FATAL(open_local_pair(&p, 32, &e), 0);
    caps = ofccl__prov_caps(p.prov);
    CU_ASSERT_STRING_EQUAL(caps->name, "local");
    CU_ASSERT_STRING_EQUAL(caps->domain, "local");
    CU_ASSERT_FALSE(caps->strict);
    CU_ASSERT_FALSE(caps->mr_local);
    CU_ASSERT_FALSE(caps->rx_cq_data);
    CU_ASSERT_TRUE(caps->delivery_complete && caps->atomic_u64_sum && caps->atomic_native);
    CU_ASSERT_EQUAL(caps->cq_data_size, 8);
    CU_ASSERT_TRUE(caps->quirk_row >= 0 && (caps->quirks & OFCCL__Q_INTRA_NODE_ONLY));

    win = ofccl__prov_mem_alloc(p.ep[1], REGION);
    ctr = ofccl__prov_mem_alloc(p.ep[1], 64);
    mine = ofccl__prov_mem_alloc(p.ep[0], REGION);
    CU_ASSERT_FATAL(win && ctr && mine);
    CU_ASSERT_EQUAL((uintptr_t)win % 4096, 0);
    memset(win, 0xee, REGION);
    memset(ctr, 0, 64);
    memset(mine, 0xee, REGION);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, REGION, OFCCL__ACC_REMOTE_WRITE, &wmr, &e),
                          0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], ctr, 64, OFCCL__ACC_REMOTE_ATOMIC, &cmr, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[0], mine, REGION, OFCCL__ACC_REMOTE_WRITE, &mmr, &e),
                          0);
    CU_ASSERT_NOT_EQUAL(wmr->key, cmr->key);
    CU_ASSERT_EQUAL(wmr->base, caps->virt_addr ? (uint64_t)(uintptr_t)win : 0);
    wrk = rkey_of(wmr);
    crk = rkey_of(cmr);
    mrk = rkey_of(mmr);

    /* writedata: 250 words land, B sees exactly one immediate, all 64 bits of it. */
    for (int i = 0; i < 250; i++)
        src[i] = pattern(i, 1);
    {
        struct counts c = {.done0 = 1, .err0 = 0, .data1 = 1};
        CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, src, 1000, NULL, &wrk, 16,
                                            0xfeedface12345678ull, (void *)1, &e),
                        0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        spin(&p, 3, 20 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[0].n_done, 1);
        CU_ASSERT_PTR_EQUAL(p.st[0].last_ctx, (void *)1);
        CU_ASSERT_EQUAL(p.st[1].n_data, 1);
        CU_ASSERT_EQUAL(p.st[1].data[0], 0xfeedface12345678ull);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 0, 16, 0xee), 0);
        CU_ASSERT_EQUAL(check_words(win, 4, 254, 1), 0);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 1016, REGION, 0xee), 0);
    }

    /* write: 64 words at byte 3072, no immediate at B. */
    for (int i = 0; i < 64; i++)
        src[i] = pattern(i, 2);
    {
        struct counts c = {.done0 = 2, .err0 = 0, .data1 = 1};
        CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 256, NULL, &wrk, 3072, (void *)2, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        spin(&p, 3, 20 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[1].n_data, 1);
        CU_ASSERT_EQUAL(check_words(win, 768, 832, 2), 0);
        CU_ASSERT_EQUAL(check_words(win, 4, 254, 1), 0); /* earlier data intact */
        CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 1016, 3072, 0xee), 0);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 3328, REGION, 0xee), 0);
    }

    /* zero-length writedata: only the immediate travels. */
    {
        struct counts c = {.done0 = 3, .err0 = 0, .data1 = 2};
        CU_ASSERT_EQUAL(ofccl__ep_writedata(p.ep[0], 1, NULL, 0, NULL, &wrk, 0, 7, (void *)3, &e),
                        0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        spin(&p, 3, 20 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[1].n_data, 2);
        CU_ASSERT_EQUAL(p.st[1].data[1], 7);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 0, 16, 0xee), 0);
    }

    /* write_dc: when A sees the completion the words are in place, B never progressed. */
    for (int i = 0; i < 128; i++)
        src[i] = pattern(i, 3);
    {
        struct counts c = {.done0 = 4, .err0 = 0, .data1 = 0};
        CU_ASSERT_EQUAL(ofccl__ep_write_dc(p.ep[0], 1, src, 512, NULL, &wrk, 3584, (void *)4, &e),
                        0);
        CU_ASSERT_TRUE(wait_for(&p, 1, reached, &c));
        CU_ASSERT_PTR_EQUAL(p.st[0].last_ctx, (void *)4);
        CU_ASSERT_EQUAL(check_words(win, 896, 1024, 3), 0);
    }

    /* atomic adds: applied once complete at A, again without B progressing. */
    {
        struct counts c = {.done0 = 7, .err0 = 0, .data1 = 0};
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 5, &crk, 8, (void *)5, &e), 0);
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 7, &crk, 8, (void *)6, &e), 0);
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 1ull << 40, &crk, 56, (void *)7, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 1, reached, &c));
        CU_ASSERT_EQUAL(ctr[1], 12);
        CU_ASSERT_EQUAL(ctr[7], 1ull << 40);
        for (int i = 0; i < 8; i++)
            if (i != 1 && i != 7)
                CU_ASSERT_EQUAL(ctr[i], 0);
    }

    /* writedata to oneself: the rank's own window and ring. */
    for (int i = 0; i < 32; i++)
        src[i] = pattern(i, 4);
    {
        struct counts c = {.done0 = 8, .err0 = 0, .data1 = 0};
        CU_ASSERT_EQUAL(
            ofccl__ep_writedata(p.ep[0], 0, src, 128, NULL, &mrk, 128, 0xabcdef, (void *)8, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 1, reached, &c));
        spin(&p, 3, 20 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[0].n_data, 1);
        CU_ASSERT_EQUAL(p.st[0].data[0], 0xabcdef);
        CU_ASSERT_EQUAL(check_words(mine, 32, 64, 4), 0);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)mine, 0, 128, 0xee), 0);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)mine, 256, REGION, 0xee), 0);
    }
    CU_ASSERT_EQUAL(p.st[0].n_done, 8);
    CU_ASSERT_EQUAL(p.st[0].n_err + p.st[1].n_err, 0);
    CU_ASSERT_EQUAL(p.st[1].n_data, 2);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);

    /* Busy objects, as on the libfabric path. */
    CU_ASSERT_EQUAL(ofccl__ep_close(p.ep[1]), OFCCL_ERR_BUSY);
    CU_ASSERT_EQUAL(ofccl__prov_close(p.prov), OFCCL_ERR_BUSY);

    CU_ASSERT_EQUAL(ofccl__mr_dereg(wmr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(cmr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(mmr), 0);
    pair_close(&p);
    /* Windows may outlive the endpoint that allocated them. */
    ofccl__prov_mem_free(win);
    ofccl__prov_mem_free(ctr);
    ofccl__prov_mem_free(mine);
    free(src);
}

/* ---- ordinary (malloc'd) registered memory: process_vm_writev ---- */

static void test_plain_memory(void)
{
    struct pair p;
    ofccl__err_t e;
    uint32_t *src = calloc(1, REGION);
    uint32_t *buf = aligned_alloc(64, REGION);
    ofccl__mr_t *bmr = NULL;
    ofccl__rkey_t brk;

    CU_ASSERT_FATAL(src && buf);
    memset(buf, 0xee, REGION);
    CU_ASSERT_EQUAL_FATAL(open_local_pair(&p, 32, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], buf, REGION,
                                        OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC, &bmr,
                                        &e),
                          0);
    brk = rkey_of(bmr);

    for (int i = 0; i < 900; i++)
        src[i] = pattern(i, 5);
    {
        struct counts c = {.done0 = 1, .err0 = 0, .data1 = 0};
        CU_ASSERT_EQUAL(ofccl__ep_write(p.ep[0], 1, src, 3600, NULL, &brk, 400, (void *)1, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        CU_ASSERT_EQUAL(check_fill((uint8_t *)buf, 0, 400, 0xee), 0);
        CU_ASSERT_EQUAL(check_words(buf, 100, 1000, 5), 0);
        CU_ASSERT_EQUAL(check_fill((uint8_t *)buf, 4000, REGION, 0xee), 0);
    }
    for (int i = 0; i < 16; i++)
        src[i] = pattern(i, 6);
    {
        struct counts c = {.done0 = 2, .err0 = 0, .data1 = 1};
        CU_ASSERT_EQUAL(
            ofccl__ep_writedata(p.ep[0], 1, src, 64, NULL, &brk, 0, 0x55aa, (void *)2, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        spin(&p, 3, 20 * 1000 * 1000);
        CU_ASSERT_EQUAL(p.st[1].n_data, 1);
        CU_ASSERT_EQUAL(p.st[1].data[0], 0x55aa);
        CU_ASSERT_EQUAL(check_words(buf, 0, 16, 6), 0);
        CU_ASSERT_EQUAL(check_words(buf, 100, 1000, 5), 0);
    }

    /* An atomic needs the word in memory both sides map: refused, word unchanged. */
    {
        struct counts c = {.done0 = 2, .err0 = 1, .data1 = 0};
        uint32_t before[2] = {buf[1000], buf[1001]};
        CU_ASSERT_EQUAL(ofccl__ep_atomic_add(p.ep[0], 1, 1, &brk, 4000, (void *)3, &e), 0);
        CU_ASSERT_TRUE(wait_for(&p, 3, reached, &c));
        printf("\n    atomic into malloc'd memory -> status %d: %s\n", p.st[0].err_status,
               p.st[0].err_msg);
        CU_ASSERT_EQUAL(p.st[0].n_err, 1);
        CU_ASSERT_PTR_EQUAL(p.st[0].last_ctx, (void *)3);
        CU_ASSERT_EQUAL(p.st[0].err_peer, 1);
        /* FI_EOPNOTSUPP: a local limitation, not the peer failing. */
        CU_ASSERT_EQUAL(p.st[0].err_status, OFCCL_ERR_PROVIDER);
        CU_ASSERT_PTR_NOT_NULL(strstr(p.st[0].err_msg, "atomics need a region in ofccl shared"));
        CU_ASSERT_PTR_NOT_NULL(strstr(p.st[0].err_msg, "rank 0"));
        CU_ASSERT_PTR_NOT_NULL(strstr(p.st[0].err_msg, "peer 1"));
        CU_ASSERT_EQUAL(buf[1000], before[0]);
        CU_ASSERT_EQUAL(buf[1001], before[1]);
    }
    CU_ASSERT_EQUAL(p.st[0].n_done, 2);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(bmr), 0);
    pair_close(&p);
    free(buf);
    free(src);
}

/* ---- peer_map: stores straight into a peer's window ---- */

static void test_peer_map(void)
{
    struct pair p;
    ofccl__err_t e;
    uint32_t *win, *plain = aligned_alloc(64, REGION);
    ofccl__mr_t *wmr = NULL, *ro = NULL, *pmr = NULL;
    ofccl__rkey_t wrk, bad;
    void *at = NULL;

    CU_ASSERT_FATAL(plain != NULL);
    CU_ASSERT_EQUAL_FATAL(open_local_pair(&p, 32, &e), 0);
    CU_ASSERT_TRUE(ofccl__prov_caps(p.prov)->peer_map);
    win = ofccl__prov_mem_alloc(p.ep[1], REGION);
    CU_ASSERT_FATAL(win != NULL);
    memset(win, 0xee, REGION);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, REGION, OFCCL__ACC_REMOTE_WRITE, &wmr, &e),
                          0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], win, REGION, OFCCL__ACC_LOCAL, &ro, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(p.ep[1], plain, REGION, OFCCL__ACC_REMOTE_WRITE, &pmr, &e),
                          0);
    wrk = rkey_of(wmr);

    /* A's stores through the mapping are B's memory: no op, no completion, no CQ data. */
    CU_ASSERT_TRUE(wmr->shared);
    CU_ASSERT_FALSE(pmr->shared); /* malloc'd: only process_vm_writev reaches it */
    CU_ASSERT_EQUAL_FATAL(
        ofccl__ep_peer_map(p.ep[0], 1, &wrk, 1024, 2048, OFCCL__ACC_REMOTE_WRITE, &at, &e), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    for (int i = 0; i < 512; i++)
        ((uint32_t *)at)[i] = pattern(i, 9);
    CU_ASSERT_EQUAL(check_words(win, 256, 768, 9), 0);
    CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 0, 1024, 0xee), 0);
    CU_ASSERT_EQUAL(check_fill((uint8_t *)win, 3072, REGION, 0xee), 0);
    spin(&p, 3, 20 * 1000 * 1000);
    CU_ASSERT_EQUAL(p.st[0].n_done + p.st[0].n_err + p.st[1].n_data, 0);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), 0);

    /* Refused, naming why: bytes beyond the region, no write access, a made-up
     * key, memory only process_vm_writev reaches. Nothing is handed out. */
    {
        struct {
            ofccl__rkey_t rk;
            uint64_t off;
            size_t len;
            unsigned access;
            const char *why;
        } cases[] = {
            {wrk, 2048, 2049, OFCCL__ACC_REMOTE_WRITE, "outside the target's region"},
            {rkey_of(ro), 0, 64, OFCCL__ACC_REMOTE_WRITE, "does not grant this access"},
            {wrk, 0, 64, OFCCL__ACC_REMOTE_READ, "does not grant this access"},
            {{wrk.base, wrk.key ^ (1ull << 40), wrk.len},
             0,
             64,
             OFCCL__ACC_REMOTE_WRITE,
             "not registered at the target"},
            {rkey_of(pmr), 0, 64, OFCCL__ACC_REMOTE_WRITE, "not in ofccl shared memory"},
        };
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            at = (void *)1;
            CU_ASSERT_EQUAL(ofccl__ep_peer_map(p.ep[0], 1, &cases[k].rk, cases[k].off, cases[k].len,
                                               cases[k].access, &at, &e),
                            OFCCL_ERR_REMOTE_ERROR);
            printf("\n    refused: %s", e.msg);
            CU_ASSERT_PTR_NULL(at);
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, cases[k].why));
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "peer 1"));
        }
        printf("\n");
    }
    bad = wrk;
    CU_ASSERT_EQUAL(ofccl__ep_peer_map(p.ep[0], 2, &bad, 0, 64, OFCCL__ACC_REMOTE_WRITE, &at, &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(check_words(win, 256, 768, 9), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(pmr), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(ro), 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(wmr), 0);
    ofccl__prov_mem_free(win);
    pair_close(&p);
    free(plain);
}

/* ---- more immediates than the target's ring holds ---- */

#define N_RING_OPS 300

struct ring_run {
    uint64_t *win;
    ofccl__rkey_t rk;
    uint64_t src[N_RING_OPS];
};

static int post_nth(struct pair *p, struct ring_run *r, int i)
{
    ofccl__err_t e;
    int ret = ofccl__ep_writedata(p->ep[0], 1, &r->src[i], 8, NULL, &r->rk, (uint64_t)i * 8,
                                  1000 + (uint64_t)i, (void *)(uintptr_t)(i + 1), &e);
    if (ret != 0 && ret != OFCCL_ERR_AGAIN)
        fprintf(stderr, "\n    writedata %d: %s\n", i, e.msg);
    return ret;
}

/* Every immediate arrived exactly once, in posting order, with its bytes. */
static void ring_check(struct pair *p, struct ring_run *r)
{
    struct counts c = {.done0 = N_RING_OPS, .err0 = 0, .data1 = N_RING_OPS};
    int wrong = 0;

    CU_ASSERT_TRUE(wait_for(p, 3, reached, &c));
    spin(p, 3, 20 * 1000 * 1000);
    CU_ASSERT_EQUAL(p->st[0].n_done, N_RING_OPS);
    CU_ASSERT_EQUAL(p->st[0].n_err, 0);
    CU_ASSERT_EQUAL(p->st[1].n_data, N_RING_OPS);
    for (int i = 0; i < N_RING_OPS && i < p->st[1].n_data; i++)
        if (p->st[1].data[i] != 1000 + (uint64_t)i && wrong++ < 3)
            fprintf(stderr, "\n    immediate #%d = %llu, want %d\n", i,
                    (unsigned long long)p->st[1].data[i], 1000 + i);
    CU_ASSERT_EQUAL(wrong, 0);
    for (int i = 0; i < N_RING_OPS; i++)
        CU_ASSERT_EQUAL(r->win[i], r->src[i]);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p->ep[0]), 0);
}

static int ring_open(struct pair *p, struct ring_run *r, unsigned ops, ofccl__mr_t **mr)
{
    ofccl__err_t e;
    int ret = open_local_pair(p, ops, &e);

    if (ret != 0)
        return ret;
    r->win = ofccl__prov_mem_alloc(p->ep[1], N_RING_OPS * 8);
    if (r->win == NULL)
        return OFCCL_ERR_NO_MEMORY;
    memset(r->win, 0, N_RING_OPS * 8);
    for (int i = 0; i < N_RING_OPS; i++)
        r->src[i] = 0xa5a5000000000000ull | (uint64_t)i;
    ret = ofccl__mr_reg(p->ep[1], r->win, N_RING_OPS * 8, OFCCL__ACC_REMOTE_WRITE, mr, &e);
    r->rk = ret == 0 ? rkey_of(*mr) : (ofccl__rkey_t){0};
    return ret;
}

/* A pool larger than the ring: every post is accepted; the ops beyond the
 * ring wait in the retry queue until the target drains it. */
static void test_ring_full(void)
{
    static struct ring_run r;
    struct pair p;
    ofccl__mr_t *mr = NULL;
    int accepted = 0;

    CU_ASSERT_EQUAL_FATAL(ring_open(&p, &r, 512, &mr), 0);
    for (int i = 0; i < N_RING_OPS; i++)
        accepted += post_nth(&p, &r, i) == 0;
    CU_ASSERT_EQUAL(accepted, N_RING_OPS);
    /* Only A progresses: the ring's worth completes, the rest waits for B. */
    spin(&p, 1, 50 * 1000 * 1000);
    CU_ASSERT_EQUAL(p.st[0].n_done, RING);
    CU_ASSERT_EQUAL(p.st[0].n_err, 0);
    CU_ASSERT_EQUAL(p.st[1].n_data, 0);
    CU_ASSERT_EQUAL(ofccl__ep_pending(p.ep[0]), N_RING_OPS - RING);
    for (int i = 0; i < N_RING_OPS; i++)
        CU_ASSERT_EQUAL(r.win[i], i < RING ? r.src[i] : 0);
    ring_check(&p, &r);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(mr), 0);
    pair_close(&p);
    ofccl__prov_mem_free(r.win);
}

/* A pool smaller than the ring: the caller sees AGAIN, progresses and retries;
 * with the target idle it stalls with exactly a ring plus a pool accepted. */
static void test_ring_full_small_pool(void)
{
    static struct ring_run r;
    struct pair p;
    ofccl__mr_t *mr = NULL;
    ofccl__err_t e;
    int posted = 0, agains = 0, stalled_at = -1, pending_at_stall = -1, data_at_stall = -1;
    uint64_t end = ofccl__now_ns() + DEADLINE_NS;

    CU_ASSERT_EQUAL_FATAL(ring_open(&p, &r, 32, &mr), 0);
    while (posted < N_RING_OPS && ofccl__now_ns() < end) {
        int ret = post_nth(&p, &r, posted);
        if (ret == 0) {
            posted++;
            continue;
        }
        CU_ASSERT_EQUAL_FATAL(ret, OFCCL_ERR_AGAIN);
        agains++;
        if (stalled_at < 0 && ofccl__ep_progress(p.ep[0], &p.h[0], 64, &e) == 0) {
            /* Nothing completed and nothing could be re-posted: the target must drain. */
            stalled_at = posted;
            pending_at_stall = (int)ofccl__ep_pending(p.ep[0]);
            data_at_stall = p.st[1].n_data;
        } else if (stalled_at >= 0) {
            for (int k = 0; k < 2; k++)
                (void)ofccl__ep_progress(p.ep[k], &p.h[k], 16, &e);
        }
    }
    CU_ASSERT_EQUAL(posted, N_RING_OPS);
    CU_ASSERT_TRUE(agains > 0);
    CU_ASSERT_EQUAL(stalled_at, RING + 32);
    CU_ASSERT_EQUAL(pending_at_stall, 32);
    CU_ASSERT_EQUAL(data_at_stall, 0);
    ring_check(&p, &r);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(mr), 0);
    pair_close(&p);
    ofccl__prov_mem_free(r.win);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"shared windows: write, writedata, write_dc, atomics", test_shared_windows},
        {"malloc'd memory: process_vm_writev, no atomics", test_plain_memory},
        {"peer_map: stores into a peer's window, refusals", test_peer_map},
        {"more immediates than the ring holds", test_ring_full},
        {"ring full with a small op pool", test_ring_full_small_pool},
        {NULL, NULL},
    };

    local_log_init();
    return cu_run("prov-local", tests);
}
