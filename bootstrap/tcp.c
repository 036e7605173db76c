/*
 * TCP rendezvous bootstrap, for launchers that give no PMIx server (torchrun
 * style: a root address, a rank and a size) and for tests that start ranks in
 * other network namespaces. This file holds the parameters and the ranks'
 * side of the rendezvous; rank 0's side is tcp_root.c and tcp_admit.c, the exchanges after it
 * tcp_exchange.c, the frames tcp_proto.h.
 *
 * Rank 0 listens on the root address; every other rank connects (retrying
 * until the deadline, since rank 0 may start last, and again when the root
 * answers RETRY) and sends a hello with its host identity. Rank 0 answers
 * everyone with the host table once all have joined, and keeps the
 * connections for the exchanges. Every frame is length-checked before
 * anything is allocated, every wait is bounded by the deadline, and a root
 * that fails tells the others why before closing, so nobody waits for nothing.
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

#include "tcp_proto.h"
#include "util.h"

#define CONNECT_SLICE_MS 2000
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 500

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

/* ---- other ranks ------------------------------------------------------ */

static int connect_root(ofccl__boot_t *b, ofccl__tcp_boot_t *t, const struct addrinfo *ai,
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

/* Adopt the root's host table: u32 host_of[size], then a 64-byte name per
 * host. The root is a peer like any other: the numbering is checked (hosts by
 * their lowest rank, so each entry is a known host or the next new one), and
 * the length against it, before anything is used; names are made printable. */
static int adopt_table(ofccl__boot_t *b, ofccl__tcp_boot_t *t, const uint8_t *body, size_t len,
                       ofccl__err_t *e)
{
    const uint8_t *names = body + 4 * (size_t)b->size;
    char *copy;
    int *host_of = malloc((size_t)b->size * sizeof(*host_of));
    int nhosts = 0;

    if (host_of == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the host table of %d ranks", b->size);
    for (int r = 0; r < b->size; r++) {
        uint32_t h = ofccl__get_le32(body + 4 * (size_t)r);
        if (h > (uint32_t)nhosts) {
            free(host_of);
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "the bootstrap root at %s sent a host table placing rank %d on "
                               "host %u before host %d was named",
                               t->root, r, h, nhosts);
        }
        nhosts += h == (uint32_t)nhosts;
        host_of[r] = (int)h;
    }
    if (len != 4 * (size_t)b->size + (size_t)OFCCL__TCP_HOST_LEN * (size_t)nhosts) {
        free(host_of);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                           "the bootstrap root at %s sent a %zu-byte host table for %d ranks on "
                           "%d hosts, expected %zu",
                           t->root, len, b->size, nhosts,
                           4 * (size_t)b->size + (size_t)OFCCL__TCP_HOST_LEN * (size_t)nhosts);
    }
    free(b->host_of);
    b->host_of = host_of;
    b->nhosts = nhosts;
    /* Names are indexed by rank in ofccl__boot_set_host_names: put each host's
     * name at its lowest rank's place. */
    copy = calloc((size_t)b->size, OFCCL__TCP_HOST_LEN);
    if (copy == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the names of %d hosts", nhosts);
    for (int r = 0, seen = 0; r < b->size; r++)
        if (host_of[r] == seen)
            memcpy(copy + (size_t)r * OFCCL__TCP_HOST_LEN,
                   names + (size_t)seen++ * OFCCL__TCP_HOST_LEN, OFCCL__TCP_HOST_LEN);
    if (ofccl__boot_set_host_names(b, copy, OFCCL__TCP_HOST_LEN) != 0) {
        free(copy);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the names of %d hosts", nhosts);
    }
    free(copy);
    return 0;
}

/* Hello out, host table back; *retry = 1 when the root asks for a new
 * connection instead. */
/* The rank's side of the job secret's handshake, after the root's first
 * answer `d` to its hello: a CHALLENGE is answered with this rank's PROOF,
 * and the root's PROVEN checked before anything else is sent; *d then holds
 * the root's next answer (the host table, or why not). Without a secret, a
 * CHALLENGE is refused naming the setting. */
static int rank_prove(ofccl__boot_t *b, ofccl__tcp_boot_t *t, const uint8_t *hello, size_t len,
                      ofccl__tcp_down_t *d, uint64_t deadline, ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t proof[OFCCL__TCP_PROOF_LEN], nr[OFCCL__AUTH_LEN], want[OFCCL__AUTH_LEN];
    int rc;

    if (d->status == OFCCL__TCP_ST_CHALLENGE && !t->auth.on)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "rank %d: the bootstrap root at %s asks for the job secret: set "
                           "OFCCL_BOOT_SECRET_FILE to the job's secret file on this rank",
                           b->rank, t->root);
    if (d->status == OFCCL__TCP_ST_PROVEN || (t->auth.on && d->status == OFCCL__TCP_ST_OK))
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "rank %d: the bootstrap root at %s answered without asking for the job "
                           "secret: it has no OFCCL_BOOT_SECRET_FILE, or it is not this job's "
                           "root; this rank has one and does not join",
                           b->rank, t->root);
    if (d->status != OFCCL__TCP_ST_CHALLENGE)
        return 0; /* no secret on either side, or REJECT, RETRY, ABORT */
    memcpy(nr, d->body, OFCCL__AUTH_LEN);
    free(d->body);
    d->body = NULL;
    ofccl__put_le32(proof, OFCCL__TCP_PROOF_MAGIC);
    ofccl__put_le32(proof + 4, (uint32_t)b->rank);
    if (ofccl__auth_nonce(proof + 8) != 0)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INTERNAL,
                           "rank %d: no random nonce for the job secret's handshake", b->rank);
    ofccl__auth_mac(&t->auth, "ofccl rank", nr, OFCCL__AUTH_LEN, proof + 8, OFCCL__AUTH_LEN, hello,
                    len, proof + 8 + OFCCL__AUTH_LEN);
    c->out = proof;
    c->out_len = sizeof(proof);
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = OFCCL__TCP_FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    rc = ofccl__tcp_io_run(b, c, 1, deadline, ofccl__tcp_down_step, d, d->what, e);
    c->out = NULL;
    if (rc != 0 || d->status != OFCCL__TCP_ST_PROVEN)
        return rc; /* REJECT (the root found the proof wrong) and the rest: as usual */
    ofccl__auth_mac(&t->auth, "ofccl root", proof + 8, OFCCL__AUTH_LEN, nr, OFCCL__AUTH_LEN, hello,
                    len, want);
    if (!ofccl__auth_equal(want, d->body))
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "rank %d: the bootstrap root at %s did not prove it knows the job "
                           "secret: it is not this job's root, or its OFCCL_BOOT_SECRET_FILE "
                           "holds another secret; this rank does not join",
                           b->rank, t->root);
    free(d->body);
    d->body = NULL;
    c->in = c->hdr;
    c->in_len = OFCCL__TCP_FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    return ofccl__tcp_io_run(b, c, 1, deadline, ofccl__tcp_down_step, d, d->what, e);
}

static int rank_rendezvous(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t deadline, int *retry,
                           ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t hello[OFCCL__TCP_HELLO_LEN + OFCCL__HOST_ID_MAX];
    size_t idlen = strlen(b->host_id);
    ofccl__tcp_down_t d;
    int rc;

    memset(hello, 0, sizeof(hello));
    ofccl__put_le32(hello, OFCCL__TCP_HELLO_MAGIC);
    ofccl__put_le16(hello + 4, OFCCL__TCP_VERSION);
    ofccl__put_le16(hello + 6, (uint16_t)idlen);
    ofccl__put_le32(hello + 8, (uint32_t)b->rank);
    ofccl__put_le32(hello + 12, (uint32_t)b->size);
    memcpy(hello + 16, b->hostname, OFCCL__TCP_HOST_LEN);
    memcpy(hello + OFCCL__TCP_HELLO_LEN, b->host_id, idlen);
    memset(&d, 0, sizeof(d));
    d.magic = OFCCL__TCP_TABLE_MAGIC;
    d.seq = 0;
    d.max_body = (4 + (size_t)OFCCL__TCP_HOST_LEN) * (size_t)b->size; /* at most a host per rank */
    d.what = "the rendezvous";
    c->out = hello;
    c->out_len = OFCCL__TCP_HELLO_LEN + idlen;
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = OFCCL__TCP_FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    rc = ofccl__tcp_io_run(b, c, 1, deadline, ofccl__tcp_down_step, &d, d.what, e);
    c->out = NULL;
    if (rc == 0)
        rc = rank_prove(b, t, hello, OFCCL__TCP_HELLO_LEN + idlen, &d, deadline, e);
    *retry = rc == 0 && d.status == OFCCL__TCP_ST_RETRY;
    if (*retry)
        OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                    "rank %d: the bootstrap root at %s closed this rank's connection before "
                    "reading its hello (%s): connecting again",
                    b->rank, t->root, d.reason);
    else if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "rank %d reached the bootstrap root at %s, but the rendezvous did not "
                         "complete within %llu ms: some other rank did not connect",
                         b->rank, t->root, (unsigned long long)b->timeout_ms);
    else if (rc == 0 && d.status != OFCCL__TCP_ST_OK)
        rc = ofccl__fail(
            b->log, OFCCL__SUB_BOOT, e,
            d.status == OFCCL__TCP_ST_REJECT ? OFCCL_ERR_CONFIG : OFCCL_ERR_REMOTE_ERROR,
            "the bootstrap root at %s %s rank %d: %s", t->root,
            d.status == OFCCL__TCP_ST_REJECT ? "rejected" : "gave up on the rendezvous of", b->rank,
            d.reason);
    else if (rc == 0 && d.body_len < 4 * (size_t)b->size)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                         "the bootstrap root at %s sent a %zu-byte host table, expected at "
                         "least %zu",
                         t->root, d.body_len, 4 * (size_t)b->size);
    if (rc == 0 && !*retry)
        rc = adopt_table(b, t, d.body, d.body_len, e);
    free(d.body);
    return rc;
}

/* Connect and join, again as often as the root asks, until the deadline. */
static int rank_join(ofccl__boot_t *b, ofccl__tcp_boot_t *t, const struct addrinfo *ai,
                     uint64_t deadline, ofccl__err_t *e)
{
    int retry = 1, rc = 0;

    while (rc == 0 && retry) {
        ofccl__tcp_conn_close(&t->conns[0]);
        rc = connect_root(b, t, ai, deadline, &t->conns[0].fd, e);
        if (rc != 0)
            break;
        ofccl__tcp_set_nodelay(t->conns[0].fd);
        rc = rank_rendezvous(b, t, deadline, &retry, e);
        if (rc == 0 && retry)
            ofccl__tcp_sleep_ms(OFCCL__MIN(BACKOFF_MIN_MS, ofccl__tcp_ms_left(deadline)));
    }
    return rc;
}

static void tcp_finalize(ofccl__boot_t *b)
{
    ofccl__tcp_boot_t *t = b->impl;

    if (t == NULL)
        return;
    if (b->rank == 0 && b->size > 1)
        OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                    "TCP bootstrap root: its exchanges took in %llu bytes and sent %llu",
                    (unsigned long long)t->bytes_in, (unsigned long long)t->bytes_out);
    ofccl__tcp_rec_close(b, t);
    for (int r = 0; r < t->nconns; r++)
        ofccl__tcp_conn_close(&t->conns[r]);
    free(t->conns);
    ofccl__auth_clear(&t->auth);
    free(t);
    b->impl = NULL;
}

static const ofccl__boot_ops_t tcp_ops = {
    .size = sizeof(ofccl__boot_ops_t),
    .name = "tcp",
    .flags = OFCCL__BOOT_F_GET | OFCCL__BOOT_F_REDUCE,
    .allgather = ofccl__tcp_allgather,
    .barrier = ofccl__tcp_barrier,
    .finalize = tcp_finalize,
    .watch = ofccl__boot_watch_none,
    .unwatch = ofccl__boot_unwatch_none,
    .publish = ofccl__tcp_publish,
    .get = ofccl__tcp_get,
    .allreduce = ofccl__tcp_allreduce,
};

static int check_params(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e)
{
    if (p->root == NULL || p->root[0] == '\0')
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "the TCP bootstrap needs OFCCL_BOOT_ROOT=host:port (rank 0's "
                           "address), OFCCL_BOOT_RANK and OFCCL_BOOT_SIZE; OFCCL_BOOT_ROOT is "
                           "unset");
    if (strlen(p->root) >= sizeof(((ofccl__tcp_boot_t *)0)->root))
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
    ofccl__tcp_boot_t *t = NULL;
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
    if (t != NULL) {
        t->nconns = b->rank == 0 ? b->size : 1;
        t->conns = calloc((size_t)t->nconns, sizeof(*t->conns));
    }
    if (t == NULL || t->conns == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory opening the TCP bootstrap for %d ranks", b->size);
        goto err_free;
    }
    ofccl__strlcpy(t->root, p->root, sizeof(t->root));
    if (p->secret_file != NULL && p->secret_file[0] != '\0' &&
        (rc = ofccl__auth_load(p->secret_file, b->log, &t->auth, e)) != 0)
        goto err_free;
    if (!t->auth.on && b->rank == 0 && b->size > 1)
        ofccl__auth_warn_open(b->log, p->root);
    for (int r = 0; r < t->nconns; r++) {
        t->conns[r].fd = -1;
        t->conns[r].rank = b->rank == 0 ? r : 0;
    }

    if (b->size == 1) {
        const char *self = b->host_id;
        rc = ofccl__boot_hosts_from_ids(b, &self, e);
    } else {
        rc = resolve(b, p->root, host, port, &ai, e);
        if (rc != 0)
            goto err_free;
        memcpy(&t->root_sa, ai->ai_addr, OFCCL__MIN((size_t)ai->ai_addrlen, sizeof(t->root_sa)));
        t->root_salen = ai->ai_addrlen;
        t->root_socktype = ai->ai_socktype;
        if (b->rank == 0) {
            rc = ofccl__tcp_root_open(b, t, ai, deadline, e);
        } else {
            rc = rank_join(b, t, ai, deadline, e);
        }
        freeaddrinfo(ai);
    }
    if (rc != 0)
        goto err_free;
    ofccl__boot_local_from_hosts(b);
    b->impl = t;
    b->ops = &tcp_ops;
    OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                "TCP rendezvous at %s complete: rank %d of %d, on host %d of %d with %d ranks",
                t->root, b->rank, b->size, b->host_of[b->rank], b->nhosts, b->local_size);
    return 0;

err_free:
    if (t != NULL)
        ofccl__tcp_rec_close(b, t);
    if (t != NULL && t->conns != NULL) {
        for (int r = 0; r < t->nconns; r++)
            ofccl__tcp_conn_close(&t->conns[r]);
        free(t->conns);
    }
    if (t != NULL)
        ofccl__auth_clear(&t->auth);
    free(t);
    free(b->host_of);
    b->host_of = NULL;
    return rc;
}
