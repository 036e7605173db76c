/*
 * The TCP rendezvous under a flood of idle connections: 64 connections that
 * never complete a hello are open at the root before any other rank starts
 * (half send nothing, half a few bytes of a hello), and in the second case
 * more keep arriving while the ranks join. Every rank must still join with
 * its rank and size, within a bound well under the bootstrap timeout.
 */
#include <errno.h>
#include <fcntl.h>

#include "bootfork.h"

#define NRANKS 4
#define NIDLE 64
#define MORE_MAX 400       /* connections the flooder opens after the first NIDLE, at most */
#define BOOT_TIMEOUT 20000 /* ms */
#define JOIN_BOUND 5000    /* ms: what a rank's bootstrap may take, flood or not */

static int more_every_ms; /* 0 = only the first NIDLE; else one more every so often */
static int watch_expiry;  /* the flooder checks that the root closes its connections */
static int ready_pipe[2]; /* flooder -> parent: the first NIDLE are connected */
static int stop_pipe[2];  /* parent -> flooder: closed when the ranks are done */

/* One connection to the root, bounded by `ms` (the accept queue may be full). */
static int connect_root(const char *root, int ms)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
    socklen_t el = sizeof(err);
    struct pollfd pfd;

    a.sin_port = htons((uint16_t)atoi(strrchr(root, ':') + 1));
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
    if (errno == EINPROGRESS && poll(&pfd, 1, ms) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
        return fd;
    close(fd);
    return -1;
}

/* The root must close idle connections after its hello deadline (2 s, or a
 * quarter of the timeout): every one of fds[n] must see EOF between 1.5 and
 * 4 s from now. Returns 0 or an exit code. */
static int idle_closed_in_time(const int *fds, int n)
{
    uint64_t t0 = ofccl__now_ns(), first = 0, last = 0;
    int closed = 0, open[NIDLE];
    char sink[16];

    for (int i = 0; i < n; i++)
        open[i] = 1;
    while (closed < n && ms_since(t0) < 6000) {
        struct pollfd pfd[NIDLE];
        for (int i = 0; i < n; i++)
            pfd[i] = (struct pollfd){.fd = open[i] ? fds[i] : -1, .events = POLLIN};
        if (poll(pfd, (nfds_t)n, 100) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (!open[i] || pfd[i].revents == 0 || recv(fds[i], sink, sizeof(sink), 0) > 0)
                continue;
            open[i] = 0;
            last = ms_since(t0);
            first = closed++ == 0 ? last : first;
        }
    }
    fprintf(stderr, "  flooder: the root closed %d of %d idle connections after %llu to %llu ms\n",
            closed, n, (unsigned long long)first, (unsigned long long)last);
    if (closed < n)
        return 4;
    return first >= 1500 && last <= 4000 ? 0 : 5;
}

/* Opens NIDLE idle connections (retrying until the root listens), says so on
 * ready_pipe, then keeps them open, adding one every more_every_ms, until the
 * parent closes stop_pipe (or 30 s pass). Even connections stay silent, odd
 * ones send the first bytes of a hello and then nothing. */
static int flooder(const job_t *j)
{
    static int fds[NIDLE + MORE_MAX];
    uint64_t t0 = ofccl__now_ns();
    int n = 0, rc = 0;

    while (n < NIDLE && ms_since(t0) < 10000) {
        int fd = connect_root(j->root, 200);
        if (fd < 0) {
            poll(NULL, 0, 5);
            continue;
        }
        if (n % 2 == 1)
            (void)send(fd, "OFBH\x02", 5, MSG_NOSIGNAL);
        fds[n++] = fd;
    }
    if (n < NIDLE)
        rc = 2;
    else if (write(ready_pipe[1], "r", 1) != 1)
        rc = 3;
    if (rc == 0 && watch_expiry)
        rc = idle_closed_in_time(fds, n);
    while (rc == 0 && ms_since(t0) < 30000) {
        struct pollfd pfd = {.fd = stop_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, more_every_ms > 0 ? more_every_ms : 100) != 0)
            break; /* the parent closed the pipe */
        if (more_every_ms > 0 && n < NIDLE + MORE_MAX) {
            int fd = connect_root(j->root, 50);
            if (fd >= 0)
                fds[n++] = fd;
        }
    }
    fprintf(stderr, "  flooder: %d connections opened\n", n);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return rc;
}

/* A rank that joins, checks what it got and exchanges one round. */
static int flood_rank(const job_t *j)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    int in = 1000 + j->rank, out[NRANKS];
    size_t lens[NRANKS];
    uint64_t t0, took;
    int rc;

    ofccl__err_clear(&e);
    if (j->delay_ms > 0)
        poll(NULL, 0, j->delay_ms);
    t0 = ofccl__now_ns();
    rc = ofccl__boot_open(&p, &b, &e);
    took = ms_since(t0);
    fprintf(stderr, "  rank %d: bootstrap returned %d after %llu ms\n", j->rank, rc,
            (unsigned long long)took);
    CHECK(rc == 0);
    CHECK(b->rank == j->rank && b->size == j->size);
    CHECK(took < JOIN_BOUND);
    CHECK(ofccl__boot_allgather(b, &in, sizeof(in), out, sizeof(out[0]), lens, &e) == 0);
    for (int r = 0; r < j->size; r++)
        CHECK(lens[r] == sizeof(int) && out[r] == 1000 + r);
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    ofccl__boot_close(b);
    return 0;
}

static void run_flood(int every_ms, int expiry, const int delays[NRANKS])
{
    char root[64], c;
    job_t jobs[NRANKS], fj;
    pid_t pids[NRANKS], fpid;
    struct pollfd pfd;
    int ready;

    make_root(root, sizeof(root), AF_INET);
    more_every_ms = every_ms;
    watch_expiry = expiry;
    CU_ASSERT_FATAL(pipe(ready_pipe) == 0);
    CU_ASSERT_FATAL(pipe(stop_pipe) == 0);
    fj = (job_t){.root = root};
    fflush(NULL);
    fpid = fork();
    if (fpid == 0) {
        close(ready_pipe[0]);
        close(stop_pipe[1]);
        _exit(flooder(&fj));
    }
    CU_ASSERT_FATAL(fpid > 0);
    close(ready_pipe[1]);
    close(stop_pipe[0]);

    for (int r = 0; r < NRANKS; r++)
        jobs[r] = (job_t){.root = root,
                          .rank = r,
                          .size = NRANKS,
                          .timeout_ms = BOOT_TIMEOUT,
                          .delay_ms = delays[r]};
    pids[0] = spawn(flood_rank, &jobs[0]); /* the root listens first ... */
    pfd = (struct pollfd){.fd = ready_pipe[0], .events = POLLIN};
    ready = poll(&pfd, 1, 10000) == 1 && read(ready_pipe[0], &c, 1) == 1;
    CU_ASSERT(ready); /* ... the idle connections are open before any other rank starts */
    for (int r = 1; r < NRANKS; r++)
        pids[r] = ready ? spawn(flood_rank, &jobs[r]) : 0;
    CU_ASSERT_EQUAL(reap(pids, NRANKS, 3 * BOOT_TIMEOUT), ready ? NRANKS : 0);
    close(stop_pipe[1]);
    close(ready_pipe[0]);
    CU_ASSERT_EQUAL(reap(&fpid, 1, 10000), 1);
}

static void test_idle_before_start(void)
{
    static const int delays[NRANKS] = {0, 0, 0, 0};
    run_flood(0, 0, delays);
}

static void test_idle_keep_arriving(void)
{
    /* Ranks join one after another while a new idle connection arrives every
     * 2 ms: the pending table stays full the whole time. */
    static const int delays[NRANKS] = {0, 0, 300, 600};
    run_flood(2, 0, delays);
}

static void test_idle_expire(void)
{
    /* The ranks come after the hello deadline: by then the root has closed
     * every idle connection on its own (none was evicted to make room). */
    static const int delays[NRANKS] = {0, 2600, 2600, 2600};
    run_flood(0, 1, delays);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"tcp: 64 idle connections before the ranks start", test_idle_before_start},
        {"tcp: idle connections keep arriving while ranks join", test_idle_keep_arriving},
        {"tcp: idle connections are closed after the hello deadline", test_idle_expire},
        {NULL, NULL},
    };

    ofccl__log_init(&lg);
    signal(SIGPIPE, SIG_DFL); /* the library must not need SIGPIPE ignored */
    return cu_run("boot-flood", tests);
}
