/*
 * Versioned blobs: the header that every piece of data exchanged through the
 * bootstrap carries, so a rank can tell a peer from another ofccl version, a
 * stale key or plain garbage apart before it trusts a single payload byte.
 */
#include "blob.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/*
 * The decoder has no logger (it is called on behalf of whoever received the
 * blob), so it only records the error; the caller logs e->msg once, with its
 * own host:pid:rank prefix.
 */
static int blob_fail(ofccl__err_t *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int blob_fail(ofccl__err_t *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (e != NULL) {
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

size_t ofccl__blob_encode(void *out, size_t cap, uint16_t kind, uint32_t rank, const void *payload,
                          size_t len)
{
    uint8_t *p = out;

    if (out == NULL || len > OFCCL__BLOB_MAX_PAYLOAD || cap < OFCCL__BLOB_HDR ||
        cap - OFCCL__BLOB_HDR < len || (len > 0 && payload == NULL))
        return 0;
    ofccl__put_le32(p, OFCCL__BLOB_MAGIC);
    ofccl__put_le16(p + 4, OFCCL__BLOB_VERSION);
    ofccl__put_le16(p + 6, kind);
    ofccl__put_le32(p + 8, rank);
    ofccl__put_le32(p + 12, (uint32_t)len);
    ofccl__put_le32(p + 16, ofccl__crc32(0, payload, len));
    if (len > 0)
        memcpy(p + OFCCL__BLOB_HDR, payload, len);
    return OFCCL__BLOB_HDR + len;
}

int ofccl__blob_decode(const void *in, size_t inlen, uint16_t kind, uint32_t from_rank,
                       const void **payload, size_t *len, ofccl__err_t *e)
{
    const uint8_t *p = in;
    uint32_t magic, rank, plen, crc, want;
    uint16_t version, got_kind;

    if (in == NULL || inlen < OFCCL__BLOB_HDR)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u is %zu bytes, shorter than the %d-byte header "
                         "(truncated or not an ofccl blob)",
                         from_rank, in == NULL ? (size_t)0 : inlen, OFCCL__BLOB_HDR);
    magic = ofccl__get_le32(p);
    version = ofccl__get_le16(p + 4);
    got_kind = ofccl__get_le16(p + 6);
    rank = ofccl__get_le32(p + 8);
    plen = ofccl__get_le32(p + 12);
    crc = ofccl__get_le32(p + 16);
    if (magic != OFCCL__BLOB_MAGIC)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u has magic 0x%08x, expected 0x%08x: not an ofccl blob",
                         from_rank, magic, OFCCL__BLOB_MAGIC);
    /* Checked before anything else in the header: a newer version may lay
     * out the rest differently, and "mixed versions" is the useful message. */
    if (version != OFCCL__BLOB_VERSION)
        return blob_fail(e, OFCCL_ERR_MISMATCH,
                         "rank %u runs blob version %u, this rank %u: mixed ofccl versions in "
                         "one job",
                         from_rank, version, OFCCL__BLOB_VERSION);
    if (got_kind != kind)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u is of kind %u, expected kind %u (exchanges out of "
                         "order across ranks?)",
                         from_rank, got_kind, kind);
    if (rank != from_rank)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u claims to come from rank %u (stale or misrouted data)",
                         from_rank, rank);
    if (plen > OFCCL__BLOB_MAX_PAYLOAD)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u declares a %u-byte payload, more than the %d-byte "
                         "maximum",
                         from_rank, plen, OFCCL__BLOB_MAX_PAYLOAD);
    if (plen > inlen - OFCCL__BLOB_HDR)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u declares a %u-byte payload but only %zu bytes follow "
                         "the header (truncated)",
                         from_rank, plen, inlen - OFCCL__BLOB_HDR);
    want = ofccl__crc32(0, p + OFCCL__BLOB_HDR, plen);
    if (want != crc)
        return blob_fail(e, OFCCL_ERR_CORRUPT,
                         "blob from rank %u fails its checksum (crc32 0x%08x, header says "
                         "0x%08x): corrupted in transit",
                         from_rank, want, crc);
    *payload = p + OFCCL__BLOB_HDR;
    *len = plen;
    return 0;
}
