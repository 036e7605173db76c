/*
 * Private to lib/core: what communicator creation (setup.c) and the
 * communicator's own calls (comm.c) share.
 */
#ifndef OFCCL_CORE_COMM_IMPL_H
#define OFCCL_CORE_COMM_IMPL_H

#include "core.h"

/* The signal path this communicator uses (OFCCL_SIGNAL and the provider's
 * capabilities): sets comm->signal_mode or fails naming what is missing. */
int ofccl__comm_choose_signal(ofccl_comm_t *comm, const ofccl__prov_caps_t *caps);
/* Point the endpoint's completion handlers at this communicator. */
void ofccl__comm_handlers(ofccl_comm_t *comm);
/* A peer's setup record as this rank uses it (setup.c decodes and checks it). */
typedef struct ofccl__peer_rec {
    uint32_t comm_id;
    uint64_t host_key;
    char host[64];
    ofccl__rkey_t ctrl;
    uint8_t name[OFCCL__NAME_MAX];
    size_t namelen;
} ofccl__peer_rec_t;
/* Bytes of the largest encoded setup record (blob header included). */
size_t ofccl__setup_slot(void);
/* Decode rank r's encoded record (untrusted: `len` bytes from the bootstrap)
 * and check that it agrees with this rank's (comm->setup_mine): 0, or the
 * communicator's error (CORRUPT, MISMATCH) naming rank r. */
int ofccl__setup_accept(ofccl_comm_t *comm, int r, const uint8_t *blob, size_t len,
                        ofccl__peer_rec_t *out);
/* Map peer p's control region (caps.peer_map) at comm->peer_ctrl_at[p]. */
int ofccl__setup_map_peer(ofccl_comm_t *comm, int p);
/* Lazy creation (peers.c): host tables from the bootstrap, this rank resolved
 * from its own encoded record, the ring neighbours' records read and checked
 * (equality is transitive along the ring: a setting that differs anywhere
 * differs between some pair of neighbours); everything else on first use. */
int ofccl__peers_lazy_init(ofccl_comm_t *comm, const uint8_t *blob, size_t blen);
/* Undo ofccl__peers_lazy_init and the host tables: the ranks fall back to
 * collecting every record (a provider that attaches every peer at once). */
void ofccl__peers_lazy_drop(ofccl_comm_t *comm);
/* Release everything a (possibly half-built) communicator holds; local. */
void ofccl__comm_free(ofccl_comm_t *comm);

#endif
