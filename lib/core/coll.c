/*
 * The collective engine: posting, descriptors, eager slots, signals, the
 * per-request progress loop and completion. The public test/wait/progress/free
 * calls over it are in wait.c.
 */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "pool.h"
#include "util.h"

/* ---- control region layout (words) ----
 * [FIXED]                          barrier and test words (core.h)
 * [DESC_OUT: SLOTS x 8]            this rank's outgoing descriptor per slot
 * [DESC_IN: SLOTS x size x 8]      descriptors written here by the ranks we write to
 * [DESC_CNT: SLOTS x size]         atomic path: descriptor-landed counters
 * [ARR_CNT: SLOTS x size]          atomic path: per-writer data counters */
static size_t desc_out_word(unsigned slot)
{
    return OFCCL__CTRL_FIXED + (size_t)slot * OFCCL__DESC_WORDS;
}
static size_t desc_in_word(int size, unsigned slot, int from)
{
    return OFCCL__CTRL_FIXED + OFCCL__SLOTS * OFCCL__DESC_WORDS +
           ((size_t)slot * (size_t)size + (size_t)from) * OFCCL__DESC_WORDS;
}
static size_t desc_cnt_word(int size, unsigned slot, int from)
{
    return desc_in_word(size, OFCCL__SLOTS, 0) + (size_t)slot * (size_t)size + (size_t)from;
}
static size_t arr_cnt_word(int size, unsigned slot, int from)
{
    return desc_cnt_word(size, OFCCL__SLOTS, 0) + (size_t)slot * (size_t)size + (size_t)from;
}
/* [EAGER_OUT: SLOTS x size x slot] [EAGER_IN: EAGER_RING x size x slot] follow,
 * from a cache-line boundary: slots are whole lines, so a small payload shares
 * its header's line. */
static size_t eager_base_word(int size)
{
    return (arr_cnt_word(size, OFCCL__SLOTS, 0) + 7) & ~(size_t)7;
}
static size_t eager_slot_bytes(int size, size_t eager_bytes)
{
    size_t per = (eager_bytes + (size_t)size - 1) / (size_t)size;
    return (OFCCL__EAGER_HDR + per + 63) / 64 * 64;
}
size_t ofccl__coll_ctrl_words(int size, size_t eager_bytes)
{
    size_t words = eager_base_word(size);

    if (eager_bytes > 0)
        words += (size_t)(OFCCL__SLOTS + OFCCL__EAGER_RING) * (size_t)size *
                 (eager_slot_bytes(size, eager_bytes) / sizeof(uint64_t));
    return words;
}

static size_t eager_out_word(const ofccl_comm_t *comm, unsigned slot, int p)
{
    return eager_base_word(comm->size) +
           ((size_t)slot * (size_t)comm->size + (size_t)p) * (comm->coll->eager_slot / 8);
}

static size_t eager_in_word(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return eager_out_word(comm, OFCCL__SLOTS, 0) +
           ((size_t)(seq % OFCCL__EAGER_RING) * (size_t)comm->size + (size_t)from) *
               (comm->coll->eager_slot / 8);
}

uint8_t *ofccl__eager_out(const ofccl_comm_t *comm, unsigned slot, int p)
{
    return (uint8_t *)&comm->ctrl[eager_out_word(comm, slot, p)];
}

const uint8_t *ofccl__eager_in(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return (const uint8_t *)&comm->ctrl[eager_in_word(comm, seq, from)];
}

uint64_t ofccl__eager_in_offset(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return eager_in_word(comm, seq, from) * sizeof(uint64_t);
}

int ofccl__eager_ok(const ofccl_comm_t *comm, const ofccl__algo_t *algo, int bucket, size_t block)
{
    const ofccl__coll_state_t *cs = comm->coll;
    uint64_t seq = cs->next_seq;

    return cs->eager_bytes > 0 && comm->size > 1 && !bucket &&
           comm->signal_mode == OFCCL__SIGNAL_CQDATA &&
           block * (size_t)comm->size <= cs->eager_bytes &&
           block + OFCCL__EAGER_HDR <= cs->eager_slot && algo->id == OFCCL__ALGO_DIRECT &&
           (seq < OFCCL__SLOTS || cs->all_pairs[(seq - OFCCL__SLOTS) % OFCCL__SLOTS]);
}

const char *ofccl__coll_name(int coll)
{
    return coll == OFCCL__AG ? "all-gather" : "reduce-scatter";
}

int ofccl__coll_fail(ofccl__req_t *r, int code, const char *fmt, ...)
{
    char msg[OFCCL__ERRMSG_LEN - 96];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->status == 0)
        r->status = code;
    return ofccl__comm_fail(r->comm, code, "%s #%llu (%s): %s", ofccl__coll_name(r->coll),
                            (unsigned long long)r->seq, r->algo ? r->algo->name : "?", msg);
}

/* ---- write ops ---- */
static ofccl__wop_t *wop_get(ofccl__req_t *r)
{
    for (unsigned k = 0; k < r->nwops; k++)
        if (r->wops[k].req == NULL) {
            r->wops[k].req = r;
            return &r->wops[k];
        }
    return NULL;
}

static void wop_done(ofccl__op_t *op, int status, const char *msg)
{
    ofccl__wop_t *w = (ofccl__wop_t *)op;
    ofccl__req_t *r = w->req;

    r->ops_out--;
    w->req = NULL;
    if (status) {
        if (r->status == 0)
            r->status = status; /* the communicator already holds the message */
        return;
    }
    if (w->atomic || w->unit == UINT32_MAX) {
        if (!w->atomic && r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC) /* descriptor landed */
            r->sig_mask[w->peer] |= 1ull << 63; /* pumped separately: see pump_desc() */
        return;
    }
    r->inflight[w->peer]--;
    if (r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC) /* w->unit: the k-th write to the peer */
        r->sig_mask[w->peer] |= 1ull << (w->unit - r->sig_next[w->peer]);
}

/* Post one provider op for request r; `kind` 0 = write(+data), 1 = atomic add. */
static int post_op(ofccl__req_t *r, ofccl__wop_t *w, int kind, const void *src,
                   const ofccl__mr_t *mr, size_t len, const ofccl__rkey_t *rk, uint64_t roff,
                   uint64_t data)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__err_t e;
    int rc;

    w->op.cb = wop_done;
    if (kind == 1)
        rc = ofccl__ep_atomic_add(comm->ep, w->peer, 1, rk, roff, &w->op, &e);
    else if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
        rc = ofccl__ep_writedata(comm->ep, w->peer, src, len, mr, rk, roff, data, &w->op, &e);
    else
        rc = ofccl__ep_write_dc(comm->ep, w->peer, src, len, mr, rk, roff, &w->op, &e);
    if (rc == OFCCL_ERR_AGAIN) {
        w->req = NULL;
        return rc;
    }
    if (rc) {
        w->req = NULL;
        return ofccl__coll_fail(r, rc, "posting to peer %d: %s", w->peer, e.msg);
    }
    r->ops_out++;
    comm->ops_pending++;
    return 0;
}

int ofccl__coll_put(ofccl__req_t *r, int peer, const void *src, const ofccl__mr_t *mr, size_t len,
                    uint64_t dst_off, uint32_t unit)
{
    ofccl__wop_t *w;
    int rc;

    if (!r->peer_ready[peer] || r->inflight[peer] >= r->depth)
        return OFCCL_ERR_AGAIN;
    /* Atomic path: the peer counts our writes in the order we signal them, so
     * writes are numbered per peer (k = sent[peer]); delivered ones wait in a
     * 63-bit window behind the oldest unsignalled one (bit 63 is the
     * descriptor's); never post past it. */
    if (r->comm->signal_mode == OFCCL__SIGNAL_ATOMIC && r->sent[peer] - r->sig_next[peer] >= 63)
        return OFCCL_ERR_AGAIN;
    w = wop_get(r);
    if (w == NULL)
        return OFCCL_ERR_AGAIN;
    w->peer = peer;
    w->unit = r->sent[peer];
    w->atomic = 0;
    rc = post_op(
        r, w, 0, src, mr, len, &r->peer_rk[peer], r->peer_off[peer] + dst_off,
        r->algo->id == OFCCL__ALGO_EAGER
            ? ofccl__sig_encode(OFCCL__SIG_EAGER, r->comm->id,
                                (uint32_t)(r->seq % OFCCL__EAGER_RING) | (uint32_t)r->comm->rank
                                                                             << 4)
            : ofccl__sig_encode(OFCCL__SIG_COLL, r->comm->id, r->slot | unit << OFCCL__SLOT_BITS));
    if (rc == 0) {
        r->inflight[peer]++;
        r->sent[peer]++;
    }
    return rc;
}

/* Atomic path: signal delivered units in order, one add per unit. */
static int pump_signals(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++) {
        while (r->sig_mask[p] & 1) {
            ofccl__wop_t *w = wop_get(r);
            int rc;
            if (w == NULL)
                return 0;
            w->peer = p;
            w->unit = r->sig_next[p];
            w->atomic = 1;
            rc = post_op(r, w, 1, NULL, NULL, 0, &comm->peer_ctrl[p],
                         arr_cnt_word(comm->size, r->slot, comm->rank) * sizeof(uint64_t), 0);
            if (rc == OFCCL_ERR_AGAIN)
                return 0;
            if (rc)
                return rc;
            r->sig_mask[p] >>= 1;
            r->sig_next[p]++;
        }
    }
    return 0;
}

/* ---- descriptors ---- */
/* The premul scalar's bits (0 unless the op uses it). */
static uint64_t scalar_bits(const ofccl__req_t *r)
{
    uint64_t bits = 0;

    if (r->coll == OFCCL__RS && r->op.kind == OFCCL_OP_PREMUL_SUM)
        memcpy(&bits, &r->op.scalar, sizeof(bits));
    return bits;
}

/* {operation:4, dtype:4, op:4, algorithm:4, bucket:1, ..., scalar folded:32}.
 * Descriptors also carry the exact scalar (for messages); eager headers only
 * this fold, which differs for any two scalars that differ in practice. */
static uint64_t fingerprint(const ofccl__req_t *r)
{
    uint64_t s = scalar_bits(r);

    return (uint64_t)r->coll | (uint64_t)r->dtype << 4 |
           (uint64_t)(r->coll == OFCCL__RS ? r->op.kind : 0) << 8 | (uint64_t)r->algo->id << 12 |
           (uint64_t)(r->bucket != 0) << 16 | (uint64_t)(uint32_t)(s ^ (s >> 32)) << 32;
}

/* An eager header is {from, fingerprint, count, seq + 1}: the last word marks
 * the data as present, never what the slot's previous user (seq - 16) or fresh
 * memory holds. On the mapped path it is stored last, with release. At 32
 * bytes, a payload of up to 32 shares the mark's cache line. */
#define EAGER_MARK 3

void ofccl__eager_header(const ofccl__req_t *r, uint8_t *area)
{
    uint64_t h[OFCCL__EAGER_WORDS] = {(uint64_t)r->comm->rank, r->fingerprint, r->count,
                                      r->seq + 1};
    memcpy(area, h, sizeof(h));
}

void ofccl__eager_store(const ofccl__req_t *r, int p, const void *payload)
{
    const ofccl_comm_t *comm = r->comm;
    _Atomic uint64_t *slot = comm->peer_ctrl_at[p] + eager_in_word(comm, r->seq, comm->rank);
    uint64_t h[OFCCL__EAGER_WORDS];

    ofccl__eager_header(r, (uint8_t *)h);
    for (int w = 0; w < EAGER_MARK; w++)
        atomic_store_explicit(&slot[w], h[w], memory_order_relaxed);
    if (r->block)
        memcpy((void *)(slot + OFCCL__EAGER_WORDS), payload, r->block);
    /* memcpy may use non-temporal stores for large copies, which a release
     * store does not order; eager slots are far below where it starts to. */
    if (r->block >= ((size_t)64 << 10))
        atomic_thread_fence(memory_order_seq_cst);
    atomic_store_explicit(&slot[EAGER_MARK], h[EAGER_MARK], memory_order_release);
}

/* Mapped path: has `from`'s {header, data} for collective `seq` been stored here? */
static bool eager_marked(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return atomic_load_explicit(&comm->ctrl[eager_in_word(comm, seq, from) + EAGER_MARK],
                                memory_order_acquire) == seq + 1;
}

bool ofccl__eager_from_in(const ofccl__req_t *r, int from)
{
    const ofccl_comm_t *comm = r->comm;

    if (comm->peer_ctrl_at != NULL)
        return eager_marked(comm, r->seq, from);
    return comm->coll
               ->eager_seen[(r->seq % OFCCL__EAGER_RING) * (size_t)comm->size + (size_t)from] != 0;
}

bool ofccl__eager_all_marked(const ofccl_comm_t *comm, uint64_t seq)
{
    for (int p = 0; p < comm->size; p++)
        if (p != comm->rank && !eager_marked(comm, seq, p))
            return false;
    return true;
}

/* Mapped path (comm->peer_ctrl_at, CQ-data signals): a descriptor is stored
 * straight into the peer's DESC_IN slot and marked, seq + 1 with release, in
 * the peer's DESC_CNT word for (slot, writer): the atomic path's counters,
 * unused on this one. No op, no CQ data; the mark never matches another
 * collective on the slot, so nothing needs consuming. */
static bool desc_mapped(const ofccl_comm_t *comm)
{
    return comm->peer_ctrl_at != NULL && comm->signal_mode == OFCCL__SIGNAL_CQDATA;
}

static bool desc_marked(const ofccl_comm_t *comm, unsigned slot, int from, uint64_t seq)
{
    return atomic_load_explicit(&comm->ctrl[desc_cnt_word(comm->size, slot, from)],
                                memory_order_acquire) == seq + 1;
}

/* Has `from`'s descriptor for request r's collective landed here? */
static bool desc_landed(const ofccl__req_t *r, int from)
{
    const ofccl_comm_t *comm = r->comm;

    if (desc_mapped(comm))
        return desc_marked(comm, r->slot, from, r->seq);
    return comm->coll->desc_flag[(size_t)r->slot * (size_t)comm->size + (size_t)from] != 0;
}

static void store_descriptor(const ofccl__req_t *r, int p, const uint64_t *d)
{
    const ofccl_comm_t *comm = r->comm;
    _Atomic uint64_t *at = comm->peer_ctrl_at[p];

    for (int w = 0; w < OFCCL__DESC_WORDS; w++)
        atomic_store_explicit(&at[desc_in_word(comm->size, r->slot, comm->rank) + (size_t)w], d[w],
                              memory_order_relaxed);
    atomic_store_explicit(&at[desc_cnt_word(comm->size, r->slot, comm->rank)], r->seq + 1,
                          memory_order_release);
}

static int send_descriptors(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    uint64_t *d = (uint64_t *)&comm->ctrl[desc_out_word(r->slot)];

    d[0] = r->seq;
    d[1] = r->fingerprint;
    d[2] = r->count;
    d[3] = r->dst.mr ? r->dst.mr->base : 0;
    d[4] = r->dst.mr ? r->dst.mr->key : 0;
    d[5] = r->dst.mr ? r->dst.mr->len : 0;
    d[6] = r->dst.mr ? (uint64_t)((char *)r->dst.ptr - (char *)r->dst.mr->addr) : 0;
    d[7] = (uint64_t)comm->rank;
    d[8] = scalar_bits(r);
    d[9] = r->bucket ? r->layout_hash : 0;
    d[10] = r->bucket ? (uint64_t)r->ntensors : 0;
    d[11] = r->bucket && r->dst.mr ? (uint64_t)((char *)r->layout - (char *)r->dst.mr->addr) : 0;
    for (int p = (int)r->descs_sent; p < comm->size; p++, r->descs_sent++) {
        ofccl__wop_t *w;
        int rc;

        if (!r->writes_to_me[p])
            continue;
        if (desc_mapped(comm)) {
            store_descriptor(r, p, d);
            continue;
        }
        w = wop_get(r);
        if (w == NULL)
            return 0;
        w->peer = p;
        w->unit = UINT32_MAX;
        w->atomic = 0;
        rc = post_op(r, w, 0, d, comm->ctrl_mr, OFCCL__DESC_WORDS * sizeof(uint64_t),
                     &comm->peer_ctrl[p],
                     desc_in_word(comm->size, r->slot, comm->rank) * sizeof(uint64_t),
                     ofccl__sig_encode(OFCCL__SIG_DESC, comm->id,
                                       r->slot | (uint32_t)comm->rank << OFCCL__SLOT_BITS));
        if (rc == OFCCL_ERR_AGAIN)
            return 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* Atomic path: a descriptor write landed (bit 63 of sig_mask): count it at the peer. */
static int pump_desc(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++) {
        ofccl__wop_t *w;
        int rc;

        if (!(r->sig_mask[p] >> 63))
            continue;
        if ((w = wop_get(r)) == NULL)
            return 0;
        w->peer = p;
        w->unit = UINT32_MAX;
        w->atomic = 1;
        rc = post_op(r, w, 1, NULL, NULL, 0, &comm->peer_ctrl[p],
                     desc_cnt_word(comm->size, r->slot, comm->rank) * sizeof(uint64_t), 0);
        if (rc == OFCCL_ERR_AGAIN)
            return 0;
        if (rc)
            return rc;
        r->sig_mask[p] &= ~(1ull << 63);
    }
    return 0;
}

static const char *field_name(uint64_t a, uint64_t b)
{
    if ((a & 0xf) != (b & 0xf))
        return "operation (all-gather vs reduce-scatter: collectives posted in a different order)";
    if (((a >> 4) & 0xf) != ((b >> 4) & 0xf))
        return "dtype";
    if (((a >> 8) & 0xf) != ((b >> 8) & 0xf))
        return "reduction op";
    if (((a >> 12) & 0xf) != ((b >> 12) & 0xf))
        return "algorithm (OFCCL_ALGO_* differs)";
    if (((a >> 16) & 1) != ((b >> 16) & 1))
        return "call (a bucket collective on one rank, a flat one on the other)";
    return "premul scalar";
}

/* What descriptors and eager headers both say: who, which collective, what. */
static int check_ident(uint64_t from, uint64_t seq, uint64_t fingerprint, uint64_t count,
                       const ofccl__desc_expect_t *x, char *why, size_t len)
{
    if (from != (uint64_t)x->from)
        return snprintf(why, len, "rank %d's announcement claims to come from rank %llu", x->from,
                        (unsigned long long)from),
               OFCCL_ERR_CORRUPT;
    if (seq != x->seq)
        return snprintf(why, len,
                        "rank %d announced collective #%llu where #%llu was expected: "
                        "collectives must be posted in the same order on every rank",
                        x->from, (unsigned long long)seq, (unsigned long long)x->seq),
               OFCCL_ERR_MISMATCH;
    if (fingerprint != x->fingerprint)
        return snprintf(why, len, "rank %d posted it with a different %s than rank %d", x->from,
                        field_name(fingerprint, x->fingerprint), x->me),
               OFCCL_ERR_MISMATCH;
    /* A bucket's flat count is padded: its layout is compared instead. */
    if (count != x->count && !x->bucket)
        return snprintf(why, len, "rank %d posted it with count %llu, rank %d with count %llu",
                        x->from, (unsigned long long)count, x->me, (unsigned long long)x->count),
               OFCCL_ERR_MISMATCH;
    return 0;
}

int ofccl__eager_check(const uint64_t h[OFCCL__EAGER_WORDS], const ofccl__desc_expect_t *x,
                       char *why, size_t len)
{
    return check_ident(h[0], h[EAGER_MARK] - 1, h[1], h[2], x, why, len);
}

int ofccl__desc_check(const uint64_t d[OFCCL__DESC_WORDS], const ofccl__desc_expect_t *x, char *why,
                      size_t len)
{
    /* A descriptor is written by a peer: every field is checked before use.
     * Same collective, only the premul scalar differs: name both values. */
    int rc =
        d[7] == (uint64_t)x->from && d[0] == x->seq && (uint32_t)d[1] == (uint32_t)x->fingerprint
            ? 0
            : check_ident(d[7], d[0], d[1], d[2], x, why, len);

    if (rc)
        return rc;
    if (d[8] != x->scalar_bits) {
        double a, b;
        memcpy(&a, &d[8], sizeof(a));
        memcpy(&b, &x->scalar_bits, sizeof(b));
        return snprintf(why, len, "rank %d posted it with premul scalar %.17g, rank %d with %.17g",
                        x->from, a, x->me, b),
               OFCCL_ERR_MISMATCH;
    }
    rc = check_ident(d[7], d[0], d[1], d[2], x, why, len);
    if (rc)
        return rc;
    if (x->bucket && d[10] != x->ntensors)
        return snprintf(why, len,
                        "rank %d posted a bucket of %llu tensors, rank %d one of %llu: buckets "
                        "must list the same tensors in the same order on every rank",
                        x->from, (unsigned long long)d[10], x->me, (unsigned long long)x->ntensors),
               OFCCL_ERR_MISMATCH;
    if (x->bucket && d[9] != x->layout_hash)
        return snprintf(why, len,
                        "rank %d posted a bucket of %llu tensors whose sizes differ from rank "
                        "%d's (layout hash %016llx vs %016llx)",
                        x->from, (unsigned long long)d[10], x->me, (unsigned long long)d[9],
                        (unsigned long long)x->layout_hash),
               OFCCL__LAYOUT_DIFFERS;
    /* The region must hold what we will write; a short one is a lie, not a mismatch. */
    if (d[6] > d[5] || d[5] - d[6] < x->need)
        return snprintf(why, len,
                        "rank %d announced a %llu-byte region at offset %llu, %llu bytes needed",
                        x->from, (unsigned long long)d[5], (unsigned long long)d[6],
                        (unsigned long long)x->need),
               OFCCL_ERR_CORRUPT;
    return 0;
}

/* Bytes a writer may put into a peer's destination for this request. */
static uint64_t dst_need(const ofccl__req_t *r)
{
    uint64_t n = (uint64_t)r->comm->size;
    return r->coll == OFCCL__RS && r->algo->id == OFCCL__ALGO_RING ? (n - 1) * r->block
                                                                   : n * r->block;
}

/* Read descriptors that have landed from the ranks we write to. */
static int take_descriptors(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__coll_state_t *cs = comm->coll;

    for (int p = 0; p < comm->size; p++) {
        size_t idx = (size_t)r->slot * (size_t)comm->size + (size_t)p;
        ofccl__desc_expect_t x = {.seq = r->seq,
                                  .fingerprint = r->fingerprint,
                                  .count = r->count,
                                  .need = dst_need(r),
                                  .from = p,
                                  .me = comm->rank,
                                  .scalar_bits = scalar_bits(r),
                                  .bucket = r->bucket,
                                  .ntensors = r->bucket ? (uint64_t)r->ntensors : 0,
                                  .layout_hash = r->bucket ? r->layout_hash : 0};
        const uint64_t *d;
        char why[256];
        int rc;

        if (!r->i_write_to[p] || r->peer_ready[p])
            continue;
        if (desc_mapped(comm)) {
            if (!desc_landed(r, p))
                continue;
        } else if (comm->signal_mode == OFCCL__SIGNAL_CQDATA) {
            if (!cs->desc_flag[idx])
                continue;
            cs->desc_flag[idx] = 0;
        } else {
            uint64_t v = atomic_load_explicit(&comm->ctrl[desc_cnt_word(comm->size, r->slot, p)],
                                              memory_order_acquire);
            if (v <= cs->desc_seen[idx])
                continue;
            cs->desc_seen[idx]++;
        }
        d = (const uint64_t *)&comm->ctrl[desc_in_word(comm->size, r->slot, p)];
        rc = ofccl__desc_check(d, &x, why, sizeof(why));
        if (rc == OFCCL__LAYOUT_DIFFERS)
            return ofccl__coll_fail(r, OFCCL_ERR_MISMATCH, "%s",
                                    ofccl__layout_diff(r, p, d, why, sizeof(why)));
        if (rc)
            return ofccl__coll_fail(r, rc, "%s", why);
        r->peer_rk[p] = (ofccl__rkey_t){d[3], d[4], d[5]};
        r->peer_off[p] = d[6];
        r->peer_ready[p] = 1;
        ofccl__ctx_moved(comm->ctx);
    }
    return 0;
}

/* Atomic path: fold per-writer counters into unit arrivals. */
static void fold_arrivals(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++) {
        uint64_t v;
        if (!r->writes_to_me[p])
            continue;
        v = atomic_load_explicit(&comm->ctrl[arr_cnt_word(comm->size, r->slot, p)],
                                 memory_order_acquire);
        if (r->seen[p] < v)
            ofccl__ctx_moved(comm->ctx);
        while (r->seen[p] < v) {
            uint32_t unit =
                r->algo->unit_of(r, p, (uint32_t)(r->seen[p] - r->seen[comm->size + p]));
            if (unit < OFCCL__MAX_UNITS)
                r->unit_cnt[unit]++;
            r->from_cnt[p]++;
            r->arrived++;
            r->seen[p]++;
        }
    }
}

/* ---- signal sinks (CQ data path) ---- */
static void on_coll_signal(void *arg, uint32_t payload)
{
    ofccl_comm_t *comm = arg;
    ofccl__req_t *r = &comm->coll->reqs[payload & (OFCCL__SLOTS - 1)];
    uint32_t unit = payload >> OFCCL__SLOT_BITS;

    int from;

    if (r->state != OFCCL__REQ_ACTIVE || unit >= OFCCL__MAX_UNITS ||
        (from = r->algo->writer_of(r, unit)) < 0 || from >= comm->size || !r->writes_to_me[from]) {
        comm->corrupt_signals++;
        return;
    }
    r->unit_cnt[unit]++;
    r->from_cnt[from]++;
    r->arrived++;
}

/* Eager data may land before this rank posts the collective: count per ring slot. */
static void on_eager_signal(void *arg, uint32_t payload)
{
    ofccl_comm_t *comm = arg;

    if ((payload >> 4) >= (uint32_t)comm->size) {
        comm->corrupt_signals++;
        return;
    }
    comm->coll->eager_cnt[payload % OFCCL__EAGER_RING]++;
    comm->coll->eager_from[payload % OFCCL__EAGER_RING] = (int)(payload >> 4);
    comm->coll->eager_seen[(payload % OFCCL__EAGER_RING) * (size_t)comm->size + (payload >> 4)] = 1;
}

int ofccl__eager_arrived(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__coll_state_t *cs = comm->coll;

    /* Every mark in: every peer took the eager path. */
    if (comm->peer_ctrl_at != NULL && ofccl__eager_all_marked(comm, r->seq))
        return 1;
    /* A descriptor for this collective means that peer chose the other path. */
    for (int p = 0; p < comm->size; p++)
        if (p != comm->rank && desc_landed(r, p))
            return ofccl__coll_fail(r, OFCCL_ERR_MISMATCH,
                                    "rank %d posted it on the descriptor path, rank %d on the "
                                    "eager one: the count (or OFCCL_EAGER_BYTES) differs",
                                    p, comm->rank);
    if (comm->peer_ctrl_at != NULL)
        return 0;
    if (cs->eager_cnt[r->seq % OFCCL__EAGER_RING] < r->units_in)
        return 0;
    cs->eager_cnt[r->seq % OFCCL__EAGER_RING] = 0; /* consumed: the slot may be reused */
    memset(cs->eager_seen + (r->seq % OFCCL__EAGER_RING) * (size_t)comm->size, 0,
           (size_t)comm->size);
    return 1;
}

/* A rank that sent collective `seq` eagerly (to a request on the descriptor
 * path: a mismatch), or -1. */
static int eager_sender(const ofccl_comm_t *comm, uint64_t seq)
{
    if (comm->peer_ctrl_at != NULL) {
        for (int p = 0; p < comm->size; p++)
            if (p != comm->rank && eager_marked(comm, seq, p))
                return p;
        return -1;
    }
    return comm->coll->eager_cnt[seq % OFCCL__EAGER_RING] > 0
               ? comm->coll->eager_from[seq % OFCCL__EAGER_RING]
               : -1;
}

static void on_desc_signal(void *arg, uint32_t payload)
{
    ofccl_comm_t *comm = arg;
    unsigned slot = payload & (OFCCL__SLOTS - 1);
    uint32_t from = payload >> OFCCL__SLOT_BITS;

    if (from >= (uint32_t)comm->size) {
        comm->corrupt_signals++;
        return;
    }
    comm->coll->desc_flag[(size_t)slot * (size_t)comm->size + from] = 1;
}

/* ---- init ---- */
int ofccl__coll_init(ofccl_comm_t *comm)
{
    ofccl__coll_state_t *cs = calloc(1, sizeof(*cs));
    size_t n = (size_t)comm->size;
    unsigned depth = (unsigned)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_DEPTH);

    if (cs == NULL)
        return OFCCL_ERR_NO_MEMORY;
    comm->coll = cs;
    cs->desc_flag = calloc(OFCCL__SLOTS * n, 1);
    cs->desc_seen = calloc(OFCCL__SLOTS * n, sizeof(uint64_t));
    cs->eager_seen = calloc(OFCCL__EAGER_RING * n, 1);
    if (!cs->desc_flag || !cs->desc_seen || !cs->eager_seen)
        return OFCCL_ERR_NO_MEMORY;
    /* Everything a request needs is allocated here, once: none on the data path. */
    for (int s = 0; s < OFCCL__SLOTS; s++) {
        ofccl__req_t *r = &cs->reqs[s];
        r->comm = comm;
        r->slot = (unsigned)s;
        /* The per-peer state a new collective starts from zero, in one
         * block so that posting clears it with one memset. */
        r->peer_state_bytes = n * (sizeof(*r->sig_mask) + 4 * sizeof(uint32_t) + 3);
        r->sig_mask = calloc(1, r->peer_state_bytes);
        if (r->sig_mask != NULL) {
            r->sent = (uint32_t *)(r->sig_mask + n);
            r->inflight = r->sent + n;
            r->sig_next = r->inflight + n;
            r->from_cnt = r->sig_next + n;
            r->writes_to_me = (uint8_t *)(r->from_cnt + n);
            r->i_write_to = r->writes_to_me + n;
            r->peer_ready = r->i_write_to + n;
        }
        r->peer_rk = calloc(n, sizeof(*r->peer_rk));
        r->peer_off = calloc(n, sizeof(*r->peer_off));
        r->unit_cnt = calloc(OFCCL__MAX_UNITS, sizeof(*r->unit_cnt));
        r->seen = calloc(2 * n, sizeof(*r->seen));
        r->nwops = (unsigned)n * (depth * 2 + 2);
        r->wops = calloc(r->nwops, sizeof(*r->wops));
        r->srcs = calloc(n, sizeof(*r->srcs));
        r->peer_at = calloc(n, sizeof(*r->peer_at));
        if (!r->sig_mask || !r->peer_rk || !r->peer_off || !r->unit_cnt || !r->seen || !r->wops ||
            !r->srcs || !r->peer_at)
            return OFCCL_ERR_NO_MEMORY;
    }
    cs->eager_bytes = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_EAGER_BYTES);
    cs->eager_slot = eager_slot_bytes(comm->size, cs->eager_bytes);
    ofccl__comm_set_sink(comm, OFCCL__SIG_COLL, on_coll_signal, comm);
    ofccl__comm_set_sink(comm, OFCCL__SIG_DESC, on_desc_signal, comm);
    ofccl__comm_set_sink(comm, OFCCL__SIG_EAGER, on_eager_signal, comm);
    return 0;
}

void ofccl__coll_fini(ofccl_comm_t *comm)
{
    ofccl__coll_state_t *cs = comm->coll;

    if (cs == NULL)
        return;
    for (int s = 0; s < OFCCL__SLOTS; s++) {
        ofccl__req_t *r = &cs->reqs[s];
        free(r->sig_mask); /* and the rest of the per-peer state block */
        free(r->peer_rk);
        free(r->peer_off);
        free(r->unit_cnt);
        free(r->seen);
        free(r->wops);
        free(r->srcs);
        free(r->peer_at);
        free(r->tensors);
    }
    free(cs->desc_flag);
    free(cs->desc_seen);
    free(cs->eager_seen);
    free(cs);
    comm->coll = NULL;
}

/* ---- posting ---- */
static void req_reset(ofccl__req_t *r)
{
    memset(r->sig_mask, 0, r->peer_state_bytes);
    r->status = 0;
    r->finished = 0;
    r->arrived = 0;
    r->reduced = 0;
    r->descs_sent = 0;
    r->ops_out = 0;
    r->flush_ns = 0;
    r->copy_out = NULL;
    r->own_dst = NULL;
    r->own_done = 0;
    r->out = NULL;
    r->staging_idx = -1;
    r->bucket = 0;
    r->src = r->dst = r->fwd = (ofccl__mem_ref_t){NULL, NULL};
}

/* Claim the next sequence number's slot. */
int ofccl__coll_begin(ofccl_comm_t *comm, int coll, ofccl__req_t **out)
{
    ofccl__coll_state_t *cs = comm->coll;
    ofccl__req_t *r = &cs->reqs[cs->next_seq % OFCCL__SLOTS];

    int rc = ofccl__comm_check(comm, ofccl__coll_name(coll));

    if (rc)
        return rc;
    if (r->state != OFCCL__REQ_FREE)
        return ofccl__comm_fail(comm, OFCCL_ERR_AGAIN,
                                "%s: %d collectives already outstanding (request of #%llu not "
                                "freed); complete and free one first",
                                ofccl__coll_name(coll), OFCCL__SLOTS, (unsigned long long)r->seq);
    req_reset(r);
    r->coll = coll;
    *out = r;
    return 0;
}

/* Plan, announce and activate a prepared request. */
int ofccl__coll_start(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    /* Unit numbers identify their writer (direct: writer * nchunks + chunk). */
    size_t max_units = OFCCL__MAX_UNITS / (size_t)comm->size;
    int rc;

    r->seq = comm->coll->next_seq;
#ifdef OFCCL_FAULT_INJECTION
    if (comm->ctx->kill_at != 0 && r->seq + 1 == comm->ctx->kill_at) {
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_COLL,
                    "OFCCL_FAULT: killing this rank at collective #%llu",
                    (unsigned long long)r->seq);
        raise(SIGKILL);
    }
#endif
    if (r->algo->id == OFCCL__ALGO_EAGER) {
        /* One {header, block} per writer, counted per ring slot, not per unit. */
        r->depth = 1;
        r->chunk = r->block;
        r->nchunks = 1;
    } else {
        r->depth = (unsigned)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_DEPTH);
        r->chunk = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_CHUNK_BYTES);
        r->chunk -= r->chunk % r->esize;
        r->nchunks = r->block ? (unsigned)((r->block + r->chunk - 1) / r->chunk) : 0;
        if (r->nchunks > max_units) { /* keep unit numbers within the signal's bits */
            r->nchunks = (unsigned)max_units;
            r->chunk = (r->block + max_units - 1) / max_units;
            r->chunk += (r->esize - r->chunk % r->esize) % r->esize;
            r->nchunks = (unsigned)((r->block + r->chunk - 1) / r->chunk);
        }
        /* Unit numbers are step * nchunks + chunk, with fewer steps than
         * ranks: clear only those (the whole table is 64 KiB, longer than a
         * small collective). Numbers beyond them are never read. */
        memset(r->unit_cnt, 0,
               sizeof(*r->unit_cnt) * OFCCL__MIN((size_t)OFCCL__MAX_UNITS,
                                                 (size_t)comm->size * OFCCL__MAX(r->nchunks, 1u)));
    }
    rc = r->algo->plan(r);
    if (rc)
        return rc;
    r->fingerprint = fingerprint(r);
    for (int p = 0; p < comm->size && comm->signal_mode == OFCCL__SIGNAL_ATOMIC; p++) {
        /* Atomic path: counters are monotonic, remember where we start. */
        r->seen[p] = atomic_load_explicit(&comm->ctrl[arr_cnt_word(comm->size, r->slot, p)],
                                          memory_order_acquire);
        r->seen[comm->size + p] = r->seen[p];
    }
    /* Deadlines are seconds and the history reports milliseconds: the coarse
     * clock (a memory read) is precise enough and costs no timer read. */
    r->start_ns = ofccl__coarse_ns();
    r->deadline_ns = ofccl__comm_deadline(comm, r->start_ns);
    r->state = OFCCL__REQ_ACTIVE;
    ofccl__coll_history(r, 0);
    comm->coll->all_pairs[r->seq % OFCCL__SLOTS] = r->algo->id != OFCCL__ALGO_RING;
    comm->coll->next_seq++;
    if (r->algo->id == OFCCL__ALGO_EAGER) {
        /* No descriptors: every destination is a known slot of a control region. */
        for (int p = 0; p < comm->size; p++)
            if (r->i_write_to[p]) {
                r->peer_ready[p] = 1;
                r->peer_rk[p] = comm->peer_ctrl[p];
                r->peer_off[p] = ofccl__eager_in_offset(comm, r->seq, comm->rank);
            }
        r->descs_sent = (unsigned)comm->size;
        /* Mapped: store the data now, so a wait can watch the marks from its
         * first pass without taking the lock (stores cannot fail). */
        if (comm->peer_ctrl_at != NULL)
            ofccl__eager_send(r, r->coll == OFCCL__RS ? r->block : 0);
        return 0;
    }
    rc = send_descriptors(r);
    if (rc)
        return rc;
    OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_COLL,
                 "%s #%llu posted: %s, %zu bytes per rank, %u chunks of %zu, depth %u",
                 ofccl__coll_name(r->coll), (unsigned long long)r->seq, r->algo->name, r->block,
                 r->nchunks, r->chunk, r->depth);
    return 0;
}

static void complete(ofccl__req_t *r)
{
    ofccl__ctx_moved(r->comm->ctx);
    ofccl__coll_history(r, 1);
    if (r->status == 0 && r->copy_out != NULL && r->block > 0) {
        memcpy(r->copy_out, r->dst.ptr, r->block * (size_t)r->comm->size);
        r->comm->ctx->stats.staged_bytes += r->block * (size_t)r->comm->size;
    }
    if (r->status == 0 && r->bucket)
        ofccl__bucket_copy_out(r);
    if (r->staging_idx >= 0) {
        ofccl__stage_release(r->comm, r->coll, r->staging_idx);
        r->staging_idx = -1;
    }
    r->state = OFCCL__REQ_DONE;
}

/* Not complete while a delivered write's signal (atomic path) is not posted yet,
 * or while a descriptor we are owed has not arrived: even a collective with
 * nothing to send must consume it, or it would be mistaken for the next
 * collective's on this slot. */
static int signals_owed(const ofccl__req_t *r)
{
    for (int p = 0; p < r->comm->size; p++)
        if (r->sig_mask[p] || (r->i_write_to[p] && !r->peer_ready[p]))
            return 1;
    return 0;
}

/* After a mismatch the peers are alive and wait for our descriptors: deliver
 * them (within a second) before the request completes, so that each peer finds
 * the difference itself and names it rather than timing out or seeing this
 * rank leave. 1 while that is still going on. */
static bool flush_descriptors(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    uint64_t now = ofccl__coarse_ns();
    bool pending =
        r->descs_sent < (unsigned)comm->size || r->ops_out > 0 || ofccl__layout_busy(comm);

    for (int p = 0; p < comm->size && !pending; p++)
        pending = (r->sig_mask[p] >> 63) != 0;
    if (r->status != OFCCL_ERR_MISMATCH || !pending)
        return false;
    if (r->flush_ns == 0)
        r->flush_ns = now + 1000000000ull;
    if (now > r->flush_ns)
        return false;
    if (send_descriptors(r) == 0 && comm->signal_mode == OFCCL__SIGNAL_ATOMIC)
        pump_desc(r);
    return true;
}

static int req_progress(ofccl__req_t *r, bool check_clock)
{
    ofccl_comm_t *comm = r->comm;
    int rc;

    if (r->state != OFCCL__REQ_ACTIVE)
        return 0;
    if (r->status == 0 && comm->sticky)
        r->status = comm->sticky;
    if (r->status == 0 && r->algo->id != OFCCL__ALGO_EAGER && comm->size > 1) {
        int from = eager_sender(comm, r->seq);
        if (from >= 0)
            ofccl__coll_fail(r, OFCCL_ERR_MISMATCH,
                             "rank %d posted it on the eager path, rank %d on the descriptor one: "
                             "the count (or OFCCL_EAGER_BYTES) differs",
                             from, comm->rank);
    }
    if (r->status == 0) {
        rc = 0;
        if (r->algo->id != OFCCL__ALGO_EAGER) { /* eager: no descriptors (coll_start) */
            rc = send_descriptors(r);
            if (rc == 0)
                rc = take_descriptors(r);
        }
        if (rc == 0 && comm->signal_mode == OFCCL__SIGNAL_ATOMIC) {
            fold_arrivals(r);
            rc = pump_desc(r);
        }
        if (rc == 0 && !r->finished)
            rc = r->algo->progress(r);
        if (rc == 0 && comm->signal_mode == OFCCL__SIGNAL_ATOMIC)
            rc = pump_signals(r);
        if (rc && rc != OFCCL_ERR_AGAIN && r->status == 0)
            r->status = rc;
    }
    if (r->status == 0 && r->finished && r->ops_out == 0 && !signals_owed(r) &&
        r->descs_sent == (unsigned)comm->size) {
        complete(r);
        return 0;
    }
    /* Deadlines are seconds and a dead peer is polled per millisecond: a
     * clock read on every pass of a spinning wait would be most of its cost. */
    if (check_clock && r->status == 0) {
        int pid, gone = ofccl__ep_peer_gone(comm->ep, &pid);
        /* A gone peer's writes, if any, were read above: what is still
         * missing will never come, so it fails now rather than at the deadline. */
        if (gone >= 0 || ofccl__coarse_ns() > r->deadline_ns) {
            char cause[64] = "", who[256];
            if (gone >= 0)
                snprintf(cause, sizeof(cause), "rank %d (pid %d) has exited; ", gone, pid);
            ofccl__coll_waiting_for(r, who, sizeof(who));
            ofccl__coll_fail(r, gone >= 0 ? OFCCL_ERR_REMOTE_ERROR : OFCCL_ERR_TIMEOUT,
                             "%snot complete after %llu ms; waiting for %s", cause,
                             (unsigned long long)((ofccl__coarse_ns() - r->start_ns) / 1000000),
                             who);
            ofccl__coll_dump_history(r);
        }
    }
    if (r->status != 0 && flush_descriptors(r))
        return 0;
    /* A failed request completes once its own ops are back (or the comm is dead). */
    if (r->status != 0 && (r->ops_out == 0 || comm->sticky))
        complete(r);
    return 0;
}

void ofccl__coll_progress_req(ofccl__req_t *r)
{
    req_progress(r, false);
}

int ofccl__coll_progress(ofccl_comm_t *comm, bool check_clock)
{
    int rc = ofccl__comm_progress(comm);

    for (int s = 0; s < OFCCL__SLOTS; s++)
        req_progress(&comm->coll->reqs[s], check_clock);
    return rc;
}
