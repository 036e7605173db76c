/*
 * The posting step every collective entry point ends in: whether the GPU
 * peer class serves the buffers (asked before a slot is claimed, since
 * placing them may grow its pool, a collective), then the request claimed
 * and filled and handed to the peer class's stream program, or to the host
 * engine (host_post.c), which runs on the memory in place or staged. The
 * entry points never ask a buffer's memory kind (test/layers/check_layers.py).
 */
#include "coll.h"
#include "util.h"

/* The peer class's stream program of each collective. */
static const ofccl__algo_t *peer_class_algo(int coll)
{
    return coll == OFCCL__AG ? &ofccl__gpu_ag : coll == OFCCL__RS ? &ofccl__gpu_rs : &ofccl__gpu_bc;
}

int ofccl__post_peer_class(ofccl__req_t *r, const ofccl__gwhere_t *where)
{
    r->algo = peer_class_algo(r->coll);
    ofccl__gpu_place(r, where);
    return ofccl__coll_start(r);
}

int ofccl__post(ofccl_comm_t *comm, const char *what, int coll, const void *sendbuf, void *recvbuf,
                size_t count, ofccl_dtype_t dtype, ofccl_redop_t op, int root, size_t block,
                ofccl_req_t **req)
{
    /* Each buffer's kind asked once (a broadcast's only buffer is recvbuf). */
    const int kinds[2] = {ofccl__mem_kind_of(coll == OFCCL__BC ? NULL : sendbuf),
                          ofccl__mem_kind_of(recvbuf)};
    ofccl__gwhere_t where;
    ofccl__req_t *r;
    int peer = kinds[0] < 0 && kinds[1] < 0
                   ? 0
                   : ofccl__gpu_admit(comm, what, coll, sendbuf, recvbuf, kinds, block, &where);
    int rc = peer < 0 ? peer
                      : ofccl__coll_claim(comm, coll, sendbuf, recvbuf, count, dtype, op, root,
                                          block, &r);

    if (rc)
        return rc;
    rc = peer ? ofccl__post_peer_class(r, &where) : ofccl__post_host(r, kinds);
    if (rc)
        return ofccl__post_failed(r, rc);
    *req = r;
    return 0;
}

int ofccl__post_bucket(ofccl_comm_t *comm, const char *what, int coll,
                       const ofccl_tensor_t *tensors, int ntensors, ofccl_dtype_t dtype, int root,
                       ofccl_redop_t op, ofccl_req_t **req)
{
    ofccl__mem_kind_t kind;
    ofccl__gwhere_t where;
    ofccl__req_t *r;
    size_t block;
    int rc = ofccl__bucket_check(comm, what, coll, tensors, ntensors, dtype, &block, &kind);
    int peer = rc ? rc
               : kind == OFCCL__MEM_HOST
                   ? 0
                   : ofccl__gpu_admit_bucket(comm, what, coll, kind, block, &where);

    rc = peer < 0 ? peer : ofccl__coll_begin(comm, coll, &r);
    if (rc)
        return rc;
    r->root = root;
    r->op = op;
    rc = ofccl__bucket_setup(r, what, tensors, ntensors, dtype, block, kind);
    if (rc == 0) /* its executors: bucket_setup's, by the tensors' kind */
        rc = peer ? ofccl__post_peer_class(r, &where) : ofccl__post_engine(r);
    if (rc)
        return ofccl__post_failed(r, rc);
    *req = r;
    return 0;
}
