/*
 * The TCP bootstrap's exchanges once every rank has joined: an allgather is
 * a gather to rank 0 followed by a broadcast of everything, and a barrier an
 * allgather of nothing. Each frame carries the exchange's sequence number, so
 * ranks that run different sequences of exchanges are told so instead of
 * pairing the wrong data; after a failed exchange the streams are out of step
 * and every later one fails at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_proto.h"
#include "util.h"

static void fail_all(ofccl__tcp_boot_t *t)
{
    t->broken = 1;
    for (int r = 0; r < t->nconns; r++)
        ofccl__tcp_conn_close(&t->conns[r]);
}

/* Non-root side of every root -> rank frame. */
int ofccl__tcp_down_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e)
{
    ofccl__tcp_down_t *d = arg;

    if (c->stage == 1) {
        uint32_t magic = ofccl__get_le32(c->hdr), status = ofccl__get_le32(c->hdr + 4);
        uint64_t seq = ofccl__get_le64(c->hdr + 8);
        uint32_t size = ofccl__get_le32(c->hdr + 16), blen = ofccl__get_le32(c->hdr + 20);

        if (magic != d->magic || (status == OFCCL__TCP_ST_OK && seq != d->seq) ||
            status > OFCCL__TCP_ST_PROVEN)
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                               "rank 0 (the bootstrap root) sent a bad frame header during %s "
                               "(magic 0x%08x, status %u, seq %llu)",
                               d->what, magic, status, (unsigned long long)seq);
        d->status = (int)status;
        if (status == OFCCL__TCP_ST_CHALLENGE || status == OFCCL__TCP_ST_PROVEN) {
            if (blen != OFCCL__AUTH_LEN)
                return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                                   "rank 0 (the bootstrap root) sent a %u-byte %s during %s", blen,
                                   status == OFCCL__TCP_ST_CHALLENGE ? "challenge" : "proof",
                                   d->what);
            status = OFCCL__TCP_ST_OK; /* a body, read below */
        }
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

/* The root's first half of an exchange: every rank's bytes into out/lens. */
static int root_gather(ofccl__boot_t *b, ofccl__tcp_boot_t *t, up_arg_t *u, const void *in,
                       size_t len, uint64_t deadline, ofccl__err_t *e)
{
    int rc;

    if (len > 0)
        memmove(u->out, in, len);
    u->lens[0] = len;
    for (int r = 1; r < b->size; r++) {
        ofccl__tcp_conn_t *c = &t->conns[r];
        c->in = c->hdr;
        c->in_len = OFCCL__TCP_FRAME_HDR;
        c->in_off = 0;
        c->stage = 1;
        c->out_len = c->out_off = 0;
    }
    rc = root_phase(b, t, deadline, u, u->what, "", "did not contribute (missing, stuck or dead)",
                    e);
    for (int r = 1; r < b->size && rc == 0; r++)
        t->bytes_in += OFCCL__TCP_FRAME_HDR + u->lens[r];
    return rc;
}

/* The root's second half: the same `total`-byte frame to every rank. */
static int root_send(ofccl__boot_t *b, ofccl__tcp_boot_t *t, up_arg_t *u, const uint8_t *frame,
                     size_t total, uint64_t deadline, ofccl__err_t *e)
{
    int rc;

    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = frame;
        t->conns[r].out_len = total;
        t->conns[r].out_off = 0;
    }
    rc = root_phase(b, t, deadline, u, u->what, " sending the result", "did not read it (stuck?)",
                    e);
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = NULL;
        t->conns[r].out_len = t->conns[r].out_off = 0;
    }
    if (rc == 0)
        t->bytes_out += (uint64_t)total * (uint64_t)(b->size - 1);
    return rc;
}

static void down_header(uint8_t *frame, uint64_t seq, int size, size_t body)
{
    ofccl__put_le32(frame, OFCCL__TCP_DOWN_MAGIC);
    ofccl__put_le32(frame + 4, OFCCL__TCP_ST_OK);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)size);
    ofccl__put_le32(frame + 20, (uint32_t)body);
}

static int root_allgather(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t seq, const char *what,
                          const void *in, size_t len, uint8_t *out, size_t slot, size_t *lens,
                          uint64_t deadline, ofccl__err_t *e)
{
    up_arg_t u = {.seq = seq, .out = out, .slot = slot, .lens = lens, .what = what};
    uint8_t *frame = NULL;
    size_t total = OFCCL__TCP_FRAME_HDR + 4 * (size_t)b->size, off;
    int rc;

    rc = root_gather(b, t, &u, in, len, deadline, e);
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
    down_header(frame, seq, b->size, total - OFCCL__TCP_FRAME_HDR);
    off = OFCCL__TCP_FRAME_HDR + 4 * (size_t)b->size;
    for (int r = 0; r < b->size; r++) {
        ofccl__put_le32(frame + OFCCL__TCP_FRAME_HDR + 4 * (size_t)r, (uint32_t)lens[r]);
        memcpy(frame + off, out + (size_t)r * slot, lens[r]);
        off += lens[r];
    }
    rc = root_send(b, t, &u, frame, total, deadline, e);
    if (rc != 0)
        goto err_abort;
    free(frame);
    return 0;

err_abort:
    ofccl__tcp_root_abort(t, OFCCL__TCP_DOWN_MAGIC, seq, b->size,
                          e != NULL ? e->msg : "an exchange failed");
    fail_all(t);
    free(frame);
    return rc;
}

/* A rank's side of an exchange: its bytes up, the root's answer (up to
 * max_body bytes) into *d. On failure the streams are given up. */
static int rank_exchange(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t seq, const char *what,
                         const void *in, size_t len, size_t max_body, ofccl__tcp_down_t *d,
                         uint64_t deadline, ofccl__err_t *e)
{
    ofccl__tcp_conn_t *c = &t->conns[0];
    uint8_t *frame = malloc(OFCCL__TCP_FRAME_HDR + len);
    int rc;

    memset(d, 0, sizeof(*d));
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
    d->magic = OFCCL__TCP_DOWN_MAGIC;
    d->seq = seq;
    d->max_body = max_body;
    d->what = what;
    c->out = frame;
    c->out_len = OFCCL__TCP_FRAME_HDR + len;
    c->out_off = 0;
    c->in = c->hdr;
    c->in_len = OFCCL__TCP_FRAME_HDR;
    c->in_off = 0;
    c->stage = 1;
    rc = ofccl__tcp_io_run(b, c, 1, deadline, ofccl__tcp_down_step, d, what, e);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    free(frame);
    if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "TCP bootstrap %s timed out after %llu ms waiting for the root (rank 0) "
                         "at %s: some rank is missing, stuck or dead",
                         what, (unsigned long long)b->timeout_ms, t->root);
    else if (rc == 0 && d->status != OFCCL__TCP_ST_OK)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_REMOTE_ERROR,
                         "the bootstrap root (rank 0) abandoned %s: %s", what, d->reason);
    if (rc != 0) {
        free(d->body);
        d->body = NULL;
        fail_all(t);
    }
    return rc;
}

static int rank_allgather(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t seq, const char *what,
                          const void *in, size_t len, uint8_t *out, size_t slot, size_t *lens,
                          uint64_t deadline, ofccl__err_t *e)
{
    ofccl__tcp_down_t d;
    size_t off;
    int rc = rank_exchange(b, t, seq, what, in, len, 4 * (size_t)b->size + (size_t)b->size * slot,
                           &d, deadline, e);

    if (rc != 0)
        return rc;
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

/* The start of every exchange: arguments, the broken flag, the sequence. */
static int exchange_begin(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t *seq, char *what,
                          size_t wlen, ofccl__err_t *e)
{
    *seq = b->seq;
    if (t->broken)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_STATE,
                           "the TCP bootstrap is unusable after a failed exchange (this is "
                           "exchange #%llu)",
                           (unsigned long long)*seq);
    b->seq++;
    snprintf(what, wlen, "exchange #%llu", (unsigned long long)*seq);
    return 0;
}

int ofccl__tcp_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
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
    int rc = exchange_begin(b, t, &seq, what, sizeof(what), e);

    if (rc != 0)
        return rc;
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

#define PUB_BODY 8 /* a publish's answer: the record server's port, u32 0 */

int ofccl__tcp_publish(ofccl__boot_t *b, const void *in, size_t len, size_t slot, uint64_t *tag,
                       ofccl__err_t *e)
{
    ofccl__tcp_boot_t *t = b->impl;
    uint64_t seq, deadline = ofccl__now_ns() + b->timeout_ms * 1000000ull;
    uint8_t frame[OFCCL__TCP_FRAME_HDR + PUB_BODY];
    ofccl__tcp_down_t d;
    char what[48];
    int rc, port = 0;

    if ((len > 0 && in == NULL) || len > slot || slot > OFCCL__TCP_MAX_FRAME)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap publish: %zu bytes", len);
    rc = exchange_begin(b, t, &seq, what, sizeof(what), e);
    if (rc != 0)
        return rc;
    *tag = seq;
    if (b->rank == 0) {
        uint8_t *out = malloc((size_t)b->size * OFCCL__MAX(slot, (size_t)1));
        size_t *lens = calloc((size_t)b->size, sizeof(*lens));
        up_arg_t u = {.seq = seq, .out = out, .slot = slot, .lens = lens, .what = what};

        rc = out && lens ? root_gather(b, t, &u, in, len, deadline, e)
                         : ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                                       "out of memory for %d published records", b->size);
        if (rc == 0) {
            rc = ofccl__tcp_rec_store(b, t, seq, out, u.slot, lens, &port, e);
            out = NULL;
            lens = NULL;
        }
        free(out);
        free(lens);
        if (rc == 0) {
            down_header(frame, seq, b->size, PUB_BODY);
            ofccl__put_le32(frame + OFCCL__TCP_FRAME_HDR, (uint32_t)port);
            ofccl__put_le32(frame + OFCCL__TCP_FRAME_HDR + 4, 0);
            rc = root_send(b, t, &u, frame, sizeof(frame), deadline, e);
        }
        if (rc != 0) {
            ofccl__tcp_root_abort(t, OFCCL__TCP_DOWN_MAGIC, seq, b->size,
                                  e != NULL ? e->msg : "a publish failed");
            fail_all(t);
        }
        return rc;
    }
    rc = rank_exchange(b, t, seq, what, in, len, PUB_BODY, &d, deadline, e);
    if (rc == 0 && d.body_len != PUB_BODY)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                         "the bootstrap root answered %s with %zu bytes, %d expected", what,
                         d.body_len, PUB_BODY);
    if (rc == 0)
        rc = ofccl__tcp_rec_port(b, t, (int)ofccl__get_le32(d.body), e);
    free(d.body);
    return rc;
}

/* The root reduces: each rank sends and receives n words, the root N·n. */
int ofccl__tcp_allreduce(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n,
                         const uint8_t *ops, ofccl__err_t *e)
{
    ofccl__tcp_boot_t *t = b->impl;
    size_t slot = 8 * (size_t)n;
    uint64_t seq, deadline = ofccl__now_ns() + b->timeout_ms * 1000000ull;
    uint8_t mine[8 * OFCCL__BOOT_REDUCE_MAX], frame[OFCCL__TCP_FRAME_HDR + sizeof(mine)];
    ofccl__tcp_down_t d;
    char what[48];
    int rc = exchange_begin(b, t, &seq, what, sizeof(what), e);

    if (rc != 0)
        return rc;
    for (int k = 0; k < n; k++)
        ofccl__put_le64(mine + 8 * k, in[k]);
    if (b->rank != 0) {
        rc = rank_exchange(b, t, seq, what, mine, slot, slot, &d, deadline, e);
        if (rc == 0 && d.body_len != slot)
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                             "the bootstrap root answered %s with %zu bytes, %zu expected", what,
                             d.body_len, slot);
        for (int k = 0; k < n && rc == 0; k++)
            out[k] = ofccl__get_le64(d.body + 8 * k);
        free(d.body);
        return rc;
    }
    uint8_t *all = malloc((size_t)b->size * slot);
    size_t *lens = calloc((size_t)b->size, sizeof(*lens));
    up_arg_t u = {.seq = seq, .out = all, .slot = slot, .lens = lens, .what = what};

    rc = all && lens ? root_gather(b, t, &u, mine, slot, deadline, e)
                     : ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                                   "out of memory for %s", what);
    memcpy(out, in, slot);
    for (int r = 1; r < b->size && rc == 0; r++) {
        uint64_t w[OFCCL__BOOT_REDUCE_MAX];
        if (lens[r] != slot) {
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                             "rank %d sent %zu bytes for %s, %zu expected", r, lens[r], what, slot);
            break;
        }
        for (int k = 0; k < n; k++)
            w[k] = ofccl__get_le64(all + (size_t)r * slot + 8 * (size_t)k);
        ofccl__boot_reduce_into(out, w, n, ops);
    }
    if (rc == 0) {
        down_header(frame, seq, b->size, slot);
        for (int k = 0; k < n; k++)
            ofccl__put_le64(frame + OFCCL__TCP_FRAME_HDR + 8 * k, out[k]);
        rc = root_send(b, t, &u, frame, OFCCL__TCP_FRAME_HDR + slot, deadline, e);
    }
    free(all);
    free(lens);
    if (rc != 0) {
        ofccl__tcp_root_abort(t, OFCCL__TCP_DOWN_MAGIC, seq, b->size,
                              e != NULL ? e->msg : "an allreduce failed");
        fail_all(t);
    }
    return rc;
}

/* A barrier is an exchange of nothing: it shares the ordering and error
 * handling of allgather, and a peer that skips it is caught by the seq. */
int ofccl__tcp_barrier(ofccl__boot_t *b, ofccl__err_t *e)
{
    size_t *lens = calloc((size_t)b->size, sizeof(*lens));
    uint8_t dummy;
    int rc;

    if (lens == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for a bootstrap barrier");
    rc = ofccl__tcp_allgather(b, NULL, 0, &dummy, 0, lens, e);
    free(lens);
    return rc;
}
