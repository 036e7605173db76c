/*
 * Memory for collectives: staging sets (N-deep per collective kind, grown only
 * while unused, i.e. at a bucket boundary, within OFCCL_POOL_BYTES), user pool
 * buffers (ofccl_buffer_alloc), and the context's registration cache
 * (ofccl_mem_register) with lazily created per-communicator registrations.
 */
#ifndef OFCCL_CORE_POOL_H
#define OFCCL_CORE_POOL_H

#include "engine.h"

typedef struct ofccl__stage {
    void *ptr;
    ofccl__mr_t *mr;
    size_t bytes;
    int busy;
    ofccl__mem_kind_t kind; /* where it lives (its registration's kind) */
} ofccl__stage_t;

typedef struct ofccl__ubuf {
    void *ptr;
    size_t bytes;
    ofccl__mr_t *mr;
    ofccl__mem_kind_t kind; /* where it lives (its registration's kind) */
    struct ofccl__ubuf *next;
} ofccl__ubuf_t;

#define OFCCL__STAGE_SETS 16 /* staging sets per collective kind at most */
/* A range a communicator's caller registered (ofccl__pool_register). */
struct ofccl__commreg {
    void *ptr;
    ofccl_mem_t *mh;
    struct ofccl__commreg *next;
};

struct ofccl__pool {
    ofccl__stage_t ag[OFCCL__STAGE_SETS], rs[OFCCL__STAGE_SETS];
    /* on the communicator's GPU: the host engine's collectives on GPU memory
     * whose writes land before their signal (comm->dev_landed) */
    ofccl__stage_t ag_dev[OFCCL__STAGE_SETS], rs_dev[OFCCL__STAGE_SETS];
    int n_ag, n_rs;
    ofccl__ubuf_t *user;
    size_t budget; /* 0 = none */
    size_t held;   /* staging + user pool bytes */
    struct ofccl__commreg *regs;
};

#define OFCCL__MEMREG_COMMS 8
struct ofccl_mem {
    ofccl_ctx_t *ctx;
    char *addr;
    size_t len;
    int refs;
    int owned;              /* allocated by ofccl_mem_alloc: ofccl_mem_free releases the memory */
    ofccl__mem_kind_t kind; /* where the range lives (ofccl__mem_kind_of) */
    struct {
        ofccl_comm_t *comm;
        ofccl__mr_t *mr;
    } per_comm[OFCCL__MEMREG_COMMS];
    struct ofccl_mem *next;
};

int ofccl__pool_init(ofccl_comm_t *comm);
void ofccl__pool_fini(ofccl_comm_t *comm);
/* A staging set of at least `bytes` for `coll` (OFCCL__AG / OFCCL__RS):
 * OFCCL_ERR_AGAIN when all N are busy, OFCCL_ERR_OVER_BUDGET past the budget. */
int ofccl__stage_acquire(ofccl_comm_t *comm, int coll, size_t bytes, int *idx,
                         ofccl__mem_ref_t *ref);
/* The same in memory of `kind`: a device's (an algorithm on GPU memory:
 * comm->dev_landed) comes from the GPU, registered with the transport once. */
int ofccl__stage_acquire_on(ofccl_comm_t *comm, int coll, ofccl__mem_kind_t kind, size_t bytes,
                            int *idx, ofccl__mem_ref_t *ref);
void ofccl__stage_release(ofccl_comm_t *comm, int coll, int idx);
/* Registration covering [ptr, ptr+len) usable on this communicator: a pool
 * buffer, or a range registered with ofccl_mem_register (registered on this
 * communicator's endpoint on first use). NULL when none. */
const ofccl__mr_t *ofccl__mem_find(ofccl_comm_t *comm, const void *ptr, size_t len);
/* Bytes from `ptr` to the end of the pool buffer or registered range holding
 * it (the caller's buffer cannot be larger); SIZE_MAX when ofccl does not know. */
size_t ofccl__mem_known_room(const ofccl_comm_t *comm, const void *ptr);
/* Register [ptr, ptr+len) for request r alone (r->call_mem; through the
 * cache, so a range already registered costs nothing), and on r's
 * communicator's endpoint. 0; OFCCL_ERR_NOT_SUPPORTED, said at info level
 * only, where the transport cannot take that memory (the caller stages it);
 * or an error naming the collective. */
int ofccl__mem_call_register(ofccl__req_t *r, void *ptr, size_t len);
/* Drop r's own registration, if any (r no longer active). */
void ofccl__mem_call_release(ofccl__req_t *r);
/* The caller registers [ptr, ptr+len) for the communicator's collectives
 * (ofccl_gpu_register where the host engine moves GPU memory): a reference
 * in the context's registration cache, held until ofccl__pool_unregister
 * (BUSY while a collective uses it) or the communicator goes. */
int ofccl__pool_register(ofccl_comm_t *comm, void *ptr, size_t len);
int ofccl__pool_unregister(ofccl_comm_t *comm, void *ptr);
/* The communicator is going away: drop its registrations from the cache. */
void ofccl__memreg_forget_comm(ofccl_comm_t *comm);

#endif
