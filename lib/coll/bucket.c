/*
 * Buckets: many tensors in one collective. Tensor t of N_t elements is split
 * in chunks of c_t = ceil(N_t / n): rank r owns [r * c_t, min((r+1) * c_t, N_t)).
 * Each rank's region of the flat buffer holds, for every tensor in order, a slot
 * of c_t elements (its shard, zero-padded), and the region is padded to
 * OFCCL_ALIGN bytes. So every rank's region has the same size and layout
 * whatever the tensor sizes, and the library does all the padding.
 * A broadcast's bucket is not sharded: one region holds every whole tensor.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"

size_t ofccl__bucket_chunk(size_t count, int n)
{
    return (count + (size_t)n - 1) / (size_t)n;
}

/* Elements of tensor `count` in one region of the flat buffer. */
static size_t slot_of(const ofccl__req_t *r, size_t count)
{
    return r->coll == OFCCL__BC ? count : ofccl__bucket_chunk(count, r->comm->size);
}

size_t ofccl__bucket_shard(size_t count, int n, int r)
{
    size_t c = ofccl__bucket_chunk(count, n), first = (size_t)r * c;
    return first >= count ? 0 : OFCCL__MIN(c, count - first);
}

int ofccl_shard_range(const ofccl_comm_t *comm, size_t count, size_t *offset, size_t *shard_count)
{
    size_t c;

    OFCCL__CHECK_HANDLE(comm);
    if (offset == NULL || shard_count == NULL) {
        /* The last error is state a caller reads, like errno, even through a
         * const handle: it must never describe an earlier failure. */
        ofccl_comm_t *mut = (ofccl_comm_t *)comm;
        ofccl__ctx_lock(mut->ctx);
        ofccl__comm_fail(mut, OFCCL_ERR_INVALID_ARG, "ofccl_shard_range: %s is NULL",
                         offset == NULL ? "offset" : "shard_count");
        ofccl__ctx_unlock(mut->ctx);
        return OFCCL_ERR_INVALID_ARG;
    }
    c = ofccl__bucket_chunk(count, comm->size);
    *offset = OFCCL__MIN((size_t)comm->rank * c, count);
    *shard_count = ofccl__bucket_shard(count, comm->size, comm->rank);
    return 0;
}

size_t ofccl__bucket_extra(const ofccl__req_t *r)
{
    return r->block * (size_t)r->comm->size + r->block;
}

void ofccl__bucket_copy_in(ofccl__req_t *r, void *area)
{
    const ofccl_comm_t *comm = r->comm;
    int n = comm->size;
    char *base = area;

    if (r->coll == OFCCL__BC) { /* the root's tensors, whole */
        size_t off = 0;
        for (int t = 0; t < r->ntensors; t++) {
            size_t len = r->tensors[t].t.count * r->esize;
            ofccl__exec_io_copy(r, base + off, r->tensors[t].t.full, len);
            off += len;
        }
        ofccl__exec_fill(r, base + off, 0, r->block - off);
        comm->ctx->stats.staged_bytes += r->block;
        return;
    }
    if (r->coll == OFCCL__AG) {
        /* Our shards into our own region; padding zeroed so results are defined. */
        size_t off = 0;
        for (int t = 0; t < r->ntensors; t++) {
            const ofccl_tensor_t *x = &r->tensors[t].t;
            size_t slot = ofccl__bucket_chunk(x->count, n) * r->esize;
            size_t len = ofccl__bucket_shard(x->count, n, comm->rank) * r->esize;
            /* an empty shard may have a NULL pointer: no copy of 0 bytes reads it */
            ofccl__exec_io_copy(r, base + off, x->shard, len);
            ofccl__exec_fill(r, base + off + len, 0, slot - len);
            off += slot;
        }
        ofccl__exec_fill(r, base + off, 0, r->block - off);
        comm->ctx->stats.staged_bytes += r->block;
        return;
    }
    /* Reduce-scatter: every tensor's piece for rank q goes into q's region. */
    for (int q = 0; q < n; q++) {
        char *region = base + (size_t)q * r->block;
        size_t off = 0;
        for (int t = 0; t < r->ntensors; t++) {
            const ofccl_tensor_t *x = &r->tensors[t].t;
            size_t c = ofccl__bucket_chunk(x->count, n);
            size_t len = ofccl__bucket_shard(x->count, n, q) * r->esize;
            if (len)
                ofccl__exec_io_copy(r, region + off,
                                    (const char *)x->full + (size_t)q * c * r->esize, len);
            ofccl__exec_fill(r, region + off + len, 0, c * r->esize - len);
            off += c * r->esize;
        }
        ofccl__exec_fill(r, region + off, 0, r->block - off);
    }
    comm->ctx->stats.staged_bytes += r->block * (size_t)n;
}

/* The request's finish step: scatter the flat result into the tensors. */
static void copy_out(ofccl__req_t *r)
{
    const ofccl_comm_t *comm = r->comm;
    int n = comm->size;
    size_t off = 0;

    if (r->coll == OFCCL__BC) { /* every rank but the root: the whole tensors */
        for (int t = 0; t < r->ntensors && comm->rank != r->root; t++) {
            size_t len = r->tensors[t].t.count * r->esize;
            ofccl__exec_io_copy(r, r->tensors[t].t.full, (const char *)r->dst.ptr + off, len);
            off += len;
        }
        comm->ctx->stats.staged_bytes += comm->rank != r->root ? r->block : 0;
        return;
    }
    for (int t = 0; t < r->ntensors; t++) {
        const ofccl_tensor_t *x = &r->tensors[t].t;
        size_t c = ofccl__bucket_chunk(x->count, n);

        if (r->coll == OFCCL__AG) {
            for (int q = 0; q < n; q++) {
                size_t len = ofccl__bucket_shard(x->count, n, q) * r->esize;
                if (len)
                    ofccl__exec_io_copy(r, (char *)x->full + (size_t)q * c * r->esize,
                                        (const char *)r->dst.ptr + (size_t)q * r->block + off, len);
            }
        } else {
            size_t len = ofccl__bucket_shard(x->count, n, comm->rank) * r->esize;
            ofccl__exec_io_copy(r, x->shard, (const char *)r->out + off, len);
        }
        off += c * r->esize;
    }
    comm->ctx->stats.staged_bytes += r->coll == OFCCL__AG ? r->block * (size_t)n : r->block;
}

/* Where a tensor's memory lives: its full tensor's kind, or its shard's. */
static ofccl__mem_kind_t tensor_kind(const ofccl_tensor_t *x)
{
    ofccl__mem_kind_t k = x->full != NULL ? ofccl__mem_kind_of(x->full) : OFCCL__MEM_HOST;

    return k != OFCCL__MEM_HOST || x->shard == NULL ? k : ofccl__mem_kind_of(x->shard);
}

/* Validate the list and size the flat buffer; on success the request holds a copy. */
int ofccl__bucket_setup(ofccl_comm_t *comm, const char *what, const ofccl_tensor_t *tensors,
                        int ntensors, ofccl_dtype_t dtype, ofccl__req_t *r)
{
    size_t esize = ofccl_dtype_size(dtype), total = 0;
    size_t align = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_ALIGN);
    ofccl__mem_kind_t kind = OFCCL__MEM_HOST;
    int n = comm->size;

    if (esize == 0)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: unsupported dtype %d (supported: f32, f64, bf16, f16, u8)",
                                what, (int)dtype);
    if (ntensors < 0 || (ntensors > 0 && tensors == NULL))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: %d tensors at %p", what, ntensors,
                                (const void *)tensors);
    for (int t = 0; t < ntensors; t++) {
        const ofccl_tensor_t *x = &tensors[t];
        size_t c = slot_of(r, x->count);
        if (x->count > SIZE_MAX / 2 / esize || total > SIZE_MAX / 2 / (size_t)n - c * esize)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "%s: tensor %d: count %zu overflows", what, t, x->count);
        if (x->count > 0 && (x->full == NULL || (r->coll != OFCCL__BC && x->shard == NULL &&
                                                 ofccl__bucket_shard(x->count, n, comm->rank) > 0)))
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "%s: tensor %d (%zu elements) has a NULL %s pointer", what, t,
                                    x->count, x->full == NULL ? "full" : "shard");
        total += c * esize;
    }
    total = (total + align - 1) / align * align;
    if (r->tcap < ntensors) {
        /* Grow-only per slot: steady-state training posts allocate nothing. */
        ofccl__tensor_t *p = realloc(r->tensors, sizeof(*p) * (size_t)ntensors);
        if (p == NULL)
            return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "%s: no memory for %d tensors", what,
                                    ntensors);
        r->tensors = p;
        r->tcap = ntensors;
    }
    for (int t = 0; t < ntensors; t++) {
        r->tensors[t].t = tensors[t];
        r->tensors[t].kind = tensor_kind(&tensors[t]);
        if (kind == OFCCL__MEM_HOST)
            kind = r->tensors[t].kind;
        else if (r->tensors[t].kind != OFCCL__MEM_HOST && r->tensors[t].kind != kind)
            return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                    "%s: tensor %d is on cuda:%d, an earlier one on cuda:%d: a "
                                    "bucket's tensors live on one device",
                                    what, t, r->tensors[t].kind, kind);
    }
    r->ntensors = ntensors;
    r->layout_hash = ofccl__layout_hash(tensors, ntensors);
    r->layout = NULL; /* published into staging when posted */
    r->bucket = 1;
    r->finish = copy_out;
    /* Staging is host memory: the executor of the tensors' kind moves between
     * them (io), and the algorithm runs on staging. */
    if (ofccl__exec_choose(r, kind, OFCCL__MEM_HOST) != 0)
        return OFCCL_ERR_NOT_SUPPORTED;
    ofccl__exec_staged(r);
    r->dtype = dtype;
    r->esize = esize;
    r->block = total;
    r->count = total / esize;
    return 0;
}

/* One rank: the shard is the whole tensor, so the collective is a copy (or a
 * one-source reduction) done here. The request completes before the call
 * returns and runs no algorithm: r->algo is cleared so that nothing mistakes
 * the slot's previous algorithm for this request's (wait.c). */
int ofccl__bucket_one_rank(ofccl__req_t *r)
{
    int rc = 0, t;

    for (t = 0; t < r->ntensors && rc == 0; t++) {
        const ofccl_tensor_t *x = &r->tensors[t].t;
        const void *src = x->full;
        if (x->count == 0)
            continue;
        if (r->coll == OFCCL__AG && x->full != x->shard && ofccl__exec_io_on_host(r) &&
            ofccl__overlaps(x->full, x->count * r->esize, x->shard, x->count * r->esize))
            memmove(x->full, x->shard,
                    x->count * r->esize); /* host memory: nothing else overlaps */
        else if (r->coll == OFCCL__AG && x->full != x->shard)
            ofccl__exec_io_copy(r, x->full, x->shard, x->count * r->esize);
        else if (r->coll == OFCCL__RS)
            rc = ofccl__exec_io_reduce(r, r->op, x->shard, &src, 1, x->count,
                                       r->op.kind == OFCCL_OP_AVG ? 1 : 0);
    }
    if (rc) /* the only way a one-source reduction fails on checked arguments */
        return ofccl__comm_fail(r->comm, rc,
                                "ofccl_bucket_reduce_scatter: tensor %d: shard overlaps full but "
                                "is not its first element (in place at one rank means shard == "
                                "full)",
                                t - 1);
    ofccl__coll_done_now(r, 0);
    return 0;
}
