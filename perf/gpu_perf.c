/*
 * ofccl's GPU all-gather and broadcast, nccl-tests style: one forked rank per
 * GPU (TCP rendezvous, local transport), in place in a symmetric pool buffer
 * (-m pool), in cudaMalloc memory registered with ofccl_gpu_register (-m reg)
 * or in plain cudaMalloc memory (-m plain: the peers write the pool's
 * scratch, copied out at the end),
 * the copy kernel on OFCCL_GPU_SMS SMs or the copy engines (-s 0), timed
 * with CUDA events around `iters` back-to-back collectives on one stream
 * after a warm-up; prints bus bandwidth (all-gather size*(n-1)/n/t, broadcast
 * size/t; size = bytes of the gathered buffer), the slowest rank's time.
 * The last round's bytes are checked on every rank.
 * -H HOSTS splits the ranks into that many simulated hosts (OFCCL_HOST_ID,
 * tcp between them): GPU memory is then staged through host memory, and
 * -m host runs the same collectives on ofccl host memory (the reference the
 * staging is measured against); both timed on the host's clock.
 * -p PROVIDER joins the ranks through that provider instead (e.g. shm on one
 * host: no peer memory maps, so plain GPU memory goes through the fabric as
 * GPU memory where it takes it, OFCCL_GPU_FABRIC, else staged; timed on the
 * host's clock; CUDA is loaded before the context, so that auto asks).
 * Usage: gpu_perf [-n GPUS] [-b MIN] [-e MAX] [-i ITERS] [-s SMS] [-m pool|reg|plain|host]
 *        [-H HOSTS] [-p PROVIDER]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forkrun.h"
#include "gpu/gpu.h"

#define MAXSIZES 32
static size_t sizes[MAXSIZES];
static int nsizes, iters = 20;
static char sms_setting[32] = "";
static const char *mem = "pool";
static int hosts = 1;
static const char *prov_arg; /* -p */
static char host_id[FORK_MAX][32];
static double *res; /* [rank][size][2] in shared memory */

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    return (size_t)(v * (*end == 'G'   ? 1 << 30
                         : *end == 'M' ? 1 << 20
                         : *end == 'K' ? 1 << 10
                                       : 1));
}

/* A copy between the host and the buffer (plain memcpy where it is ofccl
 * host memory). */
static void copy(ofccl__gpu_t *g, int dev, void *dst, const void *src, size_t len)
{
    ofccl__err_t e;

    if (strcmp(mem, "host") == 0)
        memcpy(dst, src, len);
    else
        ofccl__gpu_copy_sync(g, dev, dst, src, len, &e);
}

static int bench(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl__gpu_t *g = ofccl__gpu_process(NULL, true);
    int dev = rank % ofccl__gpu_device_count(g);
    ofccl__gpu_event_t a, b;
    ofccl__err_t e;
    void *buf;
    size_t max = sizes[nsizes - 1];
    uint8_t *h = malloc(max);
    bool host = strcmp(mem, "host") == 0;
    double t0 = 0;

    (void)ctx;
    if (host ? ofccl_buffer_alloc(comm, max, &buf) != 0
        : strcmp(mem, "pool") == 0
            ? ofccl_gpu_buffer_alloc(comm, max, &buf) != 0
            : ofccl__gpu_mem_alloc(g, dev, max, &buf, &e) != 0 ||
                  (strcmp(mem, "reg") == 0 && ofccl_gpu_register(comm, buf, max) != 0))
        return 1;
    if (ofccl__gpu_event_create(g, dev, true, &a, &e) != 0 ||
        ofccl__gpu_event_create(g, dev, true, &b, &e) != 0)
        return 1;
    for (int si = 0; si < nsizes; si++) {
        size_t block = sizes[si] / (size_t)nranks;
        for (int op = 0; op < 2; op++) {
            ofccl_req_t *req[64];
            int k = 0;
            for (int w = -3; w < iters + 1; w++) {
                if (w == 0 && ofccl__gpu_event_record(g, dev, a, NULL, &e) != 0)
                    return 2;
                if (w == 0)
                    t0 = now_s();
                if (w == iters) {
                    ofccl__gpu_event_record(g, dev, b, NULL, &e);
                    /* check the last round (written before it, so it is what moved) */
                    for (size_t i = 0; i < (op ? sizes[si] : block); i++)
                        h[i] = (uint8_t)(rank * 7 + i * 3 + si);
                    ofccl__gpu_event_sync(g, dev, b, &e);
                    res[((size_t)rank * MAXSIZES + (size_t)si) * 2 + (size_t)op] =
                        hosts > 1 || host || prov_arg != NULL
                            ? (now_s() - t0) * 1e3 / iters
                            : ofccl__gpu_event_ms(g, dev, a, b) / iters;
                    copy(g, dev, op ? buf : (char *)buf + (size_t)rank * block, h,
                         op ? sizes[si] : block);
                }
                int rc = op ? ofccl_broadcast(comm, buf, sizes[si], OFCCL_U8, 0, &req[k])
                            : ofccl_allgather(comm, (char *)buf + (size_t)rank * block, buf, block,
                                              OFCCL_U8, &req[k]);
                if (rc != 0) {
                    printf("rank %d: %s\n", rank, ofccl_comm_last_error(comm));
                    return 3;
                }
                /* Free what completed, keeping the request slots turning. */
                if (++k == 6 || w == iters) {
                    for (int j = 0; j < k; j++) {
                        if (ofccl_wait(req[j]) != 0)
                            return 4;
                        ofccl_req_free(req[j]);
                    }
                    k = 0;
                }
            }
            copy(g, dev, h, buf, op ? sizes[si] : block * (size_t)nranks);
            for (int r = 0; r < (op ? 1 : nranks); r++)
                for (size_t i = 0; i < (op ? sizes[si] : block); i++)
                    if (h[(size_t)r * block + i] != (uint8_t)((op ? 0 : r) * 7 + i * 3 + si)) {
                        printf("rank %d: %s of %zu B: byte %zu of rank %d wrong\n", rank,
                               op ? "broadcast" : "all-gather", sizes[si], i, r);
                        return 5;
                    }
        }
    }
    if (host) {
        ofccl_buffer_free(comm, buf);
    } else if (strcmp(mem, "pool") == 0) {
        ofccl_gpu_buffer_free(comm, buf);
    } else {
        if (strcmp(mem, "reg") == 0)
            ofccl_gpu_deregister(comm, buf);
        ofccl__gpu_mem_free(g, dev, buf);
    }
    free(h);
    return 0;
}

static int cuda_first(int rank)
{
    (void)rank;
    return ofccl__gpu_process(NULL, true) == NULL;
}

int main(int argc, char **argv)
{
    size_t lo = 1 << 20, hi = 512u << 20;
    int opt, n = 0, st[FORK_MAX], bad = 0;

    while ((opt = getopt(argc, argv, "n:b:e:i:s:m:H:p:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'b')
            lo = parse_size(optarg);
        else if (opt == 'e')
            hi = parse_size(optarg);
        else if (opt == 'i')
            iters = atoi(optarg);
        else if (opt == 's')
            snprintf(sms_setting, sizeof(sms_setting), "GPU_SMS=%s", optarg);
        else if (opt == 'm')
            mem = optarg;
        else if (opt == 'H')
            hosts = atoi(optarg) > 1 ? atoi(optarg) : 1;
        else if (opt == 'p')
            prov_arg = optarg;
    }
    if (strcmp(mem, "pool") != 0 && strcmp(mem, "reg") != 0 && strcmp(mem, "plain") != 0 &&
        strcmp(mem, "host") != 0) {
        fprintf(stderr, "gpu_perf: -m pool, reg, plain or host\n");
        return 2;
    }
    for (size_t s = lo; s <= hi && nsizes < MAXSIZES; s *= 2)
        sizes[nsizes++] = s;
    nranks = n > 1 ? n : 2;
    provider = prov_arg != NULL ? prov_arg : hosts > 1 ? "tcp" : "local";
    fork_before_ctx = prov_arg != NULL ? cuda_first : NULL;
    for (int r = 0; r < nranks; r++) {
        snprintf(host_id[r], sizeof(host_id[r]), "HOST_ID=perf-host-%d", r * hosts / nranks);
        rank_setting[r] = hosts > 1 ? host_id[r] : sms_setting[0] ? sms_setting : NULL;
    }
    res = mmap(NULL, sizeof(double) * FORK_MAX * MAXSIZES * 2, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    run(bench, st);
    for (int r = 0; r < nranks; r++)
        bad |= !exited_ok(st[r]);
    if (bad) {
        printf("gpu_perf: a rank failed\n");
        return 1;
    }
    printf("ofccl GPU, %d ranks on %d host(s)%s%s%s, %s, in place in %s, bus GB/s\n%12s %12s "
           "%12s\n",
           nranks, hosts, hosts > 1 ? " (simulated, tcp between them)" : "",
           prov_arg != NULL ? ", provider " : "", prov_arg != NULL ? prov_arg : "",
           sms_setting[0] ? sms_setting : "GPU_SMS default",
           strcmp(mem, "pool") == 0   ? "the symmetric pool"
           : strcmp(mem, "reg") == 0  ? "registered cudaMalloc memory"
           : strcmp(mem, "host") == 0 ? "ofccl host memory (the reference for staging)"
           : hosts > 1                ? "plain cudaMalloc memory (staged through host memory)"
                                      : "plain cudaMalloc memory (through scratch)",
           "size", "all-gather", "broadcast");
    for (int si = 0; si < nsizes; si++) {
        double t[2] = {0, 0};
        for (int r = 0; r < nranks; r++)
            for (int op = 0; op < 2; op++) {
                double v = res[((size_t)r * MAXSIZES + (size_t)si) * 2 + (size_t)op];
                t[op] = v > t[op] ? v : t[op];
            }
        printf("%12zu %12.1f %12.1f\n", sizes[si],
               (double)sizes[si] * (nranks - 1) / nranks / (t[0] * 1e6),
               (double)sizes[si] / (t[1] * 1e6));
    }
    return 0;
}
