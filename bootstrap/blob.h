/*
 * Versioned blobs exchanged through the bootstrap. Everything read back is
 * untrusted: the decoder checks magic, version, kind, rank, length and CRC, and
 * names the rank a bad blob came from.
 *
 * Wire format (little-endian): u32 magic 'OFCB', u16 version, u16 kind,
 * u32 rank, u32 payload length, u32 crc32(payload), payload bytes.
 */
#ifndef OFCCL_BOOTSTRAP_BLOB_H
#define OFCCL_BOOTSTRAP_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define OFCCL__BLOB_MAGIC 0x4243464Fu /* "OFCB" in memory order */
#define OFCCL__BLOB_VERSION 3
#define OFCCL__BLOB_HDR 20
#define OFCCL__BLOB_MAX_PAYLOAD 4096

enum ofccl__blob_kind {
    OFCCL__BLOB_COMM = 1,   /* communicator setup: endpoint name + control region */
    OFCCL__BLOB_REGION = 2, /* a registered region's remote key */
    OFCCL__BLOB_TEST = 99,
};

/* Encode into out[cap]; returns the total length, or 0 if it does not fit or
 * len > OFCCL__BLOB_MAX_PAYLOAD. */
size_t ofccl__blob_encode(void *out, size_t cap, uint16_t kind, uint32_t rank, const void *payload,
                          size_t len);
/* Validate blob in[inlen] claimed to come from `from_rank` and of `kind`; on
 * success point *payload into `in` and set *len. Fails with OFCCL_ERR_CORRUPT
 * (or OFCCL_ERR_MISMATCH for a version mismatch) naming from_rank. */
int ofccl__blob_decode(const void *in, size_t inlen, uint16_t kind, uint32_t from_rank,
                       const void **payload, size_t *len, ofccl__err_t *e);

#endif
