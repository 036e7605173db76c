/*
 * Records published once and read one at a time (a communicator's setup
 * records under OFCCL_BOOT_EXCHANGE=lazy). Where the backend serves single
 * records on demand (PMIx direct modex: the creation fence collects nothing
 * and a peer's record is fetched from the launcher on first use), only the
 * tag is kept here; elsewhere the records are all-gathered at once and read
 * from the table.
 */
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "util.h"

int ofccl__boot_publish(ofccl__boot_t *b, bool lazy, const void *in, size_t len, size_t slot,
                        ofccl__boot_pub_t **out, ofccl__err_t *e)
{
    ofccl__boot_pub_t *pub = calloc(1, sizeof(*pub));
    int rc;

    *out = NULL;
    if (pub == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory publishing a record");
    pub->slot = slot;
    pub->lazy = lazy && ofccl__boot_can_get(b);
    if (pub->lazy) {
        rc = b->ops->publish(b, in, len, slot, &pub->tag, e);
    } else {
        pub->table = malloc((size_t)b->size * slot);
        pub->lens = calloc((size_t)b->size, sizeof(*pub->lens));
        rc = pub->table && pub->lens
                 ? ofccl__boot_allgather(b, in, len, pub->table, slot, pub->lens, e)
                 : ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                               "out of memory for %d records of %zu bytes", b->size, slot);
    }
    if (rc) {
        ofccl__boot_pub_free(pub);
        return rc;
    }
    *out = pub;
    return 0;
}

int ofccl__boot_get(ofccl__boot_t *b, ofccl__boot_pub_t *pub, int rank, void *out, size_t cap,
                    size_t *len, ofccl__err_t *e)
{
    if (rank < 0 || rank >= b->size)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap get: no rank %d in a job of %d", rank, b->size);
    pub->gets++;
    if (pub->lazy)
        return b->ops->get(b, pub->tag, rank, out, cap, len, e);
    *len = OFCCL__MIN(pub->lens[rank], cap);
    memcpy(out, pub->table + (size_t)rank * pub->slot, *len);
    return 0;
}

void ofccl__boot_pub_free(ofccl__boot_pub_t *pub)
{
    if (pub == NULL)
        return;
    free(pub->table);
    free(pub->lens);
    free(pub);
}
