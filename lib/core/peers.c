/*
 * Peers resolved on demand (OFCCL_BOOT_EXCHANGE=lazy). A world communicator
 * created lazily knows only its own record and its ring neighbours' (read to
 * check the settings that must agree); a peer's record is read from the
 * bootstrap (PMIx direct modex, or the records the bootstrap all-gathered
 * where it cannot serve one) the first time anything is posted to that peer,
 * checked like at creation, and its endpoint inserted (ofccl__ep_add_peer).
 * Ops from a peer this rank has not resolved are accepted all the same: the
 * fabric provider's connection manager takes connections from addresses not
 * in the AV, and every answer (descriptor, credit, signal) is a post, which
 * resolves the peer first. A job's ranks thus open connections, AV entries
 * and key records only for the peers their collectives use: a ring all-gather
 * resolves two. A transport that wants this rank's host first
 * (caps.add_host_first: the composite, whose local half attaches the host's
 * peers) gets them at creation, read and checked the same way; the peers on
 * other hosts still wait for their first use.
 */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "util.h"

static int resolve_rec(ofccl_comm_t *comm, int p, ofccl__peer_rec_t *rec)
{
    size_t slot = ofccl__setup_slot(), len = 0;
    uint8_t *buf = malloc(slot);
    ofccl__err_t e;
    int rc;

    if (buf == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "reading peer %d's record: no memory",
                                p);
    rc = ofccl__boot_get(comm->ctx->boot, comm->pub, p, buf, slot, &len, &e);
    if (rc)
        rc = ofccl__comm_fail(comm, rc,
                              "reading peer %d's record (communicator %u) on demand: %s; with "
                              "OFCCL_BOOT_EXCHANGE=all the records are collected at creation "
                              "instead (for a launcher whose PMIx server cannot answer a "
                              "direct-modex PMIx_Get)",
                              p, comm->id, e.msg);
    else
        rc = ofccl__setup_accept(comm, p, buf, len, rec);
    free(buf);
    return rc;
}

/* Peer p's record, read and checked: its endpoint enters ours. */
static int add_resolved(ofccl_comm_t *comm, int p, const ofccl__peer_rec_t *rec)
{
    int rc = ofccl__ep_add_peer(comm->ep, p, rec->name, rec->namelen, &comm->err);

    if (rc)
        return ofccl__comm_fail(comm, rc, "resolving peer %d: %s", p, comm->err.msg);
    comm->peer_ctrl[p] = rec->ctrl;
    comm->resolved[p] = 1;
    comm->nresolved += p != comm->rank;
    return 0;
}

int ofccl__comm_resolve(ofccl_comm_t *comm, int p)
{
    ofccl__peer_rec_t rec;
    uint64_t t0;
    int rc;

    if (comm->resolved == NULL || comm->resolved[p])
        return 0;
    if (ofccl__comm_usable(comm))
        return comm->sticky;
    t0 = ofccl__now_ns();
    rc = resolve_rec(comm, p, &rec);
    if (rc == 0)
        rc = add_resolved(comm, p, &rec);
    if (rc)
        return rc;
    OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_CORE,
                 "communicator %u rank %d: peer %d resolved on first use in %.1f us (%d of %d)",
                 comm->id, comm->rank, p, (double)(ofccl__now_ns() - t0) / 1e3, comm->nresolved,
                 comm->size - 1);
    return 0;
}

int ofccl__comm_resolve_set(ofccl_comm_t *comm, const uint8_t *a, const uint8_t *b)
{
    for (int p = 0; p < comm->size && comm->resolved != NULL; p++)
        if ((a != NULL && a[p]) || (b != NULL && b[p])) {
            int rc = ofccl__comm_resolve(comm, p);
            if (rc)
                return rc;
        }
    return 0;
}

int ofccl__peers_lazy_init(ofccl_comm_t *comm, const uint8_t *blob, size_t blen)
{
    int n = comm->size, me = comm->rank;
    int nb[2] = {(me + 1) % n, (me + n - 1) % n};
    ofccl__peer_rec_t rec;
    int rc;

    comm->peer_ctrl = calloc((size_t)n, sizeof(*comm->peer_ctrl));
    comm->resolved = calloc((size_t)n, 1);
    if (comm->peer_ctrl == NULL || comm->resolved == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory for %d ranks", n);
    /* This rank's own key now; it is inserted into its own AV, like any
     * peer, on first use: nothing enters the AV before every rank knows
     * that every rank stays lazy (ofccl__comm_create). The host's peers
     * below are the exception: a transport that wants them first adds
     * peers one at a time, as every rank that passed the neighbours' check
     * (same provider) does, so no rank collects every record afterwards. */
    rc = ofccl__setup_accept(comm, me, blob, blen, &rec);
    if (rc)
        return rc;
    comm->peer_ctrl[me] = rec.ctrl;
    /* The host's peers now (this rank first, its own record at hand), where
     * the transport wants them: the host table comes from the bootstrap. */
    if (ofccl__prov_caps(comm->ctx->prov)->add_host_first) {
        rc = add_resolved(comm, me, &rec);
        for (int p = 0; p < n && rc == 0; p++)
            if (p != me && comm->node_of[p] == comm->node_of[me])
                rc = ofccl__comm_resolve(comm, p);
        if (rc == 0)
            OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_CORE,
                         "rank %d: %d peer(s) on this host added at creation, %d on other hosts "
                         "on first use",
                         me, comm->nresolved, n - 1 - comm->nresolved);
    }
    /* The neighbours not resolved by now: checked now, resolved when first used. */
    for (int k = 0; k < 2 && rc == 0; k++)
        if (nb[k] != me && (k == 0 || nb[1] != nb[0]) && !comm->resolved[nb[k]])
            rc = resolve_rec(comm, nb[k], &rec);
    return rc;
}

void ofccl__peers_lazy_drop(ofccl_comm_t *comm)
{
    free(comm->resolved);
    free(comm->peer_ctrl);
    free(comm->host_of);
    free(comm->host_name);
    free(comm->node_of);
    free(comm->node_idx);
    free(comm->node_rank);
    comm->resolved = NULL;
    comm->peer_ctrl = NULL;
    comm->host_of = comm->node_of = comm->node_idx = comm->node_rank = NULL;
    comm->host_name = NULL;
    comm->nhosts = comm->nnodes = comm->node_width = comm->nresolved = 0;
}

int ofccl__comm_peers_resolved(const ofccl_comm_t *comm)
{
    return comm->resolved == NULL ? comm->size - 1 : comm->nresolved;
}
