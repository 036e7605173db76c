/*
 * The control region of a communicator: where in it each kind of word lives,
 * and writing one of this rank's words into a peer's (failure words).
 * Peers write into these words (descriptors, counters, eager slots), so every
 * rank must compute the same layout from the communicator size and
 * OFCCL_EAGER_BYTES (checked when the communicator is created).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "util.h"

/* ---- control region layout (words) ----
 * [FIXED]                          barrier and test words (core.h)
 * [DESC_OUT: SLOTS x 8]            this rank's outgoing descriptor per slot
 * [DESC_IN: SLOTS x size x 8]      descriptors written here by the ranks we write to
 * [DESC_CNT: SLOTS x size]         atomic path: descriptor-landed counters
 * [ARR_CNT: SLOTS x size]          atomic path: per-writer data counters
 * [TAKE: SLOTS x size]             all-gather take: who copies each writer's block here
 * [SHARE: SLOTS x 16]              pull reduce-scatter: grains taken, through */
size_t ofccl__ctrl_desc_out(unsigned slot)
{
    return OFCCL__CTRL_FIXED + (size_t)slot * OFCCL__DESC_WORDS;
}

size_t ofccl__ctrl_desc_in(int size, unsigned slot, int from)
{
    return OFCCL__CTRL_FIXED + OFCCL__SLOTS * OFCCL__DESC_WORDS +
           ((size_t)slot * (size_t)size + (size_t)from) * OFCCL__DESC_WORDS;
}

size_t ofccl__ctrl_desc_cnt(int size, unsigned slot, int from)
{
    return ofccl__ctrl_desc_in(size, OFCCL__SLOTS, 0) + (size_t)slot * (size_t)size + (size_t)from;
}

size_t ofccl__ctrl_arr_cnt(int size, unsigned slot, int from)
{
    return ofccl__ctrl_desc_cnt(size, OFCCL__SLOTS, 0) + (size_t)slot * (size_t)size + (size_t)from;
}

/* [TAKE: SLOTS x size]: for the all-gather with takes, the word of writer
 * `from`'s block into this rank: seq + 1 once the writer (pushing) or this rank
 * (pulling) has claimed it for collective seq. */
size_t ofccl__ctrl_take(int size, unsigned slot, int from)
{
    return ofccl__ctrl_arr_cnt(size, OFCCL__SLOTS, 0) + (size_t)slot * (size_t)size + (size_t)from;
}

/* [SHARE: SLOTS x 16] from a cache-line boundary, two lines per slot, for the
 * pull reduce-scatter: the counter of grains taken from this rank's block,
 * which every rank of the host increments, then the word in which this rank
 * says it is through (seq + 1), which every rank polls (the all-gather with
 * takes too). */
size_t ofccl__ctrl_claim(int size, unsigned slot)
{
    return ((ofccl__ctrl_take(size, OFCCL__SLOTS, 0) + 7) & ~(size_t)7) + (size_t)slot * 16;
}

size_t ofccl__ctrl_through(int size, unsigned slot)
{
    return ofccl__ctrl_claim(size, slot) + 8;
}

/* [EAGER_OUT: SLOTS x size x slot] [EAGER_IN: EAGER_RING x size x slot] follow,
 * from a cache-line boundary: slots are whole lines, so a small payload shares
 * its header's line. */
static size_t eager_base_word(int size)
{
    return ofccl__ctrl_claim(size, OFCCL__SLOTS);
}

size_t ofccl__ctrl_eager_slot_bytes(int size, size_t eager_bytes)
{
    size_t per = (eager_bytes + (size_t)size - 1) / (size_t)size;
    return (OFCCL__EAGER_HDR + per + 63) / 64 * 64;
}

size_t ofccl__coll_ctrl_words(int size, size_t eager_bytes)
{
    size_t words = eager_base_word(size);

    if (eager_bytes > 0)
        words += (size_t)(OFCCL__SLOTS + OFCCL__EAGER_RING) * (size_t)size *
                 (ofccl__ctrl_eager_slot_bytes(size, eager_bytes) / sizeof(uint64_t));
    return words;
}

size_t ofccl__ctrl_eager_out(const ofccl_comm_t *comm, unsigned slot, int p)
{
    return eager_base_word(comm->size) +
           ((size_t)slot * (size_t)comm->size + (size_t)p) * (comm->coll->eager_slot / 8);
}

size_t ofccl__ctrl_eager_in(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return ofccl__ctrl_eager_out(comm, OFCCL__SLOTS, 0) +
           ((size_t)(seq % OFCCL__EAGER_RING) * (size_t)comm->size + (size_t)from) *
               (comm->coll->eager_slot / 8);
}

uint8_t *ofccl__eager_out(const ofccl_comm_t *comm, unsigned slot, int p)
{
    return (uint8_t *)&comm->ctrl[ofccl__ctrl_eager_out(comm, slot, p)];
}

const uint8_t *ofccl__eager_in(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return (const uint8_t *)&comm->ctrl[ofccl__ctrl_eager_in(comm, seq, from)];
}

uint64_t ofccl__eager_in_offset(const ofccl_comm_t *comm, uint64_t seq, int from)
{
    return ofccl__ctrl_eager_in(comm, seq, from) * sizeof(uint64_t);
}

int ofccl__ctrl_put_word(ofccl_comm_t *comm, int peer, unsigned src_word, unsigned dst_word,
                         ofccl__op_t *op)
{
    uint64_t v = atomic_load_explicit(&comm->ctrl[src_word], memory_order_relaxed);
    ofccl__err_t e;

    if (!ofccl__comm_resolved(comm, peer))
        return OFCCL_ERR_STATE;
    if (comm->peer_ctrl_at != NULL && comm->peer_ctrl_at[peer] != NULL) {
        atomic_store_explicit(&comm->peer_ctrl_at[peer][dst_word], v, memory_order_release);
        return 0;
    }
    if (ofccl__ep_write(comm->ep, peer, (const void *)&comm->ctrl[src_word], sizeof(uint64_t),
                        comm->ctrl_mr, &comm->peer_ctrl[peer], dst_word * sizeof(uint64_t), op,
                        &e) != 0)
        return e.code;
    comm->ops_pending++;
    return 1;
}
