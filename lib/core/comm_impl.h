/*
 * Private to lib/core: what communicator creation (setup.c) and the
 * communicator's own calls (comm.c, world.c) share.
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
/* Host tables (hosts.c). Rank r runs on the host named `name`. */
int ofccl__hosts_add(ofccl_comm_t *comm, int r, const char *name);
/* Hosts by identity from every rank's host key (keys[size]). */
int ofccl__nodes_from_keys(ofccl_comm_t *comm, const uint64_t *keys);
/* Both tables of a lazily created world communicator, from the bootstrap's
 * host table; this rank's host is `my_host`, the others are numbered. */
int ofccl__hosts_from_boot(ofccl_comm_t *comm, const char *my_host);

/* The status exchange (setup_status.c): 0, or the first failure naming the
 * rank. *id: this rank's proposal in, the communicator's number out. */
#define OFCCL__STATUS_LEN 16
int ofccl__setup_status(ofccl_comm_t *comm, const ofccl__xchg_t *x, int mine, uint64_t released,
                        uint32_t *id);
/* As a reduction (x->allreduce); *need_all in: this rank's provider attaches
 * every peer at once; out: some rank's does. */
int ofccl__setup_status_reduced(ofccl_comm_t *comm, const ofccl__xchg_t *x, int mine,
                                uint64_t released, uint32_t *id, bool *need_all);

/* Release everything a (possibly half-built) communicator holds; local. */
void ofccl__comm_free(ofccl_comm_t *comm);

#endif
