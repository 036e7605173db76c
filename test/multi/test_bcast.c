/*
 * Broadcast, multi-rank (provider and algorithm from OFCCL_PROVIDER and
 * OFCCL_ALGO_BC): from every root, every dtype, sizes from 0 elements to
 * 64 MiB, user / pool / registered memory, flat and bucket (uneven tensors,
 * bytes), checked element by element on every rank; a root out of range is
 * INVALID_ARG; then ranks that disagree on the root, the count or the dtype,
 * on a communicator split off for it, get OFCCL_ERR_MISMATCH naming the field
 * and a rank, and the parent stays usable.
 * Usage: test_bcast [big]   (big: also a 64 MiB broadcast)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofccl.h"
#include "world.h"

static int big;

/* Byte i of root `root`'s buffer for broadcast `salt` (any dtype: bytes). */
static uint8_t byte_of(int root, size_t i, unsigned salt)
{
    uint64_t h = (uint64_t)(root + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xC2B2AE3Dull ^ salt;
    h ^= h >> 29;
    return (uint8_t)(h * 0xBF58476D1CE4E5B9ull >> 56);
}

enum { PLAIN, POOL, REG, KINDS };

static void *get(int kind, size_t bytes, ofccl_mem_t **mh)
{
    void *p = NULL;

    *mh = NULL;
    if (kind == POOL) {
        CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, bytes ? bytes : 1, &p), 0);
        return p;
    }
    p = malloc(bytes ? bytes : 1);
    if (kind == REG)
        CU_ASSERT_EQUAL(ofccl_mem_register(ctx, p, bytes ? bytes : 1, mh), 0);
    return p;
}

static void put(int kind, void *p, ofccl_mem_t *mh)
{
    if (kind == POOL) {
        CU_ASSERT_EQUAL(ofccl_buffer_free(comm, p), 0);
        return;
    }
    if (mh != NULL)
        CU_ASSERT_EQUAL(ofccl_mem_deregister(mh), 0);
    free(p);
}

static int one(size_t count, ofccl_dtype_t dt, int root, int kind, unsigned salt)
{
    size_t bytes = count * ofccl_dtype_size(dt), wrong = 0;
    ofccl_mem_t *mh;
    uint8_t *buf = get(kind, bytes, &mh);
    ofccl_req_t *req = NULL;
    int rc;

    for (size_t i = 0; i < bytes; i++) /* the root's data; poison elsewhere */
        buf[i] = rank == root ? byte_of(root, i, salt) : (uint8_t)(0xA5 ^ i);
    rc = ofccl_broadcast(comm, buf, count, dt, root, &req);
    if (rc == 0)
        rc = ofccl_wait(req);
    if (rc)
        fprintf(stderr, "rank %d: broadcast of %zu (dtype %d) from %d: %s\n", rank, count, dt, root,
                ofccl_comm_last_error(comm));
    if (req != NULL)
        ofccl_req_free(req);
    for (size_t i = 0; rc == 0 && i < bytes; i++)
        wrong += buf[i] != byte_of(root, i, salt);
    if (wrong)
        fprintf(stderr, "rank %d: broadcast of %zu bytes from %d: %zu wrong\n", rank, bytes, root,
                wrong);
    put(kind, buf, mh);
    return rc || wrong;
}

static void test_every_root(void)
{
    static const size_t counts[] = {0, 1, 7, 1000, 65539, (1u << 20) + 5};
    unsigned salt = 1;
    int bad = 0;

    for (int root = 0; root < size; root++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++, salt++) {
            ofccl_dtype_t dt = (ofccl_dtype_t)(salt % OFCCL_DTYPE_COUNT);
            bad += one(counts[c], dt, root, (int)(salt % KINDS), salt);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_big(void)
{
    if (!big)
        return;
    CU_ASSERT_EQUAL(one((64u << 20) / 4, OFCCL_F32, size - 1, POOL, 99), 0);
    CU_ASSERT_EQUAL(one((16u << 20) + 3, OFCCL_U8, 0, PLAIN, 98), 0);
}

/* A bucket of uneven tensors, as bytes and as bf16. */
static void test_bucket(void)
{
    static const size_t counts[] = {3, 0, 4097, 1, 100000};
    enum { NT = sizeof(counts) / sizeof(counts[0]) };
    int bad = 0;

    for (int round = 0; round < 4; round++) {
        ofccl_dtype_t dt = round % 2 ? OFCCL_BF16 : OFCCL_U8;
        size_t es = ofccl_dtype_size(dt);
        int root = round % size;
        ofccl_tensor_t t[NT];
        ofccl_req_t *req = NULL;

        for (int k = 0; k < NT; k++) {
            t[k] = (ofccl_tensor_t){counts[k], counts[k] ? malloc(counts[k] * es) : NULL, NULL};
            for (size_t i = 0; i < counts[k] * es; i++)
                ((uint8_t *)t[k].full)[i] =
                    rank == root ? byte_of(root, i, 500u + (unsigned)k) : (uint8_t)0x5A;
        }
        CU_ASSERT_EQUAL_FATAL(ofccl_bucket_broadcast(comm, t, NT, dt, root, &req), 0);
        CU_ASSERT_EQUAL_FATAL(ofccl_wait(req), 0);
        ofccl_req_free(req);
        for (int k = 0; k < NT; k++) {
            for (size_t i = 0; i < counts[k] * es; i++)
                bad += ((uint8_t *)t[k].full)[i] != byte_of(root, i, 500u + (unsigned)k);
            free(t[k].full);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* A root outside the communicator is refused where it is passed, naming the
 * root and the valid range, before anything is posted: the communicator stays
 * usable. */
static void test_root_out_of_range(void)
{
    static const int roots[] = {-1, 0 /* size */, 1000};
    uint8_t buf[16];

    for (int i = 0; i < 3; i++) {
        ofccl_req_t *req = NULL;
        int root = i == 1 ? size : roots[i];
        ofccl_tensor_t t = {sizeof(buf), buf, NULL};
        CU_ASSERT_EQUAL(ofccl_broadcast(comm, buf, sizeof(buf), OFCCL_U8, root, &req),
                        OFCCL_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NULL(req);
        CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "root"));
        CU_ASSERT_EQUAL(ofccl_bucket_broadcast(comm, &t, 1, OFCCL_U8, root, &req),
                        OFCCL_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "root"));
    }
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
}

enum { BY_ROOT, BY_COUNT, BY_DTYPE };
static const char *const by_name[] = {"root", "count", "dtype"};

/* On a communicator split off for it: rank 0 names another root, count or
 * dtype (f64 for f32, the same element count). */
static void disagree(int by, size_t count)
{
    ofccl_comm_t *c = NULL;
    ofccl_req_t *req = NULL;
    uint8_t *buf = calloc((count + 1) * 8, 1); /* room for the larger count and dtype */
    int root = by == BY_ROOT && rank == 0 ? 1 : 0, rc;
    size_t n = by == BY_COUNT && rank == 0 ? count + 1 : count;
    ofccl_dtype_t dt = by == BY_DTYPE && rank == 0 ? OFCCL_F64 : OFCCL_F32;
    const char *msg;

    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(comm, 0, rank, &c), 0);
    /* Ranks 0 and 1 see the difference at once; a rank beyond them learns it
     * from a failure notice, or else at this deadline. */
    ofccl_comm_set_timeout(c, 8000);
    rc = ofccl_broadcast(c, buf, n, dt, root, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    msg = ofccl_comm_last_error(c);
    printf("rank %d: %s of %zu: %s: %s\n", rank, by_name[by], count, ofccl_strerror(rc), msg);
    /* Ranks 0 and 1 always meet: MISMATCH, and the message names the field and
     * a rank, also where a notice from another rank came first (the notice
     * carries the field). Any rank failing with MISMATCH names a field: this
     * one, or, where the byte counts fall on both sides of OFCCL_EAGER_BYTES,
     * the paths. */
    CU_ASSERT(rc == OFCCL_ERR_MISMATCH || (rank > 1 && rc != 0));
    if (rank <= 1)
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, by_name[by]));
    if (rc == OFCCL_ERR_MISMATCH) {
        CU_ASSERT(strstr(msg, by_name[by]) != NULL || strstr(msg, "OFCCL_EAGER_BYTES") != NULL);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rank "));
    }
    CU_ASSERT_EQUAL(ofccl_comm_destroy(c), 0);
    free(buf);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0); /* the parent is fine */
}

static void test_disagree(void)
{
    disagree(BY_ROOT, 3);      /* eager-sized */
    disagree(BY_ROOT, 100000); /* descriptors */
    disagree(BY_COUNT, 100000);
    disagree(BY_DTYPE, 3);
    disagree(BY_DTYPE, 100000);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"every root, every dtype, 0 elements to 4 MiB, three memory kinds", test_every_root},
        {"64 MiB", test_big},
        {"buckets of uneven tensors, bytes and bf16", test_bucket},
        {"a root out of range is INVALID_ARG naming the root", test_root_out_of_range},
        {"ranks disagreeing on root, count or dtype get MISMATCH", test_disagree},
        {NULL, NULL},
    };
    int rc;

    big = argc > 1 && strcmp(argv[1], "big") == 0;
    if (world_open(NULL) != 0)
        return 1;
    rc = cu_run("bcast", tests);
    if (world_close(false) != 0)
        rc = 1;
    return rc;
}
