/* Who writes to whom: shared by the all-gather and reduce-scatter twins. */
#include "coll.h"

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
