/*
 * The transport layer (providers/): what lib/core sees of every transport.
 *
 * Objects: a provider handle (one per context), an endpoint (one per
 * communicator), memory regions (registered on an endpoint). Two transports
 * implement them behind one operations table (prov_impl.h): libfabric
 * (fabric/, the only code in ofccl that calls fi_*) and ofccl's own
 * shared-memory transport between processes of one host (local/). Algorithms
 * above see only the capability struct and these calls; per-provider
 * differences live in the quirk table (quirks.c), never in string compares
 * scattered through code.
 */
#ifndef OFCCL_PROVIDERS_PROV_H
#define OFCCL_PROVIDERS_PROV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "log.h"

/* ---- memory kinds ----
 * Where a buffer lives: host memory (OFCCL__MEM_HOST), or the memory of CUDA
 * device N (N >= 0, the device ordinal). Registrations, pool buffers, memory
 * references and a bucket's tensors carry it; an executor is chosen by it
 * (exec_ops.h), and so, per peer, is a transport. */
typedef int ofccl__mem_kind_t;
#define OFCCL__MEM_HOST (-1)
/* The kind of the memory at `p`, learned from where it lives (memkind.c:
 * CUDA is asked once something in the process has loaded it; host memory
 * otherwise). The one oracle of memory kinds. */
ofccl__mem_kind_t ofccl__mem_kind_of(const void *p);

/* How arrivals are signalled; the values follow OFCCL_SIGNAL's choices (auto|cqdata|atomic). */
enum ofccl__prov_signal {
    OFCCL__PROV_SIGNAL_AUTO = 0,   /* request only: the transport's choice */
    OFCCL__PROV_SIGNAL_CQDATA = 1, /* remote CQ data of a write (at least 4 bytes) */
    OFCCL__PROV_SIGNAL_ATOMIC = 2, /* a 64-bit atomic add on the peer's counter */
};

#define OFCCL__PROV_JOB_KEY_LEN 64

enum { OFCCL__HMEM_NO = 0, OFCCL__HMEM_WANT, OFCCL__HMEM_NEED }; /* params.hmem */

/* Where a provider's domain authorization key comes from (caps.auth_key):
 * what keeps processes outside the job off the fabric (docs/security.md). */
enum ofccl__auth_key {
    OFCCL__AUTH_KEY_NO_SECRET = 0, /* no job secret set: none asked for */
    OFCCL__AUTH_KEY_UNOFFERED,     /* the provider has none (auth_key_size 0) */
    OFCCL__AUTH_KEY_DERIVED,       /* derived from the job secret */
    OFCCL__AUTH_KEY_LAUNCHER,      /* the one the launcher grants (cxi's VNI) */
};

/* ---- capabilities, as ofccl sees them after probing fi_info (and strict mode) ---- */
typedef struct ofccl__prov_caps {
    char name[64];   /* libfabric prov_name, e.g. "tcp;ofi_rxm" */
    char fabric[64]; /* fabric_attr->name */
    char domain[64]; /* domain_attr->name, e.g. "lo", "eth0", "mlx5_0" */
    int quirk_row;   /* index into ofccl__quirks, -1 if the provider has no row */
    bool strict;     /* strict (verbs-like) mode is in force */

    /* memory registration (what the provider demands, plus strict mode) */
    bool virt_addr;    /* remote addresses are virtual addresses; else offsets */
    bool prov_key;     /* keys are chosen by the provider (read back after reg) */
    bool mr_local;     /* local buffers must be registered and their desc passed */
    bool mr_endpoint;  /* regions are bound to an endpoint */
    bool mr_allocated; /* only allocated (backed) memory may be registered */
    bool mr_raw;       /* keys larger than 64 bits: not supported by ofccl, rejected */
    size_t key_size;   /* bytes of key the provider uses (<= 8) */

    /* signalling */
    int signal;             /* enum ofccl__prov_signal: how arrivals are signalled (never AUTO) */
    size_t cq_data_size;    /* bytes of remote CQ data ofccl may use (4 in strict mode) */
    bool rx_cq_data;        /* remote CQ data consumes a posted receive (FI_RX_CQ_DATA) */
    bool atomic_u64_sum;    /* 64-bit unsigned FI_SUM atomics are valid on this domain */
    bool atomic_native;     /* false when a utility provider emulates atomics in software */
    bool delivery_complete; /* FI_DELIVERY_COMPLETE accepted on transmit ops */

    /* ordering and sizes */
    bool order_waw, order_raw, order_war; /* msg_order FI_ORDER_{WAW,RAW,WAR} */
    size_t max_order_waw_size, max_order_raw_size, max_order_war_size;
    size_t inject_size;
    size_t max_msg_size;
    bool peer_map; /* peers' registered memory can be mapped here (ofccl__ep_peer_map) */
    /* Some peers' memory can be mapped: a composite's peers served by a
     * transport that maps (its same-host peers); ofccl__ep_peer_map answers
     * per peer. Algorithms that map every peer ask peer_map. */
    bool peer_map_some;
    bool add_peer; /* peers can be inserted one at a time, on demand (ofccl__ep_add_peer) */
    /* With add_peer: the peers on this rank's host are to be added when the
     * endpoint's communicator is created, the others on first use (the
     * composite transport: its local half watches the processes it reaches). */
    bool add_host_first;
    int auth_key; /* enum ofccl__auth_key: the domain's authorization key */
    /* The domain takes GPU memory (FI_HMEM, asked by params.hmem): a region
     * of device memory is registered as such (its registration may still
     * fail where libfabric was built without the device's support). */
    bool hmem;
    /* Why GPU memory does not go through it after all (empty: it does):
     * kept by OFCCL__HMEM_NEED though CUDA is not loaded, the registration
     * fails or the provider copies GPU memory with CUDA calls of its own
     * (providers/fabric/open.c); the entry not kept (OFCCL__HMEM_WANT). */
    char hmem_why[256];
    uint64_t link_bps; /* nic->link_attr->speed (bits/s) where the provider gives it, else 0 */
    unsigned quirks;   /* OFCCL__Q_* flags of the row, as applied */
} ofccl__prov_caps_t;

/* ---- quirk table: one row per provider (data, not #ifdefs) ---- */
enum ofccl__quirk_flag {
    OFCCL__Q_CQDATA_4 = 1u << 0,         /* use at most 4 bytes of CQ data (IB immediate) */
    OFCCL__Q_ATOMIC_EMULATED = 1u << 1,  /* atomics done in software by the utility layer */
    OFCCL__Q_LOOPBACK_DOMAIN = 1u << 2,  /* has a loopback domain ("lo") for one-host jobs */
    OFCCL__Q_DEPRECATED = 1u << 3,       /* works, but slow / for debugging only */
    OFCCL__Q_STRICT_CAPABLE = 1u << 4,   /* strict (verbs-like) mode can be emulated on it */
    OFCCL__Q_NEEDS_RX_CQ_DATA = 1u << 5, /* requires posted receives for remote CQ data */
    OFCCL__Q_NEEDS_MR_LOCAL = 1u << 6,   /* requires FI_MR_LOCAL in practice */
    OFCCL__Q_INTRA_NODE_ONLY = 1u << 7,  /* reaches only processes on this host */
    /* offer offset addressing first (see its row's note) */
    OFCCL__Q_PREFER_OFFSETS = 1u << 8,
    OFCCL__Q_NAME_PER_PROCESS = 1u << 9, /* default endpoint names collide within a process */
    /* delivery-complete non-fetching atomics misbehave */
    OFCCL__Q_NO_DC_ATOMIC = 1u << 10,
    /* closing an endpoint a peer's RMA write is half-way into crashes the provider: leave it open
     */
    OFCCL__Q_NO_CLOSE_MIDWRITE = 1u << 11,
    /* OFCCL_PROVIDER=auto may choose it: the first such row, in table order, that reaches every
     * rank (INTRA_NODE_ONLY only when all share a host) and, under OFCCL_STRICT, is
     * STRICT_CAPABLE (ofccl__prov_auto) */
    OFCCL__Q_AUTO = 1u << 12,
    /* the host's CPU copies every byte, on the rank's own core (kernel sockets, shared memory):
     * the cost model adds a collective's fabric time to its copies and sums (lib/coll/cost.c) */
    OFCCL__Q_CPU_COPIES = 1u << 13,
    /* ofccl's own transport, no libfabric domain: nothing of libfabric applies
     * (GPU memory through FI_HMEM, a domain authorization key). */
    OFCCL__Q_NO_FABRIC = 1u << 14,
};

typedef struct ofccl__quirk {
    const char *prov_name; /* exact libfabric prov_name, e.g. "verbs;ofi_rxm" */
    const char *alias;     /* what users type in OFCCL_PROVIDER, e.g. "verbs" */
    unsigned flags;        /* enum ofccl__quirk_flag */
    const char *note;      /* why the flags are what they are (shown by ofccl_info) */
    /* What one communicator costs beyond its pool, in MiB, as perf/footprint
     * measures it (rounded up): resident memory, address space, and address
     * space per further peer. 0 = not measured (a generous default is used). */
    unsigned rss_mib, vm_mib, vm_per_peer_mib;
} ofccl__quirk_t;

extern const ofccl__quirk_t ofccl__quirks[];
extern const size_t ofccl__quirk_count;

/* Row for a libfabric prov_name or a user alias ("verbs" -> "verbs;ofi_rxm"); -1 if none. */
int ofccl__quirk_find(const char *name);
/* The provider OFCCL_PROVIDER=auto means for a job whose ranks all share this
 * host (`all_local`) or not, in strict mode or not: a quirk row's prov_name
 * (OFCCL__Q_AUTO). `why` gets the reason, for logs ("local: OFCCL_PROVIDER=auto
 * and all ranks share this host"). */
const char *ofccl__prov_auto(bool all_local, bool strict, char *why, size_t len);
/* Apply a row (and strict mode) to caps probed from fi_info. Pure: unit-tested. */
void ofccl__quirk_apply(ofccl__prov_caps_t *caps, int row, bool strict);

/* ---- discovery (used by the context to choose, and by ofccl_info) ---- */
typedef struct ofccl__prov_dom {
    char prov_name[64];
    char fabric[64];
    char domain[64];
    char pci_busid[32]; /* "dddd:bb:dd.f" from nic->bus_attr when known, else "" */
} ofccl__prov_dom_t;

/* Domains offered for `provider` (alias or prov_name; "" = every provider) that
 * can do RDM + RMA + atomics. Writes up to `max` rows, sets *n to the count written. */
int ofccl__prov_list(const char *provider, ofccl__prov_dom_t *out, int max, int *n,
                     ofccl__err_t *e);
/* Comma-separated, de-duplicated names of every provider libfabric offers here
 * (any capability), for error messages and ofccl_info. */
void ofccl__prov_available(char *buf, size_t len);
/* libfabric version string ("1.17.0"), for ofccl_info. */
const char *ofccl__prov_fabric_version(void);

/* ---- fault injection (honoured only in -Dfault_injection=true builds) ----
 * Counters run over the provider handle's lifetime, 1-based; 0 = off. */
typedef struct ofccl__fault {
    unsigned eagain_from, eagain_to; /* post attempts in [from, to] see EAGAIN */
    unsigned mr_fail_at;             /* that registration fails with ENOMEM */
    unsigned cq_error_at;            /* that completion becomes an error entry */
} ofccl__fault_t;

/* ---- provider handle: fabric + domain ---- */
typedef struct ofccl__prov ofccl__prov_t;

typedef struct ofccl__prov_params {
    const char *provider; /* alias or prov_name; never "auto" (the context resolves it) */
    const char *domain;   /* domain name to use, "" = first offered */
    bool strict;
    const ofccl__log_t *log;     /* lives at least as long as the handle */
    const ofccl__fault_t *fault; /* NULL = none */
    int signal;                  /* enum ofccl__prov_signal requested (OFCCL_SIGNAL); 0 = auto */
    /* Peers on this rank's host go through the local shared-memory transport,
     * the others through `provider` (a composite endpoint, mixed.c). Ignored,
     * with a message at info level, where `provider` cannot share memory keys
     * with the local transport (strict mode, provider keys) or is itself
     * intra-host only; caps.name then has no "+local". */
    bool same_host_local;
    /* This rank's host identity (bootstrap), with same_host_local: endpoint
     * names carry a hash of it, and a peer whose hash is equal is on this host. */
    const char *host_id;
    /* Key material derived from the job secret (OFCCL__PROV_JOB_KEY_LEN
     * bytes; NULL: no secret): a provider with a domain authorization key
     * takes its key from it (caps.auth_key). */
    const uint8_t *job_key;
    /* Ask a libfabric provider for GPU memory too (FI_HMEM, FI_MR_HMEM):
     * OFCCL__HMEM_WANT keeps its entry only where a CUDA buffer of the
     * current device registers with it and the provider moves it without
     * CUDA calls of its own (else the provider is opened as without),
     * OFCCL__HMEM_NEED keeps it regardless. caps.hmem says what was kept,
     * caps.hmem_why why GPU memory does not go through it (the GPU setup
     * then fails naming that). Its
     * entry may lack atomics (signals then use CQ data). */
    int hmem;
} ofccl__prov_params_t;

/* Which transport serves a peer of an endpoint (ofccl__ep_peer_class): one
 * per transport a composite endpoint may join (mixed.c holds at most this
 * many, and its endpoint names say how many it joined). */
enum ofccl__peer_class {
    OFCCL__PEER_LOCAL = 0,  /* ofccl's shared-memory transport (same host) */
    OFCCL__PEER_FABRIC = 1, /* a libfabric provider */
    OFCCL__PEER_CLASSES = 2,
};

/* Fails with OFCCL_ERR_NOT_SUPPORTED (unknown/unavailable provider: the message
 * lists the providers libfabric offers here; or the requested signal method is
 * not available: the message says which is) or OFCCL_ERR_PROVIDER. On success
 * caps.signal holds the method every endpoint of the handle uses. */
int ofccl__prov_open(const ofccl__prov_params_t *params, ofccl__prov_t **out, ofccl__err_t *e);
const ofccl__prov_caps_t *ofccl__prov_caps(const ofccl__prov_t *prov);
/* Returns OFCCL_ERR_BUSY while endpoints are open. */
int ofccl__prov_close(ofccl__prov_t *prov);
/* Bytes posted through the handle's endpoints since it was opened, by the
 * class of transport that carried them (enum ofccl__peer_class): RMA writes
 * and reads count their length, an atomic 8 bytes. */
void ofccl__prov_bytes(const ofccl__prov_t *prov, uint64_t bytes[OFCCL__PEER_CLASSES]);
/* Multi-line description of caps for ofccl_info and debug logs. */
void ofccl__prov_caps_format(const ofccl__prov_caps_t *caps, char *buf, size_t len);

/* ---- endpoint: RDM ep + AV + CQ ---- */
typedef struct ofccl__ep ofccl__ep_t;

typedef struct ofccl__ep_params {
    int rank;              /* this process's rank in the communicator (for messages) */
    int size;              /* ranks in the communicator = AV entries */
    unsigned ops_inflight; /* op descriptors (in flight + EAGAIN retry queue) */
    unsigned rx_posted;    /* receives kept posted when caps.rx_cq_data */
    /* Part of a composite endpoint (providers/mixed.c): a peer given no name
     * is reached through another transport, and no op ever addresses it. */
    bool partial;
    /* The context's executors (exec_ops.h), which move the endpoint's bytes
     * by the memory kinds involved; they outlive the endpoint. NULL: host
     * memory only, moved by the host's mover. */
    const struct ofccl__exec_reg *execs;
} ofccl__ep_params_t;

int ofccl__ep_open(ofccl__prov_t *prov, const ofccl__ep_params_t *params, ofccl__ep_t **out,
                   ofccl__err_t *e);
/* Teardown, first step: stop the endpoint for good. Closes the libfabric
 * endpoint (cancelling every op in flight), then its CQ and AV, so that no
 * completion can name an op again and the provider holds no pointer into
 * memory the caller frees next. No callback runs; later posts fail with
 * OFCCL_ERR_STATE and progress does nothing. Regions registered on it stay
 * valid handles: deregister them, free their memory, then ofccl__ep_close.
 * Idempotent; safe on an endpoint whose peers are stopped, dead or cut off.
 * `failed`: the communicator failed, so a peer may be half-way through a
 * write into this endpoint. Where closing then crashes the provider
 * (OFCCL__Q_NO_CLOSE_MIDWRITE) the endpoint is stopped but left open: it is
 * never progressed again, and its libfabric objects stay allocated (reachable)
 * until the process exits, as does the domain they belong to. */
int ofccl__ep_shutdown(ofccl__ep_t *ep, bool failed);
/* Returns OFCCL_ERR_BUSY while memory regions are registered on it. Shuts it
 * down first where ofccl__ep_shutdown was not called. */
int ofccl__ep_close(ofccl__ep_t *ep);
/* The name peers insert (fi_getname on libfabric): on entry *len = capacity
 * of buf; on success the name's length. */
int ofccl__ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e);
/* Insert every rank's name (names[r * stride], lens[r] bytes) into the AV; AV
 * index r addresses rank r. Call once, with all `size` names. */
int ofccl__ep_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e);
/* Insert one peer's name instead (caps.add_peer): ops to `peer` may be posted
 * from then on, ops from it are accepted before. Each peer once, in any
 * order; not together with ofccl__ep_insert_peers. */
int ofccl__ep_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e);
/* Every peer has inserted this endpoint (the caller's barrier after
 * ofccl__ep_insert_peers proves it): drop what was needed only until then.
 * On shm the endpoint's /dev/shm file is unlinked, so a process killed
 * later leaves none behind. */
void ofccl__ep_peers_ready(ofccl__ep_t *ep);

/* ---- memory registration ---- */
enum ofccl__access {
    OFCCL__ACC_LOCAL = 1u << 0,         /* source of local writes / atomics operands */
    OFCCL__ACC_REMOTE_WRITE = 1u << 1,  /* peers write into it */
    OFCCL__ACC_REMOTE_READ = 1u << 2,   /* peers read from it */
    OFCCL__ACC_REMOTE_ATOMIC = 1u << 3, /* peers do atomics on it (implies remote write+read) */
};

typedef struct ofccl__mr {
    void *addr;
    size_t len;
    void *desc;    /* fi_mr_desc, pass to posting calls; NULL if not needed */
    uint64_t key;  /* remote key to advertise */
    uint64_t base; /* remote base to advertise: addr when caps.virt_addr, else 0 */
    unsigned access;
    void *handle; /* the transport's registration, opaque above this layer */
    ofccl__ep_t *ep;
    bool shared;            /* caps.peer_map and in memory peers can map (ofccl__ep_peer_map) */
    ofccl__mem_kind_t kind; /* where the region lives (ofccl__mem_kind_of at registration) */
} ofccl__mr_t;

/* What a peer needs to address a region: exchanged by the layer above. */
typedef struct ofccl__rkey {
    uint64_t base; /* from ofccl__mr_t.base */
    uint64_t key;
    uint64_t len;
} ofccl__rkey_t;

/* Register [addr, addr+len) with least-privilege `access`. Keys are the
 * provider's under FI_MR_PROV_KEY, else unpredictable (getrandom). */
int ofccl__mr_reg(ofccl__ep_t *ep, void *addr, size_t len, unsigned access, ofccl__mr_t **out,
                  ofccl__err_t *e);
/* Invalidates the key: a peer using it afterwards gets an error, not our memory.
 * `mr` is freed even when the provider refuses (then its error is returned). */
int ofccl__mr_dereg(ofccl__mr_t *mr);

/* ---- memory peers write into (pool buffers, staging and control windows) ----
 * Page-aligned. On the local provider it is shared memory (a memfd) that
 * peers map, so their writes are plain stores; elsewhere ordinary memory.
 * Free with ofccl__prov_mem_free (which needs no endpoint or provider handle:
 * it may outlive both). */
void *ofccl__prov_mem_alloc(const ofccl__ep_t *ep, size_t len);
/* The same, for memory every endpoint of the provider handle may register. */
void *ofccl__prov_mem_alloc_on(const ofccl__prov_t *prov, size_t len);
/* Right after ofccl__prov_mem_alloc returned NULL: why (from errno), as
 * OFCCL_ERR_NO_MEMORY or, for a limit of this process (RLIMIT_AS, open
 * files for the memfd), OFCCL_ERR_RESOURCE, with the limit in the message. */
int ofccl__prov_mem_error(const ofccl__ep_t *ep, size_t len, ofccl__err_t *e);
void ofccl__prov_mem_free(void *ptr);

/* ---- posting; every call is non-blocking ----
 * Returns 0 when the op is accepted (posted, or queued for retry after the
 * transport said EAGAIN; queued ops are retried from ofccl__ep_progress),
 * OFCCL_ERR_AGAIN when every op descriptor is in use (progress, then call
 * again), or an error.
 * `op_ctx` comes back in exactly one completion callback per accepted op.
 * `lmr` may be NULL unless caps.mr_local. Remote offsets are relative to the
 * region's start; the layer adds rk->base, so callers never see the mode. */
int ofccl__ep_write(ofccl__ep_t *ep, int peer, const void *src, size_t len, const ofccl__mr_t *lmr,
                    const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx, ofccl__err_t *e);
/* As ofccl__ep_write plus remote CQ data (at most caps.cq_data_size bytes
 * significant); len may be 0. The target sees exactly one on_remote_data(). */
int ofccl__ep_writedata(ofccl__ep_t *ep, int peer, const void *src, size_t len,
                        const ofccl__mr_t *lmr, const ofccl__rkey_t *rk, uint64_t roff,
                        uint64_t data, void *op_ctx, ofccl__err_t *e);
/* As ofccl__ep_write, but the completion means the data has been placed at the
 * target (FI_DELIVERY_COMPLETE where accepted; otherwise the provider layer
 * follows the write with a zero-length read from the same peer, whose completion
 * orders after it). Used by the atomic signal path before counting a unit. */
int ofccl__ep_write_dc(ofccl__ep_t *ep, int peer, const void *src, size_t len,
                       const ofccl__mr_t *lmr, const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx,
                       ofccl__err_t *e);
/* Read `len` bytes at `roff` of the peer's region into local `dst` (inside
 * `lmr` where caps.mr_local). The region must grant OFCCL__ACC_REMOTE_READ.
 * Used off the data path (diagnosing a mismatch). */
int ofccl__ep_read(ofccl__ep_t *ep, int peer, void *dst, size_t len, const ofccl__mr_t *lmr,
                   const ofccl__rkey_t *rk, uint64_t roff, void *op_ctx, ofccl__err_t *e);
/* 64-bit unsigned atomic add of `value` at the 8-byte-aligned remote offset.
 * Its completion means the add has been applied at the target (delivery
 * complete, or a fetching atomic where that is not available). */
int ofccl__ep_atomic_add(ofccl__ep_t *ep, int peer, uint64_t value, const ofccl__rkey_t *rk,
                         uint64_t roff, void *op_ctx, ofccl__err_t *e);

/* ---- completion ---- */
typedef struct ofccl__ep_handlers {
    void *arg;
    /* A locally initiated op finished successfully. */
    void (*on_done)(void *arg, void *op_ctx);
    /* A locally initiated op failed: status is an OFCCL_ERR_*, msg names the peer
     * rank and carries the provider's own message. */
    void (*on_error)(void *arg, void *op_ctx, int peer, int status, const char *msg);
    /* A peer's writedata landed here with this immediate data. */
    void (*on_remote_data)(void *arg, uint64_t data);
} ofccl__ep_handlers_t;

/* Retry queued ops, then drain up to `max` CQ entries, calling the handlers.
 * Returns the number of completions handled (>= 0) or an error for a failure
 * not attributable to one op (then `e` says what). Never blocks. */
int ofccl__ep_progress(ofccl__ep_t *ep, const ofccl__ep_handlers_t *h, int max, ofccl__err_t *e);
/* A peer whose process is known to have exited, or -1. The local provider
 * watches its peers' processes (pidfd, polled at most once per millisecond,
 * so this is cheap on every progress pass); libfabric providers report dead
 * peers as op errors or not at all, and always give -1 here. *pid gets the
 * peer's process id when known, else -1. */
int ofccl__ep_peer_gone(ofccl__ep_t *ep, int *pid);
/* Where bytes [roff, roff+len) of `peer`'s region `rk` are in this process,
 * for plain loads and stores (caps.peer_map only: the local provider; the
 * peer's region must be mr->shared there). The key, `access`
 * (OFCCL__ACC_REMOTE_WRITE and/or _READ) and bounds are checked once, here;
 * the pointer stays valid until this endpoint closes. A store through it is
 * seen by the peer as a write is, with no completion and no CQ data: publish
 * it with a C11 release store the peer reads with acquire. Loads see what the
 * peer published the same way. OFCCL_ERR_NOT_SUPPORTED where caps.peer_map is
 * false; OFCCL_ERR_REMOTE_ERROR for a bad key, access or range. */
int ofccl__ep_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__err_t *e);
/* The same for any memory kind: *kind says which access the mapping gives,
 * OFCCL__MEM_HOST for plain CPU loads and stores as above, a device ordinal
 * N for a pointer that device N's copies and kernels use (an executor of
 * that kind moves bytes through it; the CPU must not touch it).
 * ofccl__ep_peer_map is this one refusing (OFCCL_ERR_NOT_SUPPORTED) a
 * mapping the CPU cannot use. */
int ofccl__ep_peer_map_kind(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                            size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                            ofccl__err_t *e);
/* A descriptor that turns readable when the endpoint may have something for
 * ofccl__ep_progress, for poll(2); -1 where the transport has none (both
 * transports today: progress polls). */
int ofccl__ep_wait_fd(const ofccl__ep_t *ep);
/* Ops accepted and not yet completed (posted + queued). */
unsigned ofccl__ep_pending(const ofccl__ep_t *ep);
/* The transport that carries ops to `peer` (enum ofccl__peer_class): one
 * class for every peer, except on a composite endpoint (same_host_local). */
int ofccl__ep_peer_class(const ofccl__ep_t *ep, int peer);
/* Does the endpoint reach `peer`'s memory of `kind` (a device's: through a
 * transport that takes GPU memory)? */
bool ofccl__ep_reaches(const ofccl__ep_t *ep, int peer, ofccl__mem_kind_t kind);
const ofccl__prov_caps_t *ofccl__ep_caps(const ofccl__ep_t *ep);

#endif
