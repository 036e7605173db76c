/*
 * Weight push between a trainer group (senders: the first two ranks) and a
 * rollout group (receivers: the others), either one job or two separately
 * launched jobs that met through the TCP rendezvous (OFCCL_BOOT_GROUP[S]).
 * Seven tensors of several dtypes (one larger than a bucket, one empty) in
 * 256 KiB buckets; receivers take whole tensors into the plan's buffers or
 * their own, or a slice; buckets double-buffered; every byte checked; pushed
 * twice; then prefixes of the tensors and empty buckets
 * (ofccl_push_bucket_used). Also: a plan that differs across ranks (MISMATCH naming the field),
 * and a receive buffer that is too small (INVALID_ARG before any byte moves).
 * Usage: test_push ok | death   (death: rank 1 dies before pushing; every
 * receiver must fail with REMOTE_ERROR naming it, with no bucket reported
 * complete)
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofccl.h"
#include "world.h"

#define NT 7
#define NSEND 2
static const size_t counts[NT] = {1000, 3, 70000, 1, 300000, 0, 5000};
static const ofccl_dtype_t dtypes[NT] = {OFCCL_F32, OFCCL_U8,  OFCCL_BF16, OFCCL_F64,
                                         OFCCL_F32, OFCCL_F16, OFCCL_F64};

static int death;
static int completed; /* buckets this rank saw complete (ofccl_wait returned 0) */
static int senders[NSEND] = {0, 1}, receivers[64];

static uint8_t byte_of(int t, size_t i, int round)
{
    uint64_t h = (uint64_t)(t + 1) * 0x9E3779B97F4A7C15ull ^ i * 0xC2B2AE3Dull ^ (uint64_t)round;
    h ^= h >> 31;
    return (uint8_t)(h * 0xBF58476D1CE4E5B9ull >> 56);
}

/* Rank 4 (if any) takes the second half of each tensor, the others whole ones. */
static bool sliced(void)
{
    return rank == 4;
}

static int make_plan(ofccl_push_plan_t **plan, size_t bucket_bytes)
{
    size_t off[NT], cnt[NT];
    ofccl_push_spec_t sp = {
        .size = sizeof(sp),
        .nsenders = NSEND,
        .senders = senders,
        .nreceivers = size - NSEND,
        .receivers = receivers,
        .ntensors = NT,
        .counts = counts,
        .dtypes = dtypes,
        .bucket_bytes = bucket_bytes,
    };
    for (int t = 0; t < NT; t++) {
        off[t] = counts[t] / 2;
        cnt[t] = counts[t] - counts[t] / 2;
    }
    if (sliced()) {
        sp.slice_offset = off;
        sp.slice_count = cnt;
    }
    return ofccl_push_plan_create(comm, &sp, plan);
}

/* Whether byte i of tensor t moves in a push of `used` elements of it (the
 * rest of a receiver's buffer is unspecified). */
static bool moves(int t, size_t i, const size_t *used)
{
    return used == NULL || i / ofccl_dtype_size(dtypes[t]) < used[t];
}

/* One push: every bucket, double-buffered; receivers check every byte.
 * used (NULL: whole tensors): ofccl_push_bucket_used, receivers check the
 * bytes that move, and a sender's shard is NULL where nothing of it moves. */
static int push_round(ofccl_push_plan_t *plan, int round, int own_buffer, const size_t *used)
{
    int nb = 0, bad = 0, rc = 0, me = rank < NSEND ? rank : -1;
    size_t maxb = 0;
    void *shards[NT] = {0}, *mine = NULL;
    ofccl_req_t *req[2] = {NULL, NULL};

    ofccl_push_plan_info(plan, &nb, &maxb);
    if (me >= 0)
        for (int t = 0; t < NT; t++) { /* this sender's shard of tensor t */
            size_t es = ofccl_dtype_size(dtypes[t]), c = (counts[t] + NSEND - 1) / NSEND;
            size_t s0 = (size_t)me * c < counts[t] ? (size_t)me * c : counts[t];
            size_t n = (s0 + c < counts[t] ? s0 + c : counts[t]) - s0;
            if (used != NULL && used[t] <= s0)
                continue; /* nothing of it moves: no shard */
            shards[t] = malloc(n * es + 1);
            for (size_t i = 0; i < n * es; i++)
                ((uint8_t *)shards[t])[i] = byte_of(t, s0 * es + i, round);
        }
    if (own_buffer && me < 0)
        mine = malloc(2 * maxb);
    for (int k = 0; k < nb + 2 && rc == 0; k++) {
        if (k >= 2) { /* bucket k-2 is in: check it, then its buffer is free again */
            int kk = k - 2;
            void *buf = mine ? (char *)mine + (size_t)(kk % 2) * maxb : NULL;
            rc = ofccl_wait(req[kk % 2]);
            ofccl_req_free(req[kk % 2]);
            req[kk % 2] = NULL;
            completed += rc == 0;
            if (rc) {
                printf("rank %d: bucket %d: %s: %s\n", rank, kk, ofccl_strerror(rc),
                       ofccl_comm_last_error(comm));
                break;
            }
            if (buf == NULL && me < 0)
                ofccl_push_buffer(plan, kk, &buf);
            for (int t = 0; t < NT && me < 0; t++) {
                int b;
                size_t at, bytes, es = ofccl_dtype_size(dtypes[t]);
                size_t first = sliced() ? counts[t] / 2 * es : 0;
                ofccl_push_tensor_where(plan, t, &b, &at, &bytes);
                for (size_t i = 0; b == kk && i < bytes; i++)
                    bad += moves(t, first + i, used) &&
                           ((uint8_t *)buf)[at + i] != byte_of(t, first + i, round);
            }
        }
        if (k < nb) {
            void *buf = mine ? (char *)mine + (size_t)(k % 2) * maxb : NULL;
            rc = used != NULL
                     ? ofccl_push_bucket_used(plan, k, me >= 0 ? shards : NULL, used, buf, maxb,
                                              &req[k % 2])
                     : ofccl_push_bucket(plan, k, me >= 0 ? shards : NULL, buf, maxb, &req[k % 2]);
            if (rc)
                printf("rank %d: posting bucket %d: %s\n", rank, k, ofccl_comm_last_error(comm));
        }
    }
    for (int i = 0; i < 2; i++) /* after an error: the bucket still posted ends too */
        if (req[i] != NULL) {
            ofccl_wait(req[i]);
            ofccl_req_free(req[i]);
        }
    if (bad)
        printf("rank %d: round %d: %d wrong bytes\n", rank, round, bad);
    for (int t = 0; t < NT; t++)
        free(shards[t]);
    free(mine);
    return rc ? rc : bad ? -1000 : 0;
}

static void test_push(void)
{
    ofccl_push_plan_t *plan = NULL;
    int nb = 0;

    CU_ASSERT_EQUAL_FATAL(make_plan(&plan, 256 << 10), 0);
    ofccl_push_plan_info(plan, &nb, NULL);
    CU_ASSERT(nb >= 3); /* the 1.2 MB tensor is a bucket of its own */
    CU_ASSERT_EQUAL(push_round(plan, 1, rank == 3, NULL), 0);
    CU_ASSERT_EQUAL(push_round(plan, 2, 0, NULL), 0);
    CU_ASSERT_EQUAL(ofccl_push_plan_destroy(plan), 0);
}

/* Bytes this rank's writes carried to its peers so far. */
static uint64_t bytes_out(void)
{
    ofccl_stats_t st = {.size = sizeof(st)};

    return ofccl_ctx_stats(ctx, &st) == 0 ? st.local_bytes + st.fabric_bytes : 0;
}

/* What a sender's writes of a push of `used` elements carry, computed from
 * the layout: per receiver, its tensors' elements inside this sender's shard
 * and the prefix. */
static uint64_t bytes_of_push(const size_t *used)
{
    uint64_t total = 0;

    for (int r = NSEND; r < size; r++)
        for (int t = 0; t < NT; t++) {
            size_t c = (counts[t] + NSEND - 1) / NSEND, lo = (size_t)rank * c;
            size_t hi = lo + c < counts[t] ? lo + c : counts[t];
            size_t a = r == 4 ? counts[t] / 2 : 0, b = used[t] < hi ? used[t] : hi;
            lo = lo > a ? lo : a;
            total += b > lo ? (b - lo) * ofccl_dtype_size(dtypes[t]) : 0;
        }
    return total;
}

/* Prefixes: of each tensor a prefix that ends inside the first sender's
 * shard, inside the second's, at its end, or nothing; then empty buckets
 * (every prefix 0); then whole tensors again on the same plan. */
static void test_push_used(void)
{
    ofccl_push_plan_t *plan = NULL;
    size_t used[NT], none[NT] = {0};

    for (int t = 0; t < NT; t++)
        used[t] = t % 4 == 0   ? counts[t] / 3
                  : t % 4 == 1 ? 0
                  : t % 4 == 2 ? counts[t] * 5 / 6
                               : counts[t];
    uint64_t before, slack = 4096; /* completion signals (atomics on some paths) */

    CU_ASSERT_EQUAL_FATAL(make_plan(&plan, 256 << 10), 0);
    before = bytes_out();
    CU_ASSERT_EQUAL(push_round(plan, 3, 1, used), 0);
    if (rank < NSEND) { /* the prefixes moved, not the tensors (about 1.4 MB per sender) */
        uint64_t moved = bytes_out() - before, want = bytes_of_push(used);
        printf("rank %d: prefixes: %llu bytes written, %llu in the prefixes\n", rank,
               (unsigned long long)moved, (unsigned long long)want);
        CU_ASSERT(moved >= want && moved <= want + slack);
    }
    before = bytes_out();
    CU_ASSERT_EQUAL(push_round(plan, 4, 1, none), 0);
    CU_ASSERT(rank >= NSEND || bytes_out() - before <= slack);
    CU_ASSERT_EQUAL(push_round(plan, 5, rank == 3, NULL), 0);
    CU_ASSERT_EQUAL(ofccl_push_plan_destroy(plan), 0);
}

static void test_too_small(void)
{
    ofccl_push_plan_t *plan = NULL;
    ofccl_req_t *req = NULL;
    char small[16];

    CU_ASSERT_EQUAL_FATAL(make_plan(&plan, 256 << 10), 0);
    if (rank >= NSEND) {
        CU_ASSERT_EQUAL(ofccl_push_bucket(plan, 0, NULL, small, sizeof(small), &req),
                        OFCCL_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "receive buffer"));
    }
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0); /* usable: nothing was posted */
    CU_ASSERT_EQUAL(ofccl_push_plan_destroy(plan), 0);
}

/* On a communicator split off for it: rank 0 asks for other buckets. */
static void test_plan_mismatch(void)
{
    ofccl_comm_t *parent = comm, *c = NULL;
    ofccl_push_plan_t *plan = (ofccl_push_plan_t *)&plan;
    int rc;

    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(parent, 0, rank, &c), 0);
    comm = c;
    rc = make_plan(&plan, rank == 0 ? 128 << 10 : 256 << 10);
    printf("rank %d: plan mismatch: %s: %s\n", rank, ofccl_strerror(rc), ofccl_comm_last_error(c));
    CU_ASSERT_EQUAL(rc, OFCCL_ERR_MISMATCH);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(c), "bucket_bytes"));
    /* ... and the two ranks: "rank 0 passed other bucket_bytes than rank 2" */
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(c), "bucket_bytes than rank"));
    comm = parent;
    CU_ASSERT_EQUAL(ofccl_comm_destroy(c), 0);
}

static int run_death(void)
{
    ofccl_push_plan_t *plan = NULL;
    int rc;

    ofccl_comm_set_timeout(comm, 5000);
    if (make_plan(&plan, 256 << 10) != 0)
        return 2;
    if (rank == 1) {
        fflush(NULL);
        raise(SIGKILL);
    }
    completed = 0;
    rc = push_round(plan, 3, 0, NULL);
    printf("rank %d: push with a dead sender: %s: %s; %d buckets completed\n", rank,
           ofccl_strerror(rc), ofccl_comm_last_error(comm), completed);
    /* Every rank fails, and every receiver's message names rank 1. On the
     * local transport and on shm, which see a peer's process exit (a pidfd),
     * that is a REMOTE_ERROR; tcp reports a dead peer only once a write to it
     * fails, so there a rank may learn it at its deadline (TIMEOUT, then a
     * notice to the others). No receiver sees a bucket of this push complete:
     * each bucket holds a piece of rank 1's shard. */
    if (rc != OFCCL_ERR_REMOTE_ERROR &&
        (rc != OFCCL_ERR_TIMEOUT || strcmp(ofccl_ctx_provider(ctx), "local") == 0 ||
         strcmp(ofccl_ctx_provider(ctx), "shm") == 0))
        rc = 3;
    else if (rank >= NSEND && strstr(ofccl_comm_last_error(comm), "rank 1") == NULL)
        rc = 4;
    else if (rank >= NSEND && completed != 0)
        rc = 6;
    else
        rc = 0;
    /* Every bucket posted has ended, so the plan goes, failed communicator or not. */
    if (ofccl_push_plan_destroy(plan) != 0) {
        printf("rank %d: destroying the plan: %s\n", rank, ofccl_comm_last_error(comm));
        rc = rc ? rc : 5;
    }
    return rc;
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"push 7 tensors in buckets, twice, every byte checked", test_push},
        {"prefixes of the tensors, empty buckets, then whole ones, every byte checked",
         test_push_used},
        {"a receive buffer too small is refused before any byte moves", test_too_small},
        {"a plan that differs across ranks is a MISMATCH naming the field", test_plan_mismatch},
        {NULL, NULL},
    };
    int rc;

    death = argc > 1 && strcmp(argv[1], "death") == 0;
    if (world_open(NULL) != 0)
        return 1;
    if (size < NSEND + 1 || size > 64)
        return 1;
    for (int r = NSEND; r < size; r++)
        receivers[r - NSEND] = r;
    rc = death ? run_death() : cu_run("push", tests);
    if (world_close(false) != 0) /* no barrier: in death, rank 1 is gone */
        rc = rc ? rc : 1;
    return rc;
}
