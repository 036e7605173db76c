/*
 * One simulated host cut off mid-run (test/hosts/partition.sh drops every
 * packet on its link): ranks run all-gathers and reduce-scatters in a loop
 * until a collective fails. Every rank must then get TIMEOUT within the
 * deadline plus a margin, with a message naming only ranks on the other side
 * of the cut, each with its host ("rank 5 on host2"), and at least one.
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

#include "hosts.h"

#define DEADLINE_MS 3000
#define MARGIN_S 2.0 /* scheduling on a loaded 2-core machine */
#define GIVE_UP_S 60 /* no failure by then: the cut never came */
#define COUNT 16384

static int rph, cut;

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
    /* Every "rank N on HOST" in the message must be a rank across the cut, on
     * the host where it runs; at least one must be there. Not necessarily all:
     * a cut rank whose data arrived before the cut is not waited for. */
    for (const char *at = rc ? strstr(msg, "rank ") : NULL; at; at = strstr(at + 5, "rank ")) {
        char host[64], want[32];
        int p, n = 0;
        if (sscanf(at, "rank %d on %63s%n", &p, host, &n) != 2 || n == 0)
            continue; /* "rank 3: all-gather ...", the message's own prefix */
        snprintf(want, sizeof(want), "host%d", p / rph);
        if (p < 0 || p >= size || (p / rph == cut) == (rank / rph == cut) ||
            strcmp(host, want) != 0) {
            printf("rank %d: the message names rank %d on %s; expected only ranks across the "
                   "cut, each on its own host (rank %d runs on %s)\n",
                   rank, p, host, p, want);
            wrong++;
        }
        named++;
    }
    CU_ASSERT(named > 0);
    CU_ASSERT_EQUAL(wrong, 0);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"a host cut off: TIMEOUT naming the ranks across the cut", test_cut},
        {NULL, NULL},
    };

    rph = argc > 2 ? atoi(argv[1]) : 0;
    cut = argc > 2 ? atoi(argv[2]) : -1;
    if (rph < 1 || cut < 0) {
        fprintf(stderr, "usage: test_host_partition RANKS_PER_HOST CUT_HOST\n");
        return 2;
    }
    return hosts_run_suite("host-partition", tests, DEADLINE_MS);
}
