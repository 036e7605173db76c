#include "log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

void ofccl__log_init(ofccl__log_t *lg)
{
    memset(lg, 0, sizeof(*lg));
    lg->level = OFCCL__LOG_WARN;
    lg->subsys = OFCCL__SUB_ALL;
    lg->pid = (int)getpid();
    lg->rank = -1;
    if (gethostname(lg->host, sizeof(lg->host) - 1) != 0)
        strcpy(lg->host, "?");
    lg->host[sizeof(lg->host) - 1] = '\0';
}

int ofccl__log_enabled(const ofccl__log_t *lg, int level, unsigned subsys)
{
    if (lg == NULL)
        return level <= OFCCL__LOG_WARN;
    if (level > lg->level)
        return 0;
    return level == OFCCL__LOG_ERROR || (lg->subsys & subsys) != 0;
}

const char *ofccl__log_subsys_name(unsigned subsys)
{
    switch (subsys) {
    case OFCCL__SUB_CORE:
        return "core";
    case OFCCL__SUB_COLL:
        return "coll";
    case OFCCL__SUB_PROV:
        return "prov";
    case OFCCL__SUB_BOOT:
        return "boot";
    case OFCCL__SUB_MEM:
        return "mem";
    default:
        return "?";
    }
}

void ofccl__log(const ofccl__log_t *lg, int level, unsigned subsys, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    if (!ofccl__log_enabled(lg, level, subsys))
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One fprintf per line so concurrent ranks and threads do not interleave mid-line. */
    if (lg != NULL && lg->rank >= 0)
        fprintf(stderr, "%s:%d:%d ofccl %s %s: %s\n", lg->host, lg->pid, lg->rank,
                level_names[level], ofccl__log_subsys_name(subsys), line);
    else
        fprintf(stderr, "%s:%d:? ofccl %s %s: %s\n", lg ? lg->host : "?",
                lg ? lg->pid : (int)getpid(), level_names[level], ofccl__log_subsys_name(subsys),
                line);
}
