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

void ofccl__boot_reduce_into(uint64_t *acc, const uint64_t *in, int n, const uint8_t *ops)
{
    for (int k = 0; k < n; k++)
        acc[k] = ops[k] == OFCCL__BOOT_MIN ? OFCCL__MIN(acc[k], in[k]) : OFCCL__MAX(acc[k], in[k]);
}

int ofccl__boot_allreduce(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n,
                          const uint8_t *ops, ofccl__err_t *e)
{
    size_t slot = 8 * (size_t)n, *lens = NULL;
    uint8_t mine[8 * OFCCL__BOOT_REDUCE_MAX], *all = NULL;
    int rc;

    if (n < 1 || n > OFCCL__BOOT_REDUCE_MAX)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allreduce of %d words (1..%d)", n, OFCCL__BOOT_REDUCE_MAX);
    if (b->ops->flags & OFCCL__BOOT_F_REDUCE)
        return b->ops->allreduce(b, in, out, n, ops, e);
    all = malloc((size_t)b->size * slot);
    lens = calloc((size_t)b->size, sizeof(*lens));
    for (int k = 0; k < n; k++)
        ofccl__put_le64(mine + 8 * k, in[k]);
    rc = all && lens ? ofccl__boot_allgather(b, mine, slot, all, slot, lens, e)
                     : ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                                   "out of memory for an allreduce over %d ranks", b->size);
    for (int r = 0; r < b->size && rc == 0; r++) {
        uint64_t w[OFCCL__BOOT_REDUCE_MAX];
        if (lens[r] != slot) {
            rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                             "rank %d contributed %zu bytes to an allreduce of %zu", r, lens[r],
                             slot);
            break;
        }
        for (int k = 0; k < n; k++)
            w[k] = ofccl__get_le64(all + (size_t)r * slot + 8 * (size_t)k);
        if (r == 0)
            memcpy(out, w, 8 * (size_t)n);
        else
            ofccl__boot_reduce_into(out, w, n, ops);
    }
    free(all);
    free(lens);
    return rc;
}

void ofccl__boot_pub_free(ofccl__boot_pub_t *pub)
{
    if (pub == NULL)
        return;
    free(pub->table);
    free(pub->lens);
    free(pub);
}
