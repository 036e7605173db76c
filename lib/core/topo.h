/*
 * Topology (hwloc): loaded once per context; chooses the NIC/domain closest to
 * the calling process's CPU set. The choice is pure over an hwloc topology, so
 * it is tested against XML topologies without special hardware.
 */
#ifndef OFCCL_CORE_TOPO_H
#define OFCCL_CORE_TOPO_H

#include <stddef.h>

#include "err.h"
#include "log.h"

typedef struct ofccl__topo ofccl__topo_t;

typedef struct ofccl__topo_nic {
    const char *name;      /* libfabric domain name: "mlx5_0", "eth0", "lo", "shm" */
    const char *pci_busid; /* "dddd:bb:dd.f" or NULL/"" when unknown */
} ofccl__topo_nic_t;

/* Load this machine's topology (xml_path NULL or "") or an XML export. */
int ofccl__topo_load(const char *xml_path, const ofccl__log_t *lg, ofccl__topo_t **out,
                     ofccl__err_t *e);
void ofccl__topo_free(ofccl__topo_t *t);

/* Choose among `n` candidate NICs the one closest to `cpuset` (hwloc list
 * syntax "0-3,8"; NULL = this process's current binding). Ties keep the
 * earliest candidate (libfabric's order). Writes the reason into `why`. */
int ofccl__topo_pick_nic(ofccl__topo_t *t, const char *cpuset, const ofccl__topo_nic_t *nics, int n,
                         int *chosen, char *why, size_t whylen, ofccl__err_t *e);

/* One line on where this process runs ("bound to PUs 0-1, NUMA node 0 of 1, ...")
 * and, for each NIC given, its locality; for ofccl_info. */
void ofccl__topo_describe(ofccl__topo_t *t, const ofccl__topo_nic_t *nics, int n, char *buf,
                          size_t len);

/* CPU set of the process as an hwloc list string, for logs and for pinning. */
int ofccl__topo_cpuset(ofccl__topo_t *t, char *buf, size_t len);

/* Bind the calling thread to one PU outside `caller` (hwloc list) when the
 * machine has one, else to the caller's last PU. OFCCL_ERR_NOT_SUPPORTED when
 * binding is impossible (the thread still runs, unbound). */
int ofccl__topo_pin_thread(ofccl__topo_t *t, const char *caller, char *why, size_t whylen);

#endif
