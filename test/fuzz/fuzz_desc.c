/* Fuzz target: what peers write into our control region — signal words and
 * collective descriptors. Input: a descriptor (OFCCL__DESC_WORDS words), then
 * 8 bytes of the expectation (seq, fingerprint, count, need, bucket layout),
 * then signal words. */
#include <stdint.h>
#include <string.h>

#include "engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t d[OFCCL__DESC_WORDS], seq = 0;
    char why[256];

    if (size < sizeof(d) + 8)
        return 0;
    memcpy(d, data, sizeof(d));
    memcpy(&seq, data + sizeof(d), 8);
    for (int from = 0; from < 3; from++) {
        ofccl__desc_expect_t x = {.seq = seq & 0xffff,
                                  .fingerprint = seq >> 16,
                                  .count = seq & 0xfff,
                                  .need = (seq >> 24) & 0xffff,
                                  .from = from,
                                  .me = 3,
                                  .bucket = (int)((seq >> 40) & 1),
                                  .ntensors = (seq >> 41) & 0xff,
                                  .layout_hash = seq >> 49};
        int field = -1;
        int rc = ofccl__desc_check(d, &x, why, sizeof(why), &field);
        /* Accepted means: addressed from `from`, this collective, region big enough,
         * and for a bucket the same number of tensors and layout. */
        if (rc == 0 &&
            (d[7] != (uint64_t)from || d[0] != x.seq || d[6] > d[5] || d[5] - d[6] < x.need ||
             (x.bucket && (d[10] != x.ntensors || d[9] != x.layout_hash))))
            __builtin_trap();
        if (rc == OFCCL__LAYOUT_DIFFERS && (!x.bucket || d[9] == x.layout_hash))
            __builtin_trap();
        if (rc != 0 && rc != OFCCL_ERR_MISMATCH && rc != OFCCL_ERR_CORRUPT &&
            rc != OFCCL__LAYOUT_DIFFERS)
            __builtin_trap();
        /* A mismatch names the field that differs (a failure notice carries it); nothing
         * else does. */
        if ((rc == OFCCL_ERR_MISMATCH || rc == OFCCL__LAYOUT_DIFFERS) !=
            (field > OFCCL__FIELD_NONE && field < OFCCL__FIELDS))
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
