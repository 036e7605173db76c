/*
 * Private to lib/coll: the algorithms, their shared plans, the one chooser,
 * and the steps the public entry points share (checking arguments, resolving
 * memory, packing buckets).
 */
#ifndef OFCCL_COLL_COLL_H
#define OFCCL_COLL_COLL_H

#include "engine.h"
#include "exec.h"

/* Identities of the algorithms in fingerprints: ranks must agree on them. */
enum ofccl__algo_wire_id {
    OFCCL__WIRE_DIRECT = 1,
    OFCCL__WIRE_RING = 2,
    OFCCL__WIRE_EAGER = 3,
    OFCCL__WIRE_PULL = 4,
    OFCCL__WIRE_CHAIN = 5,
    OFCCL__WIRE_PUSH = 6,
    OFCCL__WIRE_HIER = 7,
    OFCCL__WIRE_TAKE = 8,
    OFCCL__WIRE_GPU = 9,
};

extern const ofccl__algo_t ofccl__ag_direct, ofccl__ag_ring, ofccl__ag_eager;
/* Direct where the provider maps peers' memory and OFCCL_AG_TAKE is on
 * (allgather/take.c): a rank done with its own writes copies the blocks that
 * have not reached it from their writers' buffers itself. */
extern const ofccl__algo_t ofccl__ag_take;
/* All-gather between hosts along rails, then within each host
 * (allgather/hier.c); only for communicators it fits: several hosts with the
 * same number of ranks, more than one (the node table of lib/core). */
extern const ofccl__algo_t ofccl__ag_hier;
bool ofccl__ag_hier_fits(const ofccl_comm_t *comm);
extern const ofccl__algo_t ofccl__rs_direct, ofccl__rs_ring, ofccl__rs_eager;
/* Reduce-scatter within each host, then between hosts along rails
 * (reduce_scatter/hier.c); the same shape as the hierarchical all-gather. */
extern const ofccl__algo_t ofccl__rs_hier;
bool ofccl__rs_hier_fits(const ofccl_comm_t *comm);
/* Reduce-scatter where the provider maps peers' memory (caps.peer_map): each
 * rank announces its source (r->dst is it) and, where peers can write it, its
 * output; blocks are reduced from the peers' buffers in place, in grains any
 * rank may take; then each rank stores that it is through (pull.c), the only
 * unit expected from each peer. */
extern const ofccl__algo_t ofccl__rs_pull;
/* The pull algorithms' end (pull.c): say this rank is through with the
 * peers' buffers (seq + 1 in its through word), and (pull_through) count the
 * peers through as one arrival each. */
void ofccl__through_say(ofccl__req_t *r);
void ofccl__pull_through(ofccl__req_t *r);
/* Broadcast (broadcast/): eager for small ones, pull where peers' memory maps,
 * direct, and the pipelined chain for large ones on many ranks. */
extern const ofccl__algo_t ofccl__bc_eager, ofccl__bc_direct, ofccl__bc_chain, ofccl__bc_pull;
/* Broadcast across hosts (broadcast/hier.c): slices along rails from the
 * root's host, then within each host; only where ofccl__ag_hier_fits. */
extern const ofccl__algo_t ofccl__bc_hier;
/* The GPU peer class's stream programs (gpu/gcoll.c, grs.c, gpush.c): no
 * descriptors or units; start enqueues the whole collective on the caller's
 * stream, progress polls its end and the peers' published arguments, unwind
 * releases this rank's stream (OFCCL__ALGO_STREAM). */
extern const ofccl__algo_t ofccl__gpu_ag, ofccl__gpu_bc, ofccl__gpu_rs, ofccl__gpu_push;

/* Where the GPU peer class put a collective's buffer: a pool or registration
 * segment its peers map and the offset in it, or the scratch, and then
 * `stage`, the caller's buffer, copied to at the end. */
struct ofccl__gseg;
typedef struct ofccl__gwhere {
    struct ofccl__gseg *seg;
    size_t off;
    void *stage;
} ofccl__gwhere_t;
/* Before a collective's slot is claimed (gpu/gapi.c), for buffers of which
 * one is GPU memory (`kinds`: sendbuf's and recvbuf's, ofccl__mem_kind_of):
 * the arguments' checks for it, the communicator's GPU state set up
 * (collective: the first GPU call), and whether the GPU peer class serves
 * the collective: 1 with its buffer placed in *where (the pool may grow:
 * collective), 0 where the host engine takes it (device memory through the
 * transport or staged), or an error. */
int ofccl__gpu_admit(ofccl_comm_t *comm, const char *what, int coll, const void *sendbuf,
                     void *recvbuf, const int kinds[2], size_t block, ofccl__gwhere_t *where);
/* The same for a checked bucket on GPU `kind` whose flat buffer's regions
 * are `block` bytes (ofccl__bucket_check). */
int ofccl__gpu_admit_bucket(ofccl_comm_t *comm, const char *what, int coll, ofccl__mem_kind_t kind,
                            size_t block, ofccl__gwhere_t *where);
/* A request the peer class serves, its slot claimed and its algorithm
 * chosen: its GPU state, for the buffer `where` (a bucket's flat buffer). */
void ofccl__gpu_place(ofccl__req_t *r, const ofccl__gwhere_t *where);
/* 0, or OFCCL_ERR_NOT_SUPPORTED where one of n pointers (NULLs skipped) is GPU
 * memory: the bucketed reduce-scatter and the weight push take host memory
 * only (gpu/gapi.c). `what` names the call, `role` the pointers ("tensor", "shard"). */
int ofccl__gpu_refuse(ofccl_comm_t *comm, const char *what, const char *role,
                      const void *const *ptrs, int n, size_t stride);

/* Where a request's memory is, for the chooser: the algorithm runs on
 * device memory (a transport that takes it: direct only), and the caller's
 * buffers are device memory (staged: nothing reads or writes them in place
 * but the io copies, so no eager path and no in-place variant). */
enum ofccl__mem_flag { OFCCL__MEM_ALGO_DEVICE = 1u << 0, OFCCL__MEM_CALLER_DEVICE = 1u << 1 };
static inline unsigned ofccl__mem_flags(const ofccl__req_t *r)
{
    return (ofccl__exec_on_host(r) ? 0 : OFCCL__MEM_ALGO_DEVICE) |
           (ofccl__exec_io_on_host(r) ? 0 : OFCCL__MEM_CALLER_DEVICE);
}

/* The one place an algorithm is chosen (select.c): OFCCL_ALGO_* first, then
 * size and rank count, then what the memory and provider allow (eager slots
 * for small all-pairs collectives, pull where peers' memory maps).
 * `mem`: enum ofccl__mem_flag. */
const ofccl__algo_t *ofccl__choose(ofccl_comm_t *comm, int coll, size_t block, int bucket,
                                   unsigned mem);

/* Plans shared by the twins (plan.c), and their unit numbering: direct:
 * writer w's chunk c is unit w * nchunks + c; ring: the left neighbour's j-th
 * write is unit j; one unit per writer: unit = writer. */
int ofccl__plan_direct(ofccl__req_t *r);
int ofccl__plan_ring(ofccl__req_t *r);
int ofccl__direct_writer_of(const ofccl__req_t *r, uint32_t unit);
uint32_t ofccl__direct_unit_of(const ofccl__req_t *r, int p, uint32_t k);
void ofccl__direct_landed(const ofccl__req_t *r, uint32_t unit, size_t *off, size_t *len);
int ofccl__ring_writer_of(const ofccl__req_t *r, uint32_t unit);
uint32_t ofccl__ring_unit_of(const ofccl__req_t *r, int p, uint32_t k);
int ofccl__one_writer_of(const ofccl__req_t *r, uint32_t unit);
uint32_t ofccl__one_unit_of(const ofccl__req_t *r, int p, uint32_t k);
/* Broadcast (broadcast/plan.c): the root and every other rank exchange
 * descriptors both ways; the data comes from `data_from` (the root, or a
 * chain's predecessor). Unit numbering, and the closing "done" to the root
 * (1 once posted, 0 to try again, <0 on error). */
void ofccl__plan_bcast(ofccl__req_t *r, int data_from);
int ofccl__bcast_writer_of(const ofccl__req_t *r, uint32_t unit);
uint64_t ofccl__bcast_need_of(const ofccl__req_t *r, int p);
uint32_t ofccl__bcast_unit_of(const ofccl__req_t *r, int p, uint32_t k);
void ofccl__bcast_landed(const ofccl__req_t *r, uint32_t unit, size_t *off, size_t *len);
int ofccl__bcast_done(ofccl__req_t *r);
/* All-gather sending its block from sendbuf (OFCCL__BUF_OWN_BEHIND: direct
 * and hier), the private state of its request: where the block goes in the
 * output (NULL: it is there already) and the chunks copied so far. */
typedef struct ofccl__own_copy {
    char *dst;
    unsigned done;
} ofccl__own_copy_t;
/* The algorithm's `start`: whether the block is to be copied. */
int ofccl__ag_own_start(ofccl__req_t *r);
/* Copy our block to its place behind the slowest peer's stream, each chunk
 * once every peer we write to has taken it (the block is the first nchunks
 * writes to each), while it is still in cache. True once all of it is there
 * (or there is nothing to copy). */
bool ofccl__ag_copy_own(ofccl__req_t *r);
/* All-gather, direct and take: post this rank's chunks not yet sent to peer p
 * (its block goes to p's buffer at rank * block), until flow control holds
 * them back. 0, or an error. */
int ofccl__ag_put_own(ofccl__req_t *r, int p);
/* Direct: has chunk c arrived from every writer? */
bool ofccl__direct_chunk_in(const ofccl__req_t *r, unsigned c);

/* Eager algorithms (eager.c): send {header, `len` bytes of payload} to every
 * peer the plan writes to (peer p's payload at sendbuf + p * stride); 1 when
 * all are posted, 0 when some must wait, <0 on error. Then, once all have
 * arrived, check every writer's header. */
int ofccl__eager_send(ofccl__req_t *r, size_t stride, size_t len);
int ofccl__eager_land(ofccl__req_t *r);

/* Posting (post.c, allgather.c, reduce_scatter.c): argument checks shared by
 * the calls, and the memory each collective moves. */
int ofccl__check_args(ofccl_comm_t *comm, const char *what, const void *sendbuf, void *recvbuf,
                      size_t count, ofccl_dtype_t dtype, ofccl_req_t **req, size_t *block);
int ofccl__check_room(ofccl_comm_t *comm, const char *what, const char *name, const void *buf,
                      size_t need);
int ofccl__check_redop(ofccl_comm_t *comm, const char *what, ofccl_dtype_t dtype, ofccl_redop_t op);
bool ofccl__overlaps(const void *a, size_t alen, const void *b, size_t blen);
const char *ofccl__dtype_name(ofccl_dtype_t dtype);
/* Where the algorithm runs for device memory at `buf` (len bytes, the
 * buffer the peers write into): on the GPU memory where it is registered
 * with the transport already, where every write lands before its signal
 * (comm->dev_landed: an unregistered buffer then lands in a staging set on
 * the GPU, ofccl__stage_kind), or where every rank's transport takes this
 * GPU's memory (comm->dev_reg: registered then for the request alone);
 * otherwise, and for buckets, staged in host memory. 0, or an error (a
 * registration that failed). Host memory: nothing to do. */
int ofccl__resolve_device(ofccl__req_t *r, void *buf, size_t len);
/* The memory kind of a request's staging: host memory, or the GPU's where
 * the algorithm runs on GPU memory (an output the transport has not
 * registered lands in a staging set on the GPU, copied out on it). */
static inline ofccl__mem_kind_t ofccl__stage_kind(const ofccl__req_t *r)
{
    return ofccl__exec_on_host(r) ? OFCCL__MEM_HOST : r->exec->kind;
}
/* A staged result out to the caller's buffer (r->copy_out), from the same
 * offset of r->dst: `len` bytes at `off`, by the io executor. */
void ofccl__staged_out(ofccl__req_t *r, size_t off, size_t len);
/* The request's out_step where the algorithm says where units land: each
 * writer's units copied out as they arrive, in that writer's order, so that
 * the copies overlap the transfers still under way. */
void ofccl__staged_landed(ofccl__req_t *r);

/* ---- posting on the host engine (host_post.c) ---- */
/* Claim the next slot and fill in a collective's arguments (a broadcast's
 * buffer is recvbuf; root -1 for the others). */
int ofccl__coll_claim(ofccl_comm_t *comm, int coll, const void *sendbuf, void *recvbuf,
                      size_t count, ofccl_dtype_t dtype, ofccl_redop_t op, int root, size_t block,
                      ofccl__req_t **out);
/* A claimed request on the host engine: its executors chosen by its
 * buffers' kinds (`kinds`: sendbuf's and recvbuf's, ofccl__mem_kind_of),
 * then done at once on one rank, or the collective's own posting. 0, or an
 * error (the caller gives the slot back). */
int ofccl__post_host(ofccl__req_t *r, const int kinds[2]);
/* A request whose executors are chosen (a bucket's by ofccl__bucket_setup):
 * done at once on one rank, else the collective's own posting. */
int ofccl__post_engine(ofccl__req_t *r);
/* A request that failed at post: its slot back, and its own registration;
 * returns rc. */
int ofccl__post_failed(ofccl__req_t *r, int rc);
/* Every rank's `mine` (with `about`, a rank it concerns), collectively: the
 * first nonzero one in rank order in *first (0: none), its rank in *who and
 * its `about` in *whose. 0, or the exchange's error. */
int ofccl__agree(ofccl_comm_t *comm, int mine, int about, int *first, int *who, int *whose);
int ofccl__post_allgather(ofccl__req_t *r);

/* ---- the posting step (post.c) ---- */
/* Post a collective of checked arguments (`what` names the call; a
 * broadcast's buffer is recvbuf): to the GPU peer class where it serves the
 * buffers, else the host engine. The slot is released on failure. */
int ofccl__post(ofccl_comm_t *comm, const char *what, int coll, const void *sendbuf, void *recvbuf,
                size_t count, ofccl_dtype_t dtype, ofccl_redop_t op, int root, size_t block,
                ofccl_req_t **req);
/* A request the GPU peer class serves (ofccl__gpu_admit said so, `where`):
 * its stream program, its GPU state placed, and started. */
int ofccl__post_peer_class(ofccl__req_t *r, const ofccl__gwhere_t *where);
/* ofccl__comm_note_once bits. */
enum {
    OFCCL__NOTE_PULL_STAGED = 0,
    OFCCL__NOTE_COST = 1,
    OFCCL__NOTE_HIER_UNFIT = 2,
    OFCCL__NOTE_DEVICE_DIRECT = 3,
};
int ofccl__post_reduce_scatter(ofccl__req_t *r);
int ofccl__post_broadcast(ofccl__req_t *r);
/* An all-gather of `bytes` per rank, waited for (creating objects over a
 * communicator's fabric); the communicator's last error says why it failed. */
int ofccl__allgather_blocking(ofccl_comm_t *comm, const void *in, void *out, size_t bytes);

/* Buckets (bucket.c). Check a bucket's arguments (the communicator's
 * message names what is wrong), and give the bytes of its flat buffer's
 * region and where its memory lives: host memory, or the one GPU of every
 * pointer this rank uses. */
int ofccl__bucket_check(ofccl_comm_t *comm, const char *what, int coll,
                        const ofccl_tensor_t *tensors, int ntensors, ofccl_dtype_t dtype,
                        size_t *block, ofccl__mem_kind_t *kind);
/* The checked bucket into the request (a copy of the list), run by the host
 * engine through staging; the results are scattered back by r->finish. */
int ofccl__bucket_setup(ofccl__req_t *r, const char *what, const ofccl_tensor_t *tensors,
                        int ntensors, ofccl_dtype_t dtype, size_t block, ofccl__mem_kind_t kind);
/* Extra staging bytes a bucket reduce-scatter needs (flat input + flat output). */
size_t ofccl__bucket_extra(const ofccl__req_t *r);
/* One rank: each shard is its whole tensor, so the collective is a copy (or
 * a one-source reduction) done at post; the request completes at once. */
int ofccl__bucket_one_rank(ofccl__req_t *r);
/* How a bucket's bytes move between the tensors and the flat buffer (the
 * host engine's executors, or the GPU peer class's stream): a copy, and
 * zeros for the padding (NULL: the padding is left as it is). 0 or an error. */
typedef struct ofccl__bucket_io {
    int (*copy)(ofccl__req_t *r, void *dst, const void *src, size_t len, void *arg);
    int (*zero)(ofccl__req_t *r, void *dst, size_t len, void *arg);
    void *arg;
} ofccl__bucket_io_t;
/* The one packing of every bucket: the tensors into the flat buffer `flat`
 * (all-gather: this rank's shards into its region; reduce-scatter: every
 * rank's piece of each tensor into that rank's region; broadcast, at the
 * root: the whole tensors), and back out (all-gather: every region into the
 * full tensors; reduce-scatter: `mine`, this rank's reduced region, into
 * its shards; broadcast: the whole tensors, not at the root). */
int ofccl__bucket_pack(ofccl__req_t *r, char *flat, const ofccl__bucket_io_t *io);
int ofccl__bucket_unpack(ofccl__req_t *r, const char *flat, const char *mine,
                         const ofccl__bucket_io_t *io);
/* The host engine's packing into staging (`flat`), by the request's executors. */
void ofccl__bucket_copy_in(ofccl__req_t *r, void *flat);
/* Tensor `count`'s slot in every rank's region (elements), and the length of
 * rank q's shard (it starts at q times the slot). */
size_t ofccl__bucket_chunk(size_t count, int n);
size_t ofccl__bucket_shard(size_t count, int n, int q);
/* Claim a slot for a bucket of `ntensors` and post it (all-gather,
 * reduce-scatter, broadcast from `root`): on the GPU peer class where it
 * serves the tensors, else the host engine through staging. */
int ofccl__post_bucket(ofccl_comm_t *comm, const char *what, int coll,
                       const ofccl_tensor_t *tensors, int ntensors, ofccl_dtype_t dtype, int root,
                       ofccl_redop_t op, ofccl_req_t **req);

/* Windows (window.c): a region registered on every rank of a communicator,
 * its keys exchanged once by an all-gather over the communicator (collective;
 * a rank whose registration fails makes the call fail on every rank). The
 * communicator cannot be destroyed while a window is open. */
typedef struct ofccl__win {
    ofccl_comm_t *comm;
    void *addr;
    size_t len;
    ofccl__mr_t *mr;
    ofccl__rkey_t *peers; /* [size] */
} ofccl__win_t;
int ofccl__win_create(ofccl_comm_t *comm, void *addr, size_t len, unsigned access,
                      ofccl__win_t **out);
int ofccl__win_destroy(ofccl__win_t *win);

#endif
