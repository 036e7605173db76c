/*
 * The chooser's cost model. Every transfer over a link class costs
 * alpha + bytes / beta (links.c gives the constants, agreed by every rank).
 * n ranks on H hosts of P ranks; m_s = P - 1 same-host peers, m_r = n - P
 * peers on other hosts; class s (same-host pairs) is the local transport
 * where same-host peers use it, else the fabric; b is one rank's block
 * (all-gather, reduce-scatter) and S the buffer (broadcast). A collective's
 * time is the latency of its dependent steps plus, per step, the busiest of
 * the resources it loads:
 *   - a rank's local-transport copies: bytes / beta_local;
 *   - a rank's fabric endpoint with m streams at once: bytes / beta_fabric
 *     times kappa(m) = max(1, m / F): an endpoint keeps F peers' streams at
 *     full rate, more share it (all-pairs traffic; F = OFCCL_LINK_STREAMS, 13
 *     by default from loopback tcp at 16 ranks, where direct's all-gather
 *     runs at 0.85-0.94 of the ring's);
 *   - a host's link to the others, shared by its ranks: the bytes that leave
 *     the host / beta_fabric;
 *   - a rank's core, for the reduce-scatter's reductions: summing k inputs of
 *     b bytes reads each once and writes b, (k + 1) b / (2 beta_local) at the
 *     copy's rate of traffic (a copy reads and writes each byte); its local
 *     copies run on the same core, so the two add, and so does its fabric
 *     time where the CPU copies the fabric's bytes too (OFCCL__Q_CPU_COPIES:
 *     tcp, shm), where an RDMA NIC's overlaps.
 * Candidates (all-gather and reduce-scatter move the same bytes):
 *   direct  alpha + max(core, m_f b kappa(m_f) / beta_f, P m_r b / beta_f),
 *           m_f = the peers through the fabric, core = m_s b / beta_l (none
 *           for a reduce-scatter reading peers in place) plus, for the
 *           reduce-scatter, one sum of n inputs;
 *   ring    (n - 1) max(alpha_s + b / beta_s, alpha_f + b / beta_f): one block
 *           per step on every hop, one crossing per host boundary; the
 *           reduce-scatter's step also sums 2 inputs (n - 1 passes in all);
 *   hier    T1 = alpha_f + (H - 1) P b / beta_f (every rail at once through the
 *           host's link), T2 = alpha_s + (P - 1) H b / beta_s (the rails'
 *           blocks within the host); the second phase forwards chunk by
 *           chunk, so max(T1, T2) + min(T1, T2) min(1, chunk / b); the
 *           reduce-scatter sums P inputs of H b within the host and H of b
 *           between hosts;
 * and for broadcast (S bytes from the root):
 *   direct  alpha + max(S / beta_l where readers pull at once, else
 *           m_s S / beta_s, m_f S kappa(m_f) / beta_f);
 *   chain   (k + n - 2) steps of one chunk c = min(chunk, S), k = S / c,
 *           each max(alpha_s + c / beta_s, alpha_f + c / beta_f);
 *   hier    alpha_f + (H - 1) S / beta_f, then alpha_s + (P - 1) S / beta_s.
 * perf/scaling_model.py prints the same formulas for clusters; docs/scaling.md.
 */
#include <math.h>
#include <stdio.h>

#include "coll.h"
#include "cost.h"

void ofccl__cost_topo_of(const ofccl_comm_t *comm, ofccl__cost_topo_t *t)
{
    int me = comm->rank;

    t->n = comm->size;
    t->hosts = comm->nnodes > 0 ? comm->nnodes : 1;
    t->width = comm->node_width;
    t->local_peers = false;
    if (t->width > 1) { /* the next rank of this host: every rank of it is reached alike */
        int i = (comm->node_idx[me] + 1) % t->width;
        t->local_peers =
            ofccl__comm_peer_local(comm, comm->node_rank[comm->node_of[me] * t->width + i]);
    }
    /* Hosts of uneven widths: every rank must price alike (they must choose
     * alike), a rank alone on its host too, so from what they share: some
     * host has several ranks, and the transports map same-host peers. */
    if (t->width == 0)
        t->local_peers = t->hosts < t->n && (ofccl__comm_caps(comm)->peer_map ||
                                             ofccl__comm_caps(comm)->peer_map_some);
    t->peer_map = ofccl__comm_caps(comm)->peer_map;
    t->fabric_cpu = (ofccl__comm_caps(comm)->quirks & OFCCL__Q_CPU_COPIES) != 0;
    t->chunk = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_CHUNK_BYTES);
    t->streams = (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_LINK_STREAMS);
    for (int c = 0; c < OFCCL__LINK_CLASSES; c++) {
        t->alpha[c] = comm->link[c].alpha_ns * 1e-9;
        t->beta[c] = comm->link[c].mbps * 1e6;
    }
}

static double kappa(const ofccl__cost_topo_t *t, int m)
{
    int f = t->streams > 0 ? t->streams : 1;

    return m <= f ? 1.0 : (double)m / f;
}

static double max2(double a, double b)
{
    return a > b ? a : b;
}

/* The shape: hosts H, ranks per host P, same-host peers, other-host peers,
 * peers through the fabric, and the class of same-host pairs. */
typedef struct shape {
    int h, p, ms, mr, mf, s;
} shape_t;

static shape_t shape_of(const ofccl__cost_topo_t *t)
{
    shape_t x;

    x.h = t->hosts > 1 ? t->hosts : 1;
    x.p = x.h == 1 ? t->n : t->width > 0 ? t->width : (t->n + x.h - 1) / x.h;
    x.ms = x.p - 1;
    x.mr = t->n - x.p;
    x.mf = x.mr + (t->local_peers ? 0 : x.ms);
    x.s = t->local_peers ? OFCCL__LINK_LOCAL : OFCCL__LINK_FABRIC;
    return x;
}

/* One step moving `bytes` on every hop of a host-major path (ring, chain). */
static double hop(const ofccl__cost_topo_t *t, const shape_t *x, double bytes)
{
    double step = 0;

    if (x->p > 1)
        step = t->alpha[x->s] + bytes / t->beta[x->s];
    if (x->h > 1)
        step = max2(step, t->alpha[OFCCL__LINK_FABRIC] + bytes / t->beta[OFCCL__LINK_FABRIC]);
    return step;
}

/* Within a host, one rank sending `bytes` to each of its m_s peers. */
static double fan_out(const ofccl__cost_topo_t *t, const shape_t *x, double bytes)
{
    double k = t->local_peers ? 1.0 : kappa(t, x->ms);

    return t->alpha[x->s] + x->ms * bytes * k / t->beta[x->s];
}

/* This rank's reduction of `inputs` blocks of `bytes` into one: it reads every
 * input once and writes the result, at the copy's rate of traffic (a copy reads
 * and writes every byte it copies). */
static double reduce(const ofccl__cost_topo_t *t, int inputs, double bytes)
{
    return (inputs + 1) * bytes / (2 * t->beta[OFCCL__LINK_LOCAL]);
}

/* This rank's core in direct: its copies to same-host peers (broadcast where
 * readers pull: each reader's one copy of the root's buffer) and the
 * reduce-scatter's reduction of n blocks, which, where peers' memory maps,
 * reads their blocks in place instead of copies into staging. */
static double direct_core(const ofccl__cost_topo_t *t, const shape_t *x, double b, int coll)
{
    double bL = t->beta[OFCCL__LINK_LOCAL], copies = 0;

    if (t->local_peers && x->ms > 0)
        copies = coll == OFCCL__BC && t->peer_map ? b / bL : x->ms * b / bL;
    if (coll != OFCCL__RS)
        return copies;
    return (t->peer_map ? 0 : copies) + reduce(t, t->n, b);
}

static double direct(const ofccl__cost_topo_t *t, const shape_t *x, double b, int coll)
{
    double aF = t->alpha[OFCCL__LINK_FABRIC], bF = t->beta[OFCCL__LINK_FABRIC];
    double busy = direct_core(t, x, b, coll), ep = x->mf * b * kappa(t, x->mf) / bF;

    if (t->fabric_cpu)
        busy += ep;
    if (x->mf > 0)
        busy = max2(busy, ep);
    if (coll != OFCCL__BC && x->h > 1)
        busy = max2(busy, (double)x->p * x->mr * b / bF);
    return (x->mf > 0 ? aF : t->alpha[OFCCL__LINK_LOCAL]) + busy;
}

/* One step of the ring: a block on every hop; the reduce-scatter's rank also
 * adds its contribution to the partial it received (two inputs), on the same
 * core as its copy to a same-host right neighbour, or as every hop where the
 * fabric's bytes are copied on it too. */
static double ring_step(const ofccl__cost_topo_t *t, const shape_t *x, double b, int coll)
{
    double core;

    if (coll != OFCCL__RS)
        return hop(t, x, b);
    core = reduce(t, 2, b);
    if (t->fabric_cpu)
        return hop(t, x, b) + core;
    if (t->local_peers && x->p > 1)
        core += t->alpha[OFCCL__LINK_LOCAL] + b / t->beta[OFCCL__LINK_LOCAL];
    return max2(hop(t, x, b), core);
}

static double hier(const ofccl__cost_topo_t *t, const shape_t *x, double b, int coll)
{
    double aF = t->alpha[OFCCL__LINK_FABRIC], bF = t->beta[OFCCL__LINK_FABRIC];
    double rail, host, t1, t2, host_sum = 0, rail_sum = 0, both;

    if (x->h < 2 || t->width < 2)
        return INFINITY;
    rail = (x->h - 1) * b * kappa(t, x->h - 1) / bF; /* this rank's streams between hosts */
    if (coll == OFCCL__BC)
        return aF + rail + fan_out(t, x, b);
    host = fan_out(t, x, x->h * b); /* the rails' blocks within the host */
    if (coll == OFCCL__RS) {        /* the host's P inputs of H blocks, then H partials of one */
        host_sum = reduce(t, x->p, x->h * b);
        rail_sum = reduce(t, x->h, b);
    }
    t1 = max2(aF + max2(rail, (double)x->p * (x->h - 1) * b / bF), rail_sum);
    t2 = t->local_peers ? host + host_sum : max2(host, host_sum);
    both = max2(t1, t2) + fmin(t1, t2) * fmin(1.0, b > 0 ? (double)t->chunk / b : 1.0);
    /* The phases overlap, but where the fabric's bytes are copied on the core,
     * that one core streams, copies and sums one thing after the other. */
    if (t->fabric_cpu)
        both = max2(both, aF + rail + host + host_sum + rail_sum);
    return both;
}

double ofccl__cost_time(const ofccl__cost_topo_t *t, int coll, int cand, size_t bytes)
{
    shape_t x = shape_of(t);
    double b = (double)bytes;
    bool bcast = coll == OFCCL__BC;

    if (t->n < 2)
        return 0;
    switch (cand) {
    case OFCCL__CAND_DIRECT:
        return direct(t, &x, b, coll);
    case OFCCL__CAND_RING:
        return bcast ? INFINITY : (t->n - 1) * ring_step(t, &x, b, coll);
    case OFCCL__CAND_HIER:
        return hier(t, &x, b, coll);
    case OFCCL__CAND_CHAIN: {
        double c = fmin((double)t->chunk, b), k = c > 0 ? ceil(b / c) : 1;
        return bcast ? (k + t->n - 2) * hop(t, &x, c) : INFINITY;
    }
    default:
        return INFINITY;
    }
}

int ofccl__cost_pick(const ofccl__cost_topo_t *t, int coll, size_t bytes, unsigned valid)
{
    int best = OFCCL__CAND_COUNT;
    double best_t = INFINITY;

    for (int c = 0; c < OFCCL__CAND_COUNT; c++) {
        double tc;
        if (!(valid & (1u << c)))
            continue;
        tc = ofccl__cost_time(t, coll, c, bytes);
        /* Cheaper by more than rounding: candidates that tie exactly (direct
         * and the ring at two ranks) can differ in their last bits. */
        if (best == OFCCL__CAND_COUNT || tc < best_t * (1 - 1e-9))
            best = c, best_t = tc;
    }
    return best;
}

const char *ofccl__cost_cand_name(int cand)
{
    static const char *const names[] = {"direct", "ring", "hier", "chain"};

    return cand >= 0 && cand < OFCCL__CAND_COUNT ? names[cand] : "?";
}

static const char *source_word(uint32_t source)
{
    return source == OFCCL__LINK_CONFIGURED ? "configured"
           : source == OFCCL__LINK_MEASURED ? "measured"
                                            : "default";
}

static void size_text(size_t b, char *buf, size_t len)
{
    if (b >= (1u << 30) && b % (1u << 30) == 0)
        snprintf(buf, len, "%zuG", b >> 30);
    else if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, len, "%zuM", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, len, "%zuK", b >> 10);
    else
        snprintf(buf, len, "%zu", b);
}

void ofccl__cost_describe(const ofccl_comm_t *comm, const unsigned valid[3], char *buf, size_t len)
{
    static const int colls[] = {OFCCL__AG, OFCCL__RS, OFCCL__BC};
    static const char *const names[] = {"all-gather", "reduce-scatter", "broadcast"};
    const ofccl__link_t *l = comm->link;
    ofccl__cost_topo_t t;
    size_t used;

    ofccl__cost_topo_of(comm, &t);
    used = (size_t)snprintf(buf, len,
                            "cost model: local %.1f us %.2f GB/s (%s), fabric %.1f us %.2f GB/s "
                            "(%s), %d full-rate streams; auto beyond the eager size picks",
                            l[0].alpha_ns / 1e3, l[0].mbps / 1e3, source_word(l[0].source),
                            l[1].alpha_ns / 1e3, l[1].mbps / 1e3, source_word(l[1].source),
                            (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_LINK_STREAMS));
    for (int k = 0; k < 3 && used < len; k++) {
        int last = -1;
        used += (size_t)snprintf(buf + used, len - used, "%s %s", k ? ";" : "", names[k]);
        for (size_t b = 1024; b <= (1u << 30) && used < len; b *= 2) {
            int c = ofccl__cost_pick(&t, colls[k], b, valid[k]);
            char at[16];
            if (c == last)
                continue;
            size_text(b, at, sizeof(at));
            used += (size_t)snprintf(buf + used, len - used, last < 0 ? " %s" : ", %s from %s",
                                     ofccl__cost_cand_name(c), at);
            last = c;
        }
    }
    if (used >= len && len > 4)
        snprintf(buf + len - 4, 4, "...");
}
