/*
 * Helpers shared by the bootstrap tests: parameters, free loopback ports, and
 * forked ranks that report through their exit status, reaped by the parent
 * under a deadline (stragglers are killed).
 */
#ifndef OFCCL_TEST_BOOTFORK_H
#define OFCCL_TEST_BOOTFORK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot.h"
#include "cu.h"
#include "util.h"

static ofccl__log_t lg;

static inline ofccl__boot_params_t params(const char *method, const char *root, int rank, int size,
                                          uint64_t timeout_ms, const char *vars)
{
    ofccl__boot_params_t p = {
        .method = method,
        .timeout_ms = timeout_ms,
        .root = root,
        .rank = rank,
        .size = size,
        .launcher_vars = vars,
        .log = &lg,
    };
    return p;
}

static inline uint64_t ms_since(uint64_t t0)
{
    return (ofccl__now_ns() - t0) / 1000000;
}

/* A port nobody listens on: bind port 0, read it back, close. */
static inline int free_port(int family)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = socket(family, SOCK_STREAM, 0), port = -1;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        sl = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof(*a);
    }
    if (fd >= 0 && bind(fd, (struct sockaddr *)&ss, sl) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static inline void make_root(char *buf, size_t len, int family)
{
    int port = free_port(family);

    CU_ASSERT_FATAL(port > 0);
    if (family == AF_INET6)
        snprintf(buf, len, "[::1]:%d", port);
    else
        snprintf(buf, len, "127.0.0.1:%d", port);
}

typedef struct job {
    const char *root;
    int rank, size;
    uint64_t timeout_ms;
    int delay_ms;        /* sleep before opening */
    int expect_rc;       /* for the failure cases */
    const char *host_id; /* OFCCL_HOST_ID of this rank (NULL = detect) */
} job_t;

static inline pid_t spawn(int (*fn)(const job_t *), const job_t *j)
{
    pid_t pid;

    fflush(NULL); /* or the child flushes the parent's buffered output again */
    pid = fork();
    if (pid == 0)
        _exit(fn(j));
    return pid;
}

/* Reap `n` children; after `deadline_ms` kill the rest. Returns how many
 * exited with status 0. */
static inline int reap(pid_t *pids, int n, uint64_t deadline_ms)
{
    uint64_t t0 = ofccl__now_ns();
    int ok = 0, left = n;

    while (left > 0) {
        for (int i = 0; i < n; i++) {
            int st;
            if (pids[i] <= 0 || waitpid(pids[i], &st, WNOHANG) != pids[i])
                continue;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                ok++;
            else
                fprintf(stderr, "  child %d (pid %d): %s %d\n", i, (int)pids[i],
                        WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            pids[i] = 0;
            left--;
        }
        if (left == 0)
            break;
        if (ms_since(t0) > deadline_ms) {
            for (int i = 0; i < n; i++) {
                if (pids[i] <= 0)
                    continue;
                fprintf(stderr, "  child %d (pid %d) still running: killed\n", i, (int)pids[i]);
                kill(pids[i], SIGKILL);
                waitpid(pids[i], NULL, 0);
                pids[i] = 0;
            }
            break;
        }
        poll(NULL, 0, 10);
    }
    return ok;
}

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "  rank %d: %s:%d: check failed: %s (%s)\n", j->rank, __FILE__,        \
                    __LINE__, #c, e.msg);                                                          \
            return 1 + __LINE__ % 250;                                                             \
        }                                                                                          \
    } while (0)

#endif
