/* Fuzz target: bootstrap blob decoding and the communicator setup record a
 * blob carries. Input: 1 byte of claimed rank, then the blob. */
#include <stddef.h>
#include <stdint.h>

#include "blob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const void *payload;
    size_t len;
    ofccl__err_t e;

    if (size < 1)
        return 0;
    for (uint16_t kind = OFCCL__BLOB_COMM; kind <= OFCCL__BLOB_REGION; kind++)
        if (ofccl__blob_decode(data + 1, size - 1, kind, data[0], &payload, &len, &e) == 0) {
            /* Accepted: the payload must lie inside the input. */
            if ((const uint8_t *)payload < data + 1 || (const uint8_t *)payload + len > data + size)
                __builtin_trap();
        }
    return 0;
}
