/*
 * The composite transport: one endpoint whose peers on this rank's host are
 * reached through the local shared-memory transport (local/) and whose other
 * peers through a libfabric provider (fabric/), chosen per peer from host
 * identity. Above this file it is one endpoint like any other: one op pool,
 * one retry FIFO, one completion queue, one key per region.
 *
 * How the halves are joined:
 *   - Each half is a sub-endpoint of the backend it belongs to, sharing the
 *     composite's op descriptors, so a completion from either names an op
 *     the generic code knows; post dispatches each op by its peer's class.
 *   - The endpoint name carries a hash of the host identity and both halves'
 *     names. A peer whose hash equals ours is attached by the local half
 *     (the others are left unattached there). Peers inserted all at once
 *     all enter the fabric half's AV, so AV index r is still rank r; a
 *     communicator created lazily adds its peers one at a time instead,
 *     those on this host (at creation) to the local half only, the others
 *     (on first use) to the fabric half only, so a rank holds AV entries
 *     for the other hosts' peers it uses and no more.
 *   - A region is registered with both halves under one key: the local half
 *     chooses it, the fabric half registers with that key. This needs keys
 *     the fabric lets ofccl choose (no FI_MR_PROV_KEY, no strict mode) of 8
 *     bytes; elsewhere ofccl__mx_wrap leaves the fabric provider alone.
 *   - Memory peers write into is the local half's (memfd), which the fabric
 *     half registers like any other memory.
 *   - The signal method is the fabric's choice; the local half carries both
 *     (8 bytes of CQ data, CPU atomics), so it is one method per endpoint.
 *     Peers' memory is not mapped (caps.peer_map is false): same-host peers
 *     get RMA ops, each one memcpy by the initiator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local/local.h"
#include "prov_impl.h"
#include "util.h"

#define MX_MAGIC 0x31584d6c6363666full /* "ofcclMX1" little-endian */
#define MX_HDR 24                      /* magic, host hash, two name lengths */
#define MX_KEY_TRIES 3

struct mx_prov {
    ofccl__prov_t *sub[OFCCL__PEER_CLASSES]; /* [OFCCL__PEER_LOCAL], [OFCCL__PEER_FABRIC] */
    uint64_t host;                           /* hash of this host's identity */
};

struct mx_ep {
    ofccl__ep_t sub[OFCCL__PEER_CLASSES];
    bool set_up[OFCCL__PEER_CLASSES];
    uint8_t *cls; /* [size]: each peer's class */
    int err_sub;  /* the half whose error entry is next, -1: none */
    int first;    /* the half read first by the next cq_read */
};

struct mx_mr {
    ofccl__mr_t sub[OFCCL__PEER_CLASSES];
};

static struct mx_prov *mxp(const ofccl__prov_t *prov)
{
    return prov->be_state;
}

static struct mx_ep *mxe(const ofccl__ep_t *ep)
{
    return ep->be_state;
}

/* FNV-1a: equal identities, equal hashes (the setup record uses the same). */
static uint64_t host_hash(const char *id)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; id != NULL && *id != '\0'; id++)
        h = (h ^ (uint8_t)*id) * 0x100000001b3ull;
    return h;
}

/* Why the fabric provider cannot be a composite's other half, or NULL. */
static const char *unjoinable(const ofccl__prov_t *fab)
{
    const ofccl__prov_caps_t *c = &fab->caps;

    if (fab->be != &ofccl__fabric_backend)
        return "it is not a libfabric provider";
    if (c->quirks & OFCCL__Q_INTRA_NODE_ONLY)
        return "it reaches this host only";
    if (c->strict)
        return "strict mode keeps every peer on the verbs-like path";
    if (c->prov_key)
        return "it chooses memory keys itself (FI_MR_PROV_KEY), and one key must serve both "
               "transports";
    if (c->key_size < 8)
        return "its memory keys are shorter than the local transport's 8 bytes";
    return NULL;
}

int ofccl__mx_wrap(ofccl__prov_t **prov, const ofccl__prov_params_t *params, ofccl__err_t *e)
{
    ofccl__prov_t *fab = *prov, *loc = NULL, *mx;
    ofccl__prov_params_t lp = *params;
    const char *why = unjoinable(fab);
    struct mx_prov *st;
    int ret;

    if (why != NULL) {
        OFCCL__INFO(params->log, OFCCL__SUB_PROV, "peers on this host go through %s too: %s",
                    fab->caps.name, why);
        return 0;
    }
    lp.provider = OFCCL__LOCAL_NAME;
    lp.domain = "";
    lp.fault = NULL; /* faults are injected once, at the composite */
    lp.same_host_local = false;
    lp.signal = fab->caps.signal;
    ret = ofccl__prov_open(&lp, &loc, e);
    if (ret != 0)
        return ret;
    mx = calloc(1, sizeof(*mx));
    st = calloc(1, sizeof(*st));
    if (mx == NULL || st == NULL) {
        free(mx);
        free(st);
        ofccl__prov_close(loc);
        return ofccl__fail(params->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    }
    st->sub[OFCCL__PEER_LOCAL] = loc;
    st->sub[OFCCL__PEER_FABRIC] = fab;
    st->host = host_hash(params->host_id);
    mx->be = &ofccl__mixed_backend;
    mx->be_state = st;
    mx->log = params->log;
    if (params->fault != NULL)
        mx->fault = *params->fault;
    pthread_mutex_init(&mx->lock, NULL);
    mx->caps = fab->caps;
    /* "tcp;ofi_rxm+local": the fabric's name first, as logs and tests read it. */
    ofccl__strlcpy(mx->caps.name, fab->caps.name, sizeof(mx->caps.name) - 6);
    ofccl__strlcpy(mx->caps.name + strlen(mx->caps.name), "+" OFCCL__LOCAL_NAME, 7);
    mx->caps.peer_map = false;
    /* One peer at a time where the fabric half can: the local half attaches
     * peers one by one too. The host's peers come first (at creation). */
    mx->caps.add_peer = fab->caps.add_peer;
    mx->caps.add_host_first = fab->caps.add_peer;
    mx->caps.max_msg_size = OFCCL__MIN(fab->caps.max_msg_size, loc->caps.max_msg_size);
    /* The key's base is the fabric's: an address where it uses virtual
     * addresses, which the local half then subtracts. */
    loc->caps.virt_addr = fab->caps.virt_addr;
    *prov = mx;
    return 0;
}

static int mx_open(ofccl__prov_t *prov, const char *prov_name, const ofccl__prov_params_t *params,
                   ofccl__err_t *e)
{
    (void)prov;
    return ofccl__fail(params->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                       "%s: the composite transport is chosen per peer "
                       "(OFCCL_PEER_TRANSPORT), not by name",
                       prov_name);
}

static int mx_close(ofccl__prov_t *prov)
{
    struct mx_prov *st = mxp(prov);
    int rc = 0;

    if (st == NULL)
        return 0;
    for (int c = OFCCL__PEER_CLASSES; c-- > 0;) {
        int r = ofccl__prov_close(st->sub[c]);
        rc = rc != 0 ? rc : r;
    }
    free(st);
    prov->be_state = NULL;
    return rc;
}

static int mx_list(const char *prov_name, ofccl__prov_dom_t *out, int max, int *n, ofccl__err_t *e)
{
    (void)prov_name;
    (void)out;
    (void)max;
    (void)e;
    *n = 0;
    return 0;
}

static void mx_available(char *buf, size_t len)
{
    (void)buf;
    (void)len;
}

/* ---- endpoint ---- */

static int mx_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    struct mx_ep *mx = calloc(1, sizeof(*mx));

    if (mx == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: allocating a composite endpoint", ep->params.rank);
    ep->be_state = mx;
    mx->err_sub = -1;
    mx->cls = malloc((size_t)ep->params.size);
    if (mx->cls == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: allocating a composite endpoint", ep->params.rank);
    memset(mx->cls, OFCCL__PEER_FABRIC, (size_t)ep->params.size);
    for (int c = 0; c < OFCCL__PEER_CLASSES; c++) {
        ofccl__ep_t *s = &mx->sub[c];
        int rc;

        s->prov = mxp(ep->prov)->sub[c];
        s->be = s->prov->be;
        s->params = ep->params;
        s->ops = ep->ops; /* one pool: completions from either half name our ops */
        pthread_mutex_init(&s->lock, NULL);
        mx->set_up[c] = true;
        rc = s->be->ep_setup(s, e);
        if (rc != 0)
            return rc;
    }
    ofccl__lx_of(&mx->sub[OFCCL__PEER_LOCAL])->partial = true;
    return 0;
}

static int mx_ep_stop(ofccl__ep_t *ep, bool failed)
{
    struct mx_ep *mx = mxe(ep);
    int rc = 0;

    for (int c = 0; c < OFCCL__PEER_CLASSES; c++) {
        int r = mx->sub[c].be->ep_stop(&mx->sub[c], failed);
        /* One half left open (a fabric that crashes when closed mid-write)
         * keeps the whole endpoint open. */
        if (r == OFCCL__TP_LEFT_OPEN || (rc == 0 && r != 0))
            rc = r;
    }
    return rc;
}

static int mx_ep_close(ofccl__ep_t *ep)
{
    struct mx_ep *mx = mxe(ep);
    int rc = 0;

    if (mx == NULL)
        return 0;
    for (int c = 0; c < OFCCL__PEER_CLASSES; c++) {
        if (!mx->set_up[c])
            continue;
        int r = mx->sub[c].be->ep_close(&mx->sub[c]);
        rc = rc != 0 ? rc : r;
        pthread_mutex_destroy(&mx->sub[c].lock);
    }
    free(mx->cls);
    free(mx);
    ep->be_state = NULL;
    return rc;
}

/* {magic, host hash, local name length, fabric name length}, then the names. */
static int mx_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    uint8_t *p = buf;
    size_t ll, fl;
    int rc;

    if (*len < MX_HDR)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: endpoint name buffer of %zu bytes", ep->params.rank, *len);
    ll = *len - MX_HDR;
    rc = mx->sub[OFCCL__PEER_LOCAL].be->ep_name(&mx->sub[OFCCL__PEER_LOCAL], p + MX_HDR, &ll, e);
    if (rc != 0)
        return rc;
    fl = *len - MX_HDR - ll;
    rc = mx->sub[OFCCL__PEER_FABRIC].be->ep_name(&mx->sub[OFCCL__PEER_FABRIC], p + MX_HDR + ll, &fl,
                                                 e);
    if (rc != 0)
        return rc;
    ofccl__put_le64(p, MX_MAGIC);
    ofccl__put_le64(p + 8, mxp(ep->prov)->host);
    ofccl__put_le32(p + 16, (uint32_t)ll);
    ofccl__put_le32(p + 20, (uint32_t)fl);
    *len = MX_HDR + ll + fl;
    return 0;
}

/* Peer r's name (len bytes, at most `cap`): the lengths of its halves and
 * its class. Names come from peers: every length is checked before use. */
static int parse_name(ofccl__ep_t *ep, int r, const uint8_t *p, size_t len, size_t cap, size_t *ll,
                      size_t *fl, int *cls, ofccl__err_t *e)
{
    *ll = *fl = 0;
    if (len >= MX_HDR && len <= cap) {
        *ll = ofccl__get_le32(p + 16);
        *fl = ofccl__get_le32(p + 20);
    }
    if (len < MX_HDR || len > cap || ofccl__get_le64(p) != MX_MAGIC || *ll > cap || *fl > cap ||
        MX_HDR + *ll + *fl != len)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: the endpoint name of peer %d (%zu bytes) is not a "
                           "composite (local+fabric) name; every rank must use the same "
                           "OFCCL_PEER_TRANSPORT",
                           ep->params.rank, r, len);
    *cls = ofccl__get_le64(p + 8) == mxp(ep->prov)->host || r == ep->params.rank
               ? OFCCL__PEER_LOCAL
               : OFCCL__PEER_FABRIC;
    return 0;
}

/* Split every peer's name into its halves and learn its class. */
static int split_names(ofccl__ep_t *ep, const uint8_t *names, size_t stride, const size_t *lens,
                       int n, uint8_t *half[2], size_t *hlens[2], ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);

    for (int r = 0; r < n; r++) {
        const uint8_t *p = names + (size_t)r * stride;
        size_t ll, fl;
        int cls, rc = parse_name(ep, r, p, lens[r], stride, &ll, &fl, &cls, e);

        if (rc != 0)
            return rc;
        mx->cls[r] = (uint8_t)cls;
        memcpy(half[OFCCL__PEER_LOCAL] + (size_t)r * stride, p + MX_HDR, ll);
        hlens[OFCCL__PEER_LOCAL][r] = mx->cls[r] == OFCCL__PEER_LOCAL ? ll : 0;
        memcpy(half[OFCCL__PEER_FABRIC] + (size_t)r * stride, p + MX_HDR + ll, fl);
        hlens[OFCCL__PEER_FABRIC][r] = fl;
    }
    return 0;
}

static int mx_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    uint8_t *half[2] = {calloc((size_t)n, stride), calloc((size_t)n, stride)};
    size_t *hlens[2] = {calloc((size_t)n, sizeof(size_t)), calloc((size_t)n, sizeof(size_t))};
    int rc = 0, nlocal = 0;

    if (!half[0] || !half[1] || !hlens[0] || !hlens[1])
        rc = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    if (rc == 0)
        rc = split_names(ep, names, stride, lens, n, half, hlens, e);
    for (int c = 0; c < OFCCL__PEER_CLASSES && rc == 0; c++)
        rc = mx->sub[c].be->insert_peers(&mx->sub[c], half[c], stride, hlens[c], n, e);
    for (int r = 0; r < n && rc == 0; r++)
        nlocal += mx->cls[r] == OFCCL__PEER_LOCAL && r != ep->params.rank;
    if (rc == 0)
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: %d peer(s) on this host through %s, %d on other hosts through %s",
                    ep->params.rank, nlocal, mx->sub[OFCCL__PEER_LOCAL].prov->caps.name,
                    n - 1 - nlocal, mx->sub[OFCCL__PEER_FABRIC].prov->caps.name);
    for (int c = 0; c < 2; c++) {
        free(half[c]);
        free(hlens[c]);
    }
    return rc;
}

/* One peer, to the half that reaches it (ofccl__ep_add_peer holds the
 * composite's lock). */
static int mx_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    const uint8_t *p = name;
    ofccl__ep_t *s;
    size_t ll, fl;
    int cls, rc = parse_name(ep, peer, p, len, len, &ll, &fl, &cls, e);

    if (rc != 0)
        return rc;
    s = &mx->sub[cls];
    if (cls == OFCCL__PEER_LOCAL)
        rc = ofccl__lx_add_peer(s, peer, p + MX_HDR, ll, e);
    else
        rc = s->be->add_peer(s, peer, p + MX_HDR + ll, fl, e);
    if (rc == 0)
        mx->cls[peer] = (uint8_t)cls;
    return rc;
}

static void mx_peers_ready(ofccl__ep_t *ep)
{
    struct mx_ep *mx = mxe(ep);

    for (int c = 0; c < OFCCL__PEER_CLASSES; c++)
        mx->sub[c].be->peers_ready(&mx->sub[c]);
}

/* ---- memory: one key for both halves ---- */

static int mx_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    ofccl__ep_t *ls = &mx->sub[OFCCL__PEER_LOCAL], *fs = &mx->sub[OFCCL__PEER_FABRIC];
    struct mx_mr *m = calloc(1, sizeof(*m));
    int rc = OFCCL_ERR_INTERNAL;

    if (m == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    /* The local half chooses an unpredictable key; a fabric region may
     * already hold it (another endpoint of the domain): choose again. */
    for (int t = 0; t < MX_KEY_TRIES; t++) {
        ofccl__mr_t *l = &m->sub[OFCCL__PEER_LOCAL], *f = &m->sub[OFCCL__PEER_FABRIC];

        *l = (ofccl__mr_t){.addr = mr->addr, .len = mr->len, .access = mr->access, .ep = ls};
        rc = ls->be->mr_reg(ls, l, e);
        if (rc != 0)
            break;
        *f = (ofccl__mr_t){
            .addr = mr->addr, .len = mr->len, .access = mr->access, .ep = fs, .key = l->key};
        rc = fs->be->mr_reg(fs, f, e);
        if (rc == 0 && f->key == l->key)
            break;
        if (rc == 0) { /* not the key asked for: cannot serve both halves */
            fs->be->mr_dereg(f);
            rc = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                             "rank %d: %s registered %zu bytes under another key than asked",
                             ep->params.rank, fs->prov->caps.name, mr->len);
        }
        ls->be->mr_dereg(l);
    }
    if (rc != 0) {
        free(m);
        return rc;
    }
    mr->handle = m;
    mr->key = m->sub[OFCCL__PEER_LOCAL].key;
    mr->desc = m->sub[OFCCL__PEER_FABRIC].desc;
    mr->shared = false; /* caps.peer_map is false: nothing is mapped from above */
    return 0;
}

static int mx_mr_dereg(ofccl__mr_t *mr)
{
    struct mx_mr *m = mr->handle;
    struct mx_ep *mx = mxe(mr->ep);
    int rc = 0;

    for (int c = 0; c < OFCCL__PEER_CLASSES; c++) {
        int r = mx->sub[c].be->mr_dereg(&m->sub[c]);
        rc = rc != 0 ? rc : r;
    }
    free(m);
    return rc;
}

/* ---- data path: each op to its peer's half ---- */

static int mx_post(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    ofccl__ep_t *s = &mxe(ep)->sub[mxe(ep)->cls[op->peer]];

    return s->be->post(s, op);
}

/* Both halves, the one read first alternating. An error entry in one is
 * reported once the entries read before it are delivered. */
static int mx_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n)
{
    struct mx_ep *mx = mxe(ep);
    int count = 0;

    if (mx->err_sub >= 0)
        return OFCCL__TP_ERR_AVAIL;
    for (int i = 0; i < OFCCL__PEER_CLASSES && count < n; i++) {
        int c = (mx->first + i) % OFCCL__PEER_CLASSES;
        int k = mx->sub[c].be->cq_read(&mx->sub[c], ents + count, n - count);

        if (k == OFCCL__TP_ERR_AVAIL) {
            mx->err_sub = c;
            return count > 0 ? count : OFCCL__TP_ERR_AVAIL;
        }
        if (k < 0)
            return count > 0 ? count : k;
        count += k;
    }
    mx->first = (mx->first + 1) % OFCCL__PEER_CLASSES;
    return count;
}

static int mx_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err)
{
    struct mx_ep *mx = mxe(ep);
    int c = mx->err_sub >= 0 ? mx->err_sub : OFCCL__PEER_LOCAL;
    int rc = mx->sub[c].be->cq_readerr(&mx->sub[c], err);

    if (rc == -EAGAIN && mx->err_sub < 0) {
        c = OFCCL__PEER_FABRIC;
        rc = mx->sub[c].be->cq_readerr(&mx->sub[c], err);
    }
    mx->err_sub = -1;
    return rc;
}

static bool mx_idle(const ofccl__ep_t *ep)
{
    const struct mx_ep *mx = mxe(ep);

    return mx->sub[OFCCL__PEER_LOCAL].be->idle(&mx->sub[OFCCL__PEER_LOCAL]) &&
           mx->sub[OFCCL__PEER_FABRIC].be->idle(&mx->sub[OFCCL__PEER_FABRIC]);
}

/* Both halves' codes are errno values; the fabric's text covers both. */
static const char *mx_strerror(int err)
{
    return ofccl__fabric_backend.strerror(err);
}

/* Each half watches the processes of the peers it reaches that it can
 * (the local half every one; the fabric half none today: shm, the fabric
 * provider that watches, is never the fabric half). */
static int mx_peer_gone(ofccl__ep_t *ep, int *pid)
{
    struct mx_ep *mx = mxe(ep);
    int peer = -1;

    for (int c = 0; c < OFCCL__PEER_CLASSES && peer < 0; c++)
        peer = mx->sub[c].be->peer_gone(&mx->sub[c], pid);
    return peer;
}

static int mx_peer_class(const ofccl__ep_t *ep, int peer)
{
    const struct mx_ep *mx = mxe(ep);

    return mx != NULL && peer >= 0 && peer < ep->params.size ? mx->cls[peer] : OFCCL__PEER_FABRIC;
}

const ofccl__backend_t ofccl__mixed_backend = {
    .size = sizeof(ofccl__backend_t),
    .name = "composite",
    .serves = NULL,
    .mem_what = " of shared memory (memfd)",
    .open = mx_open,
    .close = mx_close,
    .list = mx_list,
    .available = mx_available,
    .ep_setup = mx_ep_setup,
    .ep_stop = mx_ep_stop,
    .ep_close = mx_ep_close,
    .ep_name = mx_ep_name,
    .insert_peers = mx_insert_peers,
    .peers_ready = mx_peers_ready,
    .mr_reg = mx_mr_reg,
    .mr_dereg = mx_mr_dereg,
    .mem_alloc = ofccl__lx_mem_alloc,
    .mem_free = ofccl__lx_mem_free,
    .post = mx_post,
    .cq_read = mx_cq_read,
    .cq_readerr = mx_cq_readerr,
    .idle = mx_idle,
    .strerror = mx_strerror,
    .op_name = ofccl__tp_op_name,
    .peer_gone = mx_peer_gone,
    .peer_map = ofccl__tp_stub_peer_map,
    .add_peer = mx_add_peer,
    .wait_fd = ofccl__tp_stub_wait_fd,
    .peer_class = mx_peer_class,
};
