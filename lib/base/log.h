/* Logging: one logger per context (no process-global state), lines prefixed
 * host:pid:rank, filtered by level and subsystem. */
#ifndef OFCCL_BASE_LOG_H
#define OFCCL_BASE_LOG_H

#include <stdarg.h>

enum ofccl__log_level {
    OFCCL__LOG_ERROR = 0, /* always printed */
    OFCCL__LOG_WARN = 1,
    OFCCL__LOG_INFO = 2,
    OFCCL__LOG_DEBUG = 3,
    OFCCL__LOG_TRACE = 4,
};

enum ofccl__log_subsys {
    OFCCL__SUB_CORE = 1u << 0,
    OFCCL__SUB_COLL = 1u << 1,
    OFCCL__SUB_PROV = 1u << 2,
    OFCCL__SUB_BOOT = 1u << 3,
    OFCCL__SUB_MEM = 1u << 4,
    OFCCL__SUB_ALL = 0x1f,
};

typedef struct ofccl__log {
    int level;       /* enum ofccl__log_level */
    unsigned subsys; /* mask of enum ofccl__log_subsys */
    char host[64];
    int pid;
    int rank; /* -1 until known */
} ofccl__log_t;

/* A logger that prints warnings for every subsystem; rank unknown. */
void ofccl__log_init(ofccl__log_t *lg);
int ofccl__log_enabled(const ofccl__log_t *lg, int level, unsigned subsys);
void ofccl__log(const ofccl__log_t *lg, int level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *ofccl__log_subsys_name(unsigned subsys);

#define OFCCL__WARN(lg, sub, ...) ofccl__log((lg), OFCCL__LOG_WARN, (sub), __VA_ARGS__)
#define OFCCL__INFO(lg, sub, ...) ofccl__log((lg), OFCCL__LOG_INFO, (sub), __VA_ARGS__)
#define OFCCL__DEBUG(lg, sub, ...) ofccl__log((lg), OFCCL__LOG_DEBUG, (sub), __VA_ARGS__)
#define OFCCL__TRACE(lg, sub, ...) ofccl__log((lg), OFCCL__LOG_TRACE, (sub), __VA_ARGS__)

#endif
