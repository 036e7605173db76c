/* Communicators: creation over the bootstrap, the sticky error state, signals
 * and the progress loop that dispatches them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "engine_impl.h"
#include "core.h"
#include "pool.h"
#include "util.h"

ofccl__op_t ofccl__comm_op_plain = {NULL, 0};

/* The setup blob's payload, little-endian on the wire: fixed words, the
 * provider and host names, the control region, the values of every setting
 * that must agree across ranks (config.h: scope AGREE), the endpoint name. */
#define SETUP_NAME_LEN 64
#define SETUP_AGREE_MAX 32
#define SETUP_FIXED (4 * 7 + 2 * SETUP_NAME_LEN + 8 * 3)
#define SETUP_MAX (SETUP_FIXED + 8 * SETUP_AGREE_MAX + OFCCL__NAME_MAX)

typedef struct setup {
    uint32_t size, comm_id, signal_mode, strict, cq_data_size, nagree, namelen;
    char prov[SETUP_NAME_LEN];
    char host[SETUP_NAME_LEN];
    uint64_t ctrl_base, ctrl_key, ctrl_len;
    int64_t agree[SETUP_AGREE_MAX]; /* in table order, string settings excluded */
    uint8_t name[OFCCL__NAME_MAX];
} setup_t;

static bool agree_param(int id)
{
    return ofccl__cfg_params[id].agree && ofccl__cfg_params[id].type != OFCCL__CT_STRING;
}

static void setup_agree_fill(const ofccl__config_t *cfg, setup_t *s)
{
    s->nagree = 0;
    for (int id = 0; id < OFCCL__CFG_COUNT && s->nagree < SETUP_AGREE_MAX; id++)
        if (agree_param(id))
            s->agree[s->nagree++] = ofccl__cfg_int(cfg, id);
}

static size_t setup_pack(const setup_t *s, uint8_t *out)
{
    const uint32_t w32[] = {s->size,         s->comm_id, s->signal_mode, s->strict,
                            s->cq_data_size, s->nagree,  s->namelen};
    const uint64_t w64[] = {s->ctrl_base, s->ctrl_key, s->ctrl_len};
    uint8_t *p = out;

    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w32); k++, p += 4)
        ofccl__put_le32(p, w32[k]);
    memcpy(p, s->prov, SETUP_NAME_LEN);
    memcpy(p + SETUP_NAME_LEN, s->host, SETUP_NAME_LEN);
    p += 2 * SETUP_NAME_LEN;
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w64); k++, p += 8)
        ofccl__put_le64(p, w64[k]);
    for (uint32_t k = 0; k < s->nagree; k++, p += 8)
        ofccl__put_le64(p, (uint64_t)s->agree[k]);
    memcpy(p, s->name, s->namelen);
    return (size_t)(p - out) + s->namelen;
}

/* Untrusted input: check every length before use. */
static int setup_unpack(ofccl_comm_t *comm, int from, const uint8_t *in, size_t len, setup_t *s)
{
    uint32_t *w32[] = {&s->size,         &s->comm_id, &s->signal_mode, &s->strict,
                       &s->cq_data_size, &s->nagree,  &s->namelen};
    uint64_t *w64[] = {&s->ctrl_base, &s->ctrl_key, &s->ctrl_len};
    const uint8_t *p = in;

    if (len < SETUP_FIXED)
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d sent %zu bytes, at least %d expected", from,
                                len, SETUP_FIXED);
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w32); k++, p += 4)
        *w32[k] = ofccl__get_le32(p);
    memcpy(s->prov, p, SETUP_NAME_LEN);
    s->prov[SETUP_NAME_LEN - 1] = '\0';
    memcpy(s->host, p + SETUP_NAME_LEN, SETUP_NAME_LEN);
    s->host[SETUP_NAME_LEN - 1] = '\0';
    p += 2 * SETUP_NAME_LEN;
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(w64); k++, p += 8)
        *w64[k] = ofccl__get_le64(p);
    if (s->nagree > SETUP_AGREE_MAX || s->namelen == 0 || s->namelen > OFCCL__NAME_MAX ||
        len != SETUP_FIXED + 8 * (size_t)s->nagree + s->namelen)
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d sent %u settings and an endpoint name of %u "
                                "bytes in a %zu-byte record",
                                from, s->nagree, s->namelen, len);
    if (s->ctrl_len < comm->ctrl_words * sizeof(uint64_t))
        return ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                "comm setup: rank %d advertised a control region of %llu bytes",
                                from, (unsigned long long)s->ctrl_len);
    for (uint32_t k = 0; k < s->nagree; k++, p += 8)
        s->agree[k] = (int64_t)ofccl__get_le64(p);
    memcpy(s->name, p, s->namelen);
    return 0;
}

/* Every rank must agree on what shapes the wire protocol. */
static int setup_check(ofccl_comm_t *comm, int from, const setup_t *mine, const setup_t *theirs)
{
    static const char *const modes[] = {"?", "cqdata", "atomic"};
#define SETUP_MISMATCH(field, fmt, a, b)                                                           \
    return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,                                              \
                            "comm setup: rank %d has " field " " fmt ", rank %d has " fmt          \
                            "; every rank must use the same OFCCL_PROVIDER, OFCCL_STRICT and "     \
                            "OFCCL_SIGNAL and create communicators in the same order",             \
                            from, b, comm->rank, a)
    if (theirs->size != mine->size)
        SETUP_MISMATCH("job size", "%u", mine->size, theirs->size);
    if (theirs->comm_id != mine->comm_id)
        SETUP_MISMATCH("communicator number", "%u", mine->comm_id, theirs->comm_id);
    if (strcmp(theirs->prov, mine->prov) != 0)
        SETUP_MISMATCH("provider", "%s", mine->prov, theirs->prov);
    if (theirs->strict != mine->strict)
        SETUP_MISMATCH("strict mode", "%u", mine->strict, theirs->strict);
    if (theirs->signal_mode != mine->signal_mode)
        SETUP_MISMATCH("signal path", "%s", modes[mine->signal_mode % 3],
                       modes[theirs->signal_mode % 3]);
    if (theirs->nagree != mine->nagree)
        SETUP_MISMATCH("a library build with a settings count of", "%u", mine->nagree,
                       theirs->nagree);
#undef SETUP_MISMATCH
    for (int id = 0, k = 0; id < OFCCL__CFG_COUNT && k < (int)mine->nagree; id++) {
        char a[64], b[64];
        if (!agree_param(id))
            continue;
        if (theirs->agree[k] != mine->agree[k]) {
            ofccl__config_format(id, theirs->agree[k], b, sizeof(b));
            ofccl__config_format(id, mine->agree[k], a, sizeof(a));
            return ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                                    "comm setup: rank %d has OFCCL_%s=%s, rank %d has "
                                    "OFCCL_%s=%s; it must be equal on every rank (settings of "
                                    "scope 'all' in `ofccl_info -c`)",
                                    from, ofccl__cfg_params[id].name, b, comm->rank,
                                    ofccl__cfg_params[id].name, a);
        }
        k++;
    }
    return 0;
}

static int choose_signal(ofccl_comm_t *comm, const ofccl__prov_caps_t *caps)
{
    ofccl_ctx_t *ctx = comm->ctx;
    int64_t want = ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_SIGNAL); /* 0 auto, 1 cqdata, 2 atomic */
    bool cq = caps->cq_data_size >= 4, at = caps->atomic_u64_sum;

    if (want == 1 && !cq)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "OFCCL_SIGNAL=cqdata: provider %s offers %zu bytes of remote CQ "
                                "data, 4 needed; use OFCCL_SIGNAL=atomic or auto",
                                caps->name, caps->cq_data_size);
    if (want == 2 && !at)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "OFCCL_SIGNAL=atomic: provider %s has no 64-bit atomic add; use "
                                "OFCCL_SIGNAL=cqdata or auto",
                                caps->name);
    if (!cq && !at)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "provider %s has neither remote CQ data nor 64-bit atomics: "
                                "ofccl cannot signal arrivals on it",
                                caps->name);
    if (want == 0 && !cq)
        OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE,
                    "provider %s has no remote CQ data: signalling with atomic adds instead",
                    caps->name);
    comm->signal_mode =
        (want == 2 || (want == 0 && !cq)) ? OFCCL__SIGNAL_ATOMIC : OFCCL__SIGNAL_CQDATA;
    return 0;
}

static void on_done(void *arg, void *op_ctx)
{
    ofccl_comm_t *comm = arg;
    ofccl__op_t *op = op_ctx;

    comm->ops_pending--;
    ofccl__ctx_moved(comm->ctx);
    if (op != NULL && op->cb != NULL)
        op->cb(op, 0, NULL);
}

static void on_error(void *arg, void *op_ctx, int peer, int status, const char *msg)
{
    ofccl_comm_t *comm = arg;
    ofccl__op_t *op = op_ctx;

    comm->ops_pending--;
    ofccl__ctx_moved(comm->ctx);
    /* A peer that has left makes our ops to it fail; a notice that another
     * rank failed first names the real culprit, so it is read first. */
    ofccl__notice_check(comm);
    if (op == NULL || !op->quiet)
        ofccl__comm_fail(comm, status, "%s", msg);
    if (op != NULL && op->cb != NULL)
        op->cb(op, status, msg);
}

static void on_remote_data(void *arg, uint64_t data)
{
    ofccl_comm_t *comm = arg;
    unsigned kind = 0;
    uint32_t id = 0, payload = 0;

    ofccl__ctx_moved(comm->ctx);
    /* Signals are untrusted: a stray one is counted and logged, never acted on. */
    if (ofccl__sig_decode(data, &kind, &id, &payload) != 0 || id != (comm->id & 0xffu)) {
        comm->corrupt_signals++;
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_CORE,
                    "ignoring signal 0x%llx: not for communicator %u", (unsigned long long)data,
                    comm->id);
        return;
    }
    if (kind == OFCCL__SIG_BARRIER && payload < OFCCL__ARRAY_LEN(comm->barrier_arrived)) {
        comm->barrier_arrived[payload]++;
    } else if (kind < OFCCL__SIG_KINDS && comm->sinks[kind].fn != NULL) {
        comm->sinks[kind].fn(comm->sinks[kind].arg, payload);
    } else {
        comm->corrupt_signals++;
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_CORE, "ignoring signal 0x%llx of unknown kind %u",
                    (unsigned long long)data, kind);
    }
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
        void *at;
        int rc = ofccl__ep_peer_map(comm->ep, p, &comm->peer_ctrl[p], 0, comm->peer_ctrl[p].len,
                                    OFCCL__ACC_REMOTE_WRITE, &at, &comm->err);
        if (rc)
            return ofccl__comm_fail(comm, rc, "comm setup: %s", comm->err.msg);
        comm->peer_ctrl_at[p] = at;
    }
    OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_CORE,
                 "rank %d: descriptors and eager data go straight into the %d peers' mapped "
                 "control regions",
                 comm->rank, comm->size - 1);
    return 0;
}

/* Rank r runs on the host named `name` (for messages that name hosts). */
static int hosts_add(ofccl_comm_t *comm, int r, const char *name)
{
    int h;

    for (h = comm->nhosts - 1; h >= 0 && strcmp(comm->host_name[h], name) != 0; h--)
        ;
    if (h < 0) {
        h = comm->nhosts++;
        ofccl__strlcpy(comm->host_name[h], name, sizeof(comm->host_name[h]));
    }
    comm->host_of[r] = h;
    return 0;
}

const char *ofccl__comm_host(const ofccl_comm_t *comm, int rank)
{
    if (comm->host_of == NULL || rank < 0 || rank >= comm->size)
        return "?";
    return comm->host_name[comm->host_of[rank]];
}

static int comm_setup(ofccl_comm_t *comm)
{
    ofccl_ctx_t *ctx = comm->ctx;
    const ofccl__prov_caps_t *caps = ofccl__prov_caps(ctx->prov);
    size_t slot = OFCCL__BLOB_HDR + SETUP_MAX, len, *lens = NULL;
    uint8_t packed[SETUP_MAX], blob[OFCCL__BLOB_HDR + SETUP_MAX], *all = NULL;
    setup_t mine = {0}, *theirs = NULL;
    uint8_t *names = NULL;
    size_t *namelens = NULL;
    int rc;

    rc = choose_signal(comm, caps);
    if (rc)
        return rc;
    ofccl__ep_params_t ep_params = {
        .rank = comm->rank,
        .size = comm->size,
        .ops_inflight = (unsigned)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_OPS_INFLIGHT),
        .rx_posted = (unsigned)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_RX_POSTED),
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

    mine.size = (uint32_t)comm->size;
    mine.comm_id = comm->id;
    mine.signal_mode = (uint32_t)comm->signal_mode;
    mine.strict = caps->strict;
    mine.cq_data_size = (uint32_t)caps->cq_data_size;
    setup_agree_fill(&ctx->cfg, &mine);
    ofccl__strlcpy(mine.prov, caps->name, sizeof(mine.prov));
    ofccl__strlcpy(mine.host, ctx->boot->hostname, sizeof(mine.host));
    mine.ctrl_base = comm->ctrl_mr->base;
    mine.ctrl_key = comm->ctrl_mr->key;
    mine.ctrl_len = comm->ctrl_mr->len;
    len = sizeof(mine.name);
    rc = ofccl__ep_name(comm->ep, mine.name, &len, &comm->err);
    if (rc)
        return ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    mine.namelen = (uint32_t)len;
    len = ofccl__blob_encode(blob, sizeof(blob), OFCCL__BLOB_COMM, (uint32_t)comm->rank, packed,
                             setup_pack(&mine, packed));

    all = malloc(slot * (size_t)comm->size);
    lens = calloc((size_t)comm->size, sizeof(*lens));
    theirs = calloc((size_t)comm->size, sizeof(*theirs));
    names = malloc(OFCCL__NAME_MAX * (size_t)comm->size);
    namelens = calloc((size_t)comm->size, sizeof(*namelens));
    comm->peer_ctrl = calloc((size_t)comm->size, sizeof(*comm->peer_ctrl));
    comm->host_of = calloc((size_t)comm->size, sizeof(*comm->host_of));
    comm->host_name = calloc((size_t)comm->size, sizeof(*comm->host_name));
    if (!all || !lens || !theirs || !names || !namelens || !comm->peer_ctrl || !comm->host_of ||
        !comm->host_name) {
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "comm setup: no memory for %d ranks",
                              comm->size);
        goto out;
    }
    rc = ofccl__boot_allgather(ctx->boot, blob, len, all, slot, lens, &comm->err);
    if (rc) {
        rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
        goto out;
    }
    for (int r = 0; r < comm->size; r++) {
        const void *payload;
        size_t plen;

        rc = ofccl__blob_decode(all + slot * (size_t)r, lens[r], OFCCL__BLOB_COMM, (uint32_t)r,
                                &payload, &plen, &comm->err);
        if (rc) {
            rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
            goto out;
        }
        rc = setup_unpack(comm, r, payload, plen, &theirs[r]);
        if (rc == 0)
            rc = setup_check(comm, r, &mine, &theirs[r]);
        if (rc)
            goto out;
        rc = hosts_add(comm, r, theirs[r].host);
        if (rc)
            goto out;
        memcpy(names + OFCCL__NAME_MAX * (size_t)r, theirs[r].name, theirs[r].namelen);
        namelens[r] = theirs[r].namelen;
        comm->peer_ctrl[r] =
            (ofccl__rkey_t){theirs[r].ctrl_base, theirs[r].ctrl_key, theirs[r].ctrl_len};
    }
    rc = ofccl__ep_insert_peers(comm->ep, names, OFCCL__NAME_MAX, namelens, comm->size, &comm->err);
    if (rc) {
        rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
        goto out;
    }
    /* Every peer registered its control region before publishing its record,
     * and none returns (so none can destroy and deregister it) before the
     * barrier below, which waits for this rank too: map before it, not after. */
    if (caps->peer_map) {
        rc = map_peer_ctrl(comm);
        if (rc)
            goto out;
    }
    /* No fabric traffic before every rank has its peers in its AV: a provider
     * that learns a peer from its first message (shm 1.17) must never see a
     * peer it has not been told about yet. And no rank returns before every
     * rank holds all it needs from its peers. */
    rc = ofccl__boot_barrier(ctx->boot, &comm->err);
    if (rc)
        rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
    else
        ofccl__ep_peers_ready(comm->ep); /* every peer has inserted (mapped) ours */
out:
    free(all);
    free(lens);
    free(theirs);
    free(names);
    free(namelens);
    return rc;
}

/* Also frees a communicator whose creation failed part-way (every field is
 * NULL until set). Order: stop the endpoint (ops in flight cancelled, CQ
 * closed: nothing refers to request objects or buffers any more), then
 * deregister, then free memory; errors are logged where they happen and do
 * not stop the rest. */
static void comm_free(ofccl_comm_t *comm)
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
    free(comm->host_of);
    free(comm->host_name);
    free(comm);
}

static int ofccl_comm_world_unlocked(ofccl_ctx_t *ctx, ofccl_comm_t **out)
{
    ofccl_comm_t *comm;
    int rc;

    if (ctx == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (out == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_INVALID_ARG,
                           "ofccl_comm_world: comm is NULL");
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "ofccl_comm_world: out of memory");
    comm->ctx = ctx;
    comm->rank = ctx->boot->rank;
    comm->size = ctx->boot->size;
    comm->local_rank = ctx->boot->local_rank;
    comm->local_size = ctx->boot->local_size;
    comm->id = ++ctx->comm_seq;
    comm->timeout_ms = (uint64_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_TIMEOUT_MS);
    comm->handlers = (ofccl__ep_handlers_t){comm, on_done, on_error, on_remote_data};
    rc = comm_setup(comm);
    if (rc == 0 && (rc = ofccl__coll_init(comm)) != 0)
        ofccl__comm_fail(comm, rc, "communicator setup: no memory for the collective engine");
    if (rc == 0 && (rc = ofccl__pool_init(comm)) != 0)
        ofccl__comm_fail(comm, rc, "communicator setup: no memory for the pool");
    if (rc) {
        ofccl__fail(NULL, OFCCL__SUB_CORE, &ctx->err, rc, "%s", comm->err.msg);
        comm_free(comm);
        return rc;
    }
    if (ofccl__handle_add(comm) != 0) {
        comm_free(comm);
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "ofccl_comm_world: out of memory");
    }
    ctx->ncomms++;
    comm->next = ctx->comms;
    ctx->comms = comm;
    OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE, "communicator %u: %d ranks on %s, %s signals", comm->id,
                comm->size, ofccl__prov_caps(ctx->prov)->name,
                comm->signal_mode == OFCCL__SIGNAL_CQDATA ? "CQ data" : "atomic");
    *out = comm;
    return 0;
}

static int ofccl_comm_destroy_unlocked(ofccl_comm_t *comm)
{
    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (comm->nwins > 0)
        return ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, OFCCL_ERR_BUSY,
                           "ofccl_comm_destroy: %d registered window(s) still open", comm->nwins);
    for (int s = 0; comm->coll != NULL && s < OFCCL__SLOTS; s++)
        if (comm->coll->reqs[s].state == OFCCL__REQ_ACTIVE && !comm->sticky)
            return ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, OFCCL_ERR_BUSY,
                               "ofccl_comm_destroy: collective #%llu is still running; wait "
                               "for it (or abort the communicator) first",
                               (unsigned long long)comm->coll->reqs[s].seq);
    /* Local: give our own ops a moment to finish, but never wait on dead peers. */
    if (comm->ops_pending > 0 && !comm->sticky)
        ofccl__comm_quiesce(comm, ofccl__now_ns() + 1000000000ull, "destroy");
    ofccl__handle_remove(comm);
    comm->ctx->ncomms--;
    for (ofccl_comm_t **pp = &comm->ctx->comms; *pp != NULL; pp = &(*pp)->next)
        if (*pp == comm) {
            *pp = comm->next;
            break;
        }
    comm_free(comm);
    return 0;
}

#define COMM_GETTER(fn, field)                                                                     \
    int fn(const ofccl_comm_t *comm, int *out)                                                     \
    {                                                                                              \
        OFCCL__CHECK_HANDLE(comm);                                                                 \
        if (out == NULL)                                                                           \
            return OFCCL_ERR_INVALID_ARG;                                                          \
        *out = comm->field;                                                                        \
        return 0;                                                                                  \
    }
COMM_GETTER(ofccl_comm_rank, rank)
COMM_GETTER(ofccl_comm_size, size)
COMM_GETTER(ofccl_comm_local_rank, local_rank)
COMM_GETTER(ofccl_comm_local_size, local_size)

const char *ofccl_comm_last_error(const ofccl_comm_t *comm)
{
    if (!ofccl__handle_live(comm))
        return comm ? "ofccl_comm_last_error: communicator destroyed"
                    : "ofccl_comm_last_error: comm is NULL";
    return comm->err.msg;
}

int ofccl__comm_fail(ofccl_comm_t *comm, int code, const char *fmt, ...)
{
    char msg[OFCCL__ERRMSG_LEN];
    int first = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* Errors that leave the communicator unusable are sticky. */
    /* A timeout or a mismatch inside a collective leaves sequence numbers and
     * buffers out of step with the peers: sticky too. */
    if (code == OFCCL_ERR_REMOTE_ERROR || code == OFCCL_ERR_PROVIDER || code == OFCCL_ERR_ABORTED ||
        code == OFCCL_ERR_CORRUPT || code == OFCCL_ERR_TIMEOUT || code == OFCCL_ERR_MISMATCH)
        if (comm->sticky == 0) {
            comm->sticky = code;
            first = 1;
        }
    /* Lower layers often name the rank already; say it once. */
    if (strncmp(msg, "rank ", 5) == 0)
        code = ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, code, "%s", msg);
    else
        code = ofccl__fail(&comm->ctx->log, OFCCL__SUB_CORE, &comm->err, code, "rank %d: %s",
                           comm->rank, msg);
    if (first) /* what every later call reports as the cause */
        ofccl__strlcpy(comm->sticky_msg, comm->err.msg, sizeof(comm->sticky_msg));
    return code;
}

int ofccl__comm_check(ofccl_comm_t *comm, const char *what)
{
    ofccl__notice_fail(comm); /* a peer's failure notice makes this one fail too */
    if (ofccl__comm_usable(comm) == 0)
        return 0;
    if (comm->sticky == OFCCL_ERR_ABORTED)
        return ofccl__comm_fail(comm, OFCCL_ERR_ABORTED,
                                "%s: communicator %u was aborted (ofccl_comm_abort); only "
                                "ofccl_comm_destroy is useful now",
                                what, comm->id);
    return ofccl__comm_fail(comm, comm->sticky,
                            "%s: communicator %u is unusable since an earlier error (%s): %s; "
                            "destroy it and create a new one",
                            what, comm->id, ofccl_strerror(comm->sticky), comm->sticky_msg);
}

int ofccl__comm_progress(ofccl_comm_t *comm)
{
    ofccl__err_t e;
    int rc;

    /* An abort stops progress at once (ofccl__comm_usable records it). */
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire))
        return ofccl__comm_usable(comm);
    rc = ofccl__ep_progress(comm->ep, &comm->handlers, 64, &e);

    if (rc < 0)
        return ofccl__comm_fail(comm, rc, "%s", e.msg);
    return ofccl__notice_check(comm);
}

void ofccl__comm_set_sink(ofccl_comm_t *comm, unsigned kind, ofccl__sig_sink_fn fn, void *arg)
{
    if (kind < OFCCL__SIG_KINDS) {
        comm->sinks[kind].fn = fn;
        comm->sinks[kind].arg = arg;
    }
}

uint64_t ofccl__comm_deadline(const ofccl_comm_t *comm, uint64_t now_ns)
{
    uint64_t ms = comm->timeout_ms;

    return ms == 0 ? UINT64_MAX : now_ns + ms * 1000000ull;
}

int ofccl__comm_usable(ofccl_comm_t *comm)
{
    /* The flag is all ofccl_comm_abort touches; the message is written here,
     * by the thread that holds the lock. */
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire) && comm->sticky == 0)
        ofccl__comm_fail(comm, OFCCL_ERR_ABORTED, "communicator %u aborted by ofccl_comm_abort",
                         comm->id);
    return comm->sticky;
}

int ofccl_comm_abort(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    /* No lock: the caller may be the thread a blocked call is waiting on. */
    atomic_store_explicit(&comm->aborted, 1, memory_order_release);
    return 0;
}

int ofccl_comm_set_timeout(ofccl_comm_t *comm, uint64_t timeout_ms)
{
    OFCCL__CHECK_HANDLE(comm);
    if (timeout_ms > 86400000ull * 365)
        return OFCCL_ERR_INVALID_ARG;
    ofccl__ctx_lock(comm->ctx);
    comm->timeout_ms = timeout_ms;
    ofccl__ctx_unlock(comm->ctx);
    return 0;
}

int ofccl__comm_signal(ofccl_comm_t *comm, int peer, unsigned kind, uint32_t payload,
                       unsigned ctrl_word, uint64_t deadline_ns)
{
    ofccl__err_t e;
    int rc;

    for (;;) {
        if (comm->signal_mode == OFCCL__SIGNAL_CQDATA)
            rc = ofccl__ep_writedata(comm->ep, peer, NULL, 0, NULL, &comm->peer_ctrl[peer], 0,
                                     ofccl__sig_encode(kind, comm->id, payload),
                                     &ofccl__comm_op_plain, &e);
        else
            rc = ofccl__ep_atomic_add(comm->ep, peer, 1, &comm->peer_ctrl[peer],
                                      (uint64_t)ctrl_word * sizeof(uint64_t), &ofccl__comm_op_plain,
                                      &e);
        if (rc == 0) {
            comm->ops_pending++;
            return 0;
        }
        if (rc != OFCCL_ERR_AGAIN)
            return ofccl__comm_fail(comm, rc, "signal to peer %d: %s", peer, e.msg);
        rc = ofccl__comm_progress(comm);
        if (rc)
            return rc;
        if (ofccl__now_ns() > deadline_ns)
            return ofccl__comm_fail(comm, OFCCL_ERR_TIMEOUT,
                                    "signal to peer %d: no free operation slot before the "
                                    "deadline",
                                    peer);
    }
}

int ofccl__comm_quiesce(ofccl_comm_t *comm, uint64_t deadline_ns, const char *what)
{
    ofccl__idle_t idle = {0};

    for (unsigned spins = 1; comm->ops_pending > 0; spins++) {
        int rc = ofccl__comm_progress(comm);
        if (spins % 32 == 0)
            ofccl__idle_poll(comm->ctx, &idle);
        if (rc)
            return rc;
        if (ofccl__now_ns() > deadline_ns)
            return ofccl__comm_fail(comm, OFCCL_ERR_TIMEOUT,
                                    "%s: %u operation(s) still pending at the deadline", what,
                                    comm->ops_pending);
    }
    return 0;
}

/* Public entry points: the same calls under the context lock (progress.c). */
int ofccl_comm_world(ofccl_ctx_t *ctx, ofccl_comm_t **out)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, ofccl_comm_world_unlocked(ctx, out));
}

int ofccl_comm_destroy(ofccl_comm_t *comm)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, ofccl_comm_destroy_unlocked(comm));
}
