/*
 * The chooser's cost model (cost.c): a predicted time for each candidate
 * algorithm of a collective from the communicator's shape and the latency
 * alpha and bandwidth beta of its two link classes (same-host peers through
 * the local transport; peers through the fabric). Pure functions of
 * ofccl__cost_topo_t, so every rank that agrees on the constants (links.c)
 * predicts, and chooses, the same.
 */
#ifndef OFCCL_COLL_COST_H
#define OFCCL_COLL_COST_H

#include <stdbool.h>
#include <stddef.h>

#include "core.h"

enum ofccl__cost_cand {
    OFCCL__CAND_DIRECT, /* every rank with every peer at once (all-pairs; broadcast: the root) */
    OFCCL__CAND_RING,   /* n-1 steps around the ranks, host-major */
    OFCCL__CAND_HIER,   /* between hosts along rails, then within each host */
    OFCCL__CAND_CHAIN,  /* broadcast: a pipeline of chunks along the ranks */
    OFCCL__CAND_COUNT
};

typedef struct ofccl__cost_topo {
    int n;                             /* ranks */
    int hosts;                         /* hosts (the node table's nnodes) */
    int width;                         /* ranks per host when every host has as many, else 0 */
    bool local_peers;                  /* same-host peers go through the local transport */
    bool peer_map;                     /* every peer's memory maps here (readers pull at once) */
    bool fabric_cpu;                   /* the fabric's bytes are copied on the rank's core */
    int streams;                       /* OFCCL_LINK_STREAMS: an endpoint's full-rate streams */
    size_t chunk;                      /* OFCCL_CHUNK_BYTES: the chain's pipeline unit */
    double alpha[OFCCL__LINK_CLASSES]; /* seconds */
    double beta[OFCCL__LINK_CLASSES];  /* bytes per second */
} ofccl__cost_topo_t;

/* The shape and agreed constants of a communicator. */
void ofccl__cost_topo_of(const ofccl_comm_t *comm, ofccl__cost_topo_t *t);
/* Predicted seconds of collective `coll` (OFCCL__AG, OFCCL__RS, OFCCL__BC) by
 * candidate `cand` moving `bytes`: each rank's block for all-gather and
 * reduce-scatter, the whole buffer for broadcast; a reduce-scatter's includes
 * its sums, which differ by candidate (one of n inputs for direct, n - 1 of two
 * for the ring). A candidate the shape cannot run (hier on one host) costs
 * +inf. */
double ofccl__cost_time(const ofccl__cost_topo_t *t, int coll, int cand, size_t bytes);
/* The cheapest candidate among those in `valid` (bit 1 << cand); ties go to
 * the lower one (direct first). OFCCL__CAND_COUNT when `valid` is empty. */
int ofccl__cost_pick(const ofccl__cost_topo_t *t, int coll, size_t bytes, unsigned valid);
const char *ofccl__cost_cand_name(int cand);

/* select.c: the candidates of `coll` that can run on the communicator (bit
 * 1 << cand), and the one the model picks among them for `bytes`. */
unsigned ofccl__choose_valid(const ofccl_comm_t *comm, int coll);
int ofccl__choose_model(const ofccl_comm_t *comm, int coll, size_t bytes);
/* One line for logs and ofccl_info: the agreed link constants and, per
 * collective (all-gather, reduce-scatter, broadcast: `valid`, as
 * ofccl__choose_valid says), the candidate the model picks from 1 KiB to
 * 1 GiB ("direct, ring from 256K"). */
void ofccl__cost_describe(const ofccl_comm_t *comm, const unsigned valid[3], char *buf, size_t len);

#endif
