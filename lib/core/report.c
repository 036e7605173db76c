/*
 * What a collective leaves behind for the reports of a stuck one: the history
 * of the communicator's last OFCCL__HISTORY collectives, and which ranks a
 * request still waits for. The engine (engine.c) records; a timeout reports.
 */
#include <stdio.h>
#include <string.h>

#include "engine_impl.h"
#include "util.h"

/* What else r waits for from p beyond units (the algorithm's phrase), or NULL. */
static const char *waits_on(const ofccl__req_t *r, int p)
{
    return r->algo->waits_on != NULL ? r->algo->waits_on(r, p) : NULL;
}

/* What rank p still owes request r ("" if nothing), into what[len]. */
static void owed_by(const ofccl__req_t *r, int p, unsigned each, char *what, size_t len)
{
    const char *also = waits_on(r, p); /* read once: a peer may change it meanwhile */
    size_t w = 0;

    what[0] = '\0';
    if (r->i_write_to[p] && !r->peer_ready[p])
        w += (size_t)snprintf(what + w, len - w, "; descriptor not posted there");
    else if (r->i_write_to[p] && r->inflight[p])
        w += (size_t)snprintf(what + w, len - w, "; %u of our writes to it in flight",
                              r->inflight[p]);
    if (r->writes_to_me[p] && (r->algo->flags & OFCCL__ALGO_EAGER) && !ofccl__eager_from_in(r, p))
        w += (size_t)snprintf(what + w, len - w, "; eager data not here");
    else if (r->writes_to_me[p] && !(r->algo->flags & OFCCL__ALGO_EAGER) && r->from_cnt[p] < each)
        w += (size_t)snprintf(what + w, len - w, "; %u of %u data units missing",
                              each - r->from_cnt[p], each);
    if (also != NULL)
        w += (size_t)snprintf(what + w, len - w, "; %s", also);
    if (w > 0)
        memmove(what, what + 2, w - 1); /* drop the leading "; " */
}

/* Units rank p writes here in all: the algorithm's count, else an equal share. */
static unsigned units_from(const ofccl__req_t *r, int p)
{
    unsigned nwriters = 0;

    if (r->algo->units_from != NULL)
        return r->algo->units_from(r, p);
    for (int q = 0; q < r->comm->size; q++)
        nwriters += r->writes_to_me[q] != 0;
    return nwriters ? r->units_in / nwriters : 0;
}

bool ofccl__coll_owes(const ofccl__req_t *r, int p)
{
    if (r->i_write_to[p] && !r->peer_ready[p])
        return true;
    if (waits_on(r, p) != NULL)
        return true;
    if (!r->writes_to_me[p])
        return false;
    if (r->algo->flags & OFCCL__ALGO_EAGER)
        return !ofccl__eager_from_in(r, p);
    return r->from_cnt[p] < units_from(r, p);
}

/* Has p shown that it posted r (its descriptor, or the algorithm's word)? */
static bool reached(const ofccl__req_t *r, int p)
{
    if (r->algo->reached != NULL)
        return r->algo->reached(r, p);
    return !r->i_write_to[p] || r->peer_ready[p];
}

int ofccl__coll_first_owing(const ofccl__req_t *r)
{
    const ofccl_comm_t *comm = r->comm;
    char what[160];

    /* A rank that never reached the collective first: the others may be
     * waiting behind it. */
    for (int p = 0; p < comm->size; p++)
        if (p != comm->rank && !reached(r, p) && ofccl__coll_owes(r, p))
            return p;
    for (int p = 0; p < comm->size; p++) {
        unsigned each = units_from(r, p);
        if (p == comm->rank)
            continue;
        owed_by(r, p, each, what, sizeof(what));
        if (what[0] != '\0' && !(r->i_write_to[p] && r->peer_ready[p] && r->inflight[p] &&
                                 (!r->writes_to_me[p] || r->from_cnt[p] >= each)))
            return p;
    }
    return -1;
}

/* Name the ranks a stuck request still waits for, and what is missing from
 * each, for the timeout message: only ranks that really owe something. Ranks
 * in a row on one host that owe the same are named as a range ("ranks 4-7 on
 * host2 (...)"); what does not fit ends in "and N more ranks". */
void ofccl__coll_waiting_for(const ofccl__req_t *r, int only, char *buf, size_t len)
{
    const ofccl_comm_t *comm = r->comm;
    unsigned more = 0;
    size_t used = 0;
    char what[160], next[160];
    int first = -1, last = -1;

    buf[0] = '\0';
    for (int p = 0; p <= comm->size; p++) {
        next[0] = '\0';
        if (p < comm->size && p != comm->rank && (only < 0 || p == only))
            owed_by(r, p, units_from(r, p), next, sizeof(next));
        if (first >= 0 && next[0] != '\0' && last == p - 1 && comm->host_of != NULL &&
            comm->host_of[p] == comm->host_of[first] && strcmp(next, what) == 0) {
            last = p; /* the run goes on */
            continue;
        }
        if (first >= 0) { /* a run ended: name it, if it fits */
            const char *host = ofccl__comm_host(comm, first), *sep = used ? ", " : "";
            int n = first == last ? snprintf(buf + used, len - used, "%srank %d on %s (%s)", sep,
                                             first, host, what)
                                  : snprintf(buf + used, len - used, "%sranks %d-%d on %s (%s)",
                                             sep, first, last, host, what);
            if (n > 0 && used + (size_t)n + 32 < len)
                used += (size_t)n;
            else
                more += (unsigned)(last - first + 1), buf[used] = '\0';
        }
        first = next[0] != '\0' ? p : -1;
        last = p;
        memcpy(what, next, sizeof(what));
    }
    if (more > 0)
        snprintf(buf + used, len - used, "%sand %u more rank%s", used ? ", " : "", more,
                 more == 1 ? "" : "s");
    else if (used == 0)
        snprintf(buf, len, "no peer: this rank's own %s",
                 r->ops_out ? "operations to complete" : "progress");
}

/* The last OFCCL__HISTORY collectives, dumped when one times out. */
void ofccl__coll_history(const ofccl__req_t *r, int done)
{
    ofccl__hist_t *h = &r->comm->coll->hist[r->seq % OFCCL__HISTORY];

    if (!done)
        *h = (ofccl__hist_t){r->seq, r->coll, r->algo->name, r->block, 0, 0, r->start_ns, 0};
    else if (h->seq == r->seq) {
        h->status = r->status;
        h->done = 1;
        h->end_ns = ofccl__coarse_ns();
    }
}

void ofccl__coll_dump_history(const ofccl__req_t *stuck)
{
    const ofccl_comm_t *comm = stuck->comm;
    const ofccl__log_t *lg = &comm->ctx->log;
    uint64_t now = ofccl__coarse_ns();

    OFCCL__WARN(lg, OFCCL__SUB_COLL, "communicator %u: last collectives (oldest first):", comm->id);
    for (uint64_t k = 0; k < OFCCL__HISTORY; k++) {
        const ofccl__hist_t *h = &comm->coll->hist[(stuck->seq + 1 + k) % OFCCL__HISTORY];
        if (h->start_ns == 0 || h->seq > stuck->seq)
            continue;
        OFCCL__WARN(lg, OFCCL__SUB_COLL, "  #%llu %s (%s) %zu B/rank: %s after %.1f ms",
                    (unsigned long long)h->seq, ofccl__coll_name(h->coll), h->algo, h->block,
                    !h->done    ? "running"
                    : h->status ? ofccl_strerror(h->status)
                                : "done",
                    (double)((h->done ? h->end_ns : now) - h->start_ns) / 1e6);
    }
    for (int p = 0; p < comm->size; p++)
        if (stuck->i_write_to[p] || stuck->writes_to_me[p])
            OFCCL__WARN(lg, OFCCL__SUB_COLL,
                        "  #%llu peer %d: descriptor %s, %u units sent, %u in flight",
                        (unsigned long long)stuck->seq, p,
                        !stuck->i_write_to[p]  ? "not needed"
                        : stuck->peer_ready[p] ? "received"
                                               : "MISSING",
                        stuck->sent[p], stuck->inflight[p]);
    OFCCL__WARN(lg, OFCCL__SUB_COLL, "  #%llu: %llu of %u units arrived, %u chunks reduced",
                (unsigned long long)stuck->seq, (unsigned long long)stuck->arrived, stuck->units_in,
                stuck->reduced);
}
