/*
 * Live handles: every context and communicator is registered from creation to
 * destruction, and public entry points check a handle before touching it, so a
 * call on a destroyed one returns OFCCL_ERR_STATE instead of reading freed
 * memory. One small process-wide table: it does not limit how many contexts
 * coexist. (A new object may reuse a freed address; that one is live again.)
 */
#include <pthread.h>
#include <stdlib.h>

#include "core.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const void **live;
static size_t nlive, cap;

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
    int found = 0;

    if (h == NULL)
        return 0;
    pthread_mutex_lock(&lock);
    for (size_t k = 0; k < nlive && !found; k++)
        found = live[k] == h;
    pthread_mutex_unlock(&lock);
    return found;
}
