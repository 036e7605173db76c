/*
 * One simulated host cut off (test/hosts/partition.sh drops every packet on
 * its link) while the ranks run all-gathers and reduce-scatters in a loop.
 * Every rank must get TIMEOUT within the deadline plus a margin, with a
 * message naming at least one rank, each with the host it runs on.
 *
 *   between: the ranks agree (through the collectives themselves) to pause
 *            after the same round once the script asks; the script cuts and
 *            lets them go on. Every rank then fails in the same collective,
 *            so the message names only ranks across the cut: off the cut
 *            host, every cut rank; on it, ranks of the other hosts.
 *   any:     the cut lands wherever the loop is, possibly inside a
 *            collective. A rank that finished that one before its peers then
 *            fails in the next and rightly names the peers that fell behind,
 *            whichever side they are on: only the common rules are checked.
 *
 * Placement as in cluster.sh: rank r on host<r / RPH>. The script and the
 * ranks talk through files in $CLUSTER_DIR, which every host sees: the ranks
 * print "collectives running" and (between) "paused"; the script creates
 * "stop" and "go". Usage: test_host_partition RPH CUT_HOST between|any
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

static int rph, cut, between;
static char stop_path[512], go_path[512];

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

/* between: whether some rank saw "stop"; every rank gets the same answer,
 * since the flags travel in an all-gather. */
static int agree_to_pause(int *pause)
{
    uint8_t mine = access(stop_path, F_OK) == 0, all[256];
    ofccl_req_t *req = NULL;
    int rc = ofccl_allgather(comm, &mine, all, 1, OFCCL_U8, &req);

    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    *pause = 0;
    for (int p = 0; p < size && rc == 0; p++)
        *pause |= all[p];
    return rc;
}

/* Every "rank N on HOST" and "ranks A-B on HOST" in the message: each rank
 * must run on HOST, and in mode between, be across the cut. Returns how many
 * ranks it names; counts faults. */
static int check_names(const char *msg, int *wrong)
{
    char *seen = calloc((size_t)size, 1);
    int named = 0;

    for (const char *at = strstr(msg, "rank"); at; at = strstr(at + 4, "rank")) {
        char host[64], want[32];
        int a, b, n = 0;
        if (sscanf(at, "ranks %d-%d on %63s%n", &a, &b, host, &n) == 3 && n > 0 && a <= b) {
        } else if (n = 0, sscanf(at, "rank %d on %63s%n", &a, host, &n) == 2 && n > 0) {
            b = a;
        } else {
            continue; /* "rank 3: all-gather ...", the message's own prefix */
        }
        for (int p = a; p <= b; p++) {
            snprintf(want, sizeof(want), "host%d", p / rph);
            named++;
            if (p < 0 || p >= size || p == rank || strcmp(host, want) != 0) {
                printf("rank %d: the message names rank %d on %s; it runs on %s\n", rank, p, host,
                       want);
                (*wrong)++;
                continue;
            }
            seen[p] = 1;
            if (between && (p / rph == cut) == (rank / rph == cut)) {
                printf("rank %d: the message names rank %d, on this side of the cut\n", rank, p);
                (*wrong)++;
            }
        }
    }
    /* Off the cut host, in mode between, every cut rank owes its data. */
    for (int p = 0; between && rank / rph != cut && p < size; p++)
        if (p / rph == cut && !seen[p]) {
            printf("rank %d: the message does not name rank %d\n", rank, p);
            (*wrong)++;
        }
    free(seen);
    return named;
}

static void test_cut(void)
{
    float *in = calloc(COUNT, 4), *out = calloc((size_t)COUNT * (size_t)size, 4);
    double start = now_s(), took = 0;
    int rc = 0, good = 0, wrong = 0, pause = 0, paused = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_FATAL(size <= 256);
    while (now_s() - start < GIVE_UP_S) {
        double t0 = now_s();
        rc = one_round(good, in, out);
        if (rc == 0 && between && !paused)
            rc = agree_to_pause(&pause);
        if (rc != 0) {
            took = now_s() - t0;
            break;
        }
        if (++good == 3) {
            printf("rank %d: collectives running\n", rank);
            fflush(stdout);
        }
        if (pause && !paused) {
            printf("rank %d: paused after round %d\n", rank, good);
            fflush(stdout);
            while (access(go_path, F_OK) != 0 && now_s() - start < GIVE_UP_S)
                usleep(10000);
            paused = 1;
        }
        usleep(20000);
    }
    printf("rank %d on host%d: after %d good rounds: %s in %.2f s: %s\n", rank, rank / rph, good,
           ofccl_strerror(rc), took, rc ? ofccl_comm_last_error(comm) : "");
    CU_ASSERT(good >= 3);
    CU_ASSERT(!between || paused);
    CU_ASSERT_EQUAL(rc, OFCCL_ERR_TIMEOUT);
    CU_ASSERT(took < DEADLINE_MS / 1000.0 + MARGIN_S);
    if (rc != 0)
        CU_ASSERT(check_names(ofccl_comm_last_error(comm), &wrong) > 0);
    CU_ASSERT_EQUAL(wrong, 0);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"a host cut off: TIMEOUT naming ranks on their hosts", test_cut},
        {NULL, NULL},
    };
    const char *dir = getenv("CLUSTER_DIR");

    rph = argc > 3 ? atoi(argv[1]) : 0;
    cut = argc > 3 ? atoi(argv[2]) : -1;
    between = argc > 3 && strcmp(argv[3], "between") == 0;
    if (rph < 1 || cut < 0 || (!between && strcmp(argv[3], "any") != 0) || dir == NULL) {
        fprintf(stderr, "usage: test_host_partition RANKS_PER_HOST CUT_HOST between|any "
                        "(under test/hosts/partition.sh, which sets CLUSTER_DIR)\n");
        return 2;
    }
    snprintf(stop_path, sizeof(stop_path), "%s/stop", dir);
    snprintf(go_path, sizeof(go_path), "%s/go", dir);
    return hosts_run_suite("host-partition", tests, DEADLINE_MS, NULL);
}
