/*
 * What the collective entry points check (every message names the call and
 * the argument), and where a request on device memory runs for the host
 * engine: on the memory in place, or staged (ofccl__resolve_device).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "pool.h"
#include "util.h"

const char *ofccl__dtype_name(ofccl_dtype_t dtype)
{
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "u8"};
    return (unsigned)dtype < OFCCL_DTYPE_COUNT ? names[dtype] : "?";
}

bool ofccl__overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    const char *x = a, *y = b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* Checks shared by both collectives; on success *block is the bytes per rank. */
int ofccl__check_args(ofccl_comm_t *comm, const char *what, const void *sendbuf, void *recvbuf,
                      size_t count, ofccl_dtype_t dtype, ofccl_req_t **req, size_t *block)
{
    size_t esize = ofccl_dtype_size(dtype);

    if (req == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: req is NULL", what);
    if (esize == 0)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: unsupported dtype %d (supported: f32, f64, bf16, f16, u8)",
                                what, (int)dtype);
    if (count > SIZE_MAX / esize / (size_t)comm->size)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: count %zu of %s overflows the address space with %d ranks",
                                what, count, ofccl__dtype_name(dtype), comm->size);
    if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: %s is NULL", what,
                                sendbuf == NULL ? "sendbuf" : "recvbuf");
    *block = count * esize;
    return 0;
}

/* A buffer inside a pool buffer or registered range must fit in it: that much
 * ofccl can check (plain malloc'd memory it cannot). */
int ofccl__check_room(ofccl_comm_t *comm, const char *what, const char *name, const void *buf,
                      size_t need)
{
    size_t room = need ? ofccl__mem_known_room(comm, buf) : SIZE_MAX;

    if (room < need)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: %s is too small: %zu bytes needed, the pool buffer or "
                                "registered range holding it has %zu from there",
                                what, name, need, room);
    return 0;
}

int ofccl__check_redop(ofccl_comm_t *comm, const char *what, ofccl_dtype_t dtype, ofccl_redop_t op)
{
    if (dtype == OFCCL_U8)
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "%s: u8 is raw bytes, which have no sum: reduce a typed dtype "
                                "(f32, f64, bf16, f16)",
                                what);
    if ((unsigned)op.kind >= OFCCL_OP_COUNT)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "%s: unsupported op %d (supported: sum, avg, premul-sum)", what,
                                (int)op.kind);
    if (op.kind == OFCCL_OP_PREMUL_SUM && !isfinite(op.scalar))
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "%s: premul scalar must be finite",
                                what);
    return 0;
}

void ofccl__staged_out(ofccl__req_t *r, size_t off, size_t len)
{
    if (len > 0 && r->status == 0) {
        ofccl__exec_io_copy(r, (char *)r->copy_out + off, (char *)r->dst.ptr + off, len);
        if (r->dst.kind == OFCCL__MEM_HOST) /* GPU staging is not host staging */
            r->comm->ctx->stats.staged_bytes += len;
    }
}

void ofccl__staged_landed(ofccl__req_t *r)
{
    for (unsigned i = 0; i < r->nfrom; i++) {
        int p = r->from[i];

        while (r->out_cnt[p] < r->from_cnt[p]) {
            uint32_t u = r->algo->unit_of(r, p, r->out_cnt[p]);
            size_t off, len;

            if (u >= OFCCL__MAX_UNITS || r->unit_cnt[u] == 0)
                break; /* a later one of p's came first: next pass */
            r->algo->landed(r, u, &off, &len);
            ofccl__staged_out(r, off, len);
            r->out_cnt[p]++;
        }
    }
}

int ofccl__resolve_device(ofccl__req_t *r, void *buf, size_t len)
{
    ofccl_comm_t *comm = r->comm;
    bool on_gpu;
    int rc;

    if (ofccl__exec_io_on_host(r))
        return 0;
    /* Registered memory; or, where writes land before their signal (the
     * local transport), any: an unregistered output lands in a staging set
     * on the GPU (registered once, mapped by the peers once) and is copied
     * out there, as the peer class's scratch is; no registration per call,
     * no host memory. */
    on_gpu = !r->bucket && len > 0 && (comm->dev_landed || ofccl__mem_find(comm, buf, len) != NULL);
    if (!on_gpu && !r->bucket && len > 0 && comm->dev_reg) {
        /* registered with the transport (FI_HMEM) for the request; memory
         * it cannot take is staged, said at info level */
        rc = ofccl__mem_call_register(r, buf, len);
        if (rc != 0 && rc != OFCCL_ERR_NOT_SUPPORTED)
            return rc;
        on_gpu = rc == 0;
    }
    if (!on_gpu) {
        ofccl__exec_staged(r);
        return 0;
    }
    comm->ctx->stats.hmem_bytes += len;
    return 0;
}
