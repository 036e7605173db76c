/*
 * Discovery on libfabric: which providers and domains it offers, and the
 * fi_info entry to open for a provider name.
 *
 * The decision is made from fi_getinfo with the hints ofccl can live with;
 * when that fails, the hints are relaxed one requirement at a time so the
 * error names the first thing the provider lacks instead of "no data".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "util.h"

#define RMA_CAPS (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
/* Modes ofccl supports: every op context is a struct with a fi_context2 first,
 * and it can keep receives posted for remote CQ data. */
#define WANT_MODES (FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA)
/* MR modes ofccl supports; never FI_MR_RAW (keys > 64 bits); FI_MR_HMEM only
 * when GPU memory is asked for (hint_opts.hmem). */
#define WANT_MR_MODES                                                                              \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)
/* For the relaxed probes: accept any mode so only the capability under test
 * can make fi_getinfo fail. */
#define PROBE_ANY_MODE (~0ull)
#define PROBE_ANY_MR_MODE (WANT_MR_MODES | FI_MR_RAW | FI_MR_RMA_EVENT | FI_MR_MMU_NOTIFY)

/* How much of the hint set to build; each level adds one requirement. */
enum hint_level {
    H_PROV = 0, /* the provider exists at all */
    H_RDM,      /* reliable datagram endpoints */
    H_RMA,      /* + RMA read/write, local and remote */
    H_ATOMIC,   /* + atomics */
    H_MODES,    /* + only the modes and MR modes ofccl supports */
    H_FULL,     /* + FI_THREAD_SAFE: what ofccl opens */
};

struct hint_opts {
    const char *prov_name; /* NULL = any */
    const char *domain;    /* NULL or "" = any */
    int level;
    bool virt_addr;       /* offer FI_MR_VIRT_ADDR */
    bool recv;            /* FI_MSG|FI_RECV: we will post receives for CQ data */
    uint64_t tx_op_flags; /* e.g. FI_DELIVERY_COMPLETE to probe for it */
    bool hmem;            /* + FI_HMEM and FI_MR_HMEM, atomics optional */
};

static const char *const level_what[] = {
    [H_RDM] = "reliable datagram endpoints (FI_EP_RDM)",
    [H_RMA] = "RMA read/write (FI_RMA)",
    [H_ATOMIC] = "atomics (FI_ATOMIC)",
    [H_MODES] = "the operating and memory-registration modes ofccl supports",
    [H_FULL] = "thread-safe domains (FI_THREAD_SAFE)",
};

static struct fi_info *make_hints(const struct hint_opts *o)
{
    struct fi_info *h = fi_allocinfo();

    if (h == NULL)
        return NULL;
    if (o->prov_name != NULL) {
        h->fabric_attr->prov_name = strdup(o->prov_name);
        if (h->fabric_attr->prov_name == NULL)
            goto fail;
    }
    if (o->domain != NULL && o->domain[0] != '\0') {
        h->domain_attr->name = strdup(o->domain);
        if (h->domain_attr->name == NULL)
            goto fail;
    }
    h->mode = PROBE_ANY_MODE;
    h->domain_attr->mr_mode = PROBE_ANY_MR_MODE;
    if (o->level >= H_RDM)
        h->ep_attr->type = FI_EP_RDM;
    if (o->level >= H_RMA)
        h->caps = RMA_CAPS | (o->recv ? (FI_MSG | FI_RECV) : 0);
    if (o->level >= H_ATOMIC && !o->hmem)
        h->caps |= FI_ATOMIC;
    if (o->level >= H_RMA && o->hmem)
        h->caps |= FI_HMEM;
    if (o->level >= H_MODES) {
        h->mode = WANT_MODES;
        h->domain_attr->mr_mode = WANT_MR_MODES & ~(o->virt_addr ? 0 : FI_MR_VIRT_ADDR);
        if (o->hmem)
            h->domain_attr->mr_mode |= FI_MR_HMEM;
    }
    if (o->level >= H_FULL) {
        h->domain_attr->threading = FI_THREAD_SAFE;
        h->tx_attr->op_flags = o->tx_op_flags;
    }
    return h;
fail:
    fi_freeinfo(h);
    return NULL;
}

/* First entry on `domain` (libfabric 1.17's tcp and sockets ignore the domain
 * name in the hints and return every interface, so we filter ourselves). */
static struct fi_info *first_on_domain(struct fi_info *list, const char *domain)
{
    for (struct fi_info *i = list; i != NULL; i = i->next) {
        if (domain == NULL || domain[0] == '\0')
            return i;
        if (i->domain_attr->name != NULL && strcmp(i->domain_attr->name, domain) == 0)
            return i;
    }
    return NULL;
}

/* fi_getinfo with these options; *list is owned by the caller, *pick points
 * into it (NULL when nothing matched). Returns the fi_getinfo result. */
static int query(const struct hint_opts *o, struct fi_info **list, struct fi_info **pick)
{
    struct fi_info *h = make_hints(o);
    int ret;

    *list = NULL;
    *pick = NULL;
    if (h == NULL)
        return -FI_ENOMEM;
    ret = fi_getinfo(OFCCL__FI_VERSION, NULL, NULL, 0, h, list);
    fi_freeinfo(h);
    if (ret == 0)
        *pick = first_on_domain(*list, o->domain);
    return ret;
}

/*
 * tcp;ofi_rxm sizes its buffer pools from environment variables only, read
 * once when libfabric loads its providers (the first fi_getinfo of the
 * process); no fi_info attribute reaches them. Its defaults (16 KiB eager
 * buffers, allocated 1024 at a time and zeroed, 4096 of them kept posted on
 * the shared receive queue it uses over tcp) cost about 86 MiB of resident
 * memory per endpoint, almost none of which ofccl uses: its data moves by RMA straight to the tcp
 * endpoints, and only atomic adds and rxm's own control messages (a few
 * dozen bytes each) go through those buffers. So, where the user has not
 * set them, ofccl sets smaller values before libfabric reads them
 * (docs/providers.md); a user's own setting always wins.
 */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void env_defaults_once(void)
{
    setenv("FI_OFI_RXM_BUFFER_SIZE", "1024", 0);
    setenv("FI_OFI_RXM_MSG_RX_SIZE", "64", 0);
}

void ofccl__fab_env_defaults(void)
{
    pthread_once(&env_once, env_defaults_once);
}

static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static char version_str[32];

static void version_init(void)
{
    uint32_t v = fi_version();

    /* fi_version() has no revision; the header's is right when major.minor agree. */
    if (FI_MAJOR(v) == FI_MAJOR_VERSION && FI_MINOR(v) == FI_MINOR_VERSION)
        snprintf(version_str, sizeof(version_str), "%u.%u.%u", FI_MAJOR(v), FI_MINOR(v),
                 (unsigned)FI_REVISION_VERSION);
    else
        snprintf(version_str, sizeof(version_str), "%u.%u", FI_MAJOR(v), FI_MINOR(v));
}

const char *ofccl__prov_fabric_version(void)
{
    pthread_once(&version_once, version_init);
    return version_str;
}

void ofccl__fab_available(char *buf, size_t len)
{
    struct fi_info *list = NULL;

    ofccl__fab_env_defaults();
    if (fi_getinfo(OFCCL__FI_VERSION, NULL, NULL, 0, NULL, &list) != 0)
        return;
    for (struct fi_info *i = list; i != NULL; i = i->next)
        if (i->fabric_attr->prov_name != NULL)
            ofccl__tp_list_add(buf, len, i->fabric_attr->prov_name);
    fi_freeinfo(list);
}

static int fail_unavailable(const ofccl__log_t *log, ofccl__err_t *e, const char *provider)
{
    char avail[256];

    ofccl__prov_available(avail, sizeof(avail));
    return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                       "provider '%s' is not available (libfabric %s offers: %s); set "
                       "OFCCL_PROVIDER to one of them",
                       provider, ofccl__prov_fabric_version(), avail);
}

/* fi_getinfo found nothing usable: work out why, most basic reason first. */
static int diagnose(const ofccl__prov_params_t *p, const char *prov_name, const char *domain,
                    bool virt_addr, bool recv, ofccl__err_t *e)
{
    struct hint_opts o = {prov_name, NULL, H_PROV, virt_addr, recv, 0, false};
    struct fi_info *list, *pick;
    char doms[256] = "";

    if (query(&o, &list, &pick) != 0 || pick == NULL) {
        fi_freeinfo(list);
        return fail_unavailable(p->log, e, p->provider);
    }
    if (domain[0] != '\0' && first_on_domain(list, domain) == NULL) {
        for (struct fi_info *i = list; i != NULL; i = i->next)
            if (i->domain_attr->name != NULL)
                ofccl__tp_list_add(doms, sizeof(doms), i->domain_attr->name);
        fi_freeinfo(list);
        return ofccl__fail(p->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider '%s' has no domain '%s' (it offers: %s); set OFCCL_IFACE "
                           "to one of them or leave it empty",
                           prov_name, domain, doms);
    }
    fi_freeinfo(list);

    o.domain = domain;
    for (int level = H_RDM; level <= H_FULL; level++) {
        char need[160] = "";
        struct fi_info *relaxed = NULL, *rpick = NULL;

        o.level = level;
        if (query(&o, &list, &pick) == 0 && pick != NULL) {
            fi_freeinfo(list);
            continue;
        }
        fi_freeinfo(list);
        if (level == H_MODES) {
            /* Say what the provider would have demanded instead. */
            o.level = H_ATOMIC;
            if (query(&o, &relaxed, &rpick) == 0 && rpick != NULL)
                snprintf(need, sizeof(need), "; it asks for mode [%s] and mr_mode [%s]",
                         fi_tostr(&rpick->mode, FI_TYPE_MODE),
                         fi_tostr(&rpick->domain_attr->mr_mode, FI_TYPE_MR_MODE));
            fi_freeinfo(relaxed);
        }
        return ofccl__fail(p->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider '%s'%s%s does not offer %s%s, which ofccl needs", prov_name,
                           domain[0] ? " domain " : "", domain, level_what[level], need);
    }
    return ofccl__fail(p->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                       "provider '%s'%s%s offers RDM, RMA and atomics but not with %s", prov_name,
                       domain[0] ? " domain " : "", domain,
                       recv ? "posted receives for CQ data (FI_MSG)" : "ofccl's hints");
}

/* query(), and where offset addressing finds nothing, again with virtual
 * addresses (o->virt_addr is then set). */
static void query_any_addressing(struct hint_opts *o, struct fi_info **list, struct fi_info **pick)
{
    query(o, list, pick);
    if (*pick == NULL && !o->virt_addr) {
        fi_freeinfo(*list);
        o->virt_addr = true;
        query(o, list, pick);
    }
}

/* The entry that takes GPU memory too (FI_HMEM), where the provider has one
 * ofccl can use: *pick, or NULL and the reason logged. Atomics are optional
 * in it (shm's has none): signals then use CQ data, unless atomics were
 * asked for. */
static void choose_hmem(const ofccl__prov_params_t *p, struct hint_opts o, struct fi_info **list,
                        struct fi_info **pick)
{
    o.hmem = true;
    o.recv = true; /* CQ data may be the signal: receives may be posted */
    query_any_addressing(&o, list, pick);
    if (*pick != NULL && p->signal == OFCCL__PROV_SIGNAL_ATOMIC && !((*pick)->caps & FI_ATOMIC)) {
        OFCCL__INFO(p->log, OFCCL__SUB_PROV,
                    "%s: its FI_HMEM entry has no atomics, which OFCCL_SIGNAL=atomic asks for: "
                    "opened without it, GPU memory cannot go as GPU memory",
                    o.prov_name);
        fi_freeinfo(*list);
        *list = *pick = NULL;
    } else if (*pick == NULL) {
        fi_freeinfo(*list);
        *list = NULL;
        OFCCL__INFO(p->log, OFCCL__SUB_PROV,
                    "%s (libfabric %s) offers no FI_HMEM entry: GPU memory to other hosts cannot "
                    "go as GPU memory (OFCCL_GPU_FABRIC: auto stages it, hmem refuses it)",
                    o.prov_name, ofccl__prov_fabric_version());
    }
}

/* Pick an fi_info for these parameters; on success *list owns *pick. */
int ofccl__fab_choose(const ofccl__prov_params_t *p, const char *prov_name, const char *domain,
                      struct fi_info **list, struct fi_info **pick, ofccl__err_t *e)
{
    int row = ofccl__quirk_find(prov_name);
    bool prefer_offsets = row >= 0 && (ofccl__quirks[row].flags & OFCCL__Q_PREFER_OFFSETS);
    /* Strict mode asks for offset addressing (verbs-like) and posts receives. */
    bool virt_addr = !(p->strict || prefer_offsets), recv = p->strict;
    struct hint_opts o = {prov_name, domain, H_FULL, virt_addr, recv, 0, false};

    if (p->hmem) {
        choose_hmem(p, o, list, pick);
        if (*pick != NULL)
            return 0;
    }
    query_any_addressing(&o, list, pick);
    if (*pick != NULL && o.virt_addr && !virt_addr)
        OFCCL__INFO(p->log, OFCCL__SUB_PROV,
                    "%s: %s needs FI_MR_VIRT_ADDR; falling back to virtual addressing",
                    p->strict ? "strict mode" : "offset addressing", prov_name);
    if (*pick != NULL && !recv && ((*pick)->mode & FI_RX_CQ_DATA)) {
        /* CQ data will consume receives: we must be allowed to post them. */
        fi_freeinfo(*list);
        o.recv = true;
        query(&o, list, pick);
    }
    if (*pick == NULL) {
        fi_freeinfo(*list);
        *list = NULL;
        return diagnose(p, prov_name, domain, o.virt_addr, o.recv, e);
    }
    if (p->strict && ((*pick)->domain_attr->mr_mode & FI_MR_VIRT_ADDR) && !o.virt_addr)
        OFCCL__INFO(p->log, OFCCL__SUB_PROV, "strict mode: %s uses virtual addresses anyway",
                    prov_name);
    return 0;
}

static bool same_str(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/*
 * FI_DELIVERY_COMPLETE: ask fi_getinfo again with it in tx_attr->op_flags. A
 * provider validates the requested op_flags against the ones it implements and
 * drops the entry if it cannot honour them, so an entry coming back for the
 * same fabric and domain means the flag is accepted per operation too (shm,
 * tcp;ofi_rxm and sockets all accept it in 1.17; shm's atomic path visibly
 * waits for the target's response when it is set). We never put it in the
 * endpoint's default op_flags: only atomic adds pay for it.
 *
 * Atomic adds therefore use fi_atomicmsg + FI_DELIVERY_COMPLETE on shm,
 * tcp;ofi_rxm and sockets (what this probe finds on 1.17), and fi_fetch_atomic
 * wherever the probe fails: a fetch cannot complete before the target has
 * applied the add and returned the old value.
 */
bool ofccl__fab_probe_delivery_complete(const struct fi_info *chosen)
{
    struct hint_opts o = {chosen->fabric_attr->prov_name,
                          chosen->domain_attr->name,
                          H_FULL,
                          (chosen->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0,
                          (chosen->caps & FI_MSG) != 0,
                          FI_DELIVERY_COMPLETE,
                          (chosen->caps & FI_HMEM) != 0};
    struct fi_info *list, *pick;
    bool ok = false;

    if (chosen->tx_attr->op_flags & FI_DELIVERY_COMPLETE)
        return true;
    if (query(&o, &list, &pick) == 0) {
        for (struct fi_info *i = list; i != NULL && !ok; i = i->next)
            ok = same_str(i->fabric_attr->name, chosen->fabric_attr->name) &&
                 same_str(i->domain_attr->name, chosen->domain_attr->name);
    }
    fi_freeinfo(list);
    return ok;
}

static void pci_busid(const struct fi_info *i, char *buf, size_t len)
{
    const struct fi_pci_attr *pci;

    buf[0] = '\0';
    if (i->nic == NULL || i->nic->bus_attr == NULL || i->nic->bus_attr->bus_type != FI_BUS_PCI)
        return;
    pci = &i->nic->bus_attr->attr.pci;
    snprintf(buf, len, "%04x:%02x:%02x.%x", pci->domain_id, pci->bus_id, pci->device_id,
             pci->function_id);
}

int ofccl__fab_list(const char *provider, ofccl__prov_dom_t *out, int max, int *n, ofccl__err_t *e)
{
    const char *prov_name = NULL;
    struct fi_info *list, *pick;
    int count = 0, ret;

    ofccl__fab_env_defaults();
    if (provider != NULL) {
        int row = ofccl__quirk_find(provider);
        prov_name = row >= 0 ? ofccl__quirks[row].prov_name : provider;
    }
    {
        struct hint_opts o = {prov_name, NULL, H_FULL, true, false, 0, false};
        ret = query(&o, &list, &pick);
    }
    if (ret == -FI_ENODATA) {
        struct hint_opts o = {prov_name, NULL, H_PROV, true, false, 0, false};
        *n = 0;
        if (prov_name == NULL)
            return 0;
        /* Known to libfabric but unable to do RDM+RMA+atomics: an empty list. */
        ret = query(&o, &list, &pick);
        fi_freeinfo(list);
        return ret == 0 ? 0 : fail_unavailable(NULL, e, provider);
    }
    if (ret != 0)
        return ofccl__fail(NULL, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER, "fi_getinfo failed: %s",
                           fi_strerror(-ret));
    for (struct fi_info *i = list; i != NULL && count < max; i = i->next) {
        ofccl__prov_dom_t d;
        bool dup = false;

        memset(&d, 0, sizeof(d));
        ofccl__strlcpy(d.prov_name, i->fabric_attr->prov_name, sizeof(d.prov_name));
        ofccl__strlcpy(d.fabric, i->fabric_attr->name ? i->fabric_attr->name : "",
                       sizeof(d.fabric));
        ofccl__strlcpy(d.domain, i->domain_attr->name ? i->domain_attr->name : "",
                       sizeof(d.domain));
        pci_busid(i, d.pci_busid, sizeof(d.pci_busid));
        for (int k = 0; k < count && !dup; k++)
            dup = memcmp(&out[k], &d, sizeof(d)) == 0;
        if (!dup)
            out[count++] = d;
    }
    fi_freeinfo(list);
    *n = count;
    return 0;
}
