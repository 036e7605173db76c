/*
 * A communicator's host tables: names for messages (host_of, host_name) and
 * hosts by identity (node_of, node_idx, node_rank), from the peers' setup
 * records or, for a lazily created world communicator, from the bootstrap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "util.h"

/* Rank r runs on the host named `name` (for messages that name hosts). */
int ofccl__hosts_add(ofccl_comm_t *comm, int r, const char *name)
{
    int h;

    for (h = comm->nhosts - 1; h >= 0 && strcmp(comm->host_name[h], name) != 0; h--)
        ;
    if (h < 0) {
        h = comm->nhosts++;
        ofccl__strlcpy(comm->host_name[h], name, sizeof(comm->host_name[h]));
    }
    comm->host_of[r] = h;
    return 0;
}

/* Hosts by identity from every rank's host key (keys[size]): node_of,
 * node_idx, and, where every host has as many ranks, node_rank. */
int ofccl__nodes_from_keys(ofccl_comm_t *comm, const uint64_t *keys)
{
    int n = comm->size, *count;

    comm->node_of = calloc((size_t)n, sizeof(int));
    comm->node_idx = calloc((size_t)n, sizeof(int));
    comm->node_rank = calloc((size_t)n, sizeof(int));
    count = calloc((size_t)n, sizeof(int));
    if (!comm->node_of || !comm->node_idx || !comm->node_rank || !count) {
        free(count);
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory for %d ranks", n);
    }
    comm->nnodes = 0;
    for (int r = 0; r < n; r++) {
        int h = 0;
        while (h < r && keys[h] != keys[r])
            h++;
        /* h: the lowest rank of r's host; number hosts in that order. */
        comm->node_of[r] = h == r ? comm->nnodes++ : comm->node_of[h];
        comm->node_idx[r] = count[comm->node_of[r]]++;
    }
    comm->node_width = n / comm->nnodes;
    for (int h = 0; h < comm->nnodes; h++)
        if (count[h] != comm->node_width)
            comm->node_width = 0;
    for (int r = 0; r < n && comm->node_width > 0; r++)
        comm->node_rank[comm->node_of[r] * comm->node_width + comm->node_idx[r]] = r;
    free(count);
    return 0;
}

/* Hosts of a lazily created world communicator: the bootstrap's host table
 * (PMIx node ids, or identities from the rendezvous), since the peers'
 * records are not read yet. Hosts are named as the bootstrap knows them
 * (PMIX_HOSTNAME, the rendezvous root's table), else by index. */
int ofccl__hosts_from_boot(ofccl_comm_t *comm, const char *my_host)
{
    const ofccl__boot_t *b = comm->ctx->boot;
    uint64_t *keys = calloc((size_t)comm->size, sizeof(*keys));
    int rc;

    comm->host_of = calloc((size_t)comm->size, sizeof(*comm->host_of));
    comm->host_name = calloc((size_t)comm->size, sizeof(*comm->host_name));
    if (keys == NULL || !comm->host_of || !comm->host_name || b->size != comm->size) {
        free(keys);
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory for %d ranks",
                                comm->size);
    }
    for (int r = 0; r < comm->size; r++) {
        char name[64];

        keys[r] = (uint64_t)b->host_of[r];
        if (b->host_of[r] == b->host_of[comm->rank])
            ofccl__strlcpy(name, my_host, sizeof(name));
        else
            ofccl__boot_host_name(b, b->host_of[r], name, sizeof(name));
        ofccl__hosts_add(comm, r, name);
    }
    rc = ofccl__nodes_from_keys(comm, keys);
    free(keys);
    return rc;
}
