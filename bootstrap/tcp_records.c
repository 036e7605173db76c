/*
 * The TCP rendezvous's record server (lazy exchange). A publish sends every
 * rank's record to the root, which keeps them and answers with the port of
 * this server; a rank reads one peer's record on demand over its own
 * connection to the server (opened on its first get and kept), instead of
 * the root relaying all N records to every rank (N² bytes at the root).
 *
 * The server is a thread of rank 0's process, so it answers while rank 0's
 * caller is busy elsewhere. It listens on the root address's host (port
 * chosen by the kernel), serves requests in arrival order, and runs until
 * the bootstrap is finalized: a rank that needs a record after rank 0 closed
 * its context gets an error naming the root. With a job secret, each
 * connection starts with the server's nonce and is served only once the
 * client proved it knows the secret (tcp_auth.h).
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_proto.h"
#include "util.h"

#define MAX_TABLES 4096 /* published record sets kept (one per lazily created communicator) */
#define SEND_MS 1000    /* how long one answer may wait for room in the socket */

typedef struct rec_table {
    uint64_t tag;
    size_t slot;
    uint8_t *data; /* [size * slot] */
    size_t *lens;  /* [size] */
} rec_table_t;

typedef struct client {
    int fd;
    uint8_t hdr[OFCCL__TCP_FRAME_HDR];
    size_t got;
    bool authed;                 /* proved the job secret (or there is none) */
    uint8_t ns[OFCCL__AUTH_LEN]; /* the nonce it was sent */
    uint8_t proof[OFCCL__TCP_RECAUTH_LEN];
} client_t;

struct ofccl__tcp_records {
    pthread_mutex_t lock; /* tables, ntables, counters */
    rec_table_t tables[MAX_TABLES];
    int ntables;
    int size;
    const ofccl__log_t *log;
    /* root: the server */
    int lfd, wake[2], port, running;
    pthread_t thread;
    uint64_t served, bytes_out;
    ofccl__auth_t auth; /* the job secret's key (both sides), if one is set */
    /* others: the server's port and the connection to it */
    int srv_port;
    ofccl__tcp_conn_t conn;
};

static ofccl__tcp_records_t *records_new(ofccl__boot_t *b, ofccl__tcp_boot_t *t, ofccl__err_t *e)
{
    ofccl__tcp_records_t *r;

    if (t->rec != NULL)
        return t->rec;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                    "out of memory for the bootstrap's record server");
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->size = b->size;
    r->log = b->log;
    r->lfd = r->wake[0] = r->wake[1] = -1;
    r->conn.fd = -1;
    r->auth = t->auth;
    t->rec = r;
    return r;
}

/* Rank `want`'s record under `tag` into a malloc'd down frame; *len its size. */
static uint8_t *answer(ofccl__tcp_records_t *r, uint64_t tag, uint32_t want, size_t *len)
{
    const rec_table_t *tb = NULL;
    char why[OFCCL__TCP_MAX_REASON];
    uint8_t *f;
    size_t body;
    int status = OFCCL__TCP_ST_OK;

    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->ntables && tb == NULL; i++)
        if (r->tables[i].tag == tag)
            tb = &r->tables[i];
    if (tb == NULL || want >= (uint32_t)r->size) {
        status = OFCCL__TCP_ST_REJECT;
        snprintf(why, sizeof(why), "the root holds no record of rank %u under tag %llu", want,
                 (unsigned long long)tag);
        body = strlen(why);
    } else {
        body = tb->lens[want];
    }
    f = malloc(OFCCL__TCP_FRAME_HDR + body + 1);
    if (f != NULL) {
        ofccl__put_le32(f, OFCCL__TCP_REC_MAGIC);
        ofccl__put_le32(f + 4, (uint32_t)status);
        ofccl__put_le64(f + 8, tag);
        ofccl__put_le32(f + 16, (uint32_t)r->size);
        ofccl__put_le32(f + 20, (uint32_t)body);
        memcpy(f + OFCCL__TCP_FRAME_HDR,
               status == OFCCL__TCP_ST_OK ? tb->data + (size_t)want * tb->slot : (uint8_t *)why,
               body);
        r->served += status == OFCCL__TCP_ST_OK;
        r->bytes_out += OFCCL__TCP_FRAME_HDR + body;
    }
    pthread_mutex_unlock(&r->lock);
    *len = OFCCL__TCP_FRAME_HDR + body;
    return f;
}

/* Send all of f, waiting at most SEND_MS for room; 0 or -1. */
static int send_all(int fd, const uint8_t *f, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(fd, f + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, SEND_MS) <= 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* With a job secret: read a client's proof; -1 when it is wrong (closed). */
static int client_proof(ofccl__tcp_records_t *r, client_t *c)
{
    ssize_t n = recv(c->fd, c->proof + c->got, sizeof(c->proof) - c->got, MSG_DONTWAIT);
    uint8_t want[OFCCL__AUTH_LEN];

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return -1;
    if (n < 0 || (c->got += (size_t)n) < sizeof(c->proof))
        return 0;
    c->got = 0;
    ofccl__auth_mac(&r->auth, "ofccl records", c->ns, OFCCL__AUTH_LEN, c->proof + 4, 4, NULL, 0,
                    want);
    if (ofccl__get_le32(c->proof) != OFCCL__TCP_RECAUTH_MAGIC ||
        !ofccl__auth_equal(want, c->proof + 8)) {
        OFCCL__WARN(r->log, OFCCL__SUB_BOOT,
                    "record server: refusing a connection that did not prove it knows the job "
                    "secret");
        return -1;
    }
    c->authed = true;
    return 0;
}

/* A new client: with a job secret, its nonce goes first. */
static int client_open(ofccl__tcp_records_t *r, client_t *c, int fd)
{
    uint8_t f[OFCCL__TCP_FRAME_HDR + OFCCL__AUTH_LEN];

    *c = (client_t){.fd = fd, .authed = !r->auth.on};
    if (!r->auth.on)
        return 0;
    ofccl__put_le32(f, OFCCL__TCP_REC_MAGIC);
    ofccl__put_le32(f + 4, OFCCL__TCP_ST_CHALLENGE);
    ofccl__put_le64(f + 8, 0);
    ofccl__put_le32(f + 16, (uint32_t)r->size);
    ofccl__put_le32(f + 20, OFCCL__AUTH_LEN);
    if (ofccl__auth_nonce(c->ns) != 0)
        return -1;
    memcpy(f + OFCCL__TCP_FRAME_HDR, c->ns, OFCCL__AUTH_LEN);
    return send_all(fd, f, sizeof(f));
}

/* Read what has arrived on a client; answer a complete request. -1: close it. */
static int serve_client(ofccl__tcp_records_t *r, client_t *c)
{
    if (!c->authed)
        return client_proof(r, c);
    ssize_t n = recv(c->fd, c->hdr + c->got, sizeof(c->hdr) - c->got, MSG_DONTWAIT);
    uint8_t *f;
    size_t len;
    int rc;

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return -1;
    if (n < 0)
        return 0;
    c->got += (size_t)n;
    if (c->got < sizeof(c->hdr))
        return 0;
    c->got = 0;
    if (ofccl__get_le32(c->hdr) != OFCCL__TCP_GET_MAGIC)
        return -1; /* not one of ours */
    f = answer(r, ofccl__get_le64(c->hdr + 8), ofccl__get_le32(c->hdr + 16), &len);
    rc = f != NULL ? send_all(c->fd, f, len) : -1;
    free(f);
    return rc;
}

static void *server_main(void *arg)
{
    ofccl__tcp_records_t *r = arg;
    client_t *cl = calloc((size_t)r->size + 1, sizeof(*cl));
    struct pollfd *pf = calloc((size_t)r->size + 3, sizeof(*pf));
    int ncl = 0;

    if (cl == NULL || pf == NULL) {
        OFCCL__WARN(r->log, OFCCL__SUB_BOOT, "record server: out of memory; not serving");
        goto out;
    }
    for (;;) {
        int np = 2;

        pf[0] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = ncl <= r->size ? r->lfd : -1, .events = POLLIN};
        for (int i = 0; i < ncl; i++)
            pf[np++] = (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
        if (poll(pf, (nfds_t)np, -1) < 0 && errno != EINTR)
            break;
        if (pf[0].revents != 0)
            break; /* finalize */
        for (int i = ncl - 1; i >= 0; i--)
            if (pf[2 + i].revents != 0 && serve_client(r, &cl[i]) != 0) {
                close(cl[i].fd);
                cl[i] = cl[--ncl];
            }
        if (pf[1].revents & POLLIN) {
            int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                ofccl__tcp_set_nodelay(fd);
                if (client_open(r, &cl[ncl], fd) == 0)
                    ncl++;
                else
                    close(fd);
            }
        }
    }
out:
    for (int i = 0; i < ncl; i++)
        close(cl[i].fd);
    free(cl);
    free(pf);
    return NULL;
}

static void set_port(struct sockaddr_storage *sa, int port)
{
    if (sa->ss_family == AF_INET)
        ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
    else if (sa->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
}

static int server_start(ofccl__boot_t *b, ofccl__tcp_boot_t *t, ofccl__tcp_records_t *r,
                        ofccl__err_t *e)
{
    struct sockaddr_storage sa = t->root_sa;
    socklen_t sl = t->root_salen;
    int fd, err;

    set_port(&sa, 0);
    fd = socket(sa.ss_family, t->root_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sl) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || pipe(r->wake) != 0) {
        err = errno;
        if (fd >= 0)
            close(fd);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "the bootstrap root cannot start its record server on %s's host: %s",
                           t->root, strerror(err));
    }
    r->lfd = fd;
    r->port = sa.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&sa)->sin_port)
                                      : ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    if ((err = pthread_create(&r->thread, NULL, server_main, r)) != 0)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "the bootstrap root cannot start its record server thread: %s",
                           strerror(err));
    r->running = 1;
    OFCCL__INFO(b->log, OFCCL__SUB_BOOT, "TCP bootstrap record server listening on port %d",
                r->port);
    return 0;
}

int ofccl__tcp_rec_store(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t tag, uint8_t *data,
                         size_t slot, size_t *lens, int *port, ofccl__err_t *e)
{
    ofccl__tcp_records_t *r = records_new(b, t, e);
    int rc = r != NULL ? 0 : OFCCL_ERR_NO_MEMORY;

    if (rc == 0 && !r->running)
        rc = server_start(b, t, r, e);
    if (rc == 0) {
        pthread_mutex_lock(&r->lock);
        if (r->ntables == MAX_TABLES) {
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_RESOURCE,
                             "the bootstrap root holds %d published record sets already",
                             MAX_TABLES);
        } else {
            r->tables[r->ntables++] = (rec_table_t){tag, slot, data, lens};
            data = NULL;
            lens = NULL;
        }
        pthread_mutex_unlock(&r->lock);
        *port = r->port;
    }
    free(data);
    free(lens);
    return rc;
}

int ofccl__tcp_rec_port(ofccl__boot_t *b, ofccl__tcp_boot_t *t, int port, ofccl__err_t *e)
{
    ofccl__tcp_records_t *r = records_new(b, t, e);

    if (r == NULL)
        return OFCCL_ERR_NO_MEMORY;
    if (port <= 0 || port > 65535)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                           "the bootstrap root named record server port %d", port);
    r->srv_port = port;
    return 0;
}

static int local_get(ofccl__boot_t *b, ofccl__tcp_records_t *r, uint64_t tag, int rank, void *out,
                     size_t cap, size_t *len, ofccl__err_t *e)
{
    int found = 0;

    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->ntables && !found; i++)
        if (r->tables[i].tag == tag) {
            *len = OFCCL__MIN(r->tables[i].lens[rank], cap);
            memcpy(out, r->tables[i].data + (size_t)rank * r->tables[i].slot, *len);
            found = 1;
        }
    pthread_mutex_unlock(&r->lock);
    if (!found)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_MISMATCH,
                           "the bootstrap root holds no record of rank %d under tag %llu", rank,
                           (unsigned long long)tag);
    return 0;
}

/* With a job secret: read the server's nonce, answer with this rank's proof. */
static int prove_to_server(ofccl__boot_t *b, ofccl__tcp_boot_t *t, ofccl__tcp_records_t *r,
                           uint64_t deadline, ofccl__err_t *e)
{
    uint8_t proof[OFCCL__TCP_RECAUTH_LEN];
    ofccl__tcp_down_t d;
    int rc;

    memset(&d, 0, sizeof(d));
    d.magic = OFCCL__TCP_REC_MAGIC;
    d.max_body = OFCCL__AUTH_LEN;
    d.what = "the record server's challenge";
    r->conn.in = r->conn.hdr;
    r->conn.in_len = OFCCL__TCP_FRAME_HDR;
    r->conn.in_off = 0;
    r->conn.stage = 1;
    rc = ofccl__tcp_io_run(b, &r->conn, 1, deadline, ofccl__tcp_down_step, &d, d.what, e);
    if (rc == 0 && d.status != OFCCL__TCP_ST_CHALLENGE)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                         "rank %d: the bootstrap root's record server (%s) did not ask for the "
                         "job secret",
                         b->rank, t->root);
    if (rc == 0) {
        ofccl__put_le32(proof, OFCCL__TCP_RECAUTH_MAGIC);
        ofccl__put_le32(proof + 4, (uint32_t)b->rank);
        ofccl__auth_mac(&r->auth, "ofccl records", d.body, OFCCL__AUTH_LEN, proof + 4, 4, NULL, 0,
                        proof + 8);
        r->conn.out = proof;
        r->conn.out_len = sizeof(proof);
        r->conn.out_off = 0;
        r->conn.stage = 0;
        rc = ofccl__tcp_io_run(b, &r->conn, 1, deadline, ofccl__tcp_down_step, &d, d.what, e);
        r->conn.out = NULL;
    }
    free(d.body);
    if (rc != 0)
        ofccl__tcp_conn_close(&r->conn);
    return rc;
}

/* Connect to the record server (once; the connection is kept). */
static int connect_server(ofccl__boot_t *b, ofccl__tcp_boot_t *t, ofccl__tcp_records_t *r,
                          uint64_t deadline, ofccl__err_t *e)
{
    struct sockaddr_storage sa = t->root_sa;
    struct addrinfo a = {.ai_family = sa.ss_family,
                         .ai_socktype = t->root_socktype,
                         .ai_addr = (struct sockaddr *)&sa,
                         .ai_addrlen = t->root_salen};
    int err = 0;

    if (r->conn.fd >= 0)
        return 0;
    set_port(&sa, r->srv_port);
    r->conn.fd = ofccl__tcp_connect_once(&a, ofccl__tcp_ms_left(deadline), &err);
    if (r->conn.fd < 0)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "rank %d cannot reach the bootstrap root's record server (%s, port "
                           "%d): %s (has rank 0 closed its context?)",
                           b->rank, t->root, r->srv_port, strerror(err));
    ofccl__tcp_set_nodelay(r->conn.fd);
    r->conn.rank = 0;
    return r->auth.on ? prove_to_server(b, t, r, deadline, e) : 0;
}

int ofccl__tcp_get(ofccl__boot_t *b, uint64_t tag, int rank, void *out, size_t cap, size_t *len,
                   ofccl__err_t *e)
{
    ofccl__tcp_boot_t *t = b->impl;
    ofccl__tcp_records_t *r = t->rec;
    uint64_t deadline = ofccl__now_ns() + b->timeout_ms * 1000000ull;
    uint8_t req[OFCCL__TCP_FRAME_HDR];
    ofccl__tcp_down_t d;
    char what[64];
    int rc;

    if (r == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_STATE,
                           "bootstrap get before any publish");
    if (b->rank == 0)
        return local_get(b, r, tag, rank, out, cap, len, e);
    rc = connect_server(b, t, r, deadline, e);
    if (rc != 0)
        return rc;
    snprintf(what, sizeof(what), "reading rank %d's record %llu", rank, (unsigned long long)tag);
    ofccl__put_le32(req, OFCCL__TCP_GET_MAGIC);
    ofccl__put_le32(req + 4, (uint32_t)b->rank);
    ofccl__put_le64(req + 8, tag);
    ofccl__put_le32(req + 16, (uint32_t)rank);
    ofccl__put_le32(req + 20, 0);
    memset(&d, 0, sizeof(d));
    d.magic = OFCCL__TCP_REC_MAGIC;
    d.seq = tag;
    d.max_body = cap;
    d.what = what;
    r->conn.out = req;
    r->conn.out_len = sizeof(req);
    r->conn.out_off = 0;
    r->conn.in = r->conn.hdr;
    r->conn.in_len = OFCCL__TCP_FRAME_HDR;
    r->conn.in_off = 0;
    r->conn.stage = 1;
    rc = ofccl__tcp_io_run(b, &r->conn, 1, deadline, ofccl__tcp_down_step, &d, what, e);
    r->conn.out = NULL;
    if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "%s from the bootstrap root's record server timed out after %llu ms", what,
                         (unsigned long long)b->timeout_ms);
    else if (rc == 0 && d.status != OFCCL__TCP_ST_OK)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_MISMATCH, "%s: %s", what, d.reason);
    if (rc == 0) {
        *len = d.body_len;
        memcpy(out, d.body, d.body_len);
    } else {
        ofccl__tcp_conn_close(&r->conn); /* out of step: a later get connects again */
    }
    free(d.body);
    return rc;
}

/* Root: keep serving until every rank has closed its bootstrap (its
 * rendezvous connection reads EOF), within the bootstrap timeout: a rank
 * still finishing a collective may need a record after rank 0 is done. */
static void wait_ranks_gone(ofccl__boot_t *b, ofccl__tcp_boot_t *t)
{
    uint64_t t0 = ofccl__now_ns(), deadline = t0 + b->timeout_ms * 1000000ull;
    struct pollfd *pf = calloc((size_t)t->nconns, sizeof(*pf));
    int open = 0;

    while (pf != NULL) {
        int n = 0, ms = ofccl__tcp_ms_left(deadline);

        for (int i = 1; i < t->nconns; i++)
            if (t->conns[i].fd >= 0)
                pf[n++] = (struct pollfd){.fd = t->conns[i].fd, .events = POLLIN};
        open = n;
        if (n == 0 || ms == 0 || poll(pf, (nfds_t)n, ms) < 0)
            break;
        for (int i = 1; i < t->nconns; i++) {
            uint8_t junk[256];
            ssize_t got;
            if (t->conns[i].fd < 0)
                continue;
            got = recv(t->conns[i].fd, junk, sizeof(junk), MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                ofccl__tcp_conn_close(&t->conns[i]);
        }
    }
    free(pf);
    OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                "TCP bootstrap root: served records until %s, %.1f ms after it was closed",
                open == 0 ? "every rank had closed its bootstrap" : "the bootstrap timeout",
                (double)(ofccl__now_ns() - t0) / 1e6);
}

void ofccl__tcp_rec_close(ofccl__boot_t *b, ofccl__tcp_boot_t *t)
{
    ofccl__tcp_records_t *r = t->rec;

    if (r == NULL)
        return;
    if (r->running) {
        if (b->rank == 0)
            wait_ranks_gone(b, t);
        ssize_t n = write(r->wake[1], "x", 1);
        (void)n;
        pthread_join(r->thread, NULL);
        OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap root: the record server served %llu records (%llu bytes)",
                    (unsigned long long)r->served, (unsigned long long)r->bytes_out);
    }
    if (r->lfd >= 0)
        close(r->lfd);
    for (int i = 0; i < 2; i++)
        if (r->wake[i] >= 0)
            close(r->wake[i]);
    ofccl__tcp_conn_close(&r->conn);
    for (int i = 0; i < r->ntables; i++) {
        free(r->tables[i].data);
        free(r->tables[i].lens);
    }
    pthread_mutex_destroy(&r->lock);
    ofccl__auth_clear(&r->auth);
    free(r);
    t->rec = NULL;
}
