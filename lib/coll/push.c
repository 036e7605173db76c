/*
 * Weight push, one bucket: every rank of the communicator posts bucket k in
 * the same order (a collective). Each receiver announces its bucket buffer to
 * every sender; each sender writes its own pieces of the bucket's tensors
 * straight into every receiver's buffer (no gather to one rank), at least one
 * unit per receiver (a zero-length one when it has nothing for it, so every
 * sender checks every receiver's descriptor). A receiver's request completes
 * when every sender's units are in: bucket k can be read while k+1 arrives in
 * the other buffer. Units: sender i's u-th piece for receiver j is unit
 * base_j[i] + u, the bases counted alike on both sides from the plan.
 */
#include <string.h>

#include "push.h"
#include "pool.h"
#include "util.h"

static ofccl_push_plan_t *plan_of(const ofccl__req_t *r)
{
    return r->algo_state;
}

static uint32_t *base_of(const ofccl__req_t *r)
{
    return plan_of(r)->base + (size_t)r->slot * ((size_t)plan_of(r)->nsenders + 1);
}

static int plan(ofccl__req_t *r)
{
    ofccl_push_plan_t *pl = plan_of(r);
    ofccl_comm_t *comm = r->comm;
    int k = pl->bucket[r->slot];
    uint32_t *base = base_of(r), *sbase = pl->sbase + (size_t)r->slot * (size_t)pl->nreceivers;

    for (int j = 0; pl->me_send >= 0 && j < pl->nreceivers; j++) {
        uint32_t at = 0;
        if (pl->receivers[j] == comm->rank)
            continue;
        r->i_write_to[pl->receivers[j]] = 1;
        for (int i = 0; i < pl->me_send; i++)
            if (pl->senders[i] != pl->receivers[j])
                at += OFCCL__MAX(ofccl__push_pieces(pl, k, i, j), 1u);
        sbase[j] = at;
    }
    base[0] = 0;
    for (int i = 0; i < pl->nsenders; i++) {
        bool from = pl->me_recv >= 0 && pl->senders[i] != comm->rank;
        if (from)
            r->writes_to_me[pl->senders[i]] = 1;
        base[i + 1] =
            base[i] + (from ? OFCCL__MAX(ofccl__push_pieces(pl, k, i, pl->me_recv), 1u) : 0);
    }
    r->units_in = base[pl->nsenders];
    r->unit_span = OFCCL__MAX(r->units_in, (unsigned)comm->size);
    return r->units_in <= OFCCL__MAX_UNITS
               ? 0
               : ofccl__coll_fail(r, OFCCL_ERR_INVALID_ARG,
                                  "bucket %d needs %u signalled pieces, more than %d: use "
                                  "smaller buckets",
                                  k, r->units_in, OFCCL__MAX_UNITS);
}

/* Where sender `me`'s piece of tensor t comes from: its shard, or staging. */
static const char *piece_src(const ofccl__req_t *r, int t, size_t src_off, const ofccl__mr_t **mr,
                             size_t len)
{
    ofccl_push_plan_t *pl = plan_of(r);

    if (r->src.ptr != NULL) { /* staged (the provider needs registered sources) */
        *mr = r->src.mr;
        return (const char *)r->src.ptr +
               pl->soff[(size_t)r->slot * (size_t)pl->ntensors + (size_t)t] + src_off;
    }
    *mr = ofccl__mem_find(r->comm, (const char *)pl->shards[r->slot][t] + src_off, len);
    return (const char *)pl->shards[r->slot][t] + src_off;
}

/* This rank's own piece when it is a sender and a receiver: a local copy. */
static int start(ofccl__req_t *r)
{
    ofccl_push_plan_t *pl = plan_of(r);
    int k = pl->bucket[r->slot];

    if (pl->me_send < 0 || pl->me_recv < 0)
        return 0;
    for (int t = pl->first[k]; t < pl->first[k + 1]; t++) {
        size_t so, dof, len;
        const ofccl__mr_t *mr;
        ofccl__push_piece(pl, t, pl->me_send, pl->me_recv, &so, &dof, &len);
        len = ofccl__push_used(pl, r->slot, t, so, len);
        int rc =
            len ? ofccl__exec_copy(r, (char *)r->dst.ptr + dof, piece_src(r, t, so, &mr, len), len)
                : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* Post what is ready of our pieces for receiver j; 1 once all are posted. */
static int send_to(ofccl__req_t *r, int j)
{
    ofccl_push_plan_t *pl = plan_of(r);
    int q = pl->receivers[j], k = pl->bucket[r->slot];
    uint32_t base = pl->sbase[(size_t)r->slot * (size_t)pl->nreceivers + (size_t)j], u = 0;

    for (int t = pl->first[k]; t < pl->first[k + 1]; t++) {
        size_t so, dof, len;
        const ofccl__mr_t *mr;
        const char *src;
        int rc;
        ofccl__push_piece(pl, t, pl->me_send, j, &so, &dof, &len);
        if (len == 0)
            continue;
        if (u++ < r->sent[q])
            continue;
        /* a piece past what this post moves: a zero-length unit in its place */
        len = ofccl__push_used(pl, r->slot, t, so, len);
        src = len ? piece_src(r, t, so, &mr, len) : NULL;
        rc = ofccl__coll_put(r, q, src, len ? mr : NULL, len, dof, base + u - 1);
        if (rc == OFCCL_ERR_AGAIN)
            return 0;
        if (rc)
            return rc;
    }
    if (u == 0 && r->sent[q] == 0) { /* nothing for it: one zero-length unit */
        int rc = ofccl__coll_put(r, q, NULL, NULL, 0, 0, base);
        if (rc && rc != OFCCL_ERR_AGAIN)
            return rc;
    }
    return r->sent[q] >= OFCCL__MAX(u, 1u);
}

static int progress(ofccl__req_t *r)
{
    ofccl_push_plan_t *pl = plan_of(r);
    int all_sent = 1;

    for (int n = 0; pl->me_send >= 0 && n < pl->nreceivers; n++) {
        /* receivers in an order that differs per sender, so they are not all
         * written by everyone at once */
        int j = (pl->me_send + n) % pl->nreceivers, rc;
        if (pl->receivers[j] == r->comm->rank)
            continue;
        rc = send_to(r, j);
        if (rc < 0)
            return rc;
        all_sent &= rc;
    }
    r->finished = all_sent && r->arrived >= r->units_in;
    return 0;
}

static int writer_of(const ofccl__req_t *r, uint32_t unit)
{
    const ofccl_push_plan_t *pl = plan_of(r);
    const uint32_t *base = base_of(r);
    int lo = 0, hi = pl->nsenders - 1;

    if (unit >= base[pl->nsenders])
        return -1;
    while (lo < hi) { /* the last sender whose units start at or before `unit` */
        int mid = (lo + hi + 1) / 2;
        if (base[mid] <= unit)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (lo < pl->nsenders - 1 && base[lo + 1] == base[lo] && base[lo] <= unit)
        lo++; /* skip senders with no units here (this rank itself) */
    return pl->senders[lo];
}

static uint32_t unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    const ofccl_push_plan_t *pl = plan_of(r);

    for (int i = 0; i < pl->nsenders; i++)
        if (pl->senders[i] == p)
            return base_of(r)[i] + k;
    return UINT32_MAX;
}

static uint64_t need_of(const ofccl__req_t *r, int p)
{
    const ofccl_push_plan_t *pl = plan_of(r);
    size_t need = 0;

    /* the end of the furthest piece we write into receiver p's buffer */
    for (int j = 0; j < pl->nreceivers; j++)
        if (pl->receivers[j] == p)
            for (int t = pl->first[pl->bucket[r->slot]]; t < pl->first[pl->bucket[r->slot] + 1];
                 t++) {
                size_t so, dof, len;
                ofccl__push_piece(pl, t, pl->me_send, j, &so, &dof, &len);
                need = OFCCL__MAX(need, len ? dof + len : 0);
            }
    return need;
}

const ofccl__algo_t ofccl__push_algo = {
    .size = sizeof(ofccl__algo_t),
    .name = "push",
    .coll = OFCCL__PUSH,
    .wire_id = OFCCL__WIRE_PUSH,
    .flags = 0,
    .plan = plan,
    .start = start,
    .progress = progress,
    .writer_of = writer_of,
    .unit_of = unit_of,
    .need_of = need_of,
};
