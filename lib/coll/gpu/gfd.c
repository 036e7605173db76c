/*
 * File descriptors from rank to rank on one host: how the physical pieces of
 * a caller's virtual GPU memory (greg.c) reach the peers that map them.
 *
 * Each communicator's GPU state has a mailbox: an abstract Unix datagram
 * socket named by this process's pid and a number of the process's own
 * (published with the registration's record). A sender sends one datagram per
 * peer, the descriptors riding along (SCM_RIGHTS) with a header saying which
 * registration and which rank they come from; a receiver collects one per
 * peer it expects, dropping strays of an earlier, failed registration.
 * Nothing is written to the file system; the socket goes with the
 * communicator.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gfd.h"
#include "util.h"

#define GFD_MAGIC 0x6f6663636c676664ull /* "ofcclgfd" */

struct gfd_hdr {
    uint64_t magic, tag;
    int32_t from, npieces; /* npieces < 0: the sender failed, nothing rides along */
    uint64_t piece_len[OFCCL__GPU_SHARE_PIECES];
};

static socklen_t addr_of(uint32_t pid, uint32_t box, struct sockaddr_un *a)
{
    int n;

    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* Abstract: a leading NUL, then the name (no file, gone with the socket). */
    n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ofccl-gpu-%u-%u", pid, box);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int ofccl__gfd_open(ofccl__gfd_t *m, char *why, size_t len)
{
    static atomic_uint next_box;
    struct sockaddr_un a;
    socklen_t alen;

    m->pid = (uint32_t)getpid();
    m->box = atomic_fetch_add(&next_box, 1) + 1;
    m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (m->fd < 0) {
        snprintf(why, len, "socket(AF_UNIX): %s", strerror(errno));
        return OFCCL_ERR_RESOURCE;
    }
    alen = addr_of(m->pid, m->box, &a);
    if (bind(m->fd, (struct sockaddr *)&a, alen) != 0) {
        snprintf(why, len, "binding the descriptor mailbox: %s", strerror(errno));
        close(m->fd);
        m->fd = -1;
        return OFCCL_ERR_RESOURCE;
    }
    return 0;
}

void ofccl__gfd_close(ofccl__gfd_t *m)
{
    if (m->fd >= 0)
        close(m->fd);
    m->fd = -1;
}

int ofccl__gfd_send(const ofccl__gfd_t *m, uint32_t pid, uint32_t box, uint64_t tag, int from,
                    const ofccl__gpu_share_t *s, char *why, size_t len)
{
    struct gfd_hdr h = {GFD_MAGIC, tag, from, s != NULL ? s->npieces : -1, {0}};
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(sizeof(int) * OFCCL__GPU_SHARE_PIECES)];
    } ctl;
    struct sockaddr_un a;
    struct iovec iov = {&h, sizeof(h)};
    struct msghdr msg = {0};
    int n = s != NULL ? s->npieces : 0;

    msg.msg_name = &a;
    msg.msg_namelen = addr_of(pid, box, &a);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (n > 0) {
        memset(&ctl, 0, sizeof(ctl));
        memcpy(h.piece_len, s->piece_len, sizeof(uint64_t) * (size_t)n);
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
        memcpy(CMSG_DATA(c), s->fd, sizeof(int) * (size_t)n);
    }
    for (int tries = 0; tries < 1000; tries++) {
        if (sendmsg(m->fd, &msg, MSG_NOSIGNAL) >= 0)
            return 0;
        if (errno != EAGAIN && errno != EINTR && errno != ENOBUFS)
            break;
        usleep(1000);
    }
    snprintf(why, len, "sending GPU memory descriptors to process %u: %s", pid, strerror(errno));
    return OFCCL_ERR_RESOURCE;
}

/* One datagram: its header and descriptors into s (a stray's are closed). */
static int recv_one(const ofccl__gfd_t *m, struct gfd_hdr *h, ofccl__gpu_share_t *s)
{
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(sizeof(int) * OFCCL__GPU_SHARE_PIECES)];
    } ctl;
    struct iovec iov = {h, sizeof(*h)};
    struct msghdr msg = {0};
    ssize_t got;
    int nfd = 0;

    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    got = recvmsg(m->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            memcpy(s->fd, CMSG_DATA(c), sizeof(int) * (size_t)nfd);
        }
    s->npieces = nfd;
    return 1;
}

int ofccl__gfd_recv(const ofccl__gfd_t *m, uint64_t tag, const bool *expect, int n,
                    ofccl__gpu_share_t *shares, uint64_t deadline_ns, int *culprit, char *why,
                    size_t len)
{
    int want = 0;

    for (int r = 0; r < n; r++)
        want += expect[r];
    while (want > 0) {
        struct gfd_hdr h;
        ofccl__gpu_share_t tmp = {0};
        struct pollfd p = {m->fd, POLLIN, 0};
        int rc = recv_one(m, &h, &tmp);
        if (rc < 0) {
            snprintf(why, len, "receiving GPU memory descriptors: %s", strerror(errno));
            return OFCCL_ERR_RESOURCE;
        }
        if (rc == 0) {
            uint64_t now = ofccl__now_ns();
            if (now >= deadline_ns)
                break;
            poll(&p, 1, (int)OFCCL__MIN((deadline_ns - now) / 1000000 + 1, 100));
            continue;
        }
        bool ours = h.magic == GFD_MAGIC && h.tag == tag && h.from >= 0 && h.from < n &&
                    expect[h.from] && shares[h.from].npieces == 0 &&
                    (h.npieces < 0 || h.npieces == tmp.npieces);
        if (!ours) {
            ofccl__gpu_share_clear(&tmp);
            continue;
        }
        want--;
        if (h.npieces < 0) {
            *culprit = h.from;
            snprintf(why, len, "rank %d could not send its GPU memory descriptors", h.from);
            return OFCCL_ERR_REMOTE_ERROR;
        }
        ofccl__gpu_share_t *s = &shares[h.from];
        memcpy(s->fd, tmp.fd, sizeof(int) * (size_t)tmp.npieces);
        memcpy(s->piece_len, h.piece_len, sizeof(uint64_t) * (size_t)tmp.npieces);
        s->npieces = tmp.npieces;
    }
    if (want > 0) {
        for (int r = 0; r < n; r++)
            if (expect[r] && shares[r].npieces == 0)
                *culprit = r;
        snprintf(why, len, "rank %d's GPU memory descriptors did not arrive in time", *culprit);
        return OFCCL_ERR_TIMEOUT;
    }
    return 0;
}
