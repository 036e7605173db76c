/*
 * Buckets of GPU tensors (test_gpu's "bucket" and "bucket-ce" scenarios):
 * a bucketed all-gather of tensors of uneven sizes (empty, smaller than the
 * ranks, not a multiple of them, megabytes), f32 and bf16, some in place
 * (the shard inside the full tensor) and some not; and a bucketed broadcast
 * of the same tensors from every root; then the same on a communicator of
 * one rank (the host engine's copies on the stream). Every full tensor is
 * checked byte for byte against the reference each rank computes itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gtest.h"

#define NT 6

static const size_t counts[NT] = {0, 1, 3, 4099, 1 << 18, 77};

/* Reference byte i of tensor t (the same on every rank). */
static uint8_t ref(int t, size_t i, unsigned salt)
{
    return byte_of(t + 11, i, salt);
}

static int check(int rank, const char *what, int t, const void *full, size_t len, unsigned salt)
{
    uint8_t *h = malloc(len + 1);
    int bad = 0;

    get(h, full, len);
    for (size_t i = 0; i < len && !bad; i++)
        if (h[i] != ref(t, i, salt)) {
            printf("rank %d: %s: tensor %d (%zu B): byte %zu is %u, %u expected\n", rank, what, t,
                   len, i, h[i], ref(t, i, salt));
            bad = 1;
        }
    free(h);
    return bad;
}

static void fill(void *d, size_t off, size_t len, int t, unsigned salt, int garbage)
{
    uint8_t *h = malloc(len + 1);

    for (size_t i = 0; i < len; i++)
        h[i] = garbage ? 0xee : ref(t, off + i, salt);
    put(d, h, len);
    free(h);
}

static int wait_req(int rank, ofccl_comm_t *comm, const char *what, int rc, ofccl_req_t *req)
{
    if (rc == 0)
        rc = ofccl_wait(req);
    if (rc == 0)
        ofccl_req_free(req);
    else
        printf("rank %d: %s: %s: %s\n", rank, what, ofccl_strerror(rc),
               ofccl_comm_last_error(comm));
    return rc;
}

static int gather(int rank, int n, ofccl_comm_t *comm, ofccl_dtype_t dt, unsigned salt)
{
    size_t es = ofccl_dtype_size(dt);
    ofccl_tensor_t t[NT];
    void *own[NT] = {0};
    ofccl_req_t *req = NULL;
    int bad, rc;

    for (int k = 0; k < NT; k++) {
        size_t c = (counts[k] + (size_t)n - 1) / (size_t)n, s0 = (size_t)rank * c;
        size_t len = s0 >= counts[k] ? 0 : counts[k] - s0 < c ? counts[k] - s0 : c;
        t[k].count = counts[k];
        t[k].full = dmalloc(counts[k] * es);
        fill(t[k].full, 0, counts[k] * es, k, salt, 1);
        if (k % 2) { /* in place */
            t[k].shard = (char *)t[k].full + s0 * es;
        } else {
            t[k].shard = own[k] = dmalloc(len * es);
        }
        fill(t[k].shard, s0 * es, len * es, k, salt, 0);
    }
    rc = ofccl_bucket_allgather(comm, t, NT, dt, &req); /* before req is read */
    bad = wait_req(rank, comm, "bucketed all-gather", rc, req) != 0;
    for (int k = 0; k < NT; k++) {
        bad |= !bad && check(rank, "bucketed all-gather", k, t[k].full, counts[k] * es, salt);
        ofccl__gpu_mem_free(gpu, dev, t[k].full);
        if (own[k] != NULL)
            ofccl__gpu_mem_free(gpu, dev, own[k]);
    }
    return bad;
}

static int bcast(int rank, int n, ofccl_comm_t *comm, unsigned salt)
{
    ofccl_tensor_t t[NT];
    int bad = 0;

    for (int root = 0; root < n && !bad; root++) {
        ofccl_req_t *req = NULL;
        for (int k = 0; k < NT; k++) {
            t[k] = (ofccl_tensor_t){counts[k], dmalloc(counts[k] * 2), NULL};
            fill(t[k].full, 0, counts[k] * 2, k, salt + (unsigned)root, rank != root);
        }
        int rc = ofccl_bucket_broadcast(comm, t, NT, OFCCL_BF16, root, &req);
        bad = wait_req(rank, comm, "bucketed broadcast", rc, req) != 0;
        for (int k = 0; k < NT; k++) {
            bad |= !bad && check(rank, "bucketed broadcast", k, t[k].full, counts[k] * 2,
                                 salt + (unsigned)root);
            ofccl__gpu_mem_free(gpu, dev, t[k].full);
        }
    }
    return bad;
}

int gpu_bucket(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    int n, bad = 0;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    ofccl_comm_set_timeout(comm, 20000);
    ofccl_comm_size(comm, &n);
    for (unsigned rep = 0; rep < 2 && !bad; rep++) {
        bad |= gather(rank, n, comm, OFCCL_F32, 3 + rep);
        bad |= !bad && gather(rank, n, comm, OFCCL_BF16, 5 + rep);
        bad |= !bad && bcast(rank, n, comm, 9 + rep);
    }
    /* A communicator of this rank alone: no peer class, the host engine's
     * one-rank copies on the communicator's stream, done at post. */
    if (!bad) {
        ofccl_comm_t *one;
        ofccl__err_t e;
        if (ofccl_comm_split(comm, rank, 0, &one) != 0)
            return 81;
        bad |= gather(0, 1, one, OFCCL_F32, 21);
        bad |= !bad && gather(0, 1, one, OFCCL_BF16, 22);
        bad |= !bad && bcast(0, 1, one, 23);
        bad |= ofccl__gpu_stream_sync(gpu, dev, NULL, &e) != 0;
        if (ofccl_comm_destroy(one) != 0)
            return 82;
    }
    if (!bad)
        printf("rank %d: bucketed all-gather (f32, bf16) and broadcast from every root, and on a "
               "communicator of one rank: every byte right\n",
               rank);
    return bad ? 80 : 0;
}
