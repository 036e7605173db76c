/*
 * A communicator's GPU state, set up on its first GPU call (collective): which
 * GPU each rank uses, whether the GPU peer class fits (one host, every pair of
 * GPUs P2P, peers' shared memory mapped here), and, where it does, the flag
 * regions every rank's streams write and wait on. Every decision is taken
 * from what all ranks exchanged, so they all take the same path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcomm.h"
#include "pool.h"
#include "util.h"

#define REC1 48 /* rc, device, bus id[32] */
#define REC3 32 /* rc, base, key, len */

enum verdict {
    V_OK = 0,
    V_NO_DRIVER,  /* this rank has no GPU */
    V_OTHER_HOST, /* a rank is on another host */
    V_NO_MAP,     /* the transport cannot map peers' memory here */
    V_INVISIBLE,  /* a peer's GPU is not visible in this process */
    V_NO_P2P,     /* a pair of GPUs cannot reach each other */
    V_REGION,     /* the flag region could not be set up */
    V_OFF,        /* OFCCL_GPU_PEER_CLASS=0 */
};

static const char *verdict_text(int v)
{
    switch (v) {
    case V_NO_DRIVER:
        return "it has no usable GPU";
    case V_OFF:
        return "the GPU peer class is off (OFCCL_GPU_PEER_CLASS=0)";
    case V_OTHER_HOST:
        return "the ranks are on more than one host (GPUs across hosts are staged)";
    case V_NO_MAP:
        return "its transport cannot map its peers' shared memory (the local transport can: "
               "OFCCL_PROVIDER=local or auto on one host)";
    case V_INVISIBLE:
        return "a peer's GPU is not visible in its process (CUDA_VISIBLE_DEVICES hides it)";
    case V_NO_P2P:
        return "its GPU cannot reach a peer's directly (no P2P)";
    case V_REGION:
        return "its flag region could not be set up";
    default:
        return "?";
    }
}

ofccl__gcomm_t *ofccl__gcomm_of(const ofccl_comm_t *comm)
{
    return comm->gpu;
}

/* Where the GPU peer class fits here: round 1 every rank's GPU, then each
 * rank's own verdict. */
static int local_verdict(ofccl_comm_t *comm, ofccl__gcomm_t *gc, const uint8_t *all, int *about)
{
    *about = -1;
    for (int r = 0; r < comm->size; r++)
        if ((int64_t)ofccl__get_le64(all + REC1 * (size_t)r) != 0) {
            *about = r;
            return V_NO_DRIVER;
        }
    if (gc->g == NULL)
        return V_NO_DRIVER;
    if (!ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_GPU_PEER_CLASS))
        return V_OFF;
    if (comm->nnodes > 1)
        return V_OTHER_HOST;
    /* Every peer's flag region is mapped here: by the local transport, alone
     * or inside a composite (one host: every peer is same-host). */
    if (!ofccl__comm_caps(comm)->peer_map && !ofccl__comm_caps(comm)->peer_map_some)
        return V_NO_MAP;
    for (int r = 0; r < comm->size; r++) {
        char bus[33], why[128];
        int d;

        memcpy(bus, all + REC1 * (size_t)r + 16, 32);
        bus[32] = '\0';
        d = ofccl__gpu_device_by_bus(gc->g, bus);
        *about = r;
        if (d < 0)
            return V_INVISIBLE;
        if (!ofccl__gpu_can_access(gc->g, gc->dev, d, why, sizeof(why)))
            return V_NO_P2P;
    }
    *about = -1;
    return V_OK;
}

/* Round 3: every rank's flag region, mapped here and registered with CUDA. */
static int flag_regions(ofccl_comm_t *comm, ofccl__gcomm_t *gc)
{
    uint8_t mine[REC3] = {0}, *all = malloc(REC3 * (size_t)comm->size);
    ofccl__err_t e = {0};
    int rc = 0, local = 0;

    gc->region_len = (ofccl__gf_words(comm->size) * sizeof(uint64_t) + 4095) & ~(size_t)4095;
    gc->fh = calloc((size_t)comm->size, sizeof(*gc->fh));
    gc->fd = calloc((size_t)comm->size, sizeof(*gc->fd));
    gc->region = ofccl__prov_mem_alloc(comm->ep, gc->region_len);
    if (all == NULL || gc->fh == NULL || gc->fd == NULL || gc->region == NULL)
        local = OFCCL_ERR_NO_MEMORY;
    else if ((local = ofccl__mr_reg(comm->ep, gc->region, gc->region_len,
                                    OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_READ,
                                    &gc->region_mr, &e)) == 0) {
        memset(gc->region, 0, gc->region_len);
        ofccl__put_le64(mine + 8, gc->region_mr->base);
        ofccl__put_le64(mine + 16, gc->region_mr->key);
        ofccl__put_le64(mine + 24, gc->region_mr->len);
    }
    ofccl__put_le64(mine, (uint64_t)(int64_t)local);
    if (all == NULL || (rc = ofccl__allgather_blocking(comm, mine, all, REC3)) != 0) {
        free(all);
        return rc ? rc : OFCCL_ERR_NO_MEMORY;
    }
    for (int r = 0; r < comm->size && local == 0; r++) {
        ofccl__rkey_t rk = {ofccl__get_le64(all + REC3 * (size_t)r + 8),
                            ofccl__get_le64(all + REC3 * (size_t)r + 16),
                            ofccl__get_le64(all + REC3 * (size_t)r + 24)};
        void *h = gc->region;

        if ((int64_t)ofccl__get_le64(all + REC3 * (size_t)r) != 0) {
            local = OFCCL_ERR_REMOTE_ERROR;
            break;
        }
        if (r != comm->rank)
            local = ofccl__ep_peer_map(comm->ep, r, &rk, 0, gc->region_len,
                                       OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_READ, &h, &e);
        if (local == 0)
            local = ofccl__gpu_host_register(gc->g, gc->dev, h, gc->region_len, (void **)&gc->fd[r],
                                             &e);
        if (local == 0)
            gc->fh[r] = h;
    }
    if (local != 0)
        OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_MEM, "rank %d: GPU flag regions: %s", comm->rank,
                    e.msg);
    free(all);
    return local;
}

static void regions_free(ofccl_comm_t *comm, ofccl__gcomm_t *gc)
{
    for (int r = 0; gc->fh != NULL && r < comm->size; r++)
        if (gc->fh[r] != NULL)
            ofccl__gpu_host_unregister(gc->g, gc->dev, (void *)gc->fh[r]);
    free(gc->fh);
    free(gc->fd);
    gc->fh = NULL;
    gc->fd = NULL;
    if (gc->region_mr != NULL)
        ofccl__mr_dereg(gc->region_mr);
    gc->region_mr = NULL;
    if (gc->region != NULL)
        ofccl__prov_mem_free(gc->region);
    gc->region = NULL;
}

/* The broadcast chain's device flags, zeroed before any peer may set them
 * (a peer writes them only after this rank says READY, which comes later). */
static int chain_flags(ofccl__gcomm_t *gc)
{
    size_t len = OFCCL__GPU_CHAIN_BLOCKS * sizeof(uint64_t);
    uint64_t zero[OFCCL__GPU_CHAIN_BLOCKS] = {0};
    ofccl__err_t e = {0};
    void *p = NULL;
    int rc = ofccl__gpool_alloc(gc, len, &p);

    if (rc != 0)
        return rc;
    gc->dflags = p;
    gc->dflags_seg = ofccl__gpool_find(gc, p, len, &gc->dflags_off);
    if ((rc = ofccl__gpu_copy_sync(gc->g, gc->dev, p, zero, len, &e)) != 0)
        return ofccl__comm_fail(gc->comm, rc, "GPU setup: zeroing its flags: %s", e.msg);
    return 0;
}

/* Everything a collective will need from the driver, made now: the kernels'
 * module, an end event per request slot, the copy engines' streams and
 * their fork event. A peer that dies later leaves nothing of this to do in
 * the middle of a collective (a module load then waits in the driver while
 * the dead process's shared memory is taken back). */
static int preload(ofccl__gcomm_t *gc)
{
    const ofccl_comm_t *comm = gc->comm;
    ofccl__err_t e = {0};
    int rc = ofccl__gpu_load_kernels(gc->g, gc->dev, &e);

    for (int s = 0; rc == 0 && s < OFCCL__GPU_SLOTS; s++)
        rc = ofccl__gpu_event_create(gc->g, gc->dev, false, &gc->done[s], &e);
    if (rc == 0)
        rc = ofccl__gpu_event_create(gc->g, gc->dev, false, &gc->fork, &e);
    if (rc == 0 && (gc->ce = calloc((size_t)comm->size, sizeof(*gc->ce))) == NULL)
        rc = OFCCL_ERR_NO_MEMORY;
    for (int p = 0; rc == 0 && p < comm->size; p++)
        if (p != comm->rank)
            rc = ofccl__gpu_stream_create(gc->g, gc->dev, &gc->ce[p], &e);
    if (rc != 0)
        return ofccl__comm_fail(gc->comm, rc, "GPU setup on GPU %d: %s", gc->dev,
                                rc == OFCCL_ERR_NO_MEMORY ? "no memory" : e.msg);
    return 0;
}

static int setup(ofccl_comm_t *comm, ofccl__gcomm_t *gc)
{
    uint8_t rec[REC1] = {0}, *all = malloc(REC1 * (size_t)comm->size);
    ofccl__err_t e = {0};
    int rc, v, about, who = -1, whose = -1, mine = 0;

    gc->comm = comm;
    gc->path = OFCCL__GPATH_STAGED;
    if ((gc->peers = malloc(sizeof(int) * (size_t)comm->size)) == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "GPU setup: no memory");
    for (int p = 0, k = 0; p < comm->size; p++)
        if (p != comm->rank)
            gc->peers[k++] = p;
    gc->sms = (int)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_GPU_SMS);
    gc->chain_bytes = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_GPU_CHAIN_BYTES);
    gc->budget = (size_t)ofccl__cfg_int(&comm->ctx->cfg, OFCCL__CFG_GPU_POOL_BYTES);
    gc->g = ofccl__gpu_process(&comm->ctx->log, true);
    /* The process's GPU: its rank among the job's ranks of this host, not
     * among this communicator's (a split's ranks of one host may be other
     * local ranks, and a rail's is always 0). */
    gc->dev = gc->g != NULL ? ofccl__gpu_current_device(gc->g, comm->ctx->boot->local_rank) : -1;
    if (gc->g != NULL) {
        ofccl__gpu_dev_info_t in;
        if ((mine = ofccl__gpu_device_info(gc->g, gc->dev, &in, &e)) == 0)
            memcpy(rec + 16, in.bus_id, OFCCL__MIN(strlen(in.bus_id), (size_t)32));
    } else {
        mine = OFCCL_ERR_NOT_SUPPORTED;
    }
    ofccl__put_le64(rec, (uint64_t)(int64_t)mine);
    ofccl__put_le64(rec + 8, (uint64_t)(int64_t)gc->dev);
    if (all == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "GPU setup: no memory");
    rc = ofccl__allgather_blocking(comm, rec, all, REC1);
    if (rc) {
        free(all);
        return rc;
    }
    v = local_verdict(comm, gc, all, &about);
    free(all);
    rc = ofccl__agree(comm, v, about, &v, &who, &whose);
    if (rc == 0 && v == V_OK) {
        v = flag_regions(comm, gc) == 0 ? V_OK : V_REGION;
        rc = ofccl__agree(comm, v, comm->rank, &v, &who, &whose);
        if (rc != 0 || v != V_OK)
            regions_free(comm, gc);
    }
    if (rc < 0)
        return rc;
    rc = v;
    if (rc == V_OK) /* before the chain's flags: the pool maps peers' segments only on P2P */
        gc->path = OFCCL__GPATH_P2P;
    if (rc == V_OK && ((rc = chain_flags(gc)) < 0 || (rc = preload(gc)) < 0))
        return rc;
    if (rc == V_OK) {
        snprintf(gc->why, sizeof(gc->why), "GPU peer class: %d GPUs of one host, P2P", comm->size);
    } else {
        snprintf(gc->why, sizeof(gc->why), "rank %d says %s%s", who, verdict_text(rc),
                 whose >= 0 && whose != who ? " (rank " : "");
        if (whose >= 0 && whose != who) {
            size_t l = strlen(gc->why);
            snprintf(gc->why + l, sizeof(gc->why) - l, "%d)", whose);
        }
    }
    if (rc != V_OK && (rc = ofccl__ghmem_setup(gc)) != 0)
        return rc;
    if (gc->path != OFCCL__GPATH_P2P) { /* what the host engine does with GPU memory, and why */
        char why[sizeof(gc->why)];
        memcpy(why, gc->why, sizeof(why));
        /* (a reason cut short at the buffer's end is still the reason) */
        if (snprintf(gc->why, sizeof(gc->why), "%s: %s",
                     comm->dev_landed
                         ? "GPU memory goes through the local transport as GPU memory (CUDA "
                           "IPC), reduce-scatters summed by the GPU"
                     : comm->dev_reg
                         ? "all-gathers and broadcasts on GPU memory go through the "
                           "transport as GPU memory (FI_HMEM), reduce-scatters are staged "
                           "through host memory"
                         : "GPU buffers are staged through host memory",
                     why) < 0)
            gc->why[0] = '\0';
    }
    OFCCL__INFO(&comm->ctx->log, OFCCL__SUB_COLL, "rank %d: communicator %u on GPU %d: %s",
                comm->rank, comm->id, gc->dev, gc->why);
    return 0;
}

int ofccl__gcomm_lazy(ofccl_comm_t *comm, ofccl__gcomm_t **out)
{
    ofccl__gcomm_t *gc = comm->gpu;

    if (gc == NULL) {
        if ((gc = calloc(1, sizeof(*gc))) == NULL)
            return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "GPU setup: no memory");
        gc->comm = comm;
        comm->gpu = gc;
        comm->gpu_free = ofccl__gcomm_free;
    }
    *out = gc;
    return 0;
}

int ofccl__gcomm_get(ofccl_comm_t *comm, ofccl__gcomm_t **out)
{
    ofccl__gcomm_t *gc = NULL;
    int rc = ofccl__gcomm_lazy(comm, &gc);

    if (rc == 0 && !gc->ready) {
        if ((rc = setup(comm, gc)) != 0) {
            free(gc->peers);
            gc->peers = NULL;
            return rc;
        }
        gc->ready = true;
    }
    *out = gc;
    return rc;
}

void ofccl__gcomm_free(ofccl_comm_t *comm)
{
    ofccl__gcomm_t *gc = comm->gpu;

    if (gc == NULL)
        return;
    /* Nothing of ours may still run on a stream when the memory goes: a GPU
     * that cannot be made to let go keeps it (and says so). */
    if (gc->path == OFCCL__GPATH_P2P && !ofccl__gpu_quiesce(gc)) {
        OFCCL__WARN(&comm->ctx->log, OFCCL__SUB_COLL,
                    "rank %d: communicator %u: a GPU collective still runs on its stream after "
                    "2 s: its GPU memory and flag region are kept until the process exits",
                    comm->rank, comm->id);
        comm->gpu = NULL;
        return;
    }
    for (int s = 0; s < OFCCL__GPU_SLOTS; s++)
        if (gc->done[s] != NULL)
            ofccl__gpu_event_destroy(gc->g, gc->dev, gc->done[s]);
    if (gc->fork != NULL)
        ofccl__gpu_event_destroy(gc->g, gc->dev, gc->fork);
    for (int r = 0; gc->ce != NULL && r < comm->size; r++)
        if (gc->ce[r] != NULL)
            ofccl__gpu_stream_destroy(gc->g, gc->dev, gc->ce[r]);
    free(gc->ce);
    free(gc->peers);
    ofccl__greg_fini(gc);
    ofccl__gpool_fini(gc);
    regions_free(comm, gc);
    free(gc);
    comm->gpu = NULL;
}
