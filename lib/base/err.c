#include "err.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

int ofccl__fail(const ofccl__log_t *lg, unsigned subsys, ofccl__err_t *e, int code, const char *fmt,
                ...)
{
    char msg[OFCCL__ERRMSG_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (e != NULL) {
        e->code = code;
        memcpy(e->msg, msg, sizeof(msg));
    }
    if (lg != NULL) /* NULL: the caller logs, or only records (e.g. copying a message up) */
        ofccl__log(lg, OFCCL__LOG_WARN, subsys, "%s (%s)", msg, ofccl_strerror(code));
    return code;
}

void ofccl__err_clear(ofccl__err_t *e)
{
    e->code = 0;
    e->msg[0] = '\0';
}

void ofccl__err_copy(char *dst, size_t dstlen, const char *src)
{
    if (dst != NULL && dstlen > 0)
        ofccl__strlcpy(dst, src != NULL ? src : "", dstlen);
}

const char *ofccl_strerror(int code)
{
    switch (code) {
#define X_STR(name, num, text)                                                                     \
    case (num):                                                                                    \
        return text;
        OFCCL_ERROR_LIST(X_STR)
#undef X_STR
    default:
        return "unknown error code";
    }
}
