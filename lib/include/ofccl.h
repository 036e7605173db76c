/*
 * ofccl — collectives for sharded training over libfabric RMA.
 *
 * The one installed header. Every handle is opaque; every call returns 0 on
 * success or a negative OFCCL_ERR_* code; outputs are written only on success.
 * The last error message of a context or communicator says what failed, where
 * (rank, peer, phase) and what to do about it. A call on a destroyed context,
 * communicator or registration returns OFCCL_ERR_STATE.
 */
#ifndef OFCCL_H
#define OFCCL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OFCCL_API __attribute__((visibility("default")))
#else
#define OFCCL_API
#endif

#define OFCCL_VERSION_MAJOR 0
#define OFCCL_VERSION_MINOR 1
#define OFCCL_VERSION_PATCH 0

/*
 * Error codes: one list, expanded into the enum and into ofccl_strerror().
 * Codes are stable: new ones are appended, none is ever renumbered.
 */
#define OFCCL_ERROR_LIST(X)                                                                        \
    X(SUCCESS, 0, "success")                                                                       \
    X(INVALID_ARG, -1, "invalid argument")                                                         \
    X(NO_MEMORY, -2, "out of memory")                                                              \
    X(NOT_SUPPORTED, -3, "operation or capability not supported")                                  \
    X(PROVIDER, -4, "fabric provider error")                                                       \
    X(BOOTSTRAP, -5, "bootstrap (rank discovery / key exchange) error")                            \
    X(TIMEOUT, -6, "timed out")                                                                    \
    X(AGAIN, -7, "resource temporarily unavailable; call again")                                   \
    X(REMOTE_ERROR, -8, "a peer failed or became unreachable")                                     \
    X(CORRUPT, -9, "corrupt or incompatible data received from a peer")                            \
    X(CONFIG, -10, "invalid configuration")                                                        \
    X(BUSY, -11, "object busy: dependent objects are still open")                                  \
    X(INTERNAL, -12, "internal error")                                                             \
    X(ABORTED, -13, "communicator aborted")                                                        \
    X(MISMATCH, -14, "arguments differ across ranks")                                              \
    X(STATE, -15, "object in the wrong state for this call")                                       \
    X(OVER_BUDGET, -16, "memory budget exceeded")                                                  \
    X(RESOURCE, -17, "a local resource limit was reached (file descriptors, address space)")

enum ofccl_error {
#define OFCCL_X_ENUM(name, code, text) OFCCL_ERR_##name = (code),
    OFCCL_ERROR_LIST(OFCCL_X_ENUM)
#undef OFCCL_X_ENUM
};
#define OFCCL_SUCCESS OFCCL_ERR_SUCCESS

/* Human-readable text of an error code; never NULL. */
OFCCL_API const char *ofccl_strerror(int code);

/* Library version (of the library loaded, not of the header compiled against). */
OFCCL_API void ofccl_version(int *major, int *minor, int *patch);
OFCCL_API const char *ofccl_version_string(void);

/* Element types. bf16 and f16 are reduced with f32 accumulation. U8 is raw
 * bytes: moved by all-gather, broadcast and push (mixed-dtype buckets travel
 * as bytes), never reduced (reduce-scatter on it is OFCCL_ERR_NOT_SUPPORTED). */
typedef enum ofccl_dtype {
    OFCCL_F32 = 0,
    OFCCL_F64 = 1,
    OFCCL_BF16 = 2,
    OFCCL_F16 = 3,
    OFCCL_U8 = 4,
    OFCCL_DTYPE_COUNT
} ofccl_dtype_t;

/* Reduction operators. PREMUL_SUM multiplies every input by `scalar` before summing
 * (gradient pre-division); AVG divides the sum by the number of ranks. */
typedef enum ofccl_op_kind {
    OFCCL_OP_SUM = 0,
    OFCCL_OP_AVG = 1,
    OFCCL_OP_PREMUL_SUM = 2,
    OFCCL_OP_COUNT
} ofccl_op_kind_t;

typedef struct ofccl_redop {
    ofccl_op_kind_t kind;
    double scalar; /* used by OFCCL_OP_PREMUL_SUM only */
} ofccl_redop_t;

/* Size in bytes of one element of `dtype`, 0 if invalid. */
OFCCL_API size_t ofccl_dtype_size(ofccl_dtype_t dtype);

typedef struct ofccl_ctx ofccl_ctx_t;
typedef struct ofccl_comm ofccl_comm_t;

/*
 * Parameters of ofccl_ctx_create(). `size` must be set to sizeof(ofccl_ctx_params_t)
 * so that fields can be appended without breaking older callers.
 */
typedef struct ofccl_ctx_params {
    size_t size;
    /* NULL-terminated list of "NAME=value" settings that override the OFCCL_NAME
     * environment variables (NAME without the OFCCL_ prefix, e.g. "PROVIDER=tcp"). */
    const char *const *settings;
    /* If creation fails, the reason is written here (NUL-terminated, truncated). */
    char *errbuf;
    size_t errlen;
} ofccl_ctx_params_t;

/*
 * Create a context: read the configuration, join the job through the bootstrap
 * (PMIx by default), load the topology and open the fabric. Collective over
 * the job. `params` may be NULL. Several contexts may live in one process.
 */
OFCCL_API int ofccl_ctx_create(const ofccl_ctx_params_t *params, ofccl_ctx_t **ctx);
/* Destroy a context. Returns OFCCL_ERR_BUSY while communicators are still open. */
OFCCL_API int ofccl_ctx_destroy(ofccl_ctx_t *ctx);
/* Last error message of this context ("" if none). Valid until the next call on it. */
OFCCL_API const char *ofccl_ctx_last_error(const ofccl_ctx_t *ctx);
/* Name of the provider chosen for this context (e.g. "tcp;ofi_rxm"). */
OFCCL_API const char *ofccl_ctx_provider(const ofccl_ctx_t *ctx);

/* Create a communicator over every rank of the job. Collective. */
OFCCL_API int ofccl_comm_world(ofccl_ctx_t *ctx, ofccl_comm_t **comm);
/* Split `comm` (collective over it, MPI semantics): ranks that pass the same
 * color >= 0 form a new communicator, ranked by key and then by their rank in
 * `comm`; a rank passing OFCCL_UNDEFINED gets *newcomm = NULL. Built from
 * `comm`'s fabric, with no bootstrap round trip. The new communicator is
 * independent of `comm` once created (either may be destroyed first). */
#define OFCCL_UNDEFINED (-1)
OFCCL_API int ofccl_comm_split(ofccl_comm_t *comm, int color, int key, ofccl_comm_t **newcomm);
/* Destroy a communicator. Local (needs no peer), so it works after a peer died. */
OFCCL_API int ofccl_comm_destroy(ofccl_comm_t *comm);
OFCCL_API int ofccl_comm_rank(const ofccl_comm_t *comm, int *rank);
OFCCL_API int ofccl_comm_size(const ofccl_comm_t *comm, int *size);
OFCCL_API int ofccl_comm_local_rank(const ofccl_comm_t *comm, int *local_rank);
OFCCL_API int ofccl_comm_local_size(const ofccl_comm_t *comm, int *local_size);
/* Last error message of this communicator ("" if none). */
OFCCL_API const char *ofccl_comm_last_error(const ofccl_comm_t *comm);
/* Abort: safe from any thread, at any time, idempotent. Every pending and later
 * call on the communicator returns OFCCL_ERR_ABORTED promptly; only
 * ofccl_comm_destroy remains useful. */
OFCCL_API int ofccl_comm_abort(ofccl_comm_t *comm);
/* Deadline of blocking calls and requests on this communicator, in ms (0 =
 * none); starts as OFCCL_TIMEOUT_MS. Applies to requests posted afterwards. */
OFCCL_API int ofccl_comm_set_timeout(ofccl_comm_t *comm, uint64_t timeout_ms);

/* Block until every rank of the communicator has entered the barrier. Goes over
 * the fabric (not the bootstrap); fails with OFCCL_ERR_TIMEOUT after OFCCL_TIMEOUT_MS.
 * It succeeds once every rank's arrival is here, whatever is heard meanwhile of a
 * collective posted after it; it fails for a failure before it, and when a rank it
 * still waits for is gone or failed the barrier (ofccl_wait says the rule). */
OFCCL_API int ofccl_barrier(ofccl_comm_t *comm);

/* ---------------------------------------------------------------------------
 * Collectives. Non-blocking: a call posts the operation and returns a request;
 * ofccl_test / ofccl_wait / ofccl_progress drive it; ofccl_req_free releases it.
 * Collectives on one communicator must be posted in the same order on every
 * rank (they are matched by sequence number); they may complete in any order.
 * Buffers must stay valid and untouched until the request completes.
 * ------------------------------------------------------------------------- */
typedef struct ofccl_req ofccl_req_t;

/* recvbuf[r * count .. (r+1) * count) receives rank r's sendbuf[0 .. count).
 * In place when sendbuf == recvbuf + rank * count elements. */
OFCCL_API int ofccl_allgather(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                              ofccl_dtype_t dtype, ofccl_req_t **req);
/* recvbuf[0 .. recvcount) = op over all ranks r of r's sendbuf[rank * recvcount ..
 * (rank+1) * recvcount). sendbuf holds size * recvcount elements. */
OFCCL_API int ofccl_reduce_scatter(ofccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t recvcount, ofccl_dtype_t dtype, ofccl_redop_t op,
                                   ofccl_req_t **req);

/* In place: every rank passes `buf` (count elements); at completion each holds
 * the root's. Ranks must agree on count, dtype and root (else MISMATCH). */
OFCCL_API int ofccl_broadcast(ofccl_comm_t *comm, void *buf, size_t count, ofccl_dtype_t dtype,
                              int root, ofccl_req_t **req);

/* *done = 1 once the request completed; returns its error if it failed. */
OFCCL_API int ofccl_test(ofccl_req_t *req, int *done);
/* Progress until the request completes (bounded by OFCCL_TIMEOUT_MS).
 * A request completes with success once everything it needs has arrived,
 * whatever failure is heard of after that: a failure of collective k (a peer's
 * mismatch, deadline or departure) fails the requests at or after k on every
 * rank, and an earlier request only while it still waits for a rank that
 * exited or stopped responding; a barrier only fails for a failure before it.
 * So ranks agree on every collective all of them completed. */
OFCCL_API int ofccl_wait(ofccl_req_t *req);
/* Advance every communicator of the context once; never blocks. Returns 0 (or
 * an argument error): a communicator's failure reaches the caller through its
 * own requests and calls, not through the context's progress. */
OFCCL_API int ofccl_progress(ofccl_ctx_t *ctx);
/* Release a completed request. OFCCL_ERR_BUSY while it is still running. */
OFCCL_API int ofccl_req_free(ofccl_req_t *req);

/* ---- buckets: many tensors, each sharded across ranks ----
 * A tensor of `count` elements is split in chunks of ceil(count / size): rank r
 * owns elements [r * chunk, min((r+1) * chunk, count)), possibly none. The
 * library packs every shard of a bucket into one flat buffer per rank, padded to
 * OFCCL_ALIGN bytes, so any tensor sizes and any count work. */
typedef struct ofccl_tensor {
    size_t count; /* elements of the full (unsharded) tensor */
    void *full;   /* all-gather: output (count elements); reduce-scatter: input */
    void *shard;  /* all-gather: input (this rank's shard); reduce-scatter: output */
} ofccl_tensor_t;

/* This rank's shard of a `count`-element tensor: first element and length. */
OFCCL_API int ofccl_shard_range(const ofccl_comm_t *comm, size_t count, size_t *offset,
                                size_t *shard_count);
OFCCL_API int ofccl_bucket_allgather(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                     ofccl_dtype_t dtype, ofccl_req_t **req);
OFCCL_API int ofccl_bucket_reduce_scatter(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                          ofccl_dtype_t dtype, ofccl_redop_t op, ofccl_req_t **req);
/* Broadcast a bucket: every tensor's `full` (count elements, whole, not
 * sharded) on every rank gets the root's; `shard` is not used. */
OFCCL_API int ofccl_bucket_broadcast(ofccl_comm_t *comm, const ofccl_tensor_t *tensors, int n,
                                     ofccl_dtype_t dtype, int root, ofccl_req_t **req);

/* ---- weight push: senders (trainer ranks) push their shards of a set of
 * tensors to receivers (rollout ranks), bucket by bucket, straight from every
 * sender into every receiver's bucket buffer, double-buffered ----
 * Sender i (of the `senders` list) owns elements [i*c, min((i+1)*c, count))
 * of every tensor, c = ceil(count / nsenders). A receiver gets every tensor,
 * or the slice it names. The tensors are grouped in order into buckets of
 * about `bucket_bytes` (one larger tensor is a bucket of its own). */
typedef struct ofccl_push_spec {
    size_t size; /* sizeof(ofccl_push_spec_t) */
    int nsenders;
    const int *senders; /* ranks of the communicator that hold shards */
    int nreceivers;
    const int *receivers; /* ranks that receive (a rank may be in both lists) */
    int ntensors;
    const size_t *counts;        /* elements of each full tensor */
    const ofccl_dtype_t *dtypes; /* per tensor; NULL: every tensor is bytes (OFCCL_U8) */
    size_t bucket_bytes;         /* 0: 64 MiB */
    /* Receivers only, may differ per receiver (NULL: whole tensors): the
     * slice [slice_offset[t], + slice_count[t]) of tensor t, in elements. */
    const size_t *slice_offset, *slice_count;
    /* 1: the senders' shards and the receive buffers are memory of each
     * rank's GPU (every rank on one host, every pair of GPUs P2P): the plan's
     * two receive buffers are symmetric GPU memory (ofccl_push_buffer; a
     * receiver passes buf NULL), and each bucket moves GPU to GPU on the
     * communicator's stream (ofccl_comm_set_stream), by the copy engines, no
     * SM taken from the trainer or the rollout. The same on every rank.
     * (Callers built before this field pass a smaller size: host memory.) */
    int gpu;
} ofccl_push_spec_t;
typedef struct ofccl_push_plan ofccl_push_plan_t;
/* Collective over `comm`: every rank passes the same senders, receivers,
 * tensors, bucket size and memory (else OFCCL_ERR_MISMATCH naming the field
 * and the ranks); every rank must be a sender or a receiver. */
OFCCL_API int ofccl_push_plan_create(ofccl_comm_t *comm, const ofccl_push_spec_t *spec,
                                     ofccl_push_plan_t **plan);
/* OFCCL_ERR_BUSY while a bucket of the plan is running or its request is
 * not freed (ofccl_req_free). */
OFCCL_API int ofccl_push_plan_destroy(ofccl_push_plan_t *plan);
/* Buckets of the plan, and the largest bucket of any receiver (bytes). */
OFCCL_API int ofccl_push_plan_info(const ofccl_push_plan_t *plan, int *nbuckets,
                                   size_t *max_bucket_bytes);
/* Receivers: where tensor t (its slice) lands: bucket, byte offset in that
 * bucket's buffer, bytes. */
OFCCL_API int ofccl_push_tensor_where(const ofccl_push_plan_t *plan, int t, int *bucket,
                                      size_t *offset, size_t *bytes);
/* Post bucket k on this rank (every rank posts the buckets in the same order).
 * A sender passes `shards` (shards[t]: its shard of tensor t, for the bucket's
 * tensors; kept valid until completion). A receiver passes `buf` of `len`
 * bytes (too small: OFCCL_ERR_INVALID_ARG before any byte moves), or NULL for
 * the plan's own buffer k % 2 (ofccl_push_buffer): posting k + 2 reuses it,
 * so read bucket k before. The request completes when the bucket is all in. */
OFCCL_API int ofccl_push_bucket(ofccl_push_plan_t *plan, int bucket, void *const *shards, void *buf,
                                size_t len, ofccl_req_t **req);
/* ofccl_push_bucket moving only a prefix of each tensor: the first used[t]
 * elements of tensor t of bucket k (used NULL: whole tensors). Receivers'
 * requests complete as usual; what lies past the prefix in their buffers is
 * unspecified (a staged receive copies out its whole staging buffer). A
 * sender's shard need not be valid where nothing of it moves. Senders pass
 * the same `used` (receivers' is ignored). All zero: an empty bucket, only
 * its completion signals move, which releases a bucket a receiver posted
 * ahead before it knew there would be none (a stream of buckets whose length
 * the senders learn as they go). */
OFCCL_API int ofccl_push_bucket_used(ofccl_push_plan_t *plan, int bucket, void *const *shards,
                                     const size_t *used, void *buf, size_t len, ofccl_req_t **req);
/* The plan's own receive buffer for bucket k (after it was posted with NULL). */
OFCCL_API int ofccl_push_buffer(const ofccl_push_plan_t *plan, int bucket, void **buf);

/* ---- memory ----
 * Pool buffers are registered once per communicator; collectives on them move
 * data with no registration and no staging copy. The pool is bounded by
 * OFCCL_POOL_BYTES (0 = no bound): over budget fails with OFCCL_ERR_OVER_BUDGET
 * and the communicator stays usable. */
OFCCL_API int ofccl_buffer_alloc(ofccl_comm_t *comm, size_t bytes, void **ptr);
OFCCL_API int ofccl_buffer_free(ofccl_comm_t *comm, void *ptr);

/* Register user memory once for every communicator of the context (refcounted,
 * cached by address range: registering a range again costs nothing). Collectives
 * on registered buffers need no staging copy. Unregistered buffers work too,
 * through staging. */
typedef struct ofccl_mem ofccl_mem_t;
OFCCL_API int ofccl_mem_register(ofccl_ctx_t *ctx, void *ptr, size_t len, ofccl_mem_t **mh);
OFCCL_API int ofccl_mem_deregister(ofccl_mem_t *mh);
/* Allocate `bytes` (page-aligned) that every communicator of the context uses
 * with no registration call and no staging copy: registered like
 * ofccl_mem_register memory, and on the local transport shared memory that
 * peers map, as pool buffers are. Free with ofccl_mem_free (BUSY while a
 * collective uses it). */
OFCCL_API int ofccl_mem_alloc(ofccl_ctx_t *ctx, size_t bytes, void **ptr);
OFCCL_API int ofccl_mem_free(ofccl_ctx_t *ctx, void *ptr);

/* ---- GPU memory (CUDA; docs/gpu.md) ----
 * Collectives take GPU memory wherever they take host memory: the driver is
 * asked which kind a buffer is. Every collective on GPU memory is
 * stream-ordered: enqueued on the communicator's stream and returning at
 * once. Where every rank of the communicator is on one host and every pair
 * of GPUs reaches each other (P2P), all-gather, reduce-scatter and
 * broadcast, flat or bucketed, move data GPU to GPU (a copy kernel on
 * OFCCL_GPU_SMS SMs, or the copy engines; OFCCL_GPU_PEER_CLASS=0: by the
 * host engine through the local transport); elsewhere the transport moves
 * GPU memory as such where it takes it (OFCCL_GPU_FABRIC), else the host
 * engine stages it through host memory inside the request (said once in the
 * log, with why). The weight push moves GPU memory through a plan made for
 * it (ofccl_push_spec_t.gpu); a host plan's push refuses GPU memory
 * (OFCCL_ERR_NOT_SUPPORTED). */
typedef void *ofccl_stream_t; /* a CUstream / cudaStream_t; NULL: the legacy default stream */
/* The stream later GPU collectives of `comm` are enqueued on (each waits for
 * the previous one of the communicator first, whatever its stream). */
OFCCL_API int ofccl_comm_set_stream(ofccl_comm_t *comm, ofccl_stream_t stream);
/* Symmetric GPU memory on this rank's GPU (the current device at the
 * communicator's first GPU call): every rank calls it with the same sizes in
 * the same order (collective only when the pool grows) and gets a buffer at
 * the same offset of a pool segment mapped into every same-host peer, so a
 * collective on it moves data with no staging and no exchange. The pool
 * grows within OFCCL_GPU_POOL_BYTES; a freed buffer is reused by the next
 * request of its size. */
OFCCL_API int ofccl_gpu_buffer_alloc(ofccl_comm_t *comm, size_t bytes, void **ptr);
OFCCL_API int ofccl_gpu_buffer_free(ofccl_comm_t *comm, void *ptr);
/* Register `bytes` of the caller's own GPU memory at `ptr` (cudaMalloc, or
 * virtual memory made shareable as a POSIX file descriptor, as PyTorch's
 * expandable segments are): collective, every rank registering the same
 * sizes in the same order; each rank maps every peer's range (one mapping per
 * peer allocation, shared by the registrations inside it). A collective whose
 * output lies at the same offset of the same registration on every rank then
 * moves data into the peers' memory directly, as on pool memory. Registering
 * is a host exchange: do it once, outside the step loop. Deregistering is
 * local (every rank does it once its collectives on the memory are done:
 * BUSY while one runs). Free the memory only once every rank deregistered it
 * (CUDA leaves freeing memory a peer still maps undefined); memory freed
 * while registered anyway is seen at its next use, which fails (INVALID_ARG)
 * and drops the registration.
 * NOT_SUPPORTED where the communicator stages GPU memory (docs/gpu.md). */
OFCCL_API int ofccl_gpu_register(ofccl_comm_t *comm, void *ptr, size_t bytes);
OFCCL_API int ofccl_gpu_deregister(ofccl_comm_t *comm, void *ptr);
/* Make `stream` wait for the request (work enqueued on it later runs after
 * the collective), without blocking the host; a request that is not
 * stream-ordered is waited for on the host, as by ofccl_wait. The request is
 * still completed and freed as any other (ofccl_test / ofccl_wait,
 * ofccl_req_free). */
OFCCL_API int ofccl_req_stream_wait(ofccl_req_t *req, ofccl_stream_t stream);

/* Counters for tests and tuning (bytes and counts since context creation). */
typedef struct ofccl_stats {
    size_t size;               /* sizeof(ofccl_stats_t) */
    uint64_t registrations;    /* fabric registrations performed */
    uint64_t reg_cache_hits;   /* ofccl_mem_register / lookups served by the cache */
    uint64_t staged_bytes;     /* bytes copied through host staging buffers */
    uint64_t pool_bytes;       /* bytes currently held by pools and staging */
    uint64_t registered_bytes; /* bytes currently registered */
    uint64_t pool_grows;       /* times a staging buffer was re-registered larger */
    /* Bytes this rank's writes, reads and atomics carried to its peers, by
     * transport: ofccl's local shared-memory transport (peers on this host),
     * and the libfabric provider (OFCCL_PROVIDER). */
    uint64_t local_bytes;
    uint64_t fabric_bytes;
    /* Peers whose addresses and keys this rank holds, summed over its live
     * communicators: every peer where records were all-gathered at creation,
     * only those used so far under OFCCL_BOOT_EXCHANGE=lazy. (Callers built
     * before this field pass a smaller size and get the fields above.) */
    uint64_t peers_resolved;
    /* Reduce-scatter output bytes this rank reduced into other ranks' blocks
     * (local transport: a rank done with its own block takes grains of the
     * others', OFCCL_RS_GRAIN). */
    uint64_t reduced_for_peers;
    /* Write contexts (one per write or atomic in flight) the collective
     * engines hold, summed over live communicators. They are allocated as
     * collectives need them: by the writes kept out to the peers a collective
     * uses (OFCCL_DEPTH per peer), whatever the communicator's size. */
    uint64_t op_contexts;
    /* All-gather bytes this rank copied into its own output from peers'
     * buffers itself (local transport, OFCCL_AG_TAKE: blocks that had not
     * reached it when it was done with its own writes). */
    uint64_t pulled_bytes;
    /* GPU memory the host engine moved as GPU memory, through a transport
     * that takes it (the local transport by CUDA IPC, a fabric by FI_HMEM:
     * OFCCL_GPU_FABRIC), no host staging: each collective's whole buffer
     * (an all-gather's output, a reduce-scatter's input, a broadcast's). */
    uint64_t hmem_bytes;
} ofccl_stats_t;
OFCCL_API int ofccl_ctx_stats(const ofccl_ctx_t *ctx, ofccl_stats_t *stats);

/* Write every pending request of every communicator of the context —
 * operation, sequence number, bucket, algorithm, phase, age and the peers it
 * still waits for (and what each owes) — to `out`, or to the log (stderr, at
 * any OFCCL_LOG_LEVEL) when `out` is NULL; with OFCCL_TRACE set, also write
 * the trace file. Safe while requests are pending, from any thread; it takes
 * the context's lock for one pass and moves nothing. OFCCL_DUMP_SIGNAL=1 does
 * the same on SIGUSR1. */
OFCCL_API int ofccl_dump_state(ofccl_ctx_t *ctx, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* OFCCL_H */
