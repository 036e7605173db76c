/*
 * The collective engine: a request is a state machine (post -> progress ->
 * complete) advanced only from counters. Algorithms (lib/coll/, one per file)
 * plug in through ofccl__algo_t and see only this header.
 *
 * Protocol of one collective, sequence number `seq`, request slot seq % SLOTS:
 *  1. Every rank that will be written to announces its destination buffer to
 *     the ranks that write into it: a descriptor {seq, fingerprint, key, offset}
 *     written into the writer's control region with a signal. The descriptor is
 *     also the credit: a buffer is announced only when it is free.
 *  2. Writers check the fingerprint (operation, count, dtype, op, algorithm):
 *     a mismatch fails the request with OFCCL_ERR_MISMATCH naming the field.
 *  3. Data moves in units (a chunk of a block at a step), each signalled to the
 *     receiver with 4 bytes of CQ data {kind, comm, slot, unit}, or — on the
 *     atomic path — by an in-order 64-bit add on a per-writer counter posted
 *     once the write is delivery-complete. The receiver counts; it never relies
 *     on the order of writes.
 */
#ifndef OFCCL_CORE_COLL_H
#define OFCCL_CORE_COLL_H

#include "core.h"
#include "reduce.h"

#define OFCCL__SLOTS 8 /* collectives outstanding per communicator */
#define OFCCL__SLOT_BITS 3
#define OFCCL__MAX_UNITS 16384 /* units (chunk x step) one collective may signal */
#define OFCCL__DESC_WORDS 12
#define OFCCL__EAGER_WORDS 4 /* eager header: from, fingerprint, count, seq + 1 (the mark) */
#define OFCCL__EAGER_HDR (OFCCL__EAGER_WORDS * sizeof(uint64_t))

enum ofccl__coll_kind { OFCCL__AG = 1, OFCCL__RS = 2 };
enum ofccl__algo_id {
    OFCCL__ALGO_DIRECT = 1,
    OFCCL__ALGO_RING = 2,
    OFCCL__ALGO_EAGER = 3,
    OFCCL__ALGO_PULL = 4
};
#define OFCCL__EAGER_RING 16 /* eager slots per writer: see ofccl__eager_ok() */
enum ofccl__req_state { OFCCL__REQ_FREE = 0, OFCCL__REQ_ACTIVE, OFCCL__REQ_DONE };

typedef struct ofccl_req ofccl__req_t;

/* A write in flight: the op context handed to the provider. */
typedef struct ofccl__wop {
    ofccl__op_t op; /* first: the provider hands back &op */
    ofccl__req_t *req;
    int peer;
    uint32_t unit;
    int atomic; /* 1 for a signal add on the atomic path */
} ofccl__wop_t;

/* A memory area: where it is locally, and the registration covering it. */
typedef struct ofccl__mem_ref {
    void *ptr;
    const ofccl__mr_t *mr; /* NULL: unregistered */
} ofccl__mem_ref_t;

typedef struct ofccl__algo {
    size_t size; /* sizeof(ofccl__algo_t) */
    const char *name;
    int coll;
    int id;
    /* After arguments and buffers are set: fill the plan (units expected,
     * who writes to this rank). Must not post. */
    int (*plan)(ofccl__req_t *r);
    /* Advance: post what is ready, reduce what has arrived. Bounded work.
     * Sets r->finished when everything this rank owes and expects is done. */
    int (*progress)(ofccl__req_t *r);
    /* Unit numbers are the receiver's and say who wrote them: the writer of
     * unit u (for per-writer accounting and messages), and, for the atomic
     * signal path (which counts each writer's writes in order), the unit of
     * writer p's k-th write here. */
    int (*writer_of)(const ofccl__req_t *r, uint32_t unit);
    uint32_t (*unit_of)(const ofccl__req_t *r, int p, uint32_t k);
} ofccl__algo_t;

struct ofccl_req {
    ofccl_comm_t *comm;
    int state; /* enum ofccl__req_state */
    int status;
    int finished; /* set by the algorithm */
    uint64_t seq;
    unsigned slot;
    const ofccl__algo_t *algo;
    uint64_t deadline_ns;
    uint64_t start_ns;

    /* arguments */
    int coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements per rank block */
    ofccl_dtype_t dtype;
    ofccl_redop_t op;
    size_t esize;
    size_t block; /* bytes per rank block */
    uint64_t fingerprint;

    /* memory: source of what this rank sends, destination peers write into */
    ofccl__mem_ref_t src;    /* AG: own block; RS: n blocks */
    ofccl__mem_ref_t dst;    /* AG: n blocks (final or staged); RS: staging for peers */
    ofccl__mem_ref_t fwd;    /* RS ring: reduced partials forwarded to the right */
    void *out;               /* RS: where the reduced block goes (user recvbuf) */
    void *copy_out;          /* AG staged: user recvbuf to copy dst into at completion */
    char *own_dst;           /* AG direct sending from sendbuf: where our block goes */
    unsigned own_done;       /* chunks of it copied there so far */
    int staging_idx;         /* staging set held, -1 if none */
    int bucket;              /* 1: bucket request, copy-in/out to tensors (bucket.c) */
    ofccl_tensor_t *tensors; /* bucket: copy of the caller's list (grow-only, per slot) */
    int ntensors, tcap;
    uint64_t layout_hash; /* bucket: hash of the tensors' element counts */
    /* bucket: the counts, published in r->dst's registration for a peer that
     * needs to name a difference, then as many words of room to read its own */
    uint64_t *layout;

    /* plan */
    size_t chunk;
    unsigned nchunks;
    unsigned depth;
    unsigned units_in;     /* units this rank expects to receive */
    uint8_t *writes_to_me; /* [size] 1 if that rank writes into this rank */
    uint8_t *i_write_to;   /* [size] 1 if this rank writes into that rank */

    /* descriptors received from the ranks this rank writes to */
    uint8_t *peer_ready;    /* [size] */
    ofccl__rkey_t *peer_rk; /* [size] */
    uint64_t *peer_off;     /* [size] offset of their destination in their region */
    unsigned descs_sent;
    uint64_t flush_ns; /* failed by a mismatch: deliver descriptors until then */

    /* counters: the whole state of the pipeline */
    uint32_t *unit_cnt;      /* [MAX_UNITS] arrivals per unit */
    uint64_t arrived;        /* total arrivals */
    uint64_t *seen;          /* [size] atomic path: per-writer counter already folded */
    uint32_t *sent;          /* [size] units posted to that peer */
    uint32_t *inflight;      /* [size] writes in flight to that peer */
    uint32_t *sig_next;      /* [size] atomic path: next write (k) to signal */
    uint32_t *from_cnt;      /* [size] units arrived from that writer */
    uint64_t *sig_mask;      /* [size] atomic path: delivered, unsignalled units */
    size_t peer_state_bytes; /* sig_mask, sent, inflight, sig_next, from_cnt, writes_to_me,
                                i_write_to and peer_ready: one block, in this order */
    uint32_t reduced;        /* RS: units reduced */
    unsigned ops_out;        /* ops of this request not yet completed */
    ofccl__wop_t *wops;      /* [size * (depth * 2 + 2)] */
    const void **srcs;       /* [size] reduction sources */
    const char **peer_at;    /* [size] pull: peer p's block for this rank, mapped here */
    unsigned nwops;
};

/* ---- for algorithms ---- */
static inline unsigned ofccl__unit(const ofccl__req_t *r, unsigned step, unsigned chunk)
{
    return step * r->nchunks + chunk;
}
static inline size_t ofccl__chunk_len(const ofccl__req_t *r, unsigned chunk)
{
    size_t off = (size_t)chunk * r->chunk;
    return off + r->chunk <= r->block ? r->chunk : r->block - off;
}
/* Post a write of `len` bytes from local `src` (inside r->src/dst/fwd's
 * registration `mr`) to `peer`'s destination at `dst_off` bytes, signalled as
 * `unit`. Returns 0 posted, OFCCL_ERR_AGAIN (try later), or an error. */
int ofccl__coll_put(ofccl__req_t *r, int peer, const void *src, const ofccl__mr_t *mr, size_t len,
                    uint64_t dst_off, uint32_t unit);
/* Fail request r: record `code` as its status and a message naming the
 * collective, its sequence number and algorithm on the communicator. */
int ofccl__coll_fail(ofccl__req_t *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Claim the slot of the next sequence number (no side effect on failure). */
int ofccl__coll_begin(ofccl_comm_t *comm, int coll, ofccl__req_t **out);
/* Plan, announce and activate a request whose arguments and memory are set. */
int ofccl__coll_start(ofccl__req_t *r);
/* Buckets (bucket.c): extra staging bytes a bucket reduce-scatter needs (flat
 * input + flat output), packing the tensors into the flat buffer (`area`: the
 * flat input for reduce-scatter; for all-gather the own region of r->dst), and
 * scattering the result into the tensors at completion. */
size_t ofccl__bucket_extra(const ofccl__req_t *r);
void ofccl__bucket_copy_in(ofccl__req_t *r, void *area);
void ofccl__bucket_copy_out(ofccl__req_t *r);
int ofccl__post_allgather(ofccl__req_t *r);
int ofccl__post_reduce_scatter(ofccl__req_t *r);

/* Reduce-scatter's dtype and op: NOT_SUPPORTED for u8, INVALID_ARG for an
 * unknown op or a non-finite premul scalar (post_coll.c). */
int ofccl__check_redop(ofccl_comm_t *comm, const char *what, ofccl_dtype_t dtype, ofccl_redop_t op);

/* What a descriptor from rank `from` must say for the collective we posted. */
typedef struct ofccl__desc_expect {
    uint64_t seq, fingerprint, count, need;
    int from, me;
    uint64_t scalar_bits;           /* premul scalar (0 when unused) */
    int bucket;                     /* a bucket: compare its layout, not the padded count */
    uint64_t ntensors, layout_hash; /* buckets */
} ofccl__desc_expect_t;
/* ofccl__desc_check: the bucket layouts differ in some tensor's size; which
 * one only the peer's published layout can tell (a positive code: not an error
 * to return to a caller). */
#define OFCCL__LAYOUT_DIFFERS 1
/* Validate a descriptor written by a peer (untrusted): 0, OFCCL_ERR_MISMATCH
 * (the peer posted something else), OFCCL__LAYOUT_DIFFERS or OFCCL_ERR_CORRUPT;
 * `why` says which. A descriptor is {seq, fingerprint, count, base, key, len,
 * offset, rank, premul scalar bits, layout hash, tensors, layout offset}. */
int ofccl__desc_check(const uint64_t d[OFCCL__DESC_WORDS], const ofccl__desc_expect_t *x, char *why,
                      size_t len);
/* The same for an eager header (x->need unused). */
int ofccl__eager_check(const uint64_t h[OFCCL__EAGER_WORDS], const ofccl__desc_expect_t *x,
                       char *why, size_t len);

/* Bucket layouts (layout.c): the hash of the tensors' counts; the bytes a
 * bucket request adds to its staging (its counts, and room for a peer's); where
 * they are published (inside r->dst's registration); and, when a peer's hash
 * differs, a message naming the first tensor that differs (read from the peer;
 * `why`, the hash message, when that cannot be done). */
uint64_t ofccl__layout_hash(const ofccl_tensor_t *t, int n);
size_t ofccl__layout_bytes(const ofccl__req_t *r);
void ofccl__layout_publish(ofccl__req_t *r, void *area);
const char *ofccl__layout_diff(ofccl__req_t *r, int p, const uint64_t d[OFCCL__DESC_WORDS],
                               char *why, size_t len);
/* Our layout is still on its way to a peer that will name the difference. */
bool ofccl__layout_busy(const ofccl_comm_t *comm);

/* Plans shared by the twins (lib/coll/plan.c), and their unit numbering:
 * direct: writer w's chunk c is unit w * nchunks + c; ring: the left
 * neighbour's j-th write is unit j; one unit per writer: unit = writer. */
int ofccl__plan_direct(ofccl__req_t *r);
int ofccl__plan_ring(ofccl__req_t *r);
int ofccl__direct_writer_of(const ofccl__req_t *r, uint32_t unit);
uint32_t ofccl__direct_unit_of(const ofccl__req_t *r, int p, uint32_t k);
int ofccl__ring_writer_of(const ofccl__req_t *r, uint32_t unit);
uint32_t ofccl__ring_unit_of(const ofccl__req_t *r, int p, uint32_t k);
int ofccl__one_writer_of(const ofccl__req_t *r, uint32_t unit);
uint32_t ofccl__one_unit_of(const ofccl__req_t *r, int p, uint32_t k);
/* Direct: has chunk c arrived from every writer? */
bool ofccl__direct_chunk_in(const ofccl__req_t *r, unsigned c);

extern const ofccl__algo_t ofccl__ag_direct, ofccl__ag_ring, ofccl__rs_direct, ofccl__rs_ring;
extern const ofccl__algo_t ofccl__ag_eager, ofccl__rs_eager;
/* Reduce-scatter where the provider maps peers' memory (caps.peer_map): each
 * rank announces its source (r->dst is it), reads the peers' blocks for it in
 * place and reduces them in one pass, then tells each peer it is done reading
 * (one zero-length signal, the only unit it expects from each). */
extern const ofccl__algo_t ofccl__rs_pull;

/* ---- eager path (direct collectives of at most OFCCL_EAGER_BYTES) ----
 * Writer w puts {header, payload} for collective s into receiver r's control
 * region at slot (s % 16, w). Safe without credits: w posts s only after its
 * own s-8 completed, which (s-8 being all-pairs) needed r's data for s-8, so r
 * had posted s-8 and thus finished s-16, the slot's previous user. Hence eager
 * only when s-8 was all-pairs too; every rank decides the same way.
 * Where the provider maps peers' memory (caps.peer_map), w stores the slot
 * itself, the header's last word (seq + 1, the mark) last with release, and r polls the
 * mark: no op, no CQ data. Otherwise it is one write with CQ data. */
int ofccl__eager_ok(const ofccl_comm_t *comm, const ofccl__algo_t *algo, int bucket, size_t block);
/* Our outgoing {header, payload} area for request slot `slot` and peer `p`. */
uint8_t *ofccl__eager_out(const ofccl_comm_t *comm, unsigned slot, int p);
/* Incoming area written by `from` for sequence number `seq`. */
const uint8_t *ofccl__eager_in(const ofccl_comm_t *comm, uint64_t seq, int from);
/* Byte offset of that incoming area inside a peer's control region (for `from` = us). */
uint64_t ofccl__eager_in_offset(const ofccl_comm_t *comm, uint64_t seq, int from);
/* Write the header that travels with eager data. */
void ofccl__eager_header(const ofccl__req_t *r, uint8_t *area);
/* Mapped path (comm->peer_ctrl_at): store {header, r->block bytes of payload}
 * straight into peer p's incoming slot, the header's mark last (release). */
void ofccl__eager_store(const ofccl__req_t *r, int p, const void *payload);
/* lib/coll/eager.c: send {header, payload} to every peer (peer p's payload at
 * sendbuf + p * stride); 1 when all are posted, 0 when some must wait, <0 on
 * error. Then, once all have arrived, check every writer's header. */
int ofccl__eager_send(ofccl__req_t *r, size_t stride);
int ofccl__eager_land(ofccl__req_t *r);
/* Eager request r: 1 when every peer's {header, data} is in (0 otherwise), or an
 * error when a peer took the descriptor path for the same collective. */
int ofccl__eager_arrived(ofccl__req_t *r);
/* Has `from`'s eager {header, data} for request r arrived here? */
bool ofccl__eager_from_in(const ofccl__req_t *r, int from);
/* Mapped path: has every peer's {header, data} for collective `seq` been
 * stored here? Acquire loads of the marks: safe without the context lock. */
bool ofccl__eager_all_marked(const ofccl_comm_t *comm, uint64_t seq);
/* "all-gather" or "reduce-scatter", for messages. */
const char *ofccl__coll_name(int coll);
/* Choose an algorithm by OFCCL_ALGO_* and the selector (size, rank count). */
const ofccl__algo_t *ofccl__algo_select(const ofccl_comm_t *comm, int coll, size_t block_bytes);

/* ---- engine state kept in the communicator ---- */
#define OFCCL__HISTORY 16
typedef struct ofccl__hist {
    uint64_t seq;
    int coll, algo;
    size_t block;
    int status, done;
    uint64_t start_ns, end_ns;
} ofccl__hist_t;

/* A diagnostic read or write of a bucket layout (layout.c). */
typedef struct ofccl__layout_op {
    ofccl__op_t op; /* first: the provider hands back &op */
    int busy, status;
} ofccl__layout_op_t;

typedef struct ofccl__coll_state {
    ofccl__hist_t hist[OFCCL__HISTORY];    /* the last collectives, for timeout reports */
    uint8_t all_pairs[OFCCL__SLOTS];       /* was collective seq (by seq % SLOTS) all-pairs? */
    uint32_t eager_cnt[OFCCL__EAGER_RING]; /* eager arrivals by seq % 16, even before posting */
    int eager_from[OFCCL__EAGER_RING];     /* a sender of those (for messages) */
    uint8_t *eager_seen;                   /* [EAGER_RING * size]: who sent them */
    size_t eager_bytes, eager_slot;        /* OFCCL_EAGER_BYTES; bytes per eager slot */
    ofccl__req_t reqs[OFCCL__SLOTS];
    uint64_t next_seq; /* sequence number of the next collective */
    ofccl__layout_op_t layout_read, layout_write;
    int pull_staged_noted; /* the reduce-scatter pull staged a source: logged once */
    uint8_t *desc_flag;    /* [SLOTS * size] cqdata path: descriptor from rank has landed */
    uint64_t *desc_seen;   /* [SLOTS * size] atomic path: per slot/rank counter folded */
} ofccl__coll_state_t;

/* report.c: record a collective in the history when it starts (done = 0) and
 * when it completes (done = 1); name the ranks a stuck request waits for (into
 * buf); dump the history and the stuck request's per-peer state as warnings. */
void ofccl__coll_history(const ofccl__req_t *r, int done);
void ofccl__coll_waiting_for(const ofccl__req_t *r, char *buf, size_t len);
void ofccl__coll_dump_history(const ofccl__req_t *stuck);

int ofccl__coll_init(ofccl_comm_t *comm);
void ofccl__coll_fini(ofccl_comm_t *comm);
/* Control-region words the engine needs for `size` ranks. */
size_t ofccl__coll_ctrl_words(int size, size_t eager_bytes);
/* Drive every active request of the communicator once. */
/* check_clock = false skips the deadline and dead-peer checks: for spinning
 * waits, which pass true every so often. */
int ofccl__coll_progress(ofccl_comm_t *comm, bool check_clock);
/* Drive request r alone, without the endpoint or the clock: for a wait whose
 * request needs nothing more from them (its mapped eager data is all in). */
void ofccl__coll_progress_req(ofccl__req_t *r);

#endif
