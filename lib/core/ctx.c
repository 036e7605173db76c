/* The context: configuration, logger, bootstrap, topology and the open fabric. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump.h"
#include "gpu/gpu.h"
#include "engine_impl.h"
#include "exec.h"
#include "pool.h"
#include "trace.h"
#include "util.h"

#define OFCCL__STR2(x) #x
#define OFCCL__STR(x) OFCCL__STR2(x)

void ofccl_version(int *major, int *minor, int *patch)
{
    if (major)
        *major = OFCCL_VERSION_MAJOR;
    if (minor)
        *minor = OFCCL_VERSION_MINOR;
    if (patch)
        *patch = OFCCL_VERSION_PATCH;
}

const char *ofccl_version_string(void)
{
    return OFCCL__STR(OFCCL_VERSION_MAJOR) "." OFCCL__STR(OFCCL_VERSION_MINOR) "." OFCCL__STR(
        OFCCL_VERSION_PATCH);
}

static bool has_domain(const ofccl__prov_dom_t *doms, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (strcmp(doms[k].domain, name) == 0)
            return true;
    return false;
}

/* Is `name` one of the providers libfabric lists on this machine? */
static bool offered_here(const char *name)
{
    char avail[1024];
    size_t n = strlen(name);

    ofccl__prov_available(avail, sizeof(avail));
    for (const char *p = avail; *p != '\0';) {
        size_t len = strcspn(p, ",");
        while (*p == ' ' && len > 0)
            p++, len--;
        if (len == n && strncasecmp(p, name, n) == 0)
            return true;
        p += len;
        p += *p == ',';
    }
    return false;
}

int ofccl__ctx_choose(const ofccl__config_t *cfg, ofccl__topo_t *topo, bool all_local, int nranks,
                      const ofccl__log_t *lg, char *provider, size_t plen, char *domain,
                      size_t dlen, char *why, size_t whylen, ofccl__err_t *e)
{
    const char *want = ofccl__cfg_str(cfg, OFCCL__CFG_PROVIDER);
    const char *iface = ofccl__cfg_str(cfg, OFCCL__CFG_IFACE);
    ofccl__prov_dom_t doms[64];
    ofccl__topo_nic_t nics[64];
    char pwhy[320], dwhy[400] = "";
    int n = 0, row, rc;
    unsigned flags;

    if (strcasecmp(want, "auto") == 0) {
        bool strict = ofccl__cfg_int(cfg, OFCCL__CFG_STRICT) != 0;
        want = ofccl__prov_auto(all_local, strict, pwhy, sizeof(pwhy));
    } else {
        snprintf(pwhy, sizeof(pwhy), "%s: set by OFCCL_PROVIDER", want);
    }
    row = ofccl__quirk_find(want);
    if (row < 0 && !offered_here(want)) {
        char avail[256];
        ofccl__prov_available(avail, sizeof(avail));
        /* A name nobody knows is a typo in the setting; a known provider that
         * this machine lacks is NOT_SUPPORTED (from the provider layer). */
        return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                           "OFCCL_PROVIDER=%s: no such provider (ofccl knows local, shm, tcp, "
                           "verbs and libfabric's provider names; libfabric %s offers here: %s)",
                           want, ofccl__prov_fabric_version(), avail);
    }
    flags = row >= 0 ? ofccl__quirks[row].flags : 0;
    if ((flags & OFCCL__Q_INTRA_NODE_ONLY) && !all_local)
        return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider %s reaches only processes on one host, but the %d ranks "
                           "of this job span several hosts; use OFCCL_PROVIDER=tcp or verbs",
                           want, nranks);
    if (flags & OFCCL__Q_DEPRECATED)
        OFCCL__INFO(lg, OFCCL__SUB_CORE, "provider %s: %s", want, ofccl__quirks[row].note);

    rc = ofccl__prov_list(want, doms, (int)OFCCL__ARRAY_LEN(doms), &n, e);
    if (rc)
        return rc;
    if (iface[0] != '\0') {
        if (!has_domain(doms, n, iface)) {
            char list[512] = "";
            for (int k = 0; k < n; k++)
                if (!has_domain(doms, k, doms[k].domain)) /* once each (IPv4, IPv6, ...) */
                    snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                             list[0] ? ", " : "", doms[k].domain);
            return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                               "OFCCL_IFACE=%s: provider %s offers no such domain (it offers: "
                               "%s)",
                               iface, want, n ? list : "none");
        }
        ofccl__strlcpy(domain, iface, dlen);
        snprintf(dwhy, sizeof(dwhy), "domain %s: set by OFCCL_IFACE", iface);
    } else if ((flags & OFCCL__Q_LOOPBACK_DOMAIN) && all_local && has_domain(doms, n, "lo")) {
        /* One host: loopback keeps the traffic off the NIC and off the network. */
        ofccl__strlcpy(domain, "lo", dlen);
        snprintf(dwhy, sizeof(dwhy), "domain lo: all ranks share this host");
    } else if (n > 1 && topo != NULL) {
        int chosen = 0, m = 0, map[64];
        char twhy[320] = "";
        /* Loopback cannot reach another host: never a candidate for a multi-host job. */
        for (int k = 0; k < n; k++) {
            if (!all_local && strcmp(doms[k].domain, "lo") == 0)
                continue;
            nics[m].name = doms[k].domain;
            nics[m].pci_busid = doms[k].pci_busid;
            map[m++] = k;
        }
        if (m == 0)
            return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_NOT_SUPPORTED,
                               "provider %s offers only loopback here, but the job spans hosts",
                               want);
        rc = ofccl__topo_pick_nic(topo, NULL, nics, m, &chosen, twhy, sizeof(twhy), e);
        if (rc)
            return rc;
        chosen = map[chosen];
        ofccl__strlcpy(domain, doms[chosen].domain, dlen);
        snprintf(dwhy, sizeof(dwhy), "domain %s: closest to this process (%s)", doms[chosen].domain,
                 twhy);
    } else {
        ofccl__strlcpy(domain, n > 0 ? doms[0].domain : "", dlen);
        snprintf(dwhy, sizeof(dwhy), "domain %s: the only one offered",
                 n > 0 ? doms[0].domain : "(none)");
    }
    ofccl__strlcpy(provider, want, plen);
    snprintf(why, whylen, "%s; %s", pwhy, dwhy);
    return 0;
}

/* Two (or more) separately launched jobs meeting through one TCP rendezvous:
 * OFCCL_BOOT_GROUPS lists every group with its size ("trainer:4,rollout:2"),
 * OFCCL_BOOT_GROUP names this process's, and OFCCL_BOOT_RANK is its rank
 * within it. The job's ranks are the groups' in the order listed. */
static int boot_groups(const ofccl__config_t *cfg, int *rank, int *size, ofccl__err_t *e)
{
    const char *groups = ofccl__cfg_str(cfg, OFCCL__CFG_BOOT_GROUPS);
    const char *mine = ofccl__cfg_str(cfg, OFCCL__CFG_BOOT_GROUP);
    int offset = -1, total = 0, my_size = 0;

    if (groups[0] == '\0' && mine[0] == '\0')
        return 0;
    for (const char *p = groups; *p != '\0';) {
        size_t n = strcspn(p, ":,");
        char *end;
        long gsize;
        if (n == 0 || p[n] != ':')
            return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                               "OFCCL_BOOT_GROUPS=%s: expected name:size[,name:size...]", groups);
        gsize = strtol(p + n + 1, &end, 10);
        if (end == p + n + 1 || gsize < 1 || gsize > 1048576 || (*end != ',' && *end != '\0'))
            return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                               "OFCCL_BOOT_GROUPS=%s: group '%.*s' has no valid size", groups,
                               (int)n, p);
        if (strlen(mine) == n && strncmp(p, mine, n) == 0) {
            offset = total;
            my_size = (int)gsize;
        }
        total += (int)gsize;
        p = *end == ',' ? end + 1 : end;
    }
    if (offset < 0)
        return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_GROUP=%s is not one of OFCCL_BOOT_GROUPS=%s", mine, groups);
    if (*rank < 0 || *rank >= my_size)
        return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_RANK=%d: group %s has ranks 0..%d", *rank, mine,
                           my_size - 1);
    *rank += offset;
    *size = total;
    return 0;
}

static void apply_log_config(ofccl__log_t *lg, const ofccl__config_t *cfg)
{
    static const unsigned subsys_bits[] = {OFCCL__SUB_CORE, OFCCL__SUB_COLL, OFCCL__SUB_PROV,
                                           OFCCL__SUB_BOOT, OFCCL__SUB_MEM};
    int64_t mask = ofccl__cfg_int(cfg, OFCCL__CFG_LOG_SUBSYS);

    lg->level = (int)ofccl__cfg_int(cfg, OFCCL__CFG_LOG_LEVEL);
    lg->subsys = 0;
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(subsys_bits); k++)
        if (mask & (1ll << k))
            lg->subsys |= subsys_bits[k];
}

/* Ask the fabric provider for GPU memory (FI_HMEM)? OFCCL_GPU_FABRIC: auto
 * where a libfabric provider carries GPU memory (the job spans hosts, or one
 * is set on one host) and CUDA is loaded in the process already (a host-only
 * program never asks, nor loads CUDA), hmem always, stage never. */
/* Is `provider` a libfabric provider (its quirk row says whether it is
 * ofccl's own transport instead)? */
static bool through_libfabric(const char *provider)
{
    int row = ofccl__quirk_find(provider);

    return row < 0 || !(ofccl__quirks[row].flags & OFCCL__Q_NO_FABRIC);
}

static int want_hmem(ofccl_ctx_t *ctx)
{
    int how = (int)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_GPU_FABRIC);

    if (how == 2 || !ofccl__gpu_built())
        return OFCCL__HMEM_NO;
    if (how == 1)
        return OFCCL__HMEM_NEED;
    return (ctx->boot->nhosts > 1 || through_libfabric(ctx->provider)) &&
                   ofccl__gpu_process(&ctx->log, false) != NULL
               ? OFCCL__HMEM_WANT
               : OFCCL__HMEM_NO;
}

/* Open the transport, with the domain authorization key derived from the
 * job secret where a provider takes one; rank 0 says what keeps processes
 * outside the job off the fabric (docs/security.md). */
static int prov_open(ofccl_ctx_t *ctx, ofccl__prov_params_t *pp, ofccl__err_t *e)
{
    const char *secret = ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_BOOT_SECRET_FILE);
    uint8_t key[OFCCL__PROV_JOB_KEY_LEN];
    int rc, how;

    if (secret[0] != '\0' && through_libfabric(pp->provider)) {
        rc = ofccl__boot_fabric_key(secret, &ctx->log, key, sizeof(key), e);
        if (rc)
            return rc;
        pp->job_key = key;
    }
    rc = ofccl__prov_open(pp, &ctx->prov, e);
    explicit_bzero(key, sizeof(key));
    pp->job_key = NULL;
    if (rc || ctx->boot->rank != 0)
        return rc;
    how = ofccl__prov_caps(ctx->prov)->auth_key;
    if (how == OFCCL__AUTH_KEY_DERIVED)
        OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE,
                    "job secret: provider %s's domain has an authorization key derived from it: "
                    "processes outside the job cannot reach its memory",
                    ofccl__prov_caps(ctx->prov)->name);
    else if (how == OFCCL__AUTH_KEY_UNOFFERED)
        OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE,
                    "job secret: provider %s has no domain authorization key to derive from it: "
                    "the fabric is open to any process holding a memory key",
                    ofccl__prov_caps(ctx->prov)->name);
    else if (how == OFCCL__AUTH_KEY_LAUNCHER)
        OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE,
                    "job secret: provider %s keeps the authorization key (VNI) its launcher "
                    "grants the job; a key derived from the secret would be no VNI the fabric "
                    "knows",
                    ofccl__prov_caps(ctx->prov)->name);
    return 0;
}

static int ctx_open(ofccl_ctx_t *ctx, const ofccl_ctx_params_t *params)
{
    ofccl__err_t *e = &ctx->err;
    char launcher[512], unknown[512], domain[64];
    ofccl__boot_params_t bp;
    ofccl__prov_params_t pp;
    int rc;

    ofccl__log_init(&ctx->log);
    ofccl__exec_init(ctx);
    rc = ofccl__config_load(&ctx->cfg, params ? params->settings : NULL, NULL, NULL, e);
    if (rc) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE, "%s", e->msg);
        return rc;
    }
    apply_log_config(&ctx->log, &ctx->cfg);
    ofccl__config_unknown_env(unknown, sizeof(unknown));
    if (unknown[0])
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE,
                    "ignoring %s: no such parameter (see `ofccl_info -c`)", unknown);

    ofccl__config_launcher_env(launcher, sizeof(launcher));
    bp = (ofccl__boot_params_t){
        .method = ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_BOOT),
        .timeout_ms = (uint64_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_BOOT_TIMEOUT_MS),
        .root = ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_BOOT_ROOT),
        .rank = (int)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_BOOT_RANK),
        .size = (int)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_BOOT_SIZE),
        .launcher_vars = launcher,
        .host_id = ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_HOST_ID),
        .secret_file = ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_BOOT_SECRET_FILE),
        .log = &ctx->log,
    };
    rc = boot_groups(&ctx->cfg, &bp.rank, &bp.size, e);
    if (rc) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_BOOT, "%s", e->msg);
        return rc;
    }
    rc = ofccl__boot_open(&bp, &ctx->boot, e);
    if (rc)
        return rc;
    ctx->log.rank = ctx->boot->rank;
    ofccl__dead_start(ctx);

    rc = ofccl__topo_load(ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_TOPO_XML), &ctx->log, &ctx->topo, e);
    if (rc)
        return rc;
    rc = ofccl__ctx_choose(&ctx->cfg, ctx->topo, ctx->boot->local_size == ctx->boot->size,
                           ctx->boot->size, &ctx->log, ctx->provider, sizeof(ctx->provider), domain,
                           sizeof(domain), ctx->choice_why, sizeof(ctx->choice_why), e);
    if (rc)
        return rc;
    OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE, "rank %d of %d (local %d of %d) via %s: %s",
                ctx->boot->rank, ctx->boot->size, ctx->boot->local_rank, ctx->boot->local_size,
                ctx->boot->ops->name, ctx->choice_why);
    rc = ofccl__fault_parse(ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_FAULT), ctx->boot->rank,
                            &ctx->fault, &ctx->kill_at, e);
    if (rc) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE, "%s", e->msg);
        return rc;
    }
    pp = (ofccl__prov_params_t){
        .provider = ctx->provider,
        .domain = domain,
        .strict = ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_STRICT) != 0,
        .log = &ctx->log,
        .fault = &ctx->fault,
        .signal = (int)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_SIGNAL),
        /* Decided from what every rank knows alike (the host count), so every
         * rank makes the same choice. */
        .same_host_local = ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_PEER_TRANSPORT) == 0 &&
                           ctx->boot->nhosts > 1 && ctx->boot->nhosts < ctx->boot->size,
        .host_id = ctx->boot->host_id,
        .hmem = want_hmem(ctx),
    };
    rc = prov_open(ctx, &pp, e);
    if (rc)
        return rc;
    /* Across hosts the copy rate prices local copies and reductions against
     * the fabric (links.c). */
    rc = ofccl__links_init(ctx, ofccl__prov_caps(ctx->prov)->link_bps, ctx->boot->nhosts > 1, e);
    if (rc)
        return rc;
    rc = ofccl__progress_start(ctx, e);
    if (rc == 0)
        rc = ofccl__trace_open(ctx);
    if (rc == 0)
        rc = ofccl__dump_start(ctx);
    return rc;
}

static void ctx_close(ofccl_ctx_t *ctx)
{
    ofccl__dump_stop(ctx);
    ofccl__trace_close(ctx);
    ofccl__progress_stop(ctx);
    while (ctx->memreg != NULL) { /* registrations the caller never released */
        ofccl_mem_t *m = ctx->memreg;
        ctx->memreg = m->next;
        if (m->owned) /* ofccl_mem_alloc memory the caller never freed */
            ofccl__prov_mem_free(m->addr);
        ofccl__handle_remove(m);
        free(m);
    }
    if (ctx->prov)
        ofccl__prov_close(ctx->prov);
    if (ctx->topo)
        ofccl__topo_free(ctx->topo);
    if (ctx->boot) {
        ofccl__dead_stop(ctx);
        ofccl__boot_close(ctx->boot);
    }
    free(ctx);
}

int ofccl_ctx_create(const ofccl_ctx_params_t *params, ofccl_ctx_t **out)
{
    ofccl_ctx_t *ctx;
    int rc;

    /* A size too small means an uninitialised struct: errbuf cannot be trusted either. */
    if (params != NULL && params->size < offsetof(ofccl_ctx_params_t, errlen) + sizeof(size_t))
        return OFCCL_ERR_INVALID_ARG;
    if (out == NULL) {
        if (params)
            ofccl__err_copy(params->errbuf, params->errlen, "ofccl_ctx_create: ctx is NULL");
        return OFCCL_ERR_INVALID_ARG;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        if (params)
            ofccl__err_copy(params->errbuf, params->errlen, "ofccl_ctx_create: out of memory");
        return OFCCL_ERR_NO_MEMORY;
    }
    rc = ctx_open(ctx, params);
    if (rc == 0 && ofccl__handle_add(ctx) != 0)
        rc = ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_NO_MEMORY,
                         "ofccl_ctx_create: out of memory");
    if (rc) {
        if (params)
            ofccl__err_copy(params->errbuf, params->errlen, ctx->err.msg);
        ctx_close(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

int ofccl_ctx_destroy(ofccl_ctx_t *ctx)
{
    OFCCL__CHECK_HANDLE(ctx);
    if (ctx->ncomms > 0)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_BUSY,
                           "ofccl_ctx_destroy: %d communicator(s) still open; destroy them first",
                           ctx->ncomms);
    ofccl__handle_remove(ctx);
    ctx_close(ctx);
    return 0;
}

const char *ofccl_ctx_last_error(const ofccl_ctx_t *ctx)
{
    if (!ofccl__handle_live(ctx))
        return ctx ? "ofccl_ctx_last_error: context destroyed"
                   : "ofccl_ctx_last_error: ctx is NULL";
    return ctx->err.msg;
}

const char *ofccl_ctx_provider(const ofccl_ctx_t *ctx)
{
    return ofccl__handle_live(ctx) ? ofccl__prov_caps(ctx->prov)->name : "";
}

/* What the context has done so far, its communicators' counters summed. */
int ofccl_ctx_stats(const ofccl_ctx_t *ctx, ofccl_stats_t *stats)
{
    uint64_t bytes[OFCCL__PEER_CLASSES];
    ofccl_stats_t s;
    size_t want;

    OFCCL__CHECK_HANDLE(ctx);
    if (stats == NULL || stats->size < offsetof(ofccl_stats_t, peers_resolved))
        return OFCCL_ERR_INVALID_ARG;
    want = OFCCL__MIN(stats->size, sizeof(s));
    s = ctx->stats;
    s.size = want;
    ofccl__prov_bytes(ctx->prov, bytes);
    s.local_bytes = bytes[OFCCL__PEER_LOCAL];
    s.fabric_bytes = bytes[OFCCL__PEER_FABRIC];
    s.peers_resolved = s.op_contexts = 0;
    for (const ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next) {
        s.peers_resolved += (uint64_t)ofccl__comm_peers_resolved(c);
        s.op_contexts += ofccl__coll_op_contexts(c);
    }
    memcpy(stats, &s, want);
    return 0;
}
