/*
 * Live handles: every context and communicator is registered from creation to
 * destruction, and public entry points check a handle before touching it, so a
 * call on a destroyed one returns OFCCL_ERR_STATE instead of reading freed
 * memory. One small process-wide table: it does not limit how many contexts
 * coexist. (A new object may reuse a freed address; that one is live again.)
 *
 * The check runs on every collective call, so each thread remembers the last
 * few handles it found live, valid while no handle has been removed since
 * (`removals` counts them): the common case is a compare and one atomic load
 * instead of a mutex and a scan.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core.h"

#define CACHED 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const void **live;
static size_t nlive, cap;
static _Atomic unsigned long removals;

static _Thread_local struct {
    const void *h[CACHED];
    unsigned long removals; /* `removals` when these were found live */
    unsigned next;
} seen;

int ofccl__handle_add(const void *h)
{
    int rc = 0;

    pthread_mutex_lock(&lock);
    if (nlive == cap) {
        size_t ncap = cap ? cap * 2 : 16;
        const void **p = realloc(live, ncap * sizeof(*p));
        if (p == NULL)
            rc = OFCCL_ERR_NO_MEMORY;
        else
            live = p, cap = ncap;
    }
    if (rc == 0)
        live[nlive++] = h;
    pthread_mutex_unlock(&lock);
    return rc;
}

void ofccl__handle_remove(const void *h)
{
    pthread_mutex_lock(&lock);
    atomic_fetch_add_explicit(&removals, 1, memory_order_release);
    for (size_t k = 0; k < nlive; k++)
        if (live[k] == h) {
            live[k] = live[--nlive];
            break;
        }
    if (nlive == 0) { /* nothing left: give the table back */
        free(live);
        live = NULL;
        cap = 0;
    }
    pthread_mutex_unlock(&lock);
}

int ofccl__handle_live(const void *h)
{
    unsigned long now = atomic_load_explicit(&removals, memory_order_acquire);
    int found = 0;

    if (h == NULL)
        return 0;
    if (seen.removals == now)
        for (int k = 0; k < CACHED; k++)
            if (seen.h[k] == h)
                return 1;
    pthread_mutex_lock(&lock);
    for (size_t k = 0; k < nlive && !found; k++)
        found = live[k] == h;
    now = atomic_load_explicit(&removals, memory_order_relaxed);
    pthread_mutex_unlock(&lock);
    if (found) {
        if (seen.removals != now) {
            for (int k = 0; k < CACHED; k++)
                seen.h[k] = NULL;
            seen.removals = now;
        }
        seen.h[seen.next++ % CACHED] = h;
    }
    return found;
}
