/*
 * Two endpoints of one provider in one process, playing rank 0 (A) and rank 1
 * (B) of a two-rank communicator: the harness the provider-layer unit tests
 * (test_prov_loop.c, test_local.c) share. Every wait is bounded by a 10 s
 * deadline.
 */
#ifndef OFCCL_TEST_PROVPAIR_H
#define OFCCL_TEST_PROVPAIR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "prov.h"
#include "util.h"

#define DEADLINE_NS (10ull * 1000 * 1000 * 1000)
#define NAME_MAX_LEN 256
#define MAX_DATA 1024

/* What each rank's handlers saw. */
struct rank_state {
    int n_done;
    int n_err;
    int n_data;
    uint64_t data[MAX_DATA]; /* immediates in arrival order (the first MAX_DATA) */
    uint64_t last_data;
    void *last_ctx; /* op context of the last completion or error */
    int err_peer;
    int err_status;
    char err_msg[OFCCL__ERRMSG_LEN];
};

struct pair {
    ofccl__prov_t *prov;
    ofccl__ep_t *ep[2];
    struct rank_state st[2];
    ofccl__ep_handlers_t h[2];
};

static void on_done(void *arg, void *op_ctx)
{
    struct rank_state *s = arg;
    s->n_done++;
    s->last_ctx = op_ctx;
}

static void on_error(void *arg, void *op_ctx, int peer, int status, const char *msg)
{
    struct rank_state *s = arg;
    s->n_err++;
    s->last_ctx = op_ctx;
    s->err_peer = peer;
    s->err_status = status;
    ofccl__strlcpy(s->err_msg, msg ? msg : "", sizeof(s->err_msg));
}

static void on_remote_data(void *arg, uint64_t data)
{
    struct rank_state *s = arg;
    if (s->n_data < MAX_DATA)
        s->data[s->n_data] = data;
    s->n_data++;
    s->last_data = data;
}

/* Open the provider, both endpoints, and insert each one's name into both. */
static int pair_open(struct pair *p, const ofccl__prov_params_t *pp,
                     const ofccl__ep_params_t *ep_params, ofccl__err_t *e)
{
    char names[2][NAME_MAX_LEN];
    size_t lens[2];
    int ret;

    memset(p, 0, sizeof(*p));
    ret = ofccl__prov_open(pp, &p->prov, e);
    if (ret != 0)
        return ret;
    for (int r = 0; r < 2; r++) {
        ofccl__ep_params_t ep = *ep_params;
        ep.rank = r;
        ep.size = 2;
        ret = ofccl__ep_open(p->prov, &ep, &p->ep[r], e);
        if (ret != 0)
            return ret;
        lens[r] = NAME_MAX_LEN;
        ret = ofccl__ep_name(p->ep[r], names[r], &lens[r], e);
        if (ret != 0)
            return ret;
        p->h[r] = (ofccl__ep_handlers_t){&p->st[r], on_done, on_error, on_remote_data};
    }
    for (int r = 0; r < 2; r++) {
        ret = ofccl__ep_insert_peers(p->ep[r], names, NAME_MAX_LEN, lens, 2, e);
        if (ret != 0)
            return ret;
    }
    return 0;
}

static void pair_close(struct pair *p)
{
    for (int r = 0; r < 2; r++)
        if (p->ep[r] != NULL)
            CU_ASSERT_EQUAL(ofccl__ep_close(p->ep[r]), 0);
    if (p->prov != NULL)
        CU_ASSERT_EQUAL(ofccl__prov_close(p->prov), 0);
}

/* Progress the ranks in `mask` (bit r = rank r) until cond() holds or 10 s pass. */
typedef bool (*cond_fn)(struct pair *p, const void *arg);

static bool wait_for(struct pair *p, unsigned mask, cond_fn cond, const void *arg)
{
    uint64_t end = ofccl__now_ns() + DEADLINE_NS;
    ofccl__err_t e;

    while (!cond(p, arg)) {
        if (ofccl__now_ns() > end) {
            fprintf(stderr, "\n    timeout: A done %d err %d data %d | B done %d err %d data %d\n",
                    p->st[0].n_done, p->st[0].n_err, p->st[0].n_data, p->st[1].n_done,
                    p->st[1].n_err, p->st[1].n_data);
            return false;
        }
        for (int r = 0; r < 2; r++)
            if ((mask & (1u << r)) && ofccl__ep_progress(p->ep[r], &p->h[r], 16, &e) < 0) {
                fprintf(stderr, "progress failed: %s\n", e.msg);
                return false;
            }
    }
    return true;
}

/* What wait_for(..., reached, &counts) waits for: rank 0's completions and
 * errors, and the CQ data rank 1 has received, each at least this many. */
struct counts {
    int done0, data1, err0;
};

static bool reached(struct pair *p, const void *arg)
{
    const struct counts *c = arg;
    return p->st[0].n_done >= c->done0 && p->st[1].n_data >= c->data1 && p->st[0].n_err >= c->err0;
}

/* Progress the ranks in `mask` a while, for "nothing else arrives" checks. */
static void spin(struct pair *p, unsigned mask, uint64_t ns)
{
    uint64_t end = ofccl__now_ns() + ns;
    ofccl__err_t e;

    while (ofccl__now_ns() < end)
        for (int r = 0; r < 2; r++)
            if (mask & (1u << r))
                (void)ofccl__ep_progress(p->ep[r], &p->h[r], 16, &e);
}

#endif
