/*
 * A rank killed mid-collective, under a launcher: rank 1 of 3 posts an
 * all-gather on the world communicator and SIGKILLs itself; the survivors
 * have the same all-gather pending on the world communicator and one on a
 * split communicator (where world rank 1 has another rank number). Each
 * survivor prints how long after the kill each request failed, and with what.
 *
 * Usage: test_pmix_event event|remote|measure [TIMEOUT_MS]
 *   event    (under a launcher that raises PMIx failure events, such as
 *            pmix_launch) both requests must fail with REMOTE_ERROR naming
 *            the rank (its communicator rank, world rank and host) and the
 *            source "reported by the launcher (PMIx event ...)", well before
 *            the deadline (the time itself is printed, not asserted: a loaded
 *            machine must not fail the test); a later post fails at once, also
 *            on a third communicator with the rank and nothing running.
 *   remote   both requests must fail with REMOTE_ERROR naming the rank, from
 *            whichever source saw the death first (the event, the transport,
 *            the local provider's process watch, a peer's failure notice).
 *   measure  (any launcher) print what happened and when; exit 0 once both
 *            requests have failed, whatever the cause.
 * Files named after the launcher's pid carry the survivors' "posted" to rank
 * 1 (which dies only then) and the kill time back, so that the survivors
 * measure from the kill itself (CLOCK_MONOTONIC, one host).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ofccl.h"

#define COUNT (1u << 20) /* floats per rank: 4 MiB, far above the eager size */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Files shared by the ranks of one launch (named after the launcher's pid):
 * "time" (the kill time) and "ready<rank>" (that survivor has posted). */
static void kill_file(char *path, size_t len)
{
    const char *dir = getenv("TMPDIR");

    snprintf(path, len, "%s/ofccl-pmix-event-%d.time", dir && dir[0] ? dir : "/tmp",
             (int)getppid());
}

static void ready_file(char *path, size_t len, int rank)
{
    const char *dir = getenv("TMPDIR");

    snprintf(path, len, "%s/ofccl-pmix-event-%d.ready%d", dir && dir[0] ? dir : "/tmp",
             (int)getppid(), rank);
}

/* Rank 1 waits (at most 20 s) until both survivors have posted. */
static void wait_ready(void)
{
    char p0[512], p2[512];

    ready_file(p0, sizeof(p0), 0);
    ready_file(p2, sizeof(p2), 2);
    for (int i = 0; i < 2000 && (access(p0, F_OK) != 0 || access(p2, F_OK) != 0); i++)
        usleep(10000);
}

/* The kill time rank 1 wrote, waiting for it a little; 0 if none came. */
static double read_kill_time(void)
{
    char path[512];
    double t = 0;

    kill_file(path, sizeof(path));
    for (int i = 0; i < 200 && t == 0; i++) {
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            if (fscanf(f, "%lf", &t) != 1)
                t = 0;
            fclose(f);
        }
        if (t == 0)
            usleep(10000);
    }
    return t;
}

enum mode { MEASURE, REMOTE, EVENT };

/* Wait for a request (or take its post's error: the news may come before the
 * post), then check its error against what the mode expects. */
static int check(const char *what, int mode, ofccl_comm_t *comm, int posted, ofccl_req_t *req,
                 int rank, const char *comm_rank_of_1, double *done_at)
{
    const char *msg;
    int rc = posted != 0 ? posted : ofccl_wait(req), bad = 0;

    *done_at = now_s();
    msg = ofccl_comm_last_error(comm);
    printf("rank %d, %s: %s: %s\n", rank, what, ofccl_strerror(rc), msg);
    if (rc == 0) {
        printf("rank %d, %s: completed although rank 1 was killed\n", rank, what);
        bad = 1;
    }
    if (mode == REMOTE && (rc != OFCCL_ERR_REMOTE_ERROR || strstr(msg, comm_rank_of_1) == NULL)) {
        printf("rank %d, %s: expected REMOTE_ERROR naming %s\n", rank, what, comm_rank_of_1);
        bad = 1;
    }
    if (mode == EVENT && (rc != OFCCL_ERR_REMOTE_ERROR || strstr(msg, comm_rank_of_1) == NULL ||
                          strstr(msg, "(world rank 1)") == NULL ||
                          strstr(msg, "reported by the launcher (PMIx event") == NULL)) {
        printf("rank %d, %s: expected REMOTE_ERROR naming %s (world rank 1) as reported by the "
               "launcher (PMIx event ...)\n",
               rank, what, comm_rank_of_1);
        bad = 1;
    }
    if (posted == 0)
        ofccl_req_free(req);
    return bad;
}

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "";
    int mode = strcmp(m, "event") == 0 ? EVENT : strcmp(m, "remote") == 0 ? REMOTE : MEASURE;
    unsigned long long timeout_ms = argc > 2 ? strtoull(argv[2], NULL, 10) : 20000;
    ofccl_ctx_t *ctx = NULL;
    ofccl_comm_t *world = NULL, *split = NULL, *alive = NULL, *idle = NULL;
    ofccl_req_t *rw = NULL, *rs = NULL, *late = NULL;
    float *in = calloc(COUNT, 4), *out = calloc((size_t)COUNT * 3, 4);
    float *in2 = calloc(COUNT, 4), *out2 = calloc((size_t)COUNT * 3, 4);
    int rank = -1, size = 0, bad = 0, rc, ret;
    double t_world, t_split, t_kill;

    if ((mode == MEASURE && strcmp(m, "measure") != 0) || !in || !out || !in2 || !out2) {
        fprintf(stderr, "usage: test_pmix_event event|remote|measure [TIMEOUT_MS]\n");
        return 2;
    }
    if ((rc = ofccl_ctx_create(NULL, &ctx)) != 0 || (rc = ofccl_comm_world(ctx, &world)) != 0) {
        fprintf(stderr, "setup: %s\n", ofccl_strerror(rc));
        return 3;
    }
    ofccl_comm_rank(world, &rank);
    ofccl_comm_size(world, &size);
    if (size != 3) {
        fprintf(stderr, "rank %d: run with 3 ranks, not %d\n", rank, size);
        return 2;
    }
    /* keys 1, 2, 0: world rank 1 is rank 2 of the split communicator */
    if ((rc = ofccl_comm_split(world, 0, (rank + 1) % 3, &split)) != 0 ||
        (rc = ofccl_comm_set_timeout(world, timeout_ms)) != 0 ||
        (rc = ofccl_comm_set_timeout(split, timeout_ms)) != 0 ||
        (rc = ofccl_comm_split(world, rank == 1 ? OFCCL_UNDEFINED : 0, rank, &alive)) != 0 ||
        (alive != NULL && (rc = ofccl_comm_set_timeout(alive, timeout_ms)) != 0) ||
        (rc = ofccl_comm_split(world, 0, rank, &idle)) != 0 ||
        (rc = ofccl_comm_set_timeout(idle, timeout_ms)) != 0 || (rc = ofccl_barrier(world)) != 0) {
        fprintf(stderr, "rank %d: setup: %s: %s\n", rank, ofccl_strerror(rc),
                ofccl_comm_last_error(world));
        return 3;
    }
    if (rank == 1) {
        char path[512];
        FILE *f;

        /* Posted, and never progressed: its data cannot reach the others,
         * which are left mid-collective (posted, waiting for it). */
        if (ofccl_allgather(world, in, out, COUNT, OFCCL_F32, &rw) != 0)
            return 4;
        wait_ready();
        kill_file(path, sizeof(path));
        f = fopen(path, "w");
        if (f != NULL) {
            fprintf(f, "%.6f\n", now_s());
            fclose(f);
        }
        raise(SIGKILL);
        return 5; /* not reached */
    }
    rc = ofccl_allgather(world, in, out, COUNT, OFCCL_F32, &rw);
    ret = ofccl_allgather(split, in2, out2, COUNT, OFCCL_F32, &rs);
    {
        char path[512];
        FILE *f;

        ready_file(path, sizeof(path), rank);
        f = fopen(path, "w");
        if (f != NULL)
            fclose(f);
    }
    bad |= check("world all-gather", mode, world, rc, rw, rank, "rank 1 ", &t_world);
    bad |= check("split all-gather", mode, split, ret, rs, rank, "rank 2 ", &t_split);
    t_kill = read_kill_time();
    if (t_kill > 0) {
        printf("rank %d: detection after the kill: world %.1f ms, split %.1f ms (deadline %llu "
               "ms)\n",
               rank, (t_world - t_kill) * 1e3, (t_split - t_kill) * 1e3, timeout_ms);
        if (mode != MEASURE && (t_world - t_kill) * 1e3 > (double)timeout_ms / 2)
            printf("rank %d: detected later than half the deadline\n", rank), bad = 1;
    }
    /* Later posts involving the dead rank fail at once. */
    rc = ofccl_allgather(world, in, out, COUNT, OFCCL_F32, &late);
    if (rc == 0) {
        rc = ofccl_wait(late);
        ofccl_req_free(late);
    }
    printf("rank %d: a later post: %s: %s\n", rank, ofccl_strerror(rc),
           ofccl_comm_last_error(world));
    if (rc == 0 || (mode != MEASURE && rc != OFCCL_ERR_REMOTE_ERROR))
        bad = 1;
    /* A communicator with the dead rank and nothing running when it died:
     * under a launcher that raises events, its next post fails at once. */
    if (mode != MEASURE) {
        double t0 = now_s();
        late = NULL;
        rc = ofccl_allgather(idle, in, out, COUNT, OFCCL_F32, &late);
        if (rc == 0) {
            rc = ofccl_wait(late);
            ofccl_req_free(late);
        }
        printf("rank %d: a post on an idle communicator with rank 1, after %.1f ms: %s: %s\n", rank,
               (now_s() - t0) * 1e3, ofccl_strerror(rc), ofccl_comm_last_error(idle));
        /* remote: the pidfd or a notice may still be first (on local, tcp) */
        if (rc != OFCCL_ERR_REMOTE_ERROR ||
            strstr(ofccl_comm_last_error(idle), "rank 1 ") == NULL ||
            (mode == EVENT && strstr(ofccl_comm_last_error(idle), "(world rank 1) on") == NULL) ||
            (mode == EVENT &&
             strstr(ofccl_comm_last_error(idle), "reported by the launcher (PMIx event") == NULL))
            bad = 1;
    }
    /* A communicator without the dead rank still works (and orders the
     * clean-up after both survivors have read the kill time). */
    rc = ofccl_barrier(alive);
    printf("rank %d: barrier of the survivors: %s\n", rank, ofccl_strerror(rc));
    if (rc != 0)
        bad = 1;
    {
        char path[512];
        ready_file(path, sizeof(path), rank);
        unlink(path);
        kill_file(path, sizeof(path));
        if (rank == 0)
            unlink(path);
    }
    if (ofccl_comm_destroy(idle) != 0 || ofccl_comm_destroy(alive) != 0 ||
        ofccl_comm_destroy(split) != 0 || ofccl_comm_destroy(world) != 0 ||
        ofccl_ctx_destroy(ctx) != 0)
        bad = 1;
    free(in);
    free(out);
    free(in2);
    free(out2);
    printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
    return bad;
}
