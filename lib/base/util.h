/* Small helpers shared by every layer. */
#ifndef OFCCL_BASE_UTIL_H
#define OFCCL_BASE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define OFCCL__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define OFCCL__MIN(a, b) ((a) < (b) ? (a) : (b))
#define OFCCL__MAX(a, b) ((a) > (b) ? (a) : (b))

/* CRC-32 (IEEE 802.3 polynomial, reflected), `crc` = 0 to start. */
uint32_t ofccl__crc32(uint32_t crc, const void *buf, size_t len);
/* Fill `buf` from getrandom(2). Returns 0 or OFCCL_ERR_INTERNAL. */
int ofccl__random_bytes(void *buf, size_t len);
/* Monotonic clock in nanoseconds. */
uint64_t ofccl__now_ns(void);
/* Safe string copy: always NUL-terminates, returns strlen(src). */
size_t ofccl__strlcpy(char *dst, const char *src, size_t size);

#endif
