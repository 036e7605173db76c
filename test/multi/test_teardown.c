/*
 * Teardown after faults: a collective fails mid-transfer (a stopped peer, a
 * killed peer, a network partition, heavy packet loss, a low open-files
 * limit) and then ofccl_comm_destroy and ofccl_ctx_destroy must return 0,
 * promptly, without touching freed memory (the sanitizer build runs this
 * too). Ranks are forked by the test and joined through the TCP bootstrap.
 * The partition and loss scenarios run in a private network namespace with
 * nftables (root only; skipped with the reason otherwise).
 * Usage: test_teardown <provider>
 */
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

/* Big enough that a transfer is still under way when the fault hits. */
#define BIG_COUNT (4u << 20) /* floats per rank: 16 MiB */
#define DEADLINE_MS 2000
/* Network faults start this long after the ranks, once all-gathers run. */
#define CUT_AFTER_MS 300
/* tcp data ports, pinned so nftables can cut them and spare the bootstrap. */
#define DATA_PORTS "42000-42999"

/* Written by the ranks, read by the parent: what each rank saw. */
struct shared {
    int coll_rc[2];              /* the failed collective's code */
    int rounds[2];               /* collectives that succeeded before it */
    volatile int done_rounds[2]; /* the same, as the loop goes: the fault waits for it */
    double destroy_s[2];         /* how long comm + ctx destroy took */
    int destroy_rc[2];
    char msg[2][512];
};
static struct shared *sh;

typedef int (*fault_fn)(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* Runs in each rank after the communicator exists and before the fault (NULL = none). */
typedef void (*hook_fn)(int rank);

static int post_big(ofccl_comm_t *comm, ofccl_req_t **req, float **in, float **out)
{
    *in = calloc(BIG_COUNT, 4);
    *out = calloc((size_t)BIG_COUNT * 2, 4);
    if (*in == NULL || *out == NULL)
        return OFCCL_ERR_NO_MEMORY;
    return ofccl_allgather(comm, *in, *out, BIG_COUNT, OFCCL_F32, req);
}

/* One progress pass: the transfer has started, and cannot be finished (it
 * moves 32 chunks, a few at a time, each round needing the peer's credit). */
static void start(ofccl_req_t *req)
{
    int done = 0;

    (void)ofccl_test(req, &done);
}

/* The side that keeps running: all-gathers until one fails or `for_s`
 * seconds pass (0 = just one); records the last code and message. */
/* The caller's buffers, freed only after destroy (see rank_main). */
static float *user_in, *user_out;

static int survivor(int rank, ofccl_comm_t *comm, double for_s, int max_rounds)
{
    float *in = user_in = malloc((size_t)BIG_COUNT * 4);
    float *out = user_out = malloc((size_t)BIG_COUNT * 2 * 4);
    double end = now_s() + for_s;
    int rc, rounds = 0;

    if (in == NULL || out == NULL)
        return 40;
    memset(in, 1, (size_t)BIG_COUNT * 4);
    ofccl_comm_set_timeout(comm, DEADLINE_MS);
    do {
        ofccl_req_t *req;
        rc = ofccl_allgather(comm, in, out, BIG_COUNT, OFCCL_F32, &req);
        if (rc == 0) {
            rc = ofccl_wait(req);
            ofccl_req_free(req);
        }
        rounds += rc == 0;
        sh->done_rounds[rank] = rounds;
    } while (rc == 0 && rounds < max_rounds && now_s() < end);
    sh->coll_rc[rank] = rc;
    sh->rounds[rank] = rounds;
    snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", ofccl_comm_last_error(comm));
    printf("rank %d: after %d good all-gathers: %s%s%s\n", rank, rounds, ofccl_strerror(rc),
           rc ? ": " : "", rc ? ofccl_comm_last_error(comm) : "");
    /* The buffers stay allocated until after destroy: only ofccl's own
     * memory is under test, not a use of the caller's freed buffers. */
    return 0;
}

/* ---- the faults ---- */

static int stopped_peer(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_req_t *req;
    float *in, *out;

    (void)ctx;
    /* Both ranks are done setting up before the fault. */
    if (ofccl_barrier(comm) != 0)
        return 19;
    if (rank == 0)
        return survivor(rank, comm, 0, INT_MAX);
    if (post_big(comm, &req, &in, &out) != 0)
        return 20;
    start(req);
    raise(SIGSTOP); /* the parent SIGKILLs it once rank 0 is done */
    return 21;
}

static int killed_peer(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl_req_t *req;
    float *in, *out;

    (void)ctx;
    /* Both ranks are done setting up before the fault. */
    if (ofccl_barrier(comm) != 0)
        return 29;
    if (rank == 0)
        return survivor(rank, comm, 0, INT_MAX);
    if (post_big(comm, &req, &in, &out) != 0)
        return 30;
    start(req);
    raise(SIGKILL);
    return 31;
}

/* Both ranks run collectives until the network fails them (partition, loss). */
/* Until the fault ends the loop (or 20 s pass). */
static int both_run(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    return survivor(rank, comm, 20, INT_MAX);
}

/* 100 rounds unless something fails: both ranks stop after the same round (a
 * time bound alone lets one stop a round before the other, which then times
 * out); the time bound stays as the backstop. */
static int both_run_100(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    return survivor(rank, comm, 20, 100);
}

/* ---- a low open-files limit: every descriptor number below the limit is taken ---- */
static void nofile_tight(int rank)
{
    struct rlimit rl;
    int fd = 0;

    if (rank != 0)
        return;
    /* The lowest free descriptor: the kernel hands out the lowest, so with the
     * limit there, the next socket/open/memfd fails with EMFILE. */
    while (fcntl(fd, F_GETFD) != -1)
        fd++;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = (rlim_t)fd;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* ---- the runner ---- */

static const char *const *rank_env; /* extra "NAME=value" settings */

static int rank_main(int rank, int port, fault_fn fn, hook_fn hook)
{
    char root[64], rk[32], prov[64], err[512] = "";
    const char *settings[] = {root, rk, "BOOT_SIZE=2", prov, "BOOT_TIMEOUT_MS=20000", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    double t0;
    int rc, drc;

    snprintf(root, sizeof(root), "BOOT_ROOT=127.0.0.1:%d", port);
    snprintf(rk, sizeof(rk), "BOOT_RANK=%d", rank);
    snprintf(prov, sizeof(prov), "PROVIDER=%s", provider);
    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "rank %d: ctx: %s\n", rank, err);
        return 10;
    }
    if (ofccl_comm_world(ctx, &comm) != 0) {
        fprintf(stderr, "rank %d: comm: %s\n", rank, ofccl_ctx_last_error(ctx));
        return 11;
    }
    if (hook != NULL)
        hook(rank);
    rc = fn(rank, ctx, comm);
    t0 = now_s();
    drc = ofccl_comm_destroy(comm);
    if (drc != 0)
        fprintf(stderr, "rank %d: comm destroy: %s: %s\n", rank, ofccl_strerror(drc),
                ofccl_ctx_last_error(ctx));
    else if ((drc = ofccl_ctx_destroy(ctx)) != 0)
        fprintf(stderr, "rank %d: ctx destroy: %s\n", rank, ofccl_strerror(drc));
    sh->destroy_rc[rank] = drc;
    sh->destroy_s[rank] = now_s() - t0;
    free(user_in);
    free(user_out);
    {
        /* LeakSanitizer opens files at exit: give back what nofile_tight took. */
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    printf("rank %d: destroy returned %d after %.2f s\n", rank, drc, sh->destroy_s[rank]);
    return rc ? rc : drc ? 12 : 0;
}

/* Fork two ranks; a rank that stops itself is SIGKILLed once the other has
 * exited. Bounded by 60 s. */
static void run_ranks(fault_fn fn, hook_fn hook, int st[2])
{
    int port = free_port();
    pid_t pid[2];
    bool done[2] = {false, false}, stopped[2] = {false, false};
    double deadline = now_s() + 60;

    memset(sh, 0, sizeof(*sh));
    for (int r = 0; r < 2; r++)
        sh->destroy_rc[r] = sh->coll_rc[r] = 1; /* "never got there" */
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            for (const char *const *e = rank_env; e != NULL && *e != NULL; e++)
                putenv((char *)*e);
            exit(rank_main(r, port, fn, hook)); /* exit: LeakSanitizer checks at exit */
        }
    }
    while (!(done[0] && done[1]) && now_s() < deadline) {
        for (int r = 0; r < 2; r++) {
            if (done[r] || stopped[r])
                continue;
            pid_t w = waitpid(pid[r], &st[r], WNOHANG | WUNTRACED);
            if (w == pid[r] && WIFSTOPPED(st[r]))
                stopped[r] = true;
            else if (w == pid[r])
                done[r] = true;
        }
        for (int r = 0; r < 2; r++)
            if (stopped[r] && (done[1 - r] || stopped[1 - r])) {
                kill(pid[r], SIGKILL);
                waitpid(pid[r], &st[r], 0);
                stopped[r] = false;
                done[r] = true;
            }
        usleep(10000);
    }
    for (int r = 0; r < 2; r++) {
        if (!done[r]) { /* bounded: a hung rank fails the test, never the suite */
            fprintf(stderr, "rank %d did not finish in 60 s: killed\n", r);
            kill(pid[r], SIGKILL);
            waitpid(pid[r], &st[r], 0);
            st[r] = -1;
        }
        if (WIFSIGNALED(st[r]))
            remove_shm_of(pid[r]);
    }
}

static bool failed_as_expected(int rc)
{
    return rc == OFCCL_ERR_TIMEOUT || rc == OFCCL_ERR_REMOTE_ERROR;
}

/* The survivor's collective failed as a fault should make it, and its
 * teardown returned 0 within a few seconds. */
static void check_survivor(int st)
{
    CU_ASSERT_TRUE(exited_ok(st));
    CU_ASSERT_TRUE(failed_as_expected(sh->coll_rc[0]));
    CU_ASSERT_EQUAL(sh->destroy_rc[0], 0);
    CU_ASSERT_TRUE(sh->destroy_s[0] < 5.0);
}

static void test_stopped_peer(void)
{
    int st[2];
    run_ranks(stopped_peer, NULL, st);
    check_survivor(st[0]);
    CU_ASSERT_TRUE(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL);
}

static void test_killed_peer(void)
{
    int st[2];
    run_ranks(killed_peer, NULL, st);
    check_survivor(st[0]);
    CU_ASSERT_TRUE(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL);
}

/* Rank 0 cannot open a single descriptor more: its collective must fail
 * (this rank's limit, not the peer's fault) and both must tear down. */
static void test_nofile(void)
{
    int st[2];
    run_ranks(both_run_100, nofile_tight, st);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_TRUE(exited_ok(st[r]));
        CU_ASSERT_EQUAL(sh->destroy_rc[r], 0);
    }
    /* shm needs no descriptor once the communicator exists (peers' regions
     * are mapped at creation, data moves by CMA): it may well succeed. */
    if (strcmp(provider, "shm") == 0 && sh->coll_rc[0] == 0)
        return;
    CU_ASSERT_EQUAL(sh->coll_rc[0], OFCCL_ERR_RESOURCE);
    CU_ASSERT_PTR_NOT_NULL(strstr(sh->msg[0], "RLIMIT_NOFILE"));
    CU_ASSERT_PTR_NOT_NULL(strstr(sh->msg[0], "rank 0"));
}

/* ---- network faults in a private namespace ---- */

static int lo_up(void)
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), rc;

    if (fd < 0)
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    close(fd);
    return rc;
}

/* Run in a fresh network namespace (this process only): nftables rules go in
 * `rules` on the data ports, applied `delay_ms` after both ranks have
 * finished a first all-gather (so the fault lands mid-run however loaded the
 * machine is; 30 s at most). Returns 77 = skipped. */
static int in_netns(const char *rules, int delay_ms, fault_fn fn, int st[2])
{
    static char low[] = "FI_TCP_PORT_LOW_RANGE=42000", high[] = "FI_TCP_PORT_HIGH_RANGE=42999",
                iface[] = "FI_TCP_IFACE=lo";
    static const char *const env[] = {low, high, iface, NULL};
    pid_t applier;

    if (unshare(CLONE_NEWNET) != 0) {
        printf("SKIPPED: no private network namespace (%s; needs root)\n", strerror(errno));
        return 77;
    }
    if (lo_up() != 0 || system("nft add table inet ofccl_td 2>/dev/null") != 0 ||
        system("nft 'add chain inet ofccl_td in { type filter hook input priority 0; }'") != 0) {
        printf("SKIPPED: nftables or loopback unavailable in the namespace\n");
        return 77;
    }
    rank_env = env;
    sh->done_rounds[0] = sh->done_rounds[1] = 0;
    fflush(NULL);
    applier = fork();
    if (applier == 0) {
        for (int i = 0; i < 3000 && (sh->done_rounds[0] < 1 || sh->done_rounds[1] < 1); i++)
            usleep(10000);
        usleep((useconds_t)delay_ms * 1000);
        _exit(system(rules) == 0 ? 0 : 1);
    }
    run_ranks(fn, NULL, st);
    waitpid(applier, NULL, 0);
    return 0;
}

/* In a child process, so the namespace ends with it; results come back through `sh`. */
static int netns_case(const char *rules, int delay_ms, int st[2])
{
    int *shared_st = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int wst = 0, rc;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid == 0)
        _exit(in_netns(rules, delay_ms, both_run, shared_st));
    waitpid(pid, &wst, 0);
    st[0] = shared_st[0];
    st[1] = shared_st[1];
    munmap(shared_st, 4096);
    rc = WIFEXITED(wst) ? WEXITSTATUS(wst) : 1;
    return rc;
}

/* The data ports are cut while the big all-gathers run. */
static void test_partition(void)
{
    int st[2];
    int rc = netns_case("nft 'add rule inet ofccl_td in tcp dport " DATA_PORTS " drop' && "
                        "nft 'add rule inet ofccl_td in tcp sport " DATA_PORTS " drop'",
                        CUT_AFTER_MS, st);
    if (rc == 77)
        return;
    CU_ASSERT_EQUAL(rc, 0);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_TRUE(exited_ok(st[r]));
        CU_ASSERT_TRUE(failed_as_expected(sh->coll_rc[r]));
        CU_ASSERT_TRUE(sh->rounds[r] > 0); /* the cut came mid-run, not before */
        CU_ASSERT_EQUAL(sh->destroy_rc[r], 0);
        CU_ASSERT_TRUE(sh->destroy_s[r] < 5.0);
    }
}

/* 70% of the packets on the data ports dropped: TCP backs off, the
 * collective misses its deadline (or, rarely, completes); teardown is clean. */
static void test_heavy_loss(void)
{
    int st[2];
    int rc = netns_case("nft 'add rule inet ofccl_td in tcp dport " DATA_PORTS
                        " numgen random mod 100 < 70 drop' "
                        "&& nft 'add rule inet ofccl_td in tcp sport " DATA_PORTS
                        " numgen random mod 100 < 70 drop'",
                        CUT_AFTER_MS, st);
    if (rc == 77)
        return;
    CU_ASSERT_EQUAL(rc, 0);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_TRUE(exited_ok(st[r]));
        CU_ASSERT_TRUE(sh->coll_rc[r] == 0 || failed_as_expected(sh->coll_rc[r]));
        CU_ASSERT_EQUAL(sh->destroy_rc[r], 0);
        CU_ASSERT_TRUE(sh->destroy_s[r] < 5.0);
    }
}

int main(int argc, char **argv)
{
    static const cu_test_t all[] = {
        {"destroy after a stopped peer (SIGSTOP) mid-transfer", test_stopped_peer},
        {"destroy after a killed peer (SIGKILL) mid-transfer", test_killed_peer},
        {"destroy after a collective under a low RLIMIT_NOFILE", test_nofile},
        {NULL, NULL},
    };
    static const cu_test_t tcp[] = {
        {"destroy after a stopped peer (SIGSTOP) mid-transfer", test_stopped_peer},
        {"destroy after a killed peer (SIGKILL) mid-transfer", test_killed_peer},
        {"destroy after a collective under a low RLIMIT_NOFILE", test_nofile},
        {"destroy after a partition (netns, nftables drop)", test_partition},
        {"destroy after heavy loss (netns, nftables 70% drop)", test_heavy_loss},
        {NULL, NULL},
    };

    (void)run; /* forkrun.h's runner: this file forks its own ranks */
    (void)exits_seen_at_once;
    if (argc > 1)
        provider = argv[1];
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 2;
    /* An optional second argument runs only the tests whose name contains it. */
    const cu_test_t *list = strcmp(provider, "tcp") == 0 ? tcp : all;
    cu_test_t chosen[8];
    int n = 0;
    for (const cu_test_t *t = list; t->name != NULL && n < 7; t++)
        if (argc < 3 || strstr(t->name, argv[2]) != NULL)
            chosen[n++] = *t;
    chosen[n] = (cu_test_t){NULL, NULL};
    return cu_run("teardown", chosen);
}
