/*
 * The composite transport's data path (mixed.c joins the transports): a
 * region registered with every transport under one key, each op to the
 * transport that reaches its peer, completions from all of them, and the
 * answers asked per peer (its class, a mapping of its memory).
 */
#include <stdlib.h>
#include <string.h>

#include "mixed_impl.h"
#include "util.h"

/* ---- memory: one key for every transport that reaches it ---- */

/* Does transport c reach any peer with memory of `kind`? Host memory: every
 * transport; device memory: those that take it (a libfabric domain opened
 * with FI_HMEM), the others never see such a region. */
static bool serves(const struct mx_ep *mx, int c, ofccl__mem_kind_t kind)
{
    return kind == OFCCL__MEM_HOST || ofccl__mx_reaches_with(mx, c, true, kind) ||
           ofccl__mx_reaches_with(mx, c, false, kind);
}

static void mx_mr_drop(struct mx_ep *mx, struct mx_mr *m, int upto)
{
    for (int c = upto; c-- > 0;)
        if (m->sub[c].ep != NULL)
            mx->sub[c].be->mr_dereg(&m->sub[c]);
}

/* The first transport chooses an unpredictable key; a region of another may
 * already hold it (another endpoint of the domain): choose again. */
int ofccl__mx_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    struct mx_mr *m = calloc(1, sizeof(*m));
    int rc = OFCCL_ERR_INTERNAL, c = 0, first = -1;

    if (m == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    for (int t = 0, again = 1; t < MX_KEY_TRIES && again; t++) {
        for (c = 0, rc = 0, again = 0, first = -1; c < mx->n && rc == 0; c++) {
            ofccl__ep_t *s = &mx->sub[c];
            ofccl__mr_t *sm = &m->sub[c];

            *sm = (ofccl__mr_t){0};
            if (!serves(mx, c, mr->kind))
                continue;
            *sm = (ofccl__mr_t){.addr = mr->addr,
                                .len = mr->len,
                                .access = mr->access,
                                .ep = s,
                                .key = first >= 0 ? m->sub[first].key : 0,
                                .kind = mr->kind};
            rc = s->be->mr_reg(s, sm, e);
            if (rc != 0)
                sm->ep = NULL;
            else if (first < 0)
                first = c;
            else if (sm->key != m->sub[first].key) {
                /* not the key asked for: cannot serve every transport */
                s->be->mr_dereg(sm);
                sm->ep = NULL;
                again = 1;
                rc = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                                 "rank %d: %s registered %zu bytes under another key than asked",
                                 ep->params.rank, s->prov->caps.name, mr->len);
            }
        }
        if (rc != 0)
            mx_mr_drop(mx, m, c);
    }
    if (rc == 0 && first < 0)
        rc = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                         "rank %d: no transport of %s takes memory of cuda:%d", ep->params.rank,
                         ep->prov->caps.name, mr->kind);
    if (rc != 0) {
        free(m);
        return rc;
    }
    mr->handle = m;
    mr->key = m->sub[first].key;
    for (c = 0; c < mx->n; c++)
        if (m->sub[c].desc != NULL)
            mr->desc = m->sub[c].desc;
    mr->shared = false; /* caps.peer_map is false: nothing is mapped from above */
    return 0;
}

int ofccl__mx_mr_dereg(ofccl__mr_t *mr)
{
    struct mx_mr *m = mr->handle;
    struct mx_ep *mx = mxe(mr->ep);
    int rc = 0;

    for (int c = 0; c < mx->n; c++) {
        int r = m->sub[c].ep != NULL ? mx->sub[c].be->mr_dereg(&m->sub[c]) : 0;
        rc = rc != 0 ? rc : r;
    }
    free(m);
    return rc;
}

/* ---- data path: each op to the transport that reaches its peer ---- */

int ofccl__mx_post(ofccl__ep_t *ep, struct ofccl__tp_op *op)
{
    struct mx_ep *mx = mxe(ep);
    int c = mx->cls[op->peer];

    /* Memory of another kind: the first transport that reaches the peer with it. */
    if (op->src_kind != OFCCL__MEM_HOST) {
        bool same_host = c < mx->n - 1;
        for (c = 0; c < mx->n - 1 && !ofccl__mx_reaches_with(mx, c, same_host, op->src_kind);)
            c++;
    }
    return mx->sub[c].be->post(&mx->sub[c], op);
}

/* Every transport, the one read first rotating. An error entry in one is
 * reported once the entries read before it are delivered. */
int ofccl__mx_cq_read(ofccl__ep_t *ep, struct ofccl__tp_cqe *ents, int n)
{
    struct mx_ep *mx = mxe(ep);
    int count = 0;

    if (mx->err_sub >= 0)
        return OFCCL__TP_ERR_AVAIL;
    for (int i = 0; i < mx->n && count < n; i++) {
        int c = (mx->first + i) % mx->n;
        int k = mx->sub[c].be->cq_read(&mx->sub[c], ents + count, n - count);

        if (k == OFCCL__TP_ERR_AVAIL) {
            mx->err_sub = c;
            return count > 0 ? count : OFCCL__TP_ERR_AVAIL;
        }
        if (k < 0)
            return count > 0 ? count : k;
        count += k;
    }
    mx->first = (mx->first + 1) % mx->n;
    return count;
}

int ofccl__mx_cq_readerr(ofccl__ep_t *ep, struct ofccl__tp_cqerr *err)
{
    struct mx_ep *mx = mxe(ep);
    int rc = -EAGAIN;

    if (mx->err_sub >= 0)
        rc = mx->sub[mx->err_sub].be->cq_readerr(&mx->sub[mx->err_sub], err);
    for (int c = 0; c < mx->n && rc == -EAGAIN && mx->err_sub < 0; c++)
        rc = mx->sub[c].be->cq_readerr(&mx->sub[c], err);
    mx->err_sub = -1;
    return rc;
}

bool ofccl__mx_idle(const ofccl__ep_t *ep)
{
    const struct mx_ep *mx = mxe(ep);

    for (int c = 0; c < mx->n; c++)
        if (!mx->sub[c].be->idle(&mx->sub[c]))
            return false;
    return true;
}

/* Every transport's codes are errno values; the fabric's text covers them. */
const char *ofccl__mx_strerror(int err)
{
    return ofccl__fabric_backend.strerror(err);
}

/* Each transport watches the processes of the peers it reaches that it can
 * (the local transport every one; the fabric none today: shm, the fabric
 * provider that watches, is never joined). */
int ofccl__mx_peer_gone(ofccl__ep_t *ep, int *pid)
{
    struct mx_ep *mx = mxe(ep);
    int peer = -1;

    for (int c = 0; c < mx->n && peer < 0; c++)
        peer = mx->sub[c].be->peer_gone(&mx->sub[c], pid);
    return peer;
}

int ofccl__mx_peer_class(const ofccl__ep_t *ep, int peer)
{
    const struct mx_ep *mx = mxe(ep);
    int c;

    if (mx == NULL || peer < 0 || peer >= ep->params.size)
        return OFCCL__PEER_FABRIC;
    c = mx->cls[peer];
    return mx->sub[c].be->peer_class(&mx->sub[c], peer);
}

/* A peer's memory mapped by the transport that serves the peer, where it
 * maps (the local transport: same-host peers). Keys are the same in every
 * transport (mx_mr_reg). */
int ofccl__mx_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                       ofccl__err_t *e)
{
    struct mx_ep *mx = mxe(ep);
    ofccl__ep_t *s;

    if (mx == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_STATE,
                           "rank %d: mapping peer %d's memory before the endpoint is set up",
                           ep->params.rank, peer);
    s = &mx->sub[mx->cls[peer]];
    if (!s->prov->caps.peer_map)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: peer %d is reached through %s, which maps no memory",
                           ep->params.rank, peer, s->prov->caps.name);
    return s->be->peer_map(s, peer, rk, roff, len, access, ptr, kind, e);
}

/* Never joined into another composite: it reaches what its transports do. */
bool ofccl__mx_reaches(const ofccl__prov_t *prov, bool same_host, ofccl__mem_kind_t kind)
{
    const struct mx_prov *st = mxp(prov);

    for (int c = 0; c < st->n; c++)
        if (st->sub[c]->be->reaches(st->sub[c], same_host, kind))
            return true;
    return false;
}
