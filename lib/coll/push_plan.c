/*
 * Weight push plans. Senders (trainer ranks) each hold a shard of every
 * tensor, by the bucket rule over the senders (sender i owns elements
 * [i*c, min((i+1)*c, count)) with c = ceil(count / nsenders)); receivers
 * (rollout ranks) each want every tensor, or a slice of it. The plan is built
 * once: the tensors are grouped in order into buckets of about bucket_bytes
 * (a tensor larger than that is a bucket of its own), and each receiver lays
 * out its slices of a bucket's tensors in its own bucket buffer. Every rank
 * computes the same pieces from the same plan: what sender i writes to
 * receiver j for bucket k, at most one contiguous piece per tensor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "push.h"
#include "util.h"

#define DEFAULT_BUCKET ((size_t)64 << 20)
#define PIECE_ALIGN 64 /* each tensor's slice starts on a cache line */

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* Every rank's view of the plan: one hash per field (so a difference can be
 * named), and a receiver's slices. */
typedef struct view {
    uint64_t senders, receivers, tensors, bucket, gpu;
} view_t;
#define VIEW_FIELDS 5

static const char *const field_names[] = {"senders", "receivers", "tensors (counts or dtypes)",
                                          "bucket_bytes", "memory (gpu)"};

/* The spec's gpu field, where the caller's spec has it. */
static int spec_gpu(const ofccl_push_spec_t *sp)
{
    return sp->size >= offsetof(ofccl_push_spec_t, gpu) + sizeof(sp->gpu) && sp->gpu != 0;
}

static int check_spec(ofccl_comm_t *comm, const ofccl_push_spec_t *sp)
{
    const char *bad = NULL;

    if (sp == NULL || sp->size < offsetof(ofccl_push_spec_t, gpu))
        bad = "spec is NULL or its size field is not sizeof(ofccl_push_spec_t)";
    else if (sp->nsenders < 1 || sp->senders == NULL)
        bad = "no senders";
    else if (sp->nreceivers < 1 || sp->receivers == NULL)
        bad = "no receivers";
    else if (sp->ntensors < 0 || (sp->ntensors > 0 && sp->counts == NULL))
        bad = "ntensors < 0, or counts is NULL";
    if (bad != NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG, "ofccl_push_plan_create: %s", bad);
    for (int side = 0; side < 2; side++) {
        const int *list = side ? sp->receivers : sp->senders;
        int n = side ? sp->nreceivers : sp->nsenders;
        for (int i = 0; i < n; i++)
            if (list[i] < 0 || list[i] >= comm->size || ofccl__push_index(list, i, list[i]) >= 0)
                return ofccl__comm_fail(
                    comm, OFCCL_ERR_INVALID_ARG, "ofccl_push_plan_create: %s[%d] = %d is %s",
                    side ? "receivers" : "senders", i, list[i],
                    list[i] < 0 || list[i] >= comm->size ? "not a rank of the communicator"
                                                         : "listed twice");
    }
    for (int r = 0; r < comm->size; r++)
        if (ofccl__push_index(sp->senders, sp->nsenders, r) < 0 &&
            ofccl__push_index(sp->receivers, sp->nreceivers, r) < 0)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "ofccl_push_plan_create: rank %d is neither a sender nor a "
                                    "receiver: every rank of the communicator takes part in each "
                                    "bucket (split off the ranks that push)",
                                    r);
    for (int t = 0; t < sp->ntensors; t++) {
        ofccl_dtype_t dt = sp->dtypes ? sp->dtypes[t] : OFCCL_U8;
        if (ofccl_dtype_size(dt) == 0)
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "ofccl_push_plan_create: tensor %d has unsupported dtype %d", t,
                                    (int)dt);
        if (sp->slice_offset != NULL && sp->slice_count != NULL &&
            (sp->slice_offset[t] > sp->counts[t] ||
             sp->slice_count[t] > sp->counts[t] - sp->slice_offset[t]))
            return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                    "ofccl_push_plan_create: tensor %d: slice [%zu, +%zu) is "
                                    "outside its %zu elements",
                                    t, sp->slice_offset[t], sp->slice_count[t], sp->counts[t]);
    }
    return 0;
}

static view_t view_of(const ofccl_push_spec_t *sp)
{
    view_t v = {OFCCL__FNV_BASIS, OFCCL__FNV_BASIS, OFCCL__FNV_BASIS,
                sp->bucket_bytes ? sp->bucket_bytes : DEFAULT_BUCKET, (uint64_t)spec_gpu(sp)};

    v.senders = ofccl__fnv(ofccl__fnv(v.senders, &sp->nsenders, sizeof(int)), sp->senders,
                           sizeof(int) * (size_t)sp->nsenders);
    v.receivers = ofccl__fnv(ofccl__fnv(v.receivers, &sp->nreceivers, sizeof(int)), sp->receivers,
                             sizeof(int) * (size_t)sp->nreceivers);
    v.tensors = ofccl__fnv(v.tensors, &sp->ntensors, sizeof(int));
    for (int t = 0; t < sp->ntensors; t++) {
        uint64_t c = sp->counts[t], d = sp->dtypes ? (uint64_t)sp->dtypes[t] : OFCCL_U8;
        v.tensors = ofccl__fnv(ofccl__fnv(v.tensors, &c, 8), &d, 8);
    }
    return v;
}

/* Every rank's view and every receiver's slices, over the communicator. */
static int exchange(ofccl_comm_t *comm, const ofccl_push_spec_t *sp, ofccl_push_plan_t *pl)
{
    size_t nt = (size_t)sp->ntensors, rec = 40 + 16 * nt, n = (size_t)comm->size;
    uint8_t *mine = calloc(1, rec), *all = malloc(rec * n);
    view_t me = view_of(sp);
    int rc = 0;

    if (mine == NULL || all == NULL) {
        rc = ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "ofccl_push_plan_create: out of memory");
        goto out;
    }
    ofccl__put_le64(mine, me.senders);
    ofccl__put_le64(mine + 8, me.receivers);
    ofccl__put_le64(mine + 16, me.tensors);
    ofccl__put_le64(mine + 24, me.bucket);
    ofccl__put_le64(mine + 32, me.gpu);
    for (size_t t = 0; t < nt; t++) {
        bool sliced = sp->slice_offset != NULL && sp->slice_count != NULL;
        ofccl__put_le64(mine + 40 + 16 * t, sliced ? sp->slice_offset[t] : 0);
        ofccl__put_le64(mine + 48 + 16 * t, sliced ? sp->slice_count[t] : sp->counts[t]);
    }
    if ((rc = ofccl__allgather_blocking(comm, mine, all, rec)) != 0)
        goto out;
    for (size_t r = 0; r < n; r++) {
        const uint8_t *v = all + r * rec;
        uint64_t theirs[VIEW_FIELDS] = {ofccl__get_le64(v), ofccl__get_le64(v + 8),
                                        ofccl__get_le64(v + 16), ofccl__get_le64(v + 24),
                                        ofccl__get_le64(v + 32)},
                 ours[VIEW_FIELDS] = {me.senders, me.receivers, me.tensors, me.bucket, me.gpu};
        for (int f = 0; f < VIEW_FIELDS; f++)
            if (theirs[f] != ours[f]) {
                rc = ofccl__comm_fail(comm, OFCCL_ERR_MISMATCH,
                                      "ofccl_push_plan_create: rank %zu passed other %s than rank "
                                      "%d%s",
                                      r, field_names[f], comm->rank,
                                      f == 3 || f == 4 ? "" : " (every rank passes the same plan)");
                goto out;
            }
    }
    for (int j = 0; j < pl->nreceivers; j++)
        for (size_t t = 0; t < nt; t++) {
            const uint8_t *v = all + (size_t)pl->receivers[j] * rec;
            pl->slice_off[(size_t)j * nt + t] = ofccl__get_le64(v + 40 + 16 * t);
            pl->slice_cnt[(size_t)j * nt + t] = ofccl__get_le64(v + 48 + 16 * t);
            if (pl->slice_off[(size_t)j * nt + t] > pl->counts[t] ||
                pl->slice_cnt[(size_t)j * nt + t] >
                    pl->counts[t] - pl->slice_off[(size_t)j * nt + t]) {
                rc = ofccl__comm_fail(comm, OFCCL_ERR_CORRUPT,
                                      "ofccl_push_plan_create: receiver rank %d sent a slice of "
                                      "tensor %zu outside it",
                                      pl->receivers[j], t);
                goto out;
            }
        }
out:
    free(mine);
    free(all);
    return rc;
}

/* Buckets (by whole tensors) and each receiver's layout of its slices. */
static void lay_out(ofccl_push_plan_t *pl, size_t bucket_bytes)
{
    size_t nt = (size_t)pl->ntensors, acc = 0;

    pl->nbuckets = 0;
    pl->first[0] = 0;
    for (int t = 0; t < pl->ntensors; t++) {
        size_t b = pl->counts[t] * pl->esize[t];
        if (acc > 0 && acc + b > bucket_bytes) {
            pl->first[++pl->nbuckets] = t;
            acc = 0;
        }
        acc += b;
    }
    if (pl->ntensors > 0)
        pl->first[++pl->nbuckets] = pl->ntensors;
    for (int j = 0; j < pl->nreceivers; j++)
        for (int k = 0; k < pl->nbuckets; k++) {
            size_t off = 0;
            for (int t = pl->first[k]; t < pl->first[k + 1]; t++) {
                pl->where[(size_t)j * nt + (size_t)t] = off;
                off = round_up(off + pl->slice_cnt[(size_t)j * nt + (size_t)t] * pl->esize[t],
                               PIECE_ALIGN);
            }
            if (j == pl->me_recv)
                pl->bucket_bytes_mine[k] = off;
            pl->max_recv_bytes = OFCCL__MAX(pl->max_recv_bytes, off);
        }
}

static int plan_create_locked(ofccl_comm_t *comm, const ofccl_push_spec_t *sp,
                              ofccl_push_plan_t **out)
{
    ofccl_push_plan_t *pl;
    size_t nt;
    int rc;

    if (out == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_INVALID_ARG,
                                "ofccl_push_plan_create: plan is NULL");
    if ((rc = ofccl__comm_check(comm, "ofccl_push_plan_create")) != 0 ||
        (rc = check_spec(comm, sp)) != 0)
        return rc;
    nt = (size_t)sp->ntensors;
    pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "ofccl_push_plan_create: out of memory");
    pl->comm = comm;
    pl->nsenders = sp->nsenders;
    pl->nreceivers = sp->nreceivers;
    pl->ntensors = sp->ntensors;
    pl->senders = malloc(sizeof(int) * (size_t)sp->nsenders);
    pl->receivers = malloc(sizeof(int) * (size_t)sp->nreceivers);
    pl->counts = calloc(nt + 1, sizeof(size_t));
    pl->esize = calloc(nt + 1, sizeof(size_t));
    pl->first = calloc(nt + 2, sizeof(int));
    pl->bucket_bytes_mine = calloc(nt + 1, sizeof(size_t));
    pl->slice_off = calloc((size_t)sp->nreceivers * nt + 1, sizeof(size_t));
    pl->slice_cnt = calloc((size_t)sp->nreceivers * nt + 1, sizeof(size_t));
    pl->where = calloc((size_t)sp->nreceivers * nt + 1, sizeof(size_t));
    pl->base = calloc((size_t)OFCCL__SLOTS * ((size_t)sp->nsenders + 1), sizeof(uint32_t));
    pl->sbase = calloc((size_t)OFCCL__SLOTS * (size_t)sp->nreceivers, sizeof(uint32_t));
    pl->soff = calloc((size_t)OFCCL__SLOTS * (nt + 1), sizeof(size_t));
    pl->used = calloc((size_t)OFCCL__SLOTS * (nt + 1), sizeof(size_t));
    if (!pl->senders || !pl->receivers || !pl->counts || !pl->esize || !pl->first ||
        !pl->bucket_bytes_mine || !pl->slice_off || !pl->slice_cnt || !pl->where || !pl->base ||
        !pl->sbase || !pl->soff || !pl->used) {
        ofccl__push_plan_free(pl);
        return ofccl__comm_fail(comm, OFCCL_ERR_NO_MEMORY, "ofccl_push_plan_create: out of memory");
    }
    memcpy(pl->senders, sp->senders, sizeof(int) * (size_t)sp->nsenders);
    memcpy(pl->receivers, sp->receivers, sizeof(int) * (size_t)sp->nreceivers);
    for (size_t t = 0; t < nt; t++) {
        pl->counts[t] = sp->counts[t];
        pl->esize[t] = ofccl_dtype_size(sp->dtypes ? sp->dtypes[t] : OFCCL_U8);
    }
    pl->me_send = ofccl__push_index(pl->senders, pl->nsenders, comm->rank);
    pl->me_recv = ofccl__push_index(pl->receivers, pl->nreceivers, comm->rank);
    rc = exchange(comm, sp, pl);
    if (rc) {
        ofccl__push_plan_free(pl);
        return rc;
    }
    pl->tag = view_of(sp).tensors ^ view_of(sp).senders * 31 ^ view_of(sp).receivers * 17;
    lay_out(pl, sp->bucket_bytes ? sp->bucket_bytes : DEFAULT_BUCKET);
    /* GPU plans: the receive buffers in the symmetric GPU pool (collective). */
    if (spec_gpu(sp) && (rc = ofccl__gpu_push_setup(pl)) != 0) {
        ofccl__push_plan_free(pl);
        return rc;
    }
    *out = pl;
    return 0;
}

void ofccl__push_plan_free(ofccl_push_plan_t *pl)
{
    if (pl == NULL)
        return;
    if (pl->gpu)
        ofccl__gpu_push_free(pl);
    for (int b = 0; b < 2 && !pl->gpu; b++)
        if (pl->buf[b] != NULL)
            ofccl_buffer_free(pl->comm, pl->buf[b]);
    free(pl->senders);
    free(pl->receivers);
    free(pl->counts);
    free(pl->esize);
    free(pl->first);
    free(pl->bucket_bytes_mine);
    free(pl->slice_off);
    free(pl->slice_cnt);
    free(pl->where);
    free(pl->base);
    free(pl->sbase);
    free(pl->soff);
    free(pl->used);
    free(pl);
}

int ofccl_push_plan_create(ofccl_comm_t *comm, const ofccl_push_spec_t *spec,
                           ofccl_push_plan_t **plan)
{
    OFCCL__CHECK_HANDLE(comm);
    OFCCL__LOCKED(comm->ctx, plan_create_locked(comm, spec, plan));
}

int ofccl_push_plan_destroy(ofccl_push_plan_t *plan)
{
    ofccl_ctx_t *ctx;

    if (plan == NULL)
        return OFCCL_ERR_INVALID_ARG;
    ctx = plan->comm->ctx;
    ofccl__ctx_lock(ctx);
    if (ofccl__coll_uses(plan->comm, plan, true) || (plan->gpu && ofccl__gpu_push_busy(plan))) {
        ofccl__ctx_unlock(ctx);
        return ofccl__comm_fail(plan->comm, OFCCL_ERR_BUSY,
                                "ofccl_push_plan_destroy: a bucket of this plan is still running "
                                "or its request not freed; wait for it and free it first");
    }
    ofccl__push_plan_free(plan);
    ofccl__ctx_unlock(ctx);
    return 0;
}

int ofccl_push_plan_info(const ofccl_push_plan_t *plan, int *nbuckets, size_t *max_bucket_bytes)
{
    if (plan == NULL || nbuckets == NULL)
        return OFCCL_ERR_INVALID_ARG;
    *nbuckets = plan->nbuckets;
    if (max_bucket_bytes != NULL)
        *max_bucket_bytes = plan->max_recv_bytes;
    return 0;
}

int ofccl_push_tensor_where(const ofccl_push_plan_t *plan, int t, int *bucket, size_t *offset,
                            size_t *bytes)
{
    int k = 0;

    if (plan == NULL || t < 0 || t >= plan->ntensors || plan->me_recv < 0 || bucket == NULL ||
        offset == NULL || bytes == NULL)
        return OFCCL_ERR_INVALID_ARG;
    while (plan->first[k + 1] <= t)
        k++;
    *bucket = k;
    *offset = plan->where[(size_t)plan->me_recv * (size_t)plan->ntensors + (size_t)t];
    *bytes = plan->slice_cnt[(size_t)plan->me_recv * (size_t)plan->ntensors + (size_t)t] *
             plan->esize[t];
    return 0;
}
