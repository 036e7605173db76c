/*
 * A push plan's geometry, which every rank computes alike from the same
 * plan (push_plan.c builds it): which sender owns which elements of a
 * tensor, the piece sender s writes to receiver j, how many pieces a bucket
 * has, and how much of each tensor a bucket's senders said they use.
 */
#include "coll.h"
#include "push.h"
#include "util.h"

/* Index of `rank` in list[n], or -1. */
int ofccl__push_index(const int *list, int n, int rank)
{
    for (int i = 0; i < n; i++)
        if (list[i] == rank)
            return i;
    return -1;
}

size_t ofccl__push_shard(const ofccl_push_plan_t *pl, int t, int s, size_t *first)
{
    size_t n = pl->counts[t], c = (n + (size_t)pl->nsenders - 1) / (size_t)pl->nsenders;

    *first = OFCCL__MIN((size_t)s * c, n);
    return OFCCL__MIN(*first + c, n) - *first;
}

void ofccl__push_piece(const ofccl_push_plan_t *pl, int t, int s, int j, size_t *src_off,
                       size_t *dst_off, size_t *len)
{
    size_t es = pl->esize[t], s0, s1 = ofccl__push_shard(pl, t, s, &s0);

    s1 += s0;
    size_t a = pl->slice_off[(size_t)j * (size_t)pl->ntensors + (size_t)t];
    size_t b = a + pl->slice_cnt[(size_t)j * (size_t)pl->ntensors + (size_t)t];
    size_t x0 = OFCCL__MAX(s0, a), x1 = OFCCL__MIN(s1, b);

    *len = x1 > x0 ? (x1 - x0) * es : 0;
    *src_off = x1 > x0 ? (x0 - s0) * es : 0;
    *dst_off =
        pl->where[(size_t)j * (size_t)pl->ntensors + (size_t)t] + (x1 > x0 ? (x0 - a) * es : 0);
}

size_t ofccl__push_used(const ofccl_push_plan_t *pl, int slot, int t, size_t src_off, size_t len)
{
    size_t s0, es = pl->esize[t], used = pl->used[(size_t)slot * (size_t)pl->ntensors + (size_t)t];
    size_t at;

    if (used == SIZE_MAX)
        return len;
    ofccl__push_shard(pl, t, pl->me_send, &s0);
    at = s0 * es + src_off; /* the piece's first byte in the tensor */
    return used * es > at ? OFCCL__MIN(len, used * es - at) : 0;
}

unsigned ofccl__push_pieces(const ofccl_push_plan_t *pl, int k, int s, int j)
{
    unsigned n = 0;

    for (int t = pl->first[k]; t < pl->first[k + 1]; t++) {
        size_t so, dof, len;
        ofccl__push_piece(pl, t, s, j, &so, &dof, &len);
        n += len > 0;
    }
    return n;
}

void ofccl__push_set_used(ofccl_push_plan_t *pl, int slot, int k, const size_t *used)
{
    for (int t = pl->first[k]; t < pl->first[k + 1]; t++)
        pl->used[(size_t)slot * (size_t)pl->ntensors + (size_t)t] =
            used != NULL ? OFCCL__MIN(used[t], pl->counts[t]) : SIZE_MAX;
}
