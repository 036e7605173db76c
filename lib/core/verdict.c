/*
 * Whether a request has failed for a reason outside it, and who is to blame:
 * a peer the launcher reports gone, a peer's failure notice, a peer whose
 * exit the transport or the pid watch sees, a peer known gone otherwise, or
 * the deadline. The request fails with a message naming the peer and what it
 * still owed, and the other ranks are told (notice.c) so that they blame the
 * same peer rather than this rank's departure.
 */
#include <stdio.h>
#include <string.h>

#include "engine_impl.h"
#include "util.h"

/* The lowest rank the launcher reports gone (dead.c answers) that still
 * owes r a descriptor or data, or -1; *source names the report. Only what
 * rank p still owes r counts (its descriptor, its data), as for a peer
 * whose exit the local transport sees: a rank that ended cleanly after its
 * part (PMIX_EVENT_PROC_TERMINATED) may leave our last completions to it
 * still to be reaped, and must not fail a request that has all it needs. */
static int dead_owing(const ofccl__req_t *r, const char **source)
{
    const ofccl_comm_t *comm = r->comm;

    *source = NULL;
    if (atomic_load_explicit(&comm->ctx->dead_count, memory_order_acquire) == 0)
        return -1;
    for (int p = 0; p < comm->size; p++) {
        const char *s = p != comm->rank ? ofccl__dead_source(comm, p) : NULL;
        if (s != NULL && ofccl__coll_owes(r, p)) {
            *source = s;
            return p;
        }
    }
    return -1;
}

/* A peer known gone (a notice, the transport) that r still needs something
 * from, or -1. */
static int gone_owed(const ofccl__req_t *r)
{
    const ofccl_comm_t *comm = r->comm;

    for (int p = 0; comm->ngone > 0 && p < comm->size; p++)
        if (ofccl__comm_gone(comm, p) && ofccl__coll_owes(r, p))
            return p;
    return -1;
}

void ofccl__coll_check_failed(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    char cause[320] = "", who[OFCCL__ERRMSG_LEN / 2];
    const char *reported = NULL;
    int pid = -1, told_gone = -1, told = 0, gone, culprit = ofccl__notice_culprit(comm);
    bool named = false; /* cause says why `gone` is gone */
    /* The launcher's word first: first-hand, and every rank hears it. */
    gone = dead_owing(r, &reported);
    /* Then a peer's notice, where it concerns this collective: it is
     * about this one or an earlier one, or about a rank this one still
     * needs something from. */
    bool concerns =
        gone < 0 && culprit >= 0 &&
        ofccl__notice_concerns(comm, r->seq, culprit != comm->rank && ofccl__coll_owes(r, culprit));
    if (concerns)
        told = ofccl__notice_cause(comm, &told_gone, cause, sizeof(cause));
    /* A mismatch notice in its grace (notice.c): the difference, not a
     * peer that left after it failed, is the cause. */
    bool hold = concerns && !told;
    if (gone < 0 && !hold)
        gone = told ? told_gone : comm->ctx->peer_watch ? ofccl__ep_peer_gone(comm->ep, &pid) : -1;
    /* A peer that exited owing this request nothing finished its part
     * and left: the others may still be on their way (a same-host peer
     * leaves before data from other hosts has come). */
    if (!told && !reported && gone >= 0 && !ofccl__coll_owes(r, gone))
        gone = -1;
    /* Then peers known gone otherwise (another notice, the transport). */
    if (!told && !hold && gone < 0 && (gone = gone_owed(r)) >= 0) {
        ofccl__dead_gone_name(comm, gone, cause, sizeof(cause) - 2);
        strcat(cause, "; ");
        named = true;
    }
    /* A gone peer's writes, if any, were read above: what is still
     * missing will never come, so it fails now rather than at the deadline. */
    if (told || gone >= 0 || ofccl__coarse_ns() > r->deadline_ns) {
        if (reported != NULL) {
            ofccl__dead_name(comm, gone, reported, cause, sizeof(cause) - 2);
            strcat(cause, "; ");
        } else if (gone >= 0 && !told && !named) {
            snprintf(cause, sizeof(cause), "rank %d (pid %d) has exited; ", gone, pid);
        }
        /* A peer's exit is the cause: what the others still owe is on its way. */
        ofccl__coll_waiting_for(r, gone, who, sizeof(who));
        /* Tell the others first: they would blame this rank's departure
         * (not needed when the launcher told everyone). */
        if (reported == NULL)
            ofccl__notice_send(comm, r->seq,
                               gone >= 0 ? OFCCL__NOTICE_EXITED : OFCCL__NOTICE_SILENT,
                               gone >= 0 ? gone
                               : told    ? culprit
                                         : ofccl__coll_first_owing(r),
                               -1);
        ofccl__coll_fail(r,
                         told == OFCCL__NOTICE_MISMATCH ? OFCCL_ERR_MISMATCH
                         : told == OFCCL__NOTICE_SILENT ? OFCCL_ERR_TIMEOUT
                         : gone >= 0 && ofccl__comm_gone(comm, gone) == OFCCL__GONE_SILENT
                             ? OFCCL_ERR_TIMEOUT
                         : gone >= 0 ? OFCCL_ERR_REMOTE_ERROR
                                     : OFCCL_ERR_TIMEOUT,
                         "%snot complete after %llu ms; waiting for %s", cause,
                         (unsigned long long)((ofccl__coarse_ns() - r->start_ns) / 1000000), who);
        ofccl__coll_dump_history(r);
    }
}
