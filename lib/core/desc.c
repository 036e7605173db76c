/*
 * Descriptors: before any data moves, every rank that will be written to
 * announces its destination to the ranks that write into it — {seq,
 * fingerprint, count, base, key, len, offset, rank, premul scalar, layout
 * hash, tensors, layout offset, and where the pull reduce-scatter's output
 * may be written: base, key, len, offset}. The descriptor is also the credit (a buffer
 * is announced only when free) and the argument check: a writer validates it
 * (untrusted input) before using the key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "trace.h"
#include "util.h"

/* ---- descriptors ---- */
/* The premul scalar's bits (0 unless the op uses it). */
uint64_t ofccl__scalar_bits(const ofccl__req_t *r)
{
    uint64_t bits = 0;

    if (r->coll == OFCCL__RS && r->op.kind == OFCCL_OP_PREMUL_SUM)
        memcpy(&bits, &r->op.scalar, sizeof(bits));
    return bits ^ r->tag; /* what else ranks must agree on (a push's plan) */
}

/* {operation:4, dtype:4, op:4, algorithm:4, bucket:1, ..., scalar folded:32}.
 * Descriptors also carry the exact scalar (for messages); eager headers only
 * this fold, which differs for any two scalars that differ in practice. */
uint64_t ofccl__fingerprint(const ofccl__req_t *r)
{
    uint64_t s = ofccl__scalar_bits(r);

    return (uint64_t)r->coll | (uint64_t)r->dtype << 4 |
           (uint64_t)(r->coll == OFCCL__RS ? r->op.kind : 0) << 8 |
           (uint64_t)r->algo->wire_id << 12 | (uint64_t)(r->bucket != 0) << 16 |
           (uint64_t)(r->coll == OFCCL__BC ? (uint32_t)r->root & 0x7fffu : 0) << 17 |
           (uint64_t)(uint32_t)(s ^ (s >> 32)) << 32;
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
    return atomic_load_explicit(&comm->ctrl[ofccl__ctrl_desc_cnt(comm->size, slot, from)],
                                memory_order_acquire) == seq + 1;
}

/* Has `from`'s descriptor for request r's collective landed here? */
bool ofccl__desc_landed(const ofccl__req_t *r, int from)
{
    const ofccl_comm_t *comm = r->comm;

    if (desc_mapped(comm))
        return desc_marked(comm, r->slot, from, r->seq);
    return comm->coll->desc_flag[(size_t)r->slot * (size_t)comm->size + (size_t)from] != 0;
}

bool ofccl__desc_owed(const ofccl__req_t *r, int from)
{
    const ofccl_comm_t *comm = r->comm;
    size_t idx = (size_t)r->slot * (size_t)comm->size + (size_t)from;

    if (!r->i_write_to[from] || r->peer_ready[from])
        return false;
    if (comm->signal_mode == OFCCL__SIGNAL_ATOMIC && !desc_mapped(comm))
        return atomic_load_explicit(&comm->ctrl[ofccl__ctrl_desc_cnt(comm->size, r->slot, from)],
                                    memory_order_acquire) <= comm->coll->desc_seen[idx];
    return !ofccl__desc_landed(r, from);
}

static void store_descriptor(const ofccl__req_t *r, int p, const uint64_t *d)
{
    const ofccl_comm_t *comm = r->comm;
    _Atomic uint64_t *at = comm->peer_ctrl_at[p];

    for (int w = 0; w < OFCCL__DESC_WORDS; w++)
        atomic_store_explicit(&at[ofccl__ctrl_desc_in(comm->size, r->slot, comm->rank) + (size_t)w],
                              d[w], memory_order_relaxed);
    atomic_store_explicit(&at[ofccl__ctrl_desc_cnt(comm->size, r->slot, comm->rank)], r->seq + 1,
                          memory_order_release);
}

int ofccl__desc_send(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    uint64_t *d = (uint64_t *)&comm->ctrl[ofccl__ctrl_desc_out(r->slot)];

    d[0] = r->seq;
    d[1] = r->fingerprint;
    d[2] = r->count;
    d[3] = r->dst.mr ? r->dst.mr->base : 0;
    d[4] = r->dst.mr ? r->dst.mr->key : 0;
    d[5] = r->dst.mr ? r->dst.mr->len : 0;
    d[6] = r->dst.mr ? (uint64_t)((char *)r->dst.ptr - (char *)r->dst.mr->addr) : 0;
    d[7] = (uint64_t)comm->rank;
    d[8] = ofccl__scalar_bits(r);
    d[9] = r->bucket ? r->layout_hash : 0;
    d[10] = r->bucket ? (uint64_t)r->ntensors : 0;
    d[11] = r->bucket && r->dst.mr ? (uint64_t)((char *)r->layout - (char *)r->dst.mr->addr) : 0;
    d[12] = r->win2.mr ? r->win2.mr->base : 0;
    d[13] = r->win2.mr ? r->win2.mr->key : 0;
    d[14] = r->win2.mr ? r->win2.mr->len : 0;
    d[15] = r->win2.mr ? (uint64_t)((char *)r->win2.ptr - (char *)r->win2.mr->addr) : 0;
    for (; r->descs_sent < r->nfrom; r->descs_sent++) {
        int p = r->from[r->descs_sent];
        ofccl__wop_t *w;
        int rc;

        if (desc_mapped(comm)) {
            store_descriptor(r, p, d);
            continue;
        }
        w = ofccl__wop_get(r);
        if (w == NULL)
            return 0;
        w->peer = p;
        w->unit = UINT32_MAX;
        w->atomic = 0;
        rc = ofccl__wop_post(
            r, w, 0, d, comm->ctrl_mr, OFCCL__DESC_WORDS * sizeof(uint64_t), &comm->peer_ctrl[p],
            ofccl__ctrl_desc_in(comm->size, r->slot, comm->rank) * sizeof(uint64_t),
            ofccl__sig_encode(OFCCL__SIG_DESC, comm->id,
                              r->slot | (uint32_t)comm->rank << OFCCL__SLOT_BITS));
        if (rc == OFCCL_ERR_AGAIN)
            return 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* Which field of two fingerprints differs. */
static int fingerprint_field(uint64_t a, uint64_t b)
{
    if ((a & 0xf) != (b & 0xf))
        return OFCCL__FIELD_OPERATION;
    if (((a >> 4) & 0xf) != ((b >> 4) & 0xf))
        return OFCCL__FIELD_DTYPE;
    if (((a >> 8) & 0xf) != ((b >> 8) & 0xf))
        return OFCCL__FIELD_REDOP;
    if (((a >> 12) & 0xf) != ((b >> 12) & 0xf))
        return OFCCL__FIELD_ALGO;
    if (((a >> 16) & 1) != ((b >> 16) & 1))
        return OFCCL__FIELD_CALL;
    if (((a >> 17) & 0x7fff) != ((b >> 17) & 0x7fff))
        return OFCCL__FIELD_ROOT;
    return OFCCL__FIELD_SCALAR;
}

/* What descriptors and eager headers both say: who, which collective, what. */
static int check_ident(uint64_t from, uint64_t seq, uint64_t fp, uint64_t count,
                       const ofccl__desc_expect_t *x, char *why, size_t len, int *field)
{
    if (from != (uint64_t)x->from)
        return snprintf(why, len, "rank %d's announcement claims to come from rank %llu", x->from,
                        (unsigned long long)from),
               OFCCL_ERR_CORRUPT;
    if (seq != x->seq)
        return *field = OFCCL__FIELD_ORDER,
               snprintf(why, len,
                        "rank %d announced collective #%llu where #%llu was expected: "
                        "collectives must be posted in the same order on every rank",
                        x->from, (unsigned long long)seq, (unsigned long long)x->seq),
               OFCCL_ERR_MISMATCH;
    if (fp != x->fingerprint)
        return *field = fingerprint_field(fp, x->fingerprint),
               snprintf(why, len, "rank %d posted it with a different %s than rank %d", x->from,
                        ofccl__field_name(*field), x->me),
               OFCCL_ERR_MISMATCH;
    /* A bucket's flat count is padded: its layout is compared instead. */
    if (count != x->count && !x->bucket)
        return *field = OFCCL__FIELD_COUNT,
               snprintf(why, len, "rank %d posted it with count %llu, rank %d with count %llu",
                        x->from, (unsigned long long)count, x->me, (unsigned long long)x->count),
               OFCCL_ERR_MISMATCH;
    return 0;
}

int ofccl__eager_check(const uint64_t h[OFCCL__EAGER_WORDS], const ofccl__desc_expect_t *x,
                       char *why, size_t len, int *field)
{
    *field = OFCCL__FIELD_NONE;
    return check_ident(h[0], h[OFCCL__EAGER_MARK] - 1, h[1], h[2], x, why, len, field);
}

int ofccl__desc_check(const uint64_t d[OFCCL__DESC_WORDS], const ofccl__desc_expect_t *x, char *why,
                      size_t len, int *field)
{
    /* A descriptor is written by a peer: every field is checked before use.
     * Same collective, only the premul scalar differs: name both values. */
    int rc;

    *field = OFCCL__FIELD_NONE;
    rc = d[7] == (uint64_t)x->from && d[0] == x->seq && (uint32_t)d[1] == (uint32_t)x->fingerprint
             ? 0
             : check_ident(d[7], d[0], d[1], d[2], x, why, len, field);
    if (rc)
        return rc;
    if (d[8] != x->scalar_bits) {
        double a, b;
        *field = OFCCL__FIELD_SCALAR;
        memcpy(&a, &d[8], sizeof(a));
        memcpy(&b, &x->scalar_bits, sizeof(b));
        return snprintf(why, len, "rank %d posted it with premul scalar %.17g, rank %d with %.17g",
                        x->from, a, x->me, b),
               OFCCL_ERR_MISMATCH;
    }
    rc = check_ident(d[7], d[0], d[1], d[2], x, why, len, field);
    if (rc)
        return rc;
    if (x->bucket && d[10] != x->ntensors)
        return *field = OFCCL__FIELD_TENSORS,
               snprintf(why, len,
                        "rank %d posted a bucket of %llu tensors, rank %d one of %llu: buckets "
                        "must list the same tensors in the same order on every rank",
                        x->from, (unsigned long long)d[10], x->me, (unsigned long long)x->ntensors),
               OFCCL_ERR_MISMATCH;
    if (x->bucket && d[9] != x->layout_hash)
        return *field = OFCCL__FIELD_LAYOUT,
               snprintf(why, len,
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

void ofccl__args_words(const ofccl__req_t *r, uint64_t w[OFCCL__ARGS_WORDS])
{
    w[0] = ofccl__fingerprint(r);
    w[1] = r->count;
    w[2] = ofccl__scalar_bits(r);
    w[3] = r->bucket ? r->layout_hash : 0;
    w[4] = r->bucket ? (uint64_t)r->ntensors : 0;
}

int ofccl__args_check(ofccl__req_t *r, int from, const uint64_t w[OFCCL__ARGS_WORDS])
{
    uint64_t mine[OFCCL__ARGS_WORDS], d[OFCCL__DESC_WORDS] = {0};
    ofccl__desc_expect_t x;
    char why[256];
    int rc, field;

    ofccl__args_words(r, mine);
    x = (ofccl__desc_expect_t){.seq = r->seq,
                               .fingerprint = mine[0],
                               .count = mine[1],
                               .from = from,
                               .me = r->comm->rank,
                               .scalar_bits = mine[2],
                               .bucket = r->bucket,
                               .layout_hash = mine[3],
                               .ntensors = mine[4]};
    /* As a descriptor of an empty region (nothing of it is used). */
    d[0] = r->seq;
    d[1] = w[0];
    d[2] = w[1];
    d[7] = (uint64_t)from;
    d[8] = w[2];
    d[9] = w[3];
    d[10] = w[4];
    rc = ofccl__desc_check(d, &x, why, sizeof(why), &field);
    if (rc == 0)
        return 0;
    ofccl__notice_mismatch(r->comm, r->seq, from, field);
    return ofccl__coll_fail(r, OFCCL_ERR_MISMATCH, "%s", why);
}

/* Whether p's descriptor for r has landed, counted once (cqdata flag, atomic
 * counter) so that the next call waits for its next one. */
static bool desc_in(ofccl__req_t *r, int p)
{
    ofccl_comm_t *comm = r->comm;
    ofccl__coll_state_t *cs = comm->coll;
    size_t idx = (size_t)r->slot * (size_t)comm->size + (size_t)p;

    if (desc_mapped(comm))
        return ofccl__desc_landed(r, p);
    if (comm->signal_mode == OFCCL__SIGNAL_CQDATA) {
        if (!cs->desc_flag[idx])
            return false;
        cs->desc_flag[idx] = 0;
        return true;
    }
    if (atomic_load_explicit(&comm->ctrl[ofccl__ctrl_desc_cnt(comm->size, r->slot, p)],
                             memory_order_acquire) <= cs->desc_seen[idx])
        return false;
    cs->desc_seen[idx]++;
    return true;
}

/* Read descriptors that have landed from the ranks we write to. */
int ofccl__desc_take(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    /* Only the ranks whose descriptor is awaited: one that is in leaves the list. */
    for (unsigned i = 0; i < r->nawait;) {
        int p = r->awaiting[i];
        ofccl__desc_expect_t x;
        const uint64_t *d;
        char why[256];
        int rc, field;

        if (!desc_in(r, p)) {
            i++;
            continue;
        }
        /* Consumed, whatever it says: a failure below must not wait for it
         * again (flush_descriptors in engine.c). */
        r->awaiting[i] = r->awaiting[--r->nawait];
        x = (ofccl__desc_expect_t){.seq = r->seq,
                                   .fingerprint = r->fingerprint,
                                   .count = r->count,
                                   .need = r->algo->need_of ? r->algo->need_of(r, p) : r->dst_need,
                                   .from = p,
                                   .me = comm->rank,
                                   .scalar_bits = ofccl__scalar_bits(r),
                                   .bucket = r->bucket,
                                   .ntensors = r->bucket ? (uint64_t)r->ntensors : 0,
                                   .layout_hash = r->bucket ? r->layout_hash : 0};
        d = (const uint64_t *)&comm->ctrl[ofccl__ctrl_desc_in(comm->size, r->slot, p)];
        rc = ofccl__desc_check(d, &x, why, sizeof(why), &field);
        if (rc == OFCCL__LAYOUT_DIFFERS || rc == OFCCL_ERR_MISMATCH) {
            /* p finds the difference itself from our descriptor; the others
             * are told which field (notice.c). */
            ofccl__notice_mismatch(comm, r->seq, p, field);
            if (rc == OFCCL__LAYOUT_DIFFERS)
                ofccl__layout_diff(r, p, d, why, sizeof(why));
            return ofccl__coll_fail(r, OFCCL_ERR_MISMATCH, "%s", why);
        }
        if (rc)
            return ofccl__coll_fail(r, rc, "%s", why);
        r->peer_rk[p] = (ofccl__rkey_t){d[3], d[4], d[5]};
        r->peer_off[p] = d[6];
        r->peer_ready[p] = 1;
        if (comm->ctx->trace != NULL)
            ofccl__trace_req_ready(r, p);
        ofccl__ctx_moved(comm->ctx);
    }
    return 0;
}

void ofccl__on_desc_signal(void *arg, uint32_t payload)
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
