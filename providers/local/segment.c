/*
 * Local transport: an endpoint's shared segment (registration table and
 * CQ-data rings), its name, attaching to the peers' segments, and watching
 * the peers' processes.
 *
 * A name carries pid, segment fd, a random nonce and the kernel's boot id:
 * a peer on another host is refused by name, and a mapped segment whose
 * nonce differs from the name's is refused as CORRUPT (a different process,
 * or another PID namespace).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local.h"
#include "util.h"

/* The endpoint name peers receive through the bootstrap. */
struct lx_name {
    uint64_t magic;
    uint64_t nonce;
    int32_t pid;
    int32_t fd;
    char boot_id[40]; /* this host's boot id: peers elsewhere are refused by name */
};

static size_t seg_size(int ranks)
{
    return ofccl__lx_page_round(ofccl__lx_rings_off() + (size_t)ranks * sizeof(struct lx_ring));
}

int ofccl__lx_ep_setup(ofccl__ep_t *ep, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep->prov->log;
    int rank = ep->params.rank;
    struct ofccl__lx *lx = calloc(1, sizeof(*lx));

    if (lx == NULL)
        return ofccl__limit_fail(log, e, ENOMEM, NULL, sizeof(*lx), OFCCL_ERR_NO_MEMORY,
                                 "rank %d: allocating the local endpoint", rank);
    ep->be_state = lx;
    lx->fd = -1;
    lx->dev = -1;
    lx->cq = calloc(ep->params.ops_inflight, sizeof(*lx->cq));
    if (lx->cq == NULL)
        return ofccl__limit_fail(log, e, ENOMEM, NULL, ep->params.ops_inflight * sizeof(*lx->cq),
                                 OFCCL_ERR_NO_MEMORY, "rank %d: allocating the local CQ", rank);
    lx->seg_len = seg_size(ep->params.size);
    lx->fd = memfd_create("ofccl-endpoint", MFD_CLOEXEC);
    if (lx->fd < 0 || ftruncate(lx->fd, (off_t)lx->seg_len) != 0)
        return ofccl__limit_fail(log, e, errno, NULL, lx->seg_len, OFCCL_ERR_NO_MEMORY,
                                 "rank %d: local provider: creating a %zu-byte shared segment",
                                 rank, lx->seg_len);
    lx->seg = mmap(NULL, lx->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, lx->fd, 0);
    if (lx->seg == MAP_FAILED) {
        lx->seg = NULL;
        return ofccl__limit_fail(log, e, errno, NULL, lx->seg_len, OFCCL_ERR_NO_MEMORY,
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

    for (unsigned s = 0; s < p->nmaps; s++)
        ofccl__lx_unmap(&p->maps[s]);
    free(p->maps);
    p->maps = NULL;
    p->nmaps = 0;
    if (p->seg != NULL && p->seg != lx->seg)
        munmap(p->seg, p->seg_len);
    if (p->ring_map != NULL)
        munmap(p->ring_map, p->ring_map_len);
    p->seg = NULL;
    p->ring_map = NULL;
}

/* Every op completes at its post: nothing is in flight to cancel. Mappings
 * stay until close, which frees them after the caller's memory is gone. */
int ofccl__lx_ep_stop(ofccl__ep_t *ep, bool failed)
{
    (void)ep;
    (void)failed;
    return 0;
}

int ofccl__lx_ep_close(ofccl__ep_t *ep)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);

    if (lx == NULL)
        return 0;
    if (lx->peers != NULL)
        for (int r = 0; r < ep->params.size; r++)
            unmap_peer(lx, r);
    free(lx->peers);
    free(lx->drefs);
    ofccl__watch_close(&lx->watch);
    if (lx->seg != NULL)
        munmap(lx->seg, lx->seg_len);
    if (lx->fd >= 0)
        close(lx->fd);
    free(lx->cq);
    free(lx);
    ep->be_state = NULL;
    return 0;
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
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    struct lx_name name;

    if (*len < sizeof(name))
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: endpoint name needs %zu bytes, buffer has %zu",
                           ep->params.rank, sizeof(name), *len);
    memset(&name, 0, sizeof(name));
    name.magic = LX_MAGIC;
    name.nonce = lx->nonce;
    name.pid = (int32_t)getpid();
    name.fd = lx->fd;
    boot_id(name.boot_id, sizeof(name.boot_id));
    memcpy(buf, &name, sizeof(name));
    *len = sizeof(name);
    return 0;
}

/* Open another process's descriptor through /proc; *size gets its file's size. */
static int open_remote(int pid, int fd, size_t *size)
{
    char path[64];
    struct stat st;
    int lfd, saved;

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
    lfd = open(path, O_RDWR | O_CLOEXEC);
    if (lfd < 0)
        return -1;
    if (fstat(lfd, &st) != 0 || st.st_size <= 0) {
        saved = errno ? errno : EINVAL;
        close(lfd);
        errno = saved;
        return -1;
    }
    *size = (size_t)st.st_size;
    return lfd;
}

static void *map_shared(int lfd, size_t off, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, lfd, (off_t)off);

    return p == MAP_FAILED ? NULL : p;
}

void *ofccl__lx_map_remote_fd(int pid, int fd, size_t *len)
{
    size_t size;
    void *p;
    int lfd = open_remote(pid, fd, &size), saved;

    if (lfd < 0)
        return NULL;
    p = map_shared(lfd, 0, size);
    saved = errno;
    close(lfd);
    errno = saved;
    if (p != NULL)
        *len = size;
    return p;
}

/* Map a peer's segment header and the ring this rank writes in it, once the
 * file has proved large enough for both. NULL with errno on failure;
 * *size = the file's size (0 if it could not be opened). */
static struct lx_seg *map_peer_segment(struct lx_peer *p, const struct lx_name *nm, int rank,
                                       size_t *size)
{
    size_t ring_off = ofccl__lx_rings_off() + (size_t)rank * sizeof(struct lx_ring);
    size_t map_off = ring_off / LX_PAGE * LX_PAGE;
    int lfd, saved = 0;

    *size = 0;
    lfd = open_remote(nm->pid, nm->fd, size);
    if (lfd < 0)
        return NULL;
    if (*size >= ring_off + sizeof(struct lx_ring)) {
        p->seg_len = ofccl__lx_page_round(sizeof(struct lx_seg));
        p->seg = map_shared(lfd, 0, p->seg_len);
        p->ring_map_len = ofccl__lx_page_round(ring_off + sizeof(struct lx_ring) - map_off);
        p->ring_map = p->seg != NULL ? map_shared(lfd, map_off, p->ring_map_len) : NULL;
        saved = errno;
        if (p->ring_map != NULL)
            p->ring = (struct lx_ring *)((char *)p->ring_map + (ring_off - map_off));
    }
    close(lfd);
    errno = saved;
    return p->ring_map != NULL ? p->seg : NULL;
}

static int attach_peer(ofccl__ep_t *ep, int r, const struct lx_name *nm, ofccl__err_t *e)
{
    const ofccl__log_t *log = ep->prov->log;
    char why[256];
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    struct lx_peer *p = &lx->peers[r];
    int rank = ep->params.rank;
    size_t fsize;
    char mine[40];
    int rc;

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
    if (r == rank) {
        p->seg = lx->seg;
        p->seg_len = lx->seg_len;
        p->ring = ofccl__lx_ring(lx->seg, rank);
        return nm->nonce == lx->nonce
                   ? 0
                   : ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                                 "rank %d: its own endpoint name came back altered", rank);
    }
    if (map_peer_segment(p, nm, rank, &fsize) == NULL && fsize > 0 &&
        fsize < seg_size(ep->params.size))
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: /proc/%d/fd/%d is not peer %d's endpoint (%zu bytes, "
                           "at least %zu expected)",
                           rank, nm->pid, nm->fd, r, fsize, seg_size(ep->params.size));
    if (p->seg == NULL && ofccl__limit_explain(errno, 0, why, sizeof(why)) != 0)
        return ofccl__limit_fail(log, e, errno, NULL, seg_size(ep->params.size),
                                 OFCCL_ERR_NO_MEMORY,
                                 "rank %d: mapping the shared segment of peer %d (/proc/%d/fd/%d)",
                                 rank, r, nm->pid, nm->fd);
    if (p->seg == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: cannot map the shared segment of peer %d "
                           "(/proc/%d/fd/%d): %s; the local provider needs every rank in one "
                           "PID namespace under one user: use OFCCL_PROVIDER=shm or tcp",
                           rank, r, nm->pid, nm->fd, strerror(errno));
    if (fsize < seg_size(ep->params.size) || p->seg->magic != LX_MAGIC ||
        p->seg->nonce != nm->nonce || p->seg->ranks != ep->params.size)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: /proc/%d/fd/%d is not peer %d's endpoint (size %zu, ranks "
                           "%d, nonce %s)",
                           rank, nm->pid, nm->fd, r, fsize, (int)p->seg->ranks,
                           p->seg->nonce == nm->nonce ? "equal" : "differs");
    /* The segment proved the pid is the peer's: watch that process. */
    rc = ofccl__watch_add(&lx->watch, ep->params.size, r, nm->pid);
    if (rc != 0 && rc != ESRCH)
        OFCCL__INFO(log, OFCCL__SUB_PROV,
                    "rank %d: pidfd_open(%d) for peer %d failed (%s): its exit will be noticed "
                    "at the deadline only",
                    rank, nm->pid, r, strerror(rc));
    return 0;
}

int ofccl__lx_insert_peers(ofccl__ep_t *ep, const void *names, size_t stride, const size_t *lens,
                           int n, ofccl__err_t *e)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    int rc;

    /* A failed earlier attempt left some peers attached: start over. */
    if (lx->peers != NULL) {
        for (int r = 0; r < ep->params.size; r++)
            unmap_peer(lx, r);
        free(lx->peers);
    }
    ofccl__watch_close(&lx->watch);
    lx->peers = calloc((size_t)n, sizeof(*lx->peers));
    if (lx->peers == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    for (int r = 0; r < n; r++) {
        struct lx_name nm;

        /* No name: a peer this endpoint does not reach (a composite endpoint
         * reaches it through the fabric); it stays unattached and unwatched. */
        if (lens[r] == 0 && r != ep->params.rank && ep->params.partial)
            continue;
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

/* One peer on demand (a composite endpoint created lazily attaches the
 * peers on its host one by one); a peer already attached is left as it is. */
int ofccl__lx_add_peer(ofccl__ep_t *ep, int peer, const void *name, size_t len, ofccl__err_t *e)
{
    struct ofccl__lx *lx = ofccl__lx_of(ep);
    struct lx_name nm;
    int rc;

    if (lx->peers == NULL &&
        (lx->peers = calloc((size_t)ep->params.size, sizeof(*lx->peers))) == NULL)
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    if (lx->peers[peer].seg != NULL)
        return 0;
    /* Names come from peers through the bootstrap: never trust their length. */
    if (len != sizeof(nm))
        return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_CORRUPT,
                           "rank %d: name of peer %d has length %zu (a local-provider name "
                           "has %zu)",
                           ep->params.rank, peer, len, sizeof(nm));
    memcpy(&nm, name, sizeof(nm));
    rc = attach_peer(ep, peer, &nm, e);
    if (rc != 0)
        unmap_peer(lx, peer);
    return rc;
}

/* The watch (providers/watch.c) polls at most once per millisecond. */
int ofccl__lx_peer_gone(ofccl__ep_t *ep, int *pid)
{
    return ofccl__watch_poll(&ofccl__lx_of(ep)->watch, pid);
}
