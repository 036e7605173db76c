/*
 * Private to providers/fabric/: the libfabric backend, the only code in
 * ofccl that calls fi_*. It serves every provider name but the local
 * transport's, with the hints, probing and quirks each needs.
 */
#ifndef OFCCL_PROVIDERS_FABRIC_H
#define OFCCL_PROVIDERS_FABRIC_H

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "prov_impl.h"
#include "watch.h"

/* The libfabric API level ofccl is written against. */
#define OFCCL__FI_VERSION FI_VERSION(1, 17)

_Static_assert(sizeof(struct fi_context2) <= sizeof(((struct ofccl__tp_op *)0)->be_ctx),
               "an op descriptor must hold a struct fi_context2");

/* The provider handle's libfabric objects. */
struct ofccl__fab_prov {
    struct fi_info *info; /* the entry chosen (fi_dupinfo), used for every endpoint */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    /* The provider itself picks keys (FI_MR_PROV_KEY reported); caps.prov_key may
     * also be true only because strict mode asks us to read keys back. */
    bool real_prov_key;
    /* A fetching FI_SUM on FI_UINT64 is valid: the fallback when delivery
     * complete is not available. */
    bool fetch_atomic_ok;
};

/* A zero-length receive kept posted for FI_RX_CQ_DATA: remote CQ data
 * consumes one. */
struct ofccl__fab_rx {
    struct fi_context2 fctx; /* first: the CQ entry's op_context points at it */
    struct ofccl__fab_rx *next;
};

/* An endpoint's libfabric objects. */
struct ofccl__fab_ep {
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_mr *ops_mr; /* registration of the op pool when caps.mr_local */
    void *ops_desc;
    struct ofccl__fab_rx *rx; /* params.rx_posted receives (caps.rx_cq_data) */
    unsigned n_rx;
    struct ofccl__fab_rx *rx_wait; /* consumed receives the provider refused (EAGAIN) */
    char *names;                   /* peer names as inserted; kept until close (see insert_peers) */
    /* Peers added one at a time (add_peer): AV index of each rank, its
     * FI_ADDR_NOTAVAIL until added; NULL: AV index == rank (insert_peers). */
    fi_addr_t *addr;
    size_t nadded;
    /* shm: the name of this endpoint's /dev/shm file until it is unlinked. */
    char shm_name[64];
    /* shm: the processes of the peers in this PID namespace (shmfile.c). */
    ofccl__watch_t watch;
};

/* Steps of an OFCCL__OP_WRITE_DC without FI_DELIVERY_COMPLETE (op->step). */
enum { FAB_STEP_FIRST = 0, FAB_STEP_STAGED, FAB_STEP_FENCE };

static inline struct ofccl__fab_prov *ofccl__fab_prov_of(const ofccl__prov_t *prov)
{
    return prov->be_state;
}

static inline struct ofccl__fab_ep *ofccl__fab_ep_of(const ofccl__ep_t *ep)
{
    return ep->be_state;
}

/* The AV index of rank `peer`. */
static inline fi_addr_t ofccl__fab_dest(const struct ofccl__fab_ep *f, int peer)
{
    return f->addr != NULL ? f->addr[peer] : (fi_addr_t)peer;
}

/* ---- discovery (discover.c) ---- */
/* Set rxm's pool sizes where the user has not, before libfabric reads them. */
void ofccl__fab_env_defaults(void);
/* FI_OPT_CUDA_API_PERMITTED (libfabric 1.18: the option after
 * FI_OPT_XPU_TRIGGER; Debian 12's 1.17 headers predate it, and its library
 * answers -FI_ENOPROTOOPT). */
#define OFCCL__FI_OPT_CUDA_API_PERMITTED (FI_OPT_XPU_TRIGGER + 1)
/* Forbid the endpoint to call CUDA (set before it is enabled): 0, or why
 * not as -FI_*. */
int ofccl__fab_forbid_cuda(struct fid_ep *ep);
/* Pick an fi_info for `prov_name` and `domain`; on success *list owns *pick.
 * On failure `e` says what the provider lacks. */
int ofccl__fab_choose(const ofccl__prov_params_t *p, const char *prov_name, const char *domain,
                      struct fi_info **list, struct fi_info **pick, ofccl__err_t *e);
/* FI_DELIVERY_COMPLETE accepted per operation on the chosen entry's domain. */
bool ofccl__fab_probe_delivery_complete(const struct fi_info *chosen);
/* Give the chosen entry `i` the domain authorization key derived from the
 * job secret (p->job_key) where its provider has one: the enum
 * ofccl__auth_key that says what it got, or -OFCCL_ERR_NO_MEMORY. */
int ofccl__fab_auth_key(const ofccl__prov_params_t *p, struct fi_info *i);
int ofccl__fab_list(const char *prov_name, ofccl__prov_dom_t *out, int max, int *n,
                    ofccl__err_t *e);
void ofccl__fab_available(char *buf, size_t len);

/* ---- endpoints (endpoint.c) ---- */
int ofccl__fab_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e);
int ofccl__fab_ep_stop(ofccl__ep_t *ep, bool failed);
int ofccl__fab_ep_close(ofccl__ep_t *ep);
int ofccl__fab_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e);
int ofccl__fab_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                            int n, ofccl__err_t *e);
void ofccl__fab_peers_ready(ofccl__ep_t *ep);
int ofccl__fab_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e);

/* ---- posting and completions (rma.c) ---- */
int ofccl__fab_post(ofccl__ep_t *ep, struct ofccl__tp_op *op);
/* Post one receive for CQ data (fi_recv's result). */
ssize_t ofccl__fab_post_rx(struct ofccl__fab_ep *f, struct ofccl__fab_rx *rx);
int ofccl__fab_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n);
int ofccl__fab_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err);
const char *ofccl__fab_strerror(int err);
const char *ofccl__fab_op_name(const ofccl__ep_t *ep, const struct ofccl__tp_op *op);

/* ---- registration (mr.c) ---- */
/* Register with the provider's keys or unpredictable ones of ours, bound to
 * the endpoint where FI_MR_ENDPOINT; also used for the op pool. *key_out, if
 * not NULL and not 0 on entry, is the key wanted (ignored under provider keys).
 * `kind`: host memory, or device memory where caps.hmem. */
int ofccl__fab_mr_reg_raw(ofccl__ep_t *ep, void *addr, size_t len, uint64_t fi_access,
                          ofccl__mem_kind_t kind, struct fid_mr **out, uint64_t *key_out,
                          ofccl__err_t *e);
int ofccl__fab_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e);
int ofccl__fab_mr_dereg(ofccl__mr_t *mr);
void *ofccl__fab_mem_alloc(size_t len, intptr_t *cookie);
void ofccl__fab_mem_free(void *ptr, size_t len, intptr_t cookie);

/* ---- shm endpoint files in /dev/shm (shmfile.c) ---- */
/* A unique endpoint name: ofccl_<pid>_<pid namespace>_<counter>_<random>. */
void ofccl__shm_name(char *buf, size_t len);
/* Every peer has mapped the endpoint's file: unlink it (idempotent). */
void ofccl__shm_unlink_own(ofccl__ep_t *ep);
/* Remove files of ofccl processes of this user and PID namespace that exited. */
void ofccl__shm_sweep(const ofccl__log_t *log);
/* Right after `peer`'s address `name` is inserted into the AV: where ofccl
 * names the endpoints (shm) and the name's PID namespace is this process's,
 * watch the peer's process (the pid is in the name). Does nothing elsewhere. */
void ofccl__shm_watch_peer(ofccl__ep_t *ep, int peer, const char *name);
/* The peer_gone slot: a watched peer whose process has exited, or -1. */
int ofccl__fab_peer_gone(ofccl__ep_t *ep, int *pid);
/* Before the AV insert: RLIMIT_AS must leave room for every peer's region
 * (`n` NUL-terminated names, `stride` bytes apart). */
int ofccl__shm_reserve_peers(ofccl__ep_t *ep, const char *names, size_t stride, int n,
                             ofccl__err_t *e);

#endif
