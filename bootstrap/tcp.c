/*
 * TCP rendezvous bootstrap, for launchers that give no PMIx server (torchrun
 * style: a root address, a rank and a size) and for tests that start ranks in
 * other network namespaces.
 *
 * Rank 0 listens on the root address; every other rank connects (retrying
 * until the deadline, since rank 0 may start last) and sends a hello. Rank 0
 * answers everyone with the table of hostnames once all have joined, and
 * keeps the connections: an allgather is a gather to rank 0 followed by a
 * broadcast of everything. Every frame is length-checked before anything is
 * allocated, every wait is bounded by the deadline, and a root that fails an
 * exchange tells the others why before closing, so nobody waits for nothing.
 *
 * Frames (little-endian):
 *   hello, rank r -> root: u32 magic, u16 version, u16 0, u32 rank, u32 size,
 *                          char hostname[64]
 *   up, rank r -> root:    u32 magic, u32 rank, u64 seq, u32 len, u32 0, bytes
 *   down, root -> rank r:  u32 magic, u32 status, u64 seq, u32 size, u32 body_len,
 *                          body (status OK: hostnames or lens[size] + bytes;
 *                          otherwise the reason as text)
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot.h"
#include "tcp_io.h"
#include "util.h"

#define HELLO_MAGIC 0x48424F4Fu /* "OFBH" */
#define TABLE_MAGIC 0x54424F4Fu /* "OFBT" */
#define UP_MAGIC 0x58424F4Fu    /* "OFBX" */
#define DOWN_MAGIC 0x59424F4Fu  /* "OFBY" */
#define PROTO_VERSION 1
#define HOST_LEN 64
#define HELLO_LEN (16 + HOST_LEN)
_Static_assert(HELLO_LEN <= OFCCL__TCP_HDR_MAX, "a hello fits a conn's hdr");
#define FRAME_HDR 24
#define MAX_FRAME (64u << 20) /* no bootstrap frame is ever legitimately larger */
#define MAX_REASON 400
#define MAX_PENDING 64 /* connections that have not sent a hello yet */
#define CONNECT_SLICE_MS 2000
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 500

enum { ST_OK = 0, ST_REJECT = 1, ST_ABORT = 2 };

typedef struct tcp_boot {
    ofccl__tcp_conn_t *conns; /* root: one per rank ([0] unused); others: [0] = the root */
    int nconns;
    char root[128];
    int broken; /* an exchange failed: the streams are out of step for good */
} tcp_boot_t;

/* Tell every connected peer why the root gives up, then close. Best effort:
 * one non-blocking send each; a peer that was mid-frame only sees the close. */
static void root_abort(tcp_boot_t *t, uint32_t magic, uint64_t seq, int size, const char *why)
{
    uint8_t frame[FRAME_HDR + MAX_REASON];
    size_t len = strlen(why);

    if (len > MAX_REASON)
        len = MAX_REASON;
    ofccl__put_le32(frame, magic);
    ofccl__put_le32(frame + 4, ST_ABORT);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)size);
    ofccl__put_le32(frame + 20, (uint32_t)len);
    memcpy(frame + FRAME_HDR, why, len);
    for (int r = 1; r < t->nconns; r++) {
        ofccl__tcp_conn_t *c = &t->conns[r];
        if (c->fd < 0)
            continue;
        if (c->out_off == 0 || c->out_off == c->out_len)
            (void)send(c->fd, frame, FRAME_HDR + len, MSG_NOSIGNAL | MSG_DONTWAIT);
        ofccl__tcp_conn_close(c);
    }
}

static void fail_all(tcp_boot_t *t)
{
    t->broken = 1;
    for (int r = 0; r < t->nconns; r++)
        ofccl__tcp_conn_close(&t->conns[r]);
}

/* ---- parameters ------------------------------------------------------- */

static int parse_root(ofccl__boot_t *b, const char *root, char *host, size_t hostlen, char *port,
                      size_t portlen, ofccl__err_t *e)
{
    const char *colon, *hs = root, *he;
    char *end;
    long pn;

    if (root[0] == '[') {
        he = strchr(root, ']');
        if (he == NULL || he[1] != ':')
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                               "OFCCL_BOOT_ROOT='%s' is not [ipv6-address]:port", root);
        hs = root + 1;
        colon = he + 1;
    } else {
        colon = strrchr(root, ':');
        if (colon == NULL)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                               "OFCCL_BOOT_ROOT='%s' has no port: expected host:port, e.g. "
                               "127.0.0.1:29500",
                               root);
        he = colon;
        if (memchr(root, ':', (size_t)(colon - root)) != NULL)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                               "OFCCL_BOOT_ROOT='%s': write an IPv6 address as [address]:port",
                               root);
    }
    if (he == hs || (size_t)(he - hs) >= hostlen)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_ROOT='%s' has an empty or overlong host", root);
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    errno = 0;
    pn = strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || errno != 0 || pn < 1 || pn > 65535)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_ROOT='%s': port '%s' is not a number in 1..65535", root,
                           colon + 1);
    snprintf(port, portlen, "%ld", pn);
    return 0;
}

static int resolve(ofccl__boot_t *b, const char *root, const char *host, const char *port,
                   struct addrinfo **res, ofccl__err_t *e)
{
    struct addrinfo hints;
    int rc;

    memset(&hints, 0, sizeof(hints));
    /* No AI_ADDRCONFIG: it hides 127.0.0.1 in a namespace that has only lo. */
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(host, port, &hints, res);
    if (rc == 0)
        return 0;
    return ofccl__fail(
        b->log, OFCCL__SUB_BOOT, e, rc == EAI_NONAME ? OFCCL_ERR_CONFIG : OFCCL_ERR_BOOTSTRAP,
        "cannot resolve the host of OFCCL_BOOT_ROOT='%s': %s", root, gai_strerror(rc));
}

/* ---- rank 0 ------------------------------------------------------------ */

static int root_listen(ofccl__boot_t *b, tcp_boot_t *t, struct addrinfo *ai, int *lfd,
                       ofccl__err_t *e)
{
    int err = 0;
    const char *hint = "";

    for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        int one = 1, fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        /* Reuse the port of a previous run still in TIME_WAIT. */
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            *lfd = fd;
            return 0;
        }
        err = errno;
        close(fd);
    }
    if (err == EADDRINUSE)
        hint = ": the port is taken (another job, or a previous run still alive?); choose "
               "another port";
    else if (err == EADDRNOTAVAIL)
        hint = ": the address is not one of this host's; OFCCL_BOOT_ROOT must name rank 0's host";
    return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                       "rank 0 cannot listen on OFCCL_BOOT_ROOT=%s: %s%s", t->root, strerror(err),
                       hint);
}

static void send_reject(ofccl__tcp_conn_t *c, int size, const char *why)
{
    uint8_t frame[FRAME_HDR + MAX_REASON];
    size_t len = OFCCL__MIN(strlen(why), (size_t)MAX_REASON);

    ofccl__put_le32(frame, TABLE_MAGIC);
    ofccl__put_le32(frame + 4, ST_REJECT);
    ofccl__put_le64(frame + 8, 0);
    ofccl__put_le32(frame + 16, (uint32_t)size);
    ofccl__put_le32(frame + 20, (uint32_t)len);
    memcpy(frame + FRAME_HDR, why, len);
    (void)send(c->fd, frame, FRAME_HDR + len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A complete hello arrived on `p`: adopt it as its rank, or log and drop it. */
static void root_hello(ofccl__boot_t *b, tcp_boot_t *t, ofccl__tcp_conn_t *p, char *hosts)
{
    uint32_t magic = ofccl__get_le32(p->hdr), version = ofccl__get_le32(p->hdr + 4) & 0xffff;
    uint32_t rank = ofccl__get_le32(p->hdr + 8), size = ofccl__get_le32(p->hdr + 12);
    char why[200];

    if (magic != HELLO_MAGIC) {
        OFCCL__WARN(b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap: ignoring a connection from %s that did not send an ofccl "
                    "hello (magic 0x%08x)",
                    p->addr, magic);
        ofccl__tcp_conn_close(p);
        return;
    }
    why[0] = '\0';
    if (version != PROTO_VERSION)
        snprintf(why, sizeof(why), "it speaks bootstrap protocol %u, the root %d", version,
                 PROTO_VERSION);
    else if (size != (uint32_t)b->size)
        snprintf(why, sizeof(why), "rank %u has OFCCL_BOOT_SIZE=%u, the root %d", rank, size,
                 b->size);
    else if (rank == 0 || rank >= (uint32_t)b->size)
        snprintf(why, sizeof(why),
                 "rank %u is not in [1, %d): two processes claim it or "
                 "OFCCL_BOOT_RANK is wrong",
                 rank, b->size);
    else if (t->conns[rank].fd >= 0)
        snprintf(why, sizeof(why), "rank %u is already connected from %s", rank,
                 t->conns[rank].addr);
    if (why[0] != '\0') {
        OFCCL__WARN(b->log, OFCCL__SUB_BOOT, "TCP bootstrap: rejecting a hello from %s: %s",
                    p->addr, why);
        send_reject(p, b->size, why);
        ofccl__tcp_conn_close(p);
        return;
    }
    memcpy(hosts + (size_t)rank * HOST_LEN, p->hdr + 16, HOST_LEN);
    hosts[(size_t)rank * HOST_LEN + HOST_LEN - 1] = '\0';
    t->conns[rank] = *p;
    t->conns[rank].rank = (int)rank;
    t->conns[rank].in = NULL;
    t->conns[rank].in_len = t->conns[rank].in_off = 0;
    ofccl__tcp_set_nodelay(p->fd);
    OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT, "TCP bootstrap: rank %u joined from %s (%s)", rank,
                 p->addr, hosts + (size_t)rank * HOST_LEN);
    p->fd = -1;
}

static void root_accept_new(ofccl__boot_t *b, int lfd, ofccl__tcp_conn_t *pend, int *npend)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        ofccl__tcp_conn_t *p;

        if (fd < 0)
            return; /* EAGAIN, or a connection that died while queued */
        if (*npend == MAX_PENDING) {
            OFCCL__WARN(b->log, OFCCL__SUB_BOOT,
                        "TCP bootstrap: %d connections sent no hello yet; dropping a new one",
                        MAX_PENDING);
            close(fd);
            continue;
        }
        p = &pend[(*npend)++];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->rank = -1;
        p->in = p->hdr;
        p->in_len = HELLO_LEN;
        p->stage = 1;
        ofccl__tcp_addr_str((struct sockaddr *)&ss, sl, p->addr, sizeof(p->addr));
    }
}

static int hello_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e)
{
    c->stage = 0;
    return 0;
}

/* Accept connections until every rank has sent a valid hello. */
static int root_rendezvous(ofccl__boot_t *b, tcp_boot_t *t, int lfd, uint64_t deadline, char *hosts,
                           ofccl__err_t *e)
{
    ofccl__tcp_conn_t pend[MAX_PENDING];
    struct pollfd pfd[1 + MAX_PENDING];
    int npend = 0, joined = 0, rc = 0;

    while (joined < b->size - 1) {
        int left = ofccl__tcp_ms_left(deadline);
        if (left == 0) {
            char list[200];
            ofccl__tcp_rank_list(list, sizeof(list), t->conns, b->size, 1, ofccl__tcp_conn_missing);
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                             "%s of %d did not connect to %s within %llu ms", list, b->size,
                             t->root, (unsigned long long)b->timeout_ms);
            break;
        }
        pfd[0].fd = lfd;
        pfd[0].events = POLLIN;
        for (int i = 0; i < npend; i++) {
            pfd[1 + i].fd = pend[i].fd;
            pfd[1 + i].events = POLLIN;
        }
        if (poll(pfd, (nfds_t)(1 + npend), left) < 0) {
            if (errno == EINTR)
                continue;
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INTERNAL,
                             "poll() failed in the TCP rendezvous: %s", strerror(errno));
            break;
        }
        /* Backwards, so removing pend[i] (swap with the last) keeps the
         * pollfd of every entry still to visit in place. */
        for (int i = npend - 1; i >= 0; i--) {
            ofccl__tcp_conn_t *p = &pend[i];
            int err = 0;

            if (pfd[1 + i].revents == 0)
                continue;
            if (ofccl__tcp_conn_recv(b, p, hello_step, NULL, &err, e) == OFCCL__TCP_CLOSED) {
                OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT,
                             "TCP bootstrap: a connection from %s closed before its hello",
                             p->addr);
                ofccl__tcp_conn_close(p);
            } else if (p->stage == 0) {
                root_hello(b, t, p, hosts);
            }
            if (p->fd < 0 && i != --npend) {
                /* `in` points into the entry's own hdr: re-aim it after the move. */
                pend[i] = pend[npend];
                pend[i].in = pend[i].hdr;
            }
        }
        joined = 0;
        for (int r = 1; r < b->size; r++)
            joined += t->conns[r].fd >= 0;
        if (pfd[0].revents & POLLIN)
            root_accept_new(b, lfd, pend, &npend);
    }
    for (int i = 0; i < npend; i++)
        ofccl__tcp_conn_close(&pend[i]);
    return rc;
}

/* Listen, collect every rank's hello, answer with the host table. */
static int root_open(ofccl__boot_t *b, tcp_boot_t *t, struct addrinfo *ai, uint64_t deadline,
                     char *hosts, ofccl__err_t *e)
{
    size_t tlen = (size_t)b->size * HOST_LEN;
    uint8_t *frame = NULL;
    int rc, lfd = -1;

    rc = root_listen(b, t, ai, &lfd, e);
    if (rc != 0)
        return rc;
    rc = root_rendezvous(b, t, lfd, deadline, hosts, e);
    close(lfd); /* latecomers and strays now get "connection refused" */
    if (rc != 0)
        goto err_abort;
    frame = malloc(FRAME_HDR + tlen);
    if (frame == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory for the host table");
        goto err_abort;
    }
    ofccl__put_le32(frame, TABLE_MAGIC);
    ofccl__put_le32(frame + 4, ST_OK);
    ofccl__put_le64(frame + 8, 0);
    ofccl__put_le32(frame + 16, (uint32_t)b->size);
    ofccl__put_le32(frame + 20, (uint32_t)tlen);
    memcpy(frame + FRAME_HDR, hosts, tlen);
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = frame;
        t->conns[r].out_len = FRAME_HDR + tlen;
        t->conns[r].out_off = 0;
    }
    rc = ofccl__tcp_io_run(b, t->conns, b->size, deadline, hello_step, NULL, "the rendezvous", e);
    if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "TCP rendezvous at %s: sending the host table timed out after %llu ms",
                         t->root, (unsigned long long)b->timeout_ms);
    if (rc != 0)
        goto err_abort;
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = NULL;
        t->conns[r].out_len = t->conns[r].out_off = 0;
    }
    free(frame);
    return 0;

err_abort:
    root_abort(t, TABLE_MAGIC, 0, b->size, e != NULL ? e->msg : "the rendezvous failed");
    free(frame);
    return rc;
}

/* ---- other ranks ------------------------------------------------------ */

static int connect_root(ofccl__boot_t *b, tcp_boot_t *t, const struct addrinfo *ai,
                        uint64_t deadline, int *out, ofccl__err_t *e)
{
    int backoff = BACKOFF_MIN_MS, err = ECONNREFUSED, attempts = 0;

    for (;;) {
        for (const struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
            int left = ofccl__tcp_ms_left(deadline);
            int fd =
                ofccl__tcp_connect_once(a, OFCCL__MIN(left > 0 ? left : 1, CONNECT_SLICE_MS), &err);
            attempts++;
            if (fd >= 0) {
                *out = fd;
                return 0;
            }
        }
        if (ofccl__tcp_ms_left(deadline) == 0)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                               "rank %d could not connect to the bootstrap root (rank 0) at %s "
                               "within %llu ms (%d attempts, last error: %s): is rank 0 running, "
                               "and is OFCCL_BOOT_ROOT its address?",
                               b->rank, t->root, (unsigned long long)b->timeout_ms, attempts,
                               strerror(err));
        /* The root may simply not be up yet: back off and try again. */
        ofccl__tcp_sleep_ms(OFCCL__MIN(backoff, ofccl__tcp_ms_left(deadline)));
        backoff = OFCCL__MIN(backoff * 2, BACKOFF_MAX_MS);
    }
}

typedef struct down_arg {
    uint32_t magic;
    uint64_t seq;
    size_t max_body;
    uint8_t *body;
    size_t body_len;
    int status;
    char reason[MAX_REASON + 1];
    const char *what;
} down_arg_t;

/* Non-root side of every root -> rank frame. */
static int down_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e)
{
    down_arg_t *d = arg;

    if (c->stage == 1) {
        uint32_t magic = ofccl__get_le32(c->hdr), status = ofccl__get_le32(c->hdr + 4);
        uint64_t seq = ofccl__get_le64(c->hdr + 8);
        uint32_t size = ofccl__get_le32(c->hdr + 16), blen = ofccl__get_le32(c->hdr + 20);

        if (magic != d->magic || (status == ST_OK && seq != d->seq) || status > ST_ABORT)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank 0 (the bootstrap root) sent a bad frame header during %s "
                               "(magic 0x%08x, status %u, seq %llu)",
                               d->what, magic, status, (unsigned long long)seq);
        d->status = (int)status;
        if (status != ST_OK) {
            if (blen > MAX_REASON)
                return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                                   "rank 0 (the bootstrap root) sent a %u-byte error text during "
                                   "%s",
                                   blen, d->what);
            c->in = (uint8_t *)d->reason;
            c->in_len = blen;
            c->in_off = 0;
            c->stage = 3;
            return 0;
        }
        if (size != (uint32_t)b->size || blen > d->max_body || blen > MAX_FRAME)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank 0 (the bootstrap root) sent an inconsistent frame during %s "
                               "(size %u, this rank %d; %u bytes, at most %zu expected)",
                               d->what, size, b->size, blen, d->max_body);
        d->body = malloc(blen > 0 ? blen : 1);
        if (d->body == NULL)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                               "out of memory receiving %u bytes during %s", blen, d->what);
        d->body_len = blen;
        c->in = d->body;
        c->in_len = blen;
        c->in_off = 0;
        c->stage = 2;
        return 0;
    }
    if (c->stage == 3)
        d->reason[c->in_len] = '\0';
    c->stage = 0;
    return 0;
}

/* Hello out, table back. */
static int rank_rendezvous(ofccl__boot_t *b, tcp_boot_t *t, uint64_t deadline, char *hosts,
                           ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t hello[HELLO_LEN];
    down_arg_t d;
    int rc;

    memset(hello, 0, sizeof(hello));
    ofccl__put_le32(hello, HELLO_MAGIC);
    ofccl__put_le32(hello + 4, PROTO_VERSION);
    ofccl__put_le32(hello + 8, (uint32_t)b->rank);
    ofccl__put_le32(hello + 12, (uint32_t)b->size);
    memcpy(hello + 16, b->hostname, HOST_LEN);
    memset(&d, 0, sizeof(d));
    d.magic = TABLE_MAGIC;
    d.seq = 0;
    d.max_body = (size_t)b->size * HOST_LEN;
    d.what = "the rendezvous";
    c->out = hello;
    c->out_len = HELLO_LEN;
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    rc = ofccl__tcp_io_run(b, c, 1, deadline, down_step, &d, d.what, e);
    c->out = NULL;
    if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "rank %d reached the bootstrap root at %s, but the rendezvous did not "
                         "complete within %llu ms: some other rank did not connect",
                         b->rank, t->root, (unsigned long long)b->timeout_ms);
    else if (rc == 0 && d.status != ST_OK)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e,
                         d.status == ST_REJECT ? OFCCL_ERR_CONFIG : OFCCL_ERR_REMOTE_ERROR,
                         "the bootstrap root at %s %s rank %d: %s", t->root,
                         d.status == ST_REJECT ? "rejected" : "gave up on the rendezvous of",
                         b->rank, d.reason);
    else if (rc == 0 && d.body_len != d.max_body)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                         "the bootstrap root at %s sent a %zu-byte host table, expected %zu",
                         t->root, d.body_len, d.max_body);
    if (rc == 0) {
        memcpy(hosts, d.body, d.max_body);
        for (int r = 0; r < b->size; r++)
            hosts[(size_t)r * HOST_LEN + HOST_LEN - 1] = '\0';
    }
    free(d.body);
    return rc;
}

/* ---- exchanges ---------------------------------------------------------- */

typedef struct up_arg {
    uint64_t seq;
    uint8_t *out;
    size_t slot;
    size_t *lens;
    const char *what;
} up_arg_t;

/* Root side of rank -> root contributions. */
static int up_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e)
{
    up_arg_t *u = arg;

    if (c->stage == 1) {
        uint32_t magic = ofccl__get_le32(c->hdr), rank = ofccl__get_le32(c->hdr + 4),
                 len = ofccl__get_le32(c->hdr + 16);
        uint64_t seq = ofccl__get_le64(c->hdr + 8);

        if (magic != UP_MAGIC || rank != (uint32_t)c->rank)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank %d sent a bad frame header for %s (magic 0x%08x, rank %u)",
                               c->rank, u->what, magic, rank);
        if (seq != u->seq)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_MISMATCH,
                               "rank %d is at exchange #%llu while the root is at #%llu: ranks "
                               "ran different sequences of bootstrap exchanges",
                               c->rank, (unsigned long long)seq, (unsigned long long)u->seq);
        if (len > u->slot || len > MAX_FRAME)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank %d sent %u bytes for %s, more than the %zu-byte slot", c->rank,
                               len, u->what, u->slot);
        u->lens[c->rank] = len;
        c->in = u->out + (size_t)c->rank * u->slot;
        c->in_len = len;
        c->in_off = 0;
        c->stage = 2;
        return 0;
    }
    c->stage = 0;
    return 0;
}

/* One phase of the root's exchange: run the connections' I/O, and on timeout
 * name the ranks whose connection is still busy ("TCP bootstrap <what> timed
 * out after N ms<phase>: <ranks> <fault>"). */
static int root_phase(ofccl__boot_t *b, tcp_boot_t *t, uint64_t deadline, up_arg_t *u,
                      const char *what, const char *phase, const char *fault, ofccl__err_t *e)
{
    int rc = ofccl__tcp_io_run(b, t->conns, b->size, deadline, up_step, u, what, e);

    if (rc == OFCCL_ERR_TIMEOUT) {
        char list[200];
        ofccl__tcp_rank_list(list, sizeof(list), t->conns, b->size, 1, ofccl__tcp_conn_busy);
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "TCP bootstrap %s timed out after %llu ms%s: %s %s", what,
                         (unsigned long long)b->timeout_ms, phase, list, fault);
    }
    return rc;
}

static int root_allgather(ofccl__boot_t *b, tcp_boot_t *t, uint64_t seq, const char *what,
                          const void *in, size_t len, uint8_t *out, size_t slot, size_t *lens,
                          uint64_t deadline, ofccl__err_t *e)
{
    up_arg_t u = {.seq = seq, .out = out, .slot = slot, .lens = lens, .what = what};
    uint8_t *frame = NULL;
    size_t total = FRAME_HDR + 4 * (size_t)b->size, off;
    int rc;

    if (len > 0)
        memmove(out, in, len);
    lens[0] = len;
    for (int r = 1; r < b->size; r++) {
        ofccl__tcp_conn_t *c = &t->conns[r];
        c->in = c->hdr;
        c->in_len = FRAME_HDR;
        c->in_off = 0;
        c->stage = 1;
        c->out_len = c->out_off = 0;
    }
    rc = root_phase(b, t, deadline, &u, what, "", "did not contribute (missing, stuck or dead)", e);
    if (rc != 0)
        goto err_abort;

    for (int r = 0; r < b->size; r++)
        total += lens[r];
    if (total > MAX_FRAME) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                         "TCP bootstrap %s would broadcast %zu bytes, more than the %u-byte "
                         "frame limit",
                         what, total, MAX_FRAME);
        goto err_abort;
    }
    frame = malloc(total);
    if (frame == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory for the %zu-byte broadcast of %s", total, what);
        goto err_abort;
    }
    ofccl__put_le32(frame, DOWN_MAGIC);
    ofccl__put_le32(frame + 4, ST_OK);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)b->size);
    ofccl__put_le32(frame + 20, (uint32_t)(total - FRAME_HDR));
    off = FRAME_HDR + 4 * (size_t)b->size;
    for (int r = 0; r < b->size; r++) {
        ofccl__put_le32(frame + FRAME_HDR + 4 * (size_t)r, (uint32_t)lens[r]);
        memcpy(frame + off, out + (size_t)r * slot, lens[r]);
        off += lens[r];
    }
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = frame;
        t->conns[r].out_len = total;
        t->conns[r].out_off = 0;
    }
    rc = root_phase(b, t, deadline, &u, what, " sending the result", "did not read it (stuck?)", e);
    if (rc != 0)
        goto err_abort;
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = NULL;
        t->conns[r].out_len = t->conns[r].out_off = 0;
    }
    free(frame);
    return 0;

err_abort:
    root_abort(t, DOWN_MAGIC, seq, b->size, e != NULL ? e->msg : "an exchange failed");
    fail_all(t);
    free(frame);
    return rc;
}

static int rank_allgather(ofccl__boot_t *b, tcp_boot_t *t, uint64_t seq, const char *what,
                          const void *in, size_t len, uint8_t *out, size_t slot, size_t *lens,
                          uint64_t deadline, ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t *frame = malloc(FRAME_HDR + len);
    down_arg_t d;
    size_t off;
    int rc;

    if (frame == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory sending %zu bytes for %s", len, what);
    ofccl__put_le32(frame, UP_MAGIC);
    ofccl__put_le32(frame + 4, (uint32_t)b->rank);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)len);
    ofccl__put_le32(frame + 20, 0);
    if (len > 0)
        memcpy(frame + FRAME_HDR, in, len);
    memset(&d, 0, sizeof(d));
    d.magic = DOWN_MAGIC;
    d.seq = seq;
    d.max_body = 4 * (size_t)b->size + (size_t)b->size * slot;
    d.what = what;
    c->out = frame;
    c->out_len = FRAME_HDR + len;
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    rc = ofccl__tcp_io_run(b, c, 1, deadline, down_step, &d, what, e);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    free(frame);
    if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "TCP bootstrap %s timed out after %llu ms waiting for the root (rank 0) "
                         "at %s: some rank is missing, stuck or dead",
                         what, (unsigned long long)b->timeout_ms, t->root);
    else if (rc == 0 && d.status != ST_OK)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_REMOTE_ERROR,
                         "the bootstrap root (rank 0) abandoned %s: %s", what, d.reason);
    if (rc != 0)
        goto err;

    /* The root is a peer like any other: its lengths are checked too. */
    off = 4 * (size_t)b->size;
    for (int r = 0; r < b->size; r++) {
        size_t l = ofccl__get_le32(d.body + 4 * (size_t)r);
        if (l > slot || l > d.body_len - off) {
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                             "the bootstrap root relayed %zu bytes from rank %d for %s: more than "
                             "the %zu-byte slot or than the frame holds",
                             l, r, what, slot);
            goto err;
        }
        if (l > 0)
            memcpy(out + (size_t)r * slot, d.body + off, l);
        lens[r] = l;
        off += l;
    }
    if (off != d.body_len) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                         "the bootstrap root sent %zu bytes for %s, its lengths add up to %zu",
                         d.body_len, what, off);
        goto err;
    }
    free(d.body);
    return 0;

err:
    free(d.body);
    fail_all(t);
    return rc;
}

static int tcp_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                         size_t *lens, ofccl__err_t *e)
{
    tcp_boot_t *t = b->impl;
    uint64_t seq, deadline;
    char what[48];

    if (len > slot || (len > 0 && in == NULL) || out == NULL || lens == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allgather: %zu bytes do not fit a %zu-byte slot", len, slot);
    if (len > MAX_FRAME || slot > MAX_FRAME)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allgather: a %zu-byte slot exceeds the %u-byte frame limit",
                           slot, MAX_FRAME);
    seq = b->seq;
    if (t->broken)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_STATE,
                           "the TCP bootstrap is unusable after a failed exchange (this is "
                           "exchange #%llu)",
                           (unsigned long long)seq);
    b->seq++;
    snprintf(what, sizeof(what), "exchange #%llu", (unsigned long long)seq);
    deadline = ofccl__now_ns() + b->timeout_ms * 1000000ull;
    if (b->size == 1) {
        if (len > 0)
            memmove(out, in, len);
        lens[0] = len;
        return 0;
    }
    if (b->rank == 0)
        return root_allgather(b, t, seq, what, in, len, out, slot, lens, deadline, e);
    return rank_allgather(b, t, seq, what, in, len, out, slot, lens, deadline, e);
}

/* A barrier is an exchange of nothing: it shares the ordering and error
 * handling of allgather, and a peer that skips it is caught by the seq. */
static int tcp_barrier(ofccl__boot_t *b, ofccl__err_t *e)
{
    size_t *lens = calloc((size_t)b->size, sizeof(*lens));
    uint8_t dummy;
    int rc;

    if (lens == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for a bootstrap barrier");
    rc = tcp_allgather(b, NULL, 0, &dummy, 0, lens, e);
    free(lens);
    return rc;
}

static void tcp_finalize(ofccl__boot_t *b)
{
    tcp_boot_t *t = b->impl;

    if (t == NULL)
        return;
    for (int r = 0; r < t->nconns; r++)
        ofccl__tcp_conn_close(&t->conns[r]);
    free(t->conns);
    free(t);
    b->impl = NULL;
}

static const ofccl__boot_ops_t tcp_ops = {
    .size = sizeof(ofccl__boot_ops_t),
    .name = "tcp",
    .allgather = tcp_allgather,
    .barrier = tcp_barrier,
    .finalize = tcp_finalize,
};

static int check_params(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e)
{
    if (p->root == NULL || p->root[0] == '\0')
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "the TCP bootstrap needs OFCCL_BOOT_ROOT=host:port (rank 0's "
                           "address), OFCCL_BOOT_RANK and OFCCL_BOOT_SIZE; OFCCL_BOOT_ROOT is "
                           "unset");
    if (strlen(p->root) >= sizeof(((tcp_boot_t *)0)->root))
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_ROOT is %zu characters long: too long for host:port",
                           strlen(p->root));
    if (p->size <= 0)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "the TCP bootstrap (OFCCL_BOOT_ROOT=%s) needs OFCCL_BOOT_SIZE, the "
                           "number of ranks (got %d)",
                           p->root, p->size);
    if (p->rank < 0)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "the TCP bootstrap (OFCCL_BOOT_ROOT=%s) needs OFCCL_BOOT_RANK, this "
                           "process's rank in [0, %d)",
                           p->root, p->size);
    if (p->rank >= p->size)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_RANK=%d is outside [0, OFCCL_BOOT_SIZE=%d)", p->rank,
                           p->size);
    return 0;
}

int ofccl__boot_tcp_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e)
{
    char host[128], port[8];
    struct addrinfo *ai = NULL;
    tcp_boot_t *t = NULL;
    char *hosts = NULL;
    uint64_t deadline = ofccl__now_ns() + b->timeout_ms * 1000000ull;
    int rc;

    rc = check_params(p, b, e);
    if (rc == 0)
        rc = parse_root(b, p->root, host, sizeof(host), port, sizeof(port), e);
    if (rc != 0)
        return rc;
    b->rank = p->rank;
    b->size = p->size;
    if (gethostname(b->hostname, sizeof(b->hostname) - 1) != 0)
        ofccl__strlcpy(b->hostname, "localhost", sizeof(b->hostname));
    b->hostname[sizeof(b->hostname) - 1] = '\0';
    snprintf(b->job, sizeof(b->job), "tcp:%s", p->root);

    t = calloc(1, sizeof(*t));
    hosts = calloc((size_t)b->size, HOST_LEN);
    if (t == NULL || hosts == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory opening the TCP bootstrap for %d ranks", b->size);
        goto err_free;
    }
    ofccl__strlcpy(t->root, p->root, sizeof(t->root));
    t->nconns = b->rank == 0 ? b->size : 1;
    t->conns = calloc((size_t)t->nconns, sizeof(*t->conns));
    if (t->conns == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory opening the TCP bootstrap for %d ranks", b->size);
        goto err_free;
    }
    for (int r = 0; r < t->nconns; r++) {
        t->conns[r].fd = -1;
        t->conns[r].rank = b->rank == 0 ? r : 0;
    }
    memcpy(hosts + (size_t)b->rank * HOST_LEN, b->hostname, HOST_LEN);

    if (b->size > 1) {
        rc = resolve(b, p->root, host, port, &ai, e);
        if (rc != 0)
            goto err_free;
        if (b->rank == 0) {
            rc = root_open(b, t, ai, deadline, hosts, e);
        } else {
            rc = connect_root(b, t, ai, deadline, &t->conns[0].fd, e);
            if (rc == 0) {
                ofccl__tcp_set_nodelay(t->conns[0].fd);
                rc = rank_rendezvous(b, t, deadline, hosts, e);
            }
        }
        freeaddrinfo(ai);
        if (rc != 0)
            goto err_free;
    }

    /* Local rank: position among the ranks on the same host, by rank. */
    b->local_rank = 0;
    b->local_size = 0;
    for (int r = 0; r < b->size; r++) {
        const char *h = hosts + (size_t)r * HOST_LEN;
        if (strncmp(h, b->hostname, HOST_LEN) == 0) {
            if (r < b->rank)
                b->local_rank++;
            b->local_size++;
        }
    }
    free(hosts);
    b->impl = t;
    b->ops = &tcp_ops;
    OFCCL__INFO(b->log, OFCCL__SUB_BOOT, "TCP rendezvous at %s complete: rank %d of %d", t->root,
                b->rank, b->size);
    return 0;

err_free:
    if (t != NULL) {
        for (int r = 0; r < t->nconns; r++)
            ofccl__tcp_conn_close(&t->conns[r]);
        free(t->conns);
    }
    free(t);
    free(hosts);
    return rc;
}
