/*
 * The composite transport: one endpoint over an ordered list of transports,
 * each peer reached through the first one that can reach it. Today the list
 * is the local shared-memory transport (local/: peers on this rank's host)
 * then a libfabric provider (fabric/: every peer); a transport for same-host
 * GPU memory would go first. Above this file it is one endpoint like any
 * other: one op pool, one retry FIFO, one completion queue, one key per
 * region.
 *
 * How the transports are joined:
 *   - Each is a sub-endpoint of the backend it belongs to, sharing the
 *     composite's op descriptors, so a completion from any names an op the
 *     generic code knows; post dispatches each op to the first transport
 *     that reaches its peer with the op's memory kind (backend slot
 *     `reaches`; host memory: the peer's class, decided once).
 *   - The endpoint name carries a hash of the host identity and every
 *     transport's name. Peers inserted all at once go to every transport
 *     that reaches them (the fabric reaches all, so AV index r is still
 *     rank r; the local transport leaves other hosts' peers unattached); a
 *     communicator created lazily adds each peer to the transport that
 *     serves it only, those on this host at creation, the others on first
 *     use, so a rank holds AV entries for the other hosts' peers it uses and
 *     no more.
 *   - A region is registered with every transport under one key: the first
 *     chooses it, the others register with that key. This needs keys the
 *     fabric lets ofccl choose (no FI_MR_PROV_KEY, no strict mode) of 8
 *     bytes; elsewhere ofccl__mx_wrap leaves the fabric provider alone. At
 *     most one transport needs local descriptors (the fabric's): theirs is
 *     the region's.
 *   - Memory peers write into comes from the first transport's allocator
 *     (the local transport's memfds), which the others register like any
 *     other memory.
 *   - The signal method is the fabric's choice; the local transport carries
 *     both (8 bytes of CQ data, CPU atomics), so it is one method per
 *     endpoint. Peers' memory is not mapped by the algorithms
 *     (caps.peer_map is false): same-host peers get RMA ops, each one memcpy
 *     by the initiator. A mapping asked for one peer (caps.peer_map_some:
 *     the GPU peer class's flag regions) goes to the transport serving it,
 *     and is refused where that one maps nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixed_impl.h"
#include "util.h"

/* Why the fabric provider cannot be a composite's last transport, or NULL. */
static const char *unjoinable(const ofccl__prov_t *fab)
{
    const ofccl__prov_caps_t *c = &fab->caps;

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

/* The composite's capabilities: the last transport's (the one reaching
 * every host), named after it and the others ("tcp;ofi_rxm+local"). */
static void mx_caps(ofccl__prov_t *mx, struct mx_prov *st)
{
    const ofccl__prov_t *last = st->sub[st->n - 1];

    mx->caps = last->caps;
    for (int i = 0; i < st->n - 1; i++) {
        size_t at = strlen(mx->caps.name);
        snprintf(mx->caps.name + at, sizeof(mx->caps.name) - at, "+%s", st->sub[i]->caps.name);
        mx->caps.max_msg_size = OFCCL__MIN(mx->caps.max_msg_size, st->sub[i]->caps.max_msg_size);
        /* The key's base is the last one's: an address where it uses virtual
         * addresses, which the others then subtract. */
        st->sub[i]->caps.virt_addr = last->caps.virt_addr;
    }
    mx->caps.peer_map = false;
    for (int i = 0; i < st->n; i++)
        mx->caps.peer_map_some |= st->sub[i]->caps.peer_map;
    /* One peer at a time where the last one can: the others attach peers
     * one by one too. The host's peers come first (at creation). */
    mx->caps.add_peer = last->caps.add_peer;
    mx->caps.add_host_first = last->caps.add_peer;
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
    /* The transports in the order they are asked: same-host ones first. */
    lp.provider = "local";
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
    st->sub[st->n++] = loc;
    st->sub[st->n++] = fab;
    st->host = ofccl__hash_str(params->host_id);
    mx->be = &ofccl__mixed_backend;
    mx->mem_be = st->sub[0]->mem_be;
    mx->be_state = st;
    mx->log = params->log;
    if (params->fault != NULL)
        mx->fault = *params->fault;
    pthread_mutex_init(&mx->lock, NULL);
    mx_caps(mx, st);
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
    for (int c = st->n; c-- > 0;) {
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
    struct mx_prov *st = mxp(ep->prov);
    struct mx_ep *mx = calloc(1, sizeof(*mx));

    if (mx == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: allocating a composite endpoint", ep->params.rank);
    ep->be_state = mx;
    mx->err_sub = -1;
    mx->n = st->n;
    mx->cls = malloc((size_t)ep->params.size);
    if (mx->cls == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: allocating a composite endpoint", ep->params.rank);
    memset(mx->cls, mx->n - 1, (size_t)ep->params.size);
    for (int c = 0; c < mx->n; c++) {
        ofccl__ep_t *s = &mx->sub[c];
        int rc;

        s->prov = st->sub[c];
        s->be = s->prov->be;
        s->params = ep->params;
        s->params.partial = true; /* peers another transport reaches get no name */
        s->ops = ep->ops;         /* one pool: completions from any name our ops */
        pthread_mutex_init(&s->lock, NULL);
        mx->set_up[c] = true;
        rc = s->be->ep_setup(s, e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int mx_ep_stop(ofccl__ep_t *ep, bool failed)
{
    struct mx_ep *mx = mxe(ep);
    int rc = 0;

    for (int c = 0; c < mx->n; c++) {
        int r = mx->sub[c].be->ep_stop(&mx->sub[c], failed);
        /* One left open (a fabric that crashes when closed mid-write) keeps
         * the whole endpoint open. */
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
    for (int c = 0; c < mx->n; c++) {
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

/* {magic, host hash, count, each transport's name length}, then the names. */
static int mx_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    uint8_t *p = buf;
    size_t at = MX_HDR(mx->n);

    if (*len < at)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: endpoint name buffer of %zu bytes", ep->params.rank, *len);
    for (int c = 0; c < mx->n; c++) {
        size_t l = *len - at;
        int rc = mx->sub[c].be->ep_name(&mx->sub[c], p + at, &l, e);

        if (rc != 0)
            return rc;
        ofccl__put_le32(p + 20 + 4 * (size_t)c, (uint32_t)l);
        at += l;
    }
    ofccl__put_le64(p, MX_MAGIC);
    ofccl__put_le64(p + 8, mxp(ep->prov)->host);
    ofccl__put_le32(p + 16, (uint32_t)mx->n);
    *len = at;
    return 0;
}

/* Peer r's name as the transports see it. */
struct mx_name {
    size_t off[MX_MAX], len[MX_MAX];
    bool same_host;
};

/* Peer r's name (len bytes, at most `cap`): where each transport's part is,
 * and whether r is on this host. Names come from peers: every length is
 * checked before use. */
static int parse_name(ofccl__ep_t *ep, int r, const uint8_t *p, size_t len, size_t cap,
                      struct mx_name *nm, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    bool ok = len >= MX_HDR(mx->n) && len <= cap && ofccl__get_le64(p) == MX_MAGIC &&
              ofccl__get_le32(p + 16) == (uint32_t)mx->n;
    size_t at = MX_HDR(mx->n);

    for (int c = 0; ok && c < mx->n; c++) {
        nm->off[c] = at;
        nm->len[c] = ofccl__get_le32(p + 20 + 4 * (size_t)c);
        ok = nm->len[c] <= cap && at + nm->len[c] <= len;
        at += ok ? nm->len[c] : 0;
    }
    if (!ok || at != len)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: the endpoint name of peer %d (%zu bytes) is not a "
                           "composite name of %d transports; every rank must use the same "
                           "OFCCL_PEER_TRANSPORT",
                           ep->params.rank, r, len, mx->n);
    nm->same_host = ofccl__get_le64(p + 8) == mxp(ep->prov)->host || r == ep->params.rank;
    return 0;
}

/* The first transport that reaches a peer with host memory: its class. */
static int serving(const struct mx_ep *mx, bool same_host)
{
    int c = 0;

    while (c < mx->n - 1 && !ofccl__mx_reaches_with(mx, c, same_host, OFCCL__MEM_HOST))
        c++;
    return c;
}

/* Split every peer's name into the transports' parts: each transport gets
 * the names of the peers it reaches (the others' are left empty). */
static int split_names(ofccl__ep_t *ep, const uint8_t *names, size_t stride, const size_t *lens,
                       int n, uint8_t **part, size_t **plens, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);

    for (int r = 0; r < n; r++) {
        const uint8_t *p = names + (size_t)r * stride;
        struct mx_name nm;
        int rc = parse_name(ep, r, p, lens[r], stride, &nm, e);

        if (rc != 0)
            return rc;
        mx->cls[r] = (uint8_t)serving(mx, nm.same_host);
        for (int c = 0; c < mx->n; c++) {
            memcpy(part[c] + (size_t)r * stride, p + nm.off[c], nm.len[c]);
            plens[c][r] =
                ofccl__mx_reaches_with(mx, c, nm.same_host, OFCCL__MEM_HOST) ? nm.len[c] : 0;
        }
    }
    return 0;
}

static int mx_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    uint8_t *part[MX_MAX] = {NULL};
    size_t *plens[MX_MAX] = {NULL};
    int rc = 0, nfirst = 0;

    for (int c = 0; c < mx->n; c++) {
        part[c] = calloc((size_t)n, stride);
        plens[c] = calloc((size_t)n, sizeof(size_t));
        if ((part[c] == NULL || plens[c] == NULL) && rc == 0)
            rc = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                             "out of memory");
    }
    if (rc == 0)
        rc = split_names(ep, names, stride, lens, n, part, plens, e);
    for (int c = 0; c < mx->n && rc == 0; c++)
        rc = mx->sub[c].be->insert_peers(&mx->sub[c], part[c], stride, plens[c], n, e);
    for (int r = 0; r < n && rc == 0; r++)
        nfirst += mx->cls[r] != mx->n - 1 && r != ep->params.rank;
    if (rc == 0)
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: %d peer(s) on this host through %s, %d on other hosts through %s",
                    ep->params.rank, nfirst, mx->sub[0].prov->caps.name, n - 1 - nfirst,
                    mx->sub[mx->n - 1].prov->caps.name);
    for (int c = 0; c < mx->n; c++) {
        free(part[c]);
        free(plens[c]);
    }
    return rc;
}

/* One peer, to the transport that serves it (ofccl__ep_add_peer holds the
 * composite's lock). */
static int mx_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    const uint8_t *p = name;
    struct mx_name nm;
    int c, rc = parse_name(ep, peer, p, len, len, &nm, e);

    if (rc != 0)
        return rc;
    c = serving(mx, nm.same_host);
    rc = mx->sub[c].be->add_peer(&mx->sub[c], peer, p + nm.off[c], nm.len[c], e);
    if (rc == 0)
        mx->cls[peer] = (uint8_t)c;
    return rc;
}

static void mx_peers_ready(ofccl__ep_t *ep)
{
    struct mx_ep *mx = mxe(ep);

    for (int c = 0; c < mx->n; c++)
        mx->sub[c].be->peers_ready(&mx->sub[c]);
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
    .add_peer = mx_add_peer,
    .mr_reg = ofccl__mx_mr_reg,
    .mr_dereg = ofccl__mx_mr_dereg,
    .mem_alloc = ofccl__tp_stub_mem_alloc, /* the first transport's (prov->mem_be) */
    .mem_free = ofccl__tp_stub_mem_free,
    .post = ofccl__mx_post,
    .cq_read = ofccl__mx_cq_read,
    .cq_readerr = ofccl__mx_cq_readerr,
    .idle = ofccl__mx_idle,
    .strerror = ofccl__mx_strerror,
    .op_name = ofccl__tp_op_name,
    .peer_gone = ofccl__mx_peer_gone,
    .peer_map = ofccl__mx_peer_map,
    .wait_fd = ofccl__tp_stub_wait_fd,
    .reaches = ofccl__mx_reaches,
    .peer_class = ofccl__mx_peer_class,
};
