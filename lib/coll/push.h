/*
 * Private to lib/coll: a weight push plan (push_plan.c) and the bucket
 * collective that moves it (push.c).
 */
#ifndef OFCCL_COLL_PUSH_H
#define OFCCL_COLL_PUSH_H

#include "coll.h"

struct ofccl_push_plan {
    ofccl_comm_t *comm;
    int nsenders, nreceivers, ntensors, nbuckets;
    int *senders, *receivers; /* ranks of comm */
    int me_send, me_recv;     /* this rank's index in those lists, or -1 */
    size_t *counts, *esize;   /* [ntensors] */
    int *first;               /* [nbuckets + 1]: bucket k is tensors [first[k], first[k+1]) */
    /* [nreceivers * ntensors]: each receiver's slice (elements) and where it
     * lies in that receiver's bucket buffer (bytes) */
    size_t *slice_off, *slice_cnt, *where;
    size_t *bucket_bytes_mine; /* [nbuckets]: this receiver's bucket sizes */
    size_t max_recv_bytes;     /* the largest bucket of any receiver */
    uint64_t tag;              /* in every bucket's fingerprint: ranks must agree on the plan */
    void *buf[2];              /* this receiver's double buffer, allocated on first use */
    bool gpu;                  /* a GPU plan (gpu/gpush.c): buf[] in the GPU pool, every rank */
    bool gpu_engine; /* a GPU plan the host engine runs (no peer class): buf[] registered */
    /* per request slot: its bucket, the sender's shards, its unit numbering
     * (receiving: where each sender's units start; sending: where ours start at
     * each receiver), and where the shards were staged (strict providers) */
    int bucket[OFCCL__SLOTS];
    void *const *shards[OFCCL__SLOTS];
    uint32_t *base;  /* [SLOTS][nsenders + 1] */
    uint32_t *sbase; /* [SLOTS][nreceivers] */
    size_t *soff;    /* [SLOTS][ntensors] */
    size_t *used;    /* [SLOTS][ntensors]: elements of each tensor the post moves (SIZE_MAX: all) */
};

/* The index of `rank` in list[0..n), or -1. */
int ofccl__push_index(const int *list, int n, int rank);
/* Sender s's shard of tensor t: its first element in *first; its elements. */
size_t ofccl__push_shard(const ofccl_push_plan_t *pl, int t, int s, size_t *first);
/* What sender s writes to receiver j of tensor t: offset in its shard, in the
 * receiver's bucket buffer, and length (0: nothing). */
void ofccl__push_piece(const ofccl_push_plan_t *pl, int t, int s, int j, size_t *src_off,
                       size_t *dst_off, size_t *len);
/* Of this sender's piece of tensor t at `src_off` in its shard, `len` bytes:
 * the bytes the post in `slot` moves (a prefix; ofccl_push_bucket_used). */
size_t ofccl__push_used(const ofccl_push_plan_t *pl, int slot, int t, size_t src_off, size_t len);
/* Non-empty pieces sender s has for receiver j in bucket k. */
unsigned ofccl__push_pieces(const ofccl_push_plan_t *pl, int k, int s, int j);
void ofccl__push_plan_free(ofccl_push_plan_t *pl);

extern const ofccl__algo_t ofccl__push_algo;

/* GPU plans (gpu/gpush.c). Setup (collective, at plan creation): the
 * communicator's GPU state, and the two receive buffers of max_recv_bytes
 * in the GPU pool on every rank; where the peer class does not serve but
 * the transport takes GPU memory (comm->dev_reg) the buffers are registered
 * with it and the host engine runs the plan's buckets (pl->gpu_engine). */
int ofccl__gpu_push_setup(ofccl_push_plan_t *pl);
void ofccl__gpu_push_free(ofccl_push_plan_t *pl);
/* A bucket of the plan still runs on the GPU. */
bool ofccl__gpu_push_busy(const ofccl_push_plan_t *pl);
/* Post bucket k of a GPU plan on the communicator's stream. */
int ofccl__gpu_push_bucket(ofccl_push_plan_t *pl, int k, void *const *shards, const size_t *used,
                           void *buf, ofccl__req_t **out);
/* What the post in `slot` moves of each tensor of bucket k (push_post.c). */
void ofccl__push_set_used(ofccl_push_plan_t *pl, int slot, int k, const size_t *used);

#endif
