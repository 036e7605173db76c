/*
 * The request engine, as the collective layer (lib/coll) sees it: a request is
 * a state machine (post -> progress -> complete) advanced only from counters.
 * Algorithms plug in through ofccl__algo_t; the engine runs the steps they hand
 * it and never names one.
 *
 * Protocol of one collective, sequence number `seq`, request slot seq % SLOTS:
 *  1. Every rank that will be written to announces its destination buffer to
 *     the ranks that write into it: a descriptor (desc.c) written into the
 *     writer's control region with a signal. The descriptor is also the
 *     credit: a buffer is announced only when it is free.
 *  2. Writers check it (operation, count, dtype, op, algorithm, layout): a
 *     mismatch fails the request with OFCCL_ERR_MISMATCH naming the field.
 *  3. Data moves in units (a chunk of a block at a step), each signalled to the
 *     receiver with 4 bytes of CQ data {kind, comm, slot, unit}, or — on the
 *     atomic path — by an in-order 64-bit add on a per-writer counter posted
 *     once the write is delivery-complete. The receiver counts; it never relies
 *     on the order of writes.
 * Small collectives of an all-pairs algorithm may skip step 1 (eager slots).
 */
#ifndef OFCCL_CORE_ENGINE_H
#define OFCCL_CORE_ENGINE_H

#include "core.h"
#include "reduce.h"

#define OFCCL__SLOTS 8 /* collectives outstanding per communicator */
#define OFCCL__SLOT_BITS 3
#define OFCCL__MAX_UNITS 16384 /* units (chunk x step) one collective may signal */
#define OFCCL__IN_PIECES 8     /* pieces a staged input is copied in by, at most */
#define OFCCL__DESC_WORDS 16
#define OFCCL__EAGER_WORDS 4 /* eager header: from, fingerprint, count, seq + 1 (the mark) */
#define OFCCL__EAGER_HDR (OFCCL__EAGER_WORDS * sizeof(uint64_t))
#define OFCCL__EAGER_RING 16 /* eager slots per writer (eager_slots.c says why 16) */

/* The operation: names it in messages, picks its staging set, and is part of
 * what ranks must agree on. */
enum ofccl__coll_kind { OFCCL__AG = 1, OFCCL__RS = 2, OFCCL__BC = 3, OFCCL__PUSH = 4 };
enum ofccl__req_state { OFCCL__REQ_FREE = 0, OFCCL__REQ_ACTIVE, OFCCL__REQ_DONE };

typedef struct ofccl_req ofccl__req_t;

/* A write in flight: the op context handed to the provider. */
typedef struct ofccl__wop {
    ofccl__op_t op; /* first: the provider hands back &op */
    ofccl__req_t *req;
    struct ofccl__wop *next_free; /* in the communicator's free list */
    int peer;
    uint32_t unit; /* data: the k-th write to the peer; UINT32_MAX: a descriptor */
    int atomic;    /* 1 for a signal add on the atomic path */
    size_t len;    /* tracing: bytes of a data write, and when it was posted */
    uint64_t t0;
} ofccl__wop_t;

/* A memory area: where it is locally, the registration covering it, and the
 * kind of memory it is (the registration's, else where it lives). */
typedef struct ofccl__mem_ref {
    void *ptr;
    const ofccl__mr_t *mr; /* NULL: unregistered */
    ofccl__mem_kind_t kind;
} ofccl__mem_ref_t;

/* A reference to `ptr` in `mr` (may be NULL), with its memory kind. */
static inline ofccl__mem_ref_t ofccl__mem_ref(void *ptr, const ofccl__mr_t *mr)
{
    return (ofccl__mem_ref_t){ptr, mr, mr != NULL ? mr->kind : ofccl__mem_kind_of(ptr)};
}

/* What an algorithm is, for the engine. */
enum ofccl__algo_flag {
    /* Every rank exchanges with every other: a later collective may go
     * through the eager slots after it (eager_slots.c). */
    OFCCL__ALGO_ALL_PAIRS = 1u << 0,
    /* Data goes into the peers' eager slots: no descriptors; one {header,
     * data} per writer, counted per ring slot. */
    OFCCL__ALGO_EAGER = 1u << 1,
    /* Stream-ordered (GPU): start enqueues the whole collective on a stream;
     * no plan, descriptors or units; progress polls its end; unwind releases
     * the stream when the request fails. */
    OFCCL__ALGO_STREAM = 1u << 2,
};

/* How an algorithm uses the caller's buffers: what the entry points resolve
 * for it before it is started (allgather.c, reduce_scatter.c, broadcast.c). */
enum ofccl__algo_buf {
    /* Peers read this rank's source in place through their mappings: it
     * must be ofccl memory they can map (else it is staged first), it is
     * what the descriptor announces, and a receiver copies or sums into its
     * own output itself (no staging for peers' writes). */
    OFCCL__BUF_PEERS_READ = 1u << 0,
    /* All-gather: the block may be sent straight from sendbuf and copied to
     * its place in the output behind the sends (ofccl__ag_copy_own). */
    OFCCL__BUF_OWN_BEHIND = 1u << 1,
    /* Announce this rank's block as the descriptor's second window, where
     * peers can map it, so that they may read it themselves. */
    OFCCL__BUF_SHOW_SRC = 1u << 2,
    /* Announce this rank's output as the second window, where peers can map
     * it, so that they may write parts of it themselves. */
    OFCCL__BUF_SHOW_OUT = 1u << 3,
    /* All-gather staged from device memory: its own block is copied in by
     * pieces, and the algorithm sends a chunk once the piece holding it is
     * in (ofccl__exec_in_ready), not once the whole block is. */
    OFCCL__BUF_OWN_PIECES = 1u << 4,
};

/* What an algorithm may keep per request (ofccl__algo_priv): this many bytes,
 * plus this many per rank of the communicator, allocated with it. */
#define OFCCL__ALGO_PRIV_FIXED 64
#define OFCCL__ALGO_PRIV_PER_PEER 16

typedef struct ofccl__algo {
    size_t size; /* sizeof(ofccl__algo_t) */
    const char *name;
    int coll;
    int wire_id;    /* identifies the algorithm in fingerprints (ranks must agree) */
    unsigned flags; /* enum ofccl__algo_flag */
    /* After arguments and buffers are set: fill the plan (units expected,
     * who writes to this rank). Must not post. */
    int (*plan)(ofccl__req_t *r);
    /* Once the request is active (may be NULL): what it can do at once. */
    int (*start)(ofccl__req_t *r);
    /* Advance: post what is ready, reduce what has arrived. Bounded work.
     * Sets r->finished when everything this rank owes and expects is done. */
    int (*progress)(ofccl__req_t *r);
    /* Unit numbers are the receiver's and say who wrote them: the writer of
     * unit u (for per-writer accounting and messages), and, for the atomic
     * signal path (which counts each writer's writes in order), the unit of
     * writer p's k-th write here. */
    int (*writer_of)(const ofccl__req_t *r, uint32_t unit);
    uint32_t (*unit_of)(const ofccl__req_t *r, int p, uint32_t k);
    /* Where unit u landed in this rank's output (r->dst): its first byte
     * and length, final once it has arrived (may be NULL: not said, so a
     * staged output is copied out whole at the end). */
    void (*landed)(const ofccl__req_t *r, uint32_t unit, size_t *off, size_t *len);
    /* Bytes this rank will write into what peer p announced (may be NULL:
     * r->dst_need for every peer). Checked against p's descriptor. */
    uint64_t (*need_of)(const ofccl__req_t *r, int p);
    /* Units peer p writes here in all (may be NULL: units_in shared equally
     * among the writers). Says what a peer still owes, for reports and when
     * a peer exits. */
    unsigned (*units_from)(const ofccl__req_t *r, int p);
    /* What else this rank waits for from peer p, for reports and when p
     * exits: a phrase, or NULL for nothing (may be NULL: only units). */
    const char *(*waits_on)(const ofccl__req_t *r, int p);
    /* Has p shown that it reached this collective (posted it)? May be NULL:
     * its descriptor arrived where this rank writes to p, else yes. A rank
     * that has not is the one to blame for a collective that times out:
     * the others may only be waiting behind it. */
    bool (*reached)(const ofccl__req_t *r, int p);
    /* The request failed: undo what would otherwise wait for it (a
     * stream-ordered request's stream). May be NULL. */
    void (*unwind)(ofccl__req_t *r);
    /* OFCCL__ALGO_STREAM: make `stream` wait for the request's end (its
     * completion event on the GPU). May be NULL otherwise. */
    int (*stream_wait)(ofccl__req_t *r, ofccl_stream_t stream);
    unsigned buffers; /* enum ofccl__algo_buf */
    /* Staging bytes of a reduce-scatter: where peers write (*dst) and for
     * the partial sums it forwards (*fwd). May be NULL: *dst = size * block,
     * *fwd = 0. */
    void (*staging)(const ofccl__req_t *r, size_t *dst, size_t *fwd);
    /* Its private state per request, zeroed before `plan`: priv_fixed bytes
     * plus priv_per_peer per rank, within OFCCL__ALGO_PRIV_*. */
    size_t priv_fixed, priv_per_peer;
} ofccl__algo_t;

struct ofccl_req {
    ofccl_comm_t *comm;
    int state; /* enum ofccl__req_state */
    int status;
    int finished;  /* set by the algorithm */
    int finishing; /* completing: the finish step ran, its executor work may be in flight */
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
    int root;         /* broadcast: the rank whose buffer everyone gets */
    uint64_t tag;     /* what else every rank must agree on (a push's plan), in fingerprints */
    void *algo_state; /* what the algorithm keeps for this request (a push's plan) */
    size_t esize;
    size_t block; /* bytes per rank block */
    uint64_t fingerprint;

    /* memory: source of what this rank sends, destination peers write into */
    ofccl__mem_ref_t src; /* AG: own block; RS: n blocks */
    ofccl__mem_ref_t dst; /* AG: n blocks (final or staged); RS: staging for peers */
    ofccl__mem_ref_t fwd; /* RS ring, hier: reduced partials sent on to peers */
    void *out;            /* RS: where the reduced block goes (user recvbuf) */
    void *copy_out;       /* AG staged: user recvbuf to copy dst into at completion */
    /* The descriptor's second window (ptr NULL: none), OFCCL__BUF_SHOW_*:
     * where peers may read this rank's block or write its output. */
    ofccl__mem_ref_t win2;
    int staging_idx; /* staging set held, -1 if none */
    /* A registration made for this request alone (device memory the
     * transport takes), dropped when it completes. */
    ofccl_mem_t *call_mem;
    /* Run when the request completes successfully, before its staging is
     * released: copying staged results out (set by lib/coll). */
    void (*finish)(ofccl__req_t *r);
    /* Run after each progress pass of the algorithm (may be NULL): copying
     * out the staged results that have landed so far (set by lib/coll, with
     * the algorithm's `landed`), so that those copies overlap the transfers
     * still under way; `finish` copies the rest. */
    void (*out_step)(ofccl__req_t *r);
    int bucket;              /* 1: bucket request, copy-in/out to tensors */
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
    unsigned unit_span;    /* unit numbers in use, when the plan sets it (else size * chunks) */
    uint64_t dst_need;     /* bytes writers may put into a destination (n * block unless
                              the plan says otherwise) */
    uint8_t *writes_to_me; /* [size] 1 if that rank writes into this rank */
    uint8_t *i_write_to;   /* [size] 1 if this rank writes into that rank */
    /* The same as lists, made at posting: what runs on every pass of the
     * progress loop goes over the peers the collective uses, not over the
     * communicator (a ring over 16k ranks has two). */
    int *to;       /* [size] the ranks this rank writes to, nto of them */
    int *from;     /* [size] the ranks that write to this rank, nfrom of them */
    int *awaiting; /* [size] the ranks of `to` whose descriptor is not in, nawait */
    unsigned nto, nfrom, nawait;

    /* descriptors received from the ranks this rank writes to */
    uint8_t *peer_ready;    /* [size] */
    ofccl__rkey_t *peer_rk; /* [size] */
    uint64_t *peer_off;     /* [size] offset of their destination in their region */
    unsigned descs_sent;    /* descriptors sent: to from[0, descs_sent) */
    uint64_t flush_ns;      /* failed by a mismatch: deliver descriptors until then */
    int named;              /* failed after a peer's mismatch notice: own check made */

    /* counters: the whole state of the pipeline */
    uint32_t *unit_cnt;      /* [MAX_UNITS] arrivals per unit */
    uint64_t arrived;        /* total arrivals */
    uint64_t *seen;          /* [size] atomic path: per-writer counter already folded */
    uint32_t *sent;          /* [size] units posted to that peer */
    uint32_t *inflight;      /* [size] writes in flight to that peer */
    uint32_t *sig_next;      /* [size] atomic path: next write (k) to signal */
    uint32_t *from_cnt;      /* [size] units arrived from that writer */
    uint32_t *out_cnt;       /* [size] out_step: that writer's units copied out, in its order */
    uint64_t *sig_mask;      /* [size] atomic path: delivered, unsignalled units */
    size_t peer_state_bytes; /* sig_mask, sent, inflight, sig_next, from_cnt, out_cnt,
                                writes_to_me, i_write_to and peer_ready: one block, in this
                                order */
    uint32_t reduced;        /* RS: units reduced */
    unsigned ops_out;        /* ops of this request not yet completed (wops it holds) */
    const void **srcs;       /* [size] reduction sources */
    /* The algorithm's own state for this request (ofccl__algo_priv). */
    void *priv;
    /* OFCCL_TRACE: per-peer times ([size], NULL when off) and the post time */
    struct ofccl__trace_peer *tr;
    uint64_t tr_t0;
    uint64_t finish_ns; /* tracing: when the finish step began (0: none) */

    /* The executor of the request's copies and reductions (exec.h), chosen
     * by the memory the algorithm runs on; the ticket of its latest work
     * still in flight, where it completes later. */
    const ofccl__exec_t *exec;
    uint64_t exec_ticket;
    bool exec_busy;
    /* The executor of the copies between the caller's buffers and staging
     * (io), chosen by the caller's memory kind: a device's where the caller
     * passes device memory that the algorithm runs on staged in host memory.
     * Its latest work in flight likewise. */
    const ofccl__exec_t *io;
    uint64_t io_ticket;
    bool io_busy;
    /* Stream-ordered (the caller's buffers are device memory): `stream` is
     * the caller's at post. The copies into staging go on it, then a mark;
     * the request is gated (announces nothing, moves nothing) until the
     * stream has run them, and the stream waits until the request's end
     * word (lent by the io executor) holds word_v, which the engine stores
     * when the request completes or fails. */
    bool stream_ord, gated;
    uint64_t mark;
    /* The input copied in by pieces (ofccl__exec_io_copy_in), a mark after
     * each on the caller's stream: the first piece's is the gate (`mark`),
     * in_mark[] the later ones', in_passed of them passed; in_ready bytes
     * of the input are in staging once the gate is open (SIZE_MAX: all). */
    uint64_t in_mark[OFCCL__IN_PIECES - 1];
    unsigned in_pieces, in_passed;
    size_t in_piece, in_ready;
    ofccl_stream_t stream;
    _Atomic uint64_t *word;
    void *word_dev;
    uint64_t word_v, word_handle;
};

/* ---- for algorithms ---- */
/* The algorithm's private state of request r (ofccl__algo_t.priv_*). */
static inline void *ofccl__algo_priv(const ofccl__req_t *r)
{
    return r->priv;
}
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
/* Where bytes [off, off+len) of peer p's announced region (r->peer_rk[p]) are
 * mapped here, for reading in place (caps.peer_map). */
int ofccl__coll_map_peer(ofccl__req_t *r, int p, uint64_t off, size_t len, const void **at);
/* Where peer p's second window (r->block bytes), as its descriptor announces
 * it, is mapped here; *at = NULL where p announced none. The pull
 * reduce-scatter's output, for writing (failing r where it cannot be
 * mapped); the all-gather's source, for reading (an error returned, r left
 * alone: a source that is gone means its owner's collective ended, and that
 * failure, reported by the owner's notice or exit, is the cause). */
int ofccl__coll_map_peer_out(ofccl__req_t *r, int p, char **at);
int ofccl__coll_map_peer_src(ofccl__req_t *r, int p, char **at);
/* Whether peer p's descriptor (in) announces a second window. */
bool ofccl__coll_peer_out_announced(const ofccl__req_t *r, int p);
/* The pull reduce-scatter's words for r's slot in `owner`'s control region
 * (this rank's, or the owner's mapped here): the counter of grains taken from
 * its block, or (through) the word where it says it is through. */
_Atomic uint64_t *ofccl__coll_share_word(const ofccl__req_t *r, int owner, bool through);
/* The all-gather take word of `from`'s block into `owner`, for r's slot. */
_Atomic uint64_t *ofccl__coll_take_word(const ofccl__req_t *r, int owner, int from);
/* "all-gather" or "reduce-scatter", for messages. */
const char *ofccl__coll_name(int coll);

/* ---- for the collective entry points ---- */
/* Claim the slot of the next sequence number (no side effect on failure). */
int ofccl__coll_begin(ofccl_comm_t *comm, int coll, ofccl__req_t **out);
/* Plan, announce and activate a request whose arguments, memory and algorithm
 * are set. */
int ofccl__coll_start(ofccl__req_t *r);
/* Complete a claimed request at once, with `status` (one rank: nothing to
 * exchange); it takes its sequence number like any other. */
void ofccl__coll_done_now(ofccl__req_t *r, int status);
/* Is a request with this algo_state still running on the communicator (or,
 * with `unfreed`, not yet freed by the caller: the watcher may complete a
 * request behind the caller's back, and its handle still names the state)? */
bool ofccl__coll_uses(const ofccl_comm_t *comm, const void *algo_state, bool unfreed);
/* The provider capabilities of the communicator's endpoint. */
const ofccl__prov_caps_t *ofccl__comm_caps(const ofccl_comm_t *comm);
/* Does the communicator's endpoint reach rank p through the local
 * shared-memory transport (a peer on this host, OFCCL_PEER_TRANSPORT)? */
bool ofccl__comm_peer_local(const ofccl_comm_t *comm, int p);
/* True the first time it is called with `bit` on this communicator (logging
 * a costly fallback once). */
bool ofccl__comm_note_once(ofccl_comm_t *comm, unsigned bit);

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
 * `why` says which, and *field which argument differs (enum ofccl__field; NONE
 * unless a mismatch). A descriptor is {seq, fingerprint, count, base, key, len,
 * offset, rank, premul scalar bits, layout hash, tensors, layout offset}. */
int ofccl__desc_check(const uint64_t d[OFCCL__DESC_WORDS], const ofccl__desc_expect_t *x, char *why,
                      size_t len, int *field);
/* Stream programs (OFCCL__ALGO_STREAM) send no descriptors: each rank
 * publishes its request's arguments where its peers read them (a region of
 * the algorithm's own), and each checks its peers' as descriptors are
 * checked, named alike. ofccl__args_words: r's words {fingerprint, count,
 * premul scalar bits, layout hash, tensors}; ofccl__args_check: rank
 * `from`'s words for the same collective against r's: 0, or the request
 * failed with OFCCL_ERR_MISMATCH naming the argument (the other ranks told). */
#define OFCCL__ARGS_WORDS 5
void ofccl__args_words(const ofccl__req_t *r, uint64_t w[OFCCL__ARGS_WORDS]);
int ofccl__args_check(ofccl__req_t *r, int from, const uint64_t w[OFCCL__ARGS_WORDS]);
/* The same for an eager header (x->need unused). */
int ofccl__eager_check(const uint64_t h[OFCCL__EAGER_WORDS], const ofccl__desc_expect_t *x,
                       char *why, size_t len, int *field);

/* Bucket layouts (layout.c): the hash of the tensors' counts; the bytes a
 * bucket request adds to its staging (its counts, and room for a peer's); and
 * publishing them (inside r->dst's registration) for a peer that must name a
 * difference. */
uint64_t ofccl__layout_hash(const ofccl_tensor_t *t, int n);
size_t ofccl__layout_bytes(const ofccl__req_t *r);
void ofccl__layout_publish(ofccl__req_t *r, void *area);

/* ---- eager slots (eager_slots.c) ---- */
/* May the next collective, moving `block` bytes per rank, go through the
 * eager slots (size, signal path, and what the slots' reuse rule needs)? */
bool ofccl__eager_possible(const ofccl_comm_t *comm, size_t block);
/* Our outgoing {header, payload} area for request slot `slot` and peer `p`. */
uint8_t *ofccl__eager_out(const ofccl_comm_t *comm, unsigned slot, int p);
/* Incoming area written by `from` for sequence number `seq`. */
const uint8_t *ofccl__eager_in(const ofccl_comm_t *comm, uint64_t seq, int from);
/* Write the header that travels with eager data. */
void ofccl__eager_header(const ofccl__req_t *r, uint8_t *area);
/* Can peer p's slot be stored into directly (mapped control regions)? */
bool ofccl__eager_mapped(const ofccl_comm_t *comm, int p);
/* Mapped: store {header, `len` bytes of payload} straight into peer p's
 * incoming slot, the header's mark last (release). */
void ofccl__eager_store(const ofccl__req_t *r, int p, const void *payload, size_t len);
/* Eager request r: 1 when every peer's {header, data} is in (0 otherwise), or an
 * error when a peer took the descriptor path for the same collective. */
int ofccl__eager_arrived(ofccl__req_t *r);
/* Has `from`'s eager {header, data} for request r arrived here? */
bool ofccl__eager_from_in(const ofccl__req_t *r, int from);

#endif
