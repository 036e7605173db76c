/* Small helpers shared by every layer. */
#ifndef OFCCL_BASE_UTIL_H
#define OFCCL_BASE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define OFCCL__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define OFCCL__MIN(a, b) ((a) < (b) ? (a) : (b))
#define OFCCL__MAX(a, b) ((a) > (b) ? (a) : (b))

/* Little-endian encoding of everything ofccl puts on the wire. */
static inline void ofccl__put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void ofccl__put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ofccl__put_le64(uint8_t *p, uint64_t v)
{
    ofccl__put_le32(p, (uint32_t)v);
    ofccl__put_le32(p + 4, (uint32_t)(v >> 32));
}
static inline uint16_t ofccl__get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t ofccl__get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t ofccl__get_le64(const uint8_t *p)
{
    return (uint64_t)ofccl__get_le32(p) | (uint64_t)ofccl__get_le32(p + 4) << 32;
}

/* FNV-1a, 64 bits: hash `h` (OFCCL__FNV_BASIS to start) over `n` more bytes,
 * and the hash of a string (NULL: of nothing), so that equal host
 * identities give equal hashes wherever they are compared. */
#define OFCCL__FNV_BASIS 0xcbf29ce484222325ull
#define OFCCL__FNV_PRIME 0x100000001b3ull
static inline uint64_t ofccl__fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * OFCCL__FNV_PRIME;
    return h;
}

static inline uint64_t ofccl__hash_str(const char *s)
{
    uint64_t h = OFCCL__FNV_BASIS;

    for (; s != NULL && *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * OFCCL__FNV_PRIME;
    return h;
}

/* CRC-32 (IEEE 802.3 polynomial, reflected), `crc` = 0 to start. */
uint32_t ofccl__crc32(uint32_t crc, const void *buf, size_t len);
/* Fill `buf` from getrandom(2). Returns 0 or OFCCL_ERR_INTERNAL. */
int ofccl__random_bytes(void *buf, size_t len);
/* Monotonic clock in nanoseconds. */
uint64_t ofccl__now_ns(void);
/* The same clock at tick resolution (a few ms), for deadlines: it costs a
 * memory read, where ofccl__now_ns costs a timer read on every progress pass. */
uint64_t ofccl__coarse_ns(void);
/* Safe string copy: always NUL-terminates, returns strlen(src). */
size_t ofccl__strlcpy(char *dst, const char *src, size_t size);

#endif
