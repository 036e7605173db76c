/*
 * The link classes of the chooser's cost model (lib/coll/cost.c): for
 * same-host peers through the local transport and for peers through the
 * fabric, a latency alpha and a bandwidth beta. Each comes from OFCCL_LINK_*
 * ("<alpha_us>:<GB/s>") or, on auto, from this process:
 *   local:  alpha 0.2 us (a 2-rank all-gather of 8-512 B, docs/performance.md);
 *           beta = this process's memcpy rate, measured when the context is
 *           created (best of 3 copies of 4 MiB, 2-10 ms) where it can change
 *           a choice: a job across hosts, where it prices same-host copies
 *           and the reduce-scatter's sums against the fabric (on one host
 *           the choices do not turn on it: the local transport's candidates
 *           copy and sum alike, and loopback tcp is far slower than memory);
 *           else 10 GB/s;
 *   fabric: alpha 13.5 us (tcp over loopback, docs/performance.md); beta = the
 *           link speed the provider reports for its NIC (fi_info
 *           nic->link_attr->speed), else 2.5 GB/s (tcp over loopback).
 * Every rank must choose the same algorithm, so a communicator never uses one
 * rank's figures: its ranks exchange theirs in the creation records
 * (setup.c), a configured value must be equal on every rank (else MISMATCH),
 * and a measured one becomes the median over the ranks — the same numbers,
 * so the same choices, everywhere.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "setup_record.h"
#include "util.h"

#define LOCAL_ALPHA_NS 200u
#define FABRIC_ALPHA_NS 13500u
#define FABRIC_MBPS 2500u
#define COPY_BYTES (4u << 20)
#define COPY_TRIES 3

static const int link_setting[OFCCL__LINK_CLASSES] = {OFCCL__CFG_LINK_LOCAL,
                                                      OFCCL__CFG_LINK_FABRIC};

int ofccl__link_parse(int id, const char *text, ofccl__link_t *out, bool *configured,
                      ofccl__err_t *e)
{
    char *end;
    double us, gbps;

    *configured = false;
    if (text[0] == '\0' || strcmp(text, "auto") == 0)
        return 0;
    us = strtod(text, &end);
    if (end == text || *end != ':')
        goto bad;
    text = end + 1;
    gbps = strtod(text, &end);
    if (end == text || *end != '\0' || !(us >= 0 && us <= 1e6) || !(gbps >= 0.001 && gbps <= 1e6))
        goto bad;
    out->alpha_ns = (uint32_t)(us * 1000 + 0.5);
    out->mbps = (uint32_t)(gbps * 1000 + 0.5);
    out->source = OFCCL__LINK_CONFIGURED;
    *configured = true;
    return 0;
bad:
    return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                       "OFCCL_%s=%s: allowed auto or <alpha_us>:<GB/s> (e.g. 0.2:12.5), latency "
                       "0 to 1e6 us, bandwidth 0.001 to 1e6 GB/s",
                       ofccl__cfg_params[id].name, text);
}

uint32_t ofccl__link_copy_mbps(void)
{
    char *src = malloc(COPY_BYTES), *dst = malloc(COPY_BYTES);
    uint64_t best = UINT64_MAX;

    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 1, COPY_BYTES); /* touch every page before timing */
    memset(dst, 0, COPY_BYTES);
    for (int k = 0; k < COPY_TRIES; k++) {
        uint64_t t0 = ofccl__now_ns(), dt;
        memcpy(dst, src, COPY_BYTES);
        __asm__ volatile("" : : "r"(dst) : "memory"); /* the copy is not dead */
        dt = ofccl__now_ns() - t0;
        best = dt < best ? dt : best;
    }
    free(src);
    free(dst);
    best = best ? best : 1;
    return (uint32_t)OFCCL__MIN((uint64_t)COPY_BYTES * 1000 / best, (uint64_t)UINT32_MAX);
}

int ofccl__links_init(ofccl_ctx_t *ctx, uint64_t link_bps, bool measure_local, ofccl__err_t *e)
{
    for (int c = 0; c < OFCCL__LINK_CLASSES; c++) {
        ofccl__link_t *l = &ctx->link[c];
        bool configured;
        int rc = ofccl__link_parse(link_setting[c], ofccl__cfg_str(&ctx->cfg, link_setting[c]), l,
                                   &configured, e);
        if (rc)
            return rc;
        if (configured)
            continue;
        if (c == OFCCL__LINK_LOCAL) {
            uint32_t mbps = measure_local ? ofccl__link_copy_mbps() : 0;
            *l = (ofccl__link_t){LOCAL_ALPHA_NS, mbps ? mbps : 10000,
                                 mbps ? OFCCL__LINK_MEASURED : OFCCL__LINK_DEFAULT};
        } else if (link_bps >= 8000000) { /* at least 1 MB/s: a real figure */
            *l = (ofccl__link_t){FABRIC_ALPHA_NS,
                                 (uint32_t)OFCCL__MIN(link_bps / 8000000, (uint64_t)UINT32_MAX),
                                 OFCCL__LINK_MEASURED};
        } else {
            *l = (ofccl__link_t){FABRIC_ALPHA_NS, FABRIC_MBPS, OFCCL__LINK_DEFAULT};
        }
    }
    return 0;
}

void ofccl__link_format(const ofccl__link_t *l, char *buf, size_t len)
{
    if (l->source != OFCCL__LINK_CONFIGURED)
        snprintf(buf, len, "auto");
    else
        snprintf(buf, len, "%g:%g", l->alpha_ns / 1000.0, l->mbps / 1000.0);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The lower median of v[n] (sorts v). */
static uint32_t median(uint32_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u32);
    return v[(n - 1) / 2];
}

int ofccl__links_agree(ofccl_comm_t *comm, const ofccl__link_t (*all)[OFCCL__LINK_CLASSES])
{
    int n = comm->size;
    uint32_t *v = malloc(2 * sizeof(uint32_t) * (size_t)n);

    if (v == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory for %d ranks", n);
    for (int c = 0; c < OFCCL__LINK_CLASSES; c++) {
        const ofccl__link_t *mine = &all[comm->rank][c];
        bool conf = mine->source == OFCCL__LINK_CONFIGURED;
        int src = OFCCL__LINK_MEASURED;

        for (int r = 0; r < n; r++) {
            const ofccl__link_t *l = &all[r][c];
            bool differs = (l->source == OFCCL__LINK_CONFIGURED) != conf ||
                           (conf && (l->alpha_ns != mine->alpha_ns || l->mbps != mine->mbps));
            if (differs) {
                char a[64], b[64];
                int id = link_setting[c];
                ofccl__link_format(l, b, sizeof(b));
                ofccl__link_format(mine, a, sizeof(a));
                free(v);
                return ofccl__setup_rec_setting_differs(comm, id, r, b, a);
            }
            v[r] = l->alpha_ns;
            v[n + r] = l->mbps;
            src = l->source == OFCCL__LINK_DEFAULT ? OFCCL__LINK_DEFAULT : src;
        }
        if (conf) {
            comm->link[c] = *mine;
            continue;
        }
        comm->link[c].alpha_ns = median(v, n);
        comm->link[c].mbps = median(v + n, n);
        /* Default where any rank had nothing to measure: every rank sees it. */
        comm->link[c].source = (uint32_t)src;
    }
    free(v);
    return 0;
}
