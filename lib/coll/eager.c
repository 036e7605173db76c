/* What the eager algorithms share: sending {header, payload} to the peers the
 * plan writes to, and checking every writer's header once all have arrived. */
#include <string.h>

#include "coll.h"

int ofccl__eager_send(ofccl__req_t *r, size_t stride, size_t len)
{
    ofccl_comm_t *comm = r->comm;
    int n = comm->size, all_sent = 1;

    for (int k = 1; k < n; k++) {
        int p = (comm->rank + k) % n;
        const char *payload = (const char *)r->sendbuf + (size_t)p * stride;
        uint8_t *o;
        int rc;
        if (r->sent[p] || !r->i_write_to[p])
            continue;
        if (ofccl__eager_mapped(comm, p)) {
            ofccl__eager_store(r, p, payload, len);
            r->sent[p]++;
            continue;
        }
        o = ofccl__eager_out(comm, r->slot, p);
        ofccl__eager_header(r, o);
        if ((rc = ofccl__exec_copy(r, o + OFCCL__EAGER_HDR, payload, len)) != 0)
            return rc;
        rc = ofccl__coll_put(r, p, o, comm->ctrl_mr, OFCCL__EAGER_HDR + len, 0, 0);
        if (rc == OFCCL_ERR_AGAIN) {
            all_sent = 0;
            continue;
        }
        if (rc)
            return rc;
    }
    return all_sent;
}

int ofccl__eager_land(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;

    for (int p = 0; p < comm->size; p++) {
        const uint64_t *h = (const uint64_t *)ofccl__eager_in(comm, r->seq, p);
        ofccl__desc_expect_t x = {.seq = r->seq,
                                  .fingerprint = r->fingerprint,
                                  .count = r->count,
                                  .from = p,
                                  .me = comm->rank};
        char why[256];
        int rc, field;
        if (p == comm->rank || !r->writes_to_me[p])
            continue;
        rc = ofccl__eager_check(h, &x, why, sizeof(why), &field); /* a message only on failure */
        /* The others are told: one that pairs only with the root (a
         * broadcast) never sees this header. */
        if (rc == OFCCL_ERR_MISMATCH)
            ofccl__notice_mismatch(comm, r->seq, p, field);
        if (rc)
            return ofccl__coll_fail(r, rc, "%s", why);
    }
    return 0;
}
