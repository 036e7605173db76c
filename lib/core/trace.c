/*
 * OFCCL_TRACE: spans of collectives, their phases and writes, kept in a
 * bounded buffer allocated when the context opens (nothing is allocated on
 * the data path) and written as Chrome trace-event JSON (Perfetto,
 * chrome://tracing): pid = rank, tid = communicator id, "X" events with
 * microsecond timestamps on CLOCK_MONOTONIC. The file's "otherData" holds
 * what the merge tool (ofccl-trace) needs: rank, job, host, the clock offset
 * to rank 0 and how many events were dropped.
 */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_impl.h"
#include "util.h"

struct ofccl__trace {
    ofccl_ctx_t *ctx;
    char path[1024];
    ofccl__trace_ev_t *ev;
    size_t cap, n;
    uint64_t dropped;
    int64_t offset_ns;
    char offset_method[64];
    char transport[64];
    pid_t pid;                /* the process that opened it (a forked child must not write it) */
    size_t written_n;         /* events and drops in the file last written: */
    uint64_t written_dropped; /* nothing new, no rewrite */
    bool written;
};

/* Traces of live contexts, written at exit by an atexit handler. */
#define LIVE_MAX 64
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static ofccl__trace_t *live[LIVE_MAX];
static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;
static unsigned opened; /* traces opened by this process: names later ones apart */

static void write_all_at_exit(void)
{
    pthread_mutex_lock(&live_lock);
    for (int k = 0; k < LIVE_MAX; k++) {
        ofccl__trace_t *t = live[k];
        /* A thread may hold the context's lock (stuck in a call): skip it
         * rather than write a buffer that is changing under us. */
        if (t != NULL && t->pid == getpid() && pthread_mutex_trylock(&t->ctx->lock) == 0) {
            ofccl__trace_write(t);
            pthread_mutex_unlock(&t->ctx->lock);
        }
    }
    pthread_mutex_unlock(&live_lock);
}

static void register_atexit(void)
{
    atexit(write_all_at_exit);
}

static void live_set(ofccl__trace_t *t, ofccl__trace_t *with)
{
    pthread_mutex_lock(&live_lock);
    for (int k = 0; k < LIVE_MAX; k++)
        if (live[k] == t) {
            live[k] = with;
            break;
        }
    pthread_mutex_unlock(&live_lock);
}

/* The job name as a file name part: [A-Za-z0-9._-], others become '_'. */
static void file_safe(const char *in, char *out, size_t len)
{
    size_t k = 0;

    for (; in[k] != '\0' && k + 1 < len; k++)
        out[k] = (in[k] >= 'a' && in[k] <= 'z') || (in[k] >= 'A' && in[k] <= 'Z') ||
                         (in[k] >= '0' && in[k] <= '9') || in[k] == '.' || in[k] == '-'
                     ? in[k]
                     : '_';
    out[k] = '\0';
}

int ofccl__trace_open(ofccl_ctx_t *ctx)
{
    const char *dir = ofccl__cfg_str(&ctx->cfg, OFCCL__CFG_TRACE);
    size_t cap = (size_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_TRACE_EVENTS);
    char job[64];
    unsigned nth;
    ofccl__trace_t *t;

    if (dir[0] == '\0')
        return 0;
    if (access(dir, W_OK | X_OK) != 0)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_CONFIG,
                           "OFCCL_TRACE=%s: not a writable directory (%s)", dir, strerror(errno));
    t = calloc(1, sizeof(*t));
    if (t == NULL || (t->ev = calloc(cap, sizeof(*t->ev))) == NULL) {
        free(t);
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_NO_MEMORY,
                           "OFCCL_TRACE: no memory for %zu events (OFCCL_TRACE_EVENTS)", cap);
    }
    t->ctx = ctx;
    t->cap = cap;
    t->pid = getpid();
    ofccl__strlcpy(t->offset_method, "none (no world communicator yet)", sizeof(t->offset_method));
    ofccl__strlcpy(t->transport, ofccl__prov_caps(ctx->prov)->name, sizeof(t->transport));
    file_safe(ctx->boot->job, job, sizeof(job));
    pthread_mutex_lock(&live_lock);
    nth = opened++;
    for (int k = 0; k < LIVE_MAX; k++)
        if (live[k] == NULL) {
            live[k] = t;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    if (nth == 0)
        snprintf(t->path, sizeof(t->path), "%s/ofccl-trace-%s-%d.json", dir, job, ctx->boot->rank);
    else /* a second context in the process gets a file of its own */
        snprintf(t->path, sizeof(t->path), "%s/ofccl-trace-%s-%d.ctx%u.json", dir, job,
                 ctx->boot->rank, nth);
    pthread_once(&atexit_once, register_atexit);
    ctx->trace = t;
    OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE, "tracing into %s (at most %zu events)", t->path, cap);
    return 0;
}

void ofccl__trace_close(ofccl_ctx_t *ctx)
{
    ofccl__trace_t *t = ctx->trace;

    if (t == NULL)
        return;
    live_set(t, NULL);
    if (ctx->lock_init) /* a progress thread may still be recording */
        ofccl__ctx_lock(ctx);
    ofccl__trace_write(t);
    ctx->trace = NULL;
    if (ctx->lock_init)
        ofccl__ctx_unlock(ctx);
    free(t->ev);
    free(t);
}

void ofccl__trace_add(ofccl__trace_t *t, const ofccl__trace_ev_t *ev)
{
    if (t->n < t->cap)
        t->ev[t->n++] = *ev;
    else
        t->dropped++;
}

void ofccl__trace_set_offset(ofccl__trace_t *t, int64_t offset_ns, const char *method)
{
    t->offset_ns = offset_ns;
    ofccl__strlcpy(t->offset_method, method, sizeof(t->offset_method));
}

const char *ofccl__trace_path(const ofccl__trace_t *t)
{
    return t ? t->path : "";
}

void ofccl__trace_counts(const ofccl__trace_t *t, uint64_t *events, uint64_t *dropped)
{
    *events = t ? t->n : 0;
    *dropped = t ? t->dropped : 0;
}

/* ---- the engine's hooks ---- */
void ofccl__trace_req_start(ofccl__req_t *r)
{
    r->tr_t0 = ofccl__now_ns();
    memset(r->tr, 0, (size_t)r->comm->size * sizeof(*r->tr));
}

void ofccl__trace_req_ready(ofccl__req_t *r, int peer)
{
    r->tr[peer].ready_ns = ofccl__now_ns();
}

void ofccl__trace_req_in(ofccl__req_t *r, int peer)
{
    r->tr[peer].last_in = ofccl__now_ns();
}

static ofccl__trace_ev_t req_event(const ofccl__req_t *r, int kind, int peer, uint64_t t0,
                                   uint64_t t1, uint64_t bytes)
{
    return (ofccl__trace_ev_t){.ts_ns = t0,
                               .dur_ns = t1 > t0 ? t1 - t0 : 0,
                               .seq = r->seq,
                               .bytes = bytes,
                               .algo = r->algo ? r->algo->name : "?",
                               .comm = r->comm->id,
                               .peer = peer,
                               .unit = UINT32_MAX,
                               .kind = (int16_t)kind,
                               .coll = (int16_t)r->coll,
                               .status = r->status};
}

void ofccl__trace_chunk(ofccl__req_t *r, int peer, uint32_t unit, size_t len, uint64_t t0)
{
    uint64_t now = ofccl__now_ns();
    ofccl__trace_ev_t ev = req_event(r, OFCCL__TR_CHUNK, peer, t0, now, len);
    ofccl__trace_peer_t *p = &r->tr[peer];

    ev.unit = unit;
    ofccl__trace_add(r->comm->ctx->trace, &ev);
    if (p->first_out == 0 || t0 < p->first_out)
        p->first_out = t0;
    p->last_out = now;
    p->bytes_out += len;
}

void ofccl__trace_req_done(ofccl__req_t *r, uint64_t finish_ns)
{
    ofccl__trace_t *t = r->comm->ctx->trace;
    uint64_t now = ofccl__now_ns(), t0 = r->tr_t0;
    ofccl__trace_ev_t ev;

    for (int p = 0; p < r->comm->size; p++) {
        const ofccl__trace_peer_t *tp = &r->tr[p];
        if (p == r->comm->rank)
            continue;
        if (tp->ready_ns) {
            ev = req_event(r, OFCCL__TR_DESC, p, t0, tp->ready_ns, 0);
            ofccl__trace_add(t, &ev);
        }
        if (tp->first_out) {
            ev = req_event(r, OFCCL__TR_SEND, p, tp->first_out, tp->last_out, tp->bytes_out);
            ofccl__trace_add(t, &ev);
        }
        if (r->writes_to_me[p] && tp->last_in) {
            ev = req_event(r, OFCCL__TR_RECV, p, t0, tp->last_in, 0);
            ev.unit = r->from_cnt[p]; /* units that came from it */
            ofccl__trace_add(t, &ev);
        }
    }
    if (finish_ns != 0) {
        ev = req_event(r, OFCCL__TR_FINISH, -1, finish_ns, now, 0);
        ofccl__trace_add(t, &ev);
    }
    ev = req_event(r, r->bucket ? OFCCL__TR_BUCKET : OFCCL__TR_COLL, -1, t0, now,
                   (uint64_t)r->block * (uint64_t)r->comm->size);
    ofccl__trace_add(t, &ev);
}

/* ---- the file ---- */
static const char *const kind_cat[] = {"coll",  "bucket", "phase", "phase",
                                       "phase", "chunk",  "phase"};

static void event_name(const ofccl__trace_ev_t *ev, char *buf, size_t len)
{
    const char *op = ofccl__coll_name(ev->coll);

    switch (ev->kind) {
    case OFCCL__TR_COLL:
        snprintf(buf, len, "%s #%llu", op, (unsigned long long)ev->seq);
        break;
    case OFCCL__TR_BUCKET:
        snprintf(buf, len, "bucket %s #%llu", op, (unsigned long long)ev->seq);
        break;
    case OFCCL__TR_DESC:
        snprintf(buf, len, "descriptor from %d", ev->peer);
        break;
    case OFCCL__TR_SEND:
        snprintf(buf, len, "send to %d", ev->peer);
        break;
    case OFCCL__TR_RECV:
        snprintf(buf, len, "receive from %d", ev->peer);
        break;
    case OFCCL__TR_FINISH:
        snprintf(buf, len, "copy out");
        break;
    default:
        snprintf(buf, len, "chunk to %d", ev->peer);
    }
}

static const char *phase_word(int kind)
{
    static const char *const w[] = {"collective", "bucket", "descriptor", "send",
                                    "receive",    "chunk",  "finish"};
    return kind >= 0 && kind <= OFCCL__TR_FINISH ? w[kind] : "?";
}

static void write_event(FILE *f, const ofccl__trace_t *t, const ofccl__trace_ev_t *ev, int rank)
{
    char name[64];

    event_name(ev, name, sizeof(name));
    fprintf(f,
            ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%llu.%03u,\"dur\":%llu.%03u,"
            "\"pid\":%d,\"tid\":%u,\"args\":{\"op\":\"%s\",\"seq\":%llu,\"comm\":%u,"
            "\"phase\":\"%s\",\"peer\":%d,\"bytes\":%llu,\"transport\":\"%s\","
            "\"algorithm\":\"%s\",\"status\":%d",
            name, kind_cat[ev->kind], (unsigned long long)(ev->ts_ns / 1000),
            (unsigned)(ev->ts_ns % 1000), (unsigned long long)(ev->dur_ns / 1000),
            (unsigned)(ev->dur_ns % 1000), rank, ev->comm, ofccl__coll_name(ev->coll),
            (unsigned long long)ev->seq, ev->comm, phase_word(ev->kind), ev->peer,
            (unsigned long long)ev->bytes, t->transport, ev->algo, ev->status);
    if (ev->unit != UINT32_MAX)
        fprintf(f, ",\"%s\":%u", ev->kind == OFCCL__TR_RECV ? "units" : "unit", ev->unit);
    fputs("}}", f);
}

int ofccl__trace_write(ofccl__trace_t *t)
{
    ofccl_ctx_t *ctx = t->ctx;
    int rank = ctx->boot->rank;
    char tmp[1100];
    uint32_t named[64];
    size_t nnamed = 0;
    FILE *f;

    if (t->written && t->written_n == t->n && t->written_dropped == t->dropped)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.tmp", t->path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE, "OFCCL_TRACE: cannot write %s: %s", tmp,
                    strerror(errno));
        return OFCCL_ERR_INTERNAL;
    }
    fprintf(f,
            "{\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"format\":\"ofccl-trace 1\","
            "\"rank\":%d,\"size\":%d,\"job\":\"%s\",\"host\":\"%s\",\"pid\":%d,"
            "\"transport\":\"%s\",\"clock\":\"CLOCK_MONOTONIC\",\"clock_reference_rank\":0,"
            "\"clock_offset_ns\":%lld,\"clock_offset_method\":\"%s\",\"events\":%zu,"
            "\"dropped_events\":%llu},\n\"traceEvents\":[\n"
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d "
            "(%s)\"}}",
            rank, ctx->boot->size, ctx->boot->job, ctx->boot->hostname, (int)getpid(), t->transport,
            (long long)t->offset_ns, t->offset_method, t->n, (unsigned long long)t->dropped, rank,
            rank, ctx->boot->hostname);
    for (size_t k = 0; k < t->n; k++) {
        bool seen = false;
        for (size_t j = 0; j < nnamed && !seen; j++)
            seen = named[j] == t->ev[k].comm;
        if (!seen && nnamed < OFCCL__ARRAY_LEN(named)) {
            named[nnamed++] = t->ev[k].comm;
            fprintf(f,
                    ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
                    "\"args\":{\"name\":\"communicator %u\"}}",
                    rank, t->ev[k].comm, t->ev[k].comm);
        }
        write_event(f, t, &t->ev[k], rank);
    }
    if (t->dropped > 0) /* said where a reader of the timeline sees it */
        fprintf(f,
                ",\n{\"name\":\"ofccl: %llu events dropped (buffer full; raise "
                "OFCCL_TRACE_EVENTS)\",\"ph\":\"i\",\"s\":\"p\",\"ts\":%llu.%03u,\"pid\":%d,"
                "\"tid\":0}",
                (unsigned long long)t->dropped,
                (unsigned long long)(t->n ? t->ev[t->n - 1].ts_ns / 1000 : 0),
                (unsigned)(t->n ? t->ev[t->n - 1].ts_ns % 1000 : 0), rank);
    fputs("\n]}\n", f);
    if (fclose(f) != 0 || rename(tmp, t->path) != 0) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE, "OFCCL_TRACE: cannot write %s: %s", t->path,
                    strerror(errno));
        unlink(tmp);
        return OFCCL_ERR_INTERNAL;
    }
    t->written = true;
    t->written_n = t->n;
    t->written_dropped = t->dropped;
    return 0;
}
