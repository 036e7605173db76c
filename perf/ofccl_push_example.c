/*
 * ofccl_push_example: push weights from a trainer job to a rollout job.
 *
 * Two jobs launched separately meet through the TCP rendezvous and form one
 * communicator: the trainer ranks (senders) each hold a shard of three
 * tensors; every rollout rank (receiver) gets the full tensors, bucket by
 * bucket, double-buffered, and checks every byte.
 *
 *   export OFCCL_BOOT_ROOT=127.0.0.1:29500 OFCCL_BOOT_GROUPS=trainer:2,rollout:2
 *   OFCCL_BOOT_GROUP=trainer OFCCL_BOOT_RANK=0 ofccl_push_example &
 *   OFCCL_BOOT_GROUP=trainer OFCCL_BOOT_RANK=1 ofccl_push_example &
 *   OFCCL_BOOT_GROUP=rollout OFCCL_BOOT_RANK=0 ofccl_push_example &
 *   OFCCL_BOOT_GROUP=rollout OFCCL_BOOT_RANK=1 ofccl_push_example
 *
 * Groups take ranks in the order OFCCL_BOOT_GROUPS lists them: the trainer
 * ranks are 0 and 1 of the communicator, the rollout ranks 2 and 3. Exits 0
 * when every byte arrived, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofccl.h"

#define NT 3
static const size_t counts[NT] = {300000, 1000, 700000}; /* elements */
static const ofccl_dtype_t dtypes[NT] = {OFCCL_F32, OFCCL_U8, OFCCL_BF16};

/* Byte i of tensor t (what the trainer holds, what rollout must receive). */
static uint8_t weight_byte(int t, size_t i)
{
    return (uint8_t)(i * 7 + (i >> 8) + (size_t)t * 101);
}

static int check(ofccl_comm_t *comm, const char *what, int rc)
{
    if (rc != 0)
        fprintf(stderr, "%s: %s: %s\n", what, ofccl_strerror(rc), ofccl_comm_last_error(comm));
    return rc;
}

int main(void)
{
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_push_plan_t *plan;
    ofccl_req_t *req[2] = {NULL, NULL};
    void *shards[NT] = {NULL};
    int rank, size, nbuckets, rc, wrong = 0;
    int senders[] = {0, 1}, receivers[62];
    const int nsenders = 2;

    if (ofccl_ctx_create(NULL, &ctx) != 0 || ofccl_comm_world(ctx, &comm) != 0) {
        fprintf(stderr, "setup failed (launch as the comment at the top of the file shows)\n");
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    if (size < 3 || size > 64)
        return 1;
    for (int r = nsenders; r < size; r++)
        receivers[r - nsenders] = r;

    /* One plan for every push: who sends, who receives, the tensors, 1 MiB buckets. */
    ofccl_push_spec_t spec = {.size = sizeof(spec),
                              .nsenders = nsenders,
                              .senders = senders,
                              .nreceivers = size - nsenders,
                              .receivers = receivers,
                              .ntensors = NT,
                              .counts = counts,
                              .dtypes = dtypes,
                              .bucket_bytes = 1 << 20};
    if (check(comm, "ofccl_push_plan_create", ofccl_push_plan_create(comm, &spec, &plan)))
        return 1;
    ofccl_push_plan_info(plan, &nbuckets, NULL);

    /* A trainer rank holds elements [s*c, min((s+1)*c, count)) of each tensor. */
    for (int t = 0; t < NT && rank < nsenders; t++) {
        size_t es = ofccl_dtype_size(dtypes[t]), c = (counts[t] + nsenders - 1) / nsenders;
        size_t first = (size_t)rank * c, n = first + c < counts[t] ? c : counts[t] - first;
        shards[t] = malloc(n * es);
        for (size_t i = 0; i < n * es; i++)
            ((uint8_t *)shards[t])[i] = weight_byte(t, first * es + i);
    }

    /* Post bucket k while k-1 is in flight; read bucket k-2 before its buffer is reused. */
    for (int k = 0; k < nbuckets + 2; k++) {
        if (k >= 2) {
            void *buf;
            rc = ofccl_wait(req[k % 2]);
            ofccl_req_free(req[k % 2]);
            if (check(comm, "push bucket", rc))
                return 1;
            if (rank >= nsenders)
                ofccl_push_buffer(plan, k - 2, &buf);
            for (int t = 0; t < NT && rank >= nsenders; t++) {
                int b;
                size_t off, bytes;
                ofccl_push_tensor_where(plan, t, &b, &off, &bytes);
                for (size_t i = 0; b == k - 2 && i < bytes; i++)
                    wrong += ((uint8_t *)buf)[off + i] != weight_byte(t, i);
            }
        }
        if (k < nbuckets && check(comm, "ofccl_push_bucket",
                                  ofccl_push_bucket(plan, k, rank < nsenders ? shards : NULL, NULL,
                                                    0, &req[k % 2])))
            return 1;
    }
    if (rank >= nsenders)
        printf("rollout rank %d: %d buckets, %d wrong bytes\n", rank - nsenders, nbuckets, wrong);
    for (int t = 0; t < NT; t++)
        free(shards[t]);
    ofccl_push_plan_destroy(plan);
    ofccl_comm_destroy(comm);
    ofccl_ctx_destroy(ctx);
    return wrong ? 1 : 0;
}
