/* Staging sets, user pool buffers, and the registration cache. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "gpu/gpu.h"
#include "pool.h"
#include "util.h"

#define STAGE_ALIGN 4096
#define STAGE_ACCESS (OFCCL__ACC_LOCAL | OFCCL__ACC_REMOTE_WRITE)

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

int ofccl__pool_init(ofccl_comm_t *comm)
{
    struct ofccl__pool *pool = calloc(1, sizeof(*pool));

    if (pool == NULL)
        return OFCCL_ERR_NO_MEMORY;
    pool->n_ag = (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_AG_BUFFERS);
    pool->n_rs = (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_RS_BUFFERS);
    pool->budget = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_POOL_BYTES);
    comm->pool = pool;
    return 0;
}

static void account(ofccl_comm_t *comm, ofccl__mr_t *mr, long sign)
{
    ofccl_stats_t *st = &comm->ctx->stats;

    st->pool_bytes += (uint64_t)((long)mr->len * sign);
    st->registered_bytes += (uint64_t)((long)mr->len * sign);
    comm->pool->held += (size_t)((long)mr->len * sign);
    if (sign > 0)
        st->registrations++;
}

static void stage_free(ofccl_comm_t *comm, ofccl__stage_t *s)
{
    if (s->mr != NULL) {
        account(comm, s->mr, -1);
        ofccl__mr_dereg(s->mr);
    }
    if (s->kind != OFCCL__MEM_HOST && s->ptr != NULL)
        ofccl__gpu_mem_free(ofccl__gpu_process(NULL, false), s->kind, s->ptr);
    else
        ofccl__prov_mem_free(s->ptr);
    *s = (ofccl__stage_t){0};
}

void ofccl__pool_fini(ofccl_comm_t *comm)
{
    struct ofccl__pool *pool = comm->pool;

    if (pool == NULL)
        return;
    for (int k = 0; k < OFCCL__STAGE_SETS; k++) {
        stage_free(comm, &pool->ag[k]);
        stage_free(comm, &pool->rs[k]);
        stage_free(comm, &pool->ag_dev[k]);
        stage_free(comm, &pool->rs_dev[k]);
    }
    while (pool->user != NULL) {
        ofccl__ubuf_t *u = pool->user;
        pool->user = u->next;
        account(comm, u->mr, -1);
        ofccl__mr_dereg(u->mr);
        ofccl__prov_mem_free(u->ptr);
        free(u);
    }
    free(pool);
    comm->pool = NULL;
}

static int over_budget(ofccl_comm_t *comm, size_t more, const char *what)
{
    struct ofccl__pool *pool = comm->pool;

    if (pool->budget == 0 || pool->held + more <= pool->budget)
        return 0;
    return ofccl__comm_fail(comm, OFCCL_ERR_OVER_BUDGET,
                            "%s needs %zu more bytes but the pool holds %zu of its %zu-byte "
                            "budget; raise OFCCL_POOL_BYTES or use smaller buckets",
                            what, more, pool->held, pool->budget);
}

/* `len` bytes of device `kind`'s memory, registered for peers to write:
 * 0, or an error (the communicator's message says why). */
static int alloc_device(ofccl_comm_t *comm, ofccl__mem_kind_t kind, size_t len, void **ptr,
                        ofccl__mr_t **mr)
{
    ofccl__gpu_t *g = ofccl__gpu_process(&comm->ctx->log, false);
    ofccl__err_t e = {0};
    int rc = g == NULL ? OFCCL_ERR_NOT_SUPPORTED : ofccl__gpu_mem_alloc(g, kind, len, ptr, &e);

    if (rc != 0)
        return ofccl__comm_fail(comm, rc, "pool: %zu bytes on GPU %d: %s", len, kind,
                                g == NULL ? "no CUDA driver" : e.msg);
    rc = ofccl__mr_reg(comm->ep, *ptr, len, STAGE_ACCESS, mr, &comm->err);
    if (rc) {
        ofccl__gpu_mem_free(g, kind, *ptr);
        return ofccl__comm_fail(comm, rc, "pool: %s", comm->err.msg);
    }
    account(comm, *mr, +1);
    return 0;
}

/* Allocate and register `bytes` of memory peers may write into: host
 * memory, or device `kind`'s. */
static int alloc_registered(ofccl_comm_t *comm, ofccl__mem_kind_t kind, size_t bytes, void **ptr,
                            ofccl__mr_t **mr)
{
    size_t len = round_up(bytes ? bytes : 1, STAGE_ALIGN);
    void *p;
    int rc;

    if (kind != OFCCL__MEM_HOST)
        return alloc_device(comm, kind, len, ptr, mr);
    if ((p = ofccl__prov_mem_alloc(comm->ep, len)) == NULL) {
        rc = ofccl__prov_mem_error(comm->ep, len, &comm->err);
        return ofccl__comm_fail(comm, rc, "pool: %s (%zu bytes requested, rounded up to pages)",
                                comm->err.msg, bytes);
    }
    /* Peers also read: where the provider orders a write with a read, where
     * they read sources in place (caps.peer_map: reduce-scatter pull), and a
     * bucket's published layout when theirs differs. They see nothing a
     * collective would not give them anyway. */
    rc = ofccl__mr_reg(comm->ep, p, len, STAGE_ACCESS | OFCCL__ACC_REMOTE_READ, mr, &comm->err);
    if (rc) {
        ofccl__prov_mem_free(p);
        return ofccl__comm_fail(comm, rc, "pool: %s", comm->err.msg);
    }
    *ptr = p;
    account(comm, *mr, +1);
    return 0;
}

/* A collective's staging sets: broadcasts (and pushes) share the
 * all-gather's (they land data where it is read); those on a GPU are
 * others. The index of a device set is OFCCL__STAGE_SETS + its place. */
static ofccl__stage_t *sets_of(struct ofccl__pool *pool, int coll, bool dev)
{
    if (coll == OFCCL__RS)
        return dev ? pool->rs_dev : pool->rs;
    return dev ? pool->ag_dev : pool->ag;
}

int ofccl__stage_acquire(ofccl_comm_t *comm, int coll, size_t bytes, int *idx,
                         ofccl__mem_ref_t *ref)
{
    return ofccl__stage_acquire_on(comm, coll, OFCCL__MEM_HOST, bytes, idx, ref);
}

int ofccl__stage_acquire_on(ofccl_comm_t *comm, int coll, ofccl__mem_kind_t kind, size_t bytes,
                            int *idx, ofccl__mem_ref_t *ref)
{
    struct ofccl__pool *pool = comm->pool;
    bool dev = kind != OFCCL__MEM_HOST;
    ofccl__stage_t *set = sets_of(pool, coll, dev);
    int n = coll == OFCCL__RS ? pool->n_rs : pool->n_ag, k, rc;

    for (k = 0; k < n && set[k].busy; k++)
        ;
    if (k == n)
        return ofccl__comm_fail(comm, OFCCL_ERR_AGAIN,
                                "all %d %s staging buffers are in use by earlier requests; wait "
                                "for one or raise %s",
                                n,
                                coll == OFCCL__RS ? "reduce-scatter" : "all-gather and broadcast",
                                coll == OFCCL__RS ? "OFCCL_RS_BUFFERS" : "OFCCL_AG_BUFFERS");
    if (set[k].bytes < bytes || (dev && set[k].kind != kind)) {
        /* Grow: only here, with the buffer unused, i.e. at a bucket boundary. */
        size_t old = set[k].mr ? set[k].mr->len : 0;
        void *p;
        ofccl__mr_t *mr;

        rc = over_budget(comm, round_up(bytes, STAGE_ALIGN) - old, "a staging buffer");
        if (rc)
            return rc;
        stage_free(comm, &set[k]);
        rc = alloc_registered(comm, kind, bytes, &p, &mr);
        if (rc)
            return rc;
        set[k] = (ofccl__stage_t){p, mr, mr->len, 0, kind};
        comm->ctx->stats.pool_grows++;
        OFCCL__DEBUG(&comm->ctx->log, OFCCL__SUB_MEM, "staging buffer %d grown to %zu bytes", k,
                     mr->len);
    }
    set[k].busy = 1;
    *idx = k + (dev ? OFCCL__STAGE_SETS : 0);
    *ref = ofccl__mem_ref(set[k].ptr, set[k].mr);
    return 0;
}

void ofccl__stage_release(ofccl_comm_t *comm, int coll, int idx)
{
    bool dev = idx >= OFCCL__STAGE_SETS;

    sets_of(comm->pool, coll, dev)[idx - (dev ? OFCCL__STAGE_SETS : 0)].busy = 0;
}

static int buffer_alloc_unlocked(ofccl_comm_t *comm, size_t bytes, void **ptr)
{
    ofccl__ubuf_t *u;
    int rc;

    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (ptr == NULL || bytes == 0)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "ofccl_buffer_alloc: %s",
                                ptr ? "zero bytes" : "ptr is NULL");
    if ((rc = ofccl__comm_check(comm, "ofccl_buffer_alloc")) != 0)
        return rc;
    if (bytes > SIZE_MAX / 2)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY,
                                "ofccl_buffer_alloc: %zu bytes requested: more than this process "
                                "can address",
                                bytes);
    rc = over_budget(comm, round_up(bytes, STAGE_ALIGN), "ofccl_buffer_alloc");
    if (rc)
        return rc;
    u = calloc(1, sizeof(*u));
    if (u == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "ofccl_buffer_alloc: no memory");
    rc = alloc_registered(comm, OFCCL__MEM_HOST, bytes, &u->ptr, &u->mr);
    if (rc) {
        free(u);
        return rc;
    }
    u->bytes = bytes;
    u->kind = u->mr->kind;
    u->next = comm->pool->user;
    comm->pool->user = u;
    *ptr = u->ptr;
    return 0;
}

static int buffer_free_unlocked(ofccl_comm_t *comm, void *ptr)
{
    ofccl__ubuf_t **pp;

    if (comm == NULL)
        return OFCCL_ERR_INVALID_ARG;
    for (pp = &comm->pool->user; *pp != NULL; pp = &(*pp)->next) {
        ofccl__ubuf_t *u = *pp;
        if (u->ptr != ptr)
            continue;
        for (int s = 0; s < OFCCL__SLOTS; s++) {
            const ofccl__req_t *r = &comm->coll->reqs[s];
            if (r->state == OFCCL__REQ_ACTIVE && (r->dst.mr == u->mr || r->src.mr == u->mr))
                return ofccl__comm_fail(comm, OFCCL_ERR_BUSY,
                                        "ofccl_buffer_free: collective #%llu still uses it",
                                        (unsigned long long)r->seq);
        }
        *pp = u->next;
        account(comm, u->mr, -1);
        ofccl__mr_dereg(u->mr);
        ofccl__prov_mem_free(u->ptr);
        free(u);
        return 0;
    }
    return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                            "ofccl_buffer_free: %p was not allocated by ofccl_buffer_alloc on "
                            "this communicator",
                            ptr);
}

/* ---- registration cache ---- */
static int mem_register_unlocked(ofccl_ctx_t *ctx, void *ptr, size_t len, ofccl_mem_t **mh)
{
    ofccl_mem_t *m;

    if (ctx == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (ptr == NULL || len == 0 || mh == NULL || (uintptr_t)ptr + len < (uintptr_t)ptr)
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_INVALID_ARG,
                           "ofccl_mem_register: %s",
                           mh == NULL    ? "mh is NULL"
                           : ptr == NULL ? "ptr is NULL"
                           : len == 0    ? "len is 0"
                                         : "range wraps around");
    /* Same or contained range: a hit costs nothing and uses no key. */
    for (m = ctx->memreg; m != NULL; m = m->next)
        if ((char *)ptr >= m->addr && (char *)ptr + len <= m->addr + m->len) {
            m->refs++;
            ctx->stats.reg_cache_hits++;
            *mh = m;
            return 0;
        }
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "ofccl_mem_register: no memory");
    m->ctx = ctx;
    m->addr = ptr;
    m->len = len;
    m->refs = 1;
    m->kind = ofccl__mem_kind_of(ptr);
    if (ofccl__handle_add(m) != 0) {
        free(m);
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "ofccl_mem_register: no memory");
    }
    m->next = ctx->memreg;
    ctx->memreg = m;
    *mh = m;
    return 0;
}

static void drop_comm_mr(ofccl_mem_t *m, int k)
{
    ofccl_stats_t *st = &m->ctx->stats;

    st->registered_bytes -= m->per_comm[k].mr->len;
    ofccl__mr_dereg(m->per_comm[k].mr);
    m->per_comm[k].mr = NULL;
    m->per_comm[k].comm = NULL;
}

static int mem_deregister_unlocked(ofccl_mem_t *mh)
{
    ofccl_ctx_t *ctx;

    if (mh == NULL)
        return OFCCL_ERR_INVALID_ARG;
    if (--mh->refs > 0)
        return 0;
    ctx = mh->ctx;
    for (ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next)
        for (int s = 0; s < OFCCL__SLOTS; s++) {
            const ofccl__req_t *r = &c->coll->reqs[s];
            for (int k = 0; k < OFCCL__MEMREG_COMMS; k++)
                if (mh->per_comm[k].mr != NULL && r->state == OFCCL__REQ_ACTIVE &&
                    (r->src.mr == mh->per_comm[k].mr || r->dst.mr == mh->per_comm[k].mr)) {
                    mh->refs++;
                    return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_BUSY,
                                       "ofccl_mem_deregister: collective #%llu still uses it",
                                       (unsigned long long)r->seq);
                }
        }
    for (int k = 0; k < OFCCL__MEMREG_COMMS; k++)
        if (mh->per_comm[k].mr != NULL)
            drop_comm_mr(mh, k); /* keys die with the registration */
    for (ofccl_mem_t **pp = &ctx->memreg; *pp != NULL; pp = &(*pp)->next)
        if (*pp == mh) {
            *pp = mh->next;
            break;
        }
    ofccl__handle_remove(mh);
    free(mh);
    return 0;
}

static int mem_alloc_unlocked(ofccl_ctx_t *ctx, size_t bytes, void **ptr)
{
    ofccl_mem_t *m;
    void *p;
    int rc;

    if (ptr == NULL || bytes == 0)
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_INVALID_ARG,
                           "ofccl_mem_alloc: %s", ptr ? "zero bytes" : "ptr is NULL");
    p = ofccl__prov_mem_alloc_on(ctx->prov, bytes);
    if (p == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "ofccl_mem_alloc: cannot allocate %zu bytes", bytes);
    rc = mem_register_unlocked(ctx, p, bytes, &m);
    if (rc) {
        ofccl__prov_mem_free(p);
        return rc;
    }
    m->owned = 1;
    ctx->stats.pool_bytes += bytes;
    *ptr = p;
    return 0;
}

static int mem_free_unlocked(ofccl_ctx_t *ctx, void *ptr)
{
    ofccl_mem_t *m;
    size_t bytes;
    int rc;

    for (m = ctx->memreg; m != NULL && !(m->owned && m->addr == ptr); m = m->next)
        ;
    if (m == NULL)
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_INVALID_ARG,
                           "ofccl_mem_free: %p was not allocated by ofccl_mem_alloc on this "
                           "context",
                           ptr);
    if (m->refs > 1)
        return ofccl__fail(&ctx->log, OFCCL__SUB_MEM, &ctx->err, OFCCL_ERR_BUSY,
                           "ofccl_mem_free: %p is still registered by %d ofccl_mem_register "
                           "call(s); deregister them first",
                           ptr, m->refs - 1);
    bytes = m->len;
    rc = mem_deregister_unlocked(m);
    if (rc)
        return rc;
    ctx->stats.pool_bytes -= bytes;
    ofccl__prov_mem_free(ptr);
    return 0;
}

const ofccl__mr_t *ofccl__mem_find(ofccl_comm_t *comm, const void *ptr, size_t len)
{
    const char *p = ptr;

    for (ofccl__ubuf_t *u = comm->pool->user; u != NULL; u = u->next)
        if (p >= (char *)u->ptr && p + len <= (char *)u->ptr + u->mr->len)
            return u->mr;
    for (ofccl_mem_t *m = comm->ctx->memreg; m != NULL; m = m->next) {
        int freek = -1;
        if (p < m->addr || p + len > m->addr + m->len)
            continue;
        for (int k = 0; k < OFCCL__MEMREG_COMMS; k++) {
            if (m->per_comm[k].comm == comm) {
                comm->ctx->stats.reg_cache_hits++;
                return m->per_comm[k].mr;
            }
            if (m->per_comm[k].comm == NULL && freek < 0)
                freek = k;
        }
        /* First use on this communicator: register on its endpoint, once.
         * ofccl_mem_alloc memory is read in place by peers (reduce-scatter's
         * pull), as pool buffers are; caller memory is never exposed to reads. */
        if (freek >= 0 &&
            ofccl__mr_reg(comm->ep, m->addr, m->len,
                          m->owned ? STAGE_ACCESS | OFCCL__ACC_REMOTE_READ : STAGE_ACCESS,
                          &m->per_comm[freek].mr, &comm->err) == 0) {
            m->per_comm[freek].comm = comm;
            comm->ctx->stats.registrations++;
            comm->ctx->stats.registered_bytes += m->len;
            return m->per_comm[freek].mr;
        }
        OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_MEM,
                    "registered range %p+%zu not usable on communicator %u (%s): staging instead",
                    (void *)m->addr, m->len, comm->id,
                    freek < 0 ? "registered on too many communicators" : comm->err.msg);
        return NULL;
    }
    return NULL;
}

int ofccl__mem_call_register(ofccl__req_t *r, void *ptr, size_t len)
{
    ofccl_comm_t *comm = r->comm;
    int rc = mem_register_unlocked(comm->ctx, ptr, len, &r->call_mem);

    if (rc == 0 && ofccl__mem_find(comm, ptr, len) == NULL) {
        ofccl__mem_call_release(r); /* the transport cannot take it (mem_find said why) */
        return OFCCL_ERR_NOT_SUPPORTED;
    }
    if (rc != 0) {
        ofccl__mem_call_release(r);
        return ofccl__comm_fail(comm, rc,
                                "%s: registering %zu bytes of GPU %d's memory with the "
                                "transport: %s",
                                ofccl__coll_name(r->coll), len, ofccl__mem_kind_of(ptr),
                                comm->err.msg[0] ? comm->err.msg : comm->ctx->err.msg);
    }
    return 0;
}

void ofccl__mem_call_release(ofccl__req_t *r)
{
    if (r->call_mem != NULL)
        (void)mem_deregister_unlocked(r->call_mem); /* r is not active: never BUSY for it */
    r->call_mem = NULL;
}

size_t ofccl__mem_known_room(const ofccl_comm_t *comm, const void *ptr)
{
    const char *p = ptr;

    for (const ofccl__ubuf_t *u = comm->pool->user; u != NULL; u = u->next)
        if (p >= (char *)u->ptr && p < (char *)u->ptr + u->bytes)
            return (size_t)((char *)u->ptr + u->bytes - p);
    for (const ofccl_mem_t *m = comm->ctx->memreg; m != NULL; m = m->next)
        if (p >= m->addr && p < m->addr + m->len)
            return (size_t)(m->addr + m->len - p);
    return SIZE_MAX;
}

int ofccl__pool_register(ofccl_comm_t *comm, void *ptr, size_t len)
{
    struct ofccl__commreg *g = calloc(1, sizeof(*g));
    int rc;

    if (g == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "registering memory: no memory");
    if ((rc = mem_register_unlocked(comm->ctx, ptr, len, &g->mh)) != 0) {
        free(g);
        return ofccl__comm_fail(comm, rc, "registering %p: %s", ptr, comm->ctx->err.msg);
    }
    g->ptr = ptr;
    g->next = comm->pool->regs;
    comm->pool->regs = g;
    return 0;
}

int ofccl__pool_unregister(ofccl_comm_t *comm, void *ptr)
{
    for (struct ofccl__commreg **at = &comm->pool->regs; *at != NULL; at = &(*at)->next) {
        struct ofccl__commreg *g = *at;
        int rc;
        if (g->ptr != ptr)
            continue;
        if ((rc = mem_deregister_unlocked(g->mh)) != 0) /* BUSY: kept */
            return ofccl__comm_fail(comm, rc, "deregistering %p: %s", ptr, comm->ctx->err.msg);
        *at = g->next;
        free(g);
        return 0;
    }
    return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                            "%p is not memory registered with communicator %u", ptr, comm->id);
}

void ofccl__memreg_forget_comm(ofccl_comm_t *comm)
{
    while (comm->pool != NULL && comm->pool->regs != NULL) { /* the caller's, with it */
        struct ofccl__commreg *g = comm->pool->regs;
        comm->pool->regs = g->next;
        (void)mem_deregister_unlocked(g->mh); /* BUSY only for another communicator's use */
        free(g);
    }
    for (ofccl_mem_t *m = comm->ctx->memreg; m != NULL; m = m->next)
        for (int k = 0; k < OFCCL__MEMREG_COMMS; k++)
            if (m->per_comm[k].comm == comm)
                drop_comm_mr(m, k);
}

/* Public entry points: the same calls under the context lock (lock.c). */
int ofccl_buffer_alloc(ofccl_comm_t *comm, size_t bytes, void **ptr)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, buffer_alloc_unlocked(comm, bytes, ptr));
}

int ofccl_buffer_free(ofccl_comm_t *comm, void *ptr)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, buffer_free_unlocked(comm, ptr));
}

int ofccl_mem_register(ofccl_ctx_t *ctx, void *ptr, size_t len, ofccl_mem_t **mh)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, mem_register_unlocked(ctx, ptr, len, mh));
}

int ofccl_mem_alloc(ofccl_ctx_t *ctx, size_t bytes, void **ptr)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, mem_alloc_unlocked(ctx, bytes, ptr));
}

int ofccl_mem_free(ofccl_ctx_t *ctx, void *ptr)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, mem_free_unlocked(ctx, ptr));
}

int ofccl_mem_deregister(ofccl_mem_t *mh)
{
    OFCCL__CHECK_HANDLE(mh);
    OFCCL__LOCKED(mh->ctx, mem_deregister_unlocked(mh));
}
