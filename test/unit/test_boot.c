/*
 * Bootstrap selection and the TCP rendezvous. Multi-rank cases fork one
 * process per rank on 127.0.0.1; children report through their exit status
 * and the parent reaps them under a deadline, killing stragglers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootfork.h"

static uint8_t pattern(int rank, int round, size_t i)
{
    return (uint8_t)(rank * 31 + round * 7 + i * 13 + (i >> 8));
}

static size_t round_len(int rank, int round)
{
    /* Rank-specific, includes an empty contribution and a full slot. */
    if (round == 0)
        return 10 + 37 * (size_t)rank;
    return rank == 1 ? 0 : 1024 - 100 * (size_t)rank;
}

static int do_round(ofccl__boot_t *b, const job_t *j, int round, size_t slot, ofccl__err_t *pe)
{
    ofccl__err_t e;
    uint8_t in[1024], *out = calloc((size_t)b->size, slot);
    size_t *lens = calloc((size_t)b->size, sizeof(*lens));
    size_t len = round_len(b->rank, round);
    int rc;

    ofccl__err_clear(&e);
    for (size_t i = 0; i < len; i++)
        in[i] = pattern(b->rank, round, i);
    rc = ofccl__boot_allgather(b, in, len, out, slot, lens, &e);
    *pe = e;
    if (rc == 0) {
        for (int r = 0; r < b->size && rc == 0; r++) {
            if (lens[r] != round_len(r, round))
                rc = -100 - r;
            for (size_t i = 0; i < lens[r] && rc == 0; i++)
                if (out[(size_t)r * slot + i] != pattern(r, round, i))
                    rc = -200 - r;
        }
    }
    free(out);
    free(lens);
    return rc;
}

static int good_rank(const job_t *j)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    if (j->delay_ms > 0)
        poll(NULL, 0, j->delay_ms);
    CHECK(ofccl__boot_open(&p, &b, &e) == 0);
    CHECK(strcmp(b->ops->name, "tcp") == 0);
    CHECK(b->rank == j->rank && b->size == j->size);
    /* Every rank runs on this host. */
    CHECK(b->local_rank == j->rank && b->local_size == j->size);
    CHECK(strncmp(b->job, "tcp:", 4) == 0);
    CHECK(do_round(b, j, 0, 256, &e) == 0);
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    CHECK(do_round(b, j, 1, 1024, &e) == 0);
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    ofccl__boot_close(b);
    return 0;
}

/* Rank r's record in round k: r + k + 5 bytes, each from the rank, the round
 * and its position (computed alike by the writer and every reader). */
static size_t pub_record(int r, int k, uint8_t *out)
{
    size_t n = (size_t)(r + k + 5);

    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(r * 31 + k * 7 + (int)i);
    return n;
}

/* Records published for reading on demand: two rounds, every rank reads
 * every rank's (the root from its own table, the others from its record
 * server); a tag never published and a rank out of range are refused; an
 * allreduce of MIN/MAX words; everything ends with a barrier. */
static int pub_rank(const job_t *j)
{
    static const uint8_t ops[3] = {OFCCL__BOOT_MIN, OFCCL__BOOT_MAX, OFCCL__BOOT_MAX};
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_pub_t *pub[2] = {NULL, NULL};
    ofccl__boot_t *b = NULL;
    uint8_t mine[64], want[64], got[64];
    uint64_t in[3] = {(uint64_t)j->rank + 10, (uint64_t)j->rank, 100 + (uint64_t)j->rank}, out[3];
    size_t len = 0;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CHECK(ofccl__boot_open(&p, &b, &e) == 0);
    CHECK(ofccl__boot_can_get(b));
    for (int k = 0; k < 2; k++) {
        size_t n = pub_record(j->rank, k, mine);
        CHECK(ofccl__boot_publish(b, true, mine, n, sizeof(mine), &pub[k], &e) == 0);
        CHECK(pub[k]->lazy);
    }
    for (int k = 1; k >= 0; k--)
        for (int r = j->size - 1; r >= 0; r--) {
            size_t n = pub_record(r, k, want);
            CHECK(ofccl__boot_get(b, pub[k], r, got, sizeof(got), &len, &e) == 0);
            CHECK(len == n && memcmp(got, want, n) == 0);
        }
    CHECK(ofccl__boot_get(b, pub[0], j->size, got, sizeof(got), &len, &e) == OFCCL_ERR_INVALID_ARG);
    pub[0]->tag += 1000; /* never published */
    CHECK(ofccl__boot_get(b, pub[0], 0, got, sizeof(got), &len, &e) == OFCCL_ERR_MISMATCH);
    CHECK(strstr(e.msg, "no record") != NULL);
    CHECK(ofccl__boot_allreduce(b, in, out, 3, ops, &e) == 0);
    CHECK(out[0] == 10 && out[1] == (uint64_t)j->size - 1 && out[2] == 100 + (uint64_t)j->size - 1);
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    ofccl__boot_pub_free(pub[0]);
    ofccl__boot_pub_free(pub[1]);
    ofccl__boot_close(b);
    return 0;
}

/* Opens, then is expected to fail its first exchange with j->expect_rc (or
 * any error when expect_rc is 1). */
static int failing_rank(const job_t *j)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    int rc;

    ofccl__err_clear(&e);
    CHECK(ofccl__boot_open(&p, &b, &e) == 0);
    rc = do_round(b, j, 0, 256, &e);
    CHECK(rc != 0 && (j->expect_rc == 1 || rc == j->expect_rc));
    CHECK(ofccl__boot_barrier(b, &e) == OFCCL_ERR_STATE);
    ofccl__boot_close(b);
    return 0;
}

/* Opens and then leaves (or idles) without taking part in any exchange. */
static int quitting_rank(const job_t *j)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CHECK(ofccl__boot_open(&p, &b, &e) == 0);
    if (j->delay_ms > 0)
        poll(NULL, 0, j->delay_ms);
    ofccl__boot_close(b);
    return 0;
}

/* Expects the rendezvous itself to fail fast (within 2 timeouts). */
static int rejected_rank(const job_t *j)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    uint64_t t0 = ofccl__now_ns();
    int rc;

    ofccl__err_clear(&e);
    if (j->delay_ms > 0)
        poll(NULL, 0, j->delay_ms);
    rc = ofccl__boot_open(&p, &b, &e);
    CHECK(rc != 0 && b == NULL);
    CHECK(j->expect_rc == 1 || rc == j->expect_rc);
    CHECK(ms_since(t0) < 2 * j->timeout_ms + 500);
    return 0;
}

/* Connects to the root and talks nonsense; waits until the root hangs up. */
static int rogue(const job_t *j)
{
    static const char junk[] = "GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: rogue\r\n"
                               "Accept: */*\r\nX-Padding: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\r\n";
    struct sockaddr_in a;
    uint64_t t0 = ofccl__now_ns();
    const char *colon = strrchr(j->root, ':');
    char sink[256];
    int fd = -1;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (ms_since(t0) < 5000) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            break;
        close(fd);
        fd = -1;
        poll(NULL, 0, 10);
    }
    if (fd < 0)
        return 2;
    /* delay_ms selects the flavour: 0 = a full screen of junk, 1 = a few
     * bytes and then silence (never completes a hello). */
    if (j->delay_ms == 0)
        (void)send(fd, junk, sizeof(junk) - 1, MSG_NOSIGNAL);
    else
        (void)send(fd, "OFBH\x01", 5, MSG_NOSIGNAL);
    while (ms_since(t0) < 8000) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) > 0 && recv(fd, sink, sizeof(sink), 0) <= 0)
            break;
    }
    close(fd);
    return 0;
}

/* ---- tests ------------------------------------------------------------- */

static void test_auto_singleton(void)
{
    ofccl__boot_params_t p = params("auto", "", -1, 0, 5000, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    char out[16];
    size_t lens[1] = {0};

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_STRING_EQUAL(b->ops->name, "singleton");
    CU_ASSERT_EQUAL(b->rank, 0);
    CU_ASSERT_EQUAL(b->size, 1);
    CU_ASSERT_EQUAL(b->local_rank, 0);
    CU_ASSERT_EQUAL(b->local_size, 1);
    CU_ASSERT_STRING_EQUAL(b->job, "singleton");
    CU_ASSERT_EQUAL(ofccl__boot_allgather(b, "hello", 5, out, sizeof(out), lens, &e), 0);
    CU_ASSERT_EQUAL(lens[0], 5);
    CU_ASSERT_EQUAL(memcmp(out, "hello", 5), 0);
    CU_ASSERT_EQUAL(ofccl__boot_allgather(b, "hello", 5, out, 4, lens, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
    ofccl__boot_close(b);

    /* NULL/empty method means auto; forced singleton ignores launcher vars. */
    p = params(NULL, NULL, -1, 0, 0, NULL);
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_STRING_EQUAL(b->ops->name, "singleton");
    CU_ASSERT_EQUAL(b->timeout_ms, 60000);
    ofccl__boot_close(b);
    p = params("singleton", "", -1, 0, 1000, "SLURM_PROCID");
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_STRING_EQUAL(b->ops->name, "singleton");
    ofccl__boot_close(b);
    ofccl__boot_close(NULL);
}

static void expect_launch_error(const char *vars, const char *word)
{
    ofccl__boot_params_t p = params("auto", "", -1, 0, 5000, vars);
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_BOOTSTRAP);
    CU_ASSERT_PTR_NULL(b);
    CU_ASSERT_EQUAL(e.code, OFCCL_ERR_BOOTSTRAP);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, word));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, vars)); /* names the variables seen */
    CU_ASSERT_PTR_NOT_NULL(
        strstr(e.msg, "OFCCL_BOOT_ROOT=host:port OFCCL_BOOT_RANK=r OFCCL_BOOT_SIZE=n"));
    if (strstr(e.msg, word) == NULL)
        fprintf(stderr, "  message: %s\n", e.msg);
}

static void test_misconfigured_launch(void)
{
    expect_launch_error("SLURM_JOB_ID,SLURM_PROCID", "srun --mpi=pmix");
    expect_launch_error("PMI_RANK", "PMI-1/PMI-2");
    expect_launch_error("OMPI_COMM_WORLD_RANK", "Open MPI");
    expect_launch_error("PMIX_NAMESPACE", "Open MPI/PRRTE");
    /* srun --mpi=pmi2 sets both: the PMI explanation is the specific one. */
    expect_launch_error("SLURM_PROCID,PMI_RANK", "srun --mpi=pmi2");
}

static void test_forced_and_bad_method(void)
{
    ofccl__boot_params_t p = params("pmix", "", -1, 0, 2000, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_BOOTSTRAP);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "no PMIx server"));
    CU_ASSERT_PTR_NULL(b);
    p = params("pmix", "", -1, 0, 2000, "SLURM_PROCID");
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_BOOTSTRAP);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "srun --mpi=pmix"));
    p = params("mpi", "", -1, 0, 2000, "");
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "mpi"));
    CU_ASSERT_PTR_NULL(b);
    p = params("tcp", "", -1, 0, 2000, "");
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_BOOT_ROOT"));
    CU_ASSERT_EQUAL(ofccl__boot_open(NULL, &b, &e), OFCCL_ERR_INVALID_ARG);

    /* auto with a root set picks TCP, here as a one-rank job (no socket). */
    p = params("auto", "127.0.0.1:1", 0, 1, 2000, "SLURM_PROCID");
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    CU_ASSERT_STRING_EQUAL(b->ops->name, "tcp");
    CU_ASSERT_STRING_EQUAL(b->job, "tcp:127.0.0.1:1");
    CU_ASSERT_EQUAL(b->local_size, 1);
    {
        size_t lens[1];
        char out[8];
        CU_ASSERT_EQUAL(ofccl__boot_allgather(b, "abc", 3, out, 8, lens, &e), 0);
        CU_ASSERT_EQUAL(lens[0], 3);
        CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
    }
    ofccl__boot_close(b);
}

static void run_good(int family, int n)
{
    char root[64];
    job_t jobs[8];
    pid_t pids[8];
    uint64_t t0 = ofccl__now_ns();

    make_root(root, sizeof(root), family);
    for (int r = 0; r < n; r++) {
        jobs[r] = (job_t){.root = root, .rank = r, .size = n, .timeout_ms = 10000};
        /* Start rank 0 last: the others must retry until it listens. */
        jobs[r].delay_ms = r == 0 ? 300 : 0;
        pids[r] = spawn(good_rank, &jobs[r]);
        CU_ASSERT_FATAL(pids[r] > 0);
    }
    CU_ASSERT_EQUAL(reap(pids, n, 60000), n);
    printf(" [%d ranks on %s: %llu ms] ", n, root, (unsigned long long)ms_since(t0));
}

static void test_tcp_rendezvous(void)
{
    run_good(AF_INET, 4);
}

static void test_tcp_ipv6(void)
{
    if (free_port(AF_INET6) < 0) {
        printf(" [no IPv6 loopback: skipped] ");
        return;
    }
    run_good(AF_INET6, 2);
}

static void run_pub(int family, int n)
{
    char root[64];
    job_t jobs[8];
    pid_t pids[8];

    make_root(root, sizeof(root), family);
    for (int r = 0; r < n; r++) {
        jobs[r] = (job_t){.root = root, .rank = r, .size = n, .timeout_ms = 10000};
        pids[r] = spawn(pub_rank, &jobs[r]);
        CU_ASSERT_FATAL(pids[r] > 0);
    }
    CU_ASSERT_EQUAL(reap(pids, n, 60000), n);
}

static void test_tcp_publish(void)
{
    run_pub(AF_INET, 4);
    if (free_port(AF_INET6) > 0)
        run_pub(AF_INET6, 2);
}

static void test_tcp_missing_rank(void)
{
    char root[64];
    job_t j1;
    pid_t pid;
    ofccl__boot_params_t p;
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    uint64_t t0, took;
    int rc;

    make_root(root, sizeof(root), AF_INET);
    j1 = (job_t){.root = root, .rank = 1, .size = 3, .timeout_ms = 1000, .expect_rc = 1};
    pid = spawn(rejected_rank, &j1);
    p = params("tcp", root, 0, 3, 1000, "");
    ofccl__err_clear(&e);
    t0 = ofccl__now_ns();
    rc = ofccl__boot_open(&p, &b, &e);
    took = ms_since(t0);
    CU_ASSERT_EQUAL(rc, OFCCL_ERR_TIMEOUT);
    CU_ASSERT_PTR_NULL(b);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "rank 2 of 3 did not connect to"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, root));
    CU_ASSERT(took >= 900 && took < 2000);
    printf(" [root gave up after %llu ms: %s] ", (unsigned long long)took, e.msg);
    CU_ASSERT_EQUAL(reap(&pid, 1, 10000), 1);
}

static void test_tcp_rogue_client(void)
{
    char root[64];
    job_t jobs[5];
    pid_t pids[5];
    ofccl__boot_params_t p;
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    int n = 0;

    make_root(root, sizeof(root), AF_INET);
    jobs[n++] = (job_t){.root = root, .rank = 9, .delay_ms = 0}; /* junk */
    jobs[n++] = (job_t){.root = root, .rank = 9, .delay_ms = 1}; /* silent */
    /* A real ofccl rank of another job shape: rejected, told why, fast. */
    jobs[n++] = (job_t){.root = root,
                        .rank = 1,
                        .size = 7,
                        .timeout_ms = 3000,
                        .delay_ms = 100,
                        .expect_rc = OFCCL_ERR_CONFIG};
    jobs[n++] = (job_t){.root = root, .rank = 1, .size = 3, .timeout_ms = 10000, .delay_ms = 400};
    jobs[n++] = (job_t){.root = root, .rank = 2, .size = 3, .timeout_ms = 10000, .delay_ms = 400};
    for (int i = 0; i < n; i++)
        pids[i] = spawn(i < 2 ? rogue : i == 2 ? rejected_rank : good_rank, &jobs[i]);
    p = params("tcp", root, 0, 3, 10000, "");
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), 0);
    if (b != NULL) {
        job_t me = {.root = root, .rank = 0, .size = 3};
        CU_ASSERT_EQUAL(b->size, 3);
        CU_ASSERT_EQUAL(do_round(b, &me, 0, 256, &e), 0);
        CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
        CU_ASSERT_EQUAL(do_round(b, &me, 1, 1024, &e), 0);
        CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), 0);
        ofccl__boot_close(b);
    }
    CU_ASSERT_EQUAL(reap(pids, n, 30000), n);
}

static void test_tcp_peer_dies(void)
{
    char root[64];
    job_t jobs[2];
    pid_t pids[2];
    ofccl__boot_params_t p;
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    job_t me;
    int rc;

    /* Rank 2 leaves right after the rendezvous: the root names it, and rank 1
     * hears from the root instead of waiting for its own deadline. */
    make_root(root, sizeof(root), AF_INET);
    jobs[0] = (job_t){.root = root,
                      .rank = 1,
                      .size = 3,
                      .timeout_ms = 20000,
                      .expect_rc = OFCCL_ERR_REMOTE_ERROR};
    jobs[1] = (job_t){.root = root, .rank = 2, .size = 3, .timeout_ms = 20000};
    pids[0] = spawn(failing_rank, &jobs[0]);
    pids[1] = spawn(quitting_rank, &jobs[1]);
    p = params("tcp", root, 0, 3, 20000, "");
    me = (job_t){.root = root, .rank = 0, .size = 3};
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    rc = do_round(b, &me, 0, 256, &e);
    CU_ASSERT_EQUAL(rc, OFCCL_ERR_REMOTE_ERROR);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "rank 2 closed its bootstrap connection during "
                                         "exchange #0"));
    CU_ASSERT_EQUAL(ofccl__boot_barrier(b, &e), OFCCL_ERR_STATE);
    ofccl__boot_close(b);
    CU_ASSERT_EQUAL(reap(pids, 2, 30000), 2);

    /* Rank 2 stays connected but never contributes: TIMEOUT naming it. */
    make_root(root, sizeof(root), AF_INET);
    jobs[0] = (job_t){.root = root,
                      .rank = 1,
                      .size = 3,
                      .timeout_ms = 20000,
                      .expect_rc = OFCCL_ERR_REMOTE_ERROR};
    jobs[1] = (job_t){.root = root, .rank = 2, .size = 3, .timeout_ms = 20000, .delay_ms = 3000};
    pids[0] = spawn(failing_rank, &jobs[0]);
    pids[1] = spawn(quitting_rank, &jobs[1]);
    p = params("tcp", root, 0, 3, 1000, "");
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_open(&p, &b, &e), 0);
    rc = do_round(b, &me, 0, 256, &e);
    CU_ASSERT_EQUAL(rc, OFCCL_ERR_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "rank 2 did not contribute"));
    ofccl__boot_close(b);
    CU_ASSERT_EQUAL(reap(pids, 2, 30000), 2);
}

static void test_tcp_port_taken(void)
{
    struct sockaddr_in a;
    socklen_t sl = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char root[64];
    ofccl__boot_params_t p;
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 4) == 0);
    getsockname(fd, (struct sockaddr *)&a, &sl);
    snprintf(root, sizeof(root), "127.0.0.1:%d", ntohs(a.sin_port));
    p = params("tcp", root, 0, 2, 2000, "");
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_BOOTSTRAP);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, root));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "in use"));
    close(fd);
}

static void expect_config(const char *root, int rank, int size, const char *word)
{
    ofccl__boot_params_t p = params("tcp", root, rank, size, 1000, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_open(&p, &b, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NULL(b);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, word));
    if (strstr(e.msg, word) == NULL)
        fprintf(stderr, "  '%s' %d/%d: %s\n", root, rank, size, e.msg);
}

static void test_tcp_bad_values(void)
{
    expect_config("127.0.0.1:29500", 5, 2, "OFCCL_BOOT_RANK");
    expect_config("127.0.0.1:29500", -1, 2, "OFCCL_BOOT_RANK");
    expect_config("127.0.0.1:29500", 0, 0, "OFCCL_BOOT_SIZE");
    expect_config("nocolon", 0, 2, "OFCCL_BOOT_ROOT");
    expect_config("127.0.0.1:99999", 0, 2, "OFCCL_BOOT_ROOT");
    expect_config("127.0.0.1:0", 1, 2, "port");
    expect_config("127.0.0.1:", 1, 2, "port");
    expect_config("127.0.0.1:12ab", 1, 2, "port");
    expect_config("127.0.0.1:-5", 1, 2, "port");
    expect_config(":29500", 1, 2, "OFCCL_BOOT_ROOT");
    expect_config("::1:29500", 1, 2, "[address]:port");
    expect_config("[::1", 1, 2, "OFCCL_BOOT_ROOT");
    expect_config("[::1]29500", 1, 2, "OFCCL_BOOT_ROOT");
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"auto: singleton", test_auto_singleton},
        {"auto: misconfigured launch", test_misconfigured_launch},
        {"forced and bad methods", test_forced_and_bad_method},
        {"tcp: 4-rank rendezvous", test_tcp_rendezvous},
        {"tcp: IPv6", test_tcp_ipv6},
        {"tcp: records published and read on demand, allreduce", test_tcp_publish},
        {"tcp: missing rank", test_tcp_missing_rank},
        {"tcp: rogue clients", test_tcp_rogue_client},
        {"tcp: peer dies", test_tcp_peer_dies},
        {"tcp: port taken", test_tcp_port_taken},
        {"tcp: bad values", test_tcp_bad_values},
        {NULL, NULL},
    };

    ofccl__log_init(&lg);
    signal(SIGPIPE, SIG_DFL); /* the library must not need SIGPIPE ignored */
    return cu_run("boot", tests);
}
