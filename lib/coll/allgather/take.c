/* All-gather, direct with takes (providers that map peers' memory:
 * caps.peer_map; OFCCL_AG_TAKE). Each rank writes its block into every peer's
 * buffer, as direct does, and announces where its block can be read (its
 * second window, where it is ofccl memory). A rank that has written what it
 * can copies, from the writer's buffer, each block that has not reached it
 * yet. So a rank that posts late, or runs on a slow core, finds its block
 * already taken by the ranks that waited for it: direct hands each rank's delay
 * to the rank it writes last, which posts late in turn, and the delays go round
 * and round; here they end with the collective.
 *
 * Who copies writer w's block into rank t is decided once per collective, in
 * t's control region (the take word of w: seq + 1 once claimed): w claims it
 * before writing, t before reading. A rank whose block another rank took
 * waits until that rank says its output is complete (its through word, as the
 * pull reduce-scatter's) before its source may change. */
#include <string.h>

#include "coll.h"
#include "util.h"

/* What became of each peer's block here and of this rank's block there: the
 * request's private state, one byte per peer. */
enum {
    TAKE_WRITE = 1, /* as writer: this rank won the claim and writes its block */
    TAKE_TAKEN = 2, /* as writer: the target took it (and says when it is through) */
    TAKE_READ = 4,  /* as target: this rank took the writer's block */
    TAKE_GIVEN = 8, /* as target: the writer writes it */
    TAKE_NONE = 16, /* as target: the writer announced no source to read */
};

/* Claim the take word of w's block into t for this collective. */
static bool claim(ofccl__req_t *r, int t, int w)
{
    _Atomic uint64_t *c = ofccl__coll_take_word(r, t, w);
    uint64_t old = atomic_load_explicit(c, memory_order_acquire), tag = r->seq + 1;

    /* Tags only grow: a word of an older collective on this slot is free. */
    while (old < tag)
        if (atomic_compare_exchange_weak_explicit(c, &old, tag, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    return false;
}

/* Write this rank's block to every peer whose claim it wins, right neighbour
 * first. *done: every peer settled and written to; *busy: writes are left
 * that flow control holds back (they come before taking). */
static int write_own(ofccl__req_t *r, bool *done, bool *busy)
{
    ofccl_comm_t *comm = r->comm;
    uint8_t *claimed = ofccl__algo_priv(r);

    *done = true;
    *busy = false;
    for (int k = 1; k < comm->size; k++) {
        int t = (comm->rank + k) % comm->size, rc;

        if (!(claimed[t] & (TAKE_WRITE | TAKE_TAKEN))) {
            if (!r->peer_ready[t]) { /* t has not posted: its buffer is unknown */
                *done = false;
                continue;
            }
            claimed[t] |= claim(r, t, comm->rank) ? TAKE_WRITE : TAKE_TAKEN;
        }
        if (!(claimed[t] & TAKE_WRITE))
            continue;
        if ((rc = ofccl__ag_put_own(r, t)) != 0)
            return rc;
        if (r->sent[t] < r->nchunks)
            *done = false, *busy = true;
    }
    return 0;
}

/* Take one block that has not reached this rank: from the first writer whose
 * source is announced and whose claim this rank wins. The claim comes before
 * the mapping: a writer that won it may have completed and freed its buffer;
 * one that lost it waits for this rank to be through. */
static void take_one(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    uint8_t *claimed = ofccl__algo_priv(r);

    for (int k = 1; k < comm->size; k++) {
        int w = (comm->rank + k) % comm->size;
        char *at = NULL;

        if ((claimed[w] & (TAKE_READ | TAKE_GIVEN | TAKE_NONE)) || !r->peer_ready[w])
            continue;
        if (!ofccl__coll_peer_out_announced(r, w)) {
            claimed[w] |= TAKE_NONE;
            continue;
        }
        if (!claim(r, comm->rank, w)) {
            claimed[w] |= TAKE_GIVEN;
            continue;
        }
        /* Claimed, so its owner waits for this rank unless its collective has
         * ended (failed: its notice or its exit names the cause). Gone: this
         * rank waits to be told, as for any block that does not come. */
        if (ofccl__coll_map_peer_src(r, w, &at) != 0 || at == NULL) {
            claimed[w] |= TAKE_NONE;
            continue;
        }
        if (ofccl__exec_copy(r, (char *)r->dst.ptr + (size_t)w * r->block, at, r->block) != 0)
            return; /* r failed, and says why */
        claimed[w] |= TAKE_READ;
        r->from_cnt[w] = r->nchunks;
        r->arrived += r->nchunks;
        comm->ctx->stats.pulled_bytes += r->block;
        ofccl__ctx_moved(comm->ctx);
        return;
    }
}

/* A rank that took this rank's block and is not through with it yet. */
static const char *waits_on(const ofccl__req_t *r, int t)
{
    const uint8_t *claimed = ofccl__algo_priv(r);

    if (!(claimed[t] & TAKE_TAKEN) || atomic_load_explicit(ofccl__coll_share_word(r, t, true),
                                                           memory_order_acquire) >= r->seq + 1)
        return NULL;
    return "still reading our block (it took it)";
}

/* Every rank that took this rank's block is through with it. */
static bool takers_through(const ofccl__req_t *r)
{
    for (int t = 0; t < r->comm->size; t++)
        if (waits_on(r, t) != NULL)
            return false;
    return true;
}

static int progress(ofccl__req_t *r)
{
    bool written, busy;
    int rc = write_own(r, &written, &busy);

    if (rc)
        return rc;
    /* Written what it can: take what has not come (one block per pass). */
    if (!busy && r->arrived < r->units_in)
        take_one(r);
    /* A taken block counts when its copy is posted; the copy itself may end
     * later (an executor that completes on a stream): through only then. */
    if (r->arrived < r->units_in || !ofccl__exec_idle(r))
        return 0;
    /* Complete here: nobody reads a peer's block for this rank any more. */
    ofccl__through_say(r);
    r->finished = written && takers_through(r);
    return 0;
}

const ofccl__algo_t ofccl__ag_take = {
    .size = sizeof(ofccl__algo_t),
    .name = "take",
    .coll = OFCCL__AG,
    .wire_id = OFCCL__WIRE_TAKE,
    .flags = OFCCL__ALGO_ALL_PAIRS,
    .plan = ofccl__plan_direct,
    .progress = progress,
    .writer_of = ofccl__direct_writer_of,
    .unit_of = ofccl__direct_unit_of,
    .waits_on = waits_on,
    .buffers = OFCCL__BUF_SHOW_SRC,
    .priv_per_peer = 1,
};
