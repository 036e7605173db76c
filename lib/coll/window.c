/* Windows: a region registered on every rank of a communicator, its keys
 * exchanged once by an all-gather over the communicator's own fabric (the
 * bootstrap serves only creation), so later operations address peers by
 * offset with no further exchange. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"

/* {0 or the rank's registration error, base, key, len}, little-endian. */
#define KEY_RECORD 32

int ofccl__win_create(ofccl_comm_t *comm, void *addr, size_t len, unsigned access,
                      ofccl__win_t **out)
{
    uint8_t mine[KEY_RECORD] = {0}, *all = NULL;
    ofccl__win_t *win;
    ofccl__err_t e = {0};
    int rc, mine_rc;

    if ((rc = ofccl__comm_check(comm, "window")) != 0)
        return rc;
    win = calloc(1, sizeof(*win));
    all = malloc(KEY_RECORD * (size_t)comm->size);
    if (win != NULL)
        win->peers = calloc((size_t)comm->size, sizeof(*win->peers));
    if (win == NULL || all == NULL || win->peers == NULL) {
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "window: no memory");
        goto err_free;
    }
    win->comm = comm;
    win->addr = addr;
    win->len = len;
    /* A rank whose registration fails still takes part in the exchange, so
     * every rank fails the call (and the communicator stays in step) instead
     * of waiting for a deadline. */
    mine_rc = ofccl__mr_reg(comm->ep, addr, len, access, &win->mr, &e);
    if (mine_rc == 0) {
        ofccl__put_le64(mine + 8, win->mr->base);
        ofccl__put_le64(mine + 16, win->mr->key);
        ofccl__put_le64(mine + 24, win->mr->len);
    }
    ofccl__put_le64(mine, (uint64_t)(int64_t)mine_rc);
    if ((rc = ofccl__allgather_blocking(comm, mine, all, KEY_RECORD)) != 0)
        goto err_dereg;
    if (mine_rc) {
        rc = ofccl__fail(&comm->ctx->log, OFCCL__SUB_COLL, &comm->err, mine_rc,
                         "rank %d: window: %s", comm->rank, e.msg);
        goto err_dereg;
    }
    for (int r = 0; r < comm->size; r++) {
        const uint8_t *rec = all + KEY_RECORD * (size_t)r;
        int64_t peer_rc = (int64_t)ofccl__get_le64(rec);

        if (peer_rc != 0) {
            /* The peer's own code when it is one (out of memory stays that),
             * never a success. */
            rc = peer_rc < 0 && peer_rc > INT_MIN ? (int)peer_rc : OFCCL_ERR_CORRUPT;
            rc = ofccl__fail(&comm->ctx->log, OFCCL__SUB_COLL, &comm->err, rc,
                             "rank %d: window: rank %d could not register its region: %s",
                             comm->rank, r, ofccl_strerror(rc));
            goto err_dereg;
        }
        win->peers[r] = (ofccl__rkey_t){ofccl__get_le64(rec + 8), ofccl__get_le64(rec + 16),
                                        ofccl__get_le64(rec + 24)};
    }
    free(all);
    comm->nwins++;
    *out = win;
    return 0;

err_dereg:
    if (win->mr != NULL)
        ofccl__mr_dereg(win->mr);
err_free:
    free(all);
    if (win != NULL)
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
