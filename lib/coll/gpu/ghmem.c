/*
 * Whether GPU memory that the GPU peer class does not serve (peers on other
 * hosts, a libfabric provider on one host) goes through the fabric provider
 * as GPU memory: libfabric's FI_HMEM, asked for when the context is made
 * (OFCCL_GPU_FABRIC, lib/core/ctx.c) and found where the provider has an
 * FI_HMEM entry and its libfabric was built with CUDA (Debian's has none:
 * there this path is said unavailable once, and the host engine stages).
 *
 * Each rank checks at the communicator's first GPU call that its GPU's
 * memory registers with its transport and that its GPU's executor can be
 * made, and the ranks agree (comm->dev_reg). Then the host engine runs an
 * all-gather or a broadcast on the caller's GPU buffers themselves, as any
 * stream-ordered request (lib/coll/post.c, ofccl__resolve_device): the
 * output is registered for the request, the all-gather's own block copied
 * to its place on the caller's stream, the request gated on that stream,
 * every transfer an RMA from and into device memory (the direct algorithm:
 * never eager, whose words are CPU copies, and nothing forwarded, since a
 * provider may signal a write into device memory before its device copy has
 * landed), and the caller's stream released once the transfers are done.
 * Only a provider that moves GPU memory without CUDA calls of its own
 * (GPUDirect RDMA) serves: one that calls CUDA (shm, tcp) would wait on
 * CUDA's legacy default stream for a stream held for the collective itself
 * (providers/fabric/open.c). A reduce-scatter
 * stays staged: its sums would need the peers' blocks landed in device
 * memory, which this path does not plan.
 */
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "gcomm.h"
#include "util.h"

#define PROBE_BYTES 65536

/* Can this rank register its GPU's memory with the communicator's
 * transport, and make its GPU's executor? 0, or a reason in `why`. */
static int probe(ofccl__gcomm_t *gc, char *why, size_t len)
{
    ofccl_comm_t *comm = gc->comm;
    ofccl__err_t e = {0};
    ofccl__mr_t *mr = NULL;
    void *p = NULL;
    int rc;

    if (gc->g == NULL) {
        snprintf(why, len, "no CUDA driver");
        return OFCCL_ERR_NOT_SUPPORTED;
    }
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank || ofccl__ep_reaches(comm->ep, r, gc->dev))
            continue;
        if (ofccl__comm_caps(comm)->hmem_why[0] != '\0')
            snprintf(why, len, "provider %s takes no GPU memory: %s", ofccl__comm_caps(comm)->name,
                     ofccl__comm_caps(comm)->hmem_why);
        else
            snprintf(why, len,
                     "provider %s reaches rank %d's host memory only (not opened for GPU memory: "
                     "no FI_HMEM entry%s)",
                     ofccl__comm_caps(comm)->name, r,
                     ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_GPU_FABRIC) == 0
                         ? ", or CUDA was not loaded when the context was made"
                         : "");
        return OFCCL_ERR_NOT_SUPPORTED;
    }
    if ((rc = ofccl__gpu_mem_alloc(gc->g, gc->dev, PROBE_BYTES, &p, &e)) != 0) {
        ofccl__strlcpy(why, e.msg, len);
        return rc;
    }
    rc = ofccl__mr_reg(comm->ep, p, PROBE_BYTES, OFCCL__ACC_LOCAL | OFCCL__ACC_REMOTE_WRITE, &mr,
                       &e);
    if (rc == 0 && mr->kind != gc->dev) {
        snprintf(why, len, "GPU %d's memory registered as kind %d", gc->dev, mr->kind);
        rc = OFCCL_ERR_INTERNAL;
    } else if (rc != 0) {
        ofccl__strlcpy(why, e.msg, len);
    }
    if (mr != NULL)
        ofccl__mr_dereg(mr);
    ofccl__gpu_mem_free(gc->g, gc->dev, p);
    if (rc == 0 && ofccl__gpu_exec_state(gc->g, gc->dev, gc->sms, &e) == NULL) {
        snprintf(why, len, "GPU %d's executor for the host engine: %.200s", gc->dev, e.msg);
        rc = OFCCL_ERR_NOT_SUPPORTED;
    }
    return rc;
}

int ofccl__ghmem_setup(ofccl__gcomm_t *gc)
{
    ofccl_comm_t *comm = gc->comm;
    int how = (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_GPU_FABRIC);
    int mine, first = 0, who = -1, whose = -1, rc;
    char why[400] = "";

    /* Every rank decides alike from what they share: the setting. Any
     * reason to stage (another host, a transport that maps no peer memory,
     * GPUs without P2P) will do. */
    if (how == 2)
        return 0;
    mine = probe(gc, why, sizeof(why)) == 0 ? 0 : 1;
    if ((rc = ofccl__agree(comm, mine, comm->rank, &first, &who, &whose)) != 0)
        return rc;
    comm->dev_reg = first == 0;
    comm->dev_landed = comm->dev_reg;
    for (int r = 0; r < comm->size; r++) /* the same answer on every rank: one host or not */
        comm->dev_landed &= ofccl__ep_peer_class(comm->ep, r) == OFCCL__PEER_LOCAL;
    if (comm->dev_reg) {
        /* made by probe(): the device's executor, for what the host engine
         * copies itself (its staging, should a registration fail) */
        ofccl__err_t e = {0};

        rc = ofccl__exec_register(comm->ctx, gc->dev, &ofccl__gpu_exec_ops,
                                  ofccl__gpu_exec_state(gc->g, gc->dev, gc->sms, &e));
        if (rc != 0)
            return ofccl__comm_fail(comm, rc, "registering GPU %d's executor", gc->dev);
        return 0;
    }
    if (mine)
        OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL,
                    "rank %d: communicator %u: FI_HMEM unavailable here: %s", comm->rank, comm->id,
                    why);
    if (how == 1) /* this rank's reason where it has one, else the first one's rank */
        return ofccl__comm_fail(comm, OFCCL_ERR_NOT_SUPPORTED,
                                "OFCCL_GPU_FABRIC=hmem: rank %d cannot register its GPU's memory "
                                "with the fabric provider%s%s",
                                mine ? comm->rank : who, mine ? ": " : " (its log says why)",
                                mine ? why : "");
    return 0;
}
