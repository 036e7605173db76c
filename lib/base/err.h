/* Error messages: a fixed buffer filled where an error is decided, logged once
 * there, and handed up unchanged to the object's last-error message. */
#ifndef OFCCL_BASE_ERR_H
#define OFCCL_BASE_ERR_H

#include "log.h"
#include "ofccl.h"

#define OFCCL__ERRMSG_LEN 1024

typedef struct ofccl__err {
    int code;
    char msg[OFCCL__ERRMSG_LEN];
} ofccl__err_t;

/* Record `code` and the formatted message in `e` (if not NULL), log it at warn
 * level under `subsys` (only if `lg` is not NULL), and return `code`. */
int ofccl__fail(const ofccl__log_t *lg, unsigned subsys, ofccl__err_t *e, int code, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
void ofccl__err_clear(ofccl__err_t *e);
/* Copy a message into a caller's buffer, truncating safely. */
void ofccl__err_copy(char *dst, size_t dstlen, const char *src);

#endif
