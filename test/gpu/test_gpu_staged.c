/*
 * GPU memory across (simulated) hosts: test_gpu's "staged" scenarios run the
 * ranks as two hosts (OFCCL_HOST_ID, tcp between them: the first half of the
 * ranks and the rest, or every other rank), where GPU buffers are staged
 * through host memory inside the library, chunk by chunk (OFCCL_GPU_STAGE_BYTES
 * small, so most sizes take many chunks and a slot is reused):
 * hierarchically ("staged", "staged-x": OFCCL_GPU_HIER=1, ghier.c, each
 * host's ranks as a communicator of their own, from 2 ranks a host), or
 * every rank ("staged-flat"). All-gather (every dtype, in place and not), reduce-scatter (f32
 * and bf16, sum and average, in place and not) and broadcast from every root,
 * each checked element by element against what each rank computes itself
 * (the reduce-scatter within the bound of any order of additions: the
 * host's algorithm across hosts picks its own).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gtest.h"

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

int gpu_staged(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    /* With OFCCL_GPU_STAGE_BYTES = 64 KiB: a rank's piece is 64 KiB / n. */
    static const size_t counts[] = {0, 1, 1000, 16384, 100003, 300000};
    const ofccl_redop_t sum = {OFCCL_OP_SUM, 1}, avg = {OFCCL_OP_AVG, 1};
    unsigned salt = 1;
    int n, bad = 0;

    (void)ctx;
    if (gpu_up(rank) || ofccl_comm_size(comm, &n) != 0)
        return 70;
    ofccl_comm_set_timeout(comm, 30000);
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
    if (!bad)
        printf("rank %d: staged all-gather, reduce-scatter and broadcast across two hosts: every "
               "element right\n",
               rank);
    return bad ? 90 : 0;
}
