/*
 * The TCP rendezvous under a flood of idle connections: 64 connections that
 * never complete a hello are open at the root before any other rank starts
 * (half send nothing, half a few bytes of a hello), and in the second case
 * more keep arriving while the ranks join. Every rank must still join with
 * its rank and size, within a bound well under the bootstrap timeout. The
 * root closes idle connections after its hello deadline, answering RETRY,
 * and a rank that gets that answer connects again (checked against a
 * stand-in root).
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
 * quarter of the timeout), each with a RETRY answer (should it be a rank):
 * every one of fds[n] must read that answer and then EOF, between 1.5 and 4 s
 * from now. Returns 0 or an exit code. */
static int idle_closed_in_time(const int *fds, int n)
{
    uint64_t t0 = ofccl__now_ns(), first = 0, last = 0;
    int closed = 0, told = 0, open[NIDLE];
    uint8_t got[NIDLE][8];
    size_t have[NIDLE];

    for (int i = 0; i < n; i++) {
        open[i] = 1;
        have[i] = 0;
    }
    while (closed < n && ms_since(t0) < 6000) {
        struct pollfd pfd[NIDLE];
        for (int i = 0; i < n; i++)
            pfd[i] = (struct pollfd){.fd = open[i] ? fds[i] : -1, .events = POLLIN};
        if (poll(pfd, (nfds_t)n, 100) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            uint8_t sink[256];
            ssize_t k;

            if (!open[i] || pfd[i].revents == 0)
                continue;
            k = recv(fds[i], sink, sizeof(sink), 0);
            if (k > 0) {
                size_t take = OFCCL__MIN((size_t)k, sizeof(got[i]) - have[i]);
                memcpy(got[i] + have[i], sink, take);
                have[i] += take;
                continue;
            }
            open[i] = 0;
            last = ms_since(t0);
            first = closed++ == 0 ? last : first;
            /* A rendezvous answer ("OFBT") with status 3: connect again. */
            told += have[i] == 8 && ofccl__get_le32(got[i]) == 0x54424F4Fu &&
                    ofccl__get_le32(got[i] + 4) == 3;
        }
    }
    fprintf(stderr,
            "  flooder: the root closed %d of %d idle connections after %llu to %llu ms, %d with "
            "a RETRY answer\n",
            closed, n, (unsigned long long)first, (unsigned long long)last, told);
    if (closed < n || told < n)
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

/* ---- a rank told to connect again -------------------------------------- */

/* Reads one version-2 hello from fd (bounded by 5 s). Returns its rank or -1. */
static int read_hello(int fd)
{
    uint8_t h[80 + 256];
    size_t got = 0, want = 80;
    uint64_t t0 = ofccl__now_ns();

    while (got < want && ms_since(t0) < 5000) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t k;
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        k = recv(fd, h + got, want - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
        if (got == 80)
            want = 80 + ofccl__get_le16(h + 6);
    }
    if (got < want || ofccl__get_le32(h) != 0x48424F4Fu || ofccl__get_le16(h + 4) != 2)
        return -1;
    return (int)ofccl__get_le32(h + 8);
}

static void put_answer(uint8_t *f, uint32_t status, uint32_t len)
{
    ofccl__put_le32(f, 0x54424F4Fu);
    ofccl__put_le32(f + 4, status);
    ofccl__put_le64(f + 8, 0);
    ofccl__put_le32(f + 16, 2);
    ofccl__put_le32(f + 20, len);
}

/* A stand-in root for 2 ranks: answers rank 1's first hello with RETRY and
 * its second with the host table, then waits for it to hang up. */
static int fake_root(const job_t *j)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    uint8_t f[24 + 8 + 64];
    char sink[16];

    a.sin_port = htons((uint16_t)atoi(strrchr(j->root, ':') + 1));
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 4) != 0)
        return 2;
    for (int round = 0; round < 2; round++) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int fd;
        if (poll(&pfd, 1, 5000) != 1 || (fd = accept(lfd, NULL, NULL)) < 0)
            return 3;
        if (read_hello(fd) != 1)
            return 4 + round;
        if (round == 0) {
            put_answer(f, 3, 4);
            memcpy(f + 24, "busy", 4);
            (void)send(fd, f, 28, MSG_NOSIGNAL);
        } else {
            put_answer(f, 0, 8 + 64);
            ofccl__put_le32(f + 24, 0); /* host_of = {0, 0}, then host 0's name */
            ofccl__put_le32(f + 28, 0);
            memset(f + 32, 0, 64);
            memcpy(f + 32, "fakehost", 8);
            (void)send(fd, f, 32 + 64, MSG_NOSIGNAL);
            pfd = (struct pollfd){.fd = fd, .events = POLLIN};
            (void)poll(&pfd, 1, 5000); /* until the rank closes */
            (void)recv(fd, sink, sizeof(sink), 0);
        }
        close(fd);
    }
    close(lfd);
    return 0;
}

static void test_rank_retries(void)
{
    char root[64];
    job_t fj;
    pid_t pid;
    ofccl__boot_params_t p;
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    make_root(root, sizeof(root), AF_INET);
    fj = (job_t){.root = root};
    pid = spawn(fake_root, &fj);
    p = params("tcp", root, 1, 2, 10000, "");
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), 0);
    if (b != NULL) {
        CU_ASSERT_EQUAL(b->nhosts, 1);
        CU_ASSERT_EQUAL(b->local_rank, 1);
        CU_ASSERT_EQUAL(b->local_size, 2);
        CU_ASSERT_PTR_NOT_NULL(b->host_names);
        if (b->host_names != NULL)
            CU_ASSERT_STRING_EQUAL(b->host_names, "fakehost");
        ofccl__boot_close(b);
    } else {
        fprintf(stderr, "  %s\n", e.msg);
    }
    CU_ASSERT_EQUAL(reap(&pid, 1, 10000), 1);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"tcp: 64 idle connections before the ranks start", test_idle_before_start},
        {"tcp: idle connections keep arriving while ranks join", test_idle_keep_arriving},
        {"tcp: idle connections are closed after the hello deadline", test_idle_expire},
        {"tcp: a rank told to retry connects again", test_rank_retries},
        {NULL, NULL},
    };

    ofccl__log_init(&lg);
    signal(SIGPIPE, SIG_DFL); /* the library must not need SIGPIPE ignored */
    return cu_run("boot-flood", tests);
}
