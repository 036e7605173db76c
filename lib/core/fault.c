/* OFCCL_FAULT: the fault-injection spec, parsed once per context. Builds
 * without -Dfault_injection=true refuse a non-empty spec rather than ignore it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "util.h"

static int bad(const char *item, ofccl__err_t *e)
{
    return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                       "OFCCL_FAULT: cannot parse '%s': allowed a comma-separated list of "
                       "eagain=A-B, mrfail=N, cqerr=N, kill=N, each optionally @rank",
                       item);
}

int ofccl__fault_parse(const char *spec, int rank, ofccl__fault_t *f, unsigned *kill_at,
                       ofccl__err_t *e)
{
    char buf[256], *save = NULL;

    memset(f, 0, sizeof(*f));
    *kill_at = 0;
    if (spec == NULL || spec[0] == '\0')
        return 0;
#ifndef OFCCL_FAULT_INJECTION
    return ofccl__fail(NULL, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                       "OFCCL_FAULT=%s, but this build has no fault injection (configure with "
                       "-Dfault_injection=true)",
                       spec);
#endif
    ofccl__strlcpy(buf, spec, sizeof(buf));
    for (char *item = strtok_r(buf, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        char *at = strchr(item, '@'), *eq = strchr(item, '='), *end;
        unsigned long a, b;

        if (eq == NULL)
            return bad(item, e);
        if (at != NULL) {
            long who = strtol(at + 1, &end, 10);
            if (*end != '\0' || end == at + 1)
                return bad(item, e);
            *at = '\0';
            if (who != rank)
                continue; /* meant for another rank */
        }
        *eq = '\0';
        a = strtoul(eq + 1, &end, 10);
        b = a;
        if (*end == '-')
            b = strtoul(end + 1, &end, 10);
        if (*end != '\0' || a == 0 || b < a || b > 1000000000ul)
            return bad(item, e);
        if (strcmp(item, "eagain") == 0) {
            f->eagain_from = (unsigned)a;
            f->eagain_to = (unsigned)b;
        } else if (strcmp(item, "mrfail") == 0 && a == b) {
            f->mr_fail_at = (unsigned)a;
        } else if (strcmp(item, "cqerr") == 0 && a == b) {
            f->cq_error_at = (unsigned)a;
        } else if (strcmp(item, "kill") == 0 && a == b) {
            *kill_at = (unsigned)a;
        } else {
            return bad(item, e);
        }
    }
    return 0;
}
