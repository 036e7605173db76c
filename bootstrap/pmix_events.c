/*
 * PMIx failure events: the launcher tells the ranks that are still running
 * when one of the job's processes dies, aborts or loses its connection, and
 * ofccl hands that rank to the context (ofccl__boot_ops_t.watch), which fails
 * the collectives waiting for it at once instead of at their deadline.
 *
 * PMIx runs handlers on its own event thread. The handler only calls the
 * context's `dead` function (which records atomically) and always calls the
 * event's completion callback with PMIX_SUCCESS, so that the program's own
 * handlers for the same event still run after ours.
 *
 * A handler has no argument of its own: the watch travels as
 * PMIX_EVENT_RETURN_OBJECT and is looked up in the list of live watches under
 * a mutex, so a handler that runs while (or after) its context unwatches finds
 * nothing and does nothing. Unwatching removes the watch from the list first,
 * then deregisters the handler.
 *
 * PMIX_EVENT_NODE_DOWN is not asked for: a server whose host does not handle
 * system events refuses the whole registration for it (SERVER FAILED
 * REQUEST, seen with a PMIx 4.2 server), and a node's death reaches us as
 * its processes' deaths anyway. Which launchers raise these events is
 * measured in docs/reliability.md.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmix_impl.h"
#include "util.h"

typedef struct pmix_watch {
    ofccl__boot_dead_fn dead;
    void *arg;
    pmix_proc_t me;
    int size;
    size_t ref; /* the handler's registration */
    const ofccl__log_t *log;
    struct pmix_watch *next;
} pmix_watch_t;

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pmix_watch_t *watches; /* live watches of this process */

/* The events that mean "a process of the job is gone", and how a message
 * names them (static strings: the context keeps the pointer). */
static const struct {
    pmix_status_t code;
    const char *source;
} events[] = {
    {PMIX_ERR_PROC_ABORTED, "PMIx event PMIX_ERR_PROC_ABORTED"},
    {PMIX_ERR_PROC_ABORTED_BY_SIG, "PMIx event PMIX_ERR_PROC_ABORTED_BY_SIG"},
    {PMIX_ERR_PROC_REQUESTED_ABORT, "PMIx event PMIX_ERR_PROC_REQUESTED_ABORT"},
    {PMIX_ERR_PROC_KILLED_BY_CMD, "PMIx event PMIX_ERR_PROC_KILLED_BY_CMD"},
    {PMIX_ERR_PROC_TERM_WO_SYNC, "PMIx event PMIX_ERR_PROC_TERM_WO_SYNC"},
    {PMIX_ERR_EXIT_NONZERO_TERM, "PMIx event PMIX_ERR_EXIT_NONZERO_TERM"},
    {PMIX_EVENT_PROC_TERMINATED, "PMIx event PMIX_EVENT_PROC_TERMINATED"},
    {PMIX_ERR_LOST_CONNECTION, "PMIx event PMIX_ERR_LOST_CONNECTION"},
};

static const char *event_source(pmix_status_t code)
{
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(events); k++)
        if (events[k].code == code)
            return events[k].source;
    return "PMIx event";
}

/* Report `proc` to watch w if it is another rank of w's job. Caller holds watch_lock. */
static int report(pmix_watch_t *w, const pmix_proc_t *proc, const char *source)
{
    if (proc == NULL || !PMIX_CHECK_NSPACE(proc->nspace, w->me.nspace) ||
        proc->rank >= (pmix_rank_t)w->size || proc->rank == w->me.rank)
        return 0;
    w->dead(w->arg, (int)proc->rank, source);
    return 1;
}

/* Every rank an event names: PMIX_EVENT_AFFECTED_PROC(S), else its source. */
static int report_all(pmix_watch_t *w, pmix_status_t status, const pmix_proc_t *source,
                      const pmix_info_t info[], size_t ninfo)
{
    const char *what = event_source(status);
    int named = 0, n = 0;

    for (size_t i = 0; i < ninfo; i++) {
        const pmix_value_t *v = &info[i].value;
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && v->type == PMIX_PROC) {
            named = 1;
            n += report(w, v->data.proc, what);
        } else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROCS) &&
                   v->type == PMIX_DATA_ARRAY && v->data.darray != NULL &&
                   v->data.darray->type == PMIX_PROC) {
            const pmix_proc_t *procs = v->data.darray->array;
            named = 1;
            for (size_t k = 0; procs != NULL && k < v->data.darray->size; k++)
                n += report(w, &procs[k], what);
        }
    }
    if (!named)
        n += report(w, source, what);
    return n;
}

static void on_event(size_t ref, pmix_status_t status, const pmix_proc_t *source,
                     pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                     pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    void *mine = NULL;

    (void)results;
    (void)nresults;
    for (size_t i = 0; i < ninfo; i++)
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_RETURN_OBJECT) &&
            info[i].value.type == PMIX_POINTER)
            mine = info[i].value.data.ptr;
    pthread_mutex_lock(&watch_lock);
    for (pmix_watch_t *w = watches; w != NULL; w = w->next) {
        /* Without the object (a server that drops it), the handler's reference says whose. */
        if (mine != NULL ? w != mine : w->ref != ref)
            continue;
        if (report_all(w, status, source, info, ninfo) == 0)
            OFCCL__INFO(w->log, OFCCL__SUB_BOOT,
                        "%s from %s:%u names no other rank of this job: nothing to fail",
                        event_source(status), source != NULL ? source->nspace : "?",
                        source != NULL ? source->rank : 0);
    }
    pthread_mutex_unlock(&watch_lock);
    if (cbfunc != NULL) /* always, or PMIx holds the event (and later ones) forever */
        cbfunc(PMIX_SUCCESS, NULL, 0, NULL, NULL, cbdata);
}

/* Caller holds watch_lock. */
static void unlist(pmix_watch_t *w)
{
    for (pmix_watch_t **pp = &watches; *pp != NULL; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

int ofccl__pmix_watch(ofccl__boot_t *b, ofccl__boot_dead_fn dead, void *arg, ofccl__err_t *e)
{
    pmix_boot_t *pb = b->impl;
    pmix_status_t codes[OFCCL__ARRAY_LEN(events)];
    pmix_info_t info[2];
    pmix_watch_t *w;
    pmix_status_t rc;

    if (pb->watch != NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_STATE,
                           "PMIx failure events are already watched");
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory watching PMIx failure events");
    *w = (pmix_watch_t){dead, arg, pb->me, b->size, SIZE_MAX, b->log, NULL};
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(events); k++)
        codes[k] = events[k].code;
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_EVENT_HDLR_NAME, "ofccl", PMIX_STRING);
    PMIX_INFO_LOAD(&info[1], PMIX_EVENT_RETURN_OBJECT, w, PMIX_POINTER);
    /* Listed before registering: an event may arrive before the call returns.
     * The lock is not held across the call, which needs PMIx's event thread,
     * where a handler of another context's watch may be waiting for it. */
    pthread_mutex_lock(&watch_lock);
    w->next = watches;
    watches = w;
    pthread_mutex_unlock(&watch_lock);
    /* Blocking form (no callback): returns the reference, or an error < 0. */
    rc = PMIx_Register_event_handler(codes, OFCCL__ARRAY_LEN(codes), info, 2, on_event, NULL, NULL);
    pthread_mutex_lock(&watch_lock);
    if (rc >= 0)
        w->ref = (size_t)rc;
    else
        unlist(w);
    pthread_mutex_unlock(&watch_lock);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc < 0) {
        free(w);
        return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "PMIx_Register_event_handler failed: %s", PMIx_Error_string(rc));
    }
    pb->watch = w;
    OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT,
                 "watching %zu PMIx failure events (handler %zu): a rank the launcher reports "
                 "gone fails the collectives that wait for it",
                 OFCCL__ARRAY_LEN(codes), w->ref);
    return 0;
}

typedef struct dereg {
    int done; /* atomic */
    pmix_status_t status;
} dereg_t;

static void dereg_done(pmix_status_t status, void *cbdata)
{
    dereg_t *d = cbdata;

    d->status = status;
    __atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
}

void ofccl__pmix_unwatch(ofccl__boot_t *b)
{
    pmix_boot_t *pb = b->impl;
    pmix_watch_t *w = pb != NULL ? pb->watch : NULL;
    dereg_t *d;

    if (w == NULL)
        return;
    pthread_mutex_lock(&watch_lock);
    unlist(w);
    pthread_mutex_unlock(&watch_lock);
    pb->watch = NULL;
    /* From here no handler finds w. Deregistering is asynchronous: wait for
     * its callback, bounded (a server that has gone may never answer; then
     * `d` is left to the late callback rather than freed under it). */
    d = calloc(1, sizeof(*d));
    if (d != NULL && PMIx_Deregister_event_handler(w->ref, dereg_done, d) == PMIX_SUCCESS) {
        struct timespec nap = {0, 1000000};
        for (int ms = 0; !__atomic_load_n(&d->done, __ATOMIC_ACQUIRE) && ms < 5000; ms++)
            nanosleep(&nap, NULL);
        if (!__atomic_load_n(&d->done, __ATOMIC_ACQUIRE)) {
            OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                        "PMIx did not confirm removing event handler %zu within 5 s", w->ref);
            d = NULL;
        } else if (d->status != PMIX_SUCCESS) {
            OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT, "removing PMIx event handler %zu: %s", w->ref,
                         PMIx_Error_string(d->status));
        }
    }
    free(d);
    free(w);
}
