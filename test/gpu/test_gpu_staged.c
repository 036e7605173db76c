/*
 * GPU memory across (simulated) hosts: test_gpu's "staged" scenarios run the
 * ranks as two hosts (OFCCL_HOST_ID, tcp between them: the first half of the
 * ranks and the rest, or every other rank), where the host engine stages GPU
 * buffers through host memory inside each request, stream-ordered: the
 * cost model's choice ("staged"), the hierarchical algorithms forced
 * ("staged-x", interleaved hosts) and the ring ("staged-flat").
 * All-gather (every dtype, in place and not), reduce-scatter (f32 and bf16,
 * sum and average, in place and not) and broadcast from every root, each
 * checked element by element against what each rank computes itself (the
 * reduce-scatter within the bound of any order of additions: the host's
 * algorithm across hosts picks its own). "staged-async": the caller's stream
 * is held (a wait on a host word) while an all-gather is posted behind a copy
 * that writes its input: the call returns at once, and once the stream goes
 * on the result holds what the copy wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gtest.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int bcast_once(int rank, int n, ofccl_comm_t *comm, size_t len, int root, unsigned salt)
{
    uint8_t *h = malloc(len + 1);
    void *buf = dmalloc(len);
    ofccl_req_t *req;
    int rc, bad = 0;

    for (size_t i = 0; i < len; i++)
        h[i] = rank == root ? byte_of(root, i, salt) : 0x5a;
    put(buf, h, len);
    rc = ofccl_broadcast(comm, buf, len, OFCCL_U8, root, &req);
    if (rc == 0 && (rc = ofccl_wait(req)) == 0)
        ofccl_req_free(req);
    if (rc != 0) {
        printf("rank %d: staged broadcast of %zu B from %d: %s: %s\n", rank, len, root,
               ofccl_strerror(rc), ofccl_comm_last_error(comm));
        bad = 1;
    }
    get(h, buf, len);
    for (size_t i = 0; !bad && i < len; i++)
        if (h[i] != byte_of(root, i, salt)) {
            printf("rank %d: staged broadcast of %zu B from %d: byte %zu is %u, %u expected\n",
                   rank, len, root, i, h[i], byte_of(root, i, salt));
            bad = 1;
        }
    (void)n;
    ofccl__gpu_mem_free(gpu, dev, buf);
    free(h);
    return bad;
}

static int gather_once(int rank, int n, ofccl_comm_t *comm, size_t count, ofccl_dtype_t dt,
                       int in_place, unsigned salt)
{
    size_t es = ofccl_dtype_size(dt), total = count * es * (size_t)n;
    char *out = dmalloc(total), *in = in_place ? NULL : dmalloc(count * es);
    uint8_t *h = malloc(total + 1);
    int bad;

    memset(h, 0xee, total);
    put(out, h, total);
    free(h);
    bad = gather_at(rank, n, comm, out, in, count, dt, salt,
                    in_place ? "staged, in place" : "staged");
    ofccl__gpu_mem_free(gpu, dev, out);
    if (in != NULL)
        ofccl__gpu_mem_free(gpu, dev, in);
    return bad;
}

/* Every collective across the hosts, each element checked: 0 or 1. */
static int every_collective(int rank, ofccl_comm_t *comm, int n)
{
    static const size_t counts[] = {0, 1, 1000, 16384, 100003, 300000};
    const ofccl_redop_t sum = {OFCCL_OP_SUM, 1}, avg = {OFCCL_OP_AVG, 1};
    unsigned salt = 1;
    int bad = 0;

    for (size_t c = 0; c < sizeof(counts) / sizeof(*counts) && !bad; c++) {
        for (int dt = 0; dt < OFCCL_DTYPE_COUNT && !bad; dt++)
            for (int in_place = 0; in_place < 2 && !bad; in_place++)
                bad |= gather_once(rank, n, comm, counts[c], (ofccl_dtype_t)dt, in_place, salt++);
        for (int k = 0; k < 8 && !bad; k++)
            bad |= gpu_rs_check(rank, comm, counts[c],
                                k & 1   ? 4
                                : k & 4 ? 0
                                        : 2,
                                k & 2 ? OFCCL_BF16 : OFCCL_F32, k & 4 ? avg : sum, salt++, 0);
        for (int root = 0; root < n && !bad; root++)
            bad |= bcast_once(rank, n, comm, counts[c] * 3, root, salt++);
    }
    return bad;
}

/* The caller's stream held by a wait on a host word: an all-gather posted
 * behind a copy that writes its input returns at once and is not done; the
 * word released, the stream goes on and the result is the copy's data.
 * Staged, and through the fabric as GPU memory ("hmem"). */
static int async_behind_held_stream(int rank, int n, ofccl_comm_t *comm)
{
    const size_t block = 1 << 20;
    uint8_t *h = malloc(block * (size_t)n);
    char *src = dmalloc(block), *in = dmalloc(block), *out = dmalloc(block * (size_t)n);
    held_stream_t held;
    ofccl_req_t *req = NULL;
    ofccl__err_t e;
    double t0, posted;
    int done = -1, rc, bad = 0;

    if (h == NULL || src == NULL || in == NULL || out == NULL)
        return 80;
    for (size_t i = 0; i < block; i++)
        h[i] = byte_of(rank, i, 77);
    put(src, h, block);
    memset(h, 0xee, block * (size_t)n);
    put(in, h, block);
    put(out, h, block * (size_t)n);
    /* A first all-gather sets the communicator's GPU state up (collective). */
    if (gather_once(rank, n, comm, 16, OFCCL_U8, 1, 76) != 0)
        return 82;
    if (hold_stream(comm, &held) != 0 || ofccl__gpu_copy(gpu, dev, held.s, in, src, block, &e) != 0)
        return 81;
    t0 = now_s();
    rc = ofccl_allgather(comm, in, out, block, OFCCL_U8, &req);
    posted = now_s() - t0;
    if (rc == 0)
        ofccl_test(req, &done);
    printf("rank %d: all-gather behind a held stream: posted in %.1f ms, %s\n", rank, posted * 1e3,
           rc     ? ofccl_strerror(rc)
           : done ? "DONE (wrong)"
                  : "not done");
    if (rc != 0 || done != 0 || posted > 0.2)
        bad = 1;
    usleep(300000); /* every rank has posted behind its held stream */
    if (rc == 0 && ofccl_test(req, &done) == 0 && done)
        bad = printf("rank %d: done while its stream is still held\n", rank) > 0;
    if (release_stream(comm, &held) != 0 || (rc == 0 && ofccl_wait(req) != 0))
        bad = printf("rank %d: %s\n", rank, ofccl_comm_last_error(comm)) > 0;
    if (req != NULL)
        ofccl_req_free(req);
    get(h, out, block * (size_t)n);
    for (int r = 0; r < n && !bad; r++)
        for (size_t i = 0; i < block; i++)
            if (h[(size_t)r * block + i] != byte_of(r, i, 77)) {
                printf("rank %d: byte %zu of rank %d's block is %u, %u expected\n", rank, i, r,
                       h[(size_t)r * block + i], byte_of(r, i, 77));
                bad = 1;
                break;
            }
    ofccl__gpu_mem_free(gpu, dev, src);
    ofccl__gpu_mem_free(gpu, dev, in);
    ofccl__gpu_mem_free(gpu, dev, out);
    free(h);
    return bad;
}

int gpu_staged(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    int n, bad, local;

    (void)ctx;
    if (gpu_up(rank) || ofccl_comm_size(comm, &n) != 0 || ofccl_comm_local_rank(comm, &local) != 0)
        return 70;
    /* The library takes its host's local rank's GPU (no device current). */
    dev = local % ofccl__gpu_device_count(gpu);
    ofccl_comm_set_timeout(comm, 30000);
    if (strcmp(watch_case, "staged-async") == 0)
        return async_behind_held_stream(rank, n, comm) ? 90 : 0;
    bad = every_collective(rank, comm, n);
    if (!bad)
        printf("rank %d: staged all-gather, reduce-scatter and broadcast across two hosts: every "
               "element right\n",
               rank);
    return bad ? 90 : 0;
}

/*
 * "hmem" (OFCCL_GPU_FABRIC=auto, CUDA loaded before the context, so FI_HMEM
 * is asked for) and "hmem-need" (=hmem): the ranks on one host, joined by
 * libfabric's shm (which maps no peer memory, so GPU memory does not take
 * the GPU peer class: it goes through the fabric or is staged). Where
 * OFCCL_TEST_HMEM=1 (a libfabric with CUDA support), every all-gather and
 * broadcast must go as GPU memory (stats.hmem_bytes grows, nothing of them
 * staged) and the reduce-scatter staged; where it is 0 (Debian's, no CUDA),
 * "hmem" must stage everything and "hmem-need" must refuse the first GPU
 * collective naming the setting and why (and OFCCL_TEST_HMEM_WHY, where
 * set: shm with CUDA support refuses since it copies GPU memory with CUDA
 * calls of its own). Unset: "hmem-need" must do one or the other, and
 * "hmem" checks the data and reports the path.
 */
int gpu_hmem(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    const char *want = getenv("OFCCL_TEST_HMEM"), *how = getenv("OFCCL_GPU_FABRIC");
    const char *why = getenv("OFCCL_TEST_HMEM_WHY");
    bool need = how != NULL && strcmp(how, "hmem") == 0;
    int expect = want != NULL ? atoi(want) : -1, n, bad = 0;
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};

    if (gpu == NULL || ofccl_comm_size(comm, &n) != 0)
        return 70;
    ofccl_comm_set_timeout(comm, 30000);
    ofccl_ctx_stats(ctx, &before);
    if (need && expect != 1) {
        /* Refused where libfabric cannot register CUDA memory: with the
         * setting and the reason named, never staged instead. */
        void *buf = dmalloc(4096);
        ofccl_req_t *req = NULL;
        size_t block = 4096 / (size_t)n;
        int rc = ofccl_allgather(comm, (char *)buf + (size_t)rank * block, buf, block, OFCCL_U8,
                                 &req); /* in place */
        const char *msg = ofccl_comm_last_error(comm);
        if (rc == 0)
            rc = ofccl_wait(req);
        ofccl__gpu_mem_free(gpu, dev, buf);
        if (req != NULL)
            ofccl_req_free(req);
        printf("rank %d: OFCCL_GPU_FABRIC=hmem: %s%s%s\n", rank, ofccl_strerror(rc),
               rc != 0 ? ": " : "", rc != 0 ? msg : "");
        if (rc != 0)
            return rc != OFCCL_ERR_NOT_SUPPORTED                  ? 91
                   : strstr(msg, "OFCCL_GPU_FABRIC=hmem") == NULL ? 92
                   : why != NULL && strstr(msg, why) == NULL      ? 94
                                                                  : 0;
        if (expect == 0)
            return 93; /* it went through where FI_HMEM was said unavailable */
        expect = 1;    /* it works here: everything must go that way */
    }
    bad = every_collective(rank, comm, n);
    ofccl_ctx_stats(ctx, &after);
    /* As GPU memory, the call returns at once too (the request is gated on
     * the caller's stream, as a staged one). */
    if (!bad && after.hmem_bytes != before.hmem_bytes)
        bad = async_behind_held_stream(rank, n, comm);
    printf("rank %d: over libfabric's shm: %llu bytes as GPU memory (FI_HMEM), %llu staged\n", rank,
           (unsigned long long)(after.hmem_bytes - before.hmem_bytes),
           (unsigned long long)(after.staged_bytes - before.staged_bytes));
    if (expect == 1 && after.hmem_bytes == before.hmem_bytes) {
        printf("rank %d: FI_HMEM expected, nothing went that way\n", rank);
        bad = 1;
    }
    if (expect == 0 && after.hmem_bytes != before.hmem_bytes) {
        printf("rank %d: FI_HMEM unavailable expected, yet bytes went that way\n", rank);
        bad = 1;
    }
    if (!bad)
        printf("rank %d: all-gather, reduce-scatter and broadcast over libfabric's shm (%s): "
               "every element right\n",
               rank, need ? "OFCCL_GPU_FABRIC=hmem" : "auto");
    return bad ? 90 : 0;
}

/* The GPU peer class off (OFCCL_GPU_PEER_CLASS=0) on one host: GPU memory
 * through the host engine like host memory, the local transport writing the
 * peers' GPU memory itself (CUDA IPC, copies by the GPU's executor) and the
 * GPU's executor summing the reduce-scatters. Every collective right, every
 * byte of it moved as GPU memory (hmem_bytes) and none through host
 * staging; the call returning at once behind a held stream; no registration
 * per call. */
int gpu_engine(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    ofccl_stats_t mid = {.size = sizeof(mid)};
    int n, bad;

    if (gpu_up(rank) != 0 || ofccl_comm_size(comm, &n) != 0)
        return 70;
    ofccl_comm_set_timeout(comm, 30000);
    ofccl_ctx_stats(ctx, &before);
    bad = every_collective(rank, comm, n);
    if (!bad)
        bad = async_behind_held_stream(rank, n, comm);
    /* Fresh cudaMalloc buffers each time: their collectives register
     * nothing (the outputs land in a staging set on the GPU, registered
     * once), so no IPC handle is made or opened per call. */
    ofccl_ctx_stats(ctx, &mid);
    for (int k = 0; k < 3 && !bad; k++)
        bad = gather_once(rank, n, comm, 100003, OFCCL_F32, k == 1, 40u + (unsigned)k) ||
              bcast_once(rank, n, comm, 300000, k % n, 50u + (unsigned)k);
    ofccl_ctx_stats(ctx, &after);
    if (!bad && after.registrations != mid.registrations) {
        printf(
            "rank %d: %llu registrations for 6 collectives on fresh GPU buffers: none expected\n",
            rank, (unsigned long long)(after.registrations - mid.registrations));
        bad = 1;
    }
    printf("rank %d: the host engine on GPU memory: %llu bytes through the local transport as "
           "GPU memory, %llu staged\n",
           rank, (unsigned long long)(after.hmem_bytes - before.hmem_bytes),
           (unsigned long long)(after.staged_bytes - before.staged_bytes));
    if (!bad &&
        (after.hmem_bytes == before.hmem_bytes || after.staged_bytes != before.staged_bytes)) {
        printf("rank %d: the transport should have taken every byte as GPU memory\n", rank);
        bad = 1;
    }
    if (!bad)
        printf("rank %d: all-gather, reduce-scatter and broadcast in the host engine on GPU "
               "memory: every element right\n",
               rank);
    return bad ? 90 : 0;
}
