/* Windows: a region registered on every rank with its keys exchanged once,
 * so later operations address peers by offset with no further exchange. */
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "core.h"
#include "util.h"

#define RKEY_BYTES 24

int ofccl__win_create(ofccl_comm_t *comm, void *addr, size_t len, unsigned access,
                      ofccl__win_t **out)
{
    const size_t slot = OFCCL__BLOB_HDR + RKEY_BYTES;
    uint8_t mine[RKEY_BYTES], blob[OFCCL__BLOB_HDR + RKEY_BYTES], *all = NULL;
    size_t *lens = NULL, blen;
    ofccl__win_t *win;
    int rc;

    if ((rc = ofccl__comm_check(comm, "window")) != 0)
        return rc;
    win = calloc(1, sizeof(*win));
    if (win == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "window: no memory");
    win->comm = comm;
    win->addr = addr;
    win->len = len;
    rc = ofccl__mr_reg(comm->ep, addr, len, access, &win->mr, &comm->err);
    if (rc) {
        rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
        goto err_free;
    }
    ofccl__put_le64(mine, win->mr->base);
    ofccl__put_le64(mine + 8, win->mr->key);
    ofccl__put_le64(mine + 16, win->mr->len);
    blen = ofccl__blob_encode(blob, sizeof(blob), OFCCL__BLOB_REGION, (uint32_t)comm->rank, mine,
                              sizeof(mine));
    all = malloc(slot * (size_t)comm->size);
    lens = calloc((size_t)comm->size, sizeof(*lens));
    win->peers = calloc((size_t)comm->size, sizeof(*win->peers));
    if (!all || !lens || !win->peers) {
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "window: no memory");
        goto err_dereg;
    }
    rc = ofccl__boot_allgather(comm->ctx->boot, blob, blen, all, slot, lens, &comm->err);
    if (rc) {
        rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
        goto err_dereg;
    }
    for (int r = 0; r < comm->size; r++) {
        const void *payload;
        size_t plen;

        rc = ofccl__blob_decode(all + slot * (size_t)r, lens[r], OFCCL__BLOB_REGION, (uint32_t)r,
                                &payload, &plen, &comm->err);
        if (rc == 0 && plen != RKEY_BYTES)
            rc = ofccl__fail(NULL, 0, &comm->err, OFCCL_ERR_CORRUPT,
                             "window: rank %d sent a %zu-byte key record, %d expected", r, plen,
                             RKEY_BYTES);
        if (rc) {
            rc = ofccl__comm_fail(comm, rc, "%s", comm->err.msg);
            goto err_dereg;
        }
        win->peers[r] =
            (ofccl__rkey_t){ofccl__get_le64(payload), ofccl__get_le64((const uint8_t *)payload + 8),
                            ofccl__get_le64((const uint8_t *)payload + 16)};
    }
    free(all);
    free(lens);
    comm->nwins++;
    *out = win;
    return 0;

err_dereg:
    ofccl__mr_dereg(win->mr);
err_free:
    free(all);
    free(lens);
    free(win->peers);
    free(win);
    return rc;
}

int ofccl__win_destroy(ofccl__win_t *win)
{
    if (win == NULL)
        return OFCCL_ERR_INVALID_ARG;
    ofccl__mr_dereg(win->mr);
    win->comm->nwins--;
    free(win->peers);
    free(win);
    return 0;
}
