/*
 * The caller's own GPU memory, registered with a communicator
 * (ofccl_gpu_register): every rank registers a range of the same size at the
 * same point, each maps every peer's, and a collective whose buffers lie in a
 * registration moves data into the peers' memory directly, as on the
 * symmetric pool: no scratch, no copy out. The buffers of one collective sit
 * at the same offset of the same registration on every rank (peers compare).
 *
 * Memory from cudaMalloc is mapped by CUDA IPC, once per peer allocation
 * (several registrations inside one allocation share the mapping, cached by
 * the allocation's id); virtual memory (PyTorch's expandable segments) piece
 * by piece through descriptors passed on the host (gfd.c). Registering is a
 * host exchange, so it belongs outside the step loop; using a registration
 * costs one driver query (the allocation's id: memory freed while registered
 * is seen, the registration dropped, the collective refused). Dropping it is
 * local: every rank drops its own once its collectives on it are done.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "gfd.h"
#include "util.h"

/* rc, bytes, kind, buffer id, offset, map length, pieces, pid << 32 | box, IPC handle */
#define REG_REC (64 + OFCCL__GPU_IPC_BYTES)
#define REG_WAIT_NS 30000000000ull /* descriptors' wait where the communicator has no timeout */

static void map_put(ofccl__gcomm_t *gc, ofccl__gmap_t *m)
{
    if (m == NULL || --m->refs > 0)
        return;
    for (ofccl__gmap_t **p = &gc->maps; *p != NULL; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    ofccl__gpu_share_close(gc->g, gc->dev, m->kind, m->base, m->len);
    free(m);
}

static void reg_free(ofccl__gcomm_t *gc, ofccl__gseg_t *s)
{
    for (int r = 0; s->map != NULL && r < gc->comm->size; r++)
        map_put(gc, s->map[r]);
    free(s->map);
    free(s->peer);
    free(s);
}

/* Peer r's memory mapped here: the cached mapping of its allocation (IPC),
 * else a new one. */
static int map_get(ofccl__gcomm_t *gc, int r, ofccl__gpu_share_t *sh, ofccl__gmap_t **out,
                   ofccl__err_t *e)
{
    ofccl__gmap_t *m;
    int rc;

    if (sh->kind == OFCCL__GPU_SHARE_IPC && sh->buffer_id != 0)
        for (m = gc->maps; m != NULL; m = m->next)
            if (m->peer == r && m->kind == OFCCL__GPU_SHARE_IPC && m->buffer_id == sh->buffer_id) {
                m->refs++;
                *out = m;
                return 0;
            }
    if ((m = calloc(1, sizeof(*m))) == NULL)
        return OFCCL_ERR_NO_MEMORY;
    if ((rc = ofccl__gpu_share_open(gc->g, gc->dev, sh, (void **)&m->base, e)) != 0) {
        free(m);
        return rc;
    }
    *m = (ofccl__gmap_t){r, sh->kind, sh->buffer_id, m->base, sh->map_len, 1, gc->maps};
    gc->maps = m;
    *out = m;
    return 0;
}

/* This rank's checks and share: 0, or an error with `e` saying why. */
static int local_part(ofccl__gcomm_t *gc, void *ptr, size_t bytes, ofccl__gpu_share_t *sh,
                      ofccl__err_t *e)
{
    size_t off;
    int k = ptr != NULL ? ofccl__gpu_ptr_kind(gc->g, ptr, NULL, NULL) : -1;
    ofccl__gseg_t *s = NULL;

    if (ptr == NULL || bytes == 0 || k != gc->dev)
        return ofccl__fail(NULL, OFCCL__SUB_COLL, e, OFCCL_ERR_INVALID_ARG,
                           "%p (%zu bytes) is %s, not memory of this communicator's GPU %d", ptr,
                           bytes,
                           ptr == NULL || bytes == 0 ? "empty"
                           : k < 0                   ? "host memory"
                                                     : "on another GPU",
                           gc->dev);
    if (ofccl__gpool_find(gc, ptr, 1, &off) != NULL ||
        (ofccl__greg_find(gc, ptr, 1, &s, &off) == 0 && s != NULL))
        return ofccl__fail(NULL, OFCCL__SUB_COLL, e, OFCCL_ERR_INVALID_ARG,
                           "%p is already %s of this communicator", ptr,
                           s != NULL ? "registered memory" : "GPU pool memory");
    return ofccl__gpu_share_export(gc->g, gc->dev, ptr, bytes, sh, e);
}

static void rec_put(uint8_t *rec, int rc, size_t bytes, const ofccl__gpu_share_t *sh,
                    const ofccl__gfd_t *box)
{
    ofccl__put_le64(rec, (uint64_t)(int64_t)rc);
    ofccl__put_le64(rec + 8, bytes);
    ofccl__put_le64(rec + 16, (uint64_t)sh->kind);
    ofccl__put_le64(rec + 24, sh->buffer_id);
    ofccl__put_le64(rec + 32, sh->offset);
    ofccl__put_le64(rec + 40, sh->map_len);
    ofccl__put_le64(rec + 48, (uint64_t)sh->npieces);
    ofccl__put_le64(rec + 56, box != NULL ? (uint64_t)box->pid << 32 | box->box : 0);
    memcpy(rec + 64, sh->ipc, OFCCL__GPU_IPC_BYTES);
}

static void rec_get(const uint8_t *rec, ofccl__gpu_share_t *sh)
{
    memset(sh, 0, sizeof(*sh));
    sh->kind = (int)ofccl__get_le64(rec + 16);
    sh->buffer_id = ofccl__get_le64(rec + 24);
    sh->offset = ofccl__get_le64(rec + 32);
    sh->map_len = ofccl__get_le64(rec + 40);
    memcpy(sh->ipc, rec + 64, OFCCL__GPU_IPC_BYTES);
}

/* Send this rank's pieces to every peer, then take every VMM peer's. */
static int pass_fds(ofccl__gcomm_t *gc, const uint8_t *all, ofccl__gpu_share_t *mine,
                    ofccl__gpu_share_t *sh, int *culprit, ofccl__err_t *e)
{
    ofccl_comm_t *comm = gc->comm;
    bool *expect = calloc((size_t)comm->size, sizeof(bool));
    uint64_t ms = comm->timeout_ms ? comm->timeout_ms : REG_WAIT_NS / 1000000;
    int rc = 0;

    if (expect == NULL)
        return OFCCL_ERR_NO_MEMORY;
    /* A send that fails turns the rest into "this rank failed", so that no
     * peer waits for descriptors that will not come. */
    for (int r = 0; r < comm->size; r++) {
        uint64_t where = ofccl__get_le64(all + REG_REC * (size_t)r + 56);
        char why[sizeof(e->msg)];
        expect[r] = r != comm->rank && sh[r].kind == OFCCL__GPU_SHARE_VMM;
        if (r == comm->rank || mine->kind != OFCCL__GPU_SHARE_VMM)
            continue;
        if (ofccl__gfd_send(gc->box, (uint32_t)(where >> 32), (uint32_t)where, gc->nregs,
                            comm->rank, rc == 0 ? mine : NULL, why, sizeof(why)) != 0 &&
            rc == 0) {
            rc = OFCCL_ERR_RESOURCE;
            *culprit = comm->rank;
            ofccl__strlcpy(e->msg, why, sizeof(e->msg));
        }
    }
    if (rc == 0)
        rc = ofccl__gfd_recv(gc->box, gc->nregs, expect, comm->size, sh,
                             ofccl__now_ns() + ms * 1000000, culprit, e->msg, sizeof(e->msg));
    for (int r = 0; rc == 0 && r < comm->size; r++)
        if (expect[r] &&
            (uint64_t)sh[r].npieces != ofccl__get_le64(all + REG_REC * (size_t)r + 48)) {
            *culprit = r;
            snprintf(e->msg, sizeof(e->msg), "rank %d sent %d pieces of its GPU memory, not %llu",
                     r, sh[r].npieces,
                     (unsigned long long)ofccl__get_le64(all + REG_REC * (size_t)r + 48));
            rc = OFCCL_ERR_CORRUPT;
        }
    free(expect);
    return rc;
}

/* Map every peer's registered range into s. */
static int map_peers(ofccl__gcomm_t *gc, ofccl__gseg_t *s, ofccl__gpu_share_t *sh, int *culprit,
                     ofccl__err_t *e)
{
    for (int r = 0; r < gc->comm->size; r++) {
        int rc;
        if (r == gc->comm->rank) {
            s->peer[r] = s->base;
            continue;
        }
        if ((rc = map_get(gc, r, &sh[r], &s->map[r], e)) != 0) {
            *culprit = r;
            return rc;
        }
        s->peer[r] = s->map[r]->base + sh[r].offset;
    }
    return 0;
}

int ofccl__greg_add(ofccl__gcomm_t *gc, void *ptr, size_t bytes)
{
    ofccl_comm_t *comm = gc->comm;
    int n = comm->size, rc = 0, local, bad = -1, culprit = -1, first = 0, whose = -1;
    uint8_t mine_rec[REG_REC] = {0}, *all = malloc(REG_REC * (size_t)n);
    ofccl__gpu_share_t *sh = calloc((size_t)n, sizeof(*sh)), mine;
    ofccl__gseg_t *s = calloc(1, sizeof(*s));
    ofccl__err_t e = {0};

    memset(&mine, 0, sizeof(mine));
    if (s != NULL) {
        s->peer = calloc((size_t)n, sizeof(*s->peer));
        s->map = calloc((size_t)n, sizeof(*s->map));
    }
    if (all == NULL || sh == NULL || s == NULL || s->peer == NULL || s->map == NULL)
        local = OFCCL_ERR_NO_MEMORY, snprintf(e.msg, sizeof(e.msg), "no memory");
    else
        local = local_part(gc, ptr, bytes, &mine, &e);
    /* Every rank takes descriptors in case a peer's memory is virtual. */
    if (local == 0 && gc->box == NULL) {
        if ((gc->box = calloc(1, sizeof(*gc->box))) == NULL)
            local = OFCCL_ERR_NO_MEMORY;
        else if ((local = ofccl__gfd_open(gc->box, e.msg, sizeof(e.msg))) != 0) {
            free(gc->box);
            gc->box = NULL;
        }
    }
    gc->nregs++;
    rec_put(mine_rec, local, bytes, &mine, gc->box);
    if (all == NULL) { /* cannot take part: the peers' exchange fails on its deadline */
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "ofccl_gpu_register: no memory");
        goto out;
    }
    if ((rc = ofccl__allgather_blocking(comm, mine_rec, all, REG_REC)) != 0)
        goto out;
    for (int r = 0; r < n && bad < 0; r++)
        if ((int64_t)ofccl__get_le64(all + REG_REC * (size_t)r) != 0 ||
            ofccl__get_le64(all + REG_REC * (size_t)r + 8) != bytes)
            bad = r;
    if (bad >= 0) {
        const uint8_t *b = all + REG_REC * (size_t)bad;
        rc = ofccl__get_le64(b) == 0
                 ? ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                                    "ofccl_gpu_register: rank %d registers %llu bytes, rank %d "
                                    "%zu: every rank registers the same sizes in the same order",
                                    bad, (unsigned long long)ofccl__get_le64(b + 8), comm->rank,
                                    bytes)
             : bad == comm->rank
                 ? ofccl__comm_fail(comm, local, "ofccl_gpu_register on rank %d: %s", comm->rank,
                                    e.msg)
                 /* Its code, so that the communicator stays as usable here as there. */
                 : ofccl__comm_fail(comm, (int)(int64_t)ofccl__get_le64(b),
                                    "ofccl_gpu_register: rank %d could not register its memory "
                                    "(its message says why)",
                                    bad);
        goto out;
    }
    for (int r = 0; r < n; r++)
        rec_get(all + REG_REC * (size_t)r, &sh[r]);
    s->base = ptr;
    s->len = bytes;
    s->user = true;
    s->buffer_id = mine.buffer_id;
    local = pass_fds(gc, all, &mine, sh, &culprit, &e);
    if (local == 0)
        local = map_peers(gc, s, sh, &culprit, &e);
    /* Every rank's verdict after mapping: the first that failed. */
    if ((rc = ofccl__agree(comm, local, culprit, &first, &bad, &whose)) != 0 || first != 0) {
        bad = rc != 0 ? comm->rank : bad;
        rc = bad == comm->rank ? ofccl__comm_fail(comm, rc != 0 ? rc : first,
                                                  "ofccl_gpu_register on rank %d (GPU %d): "
                                                  "mapping rank %d's memory: %s",
                                                  comm->rank, gc->dev, culprit, e.msg)
                               : ofccl__comm_fail(comm, first,
                                                  "ofccl_gpu_register: rank %d could not map "
                                                  "rank %d's memory (its message says why)",
                                                  bad, whose);
        goto out;
    }
    s->serial = gc->nsegs++;
    s->next = gc->regs;
    gc->regs = s;
    s = NULL;
out:
    ofccl__gpu_share_clear(&mine);
    for (int r = 0; sh != NULL && r < n; r++)
        ofccl__gpu_share_clear(&sh[r]);
    if (s != NULL)
        reg_free(gc, s);
    free(sh);
    free(all);
    return rc;
}

int ofccl__greg_find(ofccl__gcomm_t *gc, const void *p, size_t len, ofccl__gseg_t **seg,
                     size_t *off)
{
    const char *c = p;

    *seg = NULL;
    for (ofccl__gseg_t **sp = &gc->regs; *sp != NULL; sp = &(*sp)->next) {
        ofccl__gseg_t *s = *sp;
        if (c < s->base || (size_t)(c - s->base) + len > s->len)
            continue;
        if (ofccl__gpu_buffer_id(gc->g, s->base) != s->buffer_id) {
            *sp = s->next;
            reg_free(gc, s);
            return ofccl__comm_fail(gc->comm, OFCCL_ERR_INVALID_ARG,
                                    "rank %d: the GPU memory registered at %p was freed while "
                                    "registered (ofccl_gpu_deregister it first); the "
                                    "registration is dropped",
                                    gc->comm->rank, p);
        }
        *seg = s;
        *off = (size_t)(c - s->base);
        return 0;
    }
    return 0;
}

int ofccl__greg_drop(ofccl__gcomm_t *gc, void *ptr)
{
    for (ofccl__gseg_t **sp = &gc->regs; *sp != NULL; sp = &(*sp)->next) {
        ofccl__gseg_t *s = *sp;
        if (s->base != (char *)ptr)
            continue;
        for (int k = 0; k < OFCCL__GPU_SLOTS; k++) {
            const ofccl__req_t *r = gc->rq[k].req;
            if (r != NULL && r->state == OFCCL__REQ_ACTIVE && gc->rq[k].peer == s->peer)
                return ofccl__comm_fail(gc->comm, OFCCL_ERR_BUSY,
                                        "ofccl_gpu_deregister: collective %llu still uses the "
                                        "memory at %p",
                                        (unsigned long long)r->seq, ptr);
        }
        *sp = s->next;
        reg_free(gc, s);
        return 0;
    }
    return ofccl__comm_fail(gc->comm, OFCCL_ERR_INVALID_ARG,
                            "ofccl_gpu_deregister: %p is not GPU memory registered with "
                            "communicator %u",
                            ptr, gc->comm->id);
}

void ofccl__greg_fini(ofccl__gcomm_t *gc)
{
    while (gc->regs != NULL) {
        ofccl__gseg_t *s = gc->regs;
        gc->regs = s->next;
        reg_free(gc, s);
    }
    while (gc->maps != NULL) { /* none left: each went with its last registration */
        ofccl__gmap_t *m = gc->maps;
        m->refs = 1;
        map_put(gc, m);
    }
    if (gc->box != NULL) {
        ofccl__gfd_close(gc->box);
        free(gc->box);
        gc->box = NULL;
    }
}
