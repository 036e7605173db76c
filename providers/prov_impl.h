/*
 * Private to providers/: the objects behind the opaque handles of prov.h.
 * Nothing outside this directory includes it (it pulls in libfabric headers).
 */
#ifndef OFCCL_PROVIDERS_PROV_IMPL_H
#define OFCCL_PROVIDERS_PROV_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "prov.h"

/* The libfabric API level ofccl is written against. */
#define OFCCL__FI_VERSION FI_VERSION(1, 17)

struct ofccl__prov {
    struct fi_info *info; /* the entry chosen (fi_dupinfo), used for every endpoint */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    ofccl__prov_caps_t caps;
    const ofccl__log_t *log;
    /* The provider itself picks keys (FI_MR_PROV_KEY reported); caps.prov_key may
     * also be true only because strict mode asks us to read keys back. */
    bool real_prov_key;
    /* A fetching FI_SUM on FI_UINT64 is valid: the fallback when delivery
     * complete is not available. */
    bool fetch_atomic_ok;
    /* The local provider (local.c): no fabric, domain or info. */
    bool local;
    pthread_mutex_t lock; /* guards n_eps, n_abandoned */
    unsigned n_eps;
    unsigned n_abandoned;          /* endpoints left open at close (OFCCL__Q_NO_CLOSE_MIDWRITE) */
    struct ofccl__prov *kept_next; /* on the list of objects kept until exit */
    ofccl__fault_t fault;          /* injected faults (fault-injection builds only) */
    _Atomic unsigned f_posts, f_regs, f_comps;
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

enum ofccl__op_kind {
    OFCCL__OP_FREE = 0,
    OFCCL__OP_WRITE,
    OFCCL__OP_WRITEDATA,
    OFCCL__OP_ATOMIC_DC,    /* fi_atomicmsg + FI_DELIVERY_COMPLETE */
    OFCCL__OP_ATOMIC_FETCH, /* fi_fetch_atomic: completion implies applied */
    OFCCL__OP_RECV,         /* zero-length receive for FI_RX_CQ_DATA */
    OFCCL__OP_WRITE_DC,     /* fi_writemsg + FI_DELIVERY_COMPLETE */
    OFCCL__OP_WRITE_STAGE,  /* write whose completion posts a READ_FENCE (no callback) */
    OFCCL__OP_READ_FENCE,   /* zero-length read after it: its completion is the write's */
    OFCCL__OP_READ,         /* RMA read into a local buffer (op->src is the destination) */
};

/* One in-flight (or queued) operation. libfabric owns `fctx` while posted,
 * which is why it is first: the CQ entry's op_context points at it. */
struct ofccl__op {
    struct fi_context2 fctx;
    struct ofccl__op *next; /* free list or retry FIFO */
    void *op_ctx;           /* the caller's, handed back in exactly one callback */
    const void *src;
    size_t len;
    void *desc;
    uint64_t raddr;
    uint64_t key;
    uint64_t data;
    int peer;
    int kind; /* enum ofccl__op_kind */
    /* Atomic operand and fetch result: 8-byte aligned, inside the registered pool. */
    uint64_t operand;
    uint64_t result;
};

struct ofccl__ep {
    ofccl__prov_t *prov;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    ofccl__ep_params_t params;
    pthread_mutex_t lock; /* op pool, retry FIFO, counters */

    struct ofccl__op *ops; /* params.ops_inflight descriptors, allocated once */
    struct ofccl__op *free_ops;
    struct ofccl__op *rq_head, *rq_tail; /* -FI_EAGAIN retry FIFO */
    /* accepted, not yet completed (not receives); changed under `lock`, atomic
     * so that progress can see an idle endpoint without taking it */
    atomic_uint pending;
    struct fid_mr *ops_mr; /* registration of `ops` when caps.mr_local */
    void *ops_desc;

    struct ofccl__op *rx; /* params.rx_posted receive descriptors (rx_cq_data) */
    unsigned n_rx;

    unsigned n_mrs; /* user regions registered on this endpoint */
    char *names;    /* peer names as inserted; kept until close (see insert_peers) */
    bool peers_inserted;
    /* ofccl__ep_shutdown ran: nothing is posted or progressed any more. */
    bool stopped;
    /* Left open by ofccl__ep_shutdown: never closed nor freed (see prov.h). */
    bool abandoned;
    struct ofccl__ep *kept_next; /* on the list of objects kept until exit */
    /* shm: the name of this endpoint's /dev/shm file until it is unlinked. */
    char shm_name[64];
    /* Local-provider state (local.c); NULL on libfabric endpoints, which
     * then have ep, av and cq. */
    struct ofccl__lx *lx;
};

/* Keep an abandoned endpoint's provider, and so its domain, until the
 * process exits (ep.c holds the list). */
void ofccl__ep_keep(ofccl__prov_t *prov);

/* Registration shared by mr.c (user regions) and ep.c (the op pool). */
int ofccl__mr_reg_raw(ofccl__ep_t *ep, void *addr, size_t len, uint64_t fi_access,
                      struct fid_mr **out, uint64_t *key_out, ofccl__err_t *e);
/* Post (or re-post) one descriptor; returns the fi_* result (0, -FI_EAGAIN, ...). */
ssize_t ofccl__op_post(ofccl__ep_t *ep, struct ofccl__op *op);
/* Name of an op kind for messages ("RMA write", ...). */
const char *ofccl__op_kind_name(int kind);

/* ---- this process's resource limits (limits.c) ---- */
/* For an errno `err` (positive) that means this process hit a limit of its
 * own (EMFILE, ENFILE, ENOMEM): write which limit, its value and what to
 * raise into buf and return OFCCL_ERR_RESOURCE or OFCCL_ERR_NO_MEMORY;
 * otherwise return 0. `want`: bytes the failed step needed, 0 if unknown. */
int ofccl__limit_explain(int err, size_t want, char *buf, size_t len);
/* Fail with "<fmt>: <error text>[; <explanation>]": the limit's code where
 * ofccl__limit_explain knows `err`, else `fallback`. */
int ofccl__limit_fail(const ofccl__log_t *log, ofccl__err_t *e, int err, size_t want, int fallback,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* 0 when `bytes` more of address space can still be mapped under RLIMIT_AS;
 * else OFCCL_ERR_RESOURCE naming the limit ("rank N: <what>: ..."). */
int ofccl__limit_reserve(const ofccl__log_t *log, ofccl__err_t *e, size_t bytes, const char *what,
                         int rank);
/* ---- shm endpoint files in /dev/shm (shmfile.c) ---- */
/* A unique endpoint name: ofccl_<pid>_<pid namespace>_<counter>_<random>. */
void ofccl__shm_name(char *buf, size_t len);
/* Every peer has mapped the endpoint's file: unlink it (idempotent). */
void ofccl__shm_unlink_own(ofccl__ep_t *ep);
/* Remove files of ofccl processes of this user and PID namespace that exited. */
void ofccl__shm_sweep(const ofccl__log_t *log);
/* Before the AV insert: RLIMIT_AS must leave room for every peer's region
 * (`n` NUL-terminated names, `stride` bytes apart). */
int ofccl__shm_reserve_peers(ofccl__ep_t *ep, const char *names, size_t stride, int n,
                             ofccl__err_t *e);
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
