/* Socket plumbing of the TCP bootstrap: see tcp_io.h. */
#include "tcp_io.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

int ofccl__tcp_ms_left(uint64_t deadline)
{
    uint64_t now = ofccl__now_ns();

    if (now >= deadline)
        return 0;
    /* Round up so poll() never spins on a sub-millisecond remainder. */
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 1000000000 ? 1000000000 : (int)ms;
}

void ofccl__tcp_sleep_ms(int ms)
{
    if (ms > 0)
        poll(NULL, 0, ms);
}

void ofccl__tcp_set_nodelay(int fd)
{
    int one = 1;

    /* Frames are small and latency-bound; a failure here costs only speed. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void ofccl__tcp_addr_str(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen)
{
    char host[INET6_ADDRSTRLEN], serv[8]; /* numeric forms only */

    if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        ofccl__strlcpy(buf, "?", buflen);
    else if (sa->sa_family == AF_INET6)
        snprintf(buf, buflen, "[%s]:%s", host, serv);
    else
        snprintf(buf, buflen, "%s:%s", host, serv);
}

void ofccl__tcp_rank_list(char *buf, size_t len, const ofccl__tcp_conn_t *cs, int n, int first,
                          int (*pick)(const ofccl__tcp_conn_t *c))
{
    size_t used;
    int count = 0, shown = 0;

    for (int r = first; r < n; r++)
        count += pick(&cs[r]);
    used = (size_t)snprintf(buf, len, "%s ", count == 1 ? "rank" : "ranks");
    for (int r = first; r < n && used < len; r++) {
        if (!pick(&cs[r]))
            continue;
        if (shown == 16) {
            snprintf(buf + used, len - used, ",... (%d in all)", count);
            return;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%d", shown ? "," : "", cs[r].rank);
        shown++;
    }
}

int ofccl__tcp_conn_busy(const ofccl__tcp_conn_t *c)
{
    return c->fd >= 0 && (c->out_off < c->out_len || c->stage != 0);
}

int ofccl__tcp_conn_missing(const ofccl__tcp_conn_t *c)
{
    return c->fd < 0;
}

void ofccl__tcp_conn_close(ofccl__tcp_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->stage = 0;
    c->out_len = c->out_off = 0;
}

int ofccl__tcp_conn_recv(ofccl__boot_t *b, ofccl__tcp_conn_t *c, ofccl__tcp_step_fn step, void *arg,
                         int *err, ofccl__err_t *e)
{
    while (c->stage != 0) {
        ssize_t n;

        if (c->in_off == c->in_len) {
            int rc = step(b, c, arg, e);
            if (rc != 0)
                return rc;
            continue;
        }
        n = recv(c->fd, c->in + c->in_off, c->in_len - c->in_off, 0);
        if (n > 0) {
            c->in_off += (size_t)n;
        } else if (n == 0) {
            *err = 0;
            return OFCCL__TCP_CLOSED;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 0;
        } else if (errno != EINTR) {
            *err = errno;
            return OFCCL__TCP_CLOSED;
        }
    }
    return 0;
}

static int conn_send(ofccl__tcp_conn_t *c, int *err)
{
    while (c->out_off < c->out_len) {
        /* MSG_NOSIGNAL: a peer that went away must be an error code here,
         * not a SIGPIPE that kills the whole training process. */
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n >= 0)
            c->out_off += (size_t)n;
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        else if (errno != EINTR) {
            *err = errno;
            return OFCCL__TCP_CLOSED;
        }
    }
    return 0;
}

int ofccl__tcp_io_run(ofccl__boot_t *b, ofccl__tcp_conn_t *cs, int n, uint64_t deadline,
                      ofccl__tcp_step_fn step, void *arg, const char *what, ofccl__err_t *e)
{
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    int rc = 0;

    if (pfd == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory during %s", what);
    for (;;) {
        int busy = 0, left;

        for (int i = 0; i < n; i++) {
            ofccl__tcp_conn_t *c = &cs[i];
            pfd[i].fd = -1;
            pfd[i].events = 0;
            pfd[i].revents = 0;
            if (!ofccl__tcp_conn_busy(c))
                continue;
            pfd[i].fd = c->fd;
            pfd[i].events =
                (short)((c->out_off < c->out_len ? POLLOUT : 0) | (c->stage != 0 ? POLLIN : 0));
            busy++;
        }
        if (busy == 0)
            break;
        left = ofccl__tcp_ms_left(deadline);
        if (left == 0) {
            rc = OFCCL_ERR_TIMEOUT;
            break;
        }
        if (poll(pfd, (nfds_t)n, left) < 0) {
            if (errno == EINTR)
                continue;
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INTERNAL,
                             "poll() failed during %s: %s", what, strerror(errno));
            break;
        }
        for (int i = 0; i < n && rc == 0; i++) {
            ofccl__tcp_conn_t *c = &cs[i];
            short re = pfd[i].revents;
            int err = 0, io = 0;

            if (re == 0)
                continue;
            if (c->stage != 0 && (re & (POLLIN | POLLHUP | POLLERR)))
                io = ofccl__tcp_conn_recv(b, c, step, arg, &err, e);
            if (io == 0 && c->out_off < c->out_len && (re & (POLLOUT | POLLHUP | POLLERR)))
                io = conn_send(c, &err);
            if (io == OFCCL__TCP_CLOSED)
                rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_REMOTE_ERROR,
                                 "rank %d%s closed its bootstrap connection during %s%s%s", c->rank,
                                 b->rank != 0 ? " (the bootstrap root)" : "", what,
                                 err ? ": " : " (it failed or exited)", err ? strerror(err) : "");
            else if (io != 0)
                rc = io;
        }
        if (rc != 0)
            break;
    }
    free(pfd);
    return rc;
}

int ofccl__tcp_connect_once(const struct addrinfo *a, int ms, int *err)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage self, peer;
    socklen_t sl = sizeof(self), pl = sizeof(peer);
    struct pollfd pfd;
    socklen_t el = sizeof(*err);

    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err = errno;
            goto fail;
        }
        pfd.fd = fd;
        pfd.events = POLLOUT;
        if (poll(&pfd, 1, ms) <= 0) {
            *err = ETIMEDOUT;
            goto fail;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &el) != 0 || *err != 0)
            goto fail;
    }
    /* With no listener yet, a loopback connect can pick the root port as its
     * own source port and "connect" to itself (TCP simultaneous open). */
    if (getsockname(fd, (struct sockaddr *)&self, &sl) == 0 &&
        getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && sl == pl &&
        memcmp(&self, &peer, sl) == 0) {
        *err = ECONNREFUSED;
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return -1;
}
