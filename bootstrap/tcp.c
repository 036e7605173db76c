/*
 * TCP rendezvous bootstrap, for launchers that give no PMIx server (torchrun
 * style: a root address, a rank and a size) and for tests that start ranks in
 * other network namespaces.
 *
 * Rank 0 listens on the root address (tcp_root.c); every other rank connects
 * (retrying until the deadline, since rank 0 may start last) and sends a
 * hello with its host identity. Rank 0 answers everyone with the host table
 * once all have joined, and keeps the connections: an allgather is a gather
 * to rank 0 followed by a broadcast of everything. Every frame is
 * length-checked before anything is allocated, every wait is bounded by the
 * deadline, and a root that fails an exchange tells the others why before
 * closing, so nobody waits for nothing. The frames are in tcp_proto.h.
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

static void fail_all(ofccl__tcp_boot_t *t)
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

typedef struct down_arg {
    uint32_t magic;
    uint64_t seq;
    size_t max_body;
    uint8_t *body;
    size_t body_len;
    int status;
    char reason[OFCCL__TCP_MAX_REASON + 1];
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

        if (magic != d->magic || (status == OFCCL__TCP_ST_OK && seq != d->seq) ||
            status > OFCCL__TCP_ST_RETRY)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank 0 (the bootstrap root) sent a bad frame header during %s "
                               "(magic 0x%08x, status %u, seq %llu)",
                               d->what, magic, status, (unsigned long long)seq);
        d->status = (int)status;
        if (status != OFCCL__TCP_ST_OK) {
            if (blen > OFCCL__TCP_MAX_REASON)
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
        if (size != (uint32_t)b->size || blen > d->max_body || blen > OFCCL__TCP_MAX_FRAME)
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

/* Adopt the root's host table u32 host_of[size]. The root is a peer like any
 * other: the numbering is checked (hosts by their lowest rank, so each entry
 * is a known host or the next new one) before anything is used. */
static int adopt_table(ofccl__boot_t *b, ofccl__tcp_boot_t *t, const uint8_t *body, ofccl__err_t *e)
{
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
    free(b->host_of);
    b->host_of = host_of;
    b->nhosts = nhosts;
    return 0;
}

/* Hello out, host table back; *retry = 1 when the root asks for a new
 * connection instead. */
static int rank_rendezvous(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t deadline, int *retry,
                           ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t hello[OFCCL__TCP_HELLO_LEN + OFCCL__HOST_ID_MAX];
    size_t idlen = strlen(b->host_id);
    down_arg_t d;
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
    d.max_body = 4 * (size_t)b->size;
    d.what = "the rendezvous";
    c->out = hello;
    c->out_len = OFCCL__TCP_HELLO_LEN + idlen;
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = OFCCL__TCP_FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    rc = ofccl__tcp_io_run(b, c, 1, deadline, down_step, &d, d.what, e);
    c->out = NULL;
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
    else if (rc == 0 && d.body_len != d.max_body)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                         "the bootstrap root at %s sent a %zu-byte host table, expected %zu",
                         t->root, d.body_len, d.max_body);
    if (rc == 0 && !*retry)
        rc = adopt_table(b, t, d.body, e);
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

        if (magic != OFCCL__TCP_UP_MAGIC || rank != (uint32_t)c->rank)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank %d sent a bad frame header for %s (magic 0x%08x, rank %u)",
                               c->rank, u->what, magic, rank);
        if (seq != u->seq)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_MISMATCH,
                               "rank %d is at exchange #%llu while the root is at #%llu: ranks "
                               "ran different sequences of bootstrap exchanges",
                               c->rank, (unsigned long long)seq, (unsigned long long)u->seq);
        if (len > u->slot || len > OFCCL__TCP_MAX_FRAME)
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
static int root_phase(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t deadline, up_arg_t *u,
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

static int root_allgather(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t seq, const char *what,
                          const void *in, size_t len, uint8_t *out, size_t slot, size_t *lens,
                          uint64_t deadline, ofccl__err_t *e)
{
    up_arg_t u = {.seq = seq, .out = out, .slot = slot, .lens = lens, .what = what};
    uint8_t *frame = NULL;
    size_t total = OFCCL__TCP_FRAME_HDR + 4 * (size_t)b->size, off;
    int rc;

    if (len > 0)
        memmove(out, in, len);
    lens[0] = len;
    for (int r = 1; r < b->size; r++) {
        ofccl__tcp_conn_t *c = &t->conns[r];
        c->in = c->hdr;
        c->in_len = OFCCL__TCP_FRAME_HDR;
        c->in_off = 0;
        c->stage = 1;
        c->out_len = c->out_off = 0;
    }
    rc = root_phase(b, t, deadline, &u, what, "", "did not contribute (missing, stuck or dead)", e);
    if (rc != 0)
        goto err_abort;

    for (int r = 0; r < b->size; r++)
        total += lens[r];
    if (total > OFCCL__TCP_MAX_FRAME) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                         "TCP bootstrap %s would broadcast %zu bytes, more than the %u-byte "
                         "frame limit",
                         what, total, OFCCL__TCP_MAX_FRAME);
        goto err_abort;
    }
    frame = malloc(total);
    if (frame == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory for the %zu-byte broadcast of %s", total, what);
        goto err_abort;
    }
    ofccl__put_le32(frame, OFCCL__TCP_DOWN_MAGIC);
    ofccl__put_le32(frame + 4, OFCCL__TCP_ST_OK);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)b->size);
    ofccl__put_le32(frame + 20, (uint32_t)(total - OFCCL__TCP_FRAME_HDR));
    off = OFCCL__TCP_FRAME_HDR + 4 * (size_t)b->size;
    for (int r = 0; r < b->size; r++) {
        ofccl__put_le32(frame + OFCCL__TCP_FRAME_HDR + 4 * (size_t)r, (uint32_t)lens[r]);
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
    ofccl__tcp_root_abort(t, OFCCL__TCP_DOWN_MAGIC, seq, b->size,
                          e != NULL ? e->msg : "an exchange failed");
    fail_all(t);
    free(frame);
    return rc;
}

static int rank_allgather(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t seq, const char *what,
                          const void *in, size_t len, uint8_t *out, size_t slot, size_t *lens,
                          uint64_t deadline, ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t *frame = malloc(OFCCL__TCP_FRAME_HDR + len);
    down_arg_t d;
    size_t off;
    int rc;

    if (frame == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory sending %zu bytes for %s", len, what);
    ofccl__put_le32(frame, OFCCL__TCP_UP_MAGIC);
    ofccl__put_le32(frame + 4, (uint32_t)b->rank);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)len);
    ofccl__put_le32(frame + 20, 0);
    if (len > 0)
        memcpy(frame + OFCCL__TCP_FRAME_HDR, in, len);
    memset(&d, 0, sizeof(d));
    d.magic = OFCCL__TCP_DOWN_MAGIC;
    d.seq = seq;
    d.max_body = 4 * (size_t)b->size + (size_t)b->size * slot;
    d.what = what;
    c->out = frame;
    c->out_len = OFCCL__TCP_FRAME_HDR + len;
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = OFCCL__TCP_FRAME_HDR;
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
    else if (rc == 0 && d.status != OFCCL__TCP_ST_OK)
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
    ofccl__tcp_boot_t *t = b->impl;
    uint64_t seq, deadline;
    char what[48];

    if (len > slot || (len > 0 && in == NULL) || out == NULL || lens == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allgather: %zu bytes do not fit a %zu-byte slot", len, slot);
    if (len > OFCCL__TCP_MAX_FRAME || slot > OFCCL__TCP_MAX_FRAME)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allgather: a %zu-byte slot exceeds the %u-byte frame limit",
                           slot, OFCCL__TCP_MAX_FRAME);
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
    ofccl__tcp_boot_t *t = b->impl;

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
                "TCP rendezvous at %s complete: rank %d of %d, %d ranks on this host of %d",
                t->root, b->rank, b->size, b->local_size, b->nhosts);
    return 0;

err_free:
    if (t != NULL && t->conns != NULL) {
        for (int r = 0; r < t->nconns; r++)
            ofccl__tcp_conn_close(&t->conns[r]);
        free(t->conns);
    }
    free(t);
    free(b->host_of);
    b->host_of = NULL;
    return rc;
}
