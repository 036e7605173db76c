/*
 * The composite transport's state, shared by its two files (private to
 * providers/): mixed.c (joining the transports, endpoints, names, peers) and
 * mixed_path.c (registration under one key, the data path, per-peer
 * answers).
 */
#ifndef OFCCL_PROVIDERS_MIXED_IMPL_H
#define OFCCL_PROVIDERS_MIXED_IMPL_H

#include "prov_impl.h"

#define MX_MAGIC 0x32584d6c6363666full   /* "ofcclMX2" little-endian */
#define MX_MAX OFCCL__PEER_CLASSES       /* transports in a composite */
#define MX_HDR(n) (20 + 4 * (size_t)(n)) /* magic, host hash, count, a length per transport */
#define MX_KEY_TRIES 3

struct mx_prov {
    int n;
    ofccl__prov_t *sub[MX_MAX]; /* in the order they are asked */
    uint64_t host;              /* hash of this host's identity */
};

struct mx_ep {
    int n;
    ofccl__ep_t sub[MX_MAX];
    bool set_up[MX_MAX];
    uint8_t *cls; /* [size]: the transport serving each peer's host memory */
    int err_sub;  /* the transport whose error entry is next, -1: none */
    int first;    /* the transport read first by the next cq_read */
};

struct mx_mr {
    ofccl__mr_t sub[MX_MAX];
};

static inline struct mx_prov *mxp(const ofccl__prov_t *prov)
{
    return prov->be_state;
}

static inline struct mx_ep *mxe(const ofccl__ep_t *ep)
{
    return ep->be_state;
}

/* Does transport c reach a peer (on this host or not) with memory of `kind`? */
static inline bool ofccl__mx_reaches_with(const struct mx_ep *mx, int c, bool same_host,
                                          ofccl__mem_kind_t kind)
{
    return mx->sub[c].be->reaches(mx->sub[c].prov, same_host, kind);
}

/* mixed_path.c: the backend slots of the data path */
int ofccl__mx_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e);
int ofccl__mx_mr_dereg(ofccl__mr_t *mr);
int ofccl__mx_post(ofccl__ep_t *ep, struct ofccl__tp_op *op);
int ofccl__mx_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n);
int ofccl__mx_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err);
bool ofccl__mx_idle(const ofccl__ep_t *ep);
const char *ofccl__mx_strerror(int err);
int ofccl__mx_peer_gone(ofccl__ep_t *ep, int *pid);
int ofccl__mx_peer_class(const ofccl__ep_t *ep, int peer);
int ofccl__mx_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                       ofccl__err_t *e);
bool ofccl__mx_reaches(const ofccl__prov_t *prov, bool same_host, ofccl__mem_kind_t kind);

#endif
