/*
 * The context's progress thread, in one of two modes.
 *
 * OFCCL_PROGRESS_THREAD=1: started with the context, it drives every active
 * request (ofccl_progress) and naps when there is none.
 *
 * Otherwise it is the watcher, started by the first stream-ordered request
 * (a GPU collective) the context posts, never before: a process that posts
 * none has no thread. A stream-ordered request runs on a stream the caller
 * does not poll; nobody else would notice that a peer died, a deadline
 * passed or the communicator was aborted, and the stream would wait for
 * good. While any such request is in flight, the watcher runs one pass of
 * progress (deadlines, the launcher's dead ranks, the peers' process watch
 * and failure notices, aborts) every OFCCL_WATCH_US, and a failed request's
 * stream is released there, by host stores (engine.c, the algorithm's
 * unwind, the request's end word). A stream-ordered request whose steps the
 * host runs (GPU memory staged through host memory to the fabric) is driven
 * here at full speed, as a waiting call would drive it, napping once nothing
 * moves. With none in flight it sleeps on a condition variable and costs
 * nothing. ofccl_comm_abort wakes it at once (lock.c, ofccl__watch_kick).
 *
 * Either way the thread holds the context's lock (lock.c) while it runs a
 * pass, like every public call, so it and the caller never race; it waits
 * with the lock released.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "engine_impl.h"
#include "util.h"

enum { NONE = 0, ENQUEUED = 1, HOST_DRIVEN = 2 };

/* What the watcher has to do: HOST_DRIVEN while a stream-ordered request
 * whose steps the host runs is active (staging through host memory: the
 * caller's stream waits on every step), ENQUEUED while only requests whose
 * steps are all on a stream are (they need only their failures watched),
 * else NONE. Without stream_only, any active request counts as HOST_DRIVEN. */
static int any_active(const ofccl_ctx_t *ctx, bool stream_only)
{
    int found = NONE;

    for (const ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next)
        for (int s = 0; s < OFCCL__SLOTS; s++) {
            const ofccl__req_t *r = &c->coll->reqs[s];
            if (r->state != OFCCL__REQ_ACTIVE)
                continue;
            if (!stream_only || r->stream_ord)
                return HOST_DRIVEN;
            if (r->algo != NULL && (r->algo->flags & OFCCL__ALGO_STREAM))
                found = ENQUEUED;
        }
    return found;
}

static void *progress_main(void *arg)
{
    ofccl_ctx_t *ctx = arg;
    char why[256] = "";
    int rc = ofccl__topo_pin_thread(ctx->topo, ctx->caller_cpus[0] ? ctx->caller_cpus : NULL, why,
                                    sizeof(why));

    OFCCL__INFO(&ctx->log, OFCCL__SUB_CORE, "progress thread: %s%s", why,
                rc ? " (running unpinned)" : "");
    ofccl__idle_t idle = {0};

    while (!atomic_load(&ctx->thread_stop)) {
        int active;

        ofccl__ctx_lock(ctx);
        active = any_active(ctx, false) != NONE;
        if (active)
            ofccl_progress(ctx);
        ofccl__ctx_unlock(ctx);
        if (active) {
            sched_yield(); /* let the caller take the lock between passes */
            ofccl__idle_poll(ctx, &idle);
        } else {
            idle = (ofccl__idle_t){0};
            struct timespec nap = {0, 50000}; /* idle: 50 us naps, not a spin */
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}

static struct timespec after_ns(uint64_t ns)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    ns += (uint64_t)t.tv_nsec;
    t.tv_sec += (time_t)(ns / 1000000000ull);
    t.tv_nsec = (long)(ns % 1000000000ull);
    return t;
}

static void *watch_main(void *arg)
{
    ofccl_ctx_t *ctx = arg;
    ofccl__idle_t idle = {0};

    ofccl__ctx_lock(ctx);
    while (!atomic_load(&ctx->thread_stop)) {
        int what = any_active(ctx, true);
        if (what == NONE) {
            /* Nothing to watch: sleep until a stream-ordered request is
             * posted (ofccl__watch_arm) or the context goes. */
            idle = (ofccl__idle_t){0};
            ctx->watch_idle = 1;
            pthread_cond_wait(&ctx->watch_cv, &ctx->lock);
            ctx->watch_idle = 0;
            continue;
        }
        atomic_store_explicit(&ctx->watch_kick, 0, memory_order_relaxed);
        ofccl_progress(ctx);
        if (what == HOST_DRIVEN) {
            /* Its steps wait on this thread: drive it as a waiting call
             * would (full speed while it moves, naps once it stalls),
             * letting the caller take the lock between passes. */
            ofccl__ctx_unlock(ctx);
            sched_yield();
            ofccl__idle_poll(ctx, &idle);
            ofccl__ctx_lock(ctx);
        } else if (!atomic_load_explicit(&ctx->watch_kick, memory_order_relaxed) &&
                   !atomic_load(&ctx->thread_stop)) {
            struct timespec until = after_ns(ctx->watch_ns);
            pthread_cond_timedwait(&ctx->watch_cv, &ctx->lock, &until);
        }
    }
    ofccl__ctx_unlock(ctx);
    return NULL;
}

/* The watcher, started on the first stream-ordered request (lock.c calls
 * this through ctx->watch_arm; the caller holds the lock). */
static int watch_arm(ofccl_ctx_t *ctx, bool now, ofccl__err_t *e)
{
    int rc;

    if (ctx->thread_on) {
        /* Woken from its idle sleep, or from its pause between passes for
         * a request whose steps it runs: a request that only needs watching
         * is found on its next pass, and its post costs no wake-up. */
        if (ctx->watch_idle || now)
            pthread_cond_signal(&ctx->watch_cv);
        return 0;
    }
    atomic_store(&ctx->thread_stop, 0);
    if ((rc = pthread_create(&ctx->thread, NULL, watch_main, ctx)) != 0)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, e, OFCCL_ERR_NO_MEMORY,
                           "cannot start the thread that watches GPU collectives for failed "
                           "peers and deadlines (%s); set OFCCL_PROGRESS_THREAD=1 to start one "
                           "with the context",
                           strerror(rc));
    ctx->thread_on = 1;
    OFCCL__DEBUG(&ctx->log, OFCCL__SUB_CORE,
                 "watcher started: a stream-ordered request is in flight (a pass every %llu us)",
                 (unsigned long long)(ctx->watch_ns / 1000));
    return 0;
}

int ofccl__progress_start(ofccl_ctx_t *ctx, ofccl__err_t *e)
{
    pthread_mutexattr_t attr;
    pthread_condattr_t cattr;

    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&ctx->watch_cv, &cattr);
    pthread_condattr_destroy(&cattr);
    ctx->lock_init = 1;
    ctx->spin_ns = (uint64_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_SPIN_US) * 1000;
    ctx->peer_watch = ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_PEER_WATCH) != 0;
    ctx->watch_ns = (uint64_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_WATCH_US) * 1000;
    if (ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_PROGRESS_THREAD) == 0) {
        ctx->watch_arm = watch_arm; /* the watcher, on the first stream-ordered request */
        return 0;
    }
    ofccl__topo_cpuset(ctx->topo, ctx->caller_cpus, sizeof(ctx->caller_cpus));
    atomic_store(&ctx->thread_stop, 0);
    if (pthread_create(&ctx->thread, NULL, progress_main, ctx) != 0)
        return ofccl__fail(&ctx->log, OFCCL__SUB_CORE, e, OFCCL_ERR_INTERNAL,
                           "cannot start the progress thread (OFCCL_PROGRESS_THREAD=1)");
    ctx->thread_on = 1;
    return 0;
}

void ofccl__progress_stop(ofccl_ctx_t *ctx)
{
    if (ctx->thread_on) {
        ofccl__ctx_lock(ctx);
        atomic_store(&ctx->thread_stop, 1);
        pthread_cond_signal(&ctx->watch_cv);
        ofccl__ctx_unlock(ctx);
        pthread_join(ctx->thread, NULL);
        ctx->thread_on = 0;
    }
    ctx->watch_arm = NULL;
    if (ctx->lock_init) {
        pthread_cond_destroy(&ctx->watch_cv);
        pthread_mutex_destroy(&ctx->lock);
        ctx->lock_init = 0;
    }
}
