/*
 * The PMIx bootstrap's host table: which host each rank runs on, from
 * PMIX_NODEID (Open MPI, PRRTE and Slurm give it for every rank) or else from
 * host identities exchanged through PMIx; and each host's name for messages
 * (PMIX_HOSTNAME from the job data, or exchanged with the identities).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmix_impl.h"
#include "util.h"

/* PMIX_NODEID of `rank`, answered from the job data or not at all. 0 or -1. */
static int get_nodeid(pmix_boot_t *pb, int rank, uint64_t *out)
{
    pmix_value_t *v = NULL;
    pmix_info_t info;
    pmix_proc_t proc;
    bool opt = true;
    int ok;

    PMIX_PROC_CONSTRUCT(&proc);
    PMIX_LOAD_PROCID(&proc, pb->me.nspace, (pmix_rank_t)rank);
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &opt, PMIX_BOOL);
    ok = PMIx_Get(&proc, PMIX_NODEID, &info, 1, &v) == PMIX_SUCCESS && v != NULL &&
         ofccl__pmix_value_u64(v, out) == 0;
    if (v != NULL)
        PMIX_VALUE_RELEASE(v);
    PMIX_INFO_DESTRUCT(&info);
    return ok ? 0 : -1;
}

/* Host identities exchanged through PMIx, for servers that give no node ids:
 * each rank publishes "<identity>\0<hostname>", so hosts get their names too. */
static int hosts_by_exchange(ofccl__boot_t *b, const char **ids, ofccl__err_t *e)
{
    size_t slot = OFCCL__HOST_ID_MAX + 1 + 64, idlen = strlen(b->host_id);
    size_t hlen = strnlen(b->hostname, 63);
    char *out = malloc((size_t)b->size * slot), *names = calloc((size_t)b->size, 64);
    size_t *lens = malloc((size_t)b->size * sizeof(*lens));
    char mine[OFCCL__HOST_ID_MAX + 1 + 64];
    int rc;

    if (out == NULL || names == NULL || lens == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory exchanging the host identities of %d ranks", b->size);
        goto out;
    }
    memcpy(mine, b->host_id, idlen + 1);
    memcpy(mine + idlen + 1, b->hostname, hlen);
    rc = ofccl__pmix_allgather(b, mine, idlen + 1 + hlen, out, slot, lens, e);
    for (int r = 0; r < b->size && rc == 0; r++) {
        char *at = out + (size_t)r * slot;
        size_t n = strnlen(at, lens[r]);

        if (n == 0 || n > OFCCL__HOST_ID_MAX || n == lens[r])
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                             "rank %d published a %zu-byte host identity (1..%d, then a NUL and "
                             "its hostname)",
                             r, n, OFCCL__HOST_ID_MAX);
        else
            memcpy(names + (size_t)r * 64, at + n + 1, OFCCL__MIN(lens[r] - n - 1, (size_t)63));
        ids[r] = at;
    }
    if (rc == 0)
        rc = ofccl__boot_hosts_from_ids(b, ids, e);
    if (rc == 0)
        (void)ofccl__boot_set_host_names(b, names, 64);
out:
    free(out);
    free(names);
    free(lens);
    return rc;
}

/* A host's name from the job data, never from a round trip to the server
 * (PMIX_OPTIONAL): node-level data by node id (the PMIx v4 way), else rank
 * r's own PMIX_HOSTNAME. 0, or -1 where the job data has neither. */
static int host_name_of(pmix_boot_t *pb, int r, uint32_t node, char *out, size_t len)
{
    pmix_info_t info[3];
    pmix_proc_t proc;
    bool yes = true;
    int ok = 0;

    for (int how = 0; how < 2 && !ok; how++) {
        pmix_value_t *v = NULL;
        size_t n = 0;

        PMIX_PROC_CONSTRUCT(&proc);
        PMIX_LOAD_PROCID(&proc, pb->me.nspace, how == 0 ? PMIX_RANK_WILDCARD : (pmix_rank_t)r);
        PMIX_INFO_LOAD(&info[n++], PMIX_OPTIONAL, &yes, PMIX_BOOL);
        if (how == 0) {
            PMIX_INFO_LOAD(&info[n++], PMIX_NODE_INFO, &yes, PMIX_BOOL);
            PMIX_INFO_LOAD(&info[n++], PMIX_NODEID, &node, PMIX_UINT32);
        }
        ok = PMIx_Get(&proc, PMIX_HOSTNAME, info, n, &v) == PMIX_SUCCESS && v != NULL &&
             v->type == PMIX_STRING && v->data.string != NULL && v->data.string[0] != '\0';
        if (ok)
            ofccl__strlcpy(out, v->data.string, len);
        if (v != NULL)
            PMIX_VALUE_RELEASE(v);
        for (size_t k = 0; k < n; k++)
            PMIX_INFO_DESTRUCT(&info[k]);
    }
    return ok ? 0 : -1;
}

/* Each host's name (that of its lowest rank), as b->host_names: messages
 * only, a host whose name is missing stays "host #h". node_ids[r]: rank r's
 * node id in decimal. */
static void pmix_host_names(ofccl__boot_t *b, pmix_boot_t *pb, const char *const *node_ids)
{
    char *names = calloc((size_t)b->size, 64);

    if (names == NULL)
        return;
    for (int r = 0, seen = 0; r < b->size; r++) {
        if (b->host_of[r] != seen)
            continue;
        seen++;
        (void)host_name_of(pb, r, (uint32_t)strtoul(node_ids[r], NULL, 10), names + (size_t)r * 64,
                           64);
    }
    (void)ofccl__boot_set_host_names(b, names, 64);
    free(names);
}

int ofccl__pmix_hosts(ofccl__boot_t *b, pmix_boot_t *pb, ofccl__err_t *e)
{
    const char **ids = calloc((size_t)b->size, sizeof(*ids));
    char *names = malloc((size_t)b->size * 24);
    int rc = 0, r;

    if (ids == NULL || names == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory for the host table of %d ranks", b->size);
        goto out;
    }
    for (r = 0; r < b->size; r++) {
        uint64_t node;
        if (get_nodeid(pb, r, &node) != 0)
            break;
        snprintf(names + (size_t)r * 24, 24, "%llu", (unsigned long long)node);
        ids[r] = names + (size_t)r * 24;
    }
    if (r == b->size) {
        rc = ofccl__boot_hosts_from_ids(b, ids, e);
        if (rc == 0)
            pmix_host_names(b, pb, ids);
    } else {
        OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT,
                     "PMIx gives no %s for rank %d: exchanging host identities instead",
                     PMIX_NODEID, r);
        rc = hosts_by_exchange(b, ids, e);
    }
out:
    free(ids);
    free(names);
    return rc;
}
