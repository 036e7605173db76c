/* Fuzz target: what peers write into our control region — signal words and
 * collective descriptors. Input: a 64-byte descriptor, then 8 bytes of the
 * expectation (seq, count), then signal words. */
#include <stdint.h>
#include <string.h>

#include "coll.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t d[OFCCL__DESC_WORDS], seq = 0;
    char why[256];

    if (size < sizeof(d) + 8)
        return 0;
    memcpy(d, data, sizeof(d));
    memcpy(&seq, data + sizeof(d), 8);
    for (int from = 0; from < 3; from++) {
        ofccl__desc_expect_t x = {seq & 0xffff,         seq >> 16, seq & 0xfff,
                                  (seq >> 24) & 0xffff, from,      3};
        int rc = ofccl__desc_check(d, &x, why, sizeof(why));
        /* Accepted means: addressed from `from`, this collective, region big enough. */
        if (rc == 0 &&
            (d[7] != (uint64_t)from || d[0] != x.seq || d[6] > d[5] || d[5] - d[6] < x.need))
            __builtin_trap();
        if (rc != 0 && rc != OFCCL_ERR_MISMATCH && rc != OFCCL_ERR_CORRUPT)
            __builtin_trap();
    }
    for (size_t off = sizeof(d) + 8; off + 8 <= size; off += 8) {
        uint64_t w;
        unsigned kind;
        uint32_t id, payload;
        memcpy(&w, data + off, 8);
        if (ofccl__sig_decode(w, &kind, &id, &payload) == 0 &&
            (kind > 15 || id > 255 || payload > OFCCL__SIG_PAYLOAD_MASK))
            __builtin_trap();
    }
    return 0;
}
