/*
 * libfabric endpoints: one RDM endpoint with its AV and CQ per communicator,
 * plus what the data path needs so it never allocates: the registration of
 * the op pool (when local buffers must be registered, since atomic operands
 * live in it) and the receives kept posted for FI_RX_CQ_DATA.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "util.h"

/* Receives kept posted when the caller asks for none but the provider needs them. */
#define DEFAULT_RX_POSTED 64
/* How long ep_setup keeps trying to post its receives when the provider says EAGAIN. */
#define RX_POST_TRIES 1000

static int post_initial_receives(ofccl__ep_t *ep, ofccl__err_t *e)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);

    for (unsigned i = 0; i < f->n_rx; i++) {
        ssize_t ret = -FI_EAGAIN;

        for (int t = 0; t < RX_POST_TRIES && ret == -FI_EAGAIN; t++) {
            ret = ofccl__fab_post_rx(f, &f->rx[i]);
            if (ret == -FI_EAGAIN) {
                struct fi_cq_data_entry ent;
                /* Nothing can have completed yet: reading only drives progress. */
                (void)fi_cq_read(f->cq, &ent, 0);
            }
        }
        if (ret != 0)
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: posting receive %u of %u for remote CQ data failed: %s",
                               ep->params.rank, i + 1, f->n_rx, fi_strerror((int)-ret));
    }
    return 0;
}

/* Close the libfabric objects still open, the endpoint before what it is
 * bound to. One that fails (e.g. -FI_EBUSY while a FI_MR_ENDPOINT region is
 * still bound to it) is kept and tried again by the next call: ep_close
 * calls this once more after every region is gone. Returns the first error. */
static int close_fids(ofccl__ep_t *ep, struct ofccl__fab_ep *f)
{
    struct {
        struct fid **fid;
        const char *what;
    } objs[] = {
        /* The endpoint first: closing it cancels what is in flight, so no
         * completion can name an op descriptor, and the provider lets go of
         * every buffer and region those ops pointed at. */
        {(struct fid **)&f->ep, "the endpoint"},
        /* Atomic operands of cancelled ops lived in the pool: only now. */
        {(struct fid **)&f->ops_mr, "the op pool registration"},
        {(struct fid **)&f->cq, "the CQ"},
        {(struct fid **)&f->av, "the AV"},
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
            rc = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_PROVIDER,
                             "rank %d: closing %s: %s (tried again when the endpoint is freed)",
                             ep->params.rank, objs[i].what, fi_strerror(-ret));
    }
    return rc;
}

int ofccl__fab_ep_close(ofccl__ep_t *ep)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    int rc;

    if (f == NULL)
        return 0;
    rc = close_fids(ep, f);
    ofccl__watch_close(&f->watch);
    free(f->rx);
    free(f->names); /* only now: the AV (closed above) may point into it */
    free(f->addr);
    free(f);
    ep->be_state = NULL;
    return rc;
}

#define PORT_TAKEN 1 /* open_once: the endpoint's port was taken meanwhile */
#define PORT_TRIES 8

/* fi_endpoint, fi_av_open, fi_cq_open, naming, binding and enabling. */
static int open_once(ofccl__ep_t *ep, struct ofccl__fab_ep *f, ofccl__err_t *e)
{
    ofccl__prov_t *prov = ep->prov;
    struct ofccl__fab_prov *fp = ofccl__fab_prov_of(prov);
    const ofccl__log_t *log = prov->log;
    int rank = ep->params.rank;
    struct fi_av_attr av_attr;
    struct fi_cq_attr cq_attr;
    int ret;

    ret = fi_endpoint(fp->domain, fp->info, &f->ep, NULL);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, fi_strerror(-ret), 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: fi_endpoint on %s", rank, prov->caps.name);
    /* GPU memory: moved by the provider without CUDA calls (open.c). */
    if (prov->caps.hmem && prov->caps.hmem_why[0] == '\0' &&
        (ret = ofccl__fab_forbid_cuda(f->ep)) != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                           "rank %d: the %s endpoint refuses to make no CUDA calls "
                           "(FI_OPT_CUDA_API_PERMITTED=false): %s",
                           rank, prov->caps.name, fi_strerror(-ret));
    memset(&av_attr, 0, sizeof(av_attr));
    /* FI_AV_TABLE: the fi_addr of the n-th insert is n, so fi_addr == rank. */
    av_attr.type = FI_AV_TABLE;
    av_attr.count = (size_t)ep->params.size;
    ret = fi_av_open(fp->domain, &av_attr, &f->av, NULL);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, fi_strerror(-ret), 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: fi_av_open(FI_AV_TABLE)", rank);
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(fp->domain, &cq_attr, &f->cq, NULL);
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, fi_strerror(-ret), 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: fi_cq_open", rank);
    if (prov->caps.quirks & OFCCL__Q_NAME_PER_PROCESS) {
        /* The provider derives names from the pid and a per-domain index, so a
         * second context's endpoint would take the first one's name and clobber
         * the region its peers are writing into: ofccl names each one (and can
         * then unlink its file, see shmfile.c). */
        ofccl__shm_name(f->shm_name, sizeof(f->shm_name));
        ret = fi_setname(&f->ep->fid, f->shm_name, strlen(f->shm_name) + 1);
        if (ret != 0)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: naming the %s endpoint '%s' failed: %s", rank,
                               prov->caps.name, f->shm_name, fi_strerror(-ret));
    }
    ret = fi_ep_bind(f->ep, &f->av->fid, 0);
    if (ret == 0)
        ret = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret == 0)
        ret = fi_enable(f->ep);
    if (ret == -FI_EADDRINUSE)
        return PORT_TAKEN;
    if (ret != 0)
        return ofccl__limit_fail(log, e, -ret, fi_strerror(-ret), 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: binding/enabling the %s endpoint", rank,
                                 prov->caps.name);
    return 0;
}

/* tcp (libfabric 1.17) picks its listening port at random in its range and
 * binds with SO_REUSEADDR, so two endpoints of one host can bind one port and
 * the second fails to listen (EADDRINUSE): open it again, a few times. */
static int open_fids(ofccl__ep_t *ep, struct ofccl__fab_ep *f, ofccl__err_t *e)
{
    for (int t = 1;; t++) {
        int ret = open_once(ep, f, e);
        if (ret != PORT_TAKEN)
            return ret;
        fi_close(&f->ep->fid);
        fi_close(&f->av->fid);
        fi_close(&f->cq->fid);
        f->ep = NULL;
        f->av = NULL;
        f->cq = NULL;
        if (t == PORT_TRIES)
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: enabling the %s endpoint: its port was in use %d times "
                               "(other processes hold most of the provider's port range? "
                               "FI_TCP_PORT_LOW_RANGE / FI_TCP_PORT_HIGH_RANGE)",
                               ep->params.rank, ep->prov->caps.name, PORT_TRIES);
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: the %s endpoint's port was taken as it listened (EADDRINUSE): "
                    "opening it again",
                    ep->params.rank, ep->prov->caps.name);
    }
}

int ofccl__fab_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    const ofccl__prov_caps_t *c = &ep->prov->caps;
    const ofccl__log_t *log = ep->prov->log;
    struct ofccl__fab_ep *f = calloc(1, sizeof(*f));
    int ret;

    if (f == NULL)
        return ofccl__limit_fail(log, e, ENOMEM, NULL, sizeof(*f), OFCCL_ERR_NO_MEMORY,
                                 "rank %d: allocating an endpoint", ep->params.rank);
    ep->be_state = f;
    if (c->rx_cq_data) {
        f->n_rx = ep->params.rx_posted ? ep->params.rx_posted : DEFAULT_RX_POSTED;
        f->rx = calloc(f->n_rx, sizeof(*f->rx));
        if (f->rx == NULL)
            return ofccl__limit_fail(
                log, e, ENOMEM, NULL, f->n_rx * sizeof(*f->rx), OFCCL_ERR_NO_MEMORY,
                "rank %d: allocating %u receive descriptors", ep->params.rank, f->n_rx);
    }
    ret = open_fids(ep, f, e);
    if (ret != 0)
        return ret;
    if (c->mr_local) {
        /* Atomic operands and fetch results live in the descriptors. */
        ret = ofccl__fab_mr_reg_raw(ep, ep->ops, ep->params.ops_inflight * sizeof(*ep->ops),
                                    FI_READ | FI_WRITE, OFCCL__MEM_HOST, &f->ops_mr, NULL, e);
        if (ret != 0)
            return ret;
        f->ops_desc = fi_mr_desc(f->ops_mr);
    }
    return post_initial_receives(ep, e);
}

int ofccl__fab_ep_stop(ofccl__ep_t *ep, bool failed)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);

    if (failed && f->ep != NULL && (ep->prov->caps.quirks & OFCCL__Q_NO_CLOSE_MIDWRITE)) {
        /* Never progressed again, the provider reads nothing more from its
         * sockets: no write lands any more in memory the caller frees next. */
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: the failed communicator's %s endpoint stays open until the "
                    "process exits: closing it while a peer's write is half received would "
                    "crash the provider (see its quirk note in ofccl_info)",
                    ep->params.rank, ep->prov->caps.name);
        return OFCCL__TP_LEFT_OPEN;
    }
    return close_fids(ep, f);
}

int ofccl__fab_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    size_t n = *len;
    int ret = fi_getname(&f->ep->fid, buf, &n);

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

int ofccl__fab_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                            int n, ofccl__err_t *e)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    const ofccl__log_t *log = ep->prov->log;

    /* libfabric 1.17's shm keys its name map on the pointer it is given (it
     * does not copy the string): the names must outlive the AV, so the
     * endpoint keeps its own copy, NUL-terminated, until it closes. */
    f->names = calloc((size_t)n, stride + 1);
    if (f->names == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: no memory for %d peer names", ep->params.rank, n);
    for (int r = 0; r < n; r++) {
        /* Names come from peers through the bootstrap: never trust their length. */
        if (lens[r] == 0 || lens[r] > stride)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                               "rank %d: name of peer %d has length %zu (slot is %zu bytes)",
                               ep->params.rank, r, lens[r], stride);
        memcpy(f->names + (size_t)r * (stride + 1), (const char *)names + (size_t)r * stride,
               lens[r]);
    }
    if (f->shm_name[0] != '\0') {
        int ret = ofccl__shm_reserve_peers(ep, f->names, stride + 1, n, e);
        if (ret != 0)
            return ret;
    }
    for (int r = 0; r < n; r++) {
        char *name = f->names + (size_t)r * (stride + 1);
        fi_addr_t addr = FI_ADDR_NOTAVAIL;
        int ret;

        errno = 0;
        ret = fi_av_insert(f->av, name, 1, &addr, 0, NULL);
        if (ret != 1 && (ret < 0 || errno != 0)) { /* errno: what a failed mmap or open left */
            int err = ret < 0 ? -ret : errno;
            return ofccl__limit_fail(log, e, err, fi_strerror(err), 0, OFCCL_ERR_PROVIDER,
                                     "rank %d: inserting the address of peer %d", ep->params.rank,
                                     r);
        }
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
        ofccl__shm_watch_peer(ep, r, name);
    }
    return 0;
}

int ofccl__fab_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);
    const ofccl__log_t *log = ep->prov->log;
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    int ret;

    if (f->addr == NULL) {
        f->addr = malloc((size_t)ep->params.size * sizeof(*f->addr));
        if (f->addr == NULL)
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                               "rank %d: no memory for the address table of %d peers",
                               ep->params.rank, ep->params.size);
        for (int r = 0; r < ep->params.size; r++)
            f->addr[r] = FI_ADDR_NOTAVAIL;
    }
    if (f->addr[peer] != FI_ADDR_NOTAVAIL)
        return 0;
    if (len == 0 || len > 4096)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: name of peer %d has length %zu", ep->params.rank, peer, len);
    errno = 0;
    ret = fi_av_insert(f->av, name, 1, &addr, 0, NULL);
    if (ret != 1) {
        int err = ret < 0 ? -ret : errno;
        return ofccl__limit_fail(log, e, err, fi_strerror(err), 0, OFCCL_ERR_PROVIDER,
                                 "rank %d: inserting the address of peer %d", ep->params.rank,
                                 peer);
    }
    f->addr[peer] = addr;
    f->nadded++;
    if (ep->prov->caps.quirks & OFCCL__Q_NAME_PER_PROCESS) {
        char nul[256]; /* shm names are short text; the watch reads a C string */

        if (len < sizeof(nul)) {
            memcpy(nul, name, len);
            nul[len] = '\0';
            ofccl__shm_watch_peer(ep, peer, nul);
        }
    }
    return 0;
}

void ofccl__fab_peers_ready(ofccl__ep_t *ep)
{
    /* libfabric 1.x's shm maps a peer's file when its address is inserted,
     * so once every peer inserted ours the name can go. 2.x's maps it on the
     * first transfer: the name stays until the endpoint closes (shmfile.c). */
    if (FI_MAJOR(fi_version()) < 2)
        ofccl__shm_unlink_own(ep);
}
