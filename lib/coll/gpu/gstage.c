/*
 * GPU memory where the GPU peer class does not fit (a rank on another host,
 * GPUs without P2P, a transport that cannot map peers' memory): the GPU
 * buffers are staged through host memory inside the library, chunk by chunk,
 * the copies of one chunk overlapping the host collective of the next.
 *
 * The chunks' host collectives run on a communicator of their own (a
 * duplicate made at the first staged call, every rank staging at the same
 * collective since the path is agreed), so a staged call takes one request
 * of the caller's communicator whatever its chunk count: a caller holding
 * several completed requests never runs out of slots in the middle. The
 * bounce buffer is that communicator's pool memory (registered with the
 * transport, so the host collectives on it copy nothing more) registered with
 * CUDA (so the copies are asynchronous): SLOTS slots of OFCCL_GPU_STAGE_BYTES, each
 * holding one chunk's collective (n pieces of C bytes, C = the slot / n).
 * Everything goes on the communicator's stream, in order:
 *
 *   D2H(0), D2H(1); then for each chunk k: the host waits for D2H(k), runs
 *   the host collective of chunk k in slot k % SLOTS (in place), enqueues
 *   H2D(k) and D2H(k + 2).
 *
 * While the host collective of chunk k runs, the GPU copies chunk k - 1 back
 * and chunk k + 1 in; D2H(k + 2) reuses the slot of chunk k - 1, behind its
 * H2D on the same stream. The call returns once the last chunk is back on
 * the GPU: the request it hands out is complete (the host thread runs the
 * chunks' collectives). The first staged call on a communicator logs why
 * (gapi.c).
 */
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "util.h"

#define SLOTS 3

/* The staging communicator, made on first use (collective), with the
 * caller's deadline. */
static int stage_comm(ofccl__gcomm_t *gc, ofccl_comm_t **out)
{
    if (gc->stage_comm == NULL) {
        int rc = ofccl_comm_split(gc->comm, 0, gc->comm->rank, &gc->stage_comm);
        if (rc)
            return rc;
    }
    gc->stage_comm->timeout_ms = gc->comm->timeout_ms;
    *out = gc->stage_comm;
    return 0;
}

/* The bounce buffer: SLOTS slots of `slot` bytes, made once per size. */
static int bounce(ofccl__gcomm_t *gc, size_t slot, char **out)
{
    ofccl_comm_t *comm = gc->stage_comm;
    size_t bytes = slot * SLOTS;
    ofccl__err_t e = {0};
    void *p = NULL, *dp = NULL;
    int rc;

    if (gc->host_stage != NULL && gc->host_stage_len >= bytes) {
        *out = gc->host_stage;
        return 0;
    }
    if (gc->host_stage != NULL) {
        ofccl__gpu_host_unregister(gc->g, gc->dev, gc->host_stage);
        ofccl_buffer_free(comm, gc->host_stage);
        gc->host_stage = NULL;
        gc->host_stage_len = 0;
    }
    if ((rc = ofccl_buffer_alloc(comm, bytes, &p)) != 0)
        return ofccl__comm_fail(gc->comm, rc, "staging GPU memory: its host buffer: %s",
                                ofccl_comm_last_error(comm));
    if ((rc = ofccl__gpu_host_register(gc->g, gc->dev, p, bytes, &dp, &e)) != 0) {
        ofccl_buffer_free(comm, p);
        return ofccl__comm_fail(gc->comm, rc, "staging GPU memory: its host buffer: %s", e.msg);
    }
    gc->host_stage = p;
    gc->host_stage_len = bytes;
    *out = p;
    return 0;
}

void ofccl__gstage_fini(ofccl__gcomm_t *gc)
{
    if (gc->host_stage != NULL) /* its pool frees it with the communicator */
        ofccl__gpu_host_unregister(gc->g, gc->dev, gc->host_stage);
    gc->host_stage = NULL;
    if (gc->stage_comm != NULL)
        ofccl_comm_destroy(gc->stage_comm);
    gc->stage_comm = NULL;
}

/* One staged collective: its buffers, and the chunk size. */
struct staged {
    ofccl__gcomm_t *gc;
    int coll, root, me, n;
    const char *in;
    char *out;
    size_t block, esize, chunk;
    ofccl_dtype_t dtype;
    ofccl_redop_t op;
    char *slot[SLOTS];
    ofccl__gpu_event_t in_done[SLOTS];
};

static size_t piece(const struct staged *s, size_t k)
{
    return OFCCL__MIN(s->chunk, s->block - k * s->chunk);
}

/* Chunk k into its slot: this rank's piece (all-gather), every rank's
 * piece (reduce-scatter), the root's (broadcast); then its event. */
static int copy_in(struct staged *s, size_t k, ofccl__err_t *e)
{
    char *slot = s->slot[k % SLOTS];
    size_t len = piece(s, k), at = k * s->chunk;
    int rc = 0;

    if (s->coll == OFCCL__AG)
        rc = ofccl__gq_copy(s->gc, slot + (size_t)s->me * len, s->in + at, len, e);
    else if (s->coll == OFCCL__RS)
        for (int r = 0; rc == 0 && r < s->n; r++)
            rc = ofccl__gq_copy(s->gc, slot + (size_t)r * len, s->in + (size_t)r * s->block + at,
                                len, e);
    else if (s->me == s->root)
        rc = ofccl__gq_copy(s->gc, slot, s->in + at, len, e);
    if (rc == 0)
        rc = ofccl__gpu_event_record(s->gc->g, s->gc->dev, s->in_done[k % SLOTS], s->gc->stream, e);
    return rc;
}

/* Chunk k's result out of its slot into the caller's output. */
static int copy_out(struct staged *s, size_t k, ofccl__err_t *e)
{
    const char *slot = s->slot[k % SLOTS];
    size_t len = piece(s, k), at = k * s->chunk;
    int rc = 0;

    if (s->coll == OFCCL__AG)
        for (int r = 0; rc == 0 && r < s->n; r++)
            rc = ofccl__gq_copy(s->gc, s->out + (size_t)r * s->block + at, slot + (size_t)r * len,
                                len, e);
    else if (s->coll == OFCCL__RS)
        rc = ofccl__gq_copy(s->gc, s->out + at, slot + (size_t)s->me * len, len, e);
    else if (s->me != s->root)
        rc = ofccl__gq_copy(s->gc, s->out + at, slot, len, e);
    return rc;
}

/* The host collective of chunk k, in place in its slot. */
static int host_coll(struct staged *s, size_t k, ofccl_req_t **r)
{
    char *slot = s->slot[k % SLOTS];
    size_t len = piece(s, k), count = len / s->esize;
    ofccl_comm_t *comm = s->gc->stage_comm;

    if (s->coll == OFCCL__AG)
        return ofccl_allgather(comm, slot + (size_t)s->me * len, slot, count, s->dtype, r);
    if (s->coll == OFCCL__RS)
        return ofccl_reduce_scatter(comm, slot, slot + (size_t)s->me * len, count, s->dtype, s->op,
                                    r);
    return ofccl_broadcast(comm, slot, count, s->dtype, s->root, r);
}

static int events(struct staged *s, bool make, ofccl__err_t *e)
{
    int rc = 0;

    for (int i = 0; i < SLOTS; i++) {
        if (make && rc == 0)
            rc = ofccl__gpu_event_create(s->gc->g, s->gc->dev, false, &s->in_done[i], e);
        else if (!make && s->in_done[i] != NULL)
            ofccl__gpu_event_destroy(s->gc->g, s->gc->dev, s->in_done[i]);
    }
    return rc;
}

/* The pipeline; *last the last chunk's request (complete), or a failed
 * one's: the only one left (each earlier chunk's is freed once complete). */
static int run(struct staged *s, size_t nchunks, ofccl_req_t **last, ofccl__err_t *e)
{
    ofccl_comm_t *comm = s->gc->comm; /* the caller's: copy failures are said there */
    int rc = 0;

    for (size_t k = 0; rc == 0 && k < OFCCL__MIN(nchunks, (size_t)2); k++)
        rc = copy_in(s, k, e);
    if (rc)
        return ofccl__comm_fail(comm, rc, "staging GPU memory to the host: %s", e->msg);
    for (size_t k = 0; k < nchunks; k++) {
        ofccl_req_t *r = NULL;
        if ((rc = ofccl__gpu_event_sync(s->gc->g, s->gc->dev, s->in_done[k % SLOTS], e)) != 0)
            return ofccl__comm_fail(comm, rc, "staging GPU memory to the host: %s", e->msg);
        if ((rc = host_coll(s, k, &r)) != 0)
            return ofccl__comm_fail(comm, rc, "%s staged through host memory: %s",
                                    ofccl__coll_name(s->coll),
                                    ofccl_comm_last_error(s->gc->stage_comm));
        if ((rc = ofccl_wait(r)) != 0) {
            *last = r; /* the caller learns it from the request, as any failed one */
            return 0;
        }
        if (k + 1 < nchunks)
            ofccl_req_free(r); /* one request slot at a time: the caller may hold the rest */
        else
            *last = r;
        rc = copy_out(s, k, e);
        if (rc == 0 && k + 2 < nchunks)
            rc = copy_in(s, k + 2, e);
        if (rc)
            return ofccl__comm_fail(comm, rc, "staging GPU memory: chunk %zu: %s", k, e->msg);
    }
    if ((rc = ofccl__gpu_stream_sync(s->gc->g, s->gc->dev, s->gc->stream, e)) != 0)
        return ofccl__comm_fail(comm, rc, "staging the result back to the GPU: %s", e->msg);
    return 0;
}

int ofccl__gpu_stage(ofccl__gcomm_t *gc, int coll, const void *sendbuf, void *recvbuf, size_t count,
                     ofccl_dtype_t dtype, ofccl_redop_t op, int root, size_t block,
                     ofccl_req_t **req)
{
    ofccl_comm_t *comm = gc->comm, *sc = NULL;
    struct staged s = {.gc = gc, .coll = coll, .root = root, .me = comm->rank, .n = comm->size};
    size_t nchunks, slot = gc->stage;
    ofccl__err_t e = {0};
    ofccl_req_t *last = NULL;
    ofccl__req_t *r = NULL;
    char *h = NULL;
    int rc, status;

    (void)count;
    if (gc->g == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED, "GPU memory: %s", gc->why);
    if ((rc = stage_comm(gc, &sc)) != 0)
        return rc;
    s.in = coll == OFCCL__BC ? recvbuf : sendbuf;
    s.out = recvbuf;
    s.block = block;
    s.dtype = dtype;
    s.op = op;
    s.esize = ofccl_dtype_size(dtype);
    /* A chunk: this rank's share of a slot, a multiple of 16 bytes and of
     * the element (every dtype's size divides 16). */
    s.chunk = OFCCL__MAX(slot / (size_t)(coll == OFCCL__BC ? 1 : s.n) / 16 * 16, (size_t)16);
    nchunks = block == 0 ? 1 : (block + s.chunk - 1) / s.chunk;
    slot = s.chunk * (size_t)(coll == OFCCL__BC ? 1 : s.n);
    if ((rc = bounce(gc, slot, &h)) != 0)
        return rc;
    for (int i = 0; i < SLOTS; i++)
        s.slot[i] = h + (size_t)i * slot;
    if ((rc = events(&s, true, &e)) != 0) {
        events(&s, false, &e);
        return ofccl__comm_fail(comm, rc, "staging GPU memory: %s", e.msg);
    }
    /* The caller's request: one sequence number of its communicator. */
    if ((rc = ofccl__coll_begin(comm, coll, &r)) != 0) {
        events(&s, false, &e);
        return rc;
    }
    rc = run(&s, nchunks, &last, &e);
    events(&s, false, &e);
    status = rc == 0 && last != NULL ? ofccl_wait(last) : 0;
    if (rc == 0 && status != 0) /* a chunk's collective failed: the caller's request says why */
        ofccl__comm_fail(comm, status, "%s staged through host memory: %s", ofccl__coll_name(coll),
                         ofccl_comm_last_error(sc));
    if (last != NULL)
        ofccl_req_free(last);
    if (rc) {
        r->state = OFCCL__REQ_FREE;
        return rc;
    }
    comm->ctx->stats.staged_bytes += block * (size_t)(coll == OFCCL__BC ? 1 : s.n);
    ofccl__coll_done_now(r, status);
    *req = r;
    return 0;
}
