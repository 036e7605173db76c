/*
 * ofccl_perf's broadcast and weight push (-o bc | push | bp).
 *
 * Broadcast: ofccl_broadcast of `bytes` from -R root, in place, in a pool
 * buffer; the root's values are perf_fill's, every other rank's buffer is
 * poisoned before each checked iteration.
 *
 * Push: ranks 0 .. S-1 send (-S, default half the ranks), the others receive.
 * The weights are PERF_PUSH_NT byte tensors of bytes/PERF_PUSH_NT bytes, in
 * buckets of -K bytes (perfutil.h); the plan is built once per size, outside
 * the timing. One iteration pushes every bucket, double-buffered: a receiver
 * posts bucket k + 2 into the plan's buffer k % 2 once bucket k is in (and,
 * checking, verified). Senders' shards live in ofccl_mem_alloc memory. The
 * size is the bytes each receiver gets; busbw = algbw.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofccl_perf_bp.h"

static ofccl_dtype_t to_ofccl(perf_dtype_t dt)
{
    static const ofccl_dtype_t map[] = {OFCCL_F32, OFCCL_F64, OFCCL_BF16, OFCCL_F16};
    return map[dt];
}

static int fail(bp_t *b, const char *what, int rc)
{
    fprintf(stderr, "ofccl_perf rank %d: %s: %s: %s\n", b->rank, what, ofccl_strerror(rc),
            ofccl_comm_last_error(b->comm));
    return rc;
}

static int wait_free(bp_t *b, ofccl_req_t *req, const char *what)
{
    int rc = ofccl_wait(req);
    if (rc)
        fail(b, what, rc);
    ofccl_req_free(req);
    return rc;
}

static int bp_setup(bp_t *b)
{
    int rc;

    if ((rc = ofccl_buffer_alloc(b->comm, b->maxb + 64, (void **)&b->buf)) != 0)
        return fail(b, "ofccl_buffer_alloc", rc);
    if ((rc = ofccl_buffer_alloc(b->comm, sizeof(double) * 2 * (size_t)b->size,
                                 (void **)&b->xch)) != 0)
        return fail(b, "ofccl_buffer_alloc", rc);
    if (b->rank < b->nsenders) {
        /* Every tensor's shard, each starting on a cache line. */
        size_t len = b->maxb / (size_t)b->nsenders + PERF_PUSH_NT * 128 + 64;
        if ((rc = ofccl_mem_alloc(b->ctx, len, (void **)&b->shards)) != 0)
            return fail(b, "ofccl_mem_alloc", rc);
        memset(b->shards, 0, len);
    }
    memset(b->buf, 0, b->maxb + 64);
    return 0;
}

int bp_open(bp_t *b, ofccl_ctx_t *ctx, ofccl_comm_t *comm, perf_dtype_t dt, int iters, int warmup,
            int check, size_t maxb)
{
    b->ctx = ctx;
    b->comm = comm;
    ofccl_comm_rank(comm, &b->rank);
    ofccl_comm_size(comm, &b->size);
    b->dt = dt;
    b->iters = iters;
    b->warmup = warmup;
    b->check = check;
    b->maxb = maxb;
    b->nsenders = !b->push ? 0 : b->nsenders ? b->nsenders : b->size / 2;
    if (b->root < 0 || b->root >= b->size ||
        (b->push && (b->nsenders < 1 || b->nsenders >= b->size))) {
        fprintf(stderr,
                "ofccl_perf: -R %d / -S %d: the root must be a rank (0..%d) and the senders at "
                "least 1 and fewer than the %d ranks\n",
                b->root, b->nsenders, b->size - 1, b->size);
        return OFCCL_ERR_INVALID_ARG;
    }
    return bp_setup(b);
}

void bp_teardown(bp_t *b)
{
    if (b->buf)
        ofccl_buffer_free(b->comm, b->buf);
    if (b->xch)
        ofccl_buffer_free(b->comm, b->xch);
    if (b->shards)
        ofccl_mem_free(b->ctx, b->shards);
    b->buf = b->shards = NULL;
    b->xch = NULL;
}

/* The slowest rank's time and the wrong elements of all ranks, through the
 * library itself (f64 all-gather in place: exact); the row on rank 0. */
static int report(bp_t *b, perf_out_t *out, const char *coll, size_t bytes, size_t count,
                  const char *type, double us, long wrong, long *total_wrong)
{
    ofccl_req_t *req;
    double maxus = 0;
    long sum = 0;
    int rc;

    b->xch[2 * b->rank] = us;
    b->xch[2 * b->rank + 1] = (double)wrong;
    if ((rc = ofccl_allgather(b->comm, b->xch + 2 * b->rank, b->xch, 2, OFCCL_F64, &req)) != 0)
        return fail(b, "exchange results", rc);
    if ((rc = wait_free(b, req, "exchange results")) != 0)
        return rc;
    for (int r = 0; r < b->size; r++) {
        maxus = b->xch[2 * r] > maxus ? b->xch[2 * r] : maxus;
        sum += (long)b->xch[2 * r + 1];
    }
    *total_wrong += sum;
    if (b->rank == 0)
        perf_out_bytes(out, coll, bytes, count, type, maxus, sum, b->size);
    return 0;
}

static int bcast_once(bp_t *b, size_t count)
{
    ofccl_req_t *req;
    int rc = ofccl_broadcast(b->comm, b->buf, count, to_ofccl(b->dt), b->root, &req);

    if (rc)
        return fail(b, "post broadcast", rc);
    return wait_free(b, req, "broadcast");
}

int bp_bcast_size(bp_t *b, perf_out_t *out, size_t bytes, long *total_wrong)
{
    size_t es = perf_dtype_size(b->dt), count = bytes / es ? bytes / es : 1;
    double t0, us;
    long wrong = 0;
    int rc = 0;

    bytes = count * es;
    if (b->rank == b->root)
        perf_fill(b->dt, b->buf, count, b->size, b->root, 0, 0);
    for (int i = 0; i < b->warmup && rc == 0; i++)
        rc = bcast_once(b, count);
    if (rc == 0 && (rc = ofccl_barrier(b->comm)) != 0)
        fail(b, "barrier", rc);
    t0 = perf_now_us();
    for (int i = 0; i < b->iters && rc == 0; i++)
        rc = bcast_once(b, count);
    us = (perf_now_us() - t0) / b->iters;
    for (int it = 1; b->check && it <= b->iters && rc == 0; it++) {
        if (b->rank == b->root)
            perf_fill(b->dt, b->buf, count, b->size, b->root, it, 0);
        else
            memset(b->buf, 0xff, bytes); /* NaN in every float type */
        if ((rc = bcast_once(b, count)) == 0)
            wrong += perf_check_values(b->dt, b->buf, count, b->size, b->root, it, 0);
    }
    if (rc)
        return rc;
    return report(b, out, "bc", bytes, count, perf_dtype_names[b->dt], us, wrong, total_wrong);
}

/* ---- push ---- */

typedef struct push_run {
    ofccl_push_plan_t *plan;
    int nb, sender; /* sender: index in the senders list, or -1 */
    void *shard[PERF_PUSH_NT];
    size_t bytes;
} push_run_t;

static void fill_shards(bp_t *b, push_run_t *p, int it)
{
    for (int t = 0; t < PERF_PUSH_NT && p->sender >= 0; t++) {
        size_t off,
            n = perf_push_shard(perf_push_tensor_bytes(p->bytes, t), b->nsenders, p->sender, &off);
        for (size_t i = 0; i < n; i++)
            ((unsigned char *)p->shard[t])[i] = perf_push_byte(t, off + i, it);
    }
}

/* Bytes of bucket k in `buf` (a receiver's) that differ from iteration it's. */
static long check_bucket(const push_run_t *p, int k, const unsigned char *buf, int it)
{
    long wrong = 0;

    for (int t = 0; t < PERF_PUSH_NT; t++) {
        int bk;
        size_t at, len;
        if (ofccl_push_tensor_where(p->plan, t, &bk, &at, &len) != 0 || bk != k)
            continue;
        for (size_t i = 0; i < len; i++)
            wrong += buf[at + i] != perf_push_byte(t, i, it);
    }
    return wrong;
}

/* Every bucket once, double-buffered; `it` > 0: receivers check each bucket. */
static int push_once(bp_t *b, push_run_t *p, int it, long *wrong)
{
    ofccl_req_t *req[2] = {NULL, NULL};
    int rc = 0;

    for (int k = 0; k < p->nb + 2; k++) {
        if (k >= 2 && req[k % 2] != NULL) {
            int done = k - 2, rc2 = wait_free(b, req[k % 2], "push bucket");
            void *buf;
            req[k % 2] = NULL;
            rc = rc ? rc : rc2;
            if (rc == 0 && it > 0 && p->sender < 0 && ofccl_push_buffer(p->plan, done, &buf) == 0)
                *wrong += check_bucket(p, done, buf, it);
        }
        if (k < p->nb && rc == 0) {
            rc = ofccl_push_bucket(p->plan, k, p->sender >= 0 ? p->shard : NULL, NULL, 0,
                                   &req[k % 2]);
            if (rc)
                fail(b, "post push bucket", rc);
        }
    }
    return rc;
}

static int push_plan(bp_t *b, push_run_t *p)
{
    int senders[b->size], receivers[b->size];
    size_t counts[PERF_PUSH_NT];
    char *at = b->shards;
    ofccl_push_spec_t sp = {.size = sizeof(sp),
                            .nsenders = b->nsenders,
                            .senders = senders,
                            .nreceivers = b->size - b->nsenders,
                            .receivers = receivers,
                            .ntensors = PERF_PUSH_NT,
                            .counts = counts,
                            .bucket_bytes = b->bucket_bytes};
    int rc;

    for (int r = 0; r < b->size; r++)
        *(r < b->nsenders ? &senders[r] : &receivers[r - b->nsenders]) = r;
    for (int t = 0; t < PERF_PUSH_NT; t++) {
        size_t off;
        counts[t] = perf_push_tensor_bytes(p->bytes, t);
        p->shard[t] = at;
        if (p->sender >= 0)
            at += (perf_push_shard(counts[t], b->nsenders, p->sender, &off) + 63) / 64 * 64;
    }
    if ((rc = ofccl_push_plan_create(b->comm, &sp, &p->plan)) != 0)
        return fail(b, "ofccl_push_plan_create", rc);
    ofccl_push_plan_info(p->plan, &p->nb, NULL);
    return 0;
}

int bp_push_size(bp_t *b, perf_out_t *out, size_t bytes, long *total_wrong)
{
    push_run_t p = {.sender = b->rank < b->nsenders ? b->rank : -1,
                    .bytes = bytes < PERF_PUSH_NT ? PERF_PUSH_NT : bytes};
    double t0, us;
    long wrong = 0;
    int rc;

    if ((rc = push_plan(b, &p)) != 0)
        return rc;
    fill_shards(b, &p, 0);
    for (int i = 0; i < b->warmup && rc == 0; i++)
        rc = push_once(b, &p, 0, &wrong);
    if (rc == 0 && (rc = ofccl_barrier(b->comm)) != 0)
        fail(b, "barrier", rc);
    t0 = perf_now_us();
    for (int i = 0; i < b->iters && rc == 0; i++)
        rc = push_once(b, &p, 0, &wrong);
    us = (perf_now_us() - t0) / b->iters;
    for (int it = 1; b->check && it <= b->iters && rc == 0; it++) {
        fill_shards(b, &p, it);
        rc = push_once(b, &p, it, &wrong);
    }
    ofccl_push_plan_destroy(p.plan);
    if (rc)
        return rc;
    return report(b, out, "push", p.bytes, (size_t)p.nb, "u8", us, wrong, total_wrong);
}
