/*
 * ceiling_all's loopback TCP columns: the streaming ring and the all-to-all
 * mesh (ceiling_tcp.h). Sockets are non-blocking; a process that moved
 * nothing in a pass yields the cpu, as ofccl's progress loop does when
 * oversubscribed.
 */
#include "ceiling_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perfutil.h"

static double now(void)
{
    return perf_now_us() * 1e-6;
}

static int would_block(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

int ceil_tcp_listen(ceil_tcp_t *g, int n)
{
    for (int i = 0; i < n; i++)
        g->lfd[i] = -1;
    for (int i = 0; i < n; i++)
        /* perf_tcp_listen's backlog is 1; the mesh connects n - 1 at once. */
        if ((g->lfd[i] = perf_tcp_listen(&g->port[i])) < 0 || listen(g->lfd[i], n) != 0) {
            perror("ceiling_all: a loopback listener");
            return -1;
        }
    return 0;
}

void ceil_tcp_close(ceil_tcp_t *g, int n)
{
    for (int i = 0; i < n; i++)
        if (g->lfd[i] >= 0)
            close(g->lfd[i]);
}

/* A connection to process `to`, with TCP_NODELAY (a round or a block ends on
 * a small segment: it goes at once); blocking until nonblock(); -1 on failure. */
static int dial(const ceil_tcp_t *g, int to)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(g->port[to]),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* The next connection to process me's listener, within 10 s; -1 otherwise. */
static int answer(const ceil_tcp_t *g, int me)
{
    struct pollfd p = {g->lfd[me], POLLIN, 0};

    return poll(&p, 1, 10000) == 1 ? accept(g->lfd[me], NULL, NULL) : -1;
}

static void nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* `want` bytes out on sfd (when not NULL) while `want` come in on rfd, as far
 * as each goes without blocking; *sent and *got advance. 1 if anything moved,
 * 0 if not, -1 on an error or a closed peer. */
static int pump(int sfd, int rfd, const char *s, char *r, size_t want, size_t *sent, size_t *got)
{
    int moved = 0;

    if (*sent < want) {
        ssize_t k = send(sfd, s + *sent, want - *sent, MSG_NOSIGNAL);
        if (k > 0)
            *sent += (size_t)k, moved = 1;
        else if (k < 0 && !would_block())
            return -1;
    }
    if (*got < want) {
        ssize_t k = recv(rfd, r + *got, want - *got, 0);
        if (k > 0)
            *got += (size_t)k, moved = 1;
        else if (k == 0 || !would_block())
            return -1;
    }
    return moved;
}

double ceil_best(const ceil_sync_t *s, int ok, size_t total, size_t per, int meet,
                 int (*step)(void *arg, double deadline), void *arg)
{
    long reps = per == 0 || total / per < 3 ? 3 : (long)(total / per);
    double best = 0;

    ok = ok && per > 0;
    for (int r = 0; r < s->rounds; r++) {
        pthread_barrier_wait(s->bar);
        double t0 = now(), deadline = t0 + 30;
        for (long i = 0; ok && i < reps; i++)
            ok = step(arg, deadline) == 0 && (!meet || s->meet(s->arg) == 0);
        double rate = (double)per * (double)reps / (now() - t0);
        best = rate > best ? rate : best;
    }
    return ok ? best : -1;
}

/* ---- the ring ---- */

/* Process me's two ends: *sfd to me + 1, *rfd from me - 1 (the listener's
 * backlog completes the connect before anyone accepts). */
static int ring_join(const ceil_tcp_t *g, int n, int me, int *sfd, int *rfd)
{
    *sfd = dial(g, (me + 1) % n);
    *rfd = *sfd >= 0 ? answer(g, me) : -1;
    if (*rfd < 0)
        return -1;
    nonblock(*sfd);
    nonblock(*rfd);
    return 0;
}

/* One step of the ring (ceil_best's step): the block out to the next process
 * while one comes in from the previous. */
typedef struct ring_step {
    int sfd, rfd;
    const char *src;
    char *dst;
    size_t bytes;
} ring_step_t;

static int ring_round(void *arg, double deadline)
{
    ring_step_t *x = arg;
    size_t sent = 0, got = 0;

    while (sent < x->bytes || got < x->bytes) {
        int moved = pump(x->sfd, x->rfd, x->src, x->dst, x->bytes, &sent, &got);
        if (moved < 0)
            return -1;
        if (moved == 0)
            sched_yield();
        if (now() > deadline)
            return -1;
    }
    return 0;
}

double ceil_tcp_ring(const ceil_sync_t *s, const ceil_tcp_t *g, int n, int me, const char *src,
                     char *dst, size_t bytes, size_t total)
{
    ring_step_t x = {-1, -1, src, dst, bytes};
    int ok = ring_join(g, n, me, &x.sfd, &x.rfd) == 0;
    double best = ceil_best(s, ok, total, bytes, 0, ring_round, &x);

    if (x.sfd >= 0)
        close(x.sfd);
    if (x.rfd >= 0)
        close(x.rfd);
    return best;
}

/* ---- the mesh ---- */

typedef struct mesh {
    int *sfd, *rfd;     /* to and from each process (-1: none, or itself) */
    size_t *sent, *got; /* this round's progress per peer */
    int n, me;
    const char *src; /* this process's block of blk bytes */
    char *dst;       /* every process's block at its place */
    size_t blk;
} mesh_t;

static void mesh_free(mesh_t *m, int n)
{
    for (int p = 0; p < n && m->sfd != NULL && m->rfd != NULL; p++) {
        if (m->sfd[p] >= 0)
            close(m->sfd[p]);
        if (m->rfd[p] >= 0)
            close(m->rfd[p]);
    }
    free(m->sfd);
    free(m->rfd);
    free(m->sent);
    free(m->got);
    *m = (mesh_t){0};
}

/* Connect to every other process, saying who this is in 4 bytes, then take
 * n - 1 connections and learn who each is from. */
static int mesh_join(mesh_t *m, const ceil_tcp_t *g, int n, int me)
{
    m->sfd = malloc(n * sizeof(int));
    m->rfd = malloc(n * sizeof(int));
    m->sent = calloc(n, sizeof(size_t));
    m->got = calloc(n, sizeof(size_t));
    if (!m->sfd || !m->rfd || !m->sent || !m->got) {
        mesh_free(m, n);
        return -1;
    }
    for (int p = 0; p < n; p++)
        m->sfd[p] = m->rfd[p] = -1;
    for (int p = 0; p < n; p++) {
        int32_t who = me;
        if (p != me && ((m->sfd[p] = dial(g, p)) < 0 ||
                        send(m->sfd[p], &who, sizeof(who), MSG_NOSIGNAL) != sizeof(who)))
            return -1;
    }
    for (int k = 1; k < n; k++) {
        int32_t who = -1;
        int fd = answer(g, me);
        struct pollfd p = {fd, POLLIN, 0};
        if (fd < 0)
            return -1;
        if (poll(&p, 1, 10000) != 1 || recv(fd, &who, sizeof(who), MSG_WAITALL) != sizeof(who) ||
            who < 0 || who >= n || who == me || m->rfd[who] >= 0) {
            close(fd);
            return -1;
        }
        m->rfd[who] = fd;
    }
    for (int p = 0; p < n; p++)
        if (p != me) {
            nonblock(m->sfd[p]);
            nonblock(m->rfd[p]);
        }
    return 0;
}

/* One step of the mesh (ceil_best's step): this process's block to every
 * other while theirs arrive at their places; the peers in the direct
 * all-gather's order. */
static int mesh_round(void *arg, double deadline)
{
    mesh_t *m = arg;
    int n = m->n, me = m->me, left = n - 1;
    size_t blk = m->blk;

    memset(m->sent, 0, n * sizeof(size_t));
    memset(m->got, 0, n * sizeof(size_t));
    while (left > 0) {
        int moved = 0;
        for (int k = 1; k < n; k++) {
            int to = (me + k) % n, from = (me - k + n) % n;
            int a = pump(m->sfd[to], -1, m->src, NULL, blk, &m->sent[to], &(size_t){blk});
            int b = pump(-1, m->rfd[from], NULL, m->dst + (size_t)from * blk, blk, &(size_t){blk},
                         &m->got[from]);
            if (a < 0 || b < 0)
                return -1;
            moved |= a | b;
        }
        left = 0;
        for (int p = 0; p < n; p++)
            left += p != me && (m->sent[p] < blk || m->got[p] < blk);
        if (!moved)
            sched_yield();
        if (now() > deadline)
            return -1;
    }
    return 0;
}

double ceil_tcp_mesh(const ceil_sync_t *s, const ceil_tcp_t *g, int n, int me, const char *src,
                     char *dst, size_t bytes, size_t total)
{
    size_t blk = bytes / (size_t)n & ~(size_t)63, per = blk * (size_t)(n - 1);
    mesh_t m = {0};
    int ok = per > 0 && mesh_join(&m, g, n, me) == 0;
    double best;

    m.n = n, m.me = me, m.src = src, m.dst = dst, m.blk = blk;
    best = ceil_best(s, ok, total, per, 1, mesh_round, &m);
    mesh_free(&m, n);
    return best;
}
