/*
 * One simulated host cut off mid-run (test/hosts/partition.sh drops every
 * packet on its link): ranks run all-gathers and reduce-scatters in a loop
 * until a collective fails. Every rank must then get TIMEOUT within the
 * deadline plus a margin, with a message naming ranks on the other side of
 * the cut with their host ("rank 5 on host2"): off the cut host, every rank of
 * the cut host; on it, ranks of the other hosts.
 * Placement as in cluster.sh: rank r on host<r / RPH>.
 * Usage: test_host_partition RPH CUT_HOST
 * Prints "collectives running" once it has completed a few rounds, the
 * script's signal to cut.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#define DEADLINE_MS 3000
#define MARGIN_S 2.0 /* scheduling on a loaded 2-core machine */
#define GIVE_UP_S 60 /* no failure by then: the cut never came */
#define COUNT 16384

static ofccl_ctx_t *ctx;
static ofccl_comm_t *comm;
static int rank, size, rph, cut;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int one_round(int k, float *in, float *out)
{
    ofccl_req_t *req = NULL;
    int rc = k % 2 == 0 ? ofccl_allgather(comm, in, out, COUNT, OFCCL_F32, &req)
                        : ofccl_reduce_scatter(comm, out, in, COUNT, OFCCL_F32,
                                               (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    return rc;
}

static void test_cut(void)
{
    float *in = calloc(COUNT, 4), *out = calloc((size_t)COUNT * (size_t)size, 4);
    double start = now_s(), took = 0;
    int rc = 0, good = 0, named = 0, wrong = 0;
    const char *msg;

    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    while (now_s() - start < GIVE_UP_S) {
        double t0 = now_s();
        rc = one_round(good, in, out);
        if (rc != 0) {
            took = now_s() - t0;
            break;
        }
        if (++good == 3) {
            printf("rank %d: collectives running\n", rank);
            fflush(stdout);
        }
        usleep(20000);
    }
    msg = ofccl_comm_last_error(comm);
    printf("rank %d on host%d: after %d good rounds: %s in %.2f s: %s\n", rank, rank / rph, good,
           ofccl_strerror(rc), took, rc ? msg : "");
    CU_ASSERT(good >= 3);
    CU_ASSERT_EQUAL(rc, OFCCL_ERR_TIMEOUT);
    CU_ASSERT(took < DEADLINE_MS / 1000.0 + MARGIN_S);
    /* Off the cut host, every cut rank must be named. On it, the message lists
     * as many of the other side's ranks as fit (at least one); either way it
     * names no rank of the writer's own side, which all still answer. */
    for (int p = 0; p < size && rc != 0; p++) {
        char want[48];
        int across = (p / rph == cut) != (rank / rph == cut);
        snprintf(want, sizeof(want), "rank %d on host%d ", p, p / rph);
        if (strstr(msg, want) != NULL) {
            named += across;
            if (!across) {
                printf("rank %d: the message names '%s', on this side of the cut\n", rank, want);
                wrong++;
            }
        } else if (across && rank / rph != cut) {
            printf("rank %d: the message does not name '%s'\n", rank, want);
            wrong++;
        }
    }
    CU_ASSERT(named > 0);
    CU_ASSERT_EQUAL(wrong, 0);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    static const cu_test_t tests[] = {
        {"a host cut off: TIMEOUT naming the ranks across the cut", test_cut},
        {NULL, NULL},
    };
    int rc;

    rph = argc > 2 ? atoi(argv[1]) : 0;
    cut = argc > 2 ? atoi(argv[2]) : -1;
    if (rph < 1 || cut < 0) {
        fprintf(stderr, "usage: test_host_partition RANKS_PER_HOST CUT_HOST\n");
        return 2;
    }
    if ((rc = ofccl_ctx_create(&p, &ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    if ((rc = ofccl_comm_world(ctx, &comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_size(comm, &size);
    ofccl_comm_set_timeout(comm, DEADLINE_MS);
    rc = cu_run("host-partition", tests);
    if (ofccl_comm_destroy(comm) || ofccl_ctx_destroy(ctx))
        rc = 1;
    return rc;
}
