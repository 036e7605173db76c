/*
 * Watching peers' processes (providers/watch.c), and libfabric shm's use of
 * it (providers/fabric/shmfile.c): the test forks sleeping children, watches
 * them as peers, kills one it picks, and checks that exactly that peer and
 * its pid are reported, within the bounded number of polls the watch
 * promises, and ever after. Also: a pid with no process is reported as
 * exited; an empty watch reports nothing; an shm endpoint watches a peer
 * whose name carries this PID namespace, and neither a peer of another
 * namespace nor a name that is not ofccl's.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "fabric/fabric.h"
#include "watch.h"

#define KIDS 70 /* more than one poll window (64) */

static ofccl__log_t g_log;

static pid_t sleeper(void)
{
    pid_t pid = fork();

    if (pid == 0) {
        /* Bounded: a child the test forgot ends by itself. */
        for (int i = 0; i < 600; i++)
            sleep(1);
        _exit(0);
    }
    return pid;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* Poll until a peer is reported, at most `max` polls; the polls taken go to
 * *polls. The watch reads the coarse clock (ticks of 1-4 ms) and polls at
 * most once per millisecond by it: napping 1 ms plus one tick between calls
 * makes every call a real poll. */
static int poll_until(ofccl__watch_t *w, int max, int *pid, int *polls)
{
    struct timespec res = {0, 4000000}, nap;
    int peer = -1;

    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    nap = (struct timespec){0, 1100000 + res.tv_nsec};
    for (*polls = 0; *polls < max && peer < 0; (*polls)++) {
        nanosleep(&nap, NULL);
        peer = ofccl__watch_poll(w, pid);
    }
    return peer;
}

static void test_empty(void)
{
    ofccl__watch_t w = {0};
    int pid = 7;

    CU_ASSERT_EQUAL(ofccl__watch_poll(&w, &pid), -1);
    CU_ASSERT_EQUAL(pid, -1);
    ofccl__watch_close(&w);
    CU_ASSERT_EQUAL(ofccl__watch_poll(&w, NULL), -1);
}

static void test_kill_one(void)
{
    pid_t kids[KIDS];
    ofccl__watch_t w = {0};
    int pid = -1, polls, peer, victim = 67, watched = 0;

    for (int r = 0; r < KIDS; r++)
        kids[r] = sleeper();
    for (int r = 0; r < KIDS; r++)
        watched += kids[r] > 0 && ofccl__watch_add(&w, KIDS, r, kids[r]) == 0;
    CU_ASSERT_EQUAL_FATAL(watched, KIDS);
    /* Everyone alive: several windows' worth of polls report nothing. */
    CU_ASSERT_EQUAL(poll_until(&w, 4, &pid, &polls), -1);
    CU_ASSERT_EQUAL(pid, -1);
    reap(kids[victim]);
    /* Seen within ceil(70 / 64) + 1 = 3 polls, however long they take. */
    peer = poll_until(&w, 4, &pid, &polls);
    printf("peer %d (pid %d) reported after %d polls\n", peer, pid, polls);
    CU_ASSERT_EQUAL(peer, victim);
    CU_ASSERT_EQUAL(pid, kids[victim]);
    CU_ASSERT_TRUE(polls <= 3);
    /* Reported ever after, and a later death does not replace it. */
    reap(kids[3]);
    nap_ms(5);
    CU_ASSERT_EQUAL(ofccl__watch_poll(&w, &pid), victim);
    CU_ASSERT_EQUAL(pid, kids[victim]);
    ofccl__watch_close(&w);
    CU_ASSERT_EQUAL(ofccl__watch_poll(&w, &pid), -1);
    for (int r = 0; r < KIDS; r++)
        if (r != victim && r != 3)
            reap(kids[r]);
}

static void test_no_such_process(void)
{
    ofccl__watch_t w = {0};
    pid_t gone = sleeper();
    int pid = -1, polls;

    reap(gone); /* reaped: the pid names no process now */
    CU_ASSERT_EQUAL(ofccl__watch_add(&w, 4, 2, gone), ESRCH);
    CU_ASSERT_EQUAL(poll_until(&w, 3, &pid, &polls), 2);
    CU_ASSERT_EQUAL(pid, gone);
    /* Out of range or no pid: refused, nothing watched. */
    CU_ASSERT_EQUAL(ofccl__watch_add(&w, 4, 4, getpid()), EINVAL);
    CU_ASSERT_EQUAL(ofccl__watch_add(&w, 4, 1, 0), EINVAL);
    ofccl__watch_close(&w);
}

static unsigned long pid_ns(void)
{
    struct stat st;

    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

static void test_shm_names(void)
{
    ofccl__prov_params_t pp = {.provider = "shm", .domain = "", .strict = false, .log = &g_log};
    ofccl__ep_params_t epp = {.rank = 0, .size = 5, .ops_inflight = 8, .rx_posted = 8};
    ofccl__prov_t *prov = NULL;
    ofccl__ep_t *ep = NULL;
    ofccl__err_t e;
    pid_t ours = sleeper(), foreign = sleeper(), odd = sleeper();
    char name[128];
    int pid = -1, peer = -1;

    if (ofccl__prov_open(&pp, &prov, &e) != 0) {
        printf("shm not available here (%s): skipped\n", e.msg);
        reap(ours), reap(foreign), reap(odd);
        return;
    }
    CU_ASSERT_EQUAL_FATAL(ofccl__ep_open(prov, &epp, &ep, &e), 0);
    CU_ASSERT_TRUE_FATAL(pid_ns() != 0);
    /* This namespace, as shm hands names out (with its prefix): watched. */
    snprintf(name, sizeof(name), "fi_shm://ofccl_%d_%lu_0_0000abcd", (int)ours, pid_ns());
    ofccl__shm_watch_peer(ep, 1, name);
    /* Another namespace: its pid means nothing here. */
    snprintf(name, sizeof(name), "ofccl_%d_%lu_0_0000abcd", (int)foreign, pid_ns() + 1);
    ofccl__shm_watch_peer(ep, 2, name);
    /* Not a name ofccl gave: left alone. */
    snprintf(name, sizeof(name), "%d:0:0", (int)odd);
    ofccl__shm_watch_peer(ep, 3, name);
    /* Our own rank: never watched, whatever the name says. */
    snprintf(name, sizeof(name), "ofccl_%d_%lu_0_0000abcd", (int)odd, pid_ns());
    ofccl__shm_watch_peer(ep, 0, name);
    reap(foreign);
    reap(odd);
    for (int i = 0; i < 5 && peer < 0; i++, nap_ms(2))
        peer = ofccl__ep_peer_gone(ep, &pid);
    CU_ASSERT_EQUAL(peer, -1);
    reap(ours);
    for (int i = 0; i < 500 && peer < 0; i++, nap_ms(2))
        peer = ofccl__ep_peer_gone(ep, &pid);
    CU_ASSERT_EQUAL(peer, 1);
    CU_ASSERT_EQUAL(pid, ours);
    CU_ASSERT_EQUAL(ofccl__ep_close(ep), 0);
    CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"an empty watch reports nothing", test_empty},
        {"one of 70 watched children killed: that one, with its pid", test_kill_one},
        {"a pid with no process is reported as exited", test_no_such_process},
        {"shm watches peers of its own PID namespace only", test_shm_names},
        {NULL, NULL},
    };

    ofccl__log_init(&g_log);
    return cu_run("watch", tests);
}
