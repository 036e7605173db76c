/*
 * The TCP rendezvous with a job secret (OFCCL_BOOT_SECRET_FILE). A job of 4
 * ranks with the secret joins, exchanges and reads records on demand (the
 * record server's handshake), while at its root: a process with a wrong
 * secret, one with none, and one replaying a real rank's hello and proof
 * (captured by a stand-in root) are refused, each with a message naming the
 * setting. The stand-in root, which cannot prove the secret, learns nothing
 * more from the real rank it caught, and that rank fails naming it. A rank
 * with a secret refuses a root without one. A flood of 24 processes with a
 * wrong secret does not delay the real ranks. Every process logs at the
 * trace level into a file that must not hold the secret.
 */
#include <fcntl.h>

#include "bootfork.h"

#define NRANKS 4
#define TIMEOUT 15000
#define SECRET "s3cret-of-the-job-4f1c9a2b7d"

static char dir[] = "/tmp/ofccl-secret-XXXXXX";
static char good[128], bad[128], logpath[128];

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);

    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* Every child logs everything to the shared log file. */
static void log_to_file(void)
{
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);

    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
    lg.level = OFCCL__LOG_TRACE;
    lg.subsys = ~0u;
}

static int open_as(const job_t *j, const char *secret, ofccl__boot_t **b, ofccl__err_t *e)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");

    p.secret_file = secret;
    ofccl__err_clear(e);
    return ofccl__boot_open(&p, b, e);
}

/* A real rank: joins, exchanges a round, reads every peer's record. */
static int real_rank(const job_t *j)
{
    ofccl__boot_t *b = NULL;
    ofccl__boot_pub_t *pub = NULL;
    ofccl__err_t e;
    int in = 1000 + j->rank, out[NRANKS], got = 0;
    size_t lens[NRANKS], len = 0;

    log_to_file();
    if (j->delay_ms > 0)
        poll(NULL, 0, j->delay_ms);
    CHECK(open_as(j, good, &b, &e) == 0);
    CHECK(ofccl__boot_allgather(b, &in, sizeof(in), out, sizeof(out[0]), lens, &e) == 0);
    for (int r = 0; r < j->size; r++)
        CHECK(out[r] == 1000 + r);
    CHECK(ofccl__boot_publish(b, true, &in, sizeof(in), sizeof(in), &pub, &e) == 0);
    for (int r = 0; r < j->size; r++) {
        CHECK(ofccl__boot_get(b, pub, r, &got, sizeof(got), &len, &e) == 0);
        CHECK(len == sizeof(got) && got == 1000 + r);
    }
    ofccl__boot_pub_free(pub);
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    ofccl__boot_close(b);
    return 0;
}

/* An impostor claiming rank 1 with `secret` (NULL: none): refused, with a
 * message naming the setting. */
static int impostor(const job_t *j, const char *secret, const char *says)
{
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    int rc;

    log_to_file();
    rc = open_as(j, secret, &b, &e);
    fprintf(stderr, "  impostor (%s): %d: %s\n", secret ? secret : "no secret", rc, e.msg);
    CHECK(rc != 0 && b == NULL);
    CHECK(strstr(e.msg, says) != NULL && strstr(e.msg, "OFCCL_BOOT_SECRET_FILE") != NULL);
    return 0;
}

static int wrong_secret(const job_t *j)
{
    return impostor(j, bad, "proof of the job secret is wrong");
}

static int no_secret(const job_t *j)
{
    return impostor(j, NULL, "asks for the job secret");
}

/* Read exactly `n` bytes (5 s at most). */
static int read_n(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    uint64_t t0 = ofccl__now_ns();

    while (got < n && ms_since(t0) < 5000) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t k;
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        if ((k = recv(fd, buf + got, n - got, 0)) <= 0)
            return -1;
        got += (size_t)k;
    }
    return got == n ? 0 : -1;
}

static int connect_port(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_port = htons((uint16_t)port);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void put_frame(uint8_t *f, uint32_t status, uint32_t len)
{
    ofccl__put_le32(f, 0x54424F4Fu);
    ofccl__put_le32(f + 4, status);
    ofccl__put_le64(f + 8, 0);
    ofccl__put_le32(f + 16, NRANKS);
    ofccl__put_le32(f + 20, len);
}

/* A stand-in root on `fake_port`: catches a real rank's hello and proof,
 * answers with a proof of its own it cannot make right, and checks the rank
 * sends nothing more; then replays the hello and the proof to the job's real
 * root, which must refuse them. */
static int fake_root_and_replay(const job_t *j)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fd, rfd;
    uint8_t hello[80 + 256], proof[72], f[24 + 400], sink[8];
    size_t hlen;

    log_to_file();
    a.sin_port = htons((uint16_t)j->delay_ms); /* the stand-in's port */
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 4) != 0)
        return 2;
    if ((fd = accept(lfd, NULL, NULL)) < 0 || read_n(fd, hello, 80) != 0)
        return 3;
    hlen = 80 + ofccl__get_le16(hello + 6);
    if (read_n(fd, hello + 80, hlen - 80) != 0)
        return 4;
    put_frame(f, 4, 32); /* CHALLENGE */
    memset(f + 24, 0x5a, 32);
    if (send(fd, f, 56, MSG_NOSIGNAL) != 56 || read_n(fd, proof, 72) != 0)
        return 5;
    put_frame(f, 5, 32); /* PROVEN, made up */
    memset(f + 24, 0xa5, 32);
    if (send(fd, f, 56, MSG_NOSIGNAL) != 56)
        return 6;
    if (recv(fd, sink, sizeof(sink), 0) != 0) /* the rank hangs up, sending nothing */
        return 7;
    close(fd);
    close(lfd);
    /* The replay, at the job's real root. */
    if ((rfd = connect_port(atoi(strrchr(j->root, ':') + 1))) < 0)
        return 8;
    if (send(rfd, hello, hlen, MSG_NOSIGNAL) != (ssize_t)hlen || read_n(rfd, f, 24) != 0 ||
        ofccl__get_le32(f + 4) != 4 || read_n(rfd, f + 24, 32) != 0)
        return 9; /* the root challenges the replayed hello ... */
    if (send(rfd, proof, 72, MSG_NOSIGNAL) != 72 || read_n(rfd, f, 24) != 0 ||
        ofccl__get_le32(f + 4) != 1)
        return 10; /* ... and rejects the old proof */
    close(rfd);
    return 0;
}

/* The real rank the stand-in caught: fails naming the root. */
static int caught_rank(const job_t *j)
{
    return impostor(j, good, "did not prove it knows the job secret");
}

static void test_secret_job(void)
{
    char root[64], fake[64];
    job_t jobs[NRANKS], imp, fr, cr;
    pid_t pids[NRANKS + 4];
    int fport = free_port(AF_INET), n = 0;
    FILE *lf;
    char line[1024];
    int leaked = 0, refusals = 0;

    make_root(root, sizeof(root), AF_INET);
    snprintf(fake, sizeof(fake), "127.0.0.1:%d", fport);
    for (int r = 0; r < NRANKS; r++)
        jobs[r] = (job_t){.root = root,
                          .rank = r,
                          .size = NRANKS,
                          .timeout_ms = TIMEOUT,
                          .delay_ms = r == 0 ? 0 : 1500};
    imp = (job_t){.root = root, .rank = 1, .size = NRANKS, .timeout_ms = TIMEOUT, .delay_ms = 0};
    fr = (job_t){.root = root, .delay_ms = fport};
    cr = (job_t){.root = fake, .rank = 2, .size = NRANKS, .timeout_ms = TIMEOUT};
    pids[n++] = spawn(real_rank, &jobs[0]);
    poll(NULL, 0, 200); /* the root listens */
    pids[n++] = spawn(wrong_secret, &imp);
    pids[n++] = spawn(no_secret, &imp);
    pids[n++] = spawn(fake_root_and_replay, &fr);
    poll(NULL, 0, 200);
    pids[n++] = spawn(caught_rank, &cr);
    for (int r = 1; r < NRANKS; r++) /* the real ranks come after the impostors */
        pids[n++] = spawn(real_rank, &jobs[r]);
    CU_ASSERT_EQUAL(reap(pids, n, 4 * TIMEOUT), n);
    /* The secret appears nowhere in the logs; the root logged each refusal. */
    lf = fopen(logpath, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lf);
    while (fgets(line, sizeof(line), lf) != NULL) {
        leaked |= strstr(line, SECRET) != NULL || strstr(line, "wrong-secret-xyz") != NULL;
        refusals += strstr(line, "rejecting a hello from 127.0.0.1") != NULL;
    }
    fclose(lf);
    CU_ASSERT_FALSE(leaked);
    CU_ASSERT(refusals >= 2); /* the wrong secret and the replay, with their address */
}

static int root_without_secret(const job_t *j)
{
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    log_to_file();
    if (open_as(j, NULL, &b, &e) != 0)
        return 0;
    /* It sent the host table before rank 1 could refuse it: the next exchange
     * finds rank 1 gone. */
    CHECK(ofccl__boot_barrier(b, &e) != 0);
    ofccl__boot_close(b);
    return 0;
}

/* A rank with the secret at a root without one: refuses it, naming why. */
static int rank_with_secret(const job_t *j)
{
    return impostor(j, good, "answered without asking for the job secret");
}

static void test_rank_refuses_open_root(void)
{
    char root[64];
    job_t r0, r1;
    pid_t pids[2];

    make_root(root, sizeof(root), AF_INET);
    r0 = (job_t){.root = root, .rank = 0, .size = 2, .timeout_ms = 3000};
    r1 = (job_t){.root = root, .rank = 1, .size = 2, .timeout_ms = 3000, .delay_ms = 100};
    pids[0] = spawn(root_without_secret, &r0);
    poll(NULL, 0, 200);
    pids[1] = spawn(rank_with_secret, &r1);
    CU_ASSERT_EQUAL(reap(pids, 2, 20000), 2);
}

/* One of a flood of processes with a wrong secret: refused (by its proof,
 * or because the rank is taken or the rendezvous is over). */
static int flooder(const job_t *j)
{
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    log_to_file();
    CHECK(open_as(j, bad, &b, &e) != 0 && b == NULL);
    return 0;
}

/* A real rank that must join within JOIN_MS, flood or not. */
#define JOIN_MS 5000
static int timed_rank(const job_t *j)
{
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    uint64_t t0 = ofccl__now_ns();

    log_to_file();
    CHECK(open_as(j, good, &b, &e) == 0);
    fprintf(stderr, "  rank %d joined in %llu ms\n", j->rank, (unsigned long long)ms_since(t0));
    CHECK(ms_since(t0) < JOIN_MS);
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    ofccl__boot_close(b);
    return 0;
}

static void test_flood(void)
{
    enum { FLOOD = 24 };
    char root[64];
    job_t jobs[NRANKS], fl[FLOOD];
    pid_t pids[NRANKS + FLOOD];
    int n = 0;

    make_root(root, sizeof(root), AF_INET);
    for (int r = 0; r < NRANKS; r++)
        jobs[r] = (job_t){.root = root, .rank = r, .size = NRANKS, .timeout_ms = TIMEOUT};
    pids[n++] = spawn(timed_rank, &jobs[0]);
    poll(NULL, 0, 100);
    for (int k = 0; k < FLOOD; k++) {
        fl[k] =
            (job_t){.root = root, .rank = 1 + k % (NRANKS - 1), .size = NRANKS, .timeout_ms = 3000};
        pids[n++] = spawn(flooder, &fl[k]);
    }
    for (int r = 1; r < NRANKS; r++)
        pids[n++] = spawn(timed_rank, &jobs[r]);
    CU_ASSERT_EQUAL(reap(pids, n, 4 * TIMEOUT), n);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"tcp secret: the job joins; wrong, missing and replayed proofs are refused",
         test_secret_job},
        {"tcp secret: a rank with a secret refuses a root without one",
         test_rank_refuses_open_root},
        {"tcp secret: a flood of wrong secrets does not delay the real ranks", test_flood},
        {NULL, NULL},
    };
    int rc;

    ofccl__log_init(&lg);
    signal(SIGPIPE, SIG_DFL);
    if (mkdtemp(dir) == NULL)
        return 1;
    snprintf(good, sizeof(good), "%s/good", dir);
    snprintf(bad, sizeof(bad), "%s/bad", dir);
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    if (write_file(good, SECRET "\n") != 0 || write_file(bad, "wrong-secret-xyz-0123456789\n") != 0)
        return 1;
    rc = cu_run("boot-secret", tests);
    unlink(good);
    unlink(bad);
    unlink(logpath);
    rmdir(dir);
    return rc;
}
