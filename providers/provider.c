/*
 * The provider handle: which backend serves a provider name, opening and
 * closing it, the signal method it reports, what "auto" means, and
 * discovery across backends.
 *
 * The backend table below is the one place a transport name is looked at;
 * per-provider facts are rows of the quirk table (quirks.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prov_impl.h"
#include "util.h"

/* Consulted in order: the first whose `serves` is the name, else the one
 * serving every other name. Discovery lists them in this order too. */
static const ofccl__backend_t *const backends[] = {&ofccl__local_backend, &ofccl__fabric_backend};

const ofccl__backend_t *ofccl__tp_backend(size_t i)
{
    return i < OFCCL__ARRAY_LEN(backends) ? backends[i] : NULL;
}

static const ofccl__backend_t *backend_for(const char *prov_name)
{
    const ofccl__backend_t *any = NULL;

    for (size_t i = 0; i < OFCCL__ARRAY_LEN(backends); i++) {
        if (backends[i]->serves == NULL)
            any = backends[i];
        else if (strcmp(backends[i]->serves, prov_name) == 0)
            return backends[i];
    }
    return any;
}

/* An alias ("tcp") becomes its row's prov_name; other names pass through. */
static const char *resolve(const char *name)
{
    int row = ofccl__quirk_find(name);
    return row >= 0 ? ofccl__quirks[row].prov_name : name;
}

void ofccl__tp_list_add(char *buf, size_t len, const char *item)
{
    size_t n = strlen(item), used = strlen(buf);

    for (const char *p = buf; (p = strstr(p, item)) != NULL; p += n) {
        bool start = p == buf || (p >= buf + 2 && p[-2] == ',' && p[-1] == ' ');
        bool end = p[n] == '\0' || p[n] == ',';
        if (start && end)
            return;
    }
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", item);
}

void ofccl__prov_available(char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < OFCCL__ARRAY_LEN(backends); i++)
        backends[i]->available(buf, len);
}

int ofccl__prov_list(const char *provider, ofccl__prov_dom_t *out, int max, int *n, ofccl__err_t *e)
{
    int count = 0;

    if (n == NULL || max < 0 || (out == NULL && max > 0))
        return ofccl__fail(NULL, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__prov_list: bad arguments");
    if (provider != NULL && provider[0] != '\0')
        return backend_for(resolve(provider))->list(provider, out, max, n, e);
    for (size_t i = 0; i < OFCCL__ARRAY_LEN(backends); i++) {
        int k = 0,
            ret = backends[i]->list(NULL, out != NULL ? out + count : NULL, max - count, &k, e);
        if (ret != 0)
            return ret;
        count += k;
    }
    *n = count;
    return 0;
}

const char *ofccl__prov_auto(bool all_local, bool strict, char *why, size_t len)
{
    const char *skipped = NULL, *last = "";

    for (size_t i = 0; i < ofccl__quirk_count; i++) {
        const ofccl__quirk_t *q = &ofccl__quirks[i];

        if (!(q->flags & OFCCL__Q_AUTO))
            continue;
        last = q->alias;
        if (!all_local && (q->flags & OFCCL__Q_INTRA_NODE_ONLY))
            continue;
        if (strict && !(q->flags & OFCCL__Q_STRICT_CAPABLE)) {
            skipped = skipped != NULL ? skipped : q->alias;
            continue;
        }
        if (why != NULL && len > 0)
            snprintf(why, len, "%s: OFCCL_PROVIDER=auto and %s%s%s%s", q->alias,
                     all_local ? "all ranks share this host" : "the job spans several hosts",
                     skipped != NULL ? " (OFCCL_STRICT=1 rules out " : "",
                     skipped != NULL ? skipped : "", skipped != NULL ? ": no strict mode)" : "");
        return q->alias;
    }
    /* Not reached with the table as written; the context then says why the
     * last candidate cannot serve this job. */
    if (why != NULL && len > 0)
        snprintf(why, len, "%s: OFCCL_PROVIDER=auto and no candidate fits this job", last);
    return last;
}

/* The signal method: the one asked for, where the capabilities allow it;
 * for "auto", remote CQ data where there are 4 bytes of it, else atomics. */
static int choose_signal(ofccl__prov_t *prov, int want, ofccl__err_t *e)
{
    ofccl__prov_caps_t *c = &prov->caps;
    bool cq = c->cq_data_size >= 4, at = c->atomic_u64_sum;

    if (want == OFCCL__PROV_SIGNAL_CQDATA && !cq)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "OFCCL_SIGNAL=cqdata: provider %s offers %zu bytes of remote CQ "
                           "data, 4 needed; use OFCCL_SIGNAL=atomic or auto",
                           c->name, c->cq_data_size);
    if (want == OFCCL__PROV_SIGNAL_ATOMIC && !at)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "OFCCL_SIGNAL=atomic: provider %s has no 64-bit atomic add; use "
                           "OFCCL_SIGNAL=cqdata or auto",
                           c->name);
    if (!cq && !at)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider %s has neither remote CQ data nor 64-bit atomics: "
                           "ofccl cannot signal arrivals on it",
                           c->name);
    if (want == OFCCL__PROV_SIGNAL_AUTO && !cq)
        OFCCL__INFO(prov->log, OFCCL__SUB_PROV,
                    "provider %s has no remote CQ data: signalling with atomic adds instead",
                    c->name);
    c->signal = want == OFCCL__PROV_SIGNAL_ATOMIC || (want == OFCCL__PROV_SIGNAL_AUTO && !cq)
                    ? OFCCL__PROV_SIGNAL_ATOMIC
                    : OFCCL__PROV_SIGNAL_CQDATA;
    return 0;
}

/* One backend's handle for params->provider, its signal method chosen. */
static int open_one(const ofccl__prov_params_t *params, ofccl__prov_t **out, ofccl__err_t *e)
{
    const ofccl__log_t *log = params ? params->log : NULL;
    const ofccl__backend_t *be;
    const char *prov_name;
    ofccl__prov_t *prov;
    int ret;

    if (params == NULL || out == NULL || params->provider == NULL || params->provider[0] == '\0')
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "opening a provider needs a provider name");
    if (params->signal < OFCCL__PROV_SIGNAL_AUTO || params->signal > OFCCL__PROV_SIGNAL_ATOMIC)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "opening a provider: unknown signal method %d", params->signal);
    prov_name = resolve(params->provider);
    be = backend_for(prov_name);
    if (be->size < sizeof(*be))
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                           "the %s transport's operations table is %zu bytes, %zu expected",
                           be->name, be->size, sizeof(*be));
    prov = calloc(1, sizeof(*prov));
    if (prov == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    prov->be = be;
    prov->mem_be = be;
    prov->log = log;
    if (params->fault != NULL)
        prov->fault = *params->fault;
    pthread_mutex_init(&prov->lock, NULL);
    ret = be->open(prov, prov_name, params, e);
    if (ret != 0)
        goto err_prov;
    ret = choose_signal(prov, params->signal, e);
    if (ret != 0)
        goto err_open;
    *out = prov;
    return 0;

err_open:
    be->close(prov);
err_prov:
    pthread_mutex_destroy(&prov->lock);
    free(prov);
    return ret;
}

int ofccl__prov_open(const ofccl__prov_params_t *params, ofccl__prov_t **out, ofccl__err_t *e)
{
    ofccl__prov_t *prov = NULL;
    char buf[1024];
    int ret = open_one(params, &prov, e);

    if (ret == 0 && params->same_host_local) {
        ret = ofccl__mx_wrap(&prov, params, e);
        if (ret != 0)
            ofccl__prov_close(prov);
    }
    if (ret != 0)
        return ret;
    ofccl__prov_caps_format(&prov->caps, buf, sizeof(buf));
    OFCCL__DEBUG(params->log, OFCCL__SUB_PROV, "opened provider:\n%s", buf);
    *out = prov;
    return 0;
}

void ofccl__prov_bytes(const ofccl__prov_t *prov, uint64_t bytes[OFCCL__PEER_CLASSES])
{
    for (int c = 0; c < OFCCL__PEER_CLASSES; c++)
        bytes[c] = prov != NULL ? atomic_load_explicit(&prov->bytes[c], memory_order_relaxed) : 0;
}

const ofccl__prov_caps_t *ofccl__prov_caps(const ofccl__prov_t *prov)
{
    return &prov->caps;
}

int ofccl__prov_close(ofccl__prov_t *prov)
{
    unsigned n;
    int rc;

    if (prov == NULL)
        return 0;
    pthread_mutex_lock(&prov->lock);
    n = prov->n_eps;
    pthread_mutex_unlock(&prov->lock);
    if (n > 0)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_BUSY,
                           "provider %s: %u endpoint(s) still open", prov->caps.name, n);
    if (prov->n_abandoned > 0) {
        /* Endpoints left open (ofccl__ep_shutdown) still belong to the
         * handle's domain: keep it, reachable, for the life of the process. */
        ofccl__tp_keep_prov(prov);
        return 0;
    }
    rc = prov->be->close(prov);
    pthread_mutex_destroy(&prov->lock);
    free(prov);
    return rc;
}

/* ---- stubs: the slots a backend has no use for ---- */

void ofccl__tp_stub_peers_ready(ofccl__ep_t *ep)
{
    (void)ep;
}

bool ofccl__tp_stub_idle(const ofccl__ep_t *ep)
{
    (void)ep;
    return false;
}

int ofccl__tp_stub_peer_gone(ofccl__ep_t *ep, int *pid)
{
    (void)ep;
    if (pid != NULL)
        *pid = -1;
    return -1;
}

void *ofccl__tp_stub_mem_alloc(size_t len, intptr_t *cookie)
{
    (void)len;
    (void)cookie;
    errno = ENOTSUP;
    return NULL;
}

void ofccl__tp_stub_mem_free(void *ptr, size_t len, intptr_t cookie)
{
    (void)ptr;
    (void)len;
    (void)cookie;
}

const ofccl__exec_t *ofccl__tp_exec(const ofccl__ep_t *ep, ofccl__mem_kind_t dst,
                                    ofccl__mem_kind_t src)
{
    static const ofccl__exec_t host = {&ofccl__exec_host_ops, NULL, OFCCL__MEM_HOST};

    if (ep->params.execs != NULL)
        return ofccl__exec_find(ep->params.execs, dst, src);
    return dst == OFCCL__MEM_HOST && src == OFCCL__MEM_HOST ? &host : NULL;
}

int ofccl__tp_stub_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                            size_t len, unsigned access, void **ptr, ofccl__mem_kind_t *kind,
                            ofccl__err_t *e)
{
    (void)kind;
    *ptr = NULL;
    return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                       "rank %d: %s cannot map peer %d's memory here", ep->params.rank,
                       ep->prov->caps.name, peer);
}

int ofccl__tp_stub_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len,
                            ofccl__err_t *e)
{
    (void)name;
    (void)len;
    return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                       "rank %d: %s cannot insert peer %d alone", ep->params.rank,
                       ep->prov->caps.name, peer);
}

int ofccl__tp_stub_wait_fd(const ofccl__ep_t *ep)
{
    (void)ep;
    return -1;
}

int ofccl__tp_class_local(const ofccl__ep_t *ep, int peer)
{
    (void)ep;
    (void)peer;
    return OFCCL__PEER_LOCAL;
}

int ofccl__tp_class_fabric(const ofccl__ep_t *ep, int peer)
{
    (void)ep;
    (void)peer;
    return OFCCL__PEER_FABRIC;
}

/* ---- capabilities as text ---- */

static const char *yn(bool b)
{
    return b ? "yes" : "no";
}

void ofccl__prov_caps_format(const ofccl__prov_caps_t *c, char *buf, size_t len)
{
    char flags[240] = "";
    static const char *const fnames[] = {
        "CQDATA_4",       "ATOMIC_EMULATED",  "LOOPBACK_DOMAIN", "DEPRECATED",
        "STRICT_CAPABLE", "NEEDS_RX_CQ_DATA", "NEEDS_MR_LOCAL",  "INTRA_NODE_ONLY",
        "PREFER_OFFSETS", "NAME_PER_PROCESS", "NO_DC_ATOMIC",    "NO_CLOSE_MIDWRITE",
        "AUTO",           "CPU_COPIES"};
    const char *note = "(no quirk row for this provider)";

    if (buf == NULL || len == 0)
        return;
    for (unsigned b = 0; b < OFCCL__ARRAY_LEN(fnames); b++)
        if (c->quirks & (1u << b))
            snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%s%s",
                     flags[0] ? "|" : "", fnames[b]);
    if (c->quirk_row >= 0 && (size_t)c->quirk_row < ofccl__quirk_count)
        note = ofccl__quirks[c->quirk_row].note;
    snprintf(buf, len,
             "provider           %s\n"
             "fabric             %s\n"
             "domain             %s\n"
             "strict mode        %s\n"
             "quirks             row %d [%s]\n"
             "quirk note         %s\n"
             "virt_addr          %s\n"
             "prov_key           %s\n"
             "mr_local           %s\n"
             "mr_endpoint        %s\n"
             "mr_allocated       %s\n"
             "mr_raw             %s\n"
             "key_size           %zu\n"
             "signal             %s\n"
             "cq_data_size       %zu\n"
             "rx_cq_data         %s\n"
             "atomic_u64_sum     %s\n"
             "atomic_native      %s\n"
             "delivery_complete  %s\n"
             "order_waw          %s (max_order_waw_size %zu)\n"
             "order_raw          %s (max_order_raw_size %zu)\n"
             "order_war          %s (max_order_war_size %zu)\n"
             "inject_size        %zu\n"
             "max_msg_size       %zu\n"
             "peer_map           %s\n"
             "hmem               %s (GPU memory registered as such, FI_HMEM)\n"
             "auth_key           %s\n",
             c->name, c->fabric, c->domain, yn(c->strict), c->quirk_row, flags, note,
             yn(c->virt_addr), yn(c->prov_key), yn(c->mr_local), yn(c->mr_endpoint),
             yn(c->mr_allocated), yn(c->mr_raw), c->key_size,
             c->signal == OFCCL__PROV_SIGNAL_ATOMIC   ? "atomic"
             : c->signal == OFCCL__PROV_SIGNAL_CQDATA ? "cqdata"
                                                      : "(not chosen)",
             c->cq_data_size, yn(c->rx_cq_data), yn(c->atomic_u64_sum), yn(c->atomic_native),
             yn(c->delivery_complete), yn(c->order_waw), c->max_order_waw_size, yn(c->order_raw),
             c->max_order_raw_size, yn(c->order_war), c->max_order_war_size, c->inject_size,
             c->max_msg_size, yn(c->peer_map), yn(c->hmem),
             c->auth_key == OFCCL__AUTH_KEY_DERIVED     ? "derived from the job secret"
             : c->auth_key == OFCCL__AUTH_KEY_LAUNCHER  ? "the launcher's"
             : c->auth_key == OFCCL__AUTH_KEY_UNOFFERED ? "none offered"
                                                        : "none (no job secret)");
}
