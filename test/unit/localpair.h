/* Shared by the local-provider tests: two endpoints of the local transport
 * in one process (provpair.h), keys and data patterns. */
#ifndef OFCCL_TEST_UNIT_LOCALPAIR_H
#define OFCCL_TEST_UNIT_LOCALPAIR_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "provpair.h"

#define REGION 4096
#define RING 256 /* CQ-data entries per source (LX_RING in providers/local/local.h) */

static ofccl__log_t g_log;

static inline int prov_open(ofccl__prov_t **prov, ofccl__err_t *e)
{
    ofccl__prov_params_t pp = {.provider = "local", .domain = "", .strict = false, .log = &g_log};
    return ofccl__prov_open(&pp, prov, e);
}

static inline int open_local_pair(struct pair *p, unsigned ops_inflight, ofccl__err_t *e)
{
    ofccl__prov_params_t pp = {.provider = "local", .domain = "", .strict = false, .log = &g_log};
    ofccl__ep_params_t ep = {.ops_inflight = ops_inflight};
    return pair_open(p, &pp, &ep, e);
}

static inline ofccl__rkey_t rkey_of(const ofccl__mr_t *mr)
{
    return (ofccl__rkey_t){mr->base, mr->key, mr->len};
}

static inline uint32_t pattern(int i, int salt)
{
    return (uint32_t)i * 2654435761u ^ (uint32_t)(salt + 1) * 40503u;
}

/* Words [from, to) of w hold pattern(i - from, salt); returns how many differ. */
static inline int check_words(const uint32_t *w, int from, int to, int salt)
{
    int wrong = 0;

    for (int i = from; i < to; i++)
        if (w[i] != pattern(i - from, salt) && wrong++ < 3)
            fprintf(stderr, "\n    [%d] = 0x%08x, want 0x%08x\n", i, w[i], pattern(i - from, salt));
    return wrong;
}

/* Bytes [from, to) of b all equal v; returns how many differ. */
static inline int check_fill(const uint8_t *b, size_t from, size_t to, uint8_t v)
{
    int wrong = 0;

    for (size_t i = from; i < to; i++)
        wrong += b[i] != v;
    return wrong;
}

/* Logger set up, quiet unless TEST_LOG_INFO: the negative tests log their
 * warnings by design. */
static inline void local_log_init(void)
{
    ofccl__log_init(&g_log);
    g_log.level = getenv("TEST_LOG_INFO") ? OFCCL__LOG_INFO : OFCCL__LOG_ERROR;
}

#endif
