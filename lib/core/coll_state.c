/*
 * A request's failure and name, as the engine's files and the algorithms
 * report them: below every file of the engine (it calls only the
 * communicator's state), so descriptors, writes, eager slots, reports and
 * traces all fail and name requests the same way.
 */
#include <stdarg.h>
#include <stdio.h>

#include "engine_impl.h"
#include "util.h"

const char *ofccl__coll_name(int coll)
{
    static const char *const names[] = {"?", "all-gather", "reduce-scatter", "broadcast", "push"};
    return names[coll >= 1 && coll <= OFCCL__PUSH ? coll : 0];
}

int ofccl__coll_fail(ofccl__req_t *r, int code, const char *fmt, ...)
{
    char msg[OFCCL__ERRMSG_LEN - 96];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->status == 0)
        r->status = code;
    /* The failure is this collective's: the ones before it run on. */
    return ofccl__comm_fail_at(r->comm, ofccl__pos_coll(r->seq), code, "%s #%llu (%s): %s",
                               ofccl__coll_name(r->coll), (unsigned long long)r->seq,
                               r->algo ? r->algo->name : "?", msg);
}
