/*
 * The symmetric GPU pool of a communicator: segments of the same size on
 * every rank, allocated once (cuMemAlloc), exported once and mapped into
 * every same-host peer once (CUDA IPC); buffers are cut from them in the
 * order every rank asks, so each buffer has the same offset in every rank's
 * segment and a peer writes into it with no exchange. A freed buffer is
 * reused by the next request of its size (a training step asks for the same
 * sizes each time), so a steady state allocates nothing and meets nobody.
 * Only a new segment is collective (its exchange); the pool grows under
 * OFCCL_GPU_POOL_BYTES.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "pool.h"
#include "util.h"

#define GBUF_ALIGN 256                      /* every buffer starts on 256 bytes */
#define GSEG_MIN ((size_t)64 << 20)         /* the first segment */
#define GSEG_ROUND ((size_t)2 << 20)        /* segments are whole 2 MiB pages */
#define SEG_REC (16 + OFCCL__GPU_IPC_BYTES) /* rc, length, IPC handle */

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static void seg_free(ofccl__gcomm_t *gc, ofccl__gseg_t *s)
{
    ofccl_comm_t *comm = gc->comm;

    if (s->engine)
        (void)ofccl__pool_unregister(comm, s->base); /* its collectives are over */
    for (int r = 0; s->peer != NULL && r < comm->size; r++)
        if (s->peer[r] != NULL && s->peer[r] != s->base)
            ofccl__gpu_ipc_close(gc->g, gc->dev, s->peer[r]);
    if (s->base != NULL)
        ofccl__gpu_mem_free(gc->g, gc->dev, s->base);
    free(s->peer);
    free(s);
}

/* A new segment of `len` bytes on every rank (collective): allocate, export,
 * exchange, map every peer's. Every rank gets it, or every rank an error
 * naming the rank that failed. */
static int seg_add(ofccl__gcomm_t *gc, size_t len, ofccl__gseg_t **out)
{
    ofccl_comm_t *comm = gc->comm;
    ofccl__gseg_t *s = calloc(1, sizeof(*s));
    uint8_t mine[SEG_REC] = {0}, *all = malloc(SEG_REC * (size_t)comm->size);
    ofccl__err_t e = {0};
    size_t off;
    int rc = 0, local = 0, bad = -1;

    if (s != NULL)
        s->peer = calloc((size_t)comm->size, sizeof(*s->peer));
    if (s == NULL || s->peer == NULL || all == NULL)
        local = OFCCL_ERR_NO_MEMORY;
    else if ((local = ofccl__gpu_mem_alloc(gc->g, gc->dev, len, (void **)&s->base, &e)) == 0)
        local = ofccl__gpu_ipc_export(gc->g, gc->dev, s->base, mine + 16, &off, &e);
    ofccl__put_le64(mine, (uint64_t)(int64_t)local);
    ofccl__put_le64(mine + 8, len);
    if (all != NULL && (rc = ofccl__allgather_blocking(comm, mine, all, SEG_REC)) == 0) {
        for (int r = 0; r < comm->size && bad < 0; r++) {
            const uint8_t *rec = all + SEG_REC * (size_t)r;
            if ((int64_t)ofccl__get_le64(rec) != 0 || ofccl__get_le64(rec + 8) != len)
                bad = r;
        }
        if (bad >= 0)
            rc =
                ofccl__get_le64(all + SEG_REC * (size_t)bad + 8) != len
                    ? ofccl__comm_fail(
                          comm, OFCCL_ERR_MISMATCH,
                          "GPU pool: rank %d adds a segment of %llu bytes, rank %d "
                          "one of %zu: every rank must allocate the same sizes in "
                          "the same order",
                          bad, (unsigned long long)ofccl__get_le64(all + SEG_REC * (size_t)bad + 8),
                          comm->rank, len)
                : bad == comm->rank
                    ? ofccl__comm_fail(comm, local, "GPU pool: %zu bytes on GPU %d: %s", len,
                                       gc->dev, e.msg)
                    : ofccl__comm_fail(comm, OFCCL_ERR_REMOTE_ERROR,
                                       "GPU pool: rank %d could not add its %zu-byte segment "
                                       "(its message says why)",
                                       bad, len);
    }
    for (int r = 0; rc == 0 && r < comm->size; r++) {
        /* Peers map it only where they take the peer class (one host, P2P);
         * elsewhere the host engine stages it and no peer reaches it. */
        if (r == comm->rank || gc->path != OFCCL__GPATH_P2P) {
            s->peer[r] = r == comm->rank ? s->base : NULL;
            continue;
        }
        rc = ofccl__gpu_ipc_open(gc->g, gc->dev, all + SEG_REC * (size_t)r + 16,
                                 (void **)&s->peer[r], &e);
        if (rc)
            rc = ofccl__comm_fail(comm, rc, "GPU pool: mapping rank %d's segment on GPU %d: %s", r,
                                  gc->dev, e.msg);
    }
    free(all);
    if (rc != 0 || local != 0) {
        if (s != NULL)
            seg_free(gc, s);
        return rc ? rc : local;
    }
    /* The host engine's path (no peer class, a transport that takes GPU
     * memory): the segment registered with the transport once, so that
     * collectives on pool buffers move data in place there too. */
    if (gc->path != OFCCL__GPATH_P2P && comm->dev_reg) {
        if ((rc = ofccl__pool_register(comm, s->base, len)) != 0) {
            seg_free(gc, s);
            return rc;
        }
        s->engine = true;
    }
    s->len = len;
    s->serial = gc->nsegs++;
    s->next = gc->segs;
    gc->segs = s;
    gc->pool_bytes += len;
    *out = s;
    return 0;
}

static ofccl__gbuf_t *buf_new(ofccl__gcomm_t *gc, ofccl__gseg_t *s, size_t off, size_t len)
{
    ofccl__gbuf_t *b = calloc(1, sizeof(*b)), **tail = &gc->bufs;

    if (b == NULL)
        return NULL;
    *b = (ofccl__gbuf_t){s, off, len, false, NULL};
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = b;
    return b;
}

/* The end of the last buffer cut from segment s. */
static size_t seg_used(const ofccl__gcomm_t *gc, const ofccl__gseg_t *s)
{
    size_t end = 0;

    for (const ofccl__gbuf_t *b = gc->bufs; b != NULL; b = b->next)
        if (b->seg == s && b->off + b->len > end)
            end = b->off + b->len;
    return end;
}

int ofccl__gpool_alloc(ofccl__gcomm_t *gc, size_t bytes, void **ptr)
{
    ofccl_comm_t *comm = gc->comm;
    size_t len = round_up(bytes ? bytes : 1, GBUF_ALIGN), used, seglen;
    ofccl__gseg_t *s;
    ofccl__gbuf_t *b;
    int rc;

    for (b = gc->bufs; b != NULL; b = b->next)
        if (b->free && b->len == len) {
            b->free = false;
            *ptr = b->seg->base + b->off;
            return 0;
        }
    s = gc->segs;
    used = s != NULL ? round_up(seg_used(gc, s), GBUF_ALIGN) : 0;
    if (s == NULL || used + len > s->len) {
        seglen = round_up(OFCCL__MAX(len, OFCCL__MAX(GSEG_MIN, s ? 2 * s->len : 0)), GSEG_ROUND);
        if (gc->budget && gc->pool_bytes + seglen > gc->budget)
            seglen = round_up(len, GSEG_ROUND);
        if (gc->budget && gc->pool_bytes + seglen > gc->budget)
            return ofccl__comm_fail(comm, OFCCL_ERR_OVER_BUDGET,
                                    "GPU pool: %zu bytes more would pass OFCCL_GPU_POOL_BYTES "
                                    "(%zu, %zu held); free buffers or raise it",
                                    seglen, gc->budget, gc->pool_bytes);
        if ((rc = seg_add(gc, seglen, &s)) != 0)
            return rc;
        used = 0;
    }
    if ((b = buf_new(gc, s, used, len)) == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "GPU pool: no memory");
    *ptr = s->base + used;
    return 0;
}

int ofccl__gpool_free(ofccl__gcomm_t *gc, void *ptr)
{
    for (ofccl__gbuf_t *b = gc->bufs; b != NULL; b = b->next)
        if (!b->free && b->seg->base + b->off == (char *)ptr) {
            b->free = true;
            return 0;
        }
    return ofccl__comm_fail(gc->comm, OFCCL_ERR_INVALID_ARG,
                            "ofccl_gpu_buffer_free: %p is not a GPU pool buffer of communicator %u",
                            ptr, gc->comm->id);
}

ofccl__gseg_t *ofccl__gpool_find(ofccl__gcomm_t *gc, const void *p, size_t len, size_t *off)
{
    for (ofccl__gseg_t *s = gc->segs; s != NULL; s = s->next)
        if ((const char *)p >= s->base && (const char *)p - s->base + len <= s->len) {
            *off = (size_t)((const char *)p - s->base);
            return s;
        }
    return NULL;
}

int ofccl__gpool_scratch(ofccl__gcomm_t *gc, size_t bytes, ofccl__gseg_t **seg, size_t *off)
{
    void *p = NULL;
    int rc;

    /* The largest buffer held as scratch: reuse it when big enough, else
     * hand it back and take a bigger one (every rank decides alike). */
    if (gc->scratch != NULL && gc->scratch->len >= bytes) {
        *seg = gc->scratch->seg;
        *off = gc->scratch->off;
        return 0;
    }
    /* The old one is not handed back: a collective still on a stream may
     * be writing it (the pool keeps it until the communicator goes). */
    gc->scratch = NULL;
    if ((rc = ofccl__gpool_alloc(gc, OFCCL__MAX(bytes, (size_t)1 << 20), &p)) != 0)
        return rc;
    for (ofccl__gbuf_t *b = gc->bufs; b != NULL; b = b->next)
        if (!b->free && b->seg->base + b->off == (char *)p)
            gc->scratch = b;
    *seg = gc->scratch->seg;
    *off = gc->scratch->off;
    return 0;
}

void ofccl__gpool_fini(ofccl__gcomm_t *gc)
{
    while (gc->bufs != NULL) {
        ofccl__gbuf_t *b = gc->bufs;
        gc->bufs = b->next;
        free(b);
    }
    while (gc->segs != NULL) {
        ofccl__gseg_t *s = gc->segs;
        gc->segs = s->next;
        seg_free(gc, s);
    }
    gc->pool_bytes = 0;
    gc->scratch = NULL;
}
