/*
 * The files behind libfabric shm endpoints: /dev/shm/<endpoint name>, one
 * region of about 16 MiB per endpoint, which every peer maps.
 *
 * libfabric 1.17's shm creates the file when the endpoint is enabled, maps a
 * peer's file when the peer's address is inserted into the AV (smr_map_add;
 * it maps lazily, on the first send, only when the file did not exist yet at
 * insert), and unlinks its own file only when the endpoint is closed or on a
 * catchable signal. A process killed with SIGKILL would leave its files
 * behind. ofccl therefore names every endpoint itself and:
 *   - unlinks its own file as soon as every peer has inserted (mapped) it,
 *     which the communicator's setup barrier proves; mappings outlive the
 *     name, so nothing changes for the ranks already connected. Not with
 *     libfabric 2.x, whose shm maps a peer's file on the first transfer to
 *     it (a file unlinked before that leaves the transfer waiting for good):
 *     there the file goes when the endpoint closes, or at the sweep below
 *     when its process was killed;
 *   - removes, when a provider is opened, files that earlier ofccl processes
 *     of this user, in this PID namespace, left behind when they died (the
 *     name carries the pid and the namespace, so "dead" is decidable);
 *   - checks, before the AV insert, that RLIMIT_AS leaves room for the peers'
 *     regions: shm 1.17 does not check that mmap, and segfaults when it fails;
 *   - watches the process of every peer in its PID namespace (the pid is in
 *     the peer's name) with a pidfd: shm reports no dead peer itself, so a
 *     killed rank would otherwise be noticed at the deadline only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric.h"
#include "util.h"

#define SHM_DIR "/dev/shm"
/* What shm puts before a name when it hands one out; absent for names set with fi_setname. */
#define SHM_PREFIX "fi_shm://"

static unsigned long pid_ns(void)
{
    struct stat st;

    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

void ofccl__shm_name(char *buf, size_t len)
{
    /* pid, PID namespace, a process-wide counter (several endpoints per
     * process), and random bits (a new process with a recycled pid must not
     * meet an old file: shm's fi_enable would fail with EBUSY). */
    static atomic_uint seq;
    uint32_t nonce = 0;

    (void)ofccl__random_bytes(&nonce, sizeof(nonce));
    snprintf(buf, len, "ofccl_%d_%lu_%u_%08x", (int)getpid(), pid_ns(), atomic_fetch_add(&seq, 1),
             nonce);
}

void ofccl__shm_unlink_own(ofccl__ep_t *ep)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);

    if (f->shm_name[0] == '\0')
        return;
    if (shm_unlink(f->shm_name) != 0 && errno != ENOENT)
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: cannot unlink %s/%s: %s (removed when the endpoint closes)",
                    ep->params.rank, SHM_DIR, f->shm_name, strerror(errno));
    f->shm_name[0] = '\0';
}

void ofccl__shm_sweep(const ofccl__log_t *log)
{
    unsigned long ns = pid_ns();
    DIR *d = opendir(SHM_DIR);
    struct dirent *de;
    unsigned removed = 0;

    if (d == NULL || ns == 0) {
        if (d != NULL)
            closedir(d);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        unsigned long their_ns = 0;
        struct stat st;
        int pid = 0, n = 0;

        if (sscanf(de->d_name, "ofccl_%d_%lu_%*u_%*x%n", &pid, &their_ns, &n) != 2 || n == 0 ||
            their_ns != ns || pid <= 0 || pid == (int)getpid())
            continue;
        /* Only what this user owns, and only when the pid is unused in this
         * namespace: then the process that created it is gone for sure. */
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            st.st_uid != geteuid() || !S_ISREG(st.st_mode))
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    if (removed > 0)
        OFCCL__INFO(log, OFCCL__SUB_PROV,
                    "removed %u shm region file(s) of exited ofccl processes from %s", removed,
                    SHM_DIR);
}

void ofccl__shm_watch_peer(ofccl__ep_t *ep, int peer, const char *name)
{
    unsigned long their_ns = 0, ns;
    int pid = 0, n = 0, rc;

    if (!(ep->prov->caps.quirks & OFCCL__Q_NAME_PER_PROCESS) || peer == ep->params.rank)
        return;
    if (strncmp(name, SHM_PREFIX, strlen(SHM_PREFIX)) == 0)
        name += strlen(SHM_PREFIX);
    /* A pid means something only in its own namespace; our own is alive. */
    ns = pid_ns();
    if (sscanf(name, "ofccl_%d_%lu_%*u_%*x%n", &pid, &their_ns, &n) != 2 || n == 0 || pid <= 0 ||
        ns == 0 || their_ns != ns || pid == (int)getpid())
        return;
    rc = ofccl__watch_add(&ofccl__fab_ep_of(ep)->watch, ep->params.size, peer, pid);
    if (rc == ESRCH)
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV, "rank %d: peer %d (pid %d) has exited already",
                    ep->params.rank, peer, pid);
    else if (rc != 0)
        OFCCL__INFO(ep->prov->log, OFCCL__SUB_PROV,
                    "rank %d: pidfd_open(%d) for peer %d failed (%s): its exit will be noticed "
                    "at the deadline only",
                    ep->params.rank, pid, peer, strerror(rc));
}

int ofccl__fab_peer_gone(ofccl__ep_t *ep, int *pid)
{
    struct ofccl__fab_ep *f = ofccl__fab_ep_of(ep);

    if (f == NULL) {
        if (pid != NULL)
            *pid = -1;
        return -1;
    }
    return ofccl__watch_poll(&f->watch, pid);
}

int ofccl__shm_reserve_peers(ofccl__ep_t *ep, const char *names, size_t stride, int n,
                             ofccl__err_t *e)
{
    size_t need = 0;
    int peers = 0;
    char what[96];

    for (int r = 0; r < n; r++) {
        const char *name = names + (size_t)r * stride;
        char path[sizeof(SHM_DIR) + 256];
        struct stat st;

        if (r == ep->params.rank)
            continue; /* shm finds its own region without mapping it again */
        if (strncmp(name, SHM_PREFIX, strlen(SHM_PREFIX)) == 0)
            name += strlen(SHM_PREFIX);
        if (strchr(name, '/') != NULL)
            continue; /* not a plain file name: leave it to the provider */
        snprintf(path, sizeof(path), "%s/%s", SHM_DIR, name);
        /* A peer unlinks its file only after every rank has inserted it: a
         * file missing now means the peer closed its endpoint (its setup
         * failed) or died. shm would insert it anyway and map it on the first
         * send, which could then never work. */
        if (stat(path, &st) != 0)
            return ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_REMOTE_ERROR,
                               "rank %d: peer %d's shm region %s is gone (%s): its communicator "
                               "setup failed or it exited; see that rank's error",
                               ep->params.rank, r, path, strerror(errno));
        need += (size_t)st.st_size;
        peers++;
    }
    snprintf(what, sizeof(what), "mapping the shm regions of %d peer(s) (%zu MiB)", peers,
             need >> 20);
    return ofccl__limit_reserve(ep->prov->log, e, need, what, ep->params.rank);
}
