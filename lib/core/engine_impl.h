/*
 * Private to lib/core: the engine's state in a communicator and what its files
 * (engine.c, verdict.c, peer_access.c, desc.c, wop.c, eager_slots.c, ctrl.c,
 * report.c, layout.c) share.
 */
#ifndef OFCCL_CORE_ENGINE_IMPL_H
#define OFCCL_CORE_ENGINE_IMPL_H

#include "engine.h"

#define OFCCL__HISTORY 16
typedef struct ofccl__hist {
    uint64_t seq;
    int coll;
    const char *algo;
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
    unsigned notes;      /* ofccl__comm_note_once bits */
    uint8_t *desc_flag;  /* [SLOTS * size] cqdata path: descriptor from rank has landed */
    uint64_t *desc_seen; /* [SLOTS * size] atomic path: per slot/rank counter folded */
    /* Write-op contexts, shared by the requests and grown by blocks as the
     * peers in use need them (wop.c); none is ever moved or freed before
     * the communicator. */
    ofccl__wop_t *wop_free;
    struct ofccl__wop_block *wop_blocks;
    size_t nwops; /* allocated */
} ofccl__coll_state_t;

/* ---- the control region's layout (ctrl.c), in words ---- */
size_t ofccl__ctrl_desc_out(unsigned slot);
size_t ofccl__ctrl_desc_in(int size, unsigned slot, int from);
size_t ofccl__ctrl_desc_cnt(int size, unsigned slot, int from);
size_t ofccl__ctrl_arr_cnt(int size, unsigned slot, int from);
size_t ofccl__ctrl_take(int size, unsigned slot, int from);
size_t ofccl__ctrl_claim(int size, unsigned slot);
size_t ofccl__ctrl_through(int size, unsigned slot);
size_t ofccl__ctrl_eager_out(const ofccl_comm_t *comm, unsigned slot, int p);
size_t ofccl__ctrl_eager_in(const ofccl_comm_t *comm, uint64_t seq, int from);
size_t ofccl__ctrl_eager_slot_bytes(int size, size_t eager_bytes);
/* Byte offset of an incoming eager area inside a peer's control region. */
uint64_t ofccl__eager_in_offset(const ofccl_comm_t *comm, uint64_t seq, int from);

/* ---- writes and signals (wop.c) ---- */
/* Write-op contexts are allocated this many at a time. */
#define OFCCL__WOP_BLOCK 64
/* A write-op context for r, or NULL to wait: r already holds as many as the
 * peers it uses may need, or none could be allocated (then r has failed with
 * NO_MEMORY where it holds none to wait for). */
ofccl__wop_t *ofccl__wop_get(ofccl__req_t *r);
/* Write-op contexts allocated for the communicator (ofccl_stats_t.op_contexts). */
uint64_t ofccl__coll_op_contexts(const ofccl_comm_t *comm);
/* Free the communicator's write-op contexts (coll_fini). */
void ofccl__wops_free(ofccl__coll_state_t *cs);
/* The request's peers as lists (to, from, awaiting) from its plan's tables. */
void ofccl__peer_lists(ofccl__req_t *r);
/* Post one provider op for request r; `kind` 0 = write(+data), 1 = atomic add. */
int ofccl__wop_post(ofccl__req_t *r, ofccl__wop_t *w, int kind, const void *src,
                    const ofccl__mr_t *mr, size_t len, const ofccl__rkey_t *rk, uint64_t roff,
                    uint64_t data);
/* Atomic path: signal delivered writes in order; count landed descriptors
 * at the peers; fold per-writer counters into unit arrivals. */
int ofccl__sig_pump(ofccl__req_t *r);
int ofccl__desc_pump(ofccl__req_t *r);
void ofccl__arrivals_fold(ofccl__req_t *r);
void ofccl__on_coll_signal(void *arg, uint32_t payload);

/* ---- descriptors (desc.c) ---- */
uint64_t ofccl__scalar_bits(const ofccl__req_t *r);
uint64_t ofccl__fingerprint(const ofccl__req_t *r);
bool ofccl__desc_landed(const ofccl__req_t *r, int from);
/* Do we write to `from` and has its descriptor neither been taken nor landed
 * (it has not posted the collective yet)? */
bool ofccl__desc_owed(const ofccl__req_t *r, int from);
int ofccl__desc_send(ofccl__req_t *r);
int ofccl__desc_take(ofccl__req_t *r);
void ofccl__on_desc_signal(void *arg, uint32_t payload);

/* ---- eager slots (eager_slots.c) ----
 * An eager header is {from, fingerprint, count, seq + 1}: the last word marks
 * the data as present, never what the slot's previous user (seq - 16) or fresh
 * memory holds. On the mapped path it is stored last, with release. At 32
 * bytes, a payload of up to 32 shares the mark's cache line. */
#define OFCCL__EAGER_MARK 3
/* A rank that sent collective `seq` eagerly (to a request on the descriptor
 * path: a mismatch), or -1. */
int ofccl__eager_sender(const ofccl_comm_t *comm, uint64_t seq);
void ofccl__on_eager_signal(void *arg, uint32_t payload);
/* Mapped path: has every writer's {header, data} for request r been stored
 * here? Acquire loads of the marks: safe without the context lock. */
bool ofccl__eager_all_marked(const ofccl__req_t *r);

/* ---- bucket layouts (layout.c) ---- */
/* A peer's hash differs: a message naming the first tensor that differs (read
 * from the peer; `why`, the hash message, when that cannot be done). */
const char *ofccl__layout_diff(ofccl__req_t *r, int p, const uint64_t d[OFCCL__DESC_WORDS],
                               char *why, size_t len);
/* Our layout is still on its way to a peer that will name the difference. */
bool ofccl__layout_busy(const ofccl_comm_t *comm);

/* ---- reports (report.c) ----
 * Record a collective in the history when it starts (done = 0) and when it
 * completes (done = 1); name the ranks a stuck request waits for (into buf;
 * `only` >= 0: that rank alone, the one whose exit failed it);
 * dump the history and the stuck request's per-peer state as warnings. */
void ofccl__coll_history(const ofccl__req_t *r, int done);
void ofccl__coll_waiting_for(const ofccl__req_t *r, int only, char *buf, size_t len);
void ofccl__coll_dump_history(const ofccl__req_t *stuck);
/* The lowest rank that still owes a stuck request a descriptor or data (not
 * merely our writes in flight to it), or -1. */
int ofccl__coll_first_owing(const ofccl__req_t *r);
/* Does rank p still owe request r a descriptor or data? */
bool ofccl__coll_owes(const ofccl__req_t *r, int p);

/* ---- failures from outside (verdict.c) ----
 * Fail r where a peer it needs is gone (the launcher's word, a peer's notice,
 * the pid watch, the transport) or its deadline passed, naming the cause and
 * the ranks it waits for, and tell the others. Called with the clock checks. */
void ofccl__coll_check_failed(ofccl__req_t *r);

/* ---- the engine in a communicator (engine.c), for comm.c, wait.c, progress.c ---- */
int ofccl__coll_init(ofccl_comm_t *comm);
void ofccl__coll_fini(ofccl_comm_t *comm);
/* Control-region words the engine needs for `size` ranks. */
size_t ofccl__coll_ctrl_words(int size, size_t eager_bytes);
/* Drive every active request of the communicator once. check_clock = false
 * skips the deadline and dead-peer checks: for spinning waits, which pass
 * true every so often. */
int ofccl__coll_progress(ofccl_comm_t *comm, bool check_clock);
/* Drive request r alone, without the endpoint or the clock: for a wait whose
 * request needs nothing more from them (its mapped eager data is all in). */
void ofccl__coll_progress_req(ofccl__req_t *r);
/* May a wait watch request r's eager marks without the lock? */
bool ofccl__coll_lockfree_watch(const ofccl__req_t *r);

#endif
