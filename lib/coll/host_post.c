/*
 * Posting on the host engine: a request claimed and filled, its executors
 * chosen by its buffers' memory kinds, and handed to the collective's own
 * posting (allgather.c, reduce_scatter.c, broadcast.c) or done at once on
 * one rank. Below the GPU peer class, which uses it for its setup
 * exchanges (ofccl__allgather_blocking, ofccl__agree): the posting step
 * that asks the peer class first is post.c.
 */
#include <stdlib.h>

#include "coll.h"
#include "pool.h"
#include "util.h"

int ofccl__coll_claim(ofccl_comm_t *comm, int coll, const void *sendbuf, void *recvbuf,
                      size_t count, ofccl_dtype_t dtype, ofccl_redop_t op, int root, size_t block,
                      ofccl__req_t **out)
{
    ofccl__req_t *r;
    int rc = ofccl__coll_begin(comm, coll, &r);

    if (rc)
        return rc;
    r->sendbuf = coll == OFCCL__BC ? recvbuf : sendbuf;
    r->recvbuf = recvbuf;
    r->count = count;
    r->dtype = dtype;
    r->esize = ofccl_dtype_size(dtype);
    r->block = block;
    r->op = op;
    r->root = root;
    *out = r;
    return 0;
}

/* One rank: the collective is a local copy or a local reduction (a
 * broadcast's is nothing: the root's buffer is the result). */
static int post_local(ofccl__req_t *r)
{
    int rc = 0;

    if (r->coll == OFCCL__BC) {
        /* nothing moves */
    } else if (r->coll == OFCCL__AG) {
        /* Distinct or the same: any other overlap is refused by the entry point. */
        if (r->block && r->sendbuf != r->recvbuf)
            rc = ofccl__exec_io_copy(r, r->recvbuf, r->sendbuf, r->block);
    } else if (r->block) {
        const void *src = r->sendbuf;
        rc = ofccl__exec_io_reduce(r, r->op, r->recvbuf, &src, 1, r->count,
                                   r->op.kind == OFCCL_OP_AVG ? 1 : 0);
    }
    ofccl__coll_done_now(r, rc);
    return rc;
}

int ofccl__post_engine(ofccl__req_t *r)
{
    if (r->comm->size == 1)
        return r->bucket ? ofccl__bucket_one_rank(r) : post_local(r);
    return r->coll == OFCCL__AG   ? ofccl__post_allgather(r)
           : r->coll == OFCCL__RS ? ofccl__post_reduce_scatter(r)
                                  : ofccl__post_broadcast(r);
}

int ofccl__post_host(ofccl__req_t *r, const int kinds[2])
{
    int rc = ofccl__exec_choose(r, kinds[0], kinds[1]);

    return rc != 0 ? rc : ofccl__post_engine(r);
}

int ofccl__post_failed(ofccl__req_t *r, int rc)
{
    r->state = OFCCL__REQ_FREE;
    ofccl__mem_call_release(r);
    return rc;
}

int ofccl__allgather_blocking(ofccl_comm_t *comm, const void *in, void *out, size_t bytes)
{
    ofccl__req_t *r;
    int rc = ofccl__coll_claim(comm, OFCCL__AG, in, out, bytes, OFCCL_U8,
                               (ofccl_redop_t){OFCCL_OP_SUM, 1}, -1, bytes, &r);

    if (rc != 0)
        return rc;
    /* Setup records: host memory, always. */
    if ((rc = ofccl__post_host(r, (const int[2]){OFCCL__MEM_HOST, OFCCL__MEM_HOST})) != 0)
        return ofccl__post_failed(r, rc);
    rc = ofccl_wait(r);
    ofccl_req_free(r);
    return rc;
}

int ofccl__agree(ofccl_comm_t *comm, int mine, int about, int *first, int *who, int *whose)
{
    enum { REC = 16 };
    uint8_t rec[REC] = {0}, *all = malloc(REC * (size_t)comm->size);
    int rc;

    *first = 0;
    if (all == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "agreeing: no memory");
    ofccl__put_le64(rec, (uint64_t)(int64_t)mine);
    ofccl__put_le64(rec + 8, (uint64_t)(int64_t)about);
    rc = ofccl__allgather_blocking(comm, rec, all, REC);
    for (int r = 0; rc == 0 && r < comm->size && *first == 0; r++) {
        *first = (int)(int64_t)ofccl__get_le64(all + REC * (size_t)r);
        *who = r;
        *whose = (int)(int64_t)ofccl__get_le64(all + REC * (size_t)r + 8);
    }
    free(all);
    return rc;
}
