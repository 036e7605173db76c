/*
 * Private to providers/local/: ofccl's own transport between processes of
 * one host, with no libfabric underneath.
 *
 * Why it exists: through libfabric's shm provider every large transfer is
 * either a CMA call (process_vm_readv/writev, pinning pages on every call) or
 * two copies through bounce buffers, and each small op costs a command queue
 * round trip through the target's progress. The hardware can do one plain
 * store per byte. Memory peers write into (pool buffers, staging and control
 * windows) therefore comes from memfd shared memory (mem.c); a peer maps each
 * registration once (open /proc/<pid>/fd/<n>, mmap; map.c), and then
 *   - an RMA write is a memcpy into that mapping, done by the initiator;
 *   - an atomic add is a CPU atomic on it;
 *   - remote CQ data is an entry in a single-producer ring the target reads
 *     in progress, published with release order after the data it signals
 *     (post.c).
 * Registered memory that is not shared (ofccl_mem_register of the user's own
 * memory) is written with process_vm_writev: one kernel copy, as CMA.
 * GPU memory (gpu.c) is registered with its allocation's CUDA IPC handle; a
 * peer maps the allocation once and a write is a copy by its GPU's
 * executor, published when the copy is done: same-host GPUs are peers of
 * this transport like their processes' host memory.
 *
 * Kept from every transport, so nothing above this layer can tell: one
 * completion per accepted op, delivered from progress; keys checked at every
 * access (a write to a deregistered key fails, it lands nowhere); names and
 * tables read from peers are validated before use (segment.c).
 *
 * Layout of an endpoint's shared segment (one memfd, mapped by every peer):
 *   struct lx_seg: magic, nonce, pid, ranks, the registration table
 *   struct lx_ring[ranks]: one CQ-data ring per source rank
 *
 * Error codes are errno values; lx_what says which check failed, for the
 * message (ofccl__lx_why).
 */
#ifndef OFCCL_PROVIDERS_LOCAL_H
#define OFCCL_PROVIDERS_LOCAL_H

#include "gpu/gpu.h"
#include "prov_impl.h"
#include "watch.h"

/* The provider name users type in OFCCL_PROVIDER, and its one domain. */
#define OFCCL__LOCAL_NAME "local"

#define LX_MAGIC 0x32584c6c6363666full /* "ofcclLX2" little-endian (regions hold GPU handles) */
#define LX_REGIONS 1024u               /* registrations per endpoint */
#define LX_SLOT_BITS 16                /* low key bits: table slot */
#define LX_RING 256u                   /* CQ-data entries per source (power of two) */
#define LX_PAGE 4096u

/* One registration, in the owner's segment; peers only read it. */
struct lx_region {
    _Atomic uint64_t key; /* 0 = free; stored last on registration, first on removal */
    int32_t fd;           /* memfd in the owner; -1 = not shared (process_vm_writev) */
    uint32_t access;      /* enum ofccl__access */
    uint64_t foff;        /* offset of the region in that memfd */
    uint64_t len;
    uint64_t vaddr; /* address in the owner */
    /* GPU memory (fd -1, foff its offset in the allocation): the owner's
     * device, the allocation's id there and its IPC handle. */
    int32_t dev; /* -1: host memory */
    uint32_t pad;
    uint64_t buffer_id;
    uint8_t ipc[OFCCL__GPU_IPC_BYTES];
};

/* CQ data from one source: the source writes tail, the owner writes head. */
struct lx_ring {
    _Atomic uint64_t tail;
    char pad0[56];
    _Atomic uint64_t head;
    char pad1[56];
    uint64_t ent[LX_RING];
};

struct lx_seg {
    uint64_t magic;
    uint64_t nonce; /* from the name: proves the mapped file is the one named */
    int32_t pid;
    int32_t ranks;
    struct lx_region regions[LX_REGIONS];
    /* struct lx_ring[ranks] follows at ofccl__lx_rings_off() */
};

/* A peer's registration as mapped here; remapped when its key changes. */
struct lx_map {
    uint64_t key;
    char *base;
    size_t len;
    bool gpu; /* the peer's GPU allocation, mapped for device `dev` (else a memfd) */
    int dev;
};

struct lx_peer {
    int pid; /* its process, watched in ofccl__lx.watch */
    /* Of a peer's segment only the registration table and the CQ-data ring
     * this rank writes to are mapped here: two small mappings instead of a
     * segment that grows with the job (2 MiB at 1,024 ranks), whose page
     * tables every rank would pay for every peer. Our own: the whole. */
    struct lx_seg *seg;   /* the peer's segment header (our own segment for ourselves) */
    size_t seg_len;       /* bytes mapped at seg */
    struct lx_ring *ring; /* the ring this rank writes in the peer's segment */
    void *ring_map;       /* the pages mapped for it (NULL for ourselves) */
    size_t ring_map_len;
    struct lx_map *maps; /* [nmaps]: grown to the highest slot of the peer used here */
    unsigned nmaps;
    uint64_t head_seen; /* our ring's head in the peer's segment, as last read */
};

/* Which check failed, for messages. */
enum lx_what {
    W_KEY,
    W_ACCESS,
    W_BOUNDS,
    W_MAP,
    W_CMA,
    W_ATOMIC_CMA,
    W_NOT_SHARED,
    W_KIND,
    W_COPY,
    W_DEV_MAP,
    W_DEV_ACCESS
};

/* A finished op waiting for cq_read: err = 0, or an errno value. */
struct lx_comp {
    struct ofccl__tp_op *op;
    int err;
    int perrno; /* errno of the failing call, 0 if none */
    int what;   /* enum lx_what: which step failed, for the message */
};

/* An endpoint's state (ep->be_state). */
struct ofccl__lx {
    int fd;
    struct lx_seg *seg;
    size_t seg_len;
    uint64_t nonce;
    struct lx_peer *peers; /* [ranks], after insert_peers or the first add_peer */
    struct lx_comp *cq;    /* [ops_inflight]: one entry per op at most */
    unsigned cq_head, cq_tail;
    unsigned next_slot; /* where the search for a free registration starts */
    int next_src;       /* first ring read by the next cq_read (fairness) */
    /* Writes whose copy is in flight (a device executor's), in post order,
     * chained by op->next; `busy` counts them for idle, which takes no lock. */
    struct ofccl__tp_op *busy_head, *busy_tail;
    atomic_uint busy;
    ofccl__watch_t watch; /* the peers' processes (pidfds) */
    int dev;              /* this rank's GPU (its first GPU registration), -1: none yet */
    /* Peers' GPU regions mapped here, (peer, slot) pairs, swept on every CQ
     * read: a mapping goes as soon as its owner deregisters the region. */
    struct lx_dref {
        int peer;
        unsigned slot;
    } * drefs;
    unsigned ndrefs, drefs_cap;
};

static inline struct ofccl__lx *ofccl__lx_of(const ofccl__ep_t *ep)
{
    return ep->be_state;
}

static inline size_t ofccl__lx_page_round(size_t v)
{
    return (v + LX_PAGE - 1) / LX_PAGE * LX_PAGE;
}

static inline size_t ofccl__lx_rings_off(void)
{
    return (sizeof(struct lx_seg) + 63) / 64 * 64;
}

static inline struct lx_ring *ofccl__lx_ring(struct lx_seg *seg, int src)
{
    return (struct lx_ring *)((char *)seg + ofccl__lx_rings_off()) + src;
}

/* ---- memory and registrations (mem.c) ---- */
void *ofccl__lx_mem_alloc(size_t len, intptr_t *cookie);
void ofccl__lx_mem_free(void *ptr, size_t len, intptr_t cookie);
int ofccl__lx_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e);
int ofccl__lx_mr_dereg(ofccl__mr_t *mr);

/* ---- GPU memory (gpu.c) ---- */
/* Fill a registration of GPU memory (mr->kind a device) for peers to map:
 * 0, or an error naming why it cannot be shared. */
int ofccl__lx_dev_export(ofccl__ep_t *ep, ofccl__mr_t *mr, struct lx_region *reg, ofccl__err_t *e);
/* Map peer p's GPU region `reg` into `m` for device `dev`'s access: 0 or an
 * errno value (*perrno: the driver's failure). */
int ofccl__lx_dev_map(ofccl__ep_t *ep, const struct lx_peer *p, const struct lx_region *reg,
                      int dev, struct lx_map *m, int *perrno);
/* Let a map go, whichever kind it is. */
void ofccl__lx_unmap(struct lx_map *m);
/* Peer p's GPU region in `slot` was mapped here: swept from now on. 0, or
 * ENOMEM. */
int ofccl__lx_dev_track(struct ofccl__lx *lx, int peer, unsigned slot);
/* Unmap the peers' GPU regions their owners deregistered: CUDA leaves memory
 * freed while another process maps it undefined, and the owner frees a
 * request's buffer once the request is over. Only with no copy in flight
 * (one into a region whose owner gave up on it may still be). */
void ofccl__lx_dev_sweep(struct ofccl__lx *lx);

/* ---- the segment, names, peers (segment.c) ---- */
int ofccl__lx_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e);
int ofccl__lx_ep_stop(ofccl__ep_t *ep, bool failed);
int ofccl__lx_ep_close(ofccl__ep_t *ep);
int ofccl__lx_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e);
int ofccl__lx_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e);
int ofccl__lx_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e);
/* Lowest rank whose process has exited (pidfd), -1 if none; polls at most
 * once per millisecond. */
int ofccl__lx_peer_gone(ofccl__ep_t *ep, int *pid);
/* Map another process's memfd through /proc (same user, same PID
 * namespace); NULL with errno set on failure. */
void *ofccl__lx_map_remote_fd(int pid, int fd, size_t *len);

/* ---- reaching a peer's registered memory (map.c) ---- */
/* Where in this process the bytes [op->raddr, +op->len) of the peer's region
 * op->key are: *dst, or NULL with *cma set when only process_vm_writev reaches
 * them; *kind: host memory, or the device a peer's GPU memory is mapped for
 * (the op's source device, else this rank's GPU). Returns 0 or an errno
 * value (with *what, *perrno). */
int ofccl__lx_resolve(ofccl__ep_t *ep, const struct ofccl__tp_op *op, unsigned need, char **dst,
                      uint64_t *cma, ofccl__mem_kind_t *kind, int *what, int *perrno);
int ofccl__lx_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                       ofccl__err_t *e);
/* The account of a failed check (`what`, errno `perrno`) for messages. */
const char *ofccl__lx_why(int what, int perrno, char *buf, size_t len);

/* ---- posting, rings and the completion queue (post.c) ---- */
int ofccl__lx_post(ofccl__ep_t *ep, struct ofccl__tp_op *op);
int ofccl__lx_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n);
int ofccl__lx_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err);
bool ofccl__lx_idle(const ofccl__ep_t *ep);

#endif
