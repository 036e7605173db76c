/* Reduce-scatter, ring (reduce-and-forward): at step s a rank sends its partial
 * sum of block (rank - s - 1) to the right; the right adds its own contribution
 * and forwards it at step s+1. After n-1 steps each rank holds the full sum of
 * its own block. Chunks pipeline across steps. Partials travel in the wire
 * dtype, so bf16/f16 sums are rounded once per hop (docs/reductions.md). */
#include "coll.h"

static const ofccl_redop_t sum_op = {OFCCL_OP_SUM, 1.0};

/* out = own (premultiplied) [+ partial], own always the first source. */
static int combine(ofccl__req_t *r, void *out, const void *own, const void *partial, size_t count,
                   int ndiv)
{
    const void *srcs[2] = {own, partial};
    int rc;

    if (r->op.kind != OFCCL_OP_PREMUL_SUM)
        return ofccl__exec_reduce(r, r->op, out, srcs, partial ? 2 : 1, count, ndiv);
    /* Only our own contribution is scaled; the partial already is. */
    rc = ofccl__exec_reduce(r, r->op, out, srcs, 1, count, 0);
    if (rc == 0 && partial != NULL) {
        srcs[0] = out;
        rc = ofccl__exec_reduce(r, sum_op, out, srcs, 2, count, ndiv);
    }
    return rc;
}

/* Staging: peers write (n-1) partials of a block here, one per step, and as
 * many partials go on from here. */
static void staging(const ofccl__req_t *r, size_t *dst, size_t *fwd)
{
    *dst = *fwd = (size_t)(r->comm->size - 1) * r->block;
}

/* Peers write (n-1) partials of a block here, one per step. */
static int plan(ofccl__req_t *r)
{
    int rc = ofccl__plan_ring(r);

    r->dst_need = (uint64_t)(r->comm->size - 1) * r->block;
    return rc;
}

static int progress(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, right = (comm->rank + 1) % n;
    unsigned total = (unsigned)(n - 1) * r->nchunks;
    const char *src = r->src.ptr, *stage = r->dst.ptr;
    char *fwd = r->fwd.ptr;
    int rc;

    while (r->sent[right] < total) {
        unsigned j = r->sent[right], s = j / r->nchunks, c = j % r->nchunks;
        size_t b = (size_t)((comm->rank - (int)s - 1 + 2 * n) % n);
        size_t off = (size_t)c * r->chunk, len = ofccl__chunk_len(r, c);
        const char *own = src + b * r->block + off;
        const char *from = own;
        const ofccl__mr_t *mr = r->src.mr;

        if (s > 0 && r->unit_cnt[ofccl__unit(r, s - 1, c)] == 0)
            break;
        if (s > 0 || r->op.kind == OFCCL_OP_PREMUL_SUM) {
            char *f = fwd + (size_t)s * r->block + off;
            rc = combine(r, f, own, s > 0 ? stage + (size_t)(s - 1) * r->block + off : NULL,
                         len / r->esize, 0);
            if (rc)
                return ofccl__coll_fail(r, rc, "reducing step %u chunk %u", s, c);
            /* A partial goes on once its sum is done: an executor that
             * finishes later sums it again on the next pass, the same way. */
            if (!ofccl__exec_idle(r))
                break;
            from = f;
            mr = r->fwd.mr;
        }
        rc = ofccl__coll_put(r, right, from, mr, len, (size_t)s * r->block + off, j);
        if (rc == OFCCL_ERR_AGAIN)
            break;
        if (rc)
            return rc;
    }
    /* The last step's partial plus our own block is the result. */
    while (r->reduced < r->nchunks &&
           r->unit_cnt[ofccl__unit(r, (unsigned)n - 2, r->reduced)] > 0) {
        unsigned c = r->reduced;
        size_t off = (size_t)c * r->chunk;
        rc = combine(r, (char *)r->out + off, src + (size_t)comm->rank * r->block + off,
                     stage + (size_t)(n - 2) * r->block + off, ofccl__chunk_len(r, c) / r->esize,
                     r->op.kind == OFCCL_OP_AVG ? n : 0);
        if (rc)
            return ofccl__coll_fail(r, rc, "reducing final chunk %u", c);
        r->reduced++;
    }
    r->finished = r->sent[right] == total && r->reduced == r->nchunks;
    return 0;
}

const ofccl__algo_t ofccl__rs_ring = {
    .size = sizeof(ofccl__algo_t),
    .name = "ring",
    .coll = OFCCL__RS,
    .wire_id = OFCCL__WIRE_RING,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = ofccl__ring_writer_of,
    .unit_of = ofccl__ring_unit_of,
    .staging = staging,
};
