/*
 * Ranks (two unless a test sets nranks, at most FORK_MAX) forked by the test
 * itself and joined through the TCP bootstrap, so
 * a test can kill one or make it misbehave without a launcher tearing the job
 * down. Each child runs a scenario and exits 0 when it saw what it expected.
 */
#ifndef OFCCL_TEST_FORKRUN_H
#define OFCCL_TEST_FORKRUN_H

#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ofccl.h"

#define FORK_MAX 8
static const char *provider = "tcp";
static int nranks = 2;
/* One extra "NAME=value" setting per rank (NULL = none), e.g. a fault spec. */
static const char *rank_setting[FORK_MAX];
/* Run in each rank before its context is made (NULL = nothing): nonzero
 * fails the rank. */
static int (*fork_before_ctx)(int rank);
/* Every rank's pid, shared by the ranks (each writes its own before joining),
 * so a scenario can stop, continue or kill a peer. */
static pid_t *fork_pid;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &len);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

typedef int (*scenario_fn)(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);

/* Child: join the 2-rank job, run the scenario, tear down; exit code 0 = as expected. */
static int child(int rank, int port, scenario_fn fn)
{
    char root[64], rk[32], sz[32], prov[64], err[512] = "";
    const char *settings[] = {root, rk, sz, prov, "BOOT_TIMEOUT_MS=20000", rank_setting[rank],
                              NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    int rc;

    snprintf(root, sizeof(root), "BOOT_ROOT=127.0.0.1:%d", port);
    fork_pid[rank] = getpid();
    snprintf(rk, sizeof(rk), "BOOT_RANK=%d", rank);
    snprintf(sz, sizeof(sz), "BOOT_SIZE=%d", nranks);
    snprintf(prov, sizeof(prov), "PROVIDER=%s", provider);
    if (fork_before_ctx != NULL && fork_before_ctx(rank) != 0)
        return 9;
    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "rank %d: ctx: %s\n", rank, err);
        return 10;
    }
    if (ofccl_comm_world(ctx, &comm) != 0 || ofccl_barrier(comm) != 0) {
        fprintf(stderr, "rank %d: comm: %s\n", rank, ofccl_ctx_last_error(ctx));
        return 11;
    }
    rc = fn(rank, ctx, comm);
    /* Destroy is local: it works whatever state the communicator is in. */
    if (ofccl_comm_destroy(comm) != 0 || ofccl_ctx_destroy(ctx) != 0)
        rc = rc ? rc : 12;
    return rc;
}

/* A rank killed by a signal leaves its libfabric shm regions in /dev/shm
 * (named ofccl_<pid>_...): remove them, it is dead. */
static void remove_shm_of(pid_t pid)
{
    char pat[64];
    glob_t g;

    snprintf(pat, sizeof(pat), "/dev/shm/ofccl_%d_*", (int)pid);
    if (glob(pat, 0, NULL, &g) == 0)
        for (size_t k = 0; k < g.gl_pathc; k++)
            unlink(g.gl_pathv[k]);
    globfree(&g);
}

/* Run a scenario on `nranks` forked ranks; status[r] gets each rank's wait status. */
static void run(scenario_fn fn, int *status)
{
    int port = free_port();
    pid_t pid[FORK_MAX];
    double deadline = now_s() + 60;

    if (fork_pid == NULL)
        fork_pid = mmap(NULL, sizeof(pid_t) * FORK_MAX, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            exit(child(r, port, fn)); /* exit, not _exit: LeakSanitizer checks at exit */
    }
    for (int r = 0; r < nranks; r++) {
        status[r] = -1;
        while (now_s() < deadline) {
            pid_t w = waitpid(pid[r], &status[r], WNOHANG);
            if (w == pid[r])
                break;
            usleep(10000);
        }
        if (now_s() >= deadline) { /* bounded: never let a stuck rank hang the suite */
            kill(pid[r], SIGKILL);
            waitpid(pid[r], &status[r], 0);
        }
        if (WIFSIGNALED(status[r]))
            remove_shm_of(pid[r]);
    }
}

static inline int exited_ok(int st)
{
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static inline bool on_local(void)
{
    return strcmp(provider, "local") == 0;
}

/* The local provider, and shm for peers in this PID namespace (every rank
 * here is a child of the test), watch their peers' processes through pidfds
 * (Linux 5.3+), so a rank that exits is noticed within milliseconds, not at
 * the deadline. */
static inline bool exits_seen_at_once(void)
{
    int fd;

    if (!on_local() && strcmp(provider, "shm") != 0)
        return false;
    fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

#endif
