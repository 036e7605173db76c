/*
 * The caller's own GPU memory registered with the communicator
 * (ofccl_gpu_register), byte for byte against what each rank computes:
 * - cudaMalloc memory: two registrations inside one allocation (one peer
 *   mapping shared), all-gather in place and out of place, every dtype,
 *   broadcast from every root at an offset;
 * - virtual memory made as PyTorch's expandable segments make it (pieces of
 *   2 MiB shareable as descriptors, mapped side by side), registered across
 *   three pieces from an offset inside the first;
 * - deregistering while a collective runs is BUSY, after it works; the
 *   memory then goes through the scratch buffer, still right;
 * - host memory is refused on every rank, and the communicator goes on;
 * - memory freed while registered (and allocated again at the same address)
 *   is seen at its next use: refused on every rank, the communicator goes on;
 * - last, the last rank's output in another registration than its peers'
 *   (same offset): MISMATCH on every rank, naming the registration.
 * reg-size: the last rank registers another size: MISMATCH on every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gtest.h"

static int bcast_at(int rank, ofccl_comm_t *comm, char *buf, size_t len, int root, const char *what)
{
    uint8_t *h = malloc(len + 1);
    ofccl_req_t *req;
    int rc, bad = 0;

    for (size_t i = 0; i < len; i++)
        h[i] = rank == root ? byte_of(root, i, 9) : 0xa5;
    put(buf, h, len);
    rc = ofccl_broadcast(comm, buf, len, OFCCL_U8, root, &req);
    if (rc == 0 && (rc = ofccl_wait(req)) == 0)
        ofccl_req_free(req);
    if (rc != 0) {
        printf("rank %d: broadcast from %d (%s): %s: %s\n", rank, root, what, ofccl_strerror(rc),
               ofccl_comm_last_error(comm));
        free(h);
        return 1;
    }
    get(h, buf, len);
    for (size_t i = 0; i < len; i++)
        if (h[i] != byte_of(root, i, 9)) {
            printf("rank %d: broadcast from %d (%s): byte %zu wrong\n", rank, root, what, i);
            bad = 1;
            break;
        }
    free(h);
    return bad;
}

static int reg(int rank, ofccl_comm_t *comm, void *p, size_t len, const char *what)
{
    int rc = ofccl_gpu_register(comm, p, len);

    if (rc != 0)
        printf("rank %d: registering %s: %s: %s\n", rank, what, ofccl_strerror(rc),
               ofccl_comm_last_error(comm));
    return rc != 0;
}

/* cudaMalloc memory: two registrations in one allocation. */
static int malloc_part(int rank, int n, ofccl_comm_t *comm, char **a_out, size_t *r_out)
{
    size_t block = (1u << 20) + 8, R = block * (size_t)n;
    char *a = dmalloc(2 * R + 4096), *A = a, *B = a + R + 256;
    char *src = dmalloc(block);
    int bad = 0;

    if (a == NULL || src == NULL || reg(rank, comm, A, R, "A") || reg(rank, comm, B, R, "B"))
        return 1;
    bad |= gather_at(rank, n, comm, A, NULL, block, OFCCL_U8, 1, "registered, in place");
    bad |= gather_at(rank, n, comm, B, src, block, OFCCL_U8, 2, "registered, out of place");
    for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
        bad |= gather_at(rank, n, comm, A + 256, NULL, 1000 + (size_t)dt, (ofccl_dtype_t)dt,
                         10 + (unsigned)dt, "registered, each dtype");
    for (int root = 0; root < n; root++)
        bad |= bcast_at(rank, comm, B + 512, block, root, "registered");
    ofccl__gpu_mem_free(gpu, dev, src);
    *a_out = a;
    *r_out = R;
    return bad;
}

/* Virtual memory over three pieces, from an offset inside the first. */
static int vmm_part(int rank, int n, ofccl_comm_t *comm)
{
    ofccl__err_t e;
    size_t total = 0, len, block;
    char *v = NULL;
    int bad = 0;

    if (ofccl__gpu_vmm_alloc(gpu, dev, 2u << 20, 3, (void **)&v, &total, &e) != 0) {
        printf("rank %d: virtual GPU memory: %s\n", rank, e.msg);
        return 1;
    }
    len = total - 8192;
    block = len / (size_t)n / 256 * 256;
    if (reg(rank, comm, v + 4096, len, "virtual memory"))
        return 1;
    bad |= gather_at(rank, n, comm, v + 4096, NULL, block, OFCCL_U8, 3, "virtual memory");
    for (int root = 0; root < n; root++)
        bad |= bcast_at(rank, comm, v + 4096, len, root, "virtual memory");
    if (ofccl_gpu_deregister(comm, v + 4096) != 0)
        bad = 1;
    ofccl__gpu_vmm_free(gpu, dev, v, total);
    return bad;
}

/* BUSY while a collective uses it (its stream held, so that it surely
 * does); after, gone, and the memory still works (through the scratch
 * buffer). */
static int drop_part(int rank, int n, ofccl_comm_t *comm, char *a, size_t R)
{
    size_t block = R / (size_t)n;
    held_stream_t held;
    ofccl_req_t *req;
    int rc, bad = 0;

    if (hold_stream(comm, &held) != 0 ||
        ofccl_allgather(comm, a + (size_t)rank * block, a, block, OFCCL_U8, &req) != 0)
        return 1;
    rc = ofccl_gpu_deregister(comm, a);
    if (rc != OFCCL_ERR_BUSY) {
        printf("rank %d: deregister during a collective: %s, BUSY expected\n", rank,
               ofccl_strerror(rc));
        bad = 1;
    }
    if (release_stream(comm, &held) != 0 || ofccl_wait(req) != 0)
        return 1;
    ofccl_req_free(req);
    if (ofccl_gpu_deregister(comm, a) != 0 || ofccl_gpu_deregister(comm, a + R + 256) != 0) {
        printf("rank %d: deregister: %s\n", rank, ofccl_comm_last_error(comm));
        return 1;
    }
    if (ofccl_gpu_deregister(comm, a) != OFCCL_ERR_INVALID_ARG)
        bad = 1;
    bad |= gather_at(rank, n, comm, a, NULL, block, OFCCL_U8, 4, "deregistered");
    return bad;
}

/* Host memory, then memory freed while registered: refused everywhere. */
static int refuse_part(int rank, int n, ofccl_comm_t *comm)
{
    size_t block = 65536, R = block * (size_t)n;
    char *host = malloc(R), *c, *c2;
    int rc, bad = 0;

    rc = ofccl_gpu_register(comm, host, R);
    printf("rank %d: registering host memory: %s: %s\n", rank, ofccl_strerror(rc),
           ofccl_comm_last_error(comm));
    bad |= rc != OFCCL_ERR_INVALID_ARG;
    free(host);
    if ((c = dmalloc(R)) == NULL || reg(rank, comm, c, R, "C"))
        return 1;
    /* The misuse the check is there for: freed while the peers map it. */
    ofccl__gpu_mem_free(gpu, dev, c);
    c2 = dmalloc(R);
    /* Every rank must see the same thing: only where every rank got the
     * same address back can the check run (the driver decides). */
    int same = c2 == c, all_same = 0;
    ofccl_req_t *req;
    int *flags = calloc((size_t)n, sizeof(int));
    if (ofccl_allgather(comm, &same, flags, sizeof(int), OFCCL_U8, &req) == 0 &&
        ofccl_wait(req) == 0) {
        ofccl_req_free(req);
        all_same = 1;
        for (int r = 0; r < n; r++)
            all_same &= flags[r];
    }
    free(flags);
    if (all_same) {
        rc = ofccl_allgather(comm, c2 + (size_t)rank * block, c2, block, OFCCL_U8, &req);
        printf("rank %d: all-gather into memory freed while registered: %s: %s\n", rank,
               ofccl_strerror(rc), ofccl_comm_last_error(comm));
        bad |= rc != OFCCL_ERR_INVALID_ARG || strstr(ofccl_comm_last_error(comm), "freed") == NULL;
        bad |= gather_at(rank, n, comm, c2, NULL, block, OFCCL_U8, 5, "after the freed one");
    } else {
        printf("rank %d: the freed-while-registered check did not run: the driver gave other "
               "addresses\n",
               rank);
    }
    ofccl__gpu_mem_free(gpu, dev, c2);
    return bad;
}

static int n_of(ofccl_comm_t *comm)
{
    int n = 0;

    ofccl_comm_size(comm, &n);
    return n;
}

int gpu_register(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    int n = n_of(comm), bad = 0;
    size_t R = 0, block = 4096;
    char *a = NULL, *d1, *d2, *out;
    ofccl_req_t *req;
    int rc;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    ofccl_comm_set_timeout(comm, 20000);
    bad |= malloc_part(rank, n, comm, &a, &R);
    bad |= vmm_part(rank, n, comm);
    bad |= drop_part(rank, n, comm, a, R);
    bad |= refuse_part(rank, n, comm);
    ofccl__gpu_mem_free(gpu, dev, a);
    if (bad)
        return 80;
    /* Last: the last rank's output in the other registration. */
    d1 = dmalloc(block * (size_t)n);
    d2 = dmalloc(block * (size_t)n);
    if (reg(rank, comm, d1, block * (size_t)n, "D1") ||
        reg(rank, comm, d2, block * (size_t)n, "D2"))
        return 81;
    out = rank == n - 1 ? d2 : d1;
    rc = ofccl_allgather(comm, out + (size_t)rank * block, out, block, OFCCL_U8, &req);
    if (rc == 0)
        rc = ofccl_wait(req);
    printf("rank %d: all-gather into another registration: %s: %s\n", rank, ofccl_strerror(rc),
           ofccl_comm_last_error(comm));
    if (rc != OFCCL_ERR_MISMATCH || strstr(ofccl_comm_last_error(comm), "registration") == NULL)
        return 82;
    return 0;
}

int gpu_register_size(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    int n = n_of(comm), rc;
    size_t len = rank == n - 1 ? 8192 : 4096;
    void *p;

    (void)ctx;
    if (gpu_up(rank) || (p = dmalloc(8192)) == NULL)
        return 70;
    rc = ofccl_gpu_register(comm, p, len);
    printf("rank %d: registering %zu bytes: %s: %s\n", rank, len, ofccl_strerror(rc),
           ofccl_comm_last_error(comm));
    return rc == OFCCL_ERR_MISMATCH && strstr(ofccl_comm_last_error(comm), "same sizes") ? 0 : 83;
}
