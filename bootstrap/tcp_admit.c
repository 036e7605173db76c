/*
 * Admission at rank 0's side of the TCP rendezvous (tcp_root.c listens and
 * answers): accept connections on the root address and vet every one's
 * hello, and its proof of the job secret where one is set (tcp_auth.h),
 * until every rank has joined.
 *
 * Anything that can reach the port can connect: port scanners, health
 * checks, a rank of another job, a client that connects and never speaks.
 * None of them may keep a real rank out, so a connection that has not sent
 * a complete hello is only pending: it has HELLO_MS (or a quarter of the
 * bootstrap timeout, if shorter) to finish it or is closed; when the table of
 * pending connections is full, the oldest one is evicted to make room; one
 * that sends something other than an ofccl hello is closed at once. Each
 * pass of the loop accepts at most ACCEPT_BURST connections and reads only
 * what has arrived, so a flood costs the root time, never the rendezvous: a
 * real rank sends its hello right after connecting and it is read as soon as
 * it is there, typically right after accept().
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_proto.h"
#include "util.h"

#define MAX_PENDING 64 /* connections that have not sent a complete hello */
#define ACCEPT_BURST (MAX_PENDING / 4)
#define HELLO_MS 2000
#define HELLO_MS_MIN 10

enum { V_WAIT, V_HELLO, V_FOREIGN, V_REJECT, V_PROVEN, V_BADPROOF };

typedef struct pending {
    ofccl__tcp_conn_t c;      /* first member: the hello step gets &c; c.fd < 0 = free slot */
    uint64_t since, deadline; /* accepted at; closed if no complete hello by then (ns) */
    int verdict;              /* V_*: what the hello step decided */
    char why[160];            /* V_REJECT: the reason told to the peer */
    char id[OFCCL__HOST_ID_MAX + 1];
    /* the job secret's handshake (tcp_auth.h): the challenge sent, the
     * hello it binds, the proof received */
    bool challenged;
    uint8_t nr[OFCCL__AUTH_LEN];
    uint8_t hello[OFCCL__TCP_HELLO_LEN + OFCCL__HOST_ID_MAX];
    size_t hello_len;
    uint8_t proof[OFCCL__TCP_PROOF_LEN];
} pending_t;

typedef struct rendezvous {
    ofccl__boot_t *b;
    ofccl__tcp_boot_t *t;
    pending_t pend[MAX_PENDING];
    uint64_t hello_ns;
    char *hosts; /* [size][HOST_LEN]: hostnames, for messages (the caller's) */
    char **ids;  /* [size]: host identities (the caller's; strdup'ed here) */
    int joined;
    unsigned evicted;
} rdv_t;

/* A rendezvous answer other than the host table: REJECT or RETRY. */
static void send_status(ofccl__tcp_conn_t *c, int size, uint32_t status, const char *why)
{
    uint8_t frame[OFCCL__TCP_FRAME_HDR + OFCCL__TCP_MAX_REASON];
    size_t len = OFCCL__MIN(strlen(why), (size_t)OFCCL__TCP_MAX_REASON);

    ofccl__put_le32(frame, OFCCL__TCP_TABLE_MAGIC);
    ofccl__put_le32(frame + 4, status);
    ofccl__put_le64(frame + 8, 0);
    ofccl__put_le32(frame + 16, (uint32_t)size);
    ofccl__put_le32(frame + 20, (uint32_t)len);
    memcpy(frame + OFCCL__TCP_FRAME_HDR, why, len);
    (void)send(c->fd, frame, OFCCL__TCP_FRAME_HDR + len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Receive stages of a pending connection: the fixed header, then the host
 * identity. Decides a verdict instead of failing: a bad hello is the peer's
 * problem, never the rendezvous's. */
static int hello_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e)
{
    pending_t *p = (pending_t *)c;
    const rdv_t *v = arg;

    if (c->stage == 3) { /* the proof of the job secret */
        uint8_t want[OFCCL__AUTH_LEN];
        c->stage = 0;
        ofccl__auth_mac(&v->t->auth, "ofccl rank", p->nr, OFCCL__AUTH_LEN, p->proof + 8,
                        OFCCL__AUTH_LEN, p->hello, p->hello_len, want);
        if (ofccl__get_le32(p->proof) != OFCCL__TCP_PROOF_MAGIC ||
            ofccl__get_le32(p->proof + 4) != ofccl__get_le32(c->hdr + 8) ||
            !ofccl__auth_equal(want, p->proof + 8 + OFCCL__AUTH_LEN)) {
            p->verdict = V_BADPROOF;
            snprintf(p->why, sizeof(p->why),
                     "its proof of the job secret is wrong: its OFCCL_BOOT_SECRET_FILE holds "
                     "another secret than the root's");
        } else {
            p->verdict = V_PROVEN;
        }
        return 0;
    }
    if (c->stage == 1) {
        uint32_t magic = ofccl__get_le32(c->hdr);
        unsigned version = ofccl__get_le16(c->hdr + 4), idlen = ofccl__get_le16(c->hdr + 6);

        c->stage = 0;
        if (magic != OFCCL__TCP_HELLO_MAGIC) {
            p->verdict = V_FOREIGN;
        } else if (version != OFCCL__TCP_VERSION) {
            p->verdict = V_REJECT;
            snprintf(p->why, sizeof(p->why), "it speaks bootstrap protocol %u, the root %d",
                     version, OFCCL__TCP_VERSION);
        } else if (idlen == 0 || idlen > OFCCL__HOST_ID_MAX) {
            p->verdict = V_REJECT;
            snprintf(p->why, sizeof(p->why), "its hello carries a %u-byte host identity (1..%d)",
                     idlen, OFCCL__HOST_ID_MAX);
        } else {
            c->in = (uint8_t *)p->id;
            c->in_len = idlen;
            c->in_off = 0;
            c->stage = 2;
        }
        return 0;
    }
    c->stage = 0;
    p->id[c->in_len] = '\0';
    p->verdict = V_HELLO;
    for (size_t i = 0; i < c->in_len; i++) {
        if ((unsigned char)p->id[i] < 0x20 || (unsigned char)p->id[i] > 0x7e) {
            p->verdict = V_REJECT;
            snprintf(p->why, sizeof(p->why), "its host identity has a non-printable byte");
            break;
        }
    }
    return 0;
}

static void pending_close(pending_t *p)
{
    ofccl__tcp_conn_close(&p->c);
    p->challenged = false;
}

/* A 32-byte handshake frame (CHALLENGE or PROVEN) to a pending connection;
 * it fits an empty socket buffer, so it either goes whole or the peer is
 * not worth waiting for. */
static bool send_auth(pending_t *p, int size, uint32_t status, const uint8_t *body)
{
    uint8_t frame[OFCCL__TCP_FRAME_HDR + OFCCL__AUTH_LEN];

    ofccl__put_le32(frame, OFCCL__TCP_TABLE_MAGIC);
    ofccl__put_le32(frame + 4, status);
    ofccl__put_le64(frame + 8, 0);
    ofccl__put_le32(frame + 16, (uint32_t)size);
    ofccl__put_le32(frame + 20, OFCCL__AUTH_LEN);
    memcpy(frame + OFCCL__TCP_FRAME_HDR, body, OFCCL__AUTH_LEN);
    return send(p->c.fd, frame, sizeof(frame), MSG_NOSIGNAL | MSG_DONTWAIT) ==
           (ssize_t)sizeof(frame);
}

/* Reject `p`'s hello, telling the peer why (it is an ofccl rank). */
static void pending_reject(rdv_t *v, pending_t *p, const char *why)
{
    OFCCL__WARN(v->b->log, OFCCL__SUB_BOOT, "TCP bootstrap: rejecting a hello from %s: %s",
                p->c.addr, why);
    send_status(&p->c, v->b->size, OFCCL__TCP_ST_REJECT, why);
    pending_close(p);
}

/* Close `p` without its hello; should it be a rank after all, it is told to
 * connect again. What it sent is drained first (bounded), so that the close
 * is a FIN the rank reads after the answer, not a reset that discards it. */
static void pending_evict(rdv_t *v, pending_t *p, const char *why)
{
    char sink[512];

    (void)recv(p->c.fd, sink, sizeof(sink), MSG_DONTWAIT);
    send_status(&p->c, v->b->size, OFCCL__TCP_ST_RETRY, why);
    pending_close(p);
    v->evicted++;
}

/* With a job secret: challenge the hello's sender (its proof is read next,
 * within the same deadline as the hello). */
static int pending_challenge(rdv_t *v, pending_t *p)
{
    size_t idlen = strlen(p->id);

    memcpy(p->hello, p->c.hdr, OFCCL__TCP_HELLO_LEN);
    memcpy(p->hello + OFCCL__TCP_HELLO_LEN, p->id, idlen);
    p->hello_len = OFCCL__TCP_HELLO_LEN + idlen;
    if (ofccl__auth_nonce(p->nr) != 0 ||
        !send_auth(p, v->b->size, OFCCL__TCP_ST_CHALLENGE, p->nr)) {
        pending_close(p);
        return 0;
    }
    p->challenged = true;
    p->verdict = V_WAIT;
    p->c.in = p->proof;
    p->c.in_len = sizeof(p->proof);
    p->c.in_off = 0;
    p->c.stage = 3;
    return 0;
}

/* A complete hello arrived on `p` (and, with a job secret, its proof): adopt
 * it as its rank, challenge it, or reject it. */
static int pending_hello(rdv_t *v, pending_t *p, ofccl__err_t *e)
{
    ofccl__boot_t *b = v->b;
    ofccl__tcp_boot_t *t = v->t;
    uint32_t rank = ofccl__get_le32(p->c.hdr + 8), size = ofccl__get_le32(p->c.hdr + 12);
    char *host;

    p->why[0] = '\0';
    if (size != (uint32_t)b->size)
        snprintf(p->why, sizeof(p->why), "rank %u has OFCCL_BOOT_SIZE=%u, the root %d", rank, size,
                 b->size);
    else if (rank == 0 || rank >= (uint32_t)b->size)
        snprintf(p->why, sizeof(p->why),
                 "rank %u is not in [1, %d): two processes claim it or OFCCL_BOOT_RANK is wrong",
                 rank, b->size);
    else if (t->conns[rank].fd >= 0)
        snprintf(p->why, sizeof(p->why), "rank %u is already connected from %s", rank,
                 t->conns[rank].addr);
    if (p->why[0] != '\0') {
        pending_reject(v, p, p->why);
        return 0;
    }
    if (t->auth.on && !p->challenged)
        return pending_challenge(v, p);
    if (t->auth.on) {
        uint8_t mac[OFCCL__AUTH_LEN];
        ofccl__auth_mac(&t->auth, "ofccl root", p->proof + 8, OFCCL__AUTH_LEN, p->nr,
                        OFCCL__AUTH_LEN, p->hello, p->hello_len, mac);
        if (!send_auth(p, b->size, OFCCL__TCP_ST_PROVEN, mac)) {
            pending_close(p);
            return 0;
        }
        p->challenged = false;
    }
    v->ids[rank] = strdup(p->id);
    if (v->ids[rank] == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the host identity of rank %u", rank);
    host = v->hosts + (size_t)rank * OFCCL__TCP_HOST_LEN;
    memcpy(host, p->c.hdr + 16, OFCCL__TCP_HOST_LEN);
    host[OFCCL__TCP_HOST_LEN - 1] = '\0';
    t->conns[rank] = p->c;
    t->conns[rank].rank = (int)rank;
    t->conns[rank].in = NULL;
    t->conns[rank].in_len = t->conns[rank].in_off = 0;
    ofccl__tcp_set_nodelay(p->c.fd);
    OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT, "TCP bootstrap: rank %u joined from %s (%s, host %s)",
                 rank, p->c.addr, host, p->id);
    p->c.fd = -1; /* the connection now belongs to the rank */
    v->joined++;
    return 0;
}

/* Read what has arrived on `p` and act on a finished hello. */
static int pending_read(rdv_t *v, pending_t *p, ofccl__err_t *e)
{
    ofccl__boot_t *b = v->b;
    int err = 0;

    if (ofccl__tcp_conn_recv(b, &p->c, hello_step, v, &err, e) == OFCCL__TCP_CLOSED) {
        if (p->challenged)
            OFCCL__WARN(b->log, OFCCL__SUB_BOOT,
                        "TCP bootstrap: the connection from %s claiming rank %u closed before "
                        "it proved it knows the job secret (a process without "
                        "OFCCL_BOOT_SECRET_FILE?)",
                        p->c.addr, ofccl__get_le32(p->c.hdr + 8));
        else
            OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT,
                         "TCP bootstrap: a connection from %s closed before its hello", p->c.addr);
        pending_close(p);
        return 0;
    }
    switch (p->verdict) {
    case V_FOREIGN:
        OFCCL__WARN(b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap: ignoring a connection from %s that did not send an ofccl "
                    "hello (magic 0x%08x)",
                    p->c.addr, ofccl__get_le32(p->c.hdr));
        pending_close(p);
        return 0;
    case V_REJECT:
        pending_reject(v, p, p->why);
        return 0;
    case V_BADPROOF:
        pending_reject(v, p, p->why);
        return 0;
    case V_HELLO:
    case V_PROVEN:
        return pending_hello(v, p, e);
    default:
        return 0;
    }
}

/* Close the pending connections whose time for a hello is up, unless the
 * hello has just arrived. */
static int expire_idle(rdv_t *v, uint64_t now, ofccl__err_t *e)
{
    for (int i = 0; i < MAX_PENDING; i++) {
        pending_t *p = &v->pend[i];
        int rc;

        if (p->c.fd < 0 || now < p->deadline)
            continue;
        rc = pending_read(v, p, e);
        if (rc != 0)
            return rc;
        if (p->c.fd < 0)
            continue;
        OFCCL__INFO(v->b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap: closing the connection from %s: no complete ofccl hello "
                    "within %llu ms",
                    p->c.addr, (unsigned long long)(v->hello_ns / 1000000));
        pending_evict(v, p, "no complete hello in time");
    }
    return 0;
}

/* A free slot, or the oldest pending connection's, evicted to make room
 * (unless its hello has just arrived). */
static int pending_slot(rdv_t *v, uint64_t now, pending_t **out, ofccl__err_t *e)
{
    pending_t *oldest = NULL;
    int rc;

    for (int i = 0; i < MAX_PENDING; i++) {
        pending_t *p = &v->pend[i];
        if (p->c.fd < 0) {
            *out = p;
            return 0;
        }
        if (oldest == NULL || p->since < oldest->since)
            oldest = p;
    }
    rc = pending_read(v, oldest, e);
    if (rc != 0)
        return rc;
    if (oldest->c.fd >= 0) {
        OFCCL__INFO(v->b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap: evicting the connection from %s (open %llu ms without a "
                    "complete hello): %d connections are waiting for a hello",
                    oldest->c.addr, (unsigned long long)((now - oldest->since) / 1000000),
                    MAX_PENDING);
        pending_evict(v, oldest, "too many connections without a hello");
    }
    *out = oldest;
    return 0;
}

static int accept_some(rdv_t *v, int lfd, ofccl__err_t *e)
{
    for (int k = 0; k < ACCEPT_BURST; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC), rc;
        uint64_t now = ofccl__now_ns();
        pending_t *p;

        if (fd < 0)
            return 0; /* EAGAIN, or a connection that died while queued */
        rc = pending_slot(v, now, &p, e);
        if (rc != 0) {
            close(fd);
            return rc;
        }
        memset(p, 0, sizeof(*p));
        p->c.fd = fd;
        p->c.rank = -1;
        p->c.in = p->c.hdr;
        p->c.in_len = OFCCL__TCP_HELLO_LEN;
        p->c.stage = 1;
        p->since = now;
        p->deadline = now + v->hello_ns;
        ofccl__tcp_addr_str((struct sockaddr *)&ss, sl, p->c.addr, sizeof(p->c.addr));
        /* A rank sends its hello right after connecting: it is often here already. */
        rc = pending_read(v, p, e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Accept connections until every rank has sent a valid hello. */
static int rendezvous(rdv_t *v, int lfd, uint64_t deadline, ofccl__err_t *e)
{
    ofccl__boot_t *b = v->b;
    struct pollfd pfd[1 + MAX_PENDING];
    int slot[1 + MAX_PENDING];
    int rc = 0;

    for (int i = 0; i < MAX_PENDING; i++)
        v->pend[i].c.fd = -1;
    while (rc == 0 && v->joined < b->size - 1) {
        uint64_t now = ofccl__now_ns();
        int left = ofccl__tcp_ms_left(deadline), n = 1;

        if (left == 0) {
            char list[200];
            ofccl__tcp_rank_list(list, sizeof(list), v->t->conns, b->size, 1,
                                 ofccl__tcp_conn_missing);
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                             "%s of %d did not connect to %s within %llu ms", list, b->size,
                             v->t->root, (unsigned long long)b->timeout_ms);
            break;
        }
        rc = expire_idle(v, now, e);
        if (rc != 0)
            break;
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < MAX_PENDING; i++) {
            pending_t *p = &v->pend[i];
            if (p->c.fd < 0)
                continue;
            pfd[n] = (struct pollfd){.fd = p->c.fd, .events = POLLIN};
            slot[n++] = i;
            left = OFCCL__MIN(left, ofccl__tcp_ms_left(p->deadline) + 1);
        }
        if (poll(pfd, (nfds_t)n, left) < 0) {
            if (errno == EINTR)
                continue;
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INTERNAL,
                             "poll() failed in the TCP rendezvous: %s", strerror(errno));
            break;
        }
        for (int k = 1; k < n && rc == 0; k++)
            if (pfd[k].revents != 0)
                rc = pending_read(v, &v->pend[slot[k]], e);
        if (rc == 0 && (pfd[0].revents & POLLIN))
            rc = accept_some(v, lfd, e);
    }
    for (int i = 0; i < MAX_PENDING; i++)
        pending_close(&v->pend[i]);
    if (v->evicted > 0)
        OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap: %u connections without a complete hello were closed during "
                    "the rendezvous",
                    v->evicted);
    return rc;
}

int ofccl__tcp_admit(ofccl__boot_t *b, ofccl__tcp_boot_t *t, int lfd, uint64_t deadline,
                     char *hosts, char **ids, ofccl__err_t *e)
{
    rdv_t *v = calloc(1, sizeof(*v));
    int rc;

    if (v == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the TCP rendezvous of %d ranks", b->size);
    v->b = b;
    v->t = t;
    v->hosts = hosts;
    v->ids = ids;
    v->hello_ns =
        OFCCL__MAX(OFCCL__MIN((uint64_t)HELLO_MS, b->timeout_ms / 4), (uint64_t)HELLO_MS_MIN) *
        1000000ull;
    rc = rendezvous(v, lfd, deadline, e);
    free(v);
    return rc;
}
