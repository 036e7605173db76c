/*
 * Weight push on GPU memory (a plan made with spec.gpu = 1), byte for byte:
 * - every rank a sender and a receiver, odd ranks receiving slices, five
 *   tensors of four dtypes and uneven sizes (an empty one among them) in
 *   buckets of 256 KiB, two buckets in flight at a time (both buffers);
 * - the first half of the ranks sending, the rest receiving;
 * - a plan still running is BUSY to destroy; a receiver's own buf is refused.
 * Each receiver checks every byte of its slices in the plan's GPU buffers
 * against the tensors' reference bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gtest.h"

#define NT 5

static const size_t counts[NT] = {1, 4099, 1 << 18, 0, 77};
static const ofccl_dtype_t dtypes[NT] = {OFCCL_F32, OFCCL_BF16, OFCCL_U8, OFCCL_F32, OFCCL_F64};

static uint8_t ref(int t, size_t i, unsigned salt)
{
    return byte_of(t + 20, i, salt);
}

/* This sender's shard of every tensor, on its GPU. */
static void **make_shards(int si, int ns, unsigned salt)
{
    void **sh = calloc(NT, sizeof(void *));

    for (int t = 0; t < NT; t++) {
        size_t es = ofccl_dtype_size(dtypes[t]), c = (counts[t] + (size_t)ns - 1) / (size_t)ns;
        size_t s0 = (size_t)si * c < counts[t] ? (size_t)si * c : counts[t];
        size_t s1 = s0 + c < counts[t] ? s0 + c : counts[t], len = (s1 - s0) * es;
        uint8_t *h = malloc(len + 1);
        for (size_t i = 0; i < len; i++)
            h[i] = ref(t, s0 * es + i, salt);
        sh[t] = len ? dmalloc(len) : NULL;
        put(sh[t], h, len);
        free(h);
    }
    return sh;
}

/* A receiver's check of bucket k's tensors in the plan's buffer. */
static int check_bucket(int rank, ofccl_push_plan_t *pl, int k, const size_t *off, unsigned salt)
{
    void *buf = NULL;
    int bad = 0;

    if (ofccl_push_buffer(pl, k, &buf) != 0)
        return printf("rank %d: ofccl_push_buffer(%d) failed\n", rank, k), 1;
    for (int t = 0; t < NT && !bad; t++) {
        int b;
        size_t at, bytes, es = ofccl_dtype_size(dtypes[t]);
        if (ofccl_push_tensor_where(pl, t, &b, &at, &bytes) != 0 || b != k)
            continue;
        uint8_t *h = malloc(bytes + 1);
        get(h, (char *)buf + at, bytes);
        for (size_t i = 0; i < bytes; i++)
            if (h[i] != ref(t, off[t] * es + i, salt)) {
                printf("rank %d: push bucket %d, tensor %d: byte %zu of %zu is %u, %u expected\n",
                       rank, k, t, i, bytes, h[i], ref(t, off[t] * es + i, salt));
                bad = 1;
                break;
            }
        free(h);
    }
    return bad;
}

static int run_plan(int rank, int n, ofccl_comm_t *comm, const int *senders, int ns,
                    const int *receivers, int nr, bool slices, unsigned salt)
{
    size_t off[NT], cnt[NT];
    ofccl_push_spec_t sp = {.size = sizeof(sp),
                            .nsenders = ns,
                            .senders = senders,
                            .nreceivers = nr,
                            .receivers = receivers,
                            .ntensors = NT,
                            .counts = counts,
                            .dtypes = dtypes,
                            .bucket_bytes = 256 << 10};
    ofccl_push_plan_t *pl;
    ofccl_req_t *req[2];
    int si = -1, ri = -1, nb = 0, bad = 0;
    void **sh = NULL;

    (void)n;
    for (int i = 0; i < ns; i++)
        si = senders[i] == rank ? i : si;
    for (int i = 0; i < nr; i++)
        ri = receivers[i] == rank ? i : ri;
    for (int t = 0; t < NT; t++) { /* odd ranks take the middle of each tensor */
        off[t] = slices && rank % 2 ? counts[t] / 3 : 0;
        cnt[t] = slices && rank % 2 ? counts[t] / 2 : counts[t];
    }
    sp.slice_offset = off;
    sp.slice_count = cnt;
    sp.gpu = 1;
    if (ofccl_push_plan_create(comm, &sp, &pl) != 0)
        return printf("rank %d: push plan: %s\n", rank, ofccl_comm_last_error(comm)), 1;
    ofccl_push_plan_info(pl, &nb, NULL);
    if (si >= 0)
        sh = make_shards(si, ns, salt);
    for (int k = 0; k < nb && !bad; k += 2) {
        int m = k + 1 < nb ? 2 : 1;
        for (int j = 0; j < m && !bad; j++)
            if (ofccl_push_bucket(pl, k + j, sh, NULL, 0, &req[j]) != 0)
                return printf("rank %d: push bucket %d: %s\n", rank, k + j,
                              ofccl_comm_last_error(comm)),
                       1;
        if (k == 0 && ofccl_push_plan_destroy(pl) != OFCCL_ERR_BUSY)
            bad = printf("rank %d: destroying a running GPU plan was not BUSY\n", rank) > 0;
        for (int j = 0; j < m; j++) {
            int rc = ofccl_wait(req[j]);
            if (rc != 0)
                return printf("rank %d: push bucket %d: %s: %s\n", rank, k + j, ofccl_strerror(rc),
                              ofccl_comm_last_error(comm)),
                       1;
            ofccl_req_free(req[j]);
            if (ri >= 0)
                bad |= check_bucket(rank, pl, k + j, off, salt);
        }
    }
    if (ofccl_push_plan_destroy(pl) != 0)
        bad = 1;
    for (int t = 0; sh != NULL && t < NT; t++)
        if (sh[t] != NULL)
            ofccl__gpu_mem_free(gpu, dev, sh[t]);
    free(sh);
    if (!bad)
        printf("rank %d: GPU push of %d buckets (%d senders, %d receivers%s): every byte right\n",
               rank, nb, ns, nr, slices ? ", slices" : "");
    return bad;
}

int gpu_push(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    int n = 0, all[16], bad = 0, h;
    ofccl_push_spec_t sp;
    ofccl_push_plan_t *pl;
    ofccl_req_t *req = NULL;
    void *mine;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    ofccl_comm_set_timeout(comm, 20000);
    ofccl_comm_size(comm, &n);
    for (int i = 0; i < n; i++)
        all[i] = i;
    h = (n + 1) / 2;
    bad |= run_plan(rank, n, comm, all, n, all, n, true, 1);
    bad |= run_plan(rank, n, comm, all, h, all + h, n - h, false, 2);
    /* A receiver's own buffer is refused before anything is posted (every
     * rank passes one: the refusal is everywhere). */
    sp = (ofccl_push_spec_t){.size = sizeof(sp),
                             .nsenders = n,
                             .senders = all,
                             .nreceivers = n,
                             .receivers = all,
                             .ntensors = NT,
                             .counts = counts,
                             .dtypes = dtypes,
                             .bucket_bytes = 256 << 10};
    sp.gpu = 1;
    if (ofccl_push_plan_create(comm, &sp, &pl) != 0)
        return 90;
    void **sh = make_shards(rank, n, 3);
    mine = dmalloc(1 << 20);
    int rc = ofccl_push_bucket(pl, 0, sh, mine, 1 << 20, &req);
    printf("rank %d: GPU push into the caller's buffer: %s: %s\n", rank, ofccl_strerror(rc),
           ofccl_comm_last_error(comm));
    bad |= rc != OFCCL_ERR_INVALID_ARG || req != NULL;
    ofccl_push_plan_destroy(pl);
    ofccl__gpu_mem_free(gpu, dev, mine);
    for (int t = 0; t < NT; t++)
        if (sh[t] != NULL)
            ofccl__gpu_mem_free(gpu, dev, sh[t]);
    free(sh);
    return bad ? 91 : 0;
}
