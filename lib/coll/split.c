/*
 * ofccl_comm_split: MPI semantics. Every rank of the parent calls it; ranks
 * that pass the same color form a communicator, ordered by key and then by
 * parent rank; OFCCL_UNDEFINED gets none. No bootstrap round trip: the colors,
 * then the new communicators' records and their status travel as all-gathers
 * over the parent's fabric (three in all, whatever the number of colors), and
 * each new communicator opens an endpoint that holds only its own members.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"

/* One exchange of a new communicator's creation, over the parent. */
typedef struct split_xchg {
    ofccl_comm_t *parent;
    const int *members; /* parent ranks, in new-rank order */
    int n;              /* 0: this rank takes part but joins nothing */
} split_xchg_t;

static int split_allgather(void *arg, const void *in, size_t len, void *out, size_t slot,
                           size_t *lens, ofccl__err_t *e)
{
    const split_xchg_t *x = arg;
    size_t rec = slot + 8, np = (size_t)x->parent->size;
    uint8_t *send = calloc(1, rec), *all = malloc(np * rec);
    int rc = 0;

    if (send == NULL || all == NULL) {
        free(send);
        free(all);
        ofccl__strlcpy(e->msg, "no memory for the split's exchange", sizeof(e->msg));
        return e->code = OFCCL_ERR_NO_MEMORY;
    }
    ofccl__put_le64(send, len);
    if (len > 0)
        memcpy(send + 8, in, len);
    rc = ofccl__allgather_blocking(x->parent, send, all, rec);
    if (rc) {
        ofccl__strlcpy(e->msg, x->parent->err.msg, sizeof(e->msg));
        e->code = rc;
    }
    for (int i = 0; rc == 0 && i < x->n; i++) {
        const uint8_t *src = all + (size_t)x->members[i] * rec;
        uint64_t l = ofccl__get_le64(src);
        if (l > slot) { /* untrusted, as any record read back */
            snprintf(e->msg, sizeof(e->msg),
                     "rank %d of the parent sent a %llu-byte record, %zu at most expected",
                     x->members[i], (unsigned long long)l, slot);
            rc = e->code = OFCCL_ERR_CORRUPT;
            break;
        }
        lens[i] = (size_t)l;
        memcpy((uint8_t *)out + (size_t)i * slot, src + 8, (size_t)l);
    }
    free(send);
    free(all);
    return rc;
}

typedef struct ck {
    int32_t color, key;
    int rank; /* in the parent */
} ck_t;

static int by_key_then_rank(const void *a, const void *b)
{
    const ck_t *x = a, *y = b;

    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int comm_split_locked(ofccl_comm_t *comm, int color, int key, ofccl_comm_t **newcomm)
{
    ofccl_ctx_t *ctx = comm->ctx;
    int n = comm->size, nm = 0, me = -1, rc;
    uint8_t mine[8], *all = malloc((size_t)n * 8);
    ck_t *cks = calloc((size_t)n, sizeof(*cks));
    int *members = calloc((size_t)n, sizeof(*members));

    if (all == NULL || cks == NULL || members == NULL) {
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "ofccl_comm_split: out of memory");
        goto out;
    }
    /* Colors and keys, then every new communicator's creation: the same
     * exchanges on every rank of the parent, whatever its color. */
    ofccl__put_le32(mine, (uint32_t)color);
    ofccl__put_le32(mine + 4, (uint32_t)key);
    if ((rc = ofccl__allgather_blocking(comm, mine, all, 8)) != 0)
        goto out;
    for (int r = 0; r < n; r++) {
        cks[r] = (ck_t){(int32_t)ofccl__get_le32(all + 8 * (size_t)r),
                        (int32_t)ofccl__get_le32(all + 8 * (size_t)r + 4), r};
        if (cks[r].color < 0 && cks[r].color != OFCCL_UNDEFINED) {
            rc = ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                  "ofccl_comm_split: rank %d passed color %d: colors are >= 0 or "
                                  "OFCCL_UNDEFINED",
                                  r, (int)cks[r].color);
            goto out;
        }
    }
    if (color != OFCCL_UNDEFINED) {
        for (int r = 0; r < n; r++)
            if (cks[r].color == color)
                cks[nm++] = cks[r];
        qsort(cks, (size_t)nm, sizeof(*cks), by_key_then_rank);
        for (int i = 0; i < nm; i++) {
            members[i] = cks[i].rank;
            if (cks[i].rank == comm->rank)
                me = i;
        }
    }
    split_xchg_t sx = {comm, members, nm};
    ofccl__xchg_t x = {&sx, split_allgather, NULL, NULL};
    if (color == OFCCL_UNDEFINED) {
        rc = ofccl__comm_create_none(ctx, &x);
        *newcomm = NULL;
    } else {
        ofccl__comm_init_t init = {"ofccl_comm_split", me, nm, 0, 0};
        rc = ofccl__comm_create(ctx, &init, &x, newcomm);
        if (rc)
            ofccl__comm_fail(comm, rc, "ofccl_comm_split (color %d): %s", color,
                             ofccl_ctx_last_error(ctx));
    }
out:
    free(all);
    free(cks);
    free(members);
    return rc;
}

int ofccl_comm_split(ofccl_comm_t *comm, int color, int key, ofccl_comm_t **newcomm)
{
    OFCCL__CHECK_HANDLE(comm);
    if (newcomm == NULL) {
        ofccl__ctx_lock(comm->ctx);
        ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "ofccl_comm_split: newcomm is NULL");
        ofccl__ctx_unlock(comm->ctx);
        return OFCCL_ERR_INVALID_ARG;
    }
    OFCCL__LOCKED(comm->ctx, comm_split_locked(comm, color, key, newcomm));
}
