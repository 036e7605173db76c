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

static int none(ofccl__req_t *r, void *dst, size_t len, void *arg)
{
    (void)r, (void)dst, (void)len, (void)arg;
    return 0;
}

int ofccl__bucket_pack(ofccl__req_t *r, char *flat, const ofccl__bucket_io_t *io)
{
    int n = r->comm->size, me = r->comm->rank, rc = 0;
    int (*zero)(ofccl__req_t *, void *, size_t, void *) = io->zero ? io->zero : none;
    size_t off = 0;

    for (int t = 0; rc == 0 && t < r->ntensors; t++) {
        const ofccl_tensor_t *x = &r->tensors[t];
        size_t slot = slot_of(r, x->count) * r->esize;
        if (r->coll == OFCCL__BC) { /* the root's tensors, whole */
            rc = io->copy(r, flat + off, x->full, slot, io->arg);
        } else if (r->coll == OFCCL__AG) { /* this rank's shard into its region */
            char *at = flat + (size_t)me * r->block + off;
            size_t len = ofccl__bucket_shard(x->count, n, me) * r->esize;
            /* an empty shard may have a NULL pointer: no copy of 0 bytes reads it */
            if ((rc = len ? io->copy(r, at, x->shard, len, io->arg) : 0) == 0)
                rc = zero(r, at + len, slot - len, io->arg);
        } else { /* reduce-scatter: the tensor's piece q into region q */
            for (int q = 0; rc == 0 && q < n; q++) {
                char *at = flat + (size_t)q * r->block + off;
                size_t len = ofccl__bucket_shard(x->count, n, q) * r->esize;
                if ((rc = len ? io->copy(r, at, (const char *)x->full + (size_t)q * slot, len,
                                         io->arg)
                              : 0) == 0)
                    rc = zero(r, at + len, slot - len, io->arg);
            }
        }
        off += slot;
    }
    /* The regions' tails, past the last slot (alignment). */
    for (int q = 0; rc == 0 && q < (r->coll == OFCCL__BC ? 1 : n); q++)
        if (r->coll != OFCCL__AG || q == me)
            rc = zero(r, flat + (size_t)q * r->block + off, r->block - off, io->arg);
    return rc;
}

int ofccl__bucket_unpack(ofccl__req_t *r, const char *flat, const char *mine,
                         const ofccl__bucket_io_t *io)
{
    int n = r->comm->size, me = r->comm->rank, rc = 0;
    size_t off = 0;

    for (int t = 0; rc == 0 && t < r->ntensors; t++) {
        const ofccl_tensor_t *x = &r->tensors[t];
        size_t slot = slot_of(r, x->count) * r->esize;
        if (r->coll == OFCCL__BC) { /* every rank but the root: the whole tensors */
            rc = io->copy(r, x->full, flat + off, slot, io->arg);
        } else if (r->coll == OFCCL__AG) { /* every rank's shard into the full tensor */
            for (int q = 0; rc == 0 && q < n; q++) {
                size_t len = ofccl__bucket_shard(x->count, n, q) * r->esize;
                if (len)
                    rc = io->copy(r, (char *)x->full + (size_t)q * slot,
                                  flat + (size_t)q * r->block + off, len, io->arg);
            }
        } else { /* this rank's reduced piece into its shard */
            size_t len = ofccl__bucket_shard(x->count, n, me) * r->esize;
            rc = len ? io->copy(r, x->shard, mine + off, len, io->arg) : 0;
        }
        off += slot;
    }
    return rc;
}

/* The host engine's moves: through the request's executors, between the
 * caller's tensors and staging. */
static int exec_copy(ofccl__req_t *r, void *dst, const void *src, size_t len, void *arg)
{
    (void)arg;
    return ofccl__exec_io_copy(r, dst, src, len);
}

static int exec_zero(ofccl__req_t *r, void *dst, size_t len, void *arg)
{
    (void)arg;
    return ofccl__exec_fill(r, dst, 0, len);
}

static const ofccl__bucket_io_t exec_io = {exec_copy, exec_zero, NULL};

void ofccl__bucket_copy_in(ofccl__req_t *r, void *flat)
{
    ofccl__bucket_pack(r, flat, &exec_io); /* the executor keeps a failure for the request */
    r->comm->ctx->stats.staged_bytes +=
        r->block * (r->coll == OFCCL__RS ? (size_t)r->comm->size : 1);
}

/* The request's finish step: the flat result into the tensors. */
static void copy_out(ofccl__req_t *r)
{
    const ofccl_comm_t *comm = r->comm;

    if (r->coll == OFCCL__BC && comm->rank == r->root)
        return;
    ofccl__bucket_unpack(r, r->dst.ptr, r->out, &exec_io);
    comm->ctx->stats.staged_bytes +=
        r->coll == OFCCL__AG ? r->block * (size_t)comm->size : r->block;
}

/* Every pointer of the bucket this rank reads or writes: a non-empty full
 * tensor (k 0), or a non-empty shard (k 1; all-gather, reduce-scatter). An
 * empty shard may point past its tensor's end, which is no memory at all. */
static const void *used(const ofccl_comm_t *comm, int coll, const ofccl_tensor_t *x, int k)
{
    if (k == 0)
        return x->count > 0 ? x->full : NULL;
    return coll != OFCCL__BC && ofccl__bucket_shard(x->count, comm->size, comm->rank) > 0 ? x->shard
                                                                                          : NULL;
}

static const char *const part_name[2] = {"full", "shard"};

/* Where the bucket's memory lives: every pointer this rank uses in one
 * place, host memory or one GPU (the first GPU pointer decides). */
static int bucket_kind(ofccl_comm_t *comm, const char *what, int coll,
                       const ofccl_tensor_t *tensors, int ntensors, ofccl__mem_kind_t *kind)
{
    int at = -1;

    *kind = OFCCL__MEM_HOST;
    for (int i = 0; i < 2 * ntensors && at < 0; i++) {
        const void *p = used(comm, coll, &tensors[i / 2], i % 2);
        if (p != NULL && (*kind = ofccl__mem_kind_of(p)) != OFCCL__MEM_HOST)
            at = i;
    }
    for (int i = 0; at >= 0 && i < 2 * ntensors; i++) {
        const void *p = used(comm, coll, &tensors[i / 2], i % 2);
        ofccl__mem_kind_t k = p != NULL ? ofccl__mem_kind_of(p) : *kind;
        if (k == *kind)
            continue;
        if (k == OFCCL__MEM_HOST)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "%s: tensor %d's %s is host memory, tensor %d's %s on GPU %d: "
                                    "a bucket is all in host memory or all on one GPU",
                                    what, i / 2, part_name[i % 2], at / 2, part_name[at % 2],
                                    *kind);
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: tensor %d's %s is on GPU %d, tensor %d's %s on GPU %d: a "
                                "bucket is all in host memory or all on one GPU",
                                what, i / 2, part_name[i % 2], k, at / 2, part_name[at % 2], *kind);
    }
    return 0;
}

int ofccl__bucket_check(ofccl_comm_t *comm, const char *what, int coll,
                        const ofccl_tensor_t *tensors, int ntensors, ofccl_dtype_t dtype,
                        size_t *block, ofccl__mem_kind_t *kind)
{
    size_t esize = ofccl_dtype_size(dtype), total = 0;
    size_t align = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_ALIGN);
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
        size_t c = coll == OFCCL__BC ? x->count : ofccl__bucket_chunk(x->count, n);
        if (x->count > SIZE_MAX / 2 / esize || total > SIZE_MAX / 2 / (size_t)n - c * esize)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "%s: tensor %d: count %zu overflows", what, t, x->count);
        if (x->count > 0 && (x->full == NULL || (coll != OFCCL__BC && x->shard == NULL &&
                                                 ofccl__bucket_shard(x->count, n, comm->rank) > 0)))
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "%s: tensor %d (%zu elements) has a NULL %s pointer", what, t,
                                    x->count, x->full == NULL ? "full" : "shard");
        total += c * esize;
    }
    *block = (total + align - 1) / align * align;
    return bucket_kind(comm, what, coll, tensors, ntensors, kind);
}

int ofccl__bucket_setup(ofccl__req_t *r, const char *what, const ofccl_tensor_t *tensors,
                        int ntensors, ofccl_dtype_t dtype, size_t block, ofccl__mem_kind_t kind)
{
    ofccl_comm_t *comm = r->comm;

    if (r->tcap < ntensors) {
        /* Grow-only per slot: steady-state training posts allocate nothing. */
        ofccl_tensor_t *p = realloc(r->tensors, sizeof(*p) * (size_t)ntensors);
        if (p == NULL)
            return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "%s: no memory for %d tensors", what,
                                    ntensors);
        r->tensors = p;
        r->tcap = ntensors;
    }
    if (ntensors > 0)
        memcpy(r->tensors, tensors, sizeof(*tensors) * (size_t)ntensors);
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
    r->esize = ofccl_dtype_size(dtype);
    r->block = block;
    r->count = block / r->esize;
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
        const ofccl_tensor_t *x = &r->tensors[t];
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
