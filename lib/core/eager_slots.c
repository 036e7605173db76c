/*
 * Eager slots: a small direct collective skips the descriptor round trip.
 * Writer w puts {header, payload} for collective s into receiver r's control
 * region at slot (s % 16, w), and the header carries what a descriptor would
 * (sequence, fingerprint, count). Safe without credits: w posts s only after
 * its own s-8 completed, which (s-8 being all-pairs) needed r's data for s-8,
 * so r had posted s-8 and thus finished s-16, the slot's previous user. Hence
 * eager only when s-8 was all-pairs too; every rank decides the same way.
 * Where peers' control regions are mapped here, w stores the slot itself, the
 * header's last word (seq + 1, the mark) last with release, and r polls the
 * mark; otherwise it is one write with CQ data, counted per ring slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "trace.h"
#include "util.h"

bool ofccl__eager_possible(const ofccl_comm_t *comm, size_t block)
{
    const ofccl__coll_state_t *cs = comm->coll;
    uint64_t seq = cs->next_seq;

    return cs->eager_bytes > 0 && comm->size > 1 && comm->signal_mode == OFCCL__SIGNAL_CQDATA &&
           block * (size_t)comm->size <= cs->eager_bytes &&
           block + OFCCL__EAGER_HDR <= cs->eager_slot &&
           (seq < OFCCL__SLOTS || cs->all_pairs[(seq - OFCCL__SLOTS) % OFCCL__SLOTS]);
}

bool ofccl__eager_mapped(const ofccl_comm_t *comm, int p)
{
    return comm->peer_ctrl_at != NULL && comm->peer_ctrl_at[p] != NULL;
}

void ofccl__eager_header(const ofccl__req_t *r, uint8_t *area)
{
    uint64_t h[OFCCL__EAGER_WORDS] = {(uint64_t)r->comm->rank, r->fingerprint, r->count,
                                      r->seq + 1};
    memcpy(area, h, sizeof(h));
}

void ofccl__eager_store(const ofccl__req_t *r, int p, const void *payload, size_t len)
{
    const ofccl_comm_t *comm = r->comm;
    _Atomic uint64_t *slot = comm->peer_ctrl_at[p] + ofccl__ctrl_eager_in(comm, r->seq, comm->rank);
    uint64_t h[OFCCL__EAGER_WORDS];

    ofccl__eager_header(r, (uint8_t *)h);
    for (int w = 0; w < OFCCL__EAGER_MARK; w++)
        atomic_store_explicit(&slot[w], h[w], memory_order_relaxed);
    if (len)
        memcpy((void *)(slot + OFCCL__EAGER_WORDS), payload, len);
    /* memcpy may use non-temporal stores for large copies, which a release
     * store does not order; eager slots are far below where it starts to. */
    if (len >= ((size_t)64 << 10))
        atomic_thread_fence(memory_order_seq_cst);
    atomic_store_explicit(&slot[OFCCL__EAGER_MARK], h[OFCCL__EAGER_MARK], memory_order_release);
}

/* Mapped path: has `from`'s {header, data} for collective `seq` been stored here? */
static bool eager_marked(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return atomic_load_explicit(
               &comm->ctrl[ofccl__ctrl_eager_in(comm, seq, from) + OFCCL__EAGER_MARK],
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

bool ofccl__eager_all_marked(const ofccl__req_t *r)
{
    const ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++)
        if (r->writes_to_me[p] && !eager_marked(comm, r->seq, p))
            return false;
    return true;
}

/* Eager data may land before this rank posts the collective: count per ring slot. */
void ofccl__on_eager_signal(void *arg, uint32_t payload)
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
    bool mapped = comm->peer_ctrl_at != NULL, all_in = true;

    for (int p = 0; p < comm->size; p++) {
        bool in;
        if (p == comm->rank)
            continue;
        /* A descriptor for this collective means that peer chose the other path. */
        if (ofccl__desc_landed(r, p)) {
            ofccl__notice_mismatch(comm, r->seq, p, OFCCL__FIELD_PATH);
            return ofccl__coll_fail(r, OFCCL_ERR_MISMATCH,
                                    "rank %d posted it on the descriptor path, rank %d on the "
                                    "eager one: the count (or OFCCL_EAGER_BYTES) differs",
                                    p, comm->rank);
        }
        in = ofccl__eager_from_in(r, p);
        /* Data from a rank the plan does not expect: it planned another
         * collective (another root, say); its header says which field. */
        if (in && !r->writes_to_me[p]) {
            const uint64_t *h = (const uint64_t *)ofccl__eager_in(comm, r->seq, p);
            ofccl__desc_expect_t x = {.seq = r->seq,
                                      .fingerprint = r->fingerprint,
                                      .count = r->count,
                                      .from = p,
                                      .me = comm->rank};
            char why[256] = "";
            int field, rc = ofccl__eager_check(h, &x, why, sizeof(why), &field);
            ofccl__notice_mismatch(comm, r->seq, p, field);
            return ofccl__coll_fail(r, rc ? rc : OFCCL_ERR_MISMATCH, "%s",
                                    rc ? why
                                       : "a rank this collective expects nothing from "
                                         "sent it data: the ranks planned different "
                                         "collectives");
        }
        all_in &= in || !r->writes_to_me[p];
        if (in && comm->ctx->trace != NULL && r->tr[p].last_in == 0)
            ofccl__trace_req_in(r, p); /* first seen: when it arrived, give or take a pass */
    }
    if (!all_in)
        return 0;
    if (!mapped) { /* consumed: the ring slot may be reused */
        cs->eager_cnt[r->seq % OFCCL__EAGER_RING] = 0;
        memset(cs->eager_seen + (r->seq % OFCCL__EAGER_RING) * (size_t)comm->size, 0,
               (size_t)comm->size);
    }
    return 1;
}

/* A rank that sent collective `seq` eagerly (to a request on the descriptor
 * path: a mismatch), or -1. */
int ofccl__eager_sender(const ofccl_comm_t *comm, uint64_t seq)
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
