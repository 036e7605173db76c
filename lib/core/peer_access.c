/*
 * What an algorithm reaches of its peers for a request: a peer's buffer
 * mapped in place (read, or its output written), as its descriptor names it,
 * and the control words a request shares with a peer (claims, the data that
 * passed through, what was taken from whom).
 */
#include "engine_impl.h"
#include "util.h"

int ofccl__coll_map_peer(ofccl__req_t *r, int p, uint64_t off, size_t len, const void **at)
{
    ofccl__err_t e;
    void *ptr = NULL;
    int rc = ofccl__ep_peer_map(r->comm->ep, p, &r->peer_rk[p], r->peer_off[p] + off, len,
                                OFCCL__ACC_REMOTE_READ, &ptr, &e);

    if (rc)
        return ofccl__coll_fail(r, rc, "rank %d on %s: its buffer cannot be read in place: %s", p,
                                ofccl__comm_host(r->comm, p), e.msg);
    *at = ptr;
    return 0;
}

static int map_second(ofccl__req_t *r, int p, unsigned access, char **at, ofccl__err_t *e)
{
    const ofccl_comm_t *comm = r->comm;
    const uint64_t *d = (const uint64_t *)&comm->ctrl[ofccl__ctrl_desc_in(comm->size, r->slot, p)];
    ofccl__rkey_t rk = {d[12], d[13], d[14]};
    void *ptr = NULL;
    int rc;

    *at = NULL;
    if (rk.len == 0)
        return 0;
    rc = ofccl__ep_peer_map(comm->ep, p, &rk, d[15], r->block, access, &ptr, e);
    *at = ptr;
    return rc;
}

int ofccl__coll_map_peer_out(ofccl__req_t *r, int p, char **at)
{
    ofccl__err_t e;
    int rc = map_second(r, p, OFCCL__ACC_REMOTE_WRITE, at, &e);

    if (rc)
        return ofccl__coll_fail(r, rc, "rank %d on %s: its output cannot be written in place: %s",
                                p, ofccl__comm_host(r->comm, p), e.msg);
    return 0;
}

int ofccl__coll_map_peer_src(ofccl__req_t *r, int p, char **at)
{
    ofccl__err_t e;
    int rc = map_second(r, p, OFCCL__ACC_REMOTE_READ, at, &e);

    if (rc)
        OFCCL__DEBUG(&r->comm->ctx->log, OFCCL__SUB_COLL,
                     "rank %d: %s #%llu: rank %d's source is gone (its collective ended): %s",
                     r->comm->rank, ofccl__coll_name(r->coll), (unsigned long long)r->seq, p,
                     e.msg);
    return rc;
}

bool ofccl__coll_peer_out_announced(const ofccl__req_t *r, int p)
{
    const ofccl_comm_t *comm = r->comm;

    return comm->ctrl[ofccl__ctrl_desc_in(comm->size, r->slot, p) + 14] != 0;
}

_Atomic uint64_t *ofccl__coll_share_word(const ofccl__req_t *r, int owner, bool through)
{
    const ofccl_comm_t *comm = r->comm;
    size_t w =
        through ? ofccl__ctrl_through(comm->size, r->slot) : ofccl__ctrl_claim(comm->size, r->slot);

    return owner == comm->rank ? &comm->ctrl[w] : &comm->peer_ctrl_at[owner][w];
}

_Atomic uint64_t *ofccl__coll_take_word(const ofccl__req_t *r, int owner, int from)
{
    const ofccl_comm_t *comm = r->comm;
    size_t w = ofccl__ctrl_take(comm->size, r->slot, from);

    return owner == comm->rank ? &comm->ctrl[w] : &comm->peer_ctrl_at[owner][w];
}
