/*
 * Private to lib/coll/gpu: a communicator's GPU state (gcomm.c), its
 * symmetric GPU pool (gpool.c) and its stream-ordered collectives (gcoll.c).
 *
 * The GPU peer class: every rank of the communicator on one host, each with
 * its own GPU, every pair of GPUs able to reach each other (P2P). Data moves
 * GPU to GPU through CUDA IPC mappings of the peers' pool segments, by ofccl's
 * copy kernel (OFCCL_GPU_SMS SMs) or by the copy engines (OFCCL_GPU_SMS=0).
 * Ranks signal each other with 64-bit flags in host shared memory: each rank
 * has a flag region (the local transport's shared memory, mapped by every
 * peer, registered with CUDA in every process), which peers' streams write
 * and its own stream waits on; so the host can release its own stream (an
 * abort value) when a peer dies or a deadline passes. Where the peer class
 * does not fit (a rank on another host, no P2P, no shared memory), the host
 * engine stages GPU buffers through host memory inside the request
 * (stream-ordered: lib/core/exec.c), logged once with why.
 */
#ifndef OFCCL_COLL_GPU_GCOMM_H
#define OFCCL_COLL_GPU_GCOMM_H

#include "coll.h"
#include "gpu/gpu.h"

/* A flag written to release a wait that will never be satisfied (abort). */
#define OFCCL__GFLAG_ABORT (UINT64_MAX >> 1)
#define OFCCL__GPU_SLOTS OFCCL__SLOTS

/* Words of a rank's flag region (n = communicator size). */
enum {
    OFCCL__GF_ABORT = 0,    /* nonzero: this rank gave up; its kernel copies nothing more */
    OFCCL__GF_HDR = 8,      /* then READY[n], DONE[n], SENT[n], FP[SLOTS][FP_WORDS] */
    OFCCL__GF_FP_WORDS = 8, /* a request's published arguments (gcoll.c) */
};
static inline size_t ofccl__gf_ready(int from)
{
    return OFCCL__GF_HDR + (size_t)from;
}
static inline size_t ofccl__gf_done(int n, int from)
{
    return OFCCL__GF_HDR + (size_t)n + (size_t)from;
}
static inline size_t ofccl__gf_sent(int n, int to)
{
    return OFCCL__GF_HDR + 2 * (size_t)n + (size_t)to;
}
static inline size_t ofccl__gf_fp(int n, unsigned slot)
{
    return OFCCL__GF_HDR + 3 * (size_t)n + (size_t)slot * OFCCL__GF_FP_WORDS;
}
static inline size_t ofccl__gf_words(int n)
{
    return ofccl__gf_fp(n, OFCCL__GPU_SLOTS);
}

enum ofccl__gpu_path {
    OFCCL__GPATH_UNKNOWN = 0,
    OFCCL__GPATH_P2P = 1,   /* the GPU peer class */
    OFCCL__GPATH_STAGED = 2 /* through host memory (ofccl__gcomm_t.why says why) */
};

/* A peer's memory mapped here for the caller's registrations (greg.c):
 * one per peer allocation (CUDA IPC maps an allocation once per process),
 * shared by the registrations inside it. */
typedef struct ofccl__gmap {
    int peer, kind; /* kind: OFCCL__GPU_SHARE_IPC or _VMM */
    uint64_t buffer_id;
    char *base;
    size_t len;
    int refs;
    struct ofccl__gmap *next;
} ofccl__gmap_t;

/* A segment of the symmetric pool, or a registration of the caller's GPU
 * memory: the same size on every rank, each rank's own memory, mapped into
 * every peer. Numbered in the order every rank made them. */
typedef struct ofccl__gseg {
    size_t len;
    char *base;  /* this rank's */
    char **peer; /* [size]: each rank's, mapped here (this rank's own: base) */
    uint32_t serial;
    bool user;           /* the caller's memory (ofccl_gpu_register): not freed here */
    bool engine;         /* registered with the transport (the host engine's GPU path) */
    uint64_t buffer_id;  /* user: its allocation's id, to see it freed under us */
    ofccl__gmap_t **map; /* user: [size] the peers' mappings */
    struct ofccl__gseg *next;
} ofccl__gseg_t;

/* A buffer handed out of a segment (bump allocation, reused by size once
 * freed: every rank allocates and frees in the same order, so a buffer has
 * the same offset everywhere). */
typedef struct ofccl__gbuf {
    ofccl__gseg_t *seg;
    size_t off, len;
    bool free;
    struct ofccl__gbuf *next;
} ofccl__gbuf_t;

typedef struct ofccl__gcomm {
    ofccl_comm_t *comm;
    ofccl__gpu_t *g;
    int dev;    /* this rank's device */
    bool ready; /* set up (collective, on the first GPU call) */
    int path;   /* enum ofccl__gpu_path */
    char why[320];
    int sms;            /* OFCCL_GPU_SMS: 0 = copy engines only */
    size_t chain_bytes; /* OFCCL_GPU_CHAIN_BYTES: the broadcast chain's chunk, 0 = by size */
    /* flags (P2P): every rank's region, mapped here and registered with CUDA */
    void *region;
    size_t region_len;
    ofccl__mr_t *region_mr;
    _Atomic uint64_t **fh; /* [size] host pointers */
    char **fd;             /* [size] device pointers */
    /* the symmetric pool, and the caller's registered memory (greg.c) */
    ofccl__gseg_t *segs;
    ofccl__gseg_t *regs;
    ofccl__gmap_t *maps;
    uint32_t nsegs;         /* segments and registrations made (their serials) */
    uint64_t nregs;         /* registrations tried (the descriptors' tag) */
    struct ofccl__gfd *box; /* where peers' descriptors arrive, opened on first use */
    ofccl__gbuf_t *bufs;
    ofccl__gbuf_t *scratch; /* staged outputs land here (gpool_scratch) */
    size_t pool_bytes, budget;
    /* ofccl's own per-peer streams for the copy engines, forked from the
     * caller's (comm->stream) with an event */
    ofccl__gpu_stream_t *ce; /* [size] */
    ofccl__gpu_event_t fork;
    /* per request slot: the event recorded at its end on the caller's stream,
     * and what its progress and abort need */
    ofccl__gpu_event_t done[OFCCL__GPU_SLOTS];
    struct ofccl__grq {
        int coll;
        int root;        /* broadcast */
        size_t off;      /* the output's offset in every rank's segment */
        uint32_t serial; /* that segment's (or registration's) number */
        char **peer;     /* the segment's mappings (its `peer` array) */
        void *stage;     /* the caller's output where it is not pool memory, else NULL */
        bool ce;         /* moved by the copy engines */
        bool chain;      /* a broadcast along the chain (else the root pushes) */
        bool released;   /* the abort values are written */
        bool bucket;     /* r->tensors packed in before, unpacked after (bucket.c) */
        const struct ofccl_push_plan *plan; /* a weight push bucket's plan (gpush.c) */
        /* Whom this rank writes to and is written by, where the program
         * says (the weight push's plan); NULL: every program's rule (gq.c). */
        void (*roles)(const ofccl__req_t *r, int p, bool *to_p, bool *from_p);
        ofccl__req_t *req;
    } rq[OFCCL__GPU_SLOTS];
    ofccl__gpu_event_t last; /* the previous collective's end: the next one waits for it */
    int *peers;              /* every rank but this one, in order */
    /* Device flags the broadcast chain's kernels poll (a pool buffer of
     * OFCCL__GPU_CHAIN_BLOCKS words on every rank): set by the predecessor. */
    char *dflags;
    ofccl__gseg_t *dflags_seg;
    size_t dflags_off;
} ofccl__gcomm_t;

/* ---- gcomm.c ---- */
/* The communicator's GPU state, set up on first use (collective: every rank
 * calls it at the same point, its first GPU call on the communicator). 0, or
 * an error naming the rank and what failed (the communicator stays usable
 * for host memory). */
int ofccl__gcomm_get(ofccl_comm_t *comm, ofccl__gcomm_t **out);
/* The same without the setup (no exchange): for settings made before it. */
int ofccl__gcomm_lazy(ofccl_comm_t *comm, ofccl__gcomm_t **out);
/* ghmem.c: after the path is decided, whether GPU memory to other hosts
 * goes through the fabric as GPU memory (comm->dev_reg; collective). */
int ofccl__ghmem_setup(ofccl__gcomm_t *gc);
/* Tear down (communicator destroy): streams, registrations, mappings, pool. */
void ofccl__gcomm_free(ofccl_comm_t *comm);
/* The communicator's GPU state if it has one (no setup), else NULL. */
ofccl__gcomm_t *ofccl__gcomm_of(const ofccl_comm_t *comm);

/* ---- gq.c: what the stream programs share, as engine requests ---- */
/* The flags' value for a request (its sequence + 1, the same on every rank),
 * and the device address of word `word` of rank `rank`'s flag region. */
static inline uint64_t ofccl__gq_v(const ofccl__req_t *r)
{
    return r->seq + 1;
}
static inline void *ofccl__gq_flag(const ofccl__gcomm_t *gc, int rank, size_t word)
{
    return gc->fd[rank] + word * sizeof(uint64_t);
}
/* A request's communicator GPU state, and its slot's. */
static inline ofccl__gcomm_t *ofccl__gq_gc(const ofccl__req_t *r)
{
    return r->comm->gpu;
}
static inline struct ofccl__grq *ofccl__gq_rq(const ofccl__req_t *r)
{
    return &r->comm->gpu->rq[r->slot];
}
/* What every stream program begins with (the arguments published, the
 * previous collective waited for, a bucket packed) and ends with (a bucket
 * unpacked or a scratch output copied out, the end event); READY to the
 * ranks in `to`; waiting here for DONE from the ranks in `from`. */
int ofccl__gq_begin(ofccl__req_t *r, ofccl__err_t *e);
int ofccl__gq_end(ofccl__req_t *r, size_t bytes, ofccl__err_t *e);
int ofccl__gq_say_ready(ofccl__req_t *r, const int *to, int n, ofccl__err_t *e);
int ofccl__gq_wait_done(ofccl__req_t *r, const int *from, int n, ofccl__err_t *e);
/* The engine's hooks of a stream program (ofccl__algo_t): its end and its
 * peers' arguments polled; what this rank still waits for from p (NULL:
 * nothing); whether p reached the collective; the stream released after a
 * failure (host stores only); `stream` made to wait for the end. */
int ofccl__gq_progress(ofccl__req_t *r);
const char *ofccl__gq_waits_on(const ofccl__req_t *r, int p);
bool ofccl__gq_reached(const ofccl__req_t *r, int p);
void ofccl__gq_unwind(ofccl__req_t *r);
int ofccl__gq_stream_wait(ofccl__req_t *r, ofccl_stream_t stream);
/* A stream program's algorithm table, `st` its start. */
#define OFCCL__GPU_ALGO(var, kind, st)                                                             \
    const ofccl__algo_t var = {                                                                    \
        .size = sizeof(ofccl__algo_t),                                                             \
        .name = "gpu",                                                                             \
        .coll = kind,                                                                              \
        .wire_id = OFCCL__WIRE_GPU,                                                                \
        .flags = OFCCL__ALGO_STREAM,                                                               \
        .start = st,                                                                               \
        .progress = ofccl__gq_progress,                                                            \
        .waits_on = ofccl__gq_waits_on,                                                            \
        .reached = ofccl__gq_reached,                                                              \
        .unwind = ofccl__gq_unwind,                                                                \
        .stream_wait = ofccl__gq_stream_wait,                                                      \
    }
/* A copy on the communicator's stream (a copy engine): nothing for no bytes
 * or onto itself. */
static inline int ofccl__gq_copy(const ofccl__gcomm_t *gc, void *dst, const void *src, size_t len,
                                 ofccl__err_t *e)
{
    return len && dst != src ? ofccl__gpu_copy(gc->g, gc->dev, gc->comm->stream, dst, src, len, e)
                             : 0;
}
/* SMs of the reduction kernel: OFCCL_GPU_SMS, or 8 where that is 0 (copies
 * by the copy engines only: a copy engine cannot add). */
static inline int ofccl__gq_reduce_sms(const ofccl__gcomm_t *gc)
{
    return gc->sms > 0 ? gc->sms : 8;
}
/* The per-peer copy-engine streams and the fork event, made on first use. */
int ofccl__gq_ce_streams(ofccl__gcomm_t *gc, ofccl__err_t *e);
/* Where an output of `bytes` at `out` lands (ofccl__gwhere_t, coll.h). May
 * grow the pool (collective): before the request's slot is claimed. */
int ofccl__gpu_locate(ofccl__gcomm_t *gc, void *out, size_t bytes, ofccl__gwhere_t *w);
/* Fill the request's GPU state (its slot claimed). */
void ofccl__gpu_prepare(ofccl__req_t *r, ofccl__gcomm_t *gc, const ofccl__gwhere_t *w);
/* Tear-down: release every running request's stream and wait for its end
 * (bounded); false where the GPU may still touch the communicator's memory. */
bool ofccl__gpu_quiesce(ofccl__gcomm_t *gc);

/* ---- grs.c: reduce-scatter, each rank reducing its block out of its
 * peers' inputs ---- */
int ofccl__grs_start(ofccl__req_t *r);

/* ---- gpush.c: a weight push bucket of a GPU plan ---- */
int ofccl__gpush_start(ofccl__req_t *r);
/* Whether this rank writes to p, and whether p writes here, in this bucket. */
void ofccl__gpush_roles(const ofccl__req_t *r, int p, bool *to_p, bool *from_p);

/* ---- greg.c: the caller's GPU memory ---- */
/* Collective: every rank registers `bytes` of its own at `ptr` (the same
 * sizes in the same order); each maps every peer's. */
int ofccl__greg_add(ofccl__gcomm_t *gc, void *ptr, size_t bytes);
/* Local: drop the registration at `ptr` (BUSY while a collective uses it). */
int ofccl__greg_drop(ofccl__gcomm_t *gc, void *ptr);
/* The registration holding [p, p + len), or NULL; an error (and the
 * registration dropped) where its memory was freed under it. */
int ofccl__greg_find(ofccl__gcomm_t *gc, const void *p, size_t len, ofccl__gseg_t **seg,
                     size_t *off);
void ofccl__greg_fini(ofccl__gcomm_t *gc);

/* ---- gpool.c ---- */
/* Collective when a segment must be added: every rank asks for the same
 * bytes in the same order. */
int ofccl__gpool_alloc(ofccl__gcomm_t *gc, size_t bytes, void **ptr);
int ofccl__gpool_free(ofccl__gcomm_t *gc, void *ptr);
/* The segment and offset holding [p, p + len), or NULL. */
ofccl__gseg_t *ofccl__gpool_find(ofccl__gcomm_t *gc, const void *p, size_t len, size_t *off);
/* A scratch buffer of at least `bytes` in the pool for staged outputs (the
 * same on every rank: collective when it grows). */
int ofccl__gpool_scratch(ofccl__gcomm_t *gc, size_t bytes, ofccl__gseg_t **seg, size_t *off);
void ofccl__gpool_fini(ofccl__gcomm_t *gc);

#endif
