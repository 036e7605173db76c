/*
 * Endpoints: one RDM endpoint with its AV and CQ per communicator, plus the
 * resources the data path needs so it never allocates: the op descriptor pool
 * (registered once when local buffers must be registered, since atomic
 * operands live in it) and the receives kept posted for FI_RX_CQ_DATA.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "prov_impl.h"
#include "util.h"

/* Receives kept posted when the caller asks for none but the provider needs them. */
#define DEFAULT_RX_POSTED 64
/* How long ep_open keeps trying to post its receives when the provider says EAGAIN. */
#define RX_POST_TRIES 1000

static int post_initial_receives(ofccl__ep_t *ep, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep->prov->log;

    for (unsigned i = 0; i < ep->n_rx; i++) {
        struct ofccl__op *op = &ep->rx[i];
        ssize_t ret = -FI_EAGAIN;

        op->kind = OFCCL__OP_RECV;
        op->peer = -1;
        for (int t = 0; t < RX_POST_TRIES && ret == -FI_EAGAIN; t++) {
            ret = ofccl__op_post(ep, op);
            if (ret == -FI_EAGAIN) {
                struct fi_cq_data_entry ent;
                /* Nothing can have completed yet: reading only drives progress. */
                (void)fi_cq_read(ep->cq, &ent, 0);
            }
        }
        if (ret != 0)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: posting receive %u of %u for remote CQ data failed: %s",
                               ep->params.rank, i + 1, ep->n_rx, fi_strerror((int)-ret));
    }
    return 0;
}

/* Close the libfabric objects still open, the endpoint before what it is
 * bound to. One that fails (e.g. -FI_EBUSY while a FI_MR_ENDPOINT region is
 * still bound to it) is kept and tried again by the next call: ep_destroy
 * calls this once more after every region is gone. Returns the first error. */
static int close_fids(ofccl__ep_t *ep)
{
    const ofccl__log_t *log = ep->prov->log;
    struct {
        struct fid **fid;
        const char *what;
    } objs[] = {
        /* The endpoint first: closing it cancels what is in flight, so no
         * completion can name an op descriptor, and the provider lets go of
         * every buffer and region those ops pointed at. */
        {(struct fid **)&ep->ep, "the endpoint"},
        /* Atomic operands of cancelled ops lived in the pool: only now. */
        {(struct fid **)&ep->ops_mr, "the op pool registration"},
        {(struct fid **)&ep->cq, "the CQ"},
        {(struct fid **)&ep->av, "the AV"},
    };
    int rc = 0;

    for (size_t i = 0; i < OFCCL__ARRAY_LEN(objs); i++) {
        /* Every fid_* starts with its struct fid: close through that. */
        struct fid *fid = *objs[i].fid;
        int ret;

        if (fid == NULL)
            continue;
        ret = fi_close(fid);
        if (ret == 0) {
            *objs[i].fid = NULL;
            continue;
        }
        if (rc == 0)
            rc = ofccl__fail(log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_PROVIDER,
                             "rank %d: closing %s: %s (tried again when the endpoint is freed)",
                             ep->params.rank, objs[i].what, fi_strerror(-ret));
    }
    return rc;
}

/* Free the endpoint and whatever it still holds. Returns the first error. */
static int ep_destroy(ofccl__ep_t *ep)
{
    int rc = close_fids(ep);

    ofccl__lx_ep_destroy(ep);
    free(ep->rx);
    free(ep->ops);
    free(ep->names); /* only now: the AV (closed above) may point into it */
    pthread_mutex_destroy(&ep->lock);
    free(ep);
    return rc;
}

/* The op descriptor pool, shared by the libfabric and local paths. */
static int ops_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    unsigned n = ep->params.ops_inflight;

    ep->ops = calloc(n, sizeof(*ep->ops));
    if (ep->ops == NULL)
        return ofccl__limit_fail(ep->prov->log, e, ENOMEM, n * sizeof(*ep->ops),
                                 OFCCL_ERR_NO_MEMORY, "rank %d: allocating %u op descriptors",
                                 ep->params.rank, n);
    for (unsigned i = n; i-- > 0;) {
        ep->ops[i].next = ep->free_ops;
        ep->free_ops = &ep->ops[i];
    }
    return 0;
}

static int ep_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    ofccl__prov_t *prov = ep->prov;
    const ofccl__log_t *log = prov->log;
    const ofccl__ep_params_t *params = &ep->params;
    struct fi_av_attr av_attr;
    struct fi_cq_attr cq_attr;
    int ret;

    if (prov->caps.rx_cq_data) {
        ep->n_rx = params->rx_posted ? params->rx_posted : DEFAULT_RX_POSTED;
        ep->rx = calloc(ep->n_rx, sizeof(*ep->rx));
        if (ep->rx == NULL)
            return ofccl__limit_fail(
                log, e, ENOMEM, ep->n_rx * sizeof(*ep->rx), OFCCL_ERR_NO_MEMORY,
                "rank %d: allocating %u receive descriptors", params->rank, ep->n_rx);
    }

    ret = fi_endpoint(prov->domain, prov->info, &ep->ep, NULL);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, 0, OFCCL_ERR_PROVIDER, "rank %d: fi_endpoint on %s",
                                 params->rank, prov->caps.name);
    memset(&av_attr, 0, sizeof(av_attr));
    /* FI_AV_TABLE: the fi_addr of the n-th insert is n, so fi_addr == rank. */
    av_attr.type = FI_AV_TABLE;
    av_attr.count = (size_t)params->size;
    ret = fi_av_open(prov->domain, &av_attr, &ep->av, NULL);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: fi_av_open(FI_AV_TABLE)", params->rank);
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(prov->domain, &cq_attr, &ep->cq, NULL);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, 0, OFCCL_ERR_PROVIDER, "rank %d: fi_cq_open",
                                 params->rank);
    if (prov->caps.quirks & OFCCL__Q_NAME_PER_PROCESS) {
        /* The provider derives names from the pid and a per-domain index, so a
         * second context's endpoint would take the first one's name and clobber
         * the region its peers are writing into: ofccl names each one (and can
         * then unlink its file, see shmfile.c). */
        ofccl__shm_name(ep->shm_name, sizeof(ep->shm_name));
        ret = fi_setname(&ep->ep->fid, ep->shm_name, strlen(ep->shm_name) + 1);
        if (ret != 0)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: naming the %s endpoint '%s' failed: %s", params->rank,
                               prov->caps.name, ep->shm_name, fi_strerror(-ret));
    }
    ret = fi_ep_bind(ep->ep, &ep->av->fid, 0);
    if (ret == 0)
        ret = fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret == 0)
        ret = fi_enable(ep->ep);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: binding/enabling the %s endpoint", params->rank,
                                 prov->caps.name);
    if (prov->caps.mr_local) {
        /* Atomic operands and fetch results live in the descriptors. */
        ret = ofccl__mr_reg_raw(ep, ep->ops, params->ops_inflight * sizeof(*ep->ops),
                                FI_READ | FI_WRITE, &ep->ops_mr, NULL, e);
        if (ret != 0)
            return ret;
        ep->ops_desc = fi_mr_desc(ep->ops_mr);
    }
    return post_initial_receives(ep, e);
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
        return ofccl__limit_fail(log, e, ENOMEM, sizeof(*ep), OFCCL_ERR_NO_MEMORY,
                                 "rank %d: allocating an endpoint", params->rank);
    ep->prov = prov;
    ep->params = *params;
    pthread_mutex_init(&ep->lock, NULL);
    ret = ops_setup(ep, e);
    if (ret == 0)
        ret = prov->local ? ofccl__lx_ep_setup(ep, e) : ep_setup(ep, e);
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

void ofccl__ep_keep(ofccl__prov_t *prov)
{
    pthread_mutex_lock(&kept_lock);
    prov->kept_next = kept_provs;
    kept_provs = prov;
    pthread_mutex_unlock(&kept_lock);
}

int ofccl__ep_shutdown(ofccl__ep_t *ep, bool failed)
{
    int rc = 0;

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
    /* Queued ops never reached the provider: nothing to cancel there. */
    ep->rq_head = ep->rq_tail = NULL;
    if (failed && ep->ep != NULL && (ep->prov->caps.quirks & OFCCL__Q_NO_CLOSE_MIDWRITE)) {
        /* Never progressed again, the provider reads nothing more from its
         * sockets: no write lands any more in memory the caller frees next. */
        ep->abandoned = true;
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: the failed communicator's %s endpoint stays open until the "
                    "process exits: closing it while a peer's write is half received would "
                    "crash the provider (see its quirk note in ofccl_info)",
                    ep->params.rank, ep->prov->caps.name);
    } else {
        rc = close_fids(ep);
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
        /* libfabric may still hold pointers into it (op contexts, names). */
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
    size_t n;
    int ret;

    if (ep == NULL || buf == NULL || len == NULL)
        return ofccl__fail(ep ? ep->prov->log : NULL, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__ep_name: bad arguments");
    if (ep->lx != NULL)
        return ofccl__lx_ep_name(ep, buf, len, e);
    n = *len;
    ret = fi_getname(&ep->ep->fid, buf, &n);
    if (ret == -FI_ETOOSMALL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: endpoint name needs %zu bytes, buffer has %zu",
                           ep->params.rank, n, *len);
    if (ret != 0)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                           "rank %d: fi_getname failed: %s", ep->params.rank, fi_strerror(-ret));
    *len = n;
    return 0;
}

int ofccl__ep_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep ? ep->prov->log : NULL;

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
    if (ep->lx != NULL) {
        int ret = ofccl__lx_insert_peers(ep, names, stride, lens, n, e);
        ep->peers_inserted = ret == 0;
        return ret;
    }
    /* libfabric 1.17's shm keys its name map on the pointer it is given (it
     * does not copy the string): the names must outlive the AV, so the
     * endpoint keeps its own copy, NUL-terminated, until it closes. */
    ep->names = calloc((size_t)n, stride + 1);
    if (ep->names == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: no memory for %d peer names", ep->params.rank, n);
    for (int r = 0; r < n; r++) {
        /* Names come from peers through the bootstrap: never trust their length. */
        if (lens[r] == 0 || lens[r] > stride)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                               "rank %d: name of peer %d has length %zu (slot is %zu bytes)",
                               ep->params.rank, r, lens[r], stride);
        memcpy(ep->names + (size_t)r * (stride + 1), (const char *)names + (size_t)r * stride,
               lens[r]);
    }
    if (ep->shm_name[0] != '\0') {
        int ret = ofccl__shm_reserve_peers(ep, ep->names, stride + 1, n, e);
        if (ret != 0)
            return ret;
    }
    for (int r = 0; r < n; r++) {
        char *name = ep->names + (size_t)r * (stride + 1);
        fi_addr_t addr = FI_ADDR_NOTAVAIL;
        int ret;

        errno = 0;
        ret = fi_av_insert(ep->av, name, 1, &addr, 0, NULL);
        if (ret != 1 && (ret < 0 || errno != 0)) /* errno: what a failed mmap or open left */
            return ofccl__limit_fail(log, e, ret < 0 ? -ret : errno, 0, OFCCL_ERR_PROVIDER,
                                     "rank %d: inserting the address of peer %d", ep->params.rank,
                                     r);
        if (ret != 1)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: inserting the address of peer %d failed: address "
                               "rejected",
                               ep->params.rank, r);
        if (addr != (fi_addr_t)r)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                               "rank %d: peer %d got AV index %" PRIu64 " (FI_AV_TABLE order "
                               "broken)",
                               ep->params.rank, r, (uint64_t)addr);
    }
    ep->peers_inserted = true;
    return 0;
}

void ofccl__ep_peers_ready(ofccl__ep_t *ep)
{
    if (ep != NULL)
        ofccl__shm_unlink_own(ep);
}

int ofccl__ep_peer_gone(ofccl__ep_t *ep, int *pid)
{
    int peer = ep->lx != NULL ? ofccl__lx_peer_gone(ep) : -1;

    if (pid != NULL)
        *pid = peer >= 0 ? ofccl__lx_peer_pid(ep, peer) : -1;
    return peer;
}

int ofccl__ep_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__err_t *e)
{
    *ptr = NULL;
    if (ep->lx == NULL || !ep->prov->caps.peer_map)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: %s cannot map peer %d's memory here (no peer_map capability)",
                           ep->params.rank, ep->prov->caps.name, peer);
    if (peer < 0 || peer >= ep->params.size || rk == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: mapping peer %d's memory: no such peer or no key",
                           ep->params.rank, peer);
    pthread_mutex_lock(&ep->lock);
    int rc = ofccl__lx_peer_map(ep, peer, rk, roff, len, access, ptr, e);
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

unsigned ofccl__ep_pending(const ofccl__ep_t *ep)
{
    return atomic_load_explicit(&ep->pending, memory_order_relaxed);
}

const ofccl__prov_caps_t *ofccl__ep_caps(const ofccl__ep_t *ep)
{
    return &ep->prov->caps;
}
