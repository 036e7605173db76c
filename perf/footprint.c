/*
 * Memory per communicator: for each provider, create a context, then N
 * communicators, each used once (a small all-gather, so connections and the
 * pool exist), and report what one communicator costs in resident memory
 * (RSS), in pool memory (ofccl_ctx_stats) and beyond its pool, and in address
 * space (what RLIMIT_AS counts). The worst rank is reported.
 * Usage: mpirun -np 2 footprint [-n comms] [-p local,shm,tcp]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofccl.h"

#define MAX_COMMS 256
#define MIB (1024.0 * 1024.0)

/* Resident and mapped bytes of this process (/proc/self/statm). */
static void usage_now(double *rss, double *vm)
{
    unsigned long long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f != NULL) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2)
            size = res = 0;
        fclose(f);
    }
    *vm = (double)size * (double)sysconf(_SC_PAGESIZE);
    *rss = (double)res * (double)sysconf(_SC_PAGESIZE);
}

static double pool_bytes(ofccl_ctx_t *ctx)
{
    ofccl_stats_t st = {.size = sizeof(st)};

    return ofccl_ctx_stats(ctx, &st) == 0 ? (double)st.pool_bytes : 0.0;
}

static int use_once(ofccl_comm_t *comm, int size)
{
    float in[1024] = {0}, *out = calloc((size_t)size * 1024, sizeof(float));
    ofccl_req_t *req;
    int rc = out ? ofccl_allgather(comm, in, out, 1024, OFCCL_F32, &req) : OFCCL_ERR_NO_MEMORY;

    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    free(out);
    return rc;
}

/* Measure one provider; rank 0 prints a row. Returns 0 or an ofccl error. */
static int measure(const char *prov, int n)
{
    char setting[80], err[512] = "";
    const char *settings[] = {setting, NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    static ofccl_comm_t *comms[MAX_COMMS];
    ofccl_ctx_t *ctx;
    double rss0, vm0, rss1, vm1, pool;
    float mine[4], *all;
    int rank = 0, size = 1, made = 0, rc = 0;

    snprintf(setting, sizeof(setting), "PROVIDER=%s", prov);
    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "footprint: %s: ofccl_ctx_create: %s: %s\n", prov, ofccl_strerror(rc), err);
        return rc;
    }
    usage_now(&rss0, &vm0);
    for (; made < n; made++) {
        rc = ofccl_comm_world(ctx, &comms[made]);
        if (rc == 0 && made == 0)
            ofccl_comm_size(comms[0], &size);
        if (rc == 0)
            rc = use_once(comms[made], size);
        if (rc != 0) {
            fprintf(stderr, "footprint: %s: communicator %d: %s: %s\n", prov, made + 1,
                    ofccl_strerror(rc),
                    comms[made] ? ofccl_comm_last_error(comms[made]) : ofccl_ctx_last_error(ctx));
            break;
        }
    }
    usage_now(&rss1, &vm1);
    pool = pool_bytes(ctx);
    if (made > 0) {
        ofccl_comm_rank(comms[0], &rank);
        mine[0] = (float)((rss1 - rss0) / made / MIB);
        mine[1] = (float)(pool / made / MIB);
        mine[2] = (float)((rss1 - rss0 - pool) / made / MIB);
        mine[3] = (float)((vm1 - vm0) / made / MIB);
        all = calloc((size_t)size * 4, sizeof(float));
        if (all != NULL) {
            ofccl_req_t *req;
            if (ofccl_allgather(comms[0], mine, all, 4, OFCCL_F32, &req) == 0 &&
                ofccl_wait(req) == 0) {
                for (int r = 1; r < size; r++)
                    for (int k = 0; k < 4; k++)
                        if (all[r * 4 + k] > all[k])
                            all[k] = all[r * 4 + k];
                if (rank == 0)
                    printf("%-8s %6d %6d %12.2f %12.2f %12.2f %12.2f\n", prov, size, made, all[0],
                           all[1], all[2], all[3]);
                ofccl_req_free(req);
            }
            free(all);
        }
    }
    for (int k = MAX_COMMS - 1; k >= 0; k--) /* newest first; a half-used one too */
        if (comms[k] != NULL && ofccl_comm_destroy(comms[k]) != 0)
            fprintf(stderr, "footprint: %s: destroy: %s\n", prov, ofccl_ctx_last_error(ctx));
    memset(comms, 0, sizeof(comms));
    ofccl_ctx_destroy(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    char provs[128] = "local,shm,tcp";
    int n = 8, opt, status = 0;

    while ((opt = getopt(argc, argv, "n:p:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'p')
            snprintf(provs, sizeof(provs), "%s", optarg);
        else {
            fprintf(stderr, "usage: footprint [-n comms] [-p local,shm,tcp]\n");
            return 2;
        }
    }
    if (n < 1 || n > MAX_COMMS) {
        fprintf(stderr, "footprint: -n must be 1..%d\n", MAX_COMMS);
        return 2;
    }
    printf("# MiB per communicator (the worst rank); pool = ofccl's staging and user pool\n");
    printf("%-8s %6s %6s %12s %12s %12s %12s\n", "provider", "ranks", "comms", "RSS", "pool",
           "RSS-pool", "addr-space");
    for (char *save = NULL, *prov = strtok_r(provs, ",", &save); prov != NULL;
         prov = strtok_r(NULL, ",", &save))
        if (measure(prov, n) != 0)
            status = 1;
    return status;
}
