/*
 * Private to providers/: the local provider, ofccl's own transport between
 * processes of one host (local.c). prov.c, ep.c, mr.c and post.c call these
 * where the endpoint has no libfabric objects (ep->lx != NULL); everything
 * else in the provider layer (op pool, EAGAIN retry FIFO, completion
 * delivery, fault injection) is shared with the libfabric path.
 */
#ifndef OFCCL_PROVIDERS_LOCAL_H
#define OFCCL_PROVIDERS_LOCAL_H

#include "prov_impl.h"

/* The alias users type in OFCCL_PROVIDER. */
#define OFCCL__LOCAL_NAME "local"

/* Fill prov->caps for the local provider (no fabric or domain to open). */
int ofccl__lx_prov_open(ofccl__prov_t *prov, const ofccl__prov_params_t *params, ofccl__err_t *e);
/* Create the endpoint's shared segment (registration table, CQ-data rings). */
int ofccl__lx_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e);
void ofccl__lx_ep_destroy(ofccl__ep_t *ep);
int ofccl__lx_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e);
int ofccl__lx_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e);
/* Publish [addr, addr+len) in the registration table; *handle goes in mr->fid;
 * *shared: the bytes are ofccl shared memory, which peers can map. */
int ofccl__lx_mr_reg(ofccl__ep_t *ep, void *addr, size_t len, unsigned access, void **handle,
                     uint64_t *key, bool *shared, ofccl__err_t *e);
void ofccl__lx_mr_dereg(ofccl__ep_t *ep, void *handle);
/* Carry out one op now (caller holds ep->lock). 0: done, its completion (or
 * error entry) is queued for ofccl__lx_cq_read; -FI_EAGAIN: the target's
 * CQ-data ring is full, nothing was done. */
ssize_t ofccl__lx_post(ofccl__ep_t *ep, struct ofccl__op *op);
/* fi_cq_read / fi_cq_readerr / fi_cq_strerror over the local completion
 * queue and the rings peers write CQ data into (caller holds ep->lock). */
ssize_t ofccl__lx_cq_read(ofccl__ep_t *ep, struct fi_cq_data_entry *ents, size_t n);
/* True when no peer has CQ data waiting in our rings (no lock needed). */
bool ofccl__lx_rings_empty(const ofccl__ep_t *ep);
ssize_t ofccl__lx_cq_readerr(ofccl__ep_t *ep, struct fi_cq_err_entry *err);
const char *ofccl__lx_strerror(const struct fi_cq_err_entry *err, char *buf, size_t len);
/* Lowest rank whose process has exited (pidfd), -1 if none; polls at most
 * once per millisecond. */
int ofccl__lx_peer_gone(ofccl__ep_t *ep);
int ofccl__lx_peer_pid(const ofccl__ep_t *ep, int peer);
/* ofccl__ep_peer_map for the local provider (caller holds ep->lock). */
int ofccl__lx_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__err_t *e);
/* Shared memory for windows peers write into; see ofccl__prov_mem_alloc. */
void *ofccl__lx_mem_alloc(size_t len);
/* False when `ptr` was not allocated by ofccl__lx_mem_alloc (nothing freed). */
bool ofccl__lx_mem_free(void *ptr);

#endif
