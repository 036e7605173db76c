/* Blob encode/decode: round trips, every kind of corruption named with its
 * rank, and a seeded mutation loop over a valid blob. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "cu.h"
#include "util.h"

#define CAP (OFCCL__BLOB_HDR + OFCCL__BLOB_MAX_PAYLOAD)

static uint8_t buf[CAP + 16];
static uint8_t payload[OFCCL__BLOB_MAX_PAYLOAD + 1];

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static void round_trip(uint16_t kind, uint32_t rank, size_t len)
{
    const void *out = NULL;
    size_t olen = 12345, n;
    ofccl__err_t e;

    fill(payload, len, rank + kind);
    n = ofccl__blob_encode(buf, sizeof(buf), kind, rank, payload, len);
    CU_ASSERT_EQUAL(n, OFCCL__BLOB_HDR + len);
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__blob_decode(buf, n, kind, rank, &out, &olen, &e), 0);
    CU_ASSERT_EQUAL(olen, len);
    CU_ASSERT_PTR_EQUAL(out, buf + OFCCL__BLOB_HDR);
    if (len > 0 && olen == len)
        CU_ASSERT_EQUAL(memcmp(out, payload, len), 0);
}

static void test_round_trip(void)
{
    round_trip(OFCCL__BLOB_COMM, 0, 37);
    round_trip(OFCCL__BLOB_REGION, 7, 16);
    round_trip(OFCCL__BLOB_TEST, 1048575, 1);
    round_trip(OFCCL__BLOB_TEST, 3, 0);
    round_trip(OFCCL__BLOB_COMM, 2, OFCCL__BLOB_MAX_PAYLOAD);
}

static void test_encode_limits(void)
{
    fill(payload, sizeof(payload), 1);
    CU_ASSERT_EQUAL(ofccl__blob_encode(buf, OFCCL__BLOB_HDR + 9, 1, 0, payload, 10), 0);
    CU_ASSERT_EQUAL(ofccl__blob_encode(buf, OFCCL__BLOB_HDR - 1, 1, 0, payload, 0), 0);
    CU_ASSERT_EQUAL(ofccl__blob_encode(buf, OFCCL__BLOB_HDR, 1, 0, payload, 0), OFCCL__BLOB_HDR);
    CU_ASSERT_EQUAL(ofccl__blob_encode(buf, OFCCL__BLOB_HDR + 10, 1, 0, payload, 10),
                    OFCCL__BLOB_HDR + 10);
    CU_ASSERT_EQUAL(
        ofccl__blob_encode(buf, sizeof(buf), 1, 0, payload, OFCCL__BLOB_MAX_PAYLOAD + 1), 0);
    CU_ASSERT_EQUAL(ofccl__blob_encode(NULL, sizeof(buf), 1, 0, payload, 4), 0);
}

/* Decode `in[len]` as a TEST blob from rank 5 and expect `code` and a message
 * naming rank 5 plus `word`. */
static void expect(const void *in, size_t len, int code, const char *word)
{
    const void *out = NULL;
    size_t olen = 999;
    ofccl__err_t e;
    int rc;

    ofccl__err_clear(&e);
    rc = ofccl__blob_decode(in, len, OFCCL__BLOB_TEST, 5, &out, &olen, &e);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(e.code, code);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "rank 5"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, word));
    CU_ASSERT_PTR_NULL(out); /* outputs untouched on failure */
    CU_ASSERT_EQUAL(olen, 999);
    if (rc != code || strstr(e.msg, "rank 5") == NULL || strstr(e.msg, word) == NULL)
        fprintf(stderr, "  got %d: %s\n", rc, e.msg);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static size_t valid(size_t len)
{
    fill(payload, len, 9);
    return ofccl__blob_encode(buf, sizeof(buf), OFCCL__BLOB_TEST, 5, payload, len);
}

static void test_corruptions(void)
{
    size_t n;

    n = valid(64);
    expect(buf, OFCCL__BLOB_HDR - 1, OFCCL_ERR_CORRUPT, "header");
    expect(buf, 0, OFCCL_ERR_CORRUPT, "header");
    expect(NULL, 0, OFCCL_ERR_CORRUPT, "header");

    n = valid(64);
    buf[0] ^= 0x01;
    expect(buf, n, OFCCL_ERR_CORRUPT, "magic");

    n = valid(64);
    buf[4] = OFCCL__BLOB_VERSION + 1; /* a newer library */
    expect(buf, n, OFCCL_ERR_MISMATCH, "mixed ofccl versions");
    CU_ASSERT_EQUAL(valid(64), n);
    buf[4] = OFCCL__BLOB_VERSION + 1;
    {
        ofccl__err_t e;
        const void *o;
        size_t l;
        char want[128];
        ofccl__blob_decode(buf, n, OFCCL__BLOB_TEST, 3, &o, &l, &e);
        snprintf(want, sizeof(want),
                 "rank 3 runs blob version %d, this rank %d: mixed ofccl versions in one job",
                 OFCCL__BLOB_VERSION + 1, OFCCL__BLOB_VERSION);
        CU_ASSERT_STRING_EQUAL(e.msg, want);
    }

    n = valid(64);
    buf[6] = OFCCL__BLOB_COMM;
    expect(buf, n, OFCCL_ERR_CORRUPT, "kind");

    n = valid(64);
    put32(buf + 8, 6); /* claims rank 6 */
    expect(buf, n, OFCCL_ERR_CORRUPT, "rank 6");

    n = valid(64);
    put32(buf + 12, OFCCL__BLOB_MAX_PAYLOAD + 1);
    expect(buf, sizeof(buf), OFCCL_ERR_CORRUPT, "maximum");

    n = valid(64);
    put32(buf + 12, 0xffffffffu);
    expect(buf, n, OFCCL_ERR_CORRUPT, "maximum");

    n = valid(64);
    expect(buf, n - 1, OFCCL_ERR_CORRUPT, "truncated");
    put32(buf + 12, 65);
    expect(buf, n, OFCCL_ERR_CORRUPT, "truncated");

    n = valid(64);
    buf[OFCCL__BLOB_HDR + 10] ^= 0x80;
    expect(buf, n, OFCCL_ERR_CORRUPT, "checksum");

    n = valid(64);
    buf[16] ^= 0xff;
    expect(buf, n, OFCCL_ERR_CORRUPT, "checksum");

    /* Zero-length payload: the CRC of nothing must still match. */
    n = valid(0);
    buf[16] ^= 1;
    expect(buf, n, OFCCL_ERR_CORRUPT, "checksum");
}

/* Every message names the rank the caller says the blob came from, even when
 * the blob itself lies about it. */
static void test_rank_in_every_message(void)
{
    static const uint32_t ranks[] = {0, 1, 17, 1048575};

    for (size_t i = 0; i < OFCCL__ARRAY_LEN(ranks); i++) {
        char want[32];
        ofccl__err_t e;
        const void *o;
        size_t l, n = ofccl__blob_encode(buf, sizeof(buf), OFCCL__BLOB_TEST, ranks[i], "x", 1);

        snprintf(want, sizeof(want), "rank %u", ranks[i]);
        buf[OFCCL__BLOB_HDR] = 'y';
        CU_ASSERT_EQUAL(ofccl__blob_decode(buf, n, OFCCL__BLOB_TEST, ranks[i], &o, &l, &e),
                        OFCCL_ERR_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static void test_fuzz(void)
{
    static uint8_t orig[OFCCL__BLOB_HDR + 200], m[OFCCL__BLOB_HDR + 200 + 8];
    size_t n;
    unsigned accepted = 0, rejected = 0, bad = 0;

    fill(payload, 200, 3);
    n = ofccl__blob_encode(orig, sizeof(orig), OFCCL__BLOB_TEST, 5, payload, 200);
    CU_ASSERT_EQUAL_FATAL(n, sizeof(orig));
    for (int it = 0; it < 10000; it++) {
        size_t len = n;
        const void *o = NULL;
        size_t l = 0;
        ofccl__err_t e;
        int rc, flips = 1 + (int)(rnd() % 4);

        memcpy(m, orig, n);
        for (int k = 0; k < flips; k++) {
            switch (rnd() % 4) {
            case 0:
                m[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1:
                m[rnd() % OFCCL__BLOB_HDR] = (uint8_t)rnd();
                break;
            case 2:
                len = rnd() % (n + 8);
                break; /* truncate, or trailing bytes */
            default:
                m[rnd() % n] = (uint8_t)rnd();
                break;
            }
        }
        rc = ofccl__blob_decode(m, len, OFCCL__BLOB_TEST, 5, &o, &l, &e);
        if (rc == 0) {
            accepted++;
            /* Accepted: it must lie inside the input and, barring a CRC
             * collision, be the original payload. */
            if ((const uint8_t *)o != m + OFCCL__BLOB_HDR || l > len - OFCCL__BLOB_HDR ||
                l != 200 || memcmp(o, payload, 200) != 0)
                bad++;
        } else {
            rejected++;
            if ((rc != OFCCL_ERR_CORRUPT && rc != OFCCL_ERR_MISMATCH) ||
                strstr(e.msg, "rank 5") == NULL)
                bad++;
        }
    }
    printf("\n  fuzz: %u accepted (unchanged payload), %u rejected\n", accepted, rejected);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rejected > 9000);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"round trip", test_round_trip},
        {"encode limits", test_encode_limits},
        {"corruptions", test_corruptions},
        {"rank named", test_rank_in_every_message},
        {"fuzz", test_fuzz},
        {NULL, NULL},
    };
    return cu_run("blob", tests);
}
