/* Who writes to whom: shared by the all-gather and reduce-scatter twins. */
#include <string.h>

#include "coll.h"
#include "util.h"

/* Direct: every rank writes to every other rank, one unit per chunk. */
int ofccl__plan_direct(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++)
        r->writes_to_me[p] = r->i_write_to[p] = p != comm->rank;
    r->units_in = (unsigned)(comm->size - 1) * r->nchunks;
    return 0;
}

/* Ring: the left neighbour writes to us, we write to the right one; n-1 steps. */
int ofccl__plan_ring(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size;

    r->writes_to_me[(comm->rank - 1 + n) % n] = 1;
    r->i_write_to[(comm->rank + 1) % n] = 1;
    r->units_in = (unsigned)(n - 1) * r->nchunks;
    return 0;
}

int ofccl__direct_writer_of(const ofccl__req_t *r, uint32_t unit)
{
    return r->nchunks ? (int)(unit / r->nchunks) : -1;
}

uint32_t ofccl__direct_unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    return (uint32_t)p * r->nchunks + k;
}

void ofccl__direct_landed(const ofccl__req_t *r, uint32_t unit, size_t *off, size_t *len)
{
    unsigned c = unit % r->nchunks;

    *off = (size_t)(unit / r->nchunks) * r->block + (size_t)c * r->chunk;
    *len = ofccl__chunk_len(r, c);
}

bool ofccl__direct_chunk_in(const ofccl__req_t *r, unsigned c)
{
    for (int p = 0; p < r->comm->size; p++)
        if (r->writes_to_me[p] && r->unit_cnt[(size_t)p * r->nchunks + c] == 0)
            return false;
    return true;
}

int ofccl__ring_writer_of(const ofccl__req_t *r, uint32_t unit)
{
    (void)unit;
    return (r->comm->rank - 1 + r->comm->size) % r->comm->size;
}

uint32_t ofccl__ring_unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    (void)r;
    (void)p;
    return k;
}

int ofccl__one_writer_of(const ofccl__req_t *r, uint32_t unit)
{
    (void)r;
    return (int)unit;
}

uint32_t ofccl__one_unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    (void)r;
    (void)k;
    return (uint32_t)p;
}

int ofccl__ag_put_own(ofccl__req_t *r, int p)
{
    const char *src = r->src.ptr;
    size_t mine = (size_t)r->comm->rank * r->block;

    while (r->sent[p] < r->nchunks) {
        unsigned c = r->sent[p];
        size_t off = (size_t)c * r->chunk, len = ofccl__chunk_len(r, c);
        int rc;

        if (!ofccl__exec_in(r, off + len))
            return 0; /* not copied in yet (OFCCL__BUF_OWN_PIECES) */
        rc = ofccl__coll_put(r, p, src + off, r->src.mr, len, mine + off,
                             ofccl__direct_unit_of(r, r->comm->rank, c));
        if (rc == OFCCL_ERR_AGAIN)
            return 0;
        if (rc)
            return rc;
    }
    return 0;
}

int ofccl__ag_own_start(ofccl__req_t *r)
{
    ofccl__own_copy_t *own = ofccl__algo_priv(r);
    char *place = (char *)r->dst.ptr + (size_t)r->comm->rank * r->block;

    /* Sent from sendbuf (OFCCL__BUF_OWN_BEHIND): copied to its place behind. */
    own->dst = r->block && r->src.ptr != place ? place : NULL;
    return 0;
}

bool ofccl__ag_copy_own(ofccl__req_t *r)
{
    ofccl__own_copy_t *own = ofccl__algo_priv(r);
    unsigned upto = r->nchunks;

    if (own->dst == NULL)
        return true;
    for (int p = 0; p < r->comm->size; p++)
        if (r->i_write_to[p])
            upto = OFCCL__MIN(upto, r->sent[p]);
    for (; own->done < upto; own->done++) {
        size_t off = (size_t)own->done * r->chunk;
        if (ofccl__exec_copy(r, own->dst + off, (const char *)r->src.ptr + off,
                             ofccl__chunk_len(r, own->done)) != 0)
            return false; /* r failed, and says why */
    }
    return own->done == r->nchunks;
}
