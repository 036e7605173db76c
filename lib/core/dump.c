/*
 * ofccl_dump_state and the SIGUSR1 handler (OFCCL_DUMP_SIGNAL=1). The dump
 * reads what the engine keeps anyway (report.c names what each peer owes);
 * it changes nothing, so taking it leaves the job as it was.
 */
#include "dump.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "engine_impl.h"
#include "trace.h"
#include "util.h"

/* One line to `out`, or to the log. */
static void emit(ofccl_ctx_t *ctx, FILE *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emit(ofccl_ctx_t *ctx, FILE *out, const char *fmt, ...)
{
    char line[OFCCL__ERRMSG_LEN + 512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (out != NULL)
        fprintf(out, "%s\n", line);
    else
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE, "%s", line);
}

/* Where a pending request stands. */
static void req_phase(const ofccl__req_t *r, char *buf, size_t len)
{
    const ofccl_comm_t *comm = r->comm;
    int missing = 0;

    for (int p = 0; p < comm->size; p++)
        missing += r->i_write_to[p] && !r->peer_ready[p];
    if (r->status != 0)
        snprintf(buf, len, "failing (%s), %u of its operations still out",
                 ofccl_strerror(r->status), r->ops_out);
    else if (r->finished)
        snprintf(buf, len, "completing (%u operations in flight)", r->ops_out);
    else if (r->algo->flags & OFCCL__ALGO_EAGER)
        snprintf(buf, len, "eager: waiting for the peers' data");
    else if (r->descs_sent < r->nfrom)
        snprintf(buf, len,
                 "announcing its buffers (descriptors to rank %d and %u more not sent yet)",
                 r->from[r->descs_sent], r->nfrom - r->descs_sent - 1);
    else if (missing > 0)
        snprintf(buf, len, "waiting for descriptors (%d missing), %llu of %u units in", missing,
                 (unsigned long long)r->arrived, r->units_in);
    else
        snprintf(buf, len, "moving data: %llu of %u units in, %u reduced",
                 (unsigned long long)r->arrived, r->units_in, r->reduced);
}

static int dump_comm(ofccl_comm_t *comm, FILE *out)
{
    ofccl_ctx_t *ctx = comm->ctx;
    uint64_t now = ofccl__coarse_ns();
    char phase[256], who[OFCCL__ERRMSG_LEN / 2];
    int pending = 0;

    for (uint64_t k = 0; k < OFCCL__SLOTS; k++) {
        /* oldest first: the slots in sequence order */
        const ofccl__req_t *r = &comm->coll->reqs[(comm->coll->next_seq + k) % OFCCL__SLOTS];
        if (r->state != OFCCL__REQ_ACTIVE)
            continue;
        pending++;
        req_phase(r, phase, sizeof(phase));
        ofccl__coll_waiting_for(r, -1, who, sizeof(who));
        emit(ctx, out,
             "  communicator %u rank %d/%d: %s #%llu (%s), %zu B per rank, %s, posted %.1f ms "
             "ago; phase: %s; waiting for %s",
             comm->id, comm->rank, comm->size, ofccl__coll_name(r->coll),
             (unsigned long long)r->seq, r->algo->name, r->block,
             r->bucket ? "bucket" : "not a bucket",
             now > r->start_ns ? (double)(now - r->start_ns) / 1e6 : 0.0, phase, who);
    }
    if (pending == 0)
        emit(ctx, out, "  communicator %u rank %d/%d: no pending request (next is #%llu)%s%s",
             comm->id, comm->rank, comm->size, (unsigned long long)comm->coll->next_seq,
             comm->sticky ? "; failed: " : "", comm->sticky ? comm->sticky_msg : "");
    emit(ctx, out, "  communicator %u rank %d/%d: %d of %d peers resolved (%s)", comm->id,
         comm->rank, comm->size, ofccl__comm_peers_resolved(comm), comm->size - 1,
         comm->resolved != NULL ? "lazy: on first use" : "all at creation");
    return pending;
}

static int dump_locked(ofccl_ctx_t *ctx, FILE *out)
{
    int pending = 0;

    emit(ctx, out, "ofccl state dump: rank %d of %d, %d communicator(s)", ctx->boot->rank,
         ctx->boot->size, ctx->ncomms);
    for (ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next)
        if (c->coll != NULL)
            pending += dump_comm(c, out);
    emit(ctx, out, "ofccl state dump: %d pending request(s)%s%s", pending,
         ctx->trace ? "; trace written to " : "", ofccl__trace_path(ctx->trace));
    if (out != NULL)
        fflush(out);
    if (ctx->trace != NULL)
        ofccl__trace_write(ctx->trace);
    return 0;
}

int ofccl_dump_state(ofccl_ctx_t *ctx, FILE *out)
{
    OFCCL__CHECK_HANDLE(ctx);
    OFCCL__LOCKED(ctx, dump_locked(ctx, out));
}

/* ---- SIGUSR1 (OFCCL_DUMP_SIGNAL=1) ---- */
#define REG_MAX 64
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held across a whole start or stop, so a context starting while the last
 * one stops cannot install the handler before the old thread is gone. */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
static ofccl_ctx_t *registered[REG_MAX];
static int nregistered;
static int pipe_fd[2] = {-1, -1};
static pthread_t dump_thread;
static struct sigaction previous;

static void on_sigusr1(int sig)
{
    int saved = errno;
    char b = 'd';

    (void)sig;
    if (write(pipe_fd[1], &b, 1) < 0) { /* full: a dump is already asked for */
    }
    errno = saved;
}

static void *dump_main(void *arg)
{
    char b;

    (void)arg;
    for (;;) {
        ssize_t n = read(pipe_fd[0], &b, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || b == 'q')
            return NULL;
        pthread_mutex_lock(&reg_lock);
        for (int k = 0; k < REG_MAX; k++)
            if (registered[k] != NULL)
                ofccl_dump_state(registered[k], NULL);
        pthread_mutex_unlock(&reg_lock);
    }
}

static int install(ofccl_ctx_t *ctx)
{
    struct sigaction sa;

    if (pipe(pipe_fd) != 0)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_RESOURCE,
                           "OFCCL_DUMP_SIGNAL: cannot create a pipe: %s", strerror(errno));
    fcntl(pipe_fd[0], F_SETFD, FD_CLOEXEC);
    fcntl(pipe_fd[1], F_SETFD, FD_CLOEXEC);
    fcntl(pipe_fd[1], F_SETFL, O_NONBLOCK);
    if (pthread_create(&dump_thread, NULL, dump_main, NULL) != 0) {
        close(pipe_fd[0]);
        close(pipe_fd[1]);
        pipe_fd[0] = pipe_fd[1] = -1;
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_RESOURCE,
                           "OFCCL_DUMP_SIGNAL: cannot start the dump thread");
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &previous);
    return 0;
}

static void uninstall(void)
{
    char q = 'q';

    sigaction(SIGUSR1, &previous, NULL);
    if (write(pipe_fd[1], &q, 1) == 1)
        pthread_join(dump_thread, NULL);
    else
        pthread_detach(dump_thread);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    pipe_fd[0] = pipe_fd[1] = -1;
}

int ofccl__dump_start(ofccl_ctx_t *ctx)
{
    int rc = 0;

    if (ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_DUMP_SIGNAL) == 0)
        return 0;
    pthread_mutex_lock(&install_lock);
    pthread_mutex_lock(&reg_lock);
    if (nregistered == REG_MAX)
        rc = ofccl__fail(&ctx->log, OFCCL__SUB_CORE, &ctx->err, OFCCL_ERR_RESOURCE,
                         "OFCCL_DUMP_SIGNAL: more than %d contexts in one process", REG_MAX);
    else if (nregistered == 0)
        rc = install(ctx);
    for (int k = 0; k < REG_MAX && rc == 0; k++)
        if (registered[k] == NULL) {
            registered[k] = ctx;
            nregistered++;
            ctx->dump_signal = 1;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    pthread_mutex_unlock(&install_lock);
    if (rc == 0)
        OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE, "SIGUSR1 (kill -USR1 %d) dumps the state",
                    (int)getpid());
    return rc;
}

void ofccl__dump_stop(ofccl_ctx_t *ctx)
{
    bool last = false;

    if (!ctx->dump_signal)
        return;
    pthread_mutex_lock(&install_lock);
    pthread_mutex_lock(&reg_lock);
    for (int k = 0; k < REG_MAX; k++)
        if (registered[k] == ctx) {
            registered[k] = NULL;
            last = --nregistered == 0;
        }
    ctx->dump_signal = 0;
    pthread_mutex_unlock(&reg_lock);
    if (last) /* outside reg_lock: the thread takes it for a dump */
        uninstall();
    pthread_mutex_unlock(&install_lock);
}
