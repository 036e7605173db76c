/*
 * Observability, with two ranks forked by the test (TCP bootstrap):
 *  - `test_observe <provider> workload`: a known run (3 all-gathers and 2
 *    reduce-scatters of 1 MiB per rank, 1 bucket all-gather), results checked;
 *    run with OFCCL_TRACE set by check_trace.py, which checks the files;
 *  - `test_observe <provider>`: a stuck all-gather (rank 1 never posts) is
 *    listed by ofccl_dump_state with rank 1 named as the missing peer, and
 *    with OFCCL_DUMP_SIGNAL=1 the same dump reaches the log on SIGUSR1 while
 *    the request stays pending.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

enum { COUNT = 256 << 10 };       /* f32 per rank block: 1 MiB, two 512 KiB chunks */
static volatile int *shared_done; /* rank 0 is done with the stuck request */

static float value(int r, size_t i, int salt)
{
    return (float)(r * 100000 + salt * 1000 + (int)(i % 997));
}

static int workload(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    float *in = malloc(2 * COUNT * sizeof(float)), *out = malloc(2 * COUNT * sizeof(float));
    float full[2][3000], shard[2][1500];
    ofccl_tensor_t t[2] = {{3000, full[0], shard[0]}, {2000, full[1], shard[1]}};
    ofccl_redop_t sum = {OFCCL_OP_SUM, 0};
    ofccl_req_t *req;
    int bad = 0;

    (void)ctx;
    for (int salt = 0; salt < 3 && !bad; salt++) {
        for (size_t i = 0; i < COUNT; i++)
            in[i] = value(rank, i, salt);
        if (ofccl_allgather(comm, in, out, COUNT, OFCCL_F32, &req) || ofccl_wait(req) ||
            ofccl_req_free(req))
            return fprintf(stderr, "rank %d: ag: %s\n", rank, ofccl_comm_last_error(comm)), 1;
        for (int r = 0; r < 2; r++)
            for (size_t i = 0; i < COUNT; i++)
                bad |= out[(size_t)r * COUNT + i] != value(r, i, salt);
    }
    for (int salt = 0; salt < 2 && !bad; salt++) {
        for (size_t i = 0; i < 2 * COUNT; i++)
            in[i] = value(rank, i, salt);
        if (ofccl_reduce_scatter(comm, in, out, COUNT, OFCCL_F32, sum, &req) || ofccl_wait(req) ||
            ofccl_req_free(req))
            return fprintf(stderr, "rank %d: rs: %s\n", rank, ofccl_comm_last_error(comm)), 1;
        for (size_t i = 0; i < COUNT; i++)
            bad |= out[i] != value(0, (size_t)rank * COUNT + i, salt) +
                                 value(1, (size_t)rank * COUNT + i, salt);
    }
    for (int k = 0; k < 1500; k++)
        shard[0][k] = shard[1][k] = (float)(rank * 10000 + k);
    if (!bad && (ofccl_bucket_allgather(comm, t, 2, OFCCL_F32, &req) || ofccl_wait(req) ||
                 ofccl_req_free(req)))
        return fprintf(stderr, "rank %d: bucket: %s\n", rank, ofccl_comm_last_error(comm)), 1;
    for (int k = 0; !bad && k < 3000; k++) /* tensor 0: 1500 elements per rank */
        bad |= full[0][k] != (float)((k / 1500) * 10000 + k % 1500);
    free(in);
    free(out);
    if (bad)
        fprintf(stderr, "rank %d: wrong results\n", rank);
    return bad ? 2 : 0;
}

/* Does `path` hold `needle` (after a bounded wait for it to appear)? */
static bool file_has(const char *path, const char *needle)
{
    char buf[16384];
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        return false;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, needle) != NULL;
}

static void print_file(const char *path)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    size_t n;

    while (f != NULL && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, stderr);
    if (f != NULL)
        fclose(f);
}

/* Rank 1 never posts; rank 0's all-gather stays pending; its dump names rank 1. */
static int stuck(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    static float in[COUNT], out[2 * COUNT];
    char path[64], logpath[64];
    ofccl_req_t *req;
    double until;
    int done = 0, rc = 0;
    FILE *f;

    if (rank == 1) { /* stay alive (and silent) until rank 0 has looked */
        for (until = now_s() + 60; !*shared_done && now_s() < until;)
            usleep(10000);
        return *shared_done ? 0 : 20;
    }
    if (ofccl_allgather(comm, in, out, COUNT, OFCCL_F32, &req) != 0)
        return 21;
    for (until = now_s() + 0.1; now_s() < until && !done;)
        ofccl_test(req, &done);
    snprintf(path, sizeof(path), "/tmp/ofccl-dump-%d.txt", (int)getpid());
    f = fopen(path, "w+");
    if (done || f == NULL || ofccl_dump_state(ctx, f) != 0)
        rc = 22;
    fclose(f);
    if (rc == 0 && (!file_has(path, "all-gather #0") || !file_has(path, "waiting for rank 1") ||
                    !file_has(path, "1 pending request"))) {
        fprintf(stderr, "rank 0: the dump does not name the stuck request and rank 1:\n");
        rc = 23;
    }
    print_file(path); /* in the test's log: what a user sees */
    unlink(path);
    /* SIGUSR1: the dump goes to the log (stderr, redirected here). */
    snprintf(logpath, sizeof(logpath), "/tmp/ofccl-dumplog-%d.txt", (int)getpid());
    int saved = dup(2), fd = open(logpath, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 2);
    close(fd);
    raise(SIGUSR1);
    for (until = now_s() + 30; now_s() < until && !file_has(logpath, "1 pending request");)
        ofccl_test(req, &done), usleep(1000);
    dup2(saved, 2);
    close(saved);
    if (rc == 0 &&
        (!file_has(logpath, "all-gather #0") || !file_has(logpath, "waiting for rank 1")))
        rc = 24, fprintf(stderr, "rank 0: SIGUSR1 did not dump the stuck request\n");
    if (rc == 0 && done)
        rc = 25, fprintf(stderr, "rank 0: the request completed though rank 1 never posted\n");
    unlink(logpath);
    ofccl_comm_abort(comm);
    ofccl_wait(req);
    ofccl_req_free(req);
    *shared_done = 1;
    return rc;
}

static void test_dump_api_and_signal(void)
{
    int st[2];

    rank_setting[0] = "DUMP_SIGNAL=1";
    run(stuck, st);
    rank_setting[0] = NULL;
    CU_ASSERT(exited_ok(st[0]));
    CU_ASSERT(exited_ok(st[1]));
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {{"dump_api_and_signal", test_dump_api_and_signal},
                                      {NULL, NULL}};
    int st[2];

    if (argc > 1)
        provider = argv[1];
    shared_done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (argc > 2 && strcmp(argv[2], "workload") == 0) {
        run(workload, st);
        for (int r = 0; r < 2; r++)
            if (!exited_ok(st[r]))
                return fprintf(stderr, "rank %d failed (status %d)\n", r, st[r]), 1;
        return 0;
    }
    return cu_run("observe", tests);
}
