/*
 * Private to providers/: the objects behind the opaque handles of prov.h and
 * the transport seam, the operations table every transport implements.
 *
 * The generic code (provider.c, endpoint.c, post.c, complete.c, mr.c,
 * limits.c) owns what every transport shares: argument checks, the op
 * descriptor pool, the EAGAIN retry FIFO, completion delivery, fault
 * injection, counting and teardown order. A backend (fabric/: libfabric;
 * local/: ofccl's shared-memory transport) owns its handles and moves the
 * bytes. Nothing here includes libfabric, and nothing outside a backend's
 * directory branches on which backend it is.
 */
#ifndef OFCCL_PROVIDERS_PROV_IMPL_H
#define OFCCL_PROVIDERS_PROV_IMPL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "exec_ops.h"
#include "prov.h"

typedef struct ofccl__backend ofccl__backend_t;

struct ofccl__prov {
    const ofccl__backend_t *be;
    /* The backend whose allocator makes this handle's memory (be, or a
     * composite's first transport's). */
    const ofccl__backend_t *mem_be;
    void *be_state; /* the backend's own (fabric: fi_info, fabric, domain) */
    ofccl__prov_caps_t caps;
    const ofccl__log_t *log;
    pthread_mutex_t lock; /* guards n_eps, n_abandoned */
    unsigned n_eps;
    unsigned n_abandoned;          /* endpoints left open at shutdown (see ofccl__ep_shutdown) */
    struct ofccl__prov *kept_next; /* on the list of objects kept until exit */
    ofccl__fault_t fault;          /* injected faults (fault-injection builds only) */
    _Atomic unsigned f_posts, f_regs, f_comps;
    _Atomic uint64_t bytes[OFCCL__PEER_CLASSES]; /* posted, by peer class (ofccl__prov_bytes) */
};

/* Fault injection: true when this post / registration / completion is the one
 * to fail. Always false in builds without -Dfault_injection=true. */
#ifdef OFCCL_FAULT_INJECTION
static inline bool ofccl__fault_hit(_Atomic unsigned *counter, unsigned from, unsigned to)
{
    unsigned n = atomic_fetch_add(counter, 1) + 1;
    return from != 0 && n >= from && n <= to;
}
#else
static inline bool ofccl__fault_hit(_Atomic unsigned *counter, unsigned from, unsigned to)
{
    (void)counter;
    (void)from;
    (void)to;
    return false;
}
#endif

/* What the caller asked for; how it is carried out is the backend's choice
 * (fabric: delivery complete or a fencing read, a fetching atomic or not). */
enum ofccl__tp_op_kind {
    OFCCL__OP_FREE = 0,
    OFCCL__OP_WRITE,
    OFCCL__OP_WRITEDATA,
    OFCCL__OP_WRITE_DC, /* completes once the data is placed at the target */
    OFCCL__OP_READ,     /* RMA read into a local buffer (op->src is the destination) */
    OFCCL__OP_ATOMIC_ADD,
};

/* One in-flight (or queued) operation. */
struct ofccl__tp_op {
    /* The backend's context while the op is posted (libfabric's struct
     * fi_context2, 8 pointers), first: a completion names the op by the
     * address of this field. */
    void *be_ctx[8];
    struct ofccl__tp_op *next; /* free list or retry FIFO */
    void *op_ctx;              /* the caller's, handed back in exactly one callback */
    const void *src;
    size_t len;
    void *desc;     /* the local region's descriptor (ofccl__mr_t.desc) */
    uint64_t raddr; /* remote address: the key's base plus the offset */
    uint64_t key;
    uint64_t data; /* CQ data of a WRITEDATA */
    /* The source's memory kind (the local region's, else where it lives),
     * and a copy in flight: its executor's ticket (exec_ops.h). */
    ofccl__mem_kind_t src_kind;
    uint64_t ticket;
    const struct ofccl__exec *ex;
    int peer;
    uint16_t kind; /* enum ofccl__tp_op_kind */
    uint16_t step; /* the backend's: which step of a multi-step op is posted; 0 when submitted */
    /* Atomic operand and fetch result: 8-byte aligned, inside the pool the
     * backend may register as a whole. */
    uint64_t operand;
    uint64_t result;
};

struct ofccl__ep {
    ofccl__prov_t *prov;
    const ofccl__backend_t *be; /* prov->be, one load closer on the data path */
    void *be_state;             /* the backend's own (fabric: ep, AV, CQ; local: segment) */
    ofccl__ep_params_t params;
    pthread_mutex_t lock; /* op pool, retry FIFO, counters; held around data-path backend calls */

    struct ofccl__tp_op *ops; /* params.ops_inflight descriptors, allocated once */
    struct ofccl__tp_op *free_ops;
    struct ofccl__tp_op *rq_head, *rq_tail; /* retry FIFO: posts that met EAGAIN */
    /* accepted, not yet completed; changed under `lock`, atomic so that
     * progress can see an idle endpoint without taking it */
    atomic_uint pending;

    unsigned n_mrs; /* regions registered on this endpoint */
    bool peers_inserted;
    /* ofccl__ep_shutdown ran: nothing is posted or progressed any more. */
    bool stopped;
    /* Left open by ofccl__ep_shutdown: never closed nor freed (see prov.h). */
    bool abandoned;
    struct ofccl__ep *kept_next; /* on the list of objects kept until exit */
};

/* ---- what a backend hands back from its completion queue ---- */
enum ofccl__tp_cqe_flag {
    OFCCL__CQE_DATA = 1u << 0, /* a peer's write with data landed here: `data` */
    /* `op` finished one step of several (the backend advanced op->step):
     * post it again; its caller hears only of the last step */
    OFCCL__CQE_NEXT = 1u << 1,
};

struct ofccl__tp_cqe {
    void *op; /* the op descriptor; NULL (or not one of ours) for CQ data */
    uint64_t data;
    unsigned flags; /* enum ofccl__tp_cqe_flag */
};

struct ofccl__tp_cqerr {
    void *op;       /* the failed op's descriptor, or a context that is not one of ours */
    int err;        /* errno value (libfabric's FI_E* codes are errno values up to 255) */
    uint64_t flags; /* the backend's flags for the entry, shown in messages */
    char text[256]; /* the backend's own account of the failure */
};

/* cq_read: the next entry is an error; read it with cq_readerr. */
#define OFCCL__TP_ERR_AVAIL (-4096)
/* ep_stop: the endpoint is stopped but left open (OFCCL__Q_NO_CLOSE_MIDWRITE). */
#define OFCCL__TP_LEFT_OPEN 1

/*
 * The transport seam. Every slot is filled: a backend without a use for one
 * points it at a stub (ofccl__tp_stub_*), never at NULL. Return values are 0
 * or an OFCCL_ERR_* (with `e` filled) unless a slot says otherwise; "-errno"
 * slots return 0 or a negated errno value the backend's strerror names.
 * From `open` on, every member is a function pointer (test/unit/transport
 * relies on it): data goes before.
 */
struct ofccl__backend {
    size_t size;          /* sizeof(ofccl__backend_t) it was written for: the table can grow */
    const char *name;     /* for messages: "libfabric", "local" */
    const char *serves;   /* the provider name it serves; NULL: every name no other one serves */
    const char *mem_what; /* what mem_alloc returns, for messages ("", " of shared memory") */

    /* -- provider handle and discovery -- */
    /* Fill prov->caps (quirk row applied) and prov->be_state for `prov_name`;
     * on failure leave nothing allocated. */
    int (*open)(ofccl__prov_t *prov, const char *prov_name, const ofccl__prov_params_t *params,
                ofccl__err_t *e);
    int (*close)(ofccl__prov_t *prov); /* no endpoint open; frees be_state */
    /* ofccl__prov_list for one name it serves (an alias or a prov_name, as
     * the user gave it), or for every one (NULL). */
    int (*list)(const char *prov_name, ofccl__prov_dom_t *out, int max, int *n, ofccl__err_t *e);
    /* Append the names it offers to a ", "-separated list (ofccl__tp_list_add). */
    void (*available)(char *buf, size_t len);

    /* -- endpoint -- */
    /* Set up ep->be_state (ep->ops exists); on failure ep_close frees what was made. */
    int (*ep_setup)(ofccl__ep_t *ep, ofccl__err_t *e);
    /* Cancel everything in flight for good (under ep->lock). 0, an error, or
     * OFCCL__TP_LEFT_OPEN when `failed` makes closing unsafe. */
    int (*ep_stop)(ofccl__ep_t *ep, bool failed);
    int (*ep_close)(ofccl__ep_t *ep); /* free be_state (may be partly set up or NULL) */
    int (*ep_name)(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e);
    /* Names already checked for count; their lengths are the backend's to check. */
    int (*insert_peers)(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                        int n, ofccl__err_t *e);
    void (*peers_ready)(ofccl__ep_t *ep);
    /* One peer's name, on demand (caps.add_peer); stub: OFCCL_ERR_NOT_SUPPORTED. */
    int (*add_peer)(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e);

    /* -- memory -- */
    /* mr->addr, len, access, ep are set: fill handle, key, desc, shared. */
    int (*mr_reg)(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e);
    int (*mr_dereg)(ofccl__mr_t *mr); /* -errno; the key is revoked either way */
    /* `len` is page-rounded. NULL with errno set on failure. `cookie` is the
     * backend's, handed back to mem_free and ofccl__tp_mem_find. */
    void *(*mem_alloc)(size_t len, intptr_t *cookie);
    void (*mem_free)(void *ptr, size_t len, intptr_t cookie);

    /* -- data path: every call but idle under ep->lock -- */
    /* Post one op: 0, -EAGAIN (busy: the op waits in the retry FIFO), or -errno. */
    int (*post)(ofccl__ep_t *ep, struct ofccl__tp_op *op);
    /* Up to n entries: their count (0 = none now), OFCCL__TP_ERR_AVAIL, or -errno. */
    int (*cq_read)(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n);
    /* 1: `err` filled; 0: an entry that concerns no caller was consumed;
     * -EAGAIN: none; or another -errno. */
    int (*cq_readerr)(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err);
    /* Nothing to read (no lock taken): lets an idle endpoint skip progress. */
    bool (*idle)(const ofccl__ep_t *ep);
    const char *(*strerror)(int err);
    /* What an op is, for messages ("RMA write", "atomic fetch-add"). */
    const char *(*op_name)(const ofccl__ep_t *ep, const struct ofccl__tp_op *op);

    /* -- peers -- */
    int (*peer_gone)(ofccl__ep_t *ep, int *pid); /* as ofccl__ep_peer_gone */
    /* As ofccl__ep_peer_map, after the generic checks, under ep->lock. */
    int (*peer_map)(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff, size_t len,
                    unsigned access, void **ptr, ofccl__mem_kind_t *kind, ofccl__err_t *e);
    int (*wait_fd)(const ofccl__ep_t *ep); /* as ofccl__ep_wait_fd */
    /* Can this transport reach a peer (on this rank's host or not) for ops
     * on memory of `kind`? A composite asks its transports in order. */
    bool (*reaches)(const ofccl__prov_t *prov, bool same_host, ofccl__mem_kind_t kind);
    int (*peer_class)(const ofccl__ep_t *ep, int peer); /* as ofccl__ep_peer_class */
};

/* The backends (fabric/, local/), in the order provider.c consults them. */
extern const ofccl__backend_t ofccl__fabric_backend;
extern const ofccl__backend_t ofccl__local_backend;
/* The composite of an ordered list of them (mixed.c): never chosen by name,
 * only by ofccl__prov_params_t.same_host_local. */
extern const ofccl__backend_t ofccl__mixed_backend;
/* Turn `*prov` (a fabric provider handle just opened) into the composite
 * that also holds a local one; leaves *prov as it was, and returns 0, where
 * the two cannot share keys (the reason is logged). */
int ofccl__mx_wrap(ofccl__prov_t **prov, const ofccl__prov_params_t *params, ofccl__err_t *e);
/* The i-th backend, NULL past the last (for tests and discovery). */
const ofccl__backend_t *ofccl__tp_backend(size_t i);

/* ---- stubs for slots a backend has no use for (provider.c) ---- */
int ofccl__tp_class_local(const ofccl__ep_t *ep, int peer);
int ofccl__tp_class_fabric(const ofccl__ep_t *ep, int peer);
void ofccl__tp_stub_peers_ready(ofccl__ep_t *ep);
bool ofccl__tp_stub_idle(const ofccl__ep_t *ep);
int ofccl__tp_stub_peer_gone(ofccl__ep_t *ep, int *pid);
int ofccl__tp_stub_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                            size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                            ofccl__err_t *e);
int ofccl__tp_stub_wait_fd(const ofccl__ep_t *ep);
int ofccl__tp_stub_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len,
                            ofccl__err_t *e);
/* No allocator of its own (a composite's memory comes from prov->mem_be). */
void *ofccl__tp_stub_mem_alloc(size_t len, intptr_t *cookie);
void ofccl__tp_stub_mem_free(void *ptr, size_t len, intptr_t cookie);
/* The generic name of the op's kind ("RMA write", ...): an op_name. */
const char *ofccl__tp_op_name(const ofccl__ep_t *ep, const struct ofccl__tp_op *op);

/* ---- helpers the backends share ---- */
/* The executor that moves bytes from memory of kind `src` into memory of
 * kind `dst` for endpoint `ep` (the host's mover where the context
 * registered none), or NULL where no executor serves the pair. */
const ofccl__exec_t *ofccl__tp_exec(const ofccl__ep_t *ep, ofccl__mem_kind_t dst,
                                    ofccl__mem_kind_t src);
/* Append `item` to a ", "-separated list unless it is already there. */
void ofccl__tp_list_add(char *buf, size_t len, const char *item);
/* The allocation made by backend `be`'s allocator (ofccl__prov_mem_alloc;
 * a composite shares its allocator with the local backend) holding
 * [addr, addr+len): its cookie and the offset of addr in it. */
bool ofccl__tp_mem_find(const ofccl__backend_t *be, const void *addr, size_t len, intptr_t *cookie,
                        uint64_t *off);

/* Is `ctx` one of the endpoint's op descriptors? Integer compares: a
 * completion's context may be NULL or any pointer a provider chose. */
static inline bool ofccl__tp_is_op(const ofccl__ep_t *ep, const void *ctx)
{
    uintptr_t p = (uintptr_t)ctx, b = (uintptr_t)ep->ops;
    size_t sz = sizeof(*ep->ops);

    return ep->ops != NULL && p >= b && p < b + ep->params.ops_inflight * sz && (p - b) % sz == 0;
}

/* ---- the op pool and retry FIFO (caller holds ep->lock) ---- */
static inline void ofccl__tp_rq_push(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    op->next = NULL;
    if (ep->rq_tail != NULL)
        ep->rq_tail->next = op;
    else
        ep->rq_head = op;
    ep->rq_tail = op;
}

static inline void ofccl__tp_op_free(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    op->kind = OFCCL__OP_FREE;
    op->op_ctx = NULL;
    op->next = ep->free_ops;
    ep->free_ops = op;
    atomic_fetch_sub_explicit(&ep->pending, 1, memory_order_relaxed);
}

/* Post through the backend, unless an injected EAGAIN storm says it is "busy". */
static inline int ofccl__tp_post(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    const ofccl__fault_t *f = &ep->prov->fault;

    if (ofccl__fault_hit(&ep->prov->f_posts, f->eagain_from, f->eagain_to))
        return -EAGAIN;
    return ep->be->post(ep, op);
}

/* Keep a provider handle whose endpoint was left open, and so its domain,
 * until the process exits (endpoint.c holds the list). */
void ofccl__tp_keep_prov(ofccl__prov_t *prov);

/* ---- this process's resource limits (limits.c) ---- */
/* For an errno `err` (positive) that means this process hit a limit of its
 * own (EMFILE, ENFILE, ENOMEM): write which limit, its value and what to
 * raise into buf and return OFCCL_ERR_RESOURCE or OFCCL_ERR_NO_MEMORY;
 * otherwise return 0. `want`: bytes the failed step needed, 0 if unknown. */
int ofccl__limit_explain(int err, size_t want, char *buf, size_t len);
/* Fail with "<fmt>: <error text>[; <explanation>]": the limit's code where
 * ofccl__limit_explain knows `err`, else `fallback`. `errtext` names `err`
 * (a backend's strerror); NULL: strerror(err). */
int ofccl__limit_fail(const ofccl__log_t *log, ofccl__err_t *e, int err, const char *errtext,
                      size_t want, int fallback, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* 0 when `bytes` more of address space can still be mapped under RLIMIT_AS;
 * else OFCCL_ERR_RESOURCE naming the limit ("rank N: <what>: ..."). */
int ofccl__limit_reserve(const ofccl__log_t *log, ofccl__err_t *e, size_t bytes, const char *what,
                         int rank);
/* Before a communicator's endpoint is created: its estimated footprint
 * (quirk row: rss_mib, vm_mib, vm_per_peer_mib) must fit in MemAvailable
 * (else OFCCL_ERR_NO_MEMORY) and under RLIMIT_AS (else OFCCL_ERR_RESOURCE),
 * with both numbers in the message. */
int ofccl__limit_footprint(const ofccl__prov_t *prov, int rank, int size, ofccl__err_t *e);
/* Bytes RLIMIT_AS still allows this process to map (ULLONG_MAX: no limit). */
unsigned long long ofccl__limit_as_room(void);
/* MemAvailable from /proc/meminfo, in bytes (0 if unknown). */
unsigned long long ofccl__limit_mem_available(void);

#endif
