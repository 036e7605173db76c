/*
 * The main job: every rank writes a buffer into its right neighbour's window
 * with RMA write-with-data, the neighbour counts the signal and checks every
 * element; repeated over a size sweep, it prints a bandwidth table with the
 * number of wrong elements. Exits non-zero if anything was wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "util.h"

static ofccl_comm_t *comm;
static int rank, size;
static uint64_t arrived;

static void on_signal(void *arg, uint32_t payload)
{
    (void)arg;
    (void)payload;
    arrived++;
}

static uint32_t pattern(int r, size_t i, int it)
{
    return (uint32_t)r * 2654435761u ^ (uint32_t)i * 40503u ^ (uint32_t)it * 97u;
}

static int post(int peer, const void *src, size_t len, ofccl__mr_t *mr, ofccl__win_t *win)
{
    ofccl__err_t e;
    int rc;

    for (;;) {
        rc = ofccl__ep_writedata(comm->ep, peer, src, len, mr, &win->peers[peer], 0,
                                 ofccl__sig_encode(OFCCL__SIG_TEST, comm->id, (uint32_t)rank),
                                 &ofccl__comm_op_plain, &e);
        if (rc != OFCCL_ERR_AGAIN)
            break;
        if ((rc = ofccl__comm_progress(comm)) != 0)
            return rc;
    }
    if (rc == 0)
        comm->ops_pending++;
    else
        fprintf(stderr, "rank %d: %s\n", rank, e.msg);
    return rc;
}

static int wait_arrival(uint64_t want)
{
    uint64_t deadline = ofccl__comm_deadline(comm);

    while (arrived < want || comm->ops_pending > 0) {
        int rc = ofccl__comm_progress(comm);
        if (rc)
            return rc;
        if (ofccl__now_ns() > deadline)
            return OFCCL_ERR_TIMEOUT;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 16u << 20;
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl__win_t *win = NULL;
    ofccl__mr_t *mr = NULL;
    ofccl__err_t e;
    uint32_t *src, *dst;
    uint64_t total_wrong = 0;
    int rc, it_total = 0;

    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    if ((rc = ofccl_comm_world(ctx, &comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    src = aligned_alloc(4096, max_bytes);
    dst = aligned_alloc(4096, max_bytes);
    if (!src || !dst || size < 2) {
        fprintf(stderr, "rank %d: need 2+ ranks and %zu bytes\n", rank, max_bytes);
        return 1;
    }
    ofccl__comm_set_sink(comm, OFCCL__SIG_TEST, on_signal, NULL);
    if (ofccl__win_create(comm, dst, max_bytes, OFCCL__ACC_REMOTE_WRITE, &win) != 0 ||
        ofccl__mr_reg(comm->ep, src, max_bytes, OFCCL__ACC_LOCAL, &mr, &e) != 0) {
        fprintf(stderr, "rank %d: registration failed: %s\n", rank, ofccl_comm_last_error(comm));
        return 1;
    }
    if (rank == 0)
        printf("# ofccl %s: %d ranks, provider %s, ring of RMA write-with-data, checked\n"
               "# %12s %10s %12s %10s %8s\n",
               ofccl_version_string(), size, ofccl_ctx_provider(ctx), "size(B)", "iters",
               "time(us)", "GB/s", "#wrong");
    for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
        int iters = bytes <= (1u << 20) ? 50 : 10;
        size_t words = bytes / sizeof(uint32_t);
        uint64_t wrong = 0, busy_ns = 0;
        int left = (rank - 1 + size) % size, right = (rank + 1) % size;

        for (int it = 0; it < iters; it++, it_total++) {
            for (size_t i = 0; i < words; i++)
                src[i] = pattern(rank, i, it_total);
            if (ofccl_barrier(comm) != 0)
                goto fail;
            /* Only the transfer is timed: not the fill, the barrier or the check. */
            uint64_t t0 = ofccl__now_ns();
            if (post(right, src, bytes, mr, win) != 0 || wait_arrival((uint64_t)it_total + 1))
                goto fail;
            busy_ns += ofccl__now_ns() - t0;
            for (size_t i = 0; i < words; i++)
                wrong += dst[i] != pattern(left, i, it_total);
        }
        double us = (double)busy_ns / 1e3 / iters;
        total_wrong += wrong;
        if (rank == 0)
            printf("  %12zu %10d %12.1f %10.3f %8llu\n", bytes, iters, us, bytes / us / 1e3,
                   (unsigned long long)wrong);
    }
    ofccl_barrier(comm);
    ofccl__mr_dereg(mr);
    ofccl__win_destroy(win);
    ofccl_comm_destroy(comm);
    ofccl_ctx_destroy(ctx);
    free(src);
    free(dst);
    if (rank == 0)
        printf("# %s\n", total_wrong ? "FAILED: wrong elements" : "all elements correct");
    return total_wrong ? 1 : 0;
fail:
    fprintf(stderr, "rank %d: %s\n", rank, ofccl_comm_last_error(comm));
    return 1;
}
