/*
 * The local provider: ofccl's own transport between processes of one host,
 * with no libfabric underneath.
 *
 * Why it exists: through libfabric's shm provider every large transfer is
 * either a CMA call (process_vm_readv/writev, pinning pages on every call) or
 * two copies through bounce buffers, and each small op costs a command queue
 * round trip through the target's progress. The hardware can do one plain
 * store per byte. Memory peers write into (pool buffers, staging and control
 * windows) therefore comes from memfd shared memory (ofccl__lx_mem_alloc);
 * a peer maps each registration once (open /proc/<pid>/fd/<n>, mmap), and then
 *   - an RMA write is a memcpy into that mapping, done by the initiator;
 *   - an atomic add is a CPU atomic on it;
 *   - remote CQ data is an entry in a single-producer ring the target reads
 *     in progress, published with release order after the data it signals.
 * Registered memory that is not shared (ofccl_mem_register of the user's own
 * memory) is written with process_vm_writev: one kernel copy, as CMA.
 *
 * Kept from the libfabric path, so nothing above this layer can tell: one
 * completion per accepted op, delivered from progress; keys checked at every
 * access (a write to a deregistered key fails, it lands nowhere); names and
 * tables read from peers are validated before use.
 *
 * Layout of an endpoint's shared segment (one memfd, mapped by every peer):
 *   struct lx_seg: magic, nonce, pid, ranks, the registration table
 *   struct lx_ring[ranks]: one CQ-data ring per source rank
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "local.h"
#include "util.h"

#define LX_MAGIC 0x31584c6c6363666full /* "ofcclLX1" little-endian */
#define LX_REGIONS 1024u               /* registrations per endpoint */
#define LX_SLOT_BITS 16                /* low key bits: table slot */
#define LX_RING 256u                   /* CQ-data entries per source (power of two) */
#define LX_PAGE 4096u
#define LX_WATCH_NS 1000000ull /* how often peers' processes are checked */

/* One registration, in the owner's segment; peers only read it. */
struct lx_region {
    _Atomic uint64_t key; /* 0 = free; stored last on registration, first on removal */
    int32_t fd;           /* memfd in the owner; -1 = not shared (process_vm_writev) */
    uint32_t access;      /* enum ofccl__access */
    uint64_t foff;        /* offset of the region in that memfd */
    uint64_t len;
    uint64_t vaddr; /* address in the owner */
};

/* CQ data from one source: the source writes tail, the owner writes head. */
struct lx_ring {
    _Atomic uint64_t tail;
    char pad0[56];
    _Atomic uint64_t head;
    char pad1[56];
    uint64_t ent[LX_RING];
};

struct lx_seg {
    uint64_t magic;
    uint64_t nonce; /* from the name: proves the mapped file is the one named */
    int32_t pid;
    int32_t ranks;
    struct lx_region regions[LX_REGIONS];
    /* struct lx_ring[ranks] follows at seg_rings_off() */
};

/* The endpoint name peers receive through the bootstrap. */
struct lx_name {
    uint64_t magic;
    uint64_t nonce;
    int32_t pid;
    int32_t fd;
    char boot_id[40]; /* this host's boot id: peers elsewhere are refused by name */
};

/* A peer's registration as mapped here; remapped when its key changes. */
struct lx_map {
    uint64_t key;
    char *base;
    size_t len;
};

struct lx_peer {
    int pid;
    int pidfd;          /* readable once the process has exited; -1 = not watched */
    struct lx_seg *seg; /* the peer's segment (our own for ourselves) */
    size_t seg_len;
    struct lx_map *maps; /* [LX_REGIONS] */
    uint64_t head_seen;  /* our ring's head in the peer's segment, as last read */
};

/* A finished op waiting for cq_read: err = 0, or an FI_E* code. */
struct lx_comp {
    struct ofccl__op *op;
    int err;
    int perrno; /* errno of the failing call, 0 if none */
    int what;   /* enum lx_what: which step failed, for the message */
};

enum lx_what { W_KEY, W_ACCESS, W_BOUNDS, W_MAP, W_CMA, W_ATOMIC_CMA, W_NOT_SHARED, W_KIND };

struct ofccl__lx {
    int fd;
    struct lx_seg *seg;
    size_t seg_len;
    uint64_t nonce;
    struct lx_peer *peers; /* [ranks], after insert_peers */
    struct lx_comp *cq;    /* [ops_inflight]: one entry per op at most */
    unsigned cq_head, cq_tail;
    unsigned next_slot; /* where the search for a free registration starts */
    int next_src;       /* first ring read by the next cq_read (fairness) */
    int gone;           /* a rank whose process has exited, reported; -1 = none */
    int dying;          /* seen exited at the last check, reported at the next */
    uint64_t next_watch_ns;
};

/* ---- shared allocations: every window peers may write into ---- */

struct lx_alloc {
    char *addr;
    size_t len;
    int fd;
    struct lx_alloc *next;
};

static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lx_alloc *allocs;

static size_t page_round(size_t v)
{
    return (v + LX_PAGE - 1) / LX_PAGE * LX_PAGE;
}

void *ofccl__lx_mem_alloc(size_t len)
{
    struct lx_alloc *a = calloc(1, sizeof(*a));
    size_t n = page_round(len ? len : 1);
    int saved;

    if (a == NULL)
        return NULL;
    a->fd = memfd_create("ofccl-window", MFD_CLOEXEC);
    if (a->fd < 0)
        goto err_free;
    if (ftruncate(a->fd, (off_t)n) != 0)
        goto err_close;
    a->addr = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (a->addr == MAP_FAILED)
        goto err_close;
    a->len = n;
    pthread_mutex_lock(&allocs_lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&allocs_lock);
    return a->addr;

err_close:
    saved = errno;
    close(a->fd);
    errno = saved;
err_free:
    saved = errno;
    free(a);
    errno = saved; /* for ofccl__prov_mem_error */
    return NULL;
}

bool ofccl__lx_mem_free(void *ptr)
{
    struct lx_alloc **pp, *a = NULL;

    pthread_mutex_lock(&allocs_lock);
    for (pp = &allocs; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->addr == ptr) {
            a = *pp;
            *pp = a->next;
            break;
        }
    pthread_mutex_unlock(&allocs_lock);
    if (a == NULL)
        return false;
    munmap(a->addr, a->len);
    close(a->fd);
    free(a);
    return true;
}

/* The shared allocation holding [addr, addr+len): its fd and offset. */
static bool alloc_find(const void *addr, size_t len, int *fd, uint64_t *foff)
{
    uintptr_t p = (uintptr_t)addr;
    bool found = false;

    pthread_mutex_lock(&allocs_lock);
    for (struct lx_alloc *a = allocs; a != NULL && !found; a = a->next) {
        uintptr_t b = (uintptr_t)a->addr;
        if (p >= b && len <= a->len && p - b <= a->len - len) {
            *fd = a->fd;
            *foff = p - b;
            found = true;
        }
    }
    pthread_mutex_unlock(&allocs_lock);
    return found;
}

/* ---- provider and endpoint ---- */

int ofccl__lx_prov_open(ofccl__prov_t *prov, const ofccl__prov_params_t *params, ofccl__err_t *e)
{
    ofccl__prov_caps_t *c = &prov->caps;

    if (params->strict)
        return ofccl__fail(params->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "strict mode makes a libfabric provider (tcp or shm) behave as verbs; "
                           "the local provider has no libfabric underneath: unset OFCCL_STRICT "
                           "or choose OFCCL_PROVIDER=shm or tcp");
    memset(c, 0, sizeof(*c));
    ofccl__strlcpy(c->name, OFCCL__LOCAL_NAME, sizeof(c->name));
    ofccl__strlcpy(c->fabric, OFCCL__LOCAL_NAME, sizeof(c->fabric));
    ofccl__strlcpy(c->domain, OFCCL__LOCAL_NAME, sizeof(c->domain));
    c->quirk_row = ofccl__quirk_find(OFCCL__LOCAL_NAME);
    c->key_size = 8;
    c->cq_data_size = 8;
    c->atomic_u64_sum = true;
    c->atomic_native = true;
    /* A write is placed when the post returns: completion is delivery. */
    c->delivery_complete = true;
    c->order_waw = c->order_raw = c->order_war = true;
    c->max_order_waw_size = c->max_order_raw_size = c->max_order_war_size = SIZE_MAX;
    c->inject_size = SIZE_MAX;
    c->max_msg_size = (size_t)1 << 40;
    c->peer_map = true;
    c->quirks = c->quirk_row >= 0 ? ofccl__quirks[c->quirk_row].flags : 0;
    prov->local = true;
    return 0;
}

static size_t seg_rings_off(void)
{
    return (sizeof(struct lx_seg) + 63) / 64 * 64;
}

static struct lx_ring *seg_ring(struct lx_seg *seg, int src)
{
    return (struct lx_ring *)((char *)seg + seg_rings_off()) + src;
}

static size_t seg_size(int ranks)
{
    return page_round(seg_rings_off() + (size_t)ranks * sizeof(struct lx_ring));
}

int ofccl__lx_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep->prov->log;
    int rank = ep->params.rank;
    struct ofccl__lx *lx = calloc(1, sizeof(*lx));

    if (lx == NULL)
        return ofccl__limit_fail(log, e, ENOMEM, sizeof(*lx), OFCCL_ERR_NO_MEMORY,
                                 "rank %d: allocating the local endpoint", rank);
    ep->lx = lx;
    lx->fd = -1;
    lx->gone = -1;
    lx->dying = -1;
    lx->cq = calloc(ep->params.ops_inflight, sizeof(*lx->cq));
    if (lx->cq == NULL)
        return ofccl__limit_fail(log, e, ENOMEM, ep->params.ops_inflight * sizeof(*lx->cq),
                                 OFCCL_ERR_NO_MEMORY, "rank %d: allocating the local CQ", rank);
    lx->seg_len = seg_size(ep->params.size);
    lx->fd = memfd_create("ofccl-endpoint", MFD_CLOEXEC);
    if (lx->fd < 0 || ftruncate(lx->fd, (off_t)lx->seg_len) != 0)
        return ofccl__limit_fail(log, e, errno, lx->seg_len, OFCCL_ERR_NO_MEMORY,
                                 "rank %d: local provider: creating a %zu-byte shared segment",
                                 rank, lx->seg_len);
    lx->seg = mmap(NULL, lx->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, lx->fd, 0);
    if (lx->seg == MAP_FAILED) {
        lx->seg = NULL;
        return ofccl__limit_fail(log, e, errno, lx->seg_len, OFCCL_ERR_NO_MEMORY,
                                 "rank %d: local provider: mapping its shared segment", rank);
    }
    if (ofccl__random_bytes(&lx->nonce, sizeof(lx->nonce)) != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                           "getrandom failed while naming the endpoint");
    lx->seg->nonce = lx->nonce;
    lx->seg->pid = (int32_t)getpid();
    lx->seg->ranks = ep->params.size;
    lx->seg->magic = LX_MAGIC;
    return 0;
}

static void unmap_peer(struct ofccl__lx *lx, int r)
{
    struct lx_peer *p = &lx->peers[r];

    if (p->maps != NULL)
        for (unsigned s = 0; s < LX_REGIONS; s++)
            if (p->maps[s].base != NULL)
                munmap(p->maps[s].base, p->maps[s].len);
    free(p->maps);
    if (p->pidfd >= 0)
        close(p->pidfd);
    if (p->seg != NULL && p->seg != lx->seg)
        munmap(p->seg, p->seg_len);
}

void ofccl__lx_ep_destroy(ofccl__ep_t *ep)
{
    struct ofccl__lx *lx = ep->lx;

    if (lx == NULL)
        return;
    if (lx->peers != NULL)
        for (int r = 0; r < ep->params.size; r++)
            unmap_peer(lx, r);
    free(lx->peers);
    if (lx->seg != NULL)
        munmap(lx->seg, lx->seg_len);
    if (lx->fd >= 0)
        close(lx->fd);
    free(lx->cq);
    free(lx);
    ep->lx = NULL;
}

/* The kernel's boot id: equal for exactly the processes of one host boot. */
static void boot_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    memset(buf, 0, len);
    if (f == NULL)
        return;
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

int ofccl__lx_ep_name(ofccl__ep_t *ep, void *buf, size_t *len, ofccl__err_t *e)
{
    struct lx_name name;

    if (*len < sizeof(name))
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: endpoint name needs %zu bytes, buffer has %zu",
                           ep->params.rank, sizeof(name), *len);
    memset(&name, 0, sizeof(name));
    name.magic = LX_MAGIC;
    name.nonce = ep->lx->nonce;
    name.pid = (int32_t)getpid();
    name.fd = ep->lx->fd;
    boot_id(name.boot_id, sizeof(name.boot_id));
    memcpy(buf, &name, sizeof(name));
    *len = sizeof(name);
    return 0;
}

/* Map another process's memfd through /proc (same user, same PID namespace). */
static void *map_remote_fd(int pid, int fd, size_t *len)
{
    char path[64];
    struct stat st;
    void *p;
    int lfd, saved;

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
    lfd = open(path, O_RDWR | O_CLOEXEC);
    if (lfd < 0)
        return NULL;
    if (fstat(lfd, &st) != 0 || st.st_size <= 0) {
        saved = errno ? errno : EINVAL;
        close(lfd);
        errno = saved;
        return NULL;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, lfd, 0);
    saved = errno;
    close(lfd);
    if (p == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    *len = (size_t)st.st_size;
    return p;
}

static int attach_peer(ofccl__ep_t *ep, int r, const struct lx_name *nm, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep->prov->log;
    char why[256];
    struct ofccl__lx *lx = ep->lx;
    struct lx_peer *p = &lx->peers[r];
    int rank = ep->params.rank;
    char mine[40];

    boot_id(mine, sizeof(mine));
    if (nm->magic != LX_MAGIC)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: the endpoint name of peer %d is not a local-provider name "
                           "(magic 0x%016" PRIx64 ")",
                           rank, r, nm->magic);
    if (memchr(nm->boot_id, '\0', sizeof(nm->boot_id)) == NULL || strcmp(nm->boot_id, mine) != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: peer %d runs on another host (boot id differs); the local "
                           "provider reaches only processes on this host: use "
                           "OFCCL_PROVIDER=tcp or verbs",
                           rank, r);
    p->pid = nm->pid;
    p->pidfd = -1;
    p->maps = calloc(LX_REGIONS, sizeof(*p->maps));
    if (p->maps == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    if (r == rank) {
        p->seg = lx->seg;
        p->seg_len = lx->seg_len;
        return nm->nonce == lx->nonce
                   ? 0
                   : ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                                 "rank %d: its own endpoint name came back altered", rank);
    }
    p->seg = map_remote_fd(nm->pid, nm->fd, &p->seg_len);
    if (p->seg == NULL && ofccl__limit_explain(errno, 0, why, sizeof(why)) != 0)
        return ofccl__limit_fail(log, e, errno, seg_size(ep->params.size), OFCCL_ERR_NO_MEMORY,
                                 "rank %d: mapping the shared segment of peer %d (/proc/%d/fd/%d)",
                                 rank, r, nm->pid, nm->fd);
    if (p->seg == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: cannot map the shared segment of peer %d "
                           "(/proc/%d/fd/%d): %s; the local provider needs every rank in one "
                           "PID namespace under one user: use OFCCL_PROVIDER=shm or tcp",
                           rank, r, nm->pid, nm->fd, strerror(errno));
    if (p->seg_len < seg_size(ep->params.size) || p->seg->magic != LX_MAGIC ||
        p->seg->nonce != nm->nonce || p->seg->ranks != ep->params.size)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: /proc/%d/fd/%d is not peer %d's endpoint (size %zu, ranks "
                           "%d, nonce %s)",
                           rank, nm->pid, nm->fd, r, p->seg_len, (int)p->seg->ranks,
                           p->seg->nonce == nm->nonce ? "equal" : "differs");
    /* The segment proved the pid is the peer's: watch that process. */
    p->pidfd = (int)syscall(SYS_pidfd_open, nm->pid, 0);
    if (p->pidfd < 0)
        OFCCL__INFO(log, OFCCL__SUB_PROV,
                    "rank %d: pidfd_open(%d) for peer %d failed (%s): its exit will be noticed "
                    "at the deadline only",
                    rank, nm->pid, r, strerror(errno));
    return 0;
}

int ofccl__lx_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e)
{
    struct ofccl__lx *lx = ep->lx;
    int rc;

    /* A failed earlier attempt left some peers attached: start over. */
    if (lx->peers != NULL) {
        for (int r = 0; r < ep->params.size; r++)
            unmap_peer(lx, r);
        free(lx->peers);
    }
    lx->peers = calloc((size_t)n, sizeof(*lx->peers));
    if (lx->peers == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    for (int r = 0; r < n; r++)
        lx->peers[r].pidfd = -1; /* not 0: closing a refused peer must not close stdin */
    for (int r = 0; r < n; r++) {
        struct lx_name nm;

        /* Names come from peers through the bootstrap: never trust their length. */
        if (lens[r] != sizeof(nm) || stride < sizeof(nm))
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                               "rank %d: name of peer %d has length %zu (a local-provider name "
                               "has %zu)",
                               ep->params.rank, r, lens[r], sizeof(nm));
        memcpy(&nm, (const char *)names + (size_t)r * stride, sizeof(nm));
        rc = attach_peer(ep, r, &nm, e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- registration ---- */

int ofccl__lx_mr_reg(ofccl__ep_t *ep, void *addr, size_t len, unsigned access, void **handle,
                     uint64_t *key, bool *shared, ofccl__err_t *e)
{
    struct ofccl__lx *lx = ep->lx;
    struct lx_region *reg = NULL;
    uint64_t k = 0, foff = 0;
    unsigned slot = 0;
    int fd = -1;

    for (unsigned i = 0; i < LX_REGIONS && reg == NULL; i++) {
        slot = (lx->next_slot + i) % LX_REGIONS;
        if (atomic_load_explicit(&lx->seg->regions[slot].key, memory_order_relaxed) == 0)
            reg = &lx->seg->regions[slot];
    }
    if (reg == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: local provider: all %u registrations of this endpoint are "
                           "in use",
                           ep->params.rank, LX_REGIONS);
    lx->next_slot = (slot + 1) % LX_REGIONS;
    /* Unpredictable high bits, the slot in the low ones; never 0 (= free). */
    while ((k >> LX_SLOT_BITS) == 0)
        if (ofccl__random_bytes(&k, sizeof(k)) != 0)
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                               "getrandom failed while choosing a memory key");
    k = (k & ~(((uint64_t)1 << LX_SLOT_BITS) - 1)) | slot;
    if (!alloc_find(addr, len, &fd, &foff)) {
        fd = -1;
        foff = 0;
        if (access & (OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC))
            OFCCL__INFO(ep->prov->log, OFCCL__SUB_MEM,
                        "rank %d: %zu bytes at %p are not ofccl shared memory: peers write "
                        "them with process_vm_writev",
                        ep->params.rank, len, addr);
    }
    reg->fd = fd;
    reg->access = access;
    reg->foff = foff;
    reg->len = len;
    reg->vaddr = (uint64_t)(uintptr_t)addr;
    atomic_store_explicit(&reg->key, k, memory_order_release);
    *handle = reg;
    *key = k;
    *shared = fd >= 0;
    return 0;
}

void ofccl__lx_mr_dereg(ofccl__ep_t *ep, void *handle)
{
    struct lx_region *reg = handle;

    (void)ep;
    /* Peers check the key before every access: from here on they fail. */
    atomic_store_explicit(&reg->key, 0, memory_order_release);
}

/* ---- the data path ---- */

static void complete(struct ofccl__lx *lx, unsigned cap, struct ofccl__op *op, int err, int what,
                     int perrno)
{
    struct lx_comp *c = &lx->cq[lx->cq_tail % cap];

    c->op = op;
    c->err = err;
    c->what = what;
    c->perrno = perrno;
    lx->cq_tail++;
}

static int fail_at(int *what, int w, int err)
{
    *what = w;
    return err;
}

/* Where in this process the bytes [raddr, raddr+len) of the peer's region
 * `key` are: a pointer, or NULL with *cma set when only process_vm_writev
 * reaches them. Returns 0 or an FI_E* code (with *what, *perrno). */
static int resolve(ofccl__ep_t *ep, const struct ofccl__op *op, unsigned need, char **dst,
                   uint64_t *cma, int *what, int *perrno)
{
    struct lx_peer *p = &ep->lx->peers[op->peer];
    unsigned slot = (unsigned)(op->key & ((1u << LX_SLOT_BITS) - 1));
    struct lx_region *reg;
    struct lx_map *m;
    uint64_t foff, rlen;

    *dst = NULL;
    *cma = 0;
    if (slot >= LX_REGIONS)
        return fail_at(what, W_KEY, FI_EKEYREJECTED);
    reg = &p->seg->regions[slot];
    if (atomic_load_explicit(&reg->key, memory_order_acquire) != op->key)
        return fail_at(what, W_KEY, FI_EKEYREJECTED);
    if ((reg->access & need) == 0)
        return fail_at(what, W_ACCESS, FI_EACCES);
    rlen = reg->len;
    if (op->raddr > rlen || op->len > rlen - op->raddr)
        return fail_at(what, W_BOUNDS, FI_EREMOTEIO);
    if (op->peer == ep->params.rank) {
        *dst = (char *)(uintptr_t)reg->vaddr + op->raddr;
        return 0;
    }
    if (reg->fd < 0) {
        *cma = reg->vaddr + op->raddr;
        return 0;
    }
    foff = reg->foff;
    m = &p->maps[slot];
    if (m->key != op->key) {
        if (m->base != NULL)
            munmap(m->base, m->len);
        *m = (struct lx_map){0};
        m->base = map_remote_fd(p->pid, reg->fd, &m->len);
        if (m->base == NULL) {
            /* Out of descriptors or address space is this process's own
             * limit: the error carries that errno, so it is not taken for
             * the target's failure. */
            *perrno = errno;
            return fail_at(what, W_MAP,
                           errno == EMFILE || errno == ENFILE || errno == ENOMEM ? errno
                                                                                 : FI_EREMOTEIO);
        }
        /* Still the same registration after the open: the fd was the right one. */
        if (atomic_load_explicit(&reg->key, memory_order_acquire) != op->key || foff > m->len ||
            rlen > m->len - foff) {
            munmap(m->base, m->len);
            *m = (struct lx_map){0};
            return fail_at(what, W_KEY, FI_EKEYREJECTED);
        }
        m->key = op->key;
    }
    *dst = m->base + foff + op->raddr;
    return 0;
}

static int cma_write(int pid, const void *src, size_t len, uint64_t raddr)
{
    size_t done = 0;

    /* Bounded: each call moves at least one byte or fails. */
    while (done < len) {
        struct iovec l = {.iov_base = (char *)src + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = process_vm_writev(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return n == 0 ? EIO : errno;
        done += (size_t)n;
    }
    return 0;
}

static int cma_read(int pid, void *dst, size_t len, uint64_t raddr)
{
    size_t done = 0;

    while (done < len) {
        struct iovec l = {.iov_base = (char *)dst + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return n == 0 ? EIO : errno;
        done += (size_t)n;
    }
    return 0;
}

ssize_t ofccl__lx_post(ofccl__ep_t *ep, struct ofccl__op *op)
{
    struct ofccl__lx *lx = ep->lx;
    unsigned cap = ep->params.ops_inflight;
    bool atomic = op->kind == OFCCL__OP_ATOMIC_DC || op->kind == OFCCL__OP_ATOMIC_FETCH;
    struct lx_ring *ring = NULL;
    uint64_t tail = 0, cma;
    int what = W_KIND, perrno = 0, err;
    char *dst;

    switch (op->kind) {
    case OFCCL__OP_WRITEDATA: {
        struct lx_peer *p = &lx->peers[op->peer];
        ring = seg_ring(p->seg, ep->params.rank);
        tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        /* The head the target moves is read only when the ring looks full:
         * reading it on every post would pull its cache line over each time. */
        if (tail - p->head_seen >= LX_RING) {
            p->head_seen = atomic_load_explicit(&ring->head, memory_order_acquire);
            if (tail - p->head_seen >= LX_RING)
                return -FI_EAGAIN; /* the target has not drained its ring yet */
        }
        break;
    }
    case OFCCL__OP_WRITE:
    case OFCCL__OP_WRITE_DC:
    case OFCCL__OP_WRITE_STAGE:
    case OFCCL__OP_ATOMIC_DC:
    case OFCCL__OP_ATOMIC_FETCH:
        break;
    case OFCCL__OP_READ:
        err = resolve(ep, op, OFCCL__ACC_REMOTE_READ, &dst, &cma, &what, &perrno);
        if (err == 0 && dst != NULL && op->len > 0)
            memcpy((void *)op->src, dst, op->len);
        else if (err == 0 && dst == NULL &&
                 (perrno = cma_read(lx->peers[op->peer].pid, (void *)op->src, op->len, cma)) != 0)
            err = fail_at(&what, W_CMA, perrno == EPERM ? FI_EACCES : FI_EREMOTEIO);
        complete(lx, cap, op, err, what, perrno);
        return 0;
    default:
        complete(lx, cap, op, FI_ENOSYS, W_KIND, 0);
        return 0;
    }
    err = resolve(ep, op,
                  atomic ? (unsigned)OFCCL__ACC_REMOTE_ATOMIC
                         : (unsigned)(OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_ATOMIC),
                  &dst, &cma, &what, &perrno);
    if (err == 0 && atomic) {
        if (dst == NULL)
            err = fail_at(&what, W_ATOMIC_CMA, FI_EOPNOTSUPP);
        else
            op->result = __atomic_fetch_add((uint64_t *)(void *)dst, op->operand, __ATOMIC_SEQ_CST);
    } else if (err == 0 && dst != NULL) {
        if (op->len > 0)
            memcpy(dst, op->src, op->len);
    } else if (err == 0) {
        perrno = cma_write(lx->peers[op->peer].pid, op->src, op->len, cma);
        if (perrno != 0)
            err = fail_at(&what, W_CMA,
                          perrno == EPERM   ? FI_EACCES
                          : perrno == ESRCH ? FI_ECONNRESET
                                            : FI_EREMOTEIO);
    }
    if (err == 0 && ring != NULL) {
        /* The data (even non-temporal stores of a large memcpy) before the entry. */
        atomic_thread_fence(memory_order_seq_cst);
        ring->ent[tail % LX_RING] = op->data;
        atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    }
    complete(lx, cap, op, err, what, perrno);
    return 0;
}

ssize_t ofccl__lx_cq_read(ofccl__ep_t *ep, struct fi_cq_data_entry *ents, size_t n)
{
    struct ofccl__lx *lx = ep->lx;
    unsigned cap = ep->params.ops_inflight;
    int size = ep->params.size;
    size_t count = 0;

    while (count < n && lx->cq_head != lx->cq_tail) {
        struct lx_comp *c = &lx->cq[lx->cq_head % cap];
        if (c->err != 0) {
            if (count == 0)
                return -FI_EAVAIL;
            return (ssize_t)count;
        }
        memset(&ents[count], 0, sizeof(ents[count]));
        ents[count].op_context = c->op;
        ents[count].flags = FI_RMA | FI_WRITE;
        count++;
        lx->cq_head++;
    }
    for (int i = 0; i < size && count < n; i++) {
        int src = (lx->next_src + i) % size;
        struct lx_ring *ring = seg_ring(lx->seg, src);
        uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

        /* A tail further ahead than the ring holds is a broken peer: take what
         * the ring can hold; the engine validates every entry it is given. */
        if (tail - head > LX_RING)
            tail = head + LX_RING;
        if (head == tail)
            continue; /* no store: the line stays shared with the writer */
        for (; head != tail && count < n; head++, count++) {
            memset(&ents[count], 0, sizeof(ents[count]));
            ents[count].flags = FI_REMOTE_CQ_DATA | FI_REMOTE_WRITE;
            ents[count].data = ring->ent[head % LX_RING];
        }
        atomic_store_explicit(&ring->head, head, memory_order_release);
    }
    lx->next_src = size > 0 ? (lx->next_src + 1) % size : 0;
    return count > 0 ? (ssize_t)count : -FI_EAGAIN;
}

bool ofccl__lx_rings_empty(const ofccl__ep_t *ep)
{
    for (int src = 0; src < ep->params.size; src++) {
        struct lx_ring *ring = seg_ring(ep->lx->seg, src);
        if (atomic_load_explicit(&ring->tail, memory_order_acquire) !=
            atomic_load_explicit(&ring->head, memory_order_relaxed))
            return false;
    }
    return true;
}

ssize_t ofccl__lx_cq_readerr(ofccl__ep_t *ep, struct fi_cq_err_entry *err)
{
    struct ofccl__lx *lx = ep->lx;
    struct lx_comp *c;

    if (lx->cq_head == lx->cq_tail || lx->cq[lx->cq_head % ep->params.ops_inflight].err == 0)
        return -FI_EAGAIN;
    c = &lx->cq[lx->cq_head % ep->params.ops_inflight];
    memset(err, 0, sizeof(*err));
    err->op_context = c->op;
    err->err = c->err;
    err->prov_errno = c->what;
    err->olen = (size_t)c->perrno; /* carried to lx_strerror; not a length here */
    lx->cq_head++;
    return 1;
}

const char *ofccl__lx_strerror(const struct fi_cq_err_entry *err, char *buf, size_t len)
{
    int perrno = (int)err->olen;

    switch (err->prov_errno) {
    case W_KEY:
        snprintf(buf, len,
                 "the key is not registered at the target (deregistered, or never "
                 "valid)");
        break;
    case W_ACCESS:
        snprintf(buf, len, "the target's region does not grant this access");
        break;
    case W_BOUNDS:
        snprintf(buf, len, "the bytes lie outside the target's region");
        break;
    case W_MAP:
        snprintf(buf, len, "mapping the target's shared memory through /proc failed: %s",
                 strerror(perrno));
        break;
    case W_CMA:
        snprintf(buf, len, "process_vm_writev into the target failed: %s%s", strerror(perrno),
                 perrno == EPERM ? " (ptrace access between the ranks is restricted, e.g. by "
                                   "kernel.yama.ptrace_scope; use ofccl_buffer_alloc buffers)"
                                 : "");
        break;
    case W_ATOMIC_CMA:
        snprintf(buf, len, "atomics need a region in ofccl shared memory at the target");
        break;
    case W_NOT_SHARED:
        snprintf(buf, len, "the target's region is not in ofccl shared memory");
        break;
    default:
        snprintf(buf, len, "operation not supported by the local provider");
        break;
    }
    return buf;
}

int ofccl__lx_peer_gone(ofccl__ep_t *ep)
{
    struct ofccl__lx *lx = ep->lx;
    struct pollfd fds[64];
    int ranks[64], n = 0;
    uint64_t now;

    if (lx->gone >= 0 || lx->peers == NULL)
        return lx->gone;
    now = ofccl__coarse_ns();
    if (now < lx->next_watch_ns)
        return -1;
    lx->next_watch_ns = now + LX_WATCH_NS;
    /* Reported one check late: whatever the peer wrote before it exited has
     * been drained by the progress passes in between, so a collective it
     * finished feeding still completes. */
    if (lx->dying >= 0) {
        lx->gone = lx->dying;
        return lx->gone;
    }
    /* One poll(2) per 64 peers; a pidfd turns readable when its process exits. */
    for (int r = 0; r < ep->params.size && lx->dying < 0; r++) {
        if (lx->peers[r].pidfd >= 0) {
            fds[n] = (struct pollfd){.fd = lx->peers[r].pidfd, .events = POLLIN};
            ranks[n++] = r;
        }
        if (n == 64 || (r == ep->params.size - 1 && n > 0)) {
            if (poll(fds, (nfds_t)n, 0) > 0)
                for (int i = 0; i < n && lx->dying < 0; i++)
                    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
                        lx->dying = ranks[i];
            n = 0;
        }
    }
    return -1;
}

int ofccl__lx_peer_map(ofccl__ep_t *ep, int peer, const ofccl__rkey_t *rk, uint64_t roff,
                       size_t len, unsigned access, void **ptr, ofccl__err_t *e)
{
    struct ofccl__op op = {.peer = peer, .key = rk->key, .raddr = rk->base + roff, .len = len};
    struct fi_cq_err_entry err = {0};
    int what = W_KIND, perrno = 0, rc;
    uint64_t cma;
    char *dst, why[256];

    *ptr = NULL;
    if (roff > rk->len || len > rk->len - roff)
        rc = fail_at(&what, W_BOUNDS, FI_EREMOTEIO);
    else
        rc = resolve(ep, &op, access, &dst, &cma, &what, &perrno);
    if (rc == 0 && dst == NULL) /* not in shared memory: only process_vm_writev reaches it */
        rc = fail_at(&what, W_NOT_SHARED, FI_EOPNOTSUPP);
    if (rc != 0) {
        err.prov_errno = what;
        err.olen = (size_t)perrno;
        if (ofccl__limit_explain(rc, len, why, sizeof(why)) != 0)
            return ofccl__limit_fail(ep->prov->log, e, rc, len, OFCCL_ERR_NO_MEMORY,
                                     "rank %d: mapping %zu bytes of peer %d's region",
                                     ep->params.rank, len, peer);
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_REMOTE_ERROR,
                           "rank %d: mapping %zu bytes of peer %d's region: %s", ep->params.rank,
                           len, peer, ofccl__lx_strerror(&err, why, sizeof(why)));
    }
    *ptr = dst;
    return 0;
}

int ofccl__lx_peer_pid(const ofccl__ep_t *ep, int peer)
{
    return ep->lx->peers != NULL ? ep->lx->peers[peer].pid : -1;
}
