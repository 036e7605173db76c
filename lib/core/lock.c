/*
 * The context lock, how waiting loops pace themselves, and the doorbell of
 * the watcher. Every public call that touches communicator state holds the
 * context's (recursive) lock. Below everything else of lib/core: it calls
 * nothing there (the watcher, progress.c, installs its start as a hook).
 */
#include <sched.h>
#include <time.h>

#include "core.h"
#include "util.h"

void ofccl__ctx_lock(ofccl_ctx_t *ctx)
{
    pthread_mutex_lock(&ctx->lock);
}

void ofccl__ctx_unlock(ofccl_ctx_t *ctx)
{
    pthread_mutex_unlock(&ctx->lock);
}

void ofccl__idle_poll(ofccl_ctx_t *ctx, ofccl__idle_t *st)
{
    uint64_t now = ofccl__now_ns();
    uint64_t seen = atomic_load_explicit(&ctx->activity, memory_order_relaxed);

    if (st->start_ns == 0)
        st->start_ns = now;
    if (st->since_ns == 0 || seen != st->seen) {
        st->seen = seen;
        st->since_ns = now;
    }
    if (now - st->start_ns <= 50000)
        return;
    if (now - st->since_ns <= ctx->spin_ns) {
        sched_yield();
        return;
    }
    /* Napping adds at most 1/16 of the time already waited to the latency. */
    uint64_t nap = OFCCL__MIN(OFCCL__MAX((now - st->since_ns) / 16, 20000ull), 1000000ull);
    struct timespec ts = {0, (long)nap};
    nanosleep(&ts, NULL);
}

int ofccl__watch_arm(ofccl_ctx_t *ctx, bool now, ofccl__err_t *e)
{
    return ctx->watch_arm != NULL ? ctx->watch_arm(ctx, now, e) : 0;
}

void ofccl__watch_kick(ofccl_ctx_t *ctx)
{
    /* A signal the watcher misses (it was between its check and its wait)
     * costs one interval, OFCCL_WATCH_US. */
    atomic_store_explicit(&ctx->watch_kick, 1, memory_order_relaxed);
    if (ctx->lock_init)
        pthread_cond_signal(&ctx->watch_cv);
}
