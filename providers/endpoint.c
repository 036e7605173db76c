/*
 * Endpoints, whatever the transport: one per communicator, with the op
 * descriptor pool the data path takes from (allocated once, so posting never
 * allocates), its lifecycle (open, stop, close, and the objects a backend
 * must leave open until the process exits), peer names and peer state.
 */
#include <errno.h>
#include <stdlib.h>

#include "prov_impl.h"
#include "util.h"

static int ops_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    unsigned n = ep->params.ops_inflight;

    ep->ops = calloc(n, sizeof(*ep->ops));
    if (ep->ops == NULL)
        return ofccl__limit_fail(ep->prov->log, e, ENOMEM, NULL, n * sizeof(*ep->ops),
                                 OFCCL_ERR_NO_MEMORY, "rank %d: allocating %u op descriptors",
                                 ep->params.rank, n);
    for (unsigned i = n; i-- > 0;) {
        ep->ops[i].next = ep->free_ops;
        ep->free_ops = &ep->ops[i];
    }
    return 0;
}

/* Free the endpoint and whatever it still holds. Returns the first error. */
static int ep_destroy(ofccl__ep_t *ep)
{
    /* The backend first: its objects may point into the op pool. */
    int rc = ep->be->ep_close(ep);

    free(ep->ops);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
    return rc;
}

int ofccl__ep_open(ofccl__prov_t *prov, const ofccl__ep_params_t *params, ofccl__ep_t **out,
                   ofccl__err_t *e)
{
    const ofccl__log_t *log = prov ? prov->log : NULL;
    ofccl__ep_t *ep;
    int ret;

    if (prov == NULL || params == NULL || out == NULL || params->size <= 0 || params->rank < 0 ||
        params->rank >= params->size || params->ops_inflight == 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "endpoint: bad parameters (rank %d, size %d, ops_inflight %u)",
                           params ? params->rank : -1, params ? params->size : -1,
                           params ? params->ops_inflight : 0);
    ret = ofccl__limit_footprint(prov, params->rank, params->size, e);
    if (ret != 0)
        return ret;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return ofccl__limit_fail(log, e, ENOMEM, NULL, sizeof(*ep), OFCCL_ERR_NO_MEMORY,
                                 "rank %d: allocating an endpoint", params->rank);
    ep->prov = prov;
    ep->be = prov->be;
    ep->params = *params;
    pthread_mutex_init(&ep->lock, NULL);
    ret = ops_setup(ep, e);
    if (ret == 0)
        ret = ep->be->ep_setup(ep, e);
    if (ret != 0) {
        ep_destroy(ep);
        return ret;
    }
    pthread_mutex_lock(&prov->lock);
    prov->n_eps++;
    pthread_mutex_unlock(&prov->lock);
    *out = ep;
    return 0;
}

/* Objects left open because closing them would crash the provider
 * (OFCCL__Q_NO_CLOSE_MIDWRITE): held here, reachable, until the process exits. */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static ofccl__ep_t *kept_eps;
static ofccl__prov_t *kept_provs;

void ofccl__tp_keep_prov(ofccl__prov_t *prov)
{
    pthread_mutex_lock(&kept_lock);
    prov->kept_next = kept_provs;
    kept_provs = prov;
    pthread_mutex_unlock(&kept_lock);
}

int ofccl__ep_shutdown(ofccl__ep_t *ep, bool failed)
{
    int rc;

    if (ep == NULL)
        return 0;
    pthread_mutex_lock(&ep->lock);
    if (ep->stopped) {
        pthread_mutex_unlock(&ep->lock);
        return 0;
    }
    /* Under the lock: a progress or posting call in another thread either
     * finished before this or sees the flag and does nothing. */
    ep->stopped = true;
    /* Queued ops never reached the transport: nothing to cancel there. */
    ep->rq_head = ep->rq_tail = NULL;
    rc = ep->be->ep_stop(ep, failed);
    if (rc == OFCCL__TP_LEFT_OPEN) {
        ep->abandoned = true;
        rc = 0;
    }
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

int ofccl__ep_close(ofccl__ep_t *ep)
{
    ofccl__prov_t *prov;
    unsigned n_mrs;

    if (ep == NULL)
        return 0;
    prov = ep->prov;
    pthread_mutex_lock(&ep->lock);
    n_mrs = ep->n_mrs;
    pthread_mutex_unlock(&ep->lock);
    if (n_mrs > 0)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_BUSY,
                           "rank %d: endpoint still has %u registered memory region(s)",
                           ep->params.rank, n_mrs);
    pthread_mutex_lock(&prov->lock);
    prov->n_eps--;
    prov->n_abandoned += ep->abandoned;
    pthread_mutex_unlock(&prov->lock);
    if (ep->abandoned) {
        /* The transport may still hold pointers into it (op contexts, names). */
        pthread_mutex_lock(&kept_lock);
        ep->kept_next = kept_eps;
        kept_eps = ep;
        pthread_mutex_unlock(&kept_lock);
        return 0;
    }
    /* Ops still in flight are cancelled with the endpoint (the abort path). */
    return ep_destroy(ep);
}

int ofccl__ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e)
{
    if (ep == NULL || buf == NULL || len == NULL)
        return ofccl__fail(ep ? ep->prov->log : NULL, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__ep_name: bad arguments");
    return ep->be->ep_name(ep, buf, len, e);
}

int ofccl__ep_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep ? ep->prov->log : NULL;
    int ret;

    if (ep == NULL || names == NULL || lens == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__ep_insert_peers: bad arguments");
    if (ep->peers_inserted)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_STATE,
                           "rank %d: peers were already inserted into this endpoint's AV",
                           ep->params.rank);
    if (n != ep->params.size)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: %d names given for a communicator of %d ranks",
                           ep->params.rank, n, ep->params.size);
    ret = ep->be->insert_peers(ep, names, stride, lens, n, e);
    ep->peers_inserted = ret == 0;
    return ret;
}

int ofccl__ep_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep ? ep->prov->log : NULL;
    int ret;

    if (ep == NULL || name == NULL || peer < 0 || peer >= ep->params.size)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__ep_add_peer: bad arguments (peer %d)", peer);
    if (!ep->prov->caps.add_peer)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: %s inserts every peer at once, not peer %d alone",
                           ep->params.rank, ep->prov->caps.name, peer);
    if (ep->peers_inserted)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_STATE,
                           "rank %d: peers were already inserted into this endpoint's AV",
                           ep->params.rank);
    pthread_mutex_lock(&ep->lock);
    ret = ep->be->add_peer(ep, peer, name, len, e);
    pthread_mutex_unlock(&ep->lock);
    return ret;
}

void ofccl__ep_peers_ready(ofccl__ep_t *ep)
{
    if (ep != NULL)
        ep->be->peers_ready(ep);
}

int ofccl__ep_peer_gone(ofccl__ep_t *ep, int *pid)
{
    return ep->be->peer_gone(ep, pid);
}

int ofccl__ep_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__err_t *e)
{
    ofccl__mem_kind_t kind = OFCCL__MEM_HOST;
    int rc = ofccl__ep_peer_map_kind(ep, peer, rk, roff, len, access, ptr, &kind, e);

    if (rc == 0 && kind != OFCCL__MEM_HOST) {
        *ptr = NULL;
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: peer %d's region is device memory (cuda:%d): its mapping "
                           "takes no CPU loads or stores",
                           ep->params.rank, peer, kind);
    }
    return rc;
}

int ofccl__ep_peer_map_kind(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                            size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                            ofccl__err_t *e)
{
    int rc;

    *ptr = NULL;
    if (!ep->prov->caps.peer_map && !ep->prov->caps.peer_map_some)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: %s cannot map peer %d's memory here (no peer_map capability)",
                           ep->params.rank, ep->prov->caps.name, peer);
    if (peer < 0 || peer >= ep->params.size || rk == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: mapping peer %d's memory: no such peer or no key",
                           ep->params.rank, peer);
    pthread_mutex_lock(&ep->lock);
    rc = ep->be->peer_map(ep, peer, rk, roff, len, access, ptr, kind, e);
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

int ofccl__ep_wait_fd(const ofccl__ep_t *ep)
{
    return ep->be->wait_fd(ep);
}

unsigned ofccl__ep_pending(const ofccl__ep_t *ep)
{
    return atomic_load_explicit(&ep->pending, memory_order_relaxed);
}

int ofccl__ep_peer_class(const ofccl__ep_t *ep, int peer)
{
    return ep->be->peer_class(ep, peer);
}

bool ofccl__ep_reaches(const ofccl__ep_t *ep, int peer, ofccl__mem_kind_t kind)
{
    return ep->be->reaches(ep->prov, ofccl__ep_peer_class(ep, peer) == OFCCL__PEER_LOCAL, kind);
}

const ofccl__prov_caps_t *ofccl__ep_caps(const ofccl__ep_t *ep)
{
    return &ep->prov->caps;
}
