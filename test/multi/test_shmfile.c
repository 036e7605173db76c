/*
 * The /dev/shm files behind libfabric shm endpoints: none may outlive its
 * process, even one killed with SIGKILL. Ranks are forked by the test and
 * joined through the TCP bootstrap (a launcher would tear the job down).
 *   - three ranks create a communicator on shm; one is SIGKILLed; the others
 *     tear down; then no file of any of the three remains;
 *   - files that dead ofccl processes left behind are removed when a provider
 *     is opened, and a file whose process is alive is left alone.
 */
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

#define NRANKS 3
#define VICTIM 2

static int count_files_of(pid_t pid)
{
    char pat[64];
    glob_t g;
    int n = 0;

    snprintf(pat, sizeof(pat), "/dev/shm/ofccl_%d_*", (int)pid);
    if (glob(pat, 0, NULL, &g) == 0)
        n = (int)g.gl_pathc;
    globfree(&g);
    return n;
}

static int rank_main(int rank, int port)
{
    char root[64], rk[32], err[512] = "", size[32];
    const char *settings[] = {root, rk, size, "PROVIDER=shm", "BOOT_TIMEOUT_MS=20000", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    float in[256] = {0}, out[256 * NRANKS];
    ofccl_req_t *req;

    snprintf(root, sizeof(root), "BOOT_ROOT=127.0.0.1:%d", port);
    snprintf(rk, sizeof(rk), "BOOT_RANK=%d", rank);
    snprintf(size, sizeof(size), "BOOT_SIZE=%d", NRANKS);
    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "rank %d: ctx: %s\n", rank, err);
        return 10;
    }
    if (ofccl_comm_world(ctx, &comm) != 0) {
        fprintf(stderr, "rank %d: comm: %s\n", rank, ofccl_ctx_last_error(ctx));
        return 11;
    }
    /* Data moved between every pair before the kill. */
    if (ofccl_allgather(comm, in, out, 256, OFCCL_F32, &req) != 0 || ofccl_wait(req) != 0)
        return 12;
    ofccl_req_free(req);
    if (rank == VICTIM)
        raise(SIGKILL);
    /* The survivors' next collective fails on the dead rank; then teardown. */
    ofccl_comm_set_timeout(comm, 1000);
    if (ofccl_allgather(comm, in, out, 256, OFCCL_F32, &req) == 0) {
        (void)ofccl_wait(req);
        ofccl_req_free(req);
    }
    if (ofccl_comm_destroy(comm) != 0 || ofccl_ctx_destroy(ctx) != 0)
        return 13;
    return 0;
}

static void test_killed_rank_leaves_no_file(void)
{
    int port = free_port(), st[NRANKS];
    pid_t pid[NRANKS];
    double deadline = now_s() + 60;

    fflush(NULL);
    for (int r = 0; r < NRANKS; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            exit(rank_main(r, port));
    }
    for (int r = 0; r < NRANKS; r++) {
        st[r] = -1;
        while (now_s() < deadline && waitpid(pid[r], &st[r], WNOHANG) != pid[r])
            usleep(10000);
        if (now_s() >= deadline) { /* bounded: a stuck rank fails the test */
            kill(pid[r], SIGKILL);
            waitpid(pid[r], &st[r], 0);
        }
    }
    for (int r = 0; r < NRANKS; r++) {
        int n = count_files_of(pid[r]);
        if (n != 0)
            printf("rank %d (pid %d) left %d file(s) in /dev/shm\n", r, (int)pid[r], n);
        CU_ASSERT_EQUAL(n, 0);
        if (r == VICTIM) {
            CU_ASSERT_TRUE(WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL);
        } else {
            CU_ASSERT_TRUE(exited_ok(st[r]));
        }
    }
    for (int r = 0; r < NRANKS; r++)
        remove_shm_of(pid[r]); /* whatever the outcome, leave /dev/shm clean */
}

/* A file named as ofccl names them: ofccl_<pid>_<pid namespace>_<n>_<hex>. */
static void fake_file(char *path, size_t len, pid_t pid)
{
    struct stat ns;
    FILE *f;

    stat("/proc/self/ns/pid", &ns);
    snprintf(path, len, "/dev/shm/ofccl_%d_%lu_0_0badf11e", (int)pid, (unsigned long)ns.st_ino);
    f = fopen(path, "w");
    if (f != NULL) {
        fputs("stale", f);
        fclose(f);
    }
}

static void test_stale_files_swept(void)
{
    char dead_path[128], live_path[128], err[512] = "";
    const char *settings[] = {"BOOT=singleton", "PROVIDER=shm", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    pid_t dead = fork();

    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0); /* its pid is now unused */
    fake_file(dead_path, sizeof(dead_path), dead);
    fake_file(live_path, sizeof(live_path), getppid()); /* alive: must stay */
    CU_ASSERT_EQUAL(access(dead_path, F_OK), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_create(&p, &ctx), 0);
    CU_ASSERT_NOT_EQUAL(access(dead_path, F_OK), 0);
    CU_ASSERT_EQUAL(access(live_path, F_OK), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
    unlink(dead_path);
    unlink(live_path);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"a SIGKILLed shm rank leaves no /dev/shm file", test_killed_rank_leaves_no_file},
        {"files of dead ofccl processes are removed, live ones kept", test_stale_files_swept},
        {NULL, NULL},
    };

    (void)run; /* forkrun.h's two-rank runner: this test forks three */
    (void)exits_seen_at_once;
    (void)on_local;
    return cu_run("shmfile", tests);
}
