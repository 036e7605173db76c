/*
 * Private structures of the core layer: context, communicator, windows and
 * the signal plumbing shared by the barrier and the collectives.
 */
#ifndef OFCCL_CORE_CORE_H
#define OFCCL_CORE_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "boot.h"
#include "config.h"
#include "err.h"
#include "exec_ops.h"
#include "log.h"
#include "ofccl.h"
#include "prov.h"
#include "topo.h"

#define OFCCL__NAME_MAX 256 /* bytes of endpoint name we accept from fi_getname */

/* ---- link classes of the chooser's cost model (links.c) ----
 * local: same-host peers through the local transport; fabric: peers through
 * the fabric provider. A context holds this rank's constants (configured by
 * OFCCL_LINK_*, or measured when it is created); a communicator holds the
 * ones its ranks agreed on at creation, the same on every rank. */
enum { OFCCL__LINK_LOCAL, OFCCL__LINK_FABRIC, OFCCL__LINK_CLASSES };
enum { OFCCL__LINK_MEASURED, OFCCL__LINK_DEFAULT, OFCCL__LINK_CONFIGURED };
typedef struct ofccl__link {
    uint32_t alpha_ns; /* latency of one transfer, ns */
    uint32_t mbps;     /* bandwidth, MB/s (10^6 bytes per second) */
    uint32_t source;   /* OFCCL__LINK_MEASURED / _DEFAULT / _CONFIGURED */
} ofccl__link_t;

struct ofccl_ctx {
    ofccl__config_t cfg;
    ofccl__log_t log;
    ofccl__err_t err;
    ofccl__boot_t *boot;
    ofccl__topo_t *topo;
    ofccl__prov_t *prov;
    char provider[64];    /* alias or prov_name asked of the provider layer */
    char choice_why[600]; /* why this provider and domain */
    int ncomms;
    ofccl_comm_t *comms;      /* list, for ofccl_progress(ctx) */
    uint32_t comm_seq;        /* communicators created so far: gives each one an id */
    struct ofccl_mem *memreg; /* ofccl_mem_register cache (pool.c) */
    ofccl_stats_t stats;
    /* lock.c: the lock every public call holds; progress.c: the progress
     * thread (OFCCL_PROGRESS_THREAD=1), or the watcher of stream-ordered
     * requests, started by the first one (watch_arm, installed by progress.c;
     * watch_cv wakes it, watch_kick says an abort wants it now) */
    pthread_mutex_t lock;
    int lock_init;
    pthread_t thread;
    int thread_on;
    atomic_int thread_stop;
    pthread_cond_t watch_cv;
    int watch_idle; /* the watcher sleeps until a stream-ordered request (under the lock) */
    int (*watch_arm)(struct ofccl_ctx *ctx, bool now, ofccl__err_t *e);
    atomic_int watch_kick;
    uint64_t watch_ns;     /* OFCCL_WATCH_US */
    char caller_cpus[128]; /* the creating thread's binding, kept free for it */
    /* Bumped (under the lock) whenever any communicator of the context moves:
     * a completion, a signal, a descriptor, a reduction. Waiting loops read it
     * without the lock to decide whether to nap (ofccl__idle_poll). */
    _Atomic uint64_t activity;
    uint64_t spin_ns;           /* OFCCL_SPIN_US */
    int peer_watch;             /* OFCCL_PEER_WATCH: ask the transport for exited peers */
    ofccl__fault_t fault;       /* OFCCL_FAULT (fault-injection builds) */
    unsigned kill_at;           /* SIGKILL this rank when it posts collective #kill_at (1-based) */
    struct ofccl__trace *trace; /* OFCCL_TRACE (trace.c); NULL: off */
    int dump_signal;            /* OFCCL_DUMP_SIGNAL: registered with dump.c */
    /* dead.c: ranks the launcher reported gone, by world (bootstrap) rank: a
     * static string naming the report, NULL while alive. Written by the
     * bootstrap's event thread, hence atomics; dead_count counts them. */
    _Atomic(const char *) *dead_why; /* [boot->size] */
    atomic_uint dead_count;
    int dead_watched;
    ofccl__link_t link[OFCCL__LINK_CLASSES]; /* this rank's cost-model constants (links.c) */
    /* The executors, one per memory kind (exec.h): the host's from creation. */
    ofccl__exec_reg_t execs;
};

/* ---- signals: 32 bits of immediate data, so they fit verbs and EFA ----
 * [31:28] kind, [27:20] communicator id (low 8 bits), [19:0] payload. The
 * receiver counts arrivals; it never relies on the order of writes. */
enum ofccl__sig_kind {
    OFCCL__SIG_BARRIER = 1,
    OFCCL__SIG_TEST = 2,  /* internal tests */
    OFCCL__SIG_COLL = 3,  /* collectives: data arrived, payload = slot | unit */
    OFCCL__SIG_DESC = 4,  /* collectives: descriptor arrived, payload = slot | sender */
    OFCCL__SIG_EAGER = 5, /* eager data arrived, payload = seq % 16 | sender << 4 */
    OFCCL__SIG_KINDS = 16,
};
#define OFCCL__SIG_PAYLOAD_BITS 20
#define OFCCL__SIG_PAYLOAD_MASK ((1u << OFCCL__SIG_PAYLOAD_BITS) - 1)

static inline uint32_t ofccl__sig_encode(unsigned kind, uint32_t comm_id, uint32_t payload)
{
    return (kind & 0xfu) << 28 | (comm_id & 0xffu) << 20 | (payload & OFCCL__SIG_PAYLOAD_MASK);
}

/* Split a received signal word; -1 when it cannot be one of ours (> 32 bits). */
static inline int ofccl__sig_decode(uint64_t data, unsigned *kind, uint32_t *id, uint32_t *payload)
{
    if (data > UINT32_MAX)
        return -1;
    *kind = (unsigned)(data >> 28) & 0xfu;
    *id = (uint32_t)(data >> 20) & 0xffu;
    *payload = (uint32_t)data & OFCCL__SIG_PAYLOAD_MASK;
    return 0;
}

typedef void (*ofccl__sig_sink_fn)(void *arg, uint32_t payload);

/* The control region of a communicator: words peers add to or write into.
 * After the fixed part come the collective engine's words (coll.h): outgoing
 * descriptors, incoming descriptors per slot and rank, and counters. */
#define OFCCL__CTRL_BARRIER 0       /* 32 words: arrivals per dissemination round (atomic path) */
#define OFCCL__CTRL_TEST 32         /* 32 words for internal tests */
#define OFCCL__CTRL_NOTICE_IN 64    /* a peer's failure notice (notice.c) */
#define OFCCL__CTRL_NOTICE_OUT 65   /* ours, the source of the writes that carry it */
#define OFCCL__CTRL_BAR_FAIL_IN 66  /* the number of a barrier a peer failed (barrier.c) */
#define OFCCL__CTRL_BAR_FAIL_OUT 67 /* ours, the source of the writes that carry it */
#define OFCCL__CTRL_FIXED 72

enum ofccl__signal_mode { OFCCL__SIGNAL_CQDATA = 1, OFCCL__SIGNAL_ATOMIC = 2 };

/* Every op posted by the core carries one of these as its op context; `cb`
 * (may be NULL) runs once when the op completes or fails. */
typedef struct ofccl__op {
    void (*cb)(struct ofccl__op *op, int status, const char *msg);
    /* A failure goes to `cb` only; it does not fail the communicator (ops
     * whose failure the caller handles, e.g. a diagnostic read). */
    int quiet;
} ofccl__op_t;

struct ofccl_comm {
    ofccl_ctx_t *ctx;
    int rank, size, local_rank, local_size;
    uint32_t id;
    int signal_mode; /* enum ofccl__signal_mode */
    ofccl__err_t err;
    int sticky;                             /* first fatal error: what later calls report */
    char sticky_msg[OFCCL__ERRMSG_LEN / 2]; /* its message */
    /* Where the failures so far begin (comm_state.c, positions): every call and
     * request at or after it fails with `sticky`; one before it runs on and
     * fails only for what it needs itself. 0 when a failure concerns
     * everything (an abort, a broken endpoint); UINT64_MAX while none. */
    uint64_t fail_pos;
    /* Peers this rank knows are gone (enum ofccl__gone), from a peer's
     * notice or the transport: a request fails for one only while it still
     * needs something from it. */
    uint8_t *gone;                        /* [size] */
    int ngone;                            /* how many are marked */
    char gone_msg[OFCCL__ERRMSG_LEN / 4]; /* the transport's words for the first one, */
    int gone_msg_of;                      /* which is this peer */

    ofccl__ep_t *ep;
    ofccl__ep_handlers_t handlers;
    _Atomic uint64_t *ctrl; /* ctrl_words words, registered */
    size_t ctrl_words;
    ofccl__mr_t *ctrl_mr;
    ofccl__rkey_t *peer_ctrl; /* [size] */
    /* [size] where peers' control regions are mapped here (caps.peer_map), so
     * descriptors and eager data are stored straight into them; NULL: written
     * through the ep. */
    _Atomic uint64_t **peer_ctrl_at;
    int nwins; /* open windows (lib/coll/window.c): destroy is BUSY until 0 */
    /* Peers resolved on demand (OFCCL_BOOT_EXCHANGE=lazy, peers.c): nothing
     * is posted to peer p before resolved[p], when its record was read from
     * `pub`, checked, and its endpoint inserted. NULL: every peer was
     * resolved when the communicator was created. */
    uint8_t *resolved; /* [size] */
    int nresolved;     /* peers other than this rank resolved so far */
    struct ofccl__boot_pub *pub;
    void *setup_mine; /* this rank's record, which peers' must agree with */
    /* host names for messages: rank r runs on host_name[host_of[r]] */
    int *host_of;          /* [size] */
    int *world_of;         /* [size]: each member's rank in the bootstrap's job */
    char (*host_name)[64]; /* [nhosts] (allocated [size]) */
    int nhosts;
    /* Hosts by identity (what decides the transport per peer), numbered by
     * their lowest rank: rank r is the node_idx[r]-th rank of host node_of[r].
     * node_width: ranks per host when every host has as many, else 0; then
     * node_rank[h * node_width + i] is the i-th rank of host h. */
    int *node_of, *node_idx, *node_rank; /* [size] each */
    int nnodes, node_width;
    /* The cost model's constants, agreed by every rank at creation (links.c):
     * configured ones equal everywhere, measured ones the median over ranks. */
    ofccl__link_t link[OFCCL__LINK_CLASSES];

    struct {
        ofccl__sig_sink_fn fn;
        void *arg;
    } sinks[OFCCL__SIG_KINDS];
    uint64_t corrupt_signals;

    /* barrier: dissemination over the fabric; arrivals counted per round */
    uint64_t barrier_seq;
    uint64_t barrier_arrived[32];
    unsigned ops_pending; /* our ops accepted and not completed */

    atomic_int aborted;     /* set by ofccl_comm_abort from any thread */
    ofccl__op_t barrier_op; /* a failed barrier's words to its peers (barrier.c) */
    ofccl__op_t notice_op;  /* failure notices (notice.c) */
    unsigned notices_out;
    uint64_t notice_sent_seq;      /* the collective our last notice was about */
    int notice_in, notice_culprit; /* a peer's notice, once read */
    int notice_field;              /* a mismatch notice's field (enum ofccl__field), 0: none */
    uint64_t notice_seq;           /* the collective it is about (the lowest of those read) */
    uint64_t notice_word;          /* the word last read, so a changed one is read again */
    int notice_first;              /* the communicator failed first on that notice */
    uint64_t notice_ns;            /* when it was read */
    uint64_t timeout_ms;           /* 0 = none */
    /* The caller's stream (ofccl_comm_set_stream): collectives on device
     * memory are ordered on it (NULL: the legacy default stream). */
    ofccl_stream_t stream;
    /* Every rank's transport registers its GPU's memory (CUDA IPC on the
     * local transport, FI_HMEM on a fabric), agreed at the communicator's
     * first GPU call: device buffers the peer class does not serve are then
     * registered for the request and moved in place. */
    bool dev_reg;
    /* And every peer's writes into this GPU land before their signal (the
     * local transport publishes a write once its copy is done): a
     * reduce-scatter on GPU memory is summed there, by the GPU, and
     * algorithms that pass on what they received (ring, chain) may run. */
    bool dev_landed;

    struct ofccl__coll_state *coll; /* the collective engine (coll.h) */
    /* GPU state (lib/coll/gpu), set up on first GPU use, and what tears it
     * down when the communicator is destroyed. */
    struct ofccl__gcomm *gpu;
    void (*gpu_free)(ofccl_comm_t *comm);
    struct ofccl__pool *pool; /* staging and user pool buffers (pool.c) */
    ofccl_comm_t *next;       /* the context's list of communicators */
};

/* ---- context internals ---- */
/* Resolve "auto" and choose a domain; pure enough for ofccl_info to call it
 * without joining a job. `all_local`: every rank shares this host. */
int ofccl__ctx_choose(const ofccl__config_t *cfg, ofccl__topo_t *topo, bool all_local, int nranks,
                      const ofccl__log_t *lg, char *provider, size_t plen, char *domain,
                      size_t dlen, char *why, size_t whylen, ofccl__err_t *e);

int ofccl__fault_parse(const char *spec, int rank, ofccl__fault_t *f, unsigned *kill_at,
                       ofccl__err_t *e);
/* Cost-model links (links.c). Parse an OFCCL_LINK_* value ("auto" or
 * "<alpha_us>:<GB/s>"); *configured is false for auto. */
int ofccl__link_parse(int id, const char *text, ofccl__link_t *out, bool *configured,
                      ofccl__err_t *e);
/* One copy rate of this process, MB/s: the best of a few 4 MiB memcpys, a few ms. */
uint32_t ofccl__link_copy_mbps(void);
/* This rank's constants for ctx->link: configured, else measured or defaults
 * (`link_bps`: the fabric provider's link speed in bits/s, 0 when unknown;
 * `measure_local`: measure the copy rate, else take the default). */
int ofccl__links_init(ofccl_ctx_t *ctx, uint64_t link_bps, bool measure_local, ofccl__err_t *e);
/* A communicator's constants from every rank's (`all[r]`, r < comm->size):
 * OFCCL_MISMATCH naming the setting and the ranks where a configured value
 * differs, else comm->link = the configured value or the median of the
 * measured ones, the same on every rank. */
int ofccl__links_agree(ofccl_comm_t *comm, const ofccl__link_t (*all)[OFCCL__LINK_CLASSES]);
/* "auto" or "<alpha_us>:<GB/s>", as OFCCL_LINK_* takes it. */
void ofccl__link_format(const ofccl__link_t *l, char *buf, size_t len);

/* Live handles (handles.c): a destroyed context or communicator is not live. */
int ofccl__handle_add(const void *h);
void ofccl__handle_remove(const void *h);
int ofccl__handle_live(const void *h);
/* Start of a public call on `h`: NULL -> INVALID_ARG; destroyed -> STATE. */
#define OFCCL__CHECK_HANDLE(h)                                                                     \
    do {                                                                                           \
        if ((h) == NULL)                                                                           \
            return OFCCL_ERR_INVALID_ARG;                                                          \
        if (!ofccl__handle_live(h))                                                                \
            return OFCCL_ERR_STATE;                                                                \
    } while (0)
void ofccl__ctx_lock(ofccl_ctx_t *ctx);
void ofccl__ctx_unlock(ofccl_ctx_t *ctx);
/* Body of a public entry point: run `call` under the context lock. */
#define OFCCL__LOCKED(ctx, call)                                                                   \
    do {                                                                                           \
        ofccl_ctx_t *ctx_ = (ctx);                                                                 \
        int rc_;                                                                                   \
        ofccl__ctx_lock(ctx_);                                                                     \
        rc_ = (call);                                                                              \
        ofccl__ctx_unlock(ctx_);                                                                   \
        return rc_;                                                                                \
    } while (0)
int ofccl__progress_start(ofccl_ctx_t *ctx, ofccl__err_t *e);
/* Something moved (caller holds the lock: a plain load and store, no RMW). */
static inline void ofccl__ctx_moved(ofccl_ctx_t *ctx)
{
    atomic_store_explicit(&ctx->activity,
                          atomic_load_explicit(&ctx->activity, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* How a waiting loop paces itself: full speed while anything in the context
 * moves, a yield now and then once it has waited 50 us (oversubscribed ranks
 * must let their peers run), and after OFCCL_SPIN_US without progress, naps of
 * 1/16 of the time waited so far (20 us to 1 ms). Call it every few polls,
 * without the lock. */
typedef struct ofccl__idle {
    uint64_t seen;     /* ctx->activity at the last change */
    uint64_t since_ns; /* when it last changed (0: not yet read) */
    uint64_t start_ns; /* first call */
} ofccl__idle_t;
void ofccl__idle_poll(ofccl_ctx_t *ctx, ofccl__idle_t *st);
void ofccl__progress_stop(ofccl_ctx_t *ctx);
/* A stream-ordered request was posted (the caller holds the lock): start the
 * watcher (progress.c), or wake it where it sleeps for want of one, or
 * (`now`: a request whose steps the host runs) wherever it sleeps. 0, or why
 * it cannot run. */
int ofccl__watch_arm(ofccl_ctx_t *ctx, bool now, ofccl__err_t *e);
/* Wake the watcher now, from any thread, without the lock (an abort). */
void ofccl__watch_kick(ofccl_ctx_t *ctx);

/* ---- communicator internals ---- */
/* How the ranks of a communicator being created exchange what they need:
 * through the bootstrap (world) or the parent communicator's fabric (split).
 * Every rank contributes `len` (<= slot) bytes (0: "my side failed"); on
 * return out[r * slot] holds rank r's bytes and lens[r] their length. */
typedef struct ofccl__xchg {
    void *arg;
    int (*allgather)(void *arg, const void *in, size_t len, void *out, size_t slot, size_t *lens,
                     ofccl__err_t *e);
    /* Records read on demand instead (world communicator under
     * OFCCL_BOOT_EXCHANGE=lazy; NULL: all-gather them): publish `len` bytes,
     * collectively; *out reads any rank's (ofccl__boot_get). */
    int (*publish)(void *arg, const void *in, size_t len, size_t slot, struct ofccl__boot_pub **out,
                   ofccl__err_t *e);
    /* With publish: the status exchange as a reduction (ofccl__boot_allreduce),
     * n words per rank instead of N·16 bytes. */
    int (*allreduce)(void *arg, const uint64_t *in, uint64_t *out, int n, const uint8_t *ops,
                     ofccl__err_t *e);
} ofccl__xchg_t;

typedef struct ofccl__comm_init {
    const char *what;           /* the public call, for messages */
    int rank, size;             /* in the new communicator */
    int local_rank, local_size; /* 0 / 0: count the ranks that share this host */
} ofccl__comm_init_t;

/* Create a communicator, collectively over the ranks `x` reaches: either
 * every rank gets it, or every rank gets an error naming the rank whose side
 * failed (then ctx's last error says so). */
int ofccl__comm_create(ofccl_ctx_t *ctx, const ofccl__comm_init_t *init, const ofccl__xchg_t *x,
                       ofccl_comm_t **out);
/* Take part in the exchanges of a communicator's creation without joining it
 * (a split's OFCCL_UNDEFINED color). */
int ofccl__comm_create_none(ofccl_ctx_t *ctx, const ofccl__xchg_t *x);
/* Before anything is posted to `peer`: read, check and insert its record if
 * it is not resolved yet (peers.c). 0, or the communicator's error naming the
 * peer. */
int ofccl__comm_resolve(ofccl_comm_t *comm, int peer);
/* Every peer marked in a[] or b[] ([size] each; b may be NULL). */
int ofccl__comm_resolve_set(ofccl_comm_t *comm, const uint8_t *a, const uint8_t *b);
/* Peers other than this rank whose records are resolved (all where resolved is NULL). */
int ofccl__comm_peers_resolved(const ofccl_comm_t *comm);
static inline bool ofccl__comm_resolved(const ofccl_comm_t *comm, int peer)
{
    return comm->resolved == NULL || comm->resolved[peer] != 0;
}
/* Name of the host rank `rank` runs on, for messages ("?" if unknown). */
const char *ofccl__comm_host(const ofccl_comm_t *comm, int rank);
/* ---- positions: the order of a communicator's calls (comm_state.c) ----
 * Collective s is at 2s + 1. A call that is not a collective (a barrier, a
 * pool allocation, a window) made while s is the next collective to be posted
 * is at 2s: after s - 1, before s. A failure at a position covers it and every
 * later one, so a collective every rank completed before another failed is
 * never reported failed (docs/reliability.md). */
static inline uint64_t ofccl__pos_coll(uint64_t seq)
{
    return 2 * seq + 1;
}
/* The sequence number the next collective posted will take. */
uint64_t ofccl__comm_next_seq(const ofccl_comm_t *comm);
/* The position of a call made now (not a collective). */
uint64_t ofccl__comm_pos_now(const ofccl_comm_t *comm);
/* Record a fatal error that concerns everything: the communicator reports it
 * from every later call, and every request still running fails with it.
 * Other codes (INVALID_ARG, ...) are only this call's error. */
int ofccl__comm_fail(ofccl_comm_t *comm, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for a failure at position `pos`: what comes before it runs on. */
int ofccl__comm_fail_at(ofccl_comm_t *comm, uint64_t pos, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The sticky error if the failures so far cover position `pos` (an abort
 * request becomes one here), else 0. */
int ofccl__comm_failed_at(ofccl_comm_t *comm, uint64_t pos);
/* The same without looking at the abort flag (the progress loop's check). */
static inline int ofccl__comm_covers(const ofccl_comm_t *comm, uint64_t pos)
{
    return comm->sticky != 0 && pos >= comm->fail_pos ? comm->sticky : 0;
}
/* Peers found gone without a launcher's word: a peer's notice named them, or
 * the transport can no longer reach them (enum ofccl__gone). */
enum ofccl__gone { OFCCL__GONE_EXITED = 1, OFCCL__GONE_SILENT = 2, OFCCL__GONE_UNREACHABLE = 3 };
static inline int ofccl__comm_gone(const ofccl_comm_t *comm, int p)
{
    return comm->gone != NULL ? comm->gone[p] : 0;
}
void ofccl__comm_set_gone(ofccl_comm_t *comm, int p, int why);
/* Start of a call that needs a usable communicator, at position `pos`
 * (ofccl__comm_pos_now, or a collective's): 0, or its sticky error with a
 * message naming `what`, the communicator and the first error (or the abort).
 * A peer's notice read earlier is taken into account first. */
int ofccl__comm_check_at(ofccl_comm_t *comm, const char *what, uint64_t pos);
/* The same for a call made now that needs every member (a barrier, an
 * exchange): a member the launcher reports gone fails it too. */
int ofccl__comm_check(ofccl_comm_t *comm, const char *what);
/* 0, or the sticky error where it covers everything (an abort request
 * becomes one here). */
int ofccl__comm_usable(ofccl_comm_t *comm);
/* Drive the endpoint once (bounded); returns <0 on an error that concerns
 * everything (a broken endpoint, an abort). A peer's notice is only read. */
int ofccl__comm_progress(ofccl_comm_t *comm);
void ofccl__comm_set_sink(ofccl_comm_t *comm, unsigned kind, ofccl__sig_sink_fn fn, void *arg);
/* Send a signal to `peer`: remote CQ data, or an atomic add of 1 to the peer's
 * control word `ctrl_word` (atomic mode). Non-blocking; retries AGAIN by
 * progressing, bounded by the deadline. */
int ofccl__comm_signal(ofccl_comm_t *comm, int peer, unsigned kind, uint32_t payload,
                       unsigned ctrl_word, uint64_t deadline_ns);
/* Deadline for a call started at `now_ns` (UINT64_MAX when OFCCL_TIMEOUT_MS = 0). */
uint64_t ofccl__comm_deadline(const ofccl_comm_t *comm, uint64_t now_ns);
/* Write this rank's control word `src_word` into peer's word `dst_word`
 * (best effort, for failure words): a store where the peer's region is
 * mapped here (0), else an RMA write whose completion goes to `op` (1, the
 * write is in flight), or an error (the peer is not resolved, or the write
 * could not be posted). */
int ofccl__ctrl_put_word(ofccl_comm_t *comm, int peer, unsigned src_word, unsigned dst_word,
                         ofccl__op_t *op);
/* Wait until every op this communicator posted has completed. */
int ofccl__comm_quiesce(ofccl_comm_t *comm, uint64_t deadline_ns, const char *what);
/* Keep the endpoint progressing until `deadline_ns` whatever is pending:
 * what the provider owes peers for their writes that landed here goes out
 * before the endpoint closes. */
void ofccl__comm_linger(ofccl_comm_t *comm, uint64_t deadline_ns);
/* The op context of ops whose completion needs no action. */
extern ofccl__op_t ofccl__comm_op_plain;

/* ---- failure notices (notice.c) ---- */
enum ofccl__notice_reason {
    OFCCL__NOTICE_EXITED = 1,   /* the culprit's process has exited */
    OFCCL__NOTICE_SILENT = 2,   /* it stopped responding (a deadline passed) */
    OFCCL__NOTICE_MISMATCH = 3, /* it posted a collective that differs */
};
/* Which argument of a collective differs across ranks: named in messages and
 * carried by mismatch notices, so a rank told of it names it too. */
enum ofccl__field {
    OFCCL__FIELD_NONE = 0, /* not known (say "arguments") */
    OFCCL__FIELD_OPERATION,
    OFCCL__FIELD_DTYPE,
    OFCCL__FIELD_REDOP,
    OFCCL__FIELD_ALGO,
    OFCCL__FIELD_CALL,
    OFCCL__FIELD_ROOT,
    OFCCL__FIELD_SCALAR,
    OFCCL__FIELD_ORDER,
    OFCCL__FIELD_COUNT,
    OFCCL__FIELD_TENSORS,
    OFCCL__FIELD_LAYOUT,
    OFCCL__FIELD_PATH,
    OFCCL__FIELDS
};
const char *ofccl__field_name(int field);
/* Tell every rank but `culprit` and `skip` (-1: none) that `culprit` failed
 * for `reason` in collective `seq` (best effort; again only for an earlier
 * collective than the last notice sent or read). */
void ofccl__notice_send(ofccl_comm_t *comm, uint64_t seq, int reason, int culprit, int skip);
/* The same for a mismatch: `culprit` posted collective `seq` with a `field`
 * that differs. */
void ofccl__notice_mismatch(ofccl_comm_t *comm, uint64_t seq, int culprit, int field);
/* Notices of ours still in flight. */
bool ofccl__notice_busy(const ofccl_comm_t *comm);
/* Read a peer's notice, if one arrived (or changed): only recorded here.
 * Running requests decide from it (ofccl__notice_concerns), calls when they
 * start (ofccl__notice_fail). */
void ofccl__notice_check(ofccl_comm_t *comm);
/* Fail the communicator at the notice's collective, for a notice read
 * earlier: the sticky error, 0 when there is no notice. */
int ofccl__notice_fail(ofccl_comm_t *comm);
/* Has a notice about collective `seq` or an earlier one gone out from here,
 * or a mismatch notice come in (so every rank has been told)? */
bool ofccl__notice_told(const ofccl_comm_t *comm, uint64_t seq);
/* The rank a notice read here names, or -1. */
int ofccl__notice_culprit(const ofccl_comm_t *comm);
/* Does the notice concern collective `seq`: it is about `seq` or an earlier
 * one, or (a rank that exited or went silent) `seq` still needs something
 * from its culprit (`owes_culprit`, the caller's account)? */
bool ofccl__notice_concerns(const ofccl_comm_t *comm, uint64_t seq, bool owes_culprit);
/* The notice a running request it concerns must fail for (0: none): EXITED
 * sets *culprit (the rank whose exit is the cause), SILENT means "stop
 * waiting now"; `buf` gets the words that begin its message. */
int ofccl__notice_cause(const ofccl_comm_t *comm, int *culprit, char *buf, size_t len);
/* ---- ranks the launcher reports gone (dead.c) ---- */
/* Follow the bootstrap's failure events (where it has them) / stop. */
void ofccl__dead_start(ofccl_ctx_t *ctx);
void ofccl__dead_stop(ofccl_ctx_t *ctx);
/* How the launcher reported member p gone (a static string), or NULL. */
const char *ofccl__dead_source(const ofccl_comm_t *comm, int p);
/* "rank p (world rank w) on host has exited, reported by the launcher (source)". */
void ofccl__dead_name(const ofccl_comm_t *comm, int p, const char *source, char *buf, size_t len);
/* "rank p on host has exited (a peer saw it go and told this rank)", or
 * another account of why p is marked gone (ofccl__comm_gone). */
void ofccl__dead_gone_name(const ofccl_comm_t *comm, int p, char *buf, size_t len);
/* Is member p known gone (the launcher, a peer's notice, the transport, the
 * process watch)? Then `buf` says so, and *code is the error to report
 * (TIMEOUT for a rank that went silent, else REMOTE_ERROR). */
bool ofccl__dead_known(const ofccl_comm_t *comm, int p, int *code, char *buf, size_t len);
/* At the start of a call that needs every member: a member known gone (the
 * launcher, a notice, the transport, the process watch) fails the
 * communicator from position `pos` on (sticky REMOTE_ERROR, or TIMEOUT for
 * one that went silent, naming it). Returns the sticky error, 0 when none. */
int ofccl__dead_fail(ofccl_comm_t *comm, uint64_t pos);

#endif
