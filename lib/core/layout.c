/*
 * Bucket layouts. Every rank must post a bucket with the same tensors: the
 * same number, the same element counts, in the same order. Two layouts can pad
 * to the same flat size and still differ (3 + 5 elements against 5 + 3), so
 * the flat count proves nothing: each descriptor carries the number of tensors
 * and a hash of their counts. When a writer finds that a peer's hash differs,
 * it reads the peer's published counts (one RMA read, on a path that is
 * failing anyway) and names the first tensor that differs, in elements.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "engine_impl.h"
#include "util.h"

#define DIFF_READ_NS 500000000ull /* how long naming the tensor may take */

/* FNV-1a over the counts' bytes (little-endian), then the number of tensors. */
static uint64_t fnv_count(uint64_t h, uint64_t count)
{
    uint8_t le[8];

    ofccl__put_le64(le, count);
    return ofccl__fnv(h, le, sizeof(le));
}

static uint64_t counts_hash(const uint64_t *counts, size_t n)
{
    uint64_t h = OFCCL__FNV_BASIS;

    for (size_t k = 0; k < n; k++)
        h = fnv_count(h, counts[k]);
    return (h ^ (uint64_t)n) * OFCCL__FNV_PRIME;
}

uint64_t ofccl__layout_hash(const ofccl_tensor_t *t, int n)
{
    uint64_t h = OFCCL__FNV_BASIS;

    for (int k = 0; k < n; k++)
        h = fnv_count(h, t[k].count);
    return (h ^ (uint64_t)(unsigned)n) * OFCCL__FNV_PRIME;
}

/* The published area: [counts n | hash] [a peer's counts n | its hash]. */
size_t ofccl__layout_bytes(const ofccl__req_t *r)
{
    return r->bucket ? 2 * sizeof(uint64_t) * ((size_t)r->ntensors + 1) : 0;
}

void ofccl__layout_publish(ofccl__req_t *r, void *area)
{
    uint64_t *w = area;
    size_t n = (size_t)r->ntensors;

    r->layout = w;
    for (size_t k = 0; k < n; k++)
        w[k] = r->tensors[k].count;
    w[n] = r->layout_hash;
    memset(w + n + 1, 0, (n + 1) * sizeof(uint64_t));
}

static void op_done(ofccl__op_t *op, int status, const char *msg)
{
    ofccl__layout_op_t *lo = (ofccl__layout_op_t *)op;

    (void)msg;
    lo->status = status;
    lo->busy = 0;
}

/* The peer's counts are here (read, or written by the peer) when its hash
 * follows them and matches them: a write may land in any order. */
static bool theirs_here(const uint64_t *theirs, size_t n, uint64_t hash)
{
    if (atomic_load_explicit((_Atomic uint64_t *)&theirs[n], memory_order_acquire) != hash)
        return false;
    return counts_hash(theirs, n) == hash;
}

/* Drive the endpoint until `lo` completes or the deadline passes. */
static void await_op(ofccl_comm_t *comm, ofccl__layout_op_t *lo, uint64_t deadline)
{
    ofccl__err_t e;

    while (lo->busy && ofccl__now_ns() < deadline)
        if (ofccl__ep_progress(comm->ep, &comm->handlers, 16, &e) < 0)
            break;
}

static int post_quiet(ofccl_comm_t *comm, ofccl__layout_op_t *lo, int rc)
{
    if (rc != 0) {
        lo->busy = 0;
        return rc;
    }
    comm->ops_pending++;
    return 0;
}

const char *ofccl__layout_diff(ofccl__req_t *r, int p, const uint64_t d[OFCCL__DESC_WORDS],
                               char *why, size_t len)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__layout_op_t *rd = &comm->coll->layout_read, *wr = &comm->coll->layout_write;
    size_t n = (size_t)r->ntensors, bytes = (n + 1) * sizeof(uint64_t);
    uint64_t *theirs, deadline = ofccl__now_ns() + DIFF_READ_NS;
    ofccl__rkey_t rk = {d[3], d[4], d[5]};
    ofccl__err_t e;
    size_t t;

    /* Same number of tensors here (checked first); the peer's area must lie
     * inside the region it announced. An op still outstanding from an earlier
     * failure keeps its buffer: then the hash message stands. */
    if (r->layout == NULL || r->dst.mr == NULL || rd->busy || wr->busy || d[11] > d[5] ||
        2 * bytes > d[5] - d[11])
        return why;
    theirs = r->layout + n + 1;
    /* Read the peer's counts, unless it already wrote them here. */
    if (!theirs_here(theirs, n, d[9])) {
        rd->op = (ofccl__op_t){.cb = op_done, .quiet = 1};
        rd->busy = 1;
        if (post_quiet(comm, rd,
                       ofccl__ep_read(comm->ep, p, theirs, bytes, r->dst.mr, &rk, d[11], &rd->op,
                                      &e)) == 0)
            await_op(comm, rd, deadline);
    }
    /* Then hand ours to the peer, so it can name the tensor even once this
     * rank has gone; the request waits for the write (flush_descriptors). */
    wr->op = (ofccl__op_t){.cb = op_done, .quiet = 1};
    wr->busy = 1;
    post_quiet(comm, wr,
               ofccl__ep_write_dc(comm->ep, p, r->layout, bytes, r->dst.mr, &rk, d[11] + bytes,
                                  &wr->op, &e));
    if (rd->busy || !theirs_here(theirs, n, d[9]))
        return why;
    for (t = 0; t < n && theirs[t] == r->layout[t]; t++)
        ;
    if (t == n)
        return why;
    snprintf(why, len,
             "bucket layouts differ at tensor %zu: rank %d's has %llu elements, rank %d's has "
             "%llu (both buckets hold %zu tensors); every rank must pass the same tensors in the "
             "same order",
             t, p, (unsigned long long)theirs[t], comm->rank, (unsigned long long)r->layout[t], n);
    return why;
}

bool ofccl__layout_busy(const ofccl_comm_t *comm)
{
    return comm->coll->layout_write.busy != 0;
}
