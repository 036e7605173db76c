/*
 * Creating a communicator: every rank opens its endpoint and control region,
 * then the ranks exchange one record each — endpoint name, control region
 * key, host, provider, signal path and every setting that must agree — and a
 * status, so that creation completes collectively: either every rank returns
 * the communicator or every rank returns an error that names the rank whose
 * side failed. The exchange goes through the bootstrap for a world
 * communicator and through the parent's fabric for a split one (ofccl__xchg_t).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "comm_impl.h"
#include "engine_impl.h"
#include "pool.h"
#include "setup_record.h"
#include "trace.h"
#include "util.h"

/* Map one peer's control region (caps.peer_map). */
int ofccl__setup_map_peer(ofccl_comm_t *comm, int p)
{
    void *at;
    int rc = ofccl__ep_peer_map(comm->ep, p, &comm->peer_ctrl[p], 0, comm->peer_ctrl[p].len,
                                OFCCL__ACC_REMOTE_WRITE, &at, &comm->err);

    if (rc)
        return ofccl__comm_fail(comm, rc, "comm setup: %s", comm->err.msg);
    comm->peer_ctrl_at[p] = at;
    return 0;
}

/* Map every peer's control region (caps.peer_map): descriptors and eager
 * collectives' {header, data} are then stored into it directly, no op,
 * completion or CQ data on the way. All or nothing, so every rank of the
 * communicator takes the same path. */
static int map_peer_ctrl(ofccl_comm_t *comm)
{
    comm->peer_ctrl_at = calloc((size_t)comm->size, sizeof(*comm->peer_ctrl_at));
    if (comm->peer_ctrl_at == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory");
    for (int p = 0; p < comm->size; p++) {
        int rc = ofccl__setup_map_peer(comm, p);
        if (rc)
            return rc;
    }
    OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_CORE,
                 "rank %d: descriptors and eager data go straight into the %d peers' mapped "
                 "control regions",
                 comm->rank, comm->size - 1);
    return 0;
}

/* FNV-1a of the host identity string. */
/* This rank's half: endpoint, control region, and its record encoded in `blob`. */
static int setup_local(ofccl_comm_t *comm, ofccl__setup_rec_t *mine, uint8_t *blob, size_t cap,
                       size_t *blen)
{
    ofccl_ctx_t *ctx = comm->ctx;
    const ofccl__prov_caps_t *caps = ofccl__prov_caps(ctx->prov);
    uint8_t packed[OFCCL__SETUP_REC_MAX];
    size_t len;
    int rc;

    rc = ofccl__comm_choose_signal(comm, caps);
    if (rc)
        return rc;
    ofccl__ep_params_t ep_params = {
        .rank = comm->rank,
        .size = comm->size,
        .ops_inflight = (unsigned)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_OPS_INFLIGHT),
        .rx_posted = (unsigned)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_RX_POSTED),
        .execs = &ctx->execs,
    };
    rc = ofccl__ep_open(ctx->prov, &ep_params, &comm->ep, &comm->err);
    if (rc)
        return ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    comm->ctrl_words = ofccl__coll_ctrl_words(
        comm->size, (size_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_EAGER_BYTES));
    comm->ctrl = ofccl__prov_mem_alloc(comm->ep, comm->ctrl_words * sizeof(uint64_t));
    if (comm->ctrl == NULL) {
        rc = ofccl__prov_mem_error(comm->ep, comm->ctrl_words * sizeof(uint64_t), &comm->err);
        return ofccl__comm_fail(comm, rc, "comm setup: control region: %s", comm->err.msg);
    }
    memset((void *)comm->ctrl, 0, comm->ctrl_words * sizeof(uint64_t));
    rc = ofccl__mr_reg(comm->ep, (void *)comm->ctrl, comm->ctrl_words * sizeof(uint64_t),
                       OFCCL__ACC_LOCAL | OFCCL__ACC_REMOTE_ATOMIC | OFCCL__ACC_REMOTE_WRITE,
                       &comm->ctrl_mr, &comm->err);
    if (rc)
        return ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    mine->size = (uint32_t)comm->size;
    mine->world = (uint32_t)ctx->boot->rank;
    mine->comm_id = ctx->comm_seq + 1; /* a proposal: the highest one wins */
    mine->signal_mode = (uint32_t)comm->signal_mode;
    mine->strict = caps->strict;
    mine->cq_data_size = (uint32_t)caps->cq_data_size;
    ofccl__setup_rec_agree_fill(&ctx->cfg, mine);
    memcpy(mine->link, ctx->link, sizeof(mine->link));
    ofccl__strlcpy(mine->prov, caps->name, sizeof(mine->prov));
    ofccl__strlcpy(mine->host, ctx->boot->hostname, sizeof(mine->host));
    mine->host_key = ofccl__hash_str(ctx->boot->host_id);
    mine->ctrl_base = comm->ctrl_mr->base;
    mine->ctrl_key = comm->ctrl_mr->key;
    mine->ctrl_len = comm->ctrl_mr->len;
    len = sizeof(mine->name);
    rc = ofccl__ep_name(comm->ep, mine->name, &len, &comm->err);
    if (rc)
        return ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    mine->namelen = (uint32_t)len;
    *blen = ofccl__blob_encode(blob, cap, OFCCL__BLOB_COMM, (uint32_t)comm->rank, packed,
                               ofccl__setup_rec_pack(mine, packed));
    return 0;
}

/* Every member's record: check it, learn its host, insert the peers and map
 * their control regions. *id gets the communicator's number (the highest
 * proposal). */
static int setup_peers(ofccl_comm_t *comm, const ofccl__setup_rec_t *mine, const uint8_t *all,
                       size_t slot, const size_t *lens, uint32_t *id)
{
    ofccl__setup_rec_t *theirs = calloc((size_t)comm->size, sizeof(*theirs));
    uint64_t *keys = calloc((size_t)comm->size, sizeof(*keys));
    uint8_t *names = malloc(OFCCL__NAME_MAX * (size_t)comm->size);
    size_t *namelens = calloc((size_t)comm->size, sizeof(*namelens));
    ofccl__link_t(*links)[OFCCL__LINK_CLASSES] = calloc((size_t)comm->size, sizeof(*links));
    int rc = 0, local_size = 0, local_rank = 0;

    comm->peer_ctrl = calloc((size_t)comm->size, sizeof(*comm->peer_ctrl));
    comm->host_of = calloc((size_t)comm->size, sizeof(*comm->host_of));
    comm->host_name = calloc((size_t)comm->size, sizeof(*comm->host_name));
    comm->world_of = calloc((size_t)comm->size, sizeof(*comm->world_of));
    if (!theirs || !keys || !names || !namelens || !links || !comm->peer_ctrl || !comm->host_of ||
        !comm->host_name || !comm->world_of) {
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory for %d ranks",
                              comm->size);
        goto out;
    }
    *id = mine->comm_id;
    for (int r = 0; r < comm->size && rc == 0; r++) {
        rc = ofccl__setup_rec_decode(comm, r, all + slot * (size_t)r, lens[r], mine, &theirs[r]);
        if (rc == 0)
            rc = ofccl__hosts_add(comm, r, theirs[r].host);
        if (rc)
            break;
        *id = OFCCL__MAX(*id, theirs[r].comm_id);
        comm->world_of[r] = (int)theirs[r].world;
        keys[r] = theirs[r].host_key;
        if (theirs[r].host_key == mine->host_key) {
            local_rank += r < comm->rank;
            local_size++;
        }
        memcpy(names + OFCCL__NAME_MAX * (size_t)r, theirs[r].name, theirs[r].namelen);
        namelens[r] = theirs[r].namelen;
        memcpy(links[r], theirs[r].link, sizeof(links[r]));
        comm->peer_ctrl[r] =
            (ofccl__rkey_t){theirs[r].ctrl_base, theirs[r].ctrl_key, theirs[r].ctrl_len};
    }
    if (rc == 0 && comm->local_size == 0) { /* not given by the launcher (PMIx): by host */
        comm->local_rank = local_rank;
        comm->local_size = local_size;
    }
    if (rc == 0)
        rc = ofccl__nodes_from_keys(comm, keys);
    if (rc == 0)
        rc = ofccl__links_agree(comm, (const ofccl__link_t(*)[OFCCL__LINK_CLASSES])links);
    if (rc == 0) {
        rc = ofccl__ep_insert_peers(comm->ep, names, OFCCL__NAME_MAX, namelens, comm->size,
                                    &comm->err);
        if (rc)
            rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    }
    /* Every peer registered its control region before publishing its record,
     * and none returns (so none can destroy and deregister it) before the
     * status exchange, which waits for this rank too: map before it. */
    if (rc == 0 && ofccl__prov_caps(comm->ctx->prov)->peer_map)
        rc = map_peer_ctrl(comm);
out:
    free(keys);
    free(theirs);
    free(names);
    free(namelens);
    free(links);
    return rc;
}

/* Published, but some rank's provider attaches every peer at once (shm, the
 * local transport; the same on every rank unless OFCCL_PROVIDER differs,
 * which the neighbours' check has caught by now): every rank collects every
 * record after all, as under OFCCL_BOOT_EXCHANGE=all. */
static int setup_collect_all(ofccl_comm_t *comm, const ofccl__xchg_t *x,
                             const ofccl__setup_rec_t *mine, const uint8_t *blob, size_t blen,
                             size_t slot, uint64_t released, uint32_t *id)
{
    uint8_t *all = malloc(slot * (size_t)comm->size);
    size_t *lens = calloc((size_t)comm->size, sizeof(*lens));
    bool again = false;
    ofccl__err_t e;
    int rc = 0, xrc;

    ofccl__peers_lazy_drop(comm);
    ofccl__boot_pub_free(comm->pub);
    comm->pub = NULL;
    if (all == NULL || lens == NULL)
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory");
    xrc = all && lens ? x->allgather(x->arg, blob, blen, all, slot, lens, &e) : OFCCL_ERR_NO_MEMORY;
    if (xrc && rc == 0)
        rc = ofccl__comm_fail(comm, xrc, "%s", xrc == OFCCL_ERR_NO_MEMORY ? "no memory" : e.msg);
    if (rc == 0)
        rc = setup_peers(comm, mine, all, slot, lens, id);
    free(all);
    free(lens);
    return ofccl__setup_status_reduced(comm, x, rc, released, id, &again);
}

int ofccl__comm_create(ofccl_ctx_t *ctx, const ofccl__comm_init_t *init, const ofccl__xchg_t *x,
                       ofccl_comm_t **out)
{
    size_t slot = OFCCL__BLOB_HDR + OFCCL__SETUP_REC_MAX, blen = 0, *lens = NULL;
    uint8_t blob[OFCCL__BLOB_HDR + OFCCL__SETUP_REC_MAX], *all = NULL;
    ofccl__setup_rec_t mine = {0};
    uint64_t released;
    uint32_t id = 0;
    ofccl__err_t e;
    ofccl_comm_t *comm = calloc(1, sizeof(*comm));
    int rc, xrc;

    if (comm == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "%s: out of memory", init->what);
    comm->ctx = ctx;
    comm->rank = init->rank;
    comm->size = init->size;
    comm->local_rank = init->local_rank;
    comm->local_size = init->local_size;
    comm->timeout_ms = (uint64_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_TIMEOUT_MS);
    comm->fail_pos = UINT64_MAX;
    comm->notice_sent_seq = UINT64_MAX;
    comm->gone = calloc((size_t)comm->size, 1);
    ofccl__comm_handlers(comm);
    if (x->publish == NULL) { /* the lazy path reads records one at a time */
        all = malloc(slot * (size_t)comm->size);
        lens = calloc((size_t)comm->size, sizeof(*lens));
    }
    rc = comm->gone != NULL && (x->publish != NULL || (all && lens))
             ? setup_local(comm, &mine, blob, sizeof(blob), &blen)
             : ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "%s: out of memory", init->what);
    if (rc == 0 && (comm->setup_mine = malloc(sizeof(mine))) == NULL)
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "%s: out of memory", init->what);
    if (rc == 0)
        memcpy(comm->setup_mine, &mine, sizeof(mine));
    /* Creation is collective: a rank whose side failed still takes part in
     * both exchanges (with nothing to offer), so that no peer waits for it. */
    if (x->publish != NULL)
        xrc = x->publish(x->arg, rc ? NULL : blob, rc ? 0 : blen, slot, &comm->pub, &e);
    else
        xrc = all && lens
                  ? x->allgather(x->arg, rc ? NULL : blob, rc ? 0 : blen, all, slot, lens, &e)
                  : OFCCL_ERR_NO_MEMORY;
    released = ofccl__now_ns();
    if (xrc && rc == 0)
        rc = ofccl__comm_fail(comm, xrc, "%s", xrc == OFCCL_ERR_NO_MEMORY ? "no memory" : e.msg);
    id = mine.comm_id;
    if (rc == 0 && x->publish != NULL) {
        rc = ofccl__hosts_from_boot(comm, mine.host);
        if (rc == 0)
            rc = ofccl__peers_lazy_init(comm, blob, blen);
    } else if (rc == 0)
        rc = setup_peers(comm, &mine, all, slot, lens, &id);
    free(all);
    free(lens);
    if (x->publish != NULL) {
        bool need_all = !ofccl__prov_caps(ctx->prov)->add_peer;

        rc = ofccl__setup_status_reduced(comm, x, rc, released, &id, &need_all);
        if (rc == 0 && need_all)
            rc = setup_collect_all(comm, x, &mine, blob, blen, slot, released, &id);
    } else {
        rc = ofccl__setup_status(comm, x, rc, released, &id);
    }
    if (rc == 0) {
        comm->id = id;
        ctx->comm_seq = OFCCL__MAX(ctx->comm_seq, id);
        ofccl__ep_peers_ready(comm->ep); /* every peer has inserted (mapped) ours */
        if ((rc = ofccl__coll_init(comm)) != 0)
            ofccl__comm_fail(comm, rc, "communicator setup: no memory for the collective engine");
        else if ((rc = ofccl__pool_init(comm)) != 0)
            ofccl__comm_fail(comm, rc, "communicator setup: no memory for the pool");
        else if (ofccl__handle_add(comm) != 0)
            rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "%s: out of memory", init->what);
    } else {
        /* Ids are numbered alike on every rank, failed or not. */
        ctx->comm_seq++;
    }
    if (rc) {
        ofccl__fail(NULL, OFCCL__SUB_CORE, &ctx->err, rc, "%s", comm->err.msg);
        ofccl__comm_free(comm);
        return rc;
    }
    ctx->ncomms++;
    comm->next = ctx->comms;
    ctx->comms = comm;
    OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE,
                "communicator %u: rank %d of %d (%d on this host) on %s, %s signals", comm->id,
                comm->rank, comm->size, comm->local_size, ofccl__prov_caps(ctx->prov)->name,
                comm->signal_mode == OFCCL__SIGNAL_CQDATA ? "CQ data" : "atomic");
    *out = comm;
    return 0;
}

int ofccl__comm_create_none(ofccl_ctx_t *ctx, const ofccl__xchg_t *x)
{
    uint8_t none;
    size_t len = 0;
    ofccl__err_t e;
    int rc;

    /* The two exchanges ofccl__comm_create makes, with nothing to give or take. */
    rc = x->allgather(x->arg, NULL, 0, &none, OFCCL__BLOB_HDR + OFCCL__SETUP_REC_MAX, &len, &e);
    if (rc == 0)
        rc = x->allgather(x->arg, NULL, 0, &none, OFCCL__STATUS_LEN, &len, &e);
    ctx->comm_seq++;
    if (rc)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, rc, "%s", e.msg);
    return 0;
}

void ofccl__comm_free(ofccl_comm_t *comm)
{
    /* A failed communicator's peers may be half-way through writes to us. */
    ofccl__ep_shutdown(comm->ep,
                       comm->sticky != 0 || comm->ops_pending > 0 || atomic_load(&comm->aborted));
    ofccl__memreg_forget_comm(comm);
    ofccl__pool_fini(comm);
    if (comm->ctrl_mr)
        ofccl__mr_dereg(comm->ctrl_mr);
    ofccl__coll_fini(comm);
    ofccl__ep_close(comm->ep);
    ofccl__prov_mem_free((void *)comm->ctrl);
    free(comm->peer_ctrl);
    free(comm->peer_ctrl_at);
    free(comm->resolved);
    free(comm->gone);
    free(comm->setup_mine);
    ofccl__boot_pub_free(comm->pub);
    free(comm->host_of);
    free(comm->world_of);
    free(comm->host_name);
    free(comm->node_of);
    free(comm->node_idx);
    free(comm->node_rank);
    free(comm);
}
