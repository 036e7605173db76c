/*
 * The optional progress thread (OFCCL_PROGRESS_THREAD=1). It holds the
 * context's lock (lock.c) like every public call, so the thread and the
 * caller never race; it drives ofccl_progress while any request is active
 * and naps when there is none.
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "engine_impl.h"
#include "util.h"

static int any_active(const ofccl_ctx_t *ctx)
{
    for (const ofccl_comm_t *c = ctx->comms; c != NULL; c = c->next)
        for (int s = 0; s < OFCCL__SLOTS; s++)
            if (c->coll->reqs[s].state == OFCCL__REQ_ACTIVE)
                return 1;
    return 0;
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
        active = any_active(ctx);
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

int ofccl__progress_start(ofccl_ctx_t *ctx, ofccl__err_t *e)
{
    pthread_mutexattr_t attr;

    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    ctx->lock_init = 1;
    ctx->spin_ns = (uint64_t)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_SPIN_US) * 1000;
    ctx->peer_watch = ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_PEER_WATCH) != 0;
    if (ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_PROGRESS_THREAD) == 0)
        return 0;
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
        atomic_store(&ctx->thread_stop, 1);
        pthread_join(ctx->thread, NULL);
        ctx->thread_on = 0;
    }
    if (ctx->lock_init) {
        pthread_mutex_destroy(&ctx->lock);
        ctx->lock_init = 0;
    }
}
