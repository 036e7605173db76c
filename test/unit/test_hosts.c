/*
 * Host identity and the host table: which ranks share a host is decided by
 * boot id plus network, mount and PID namespaces (or OFCCL_HOST_ID), never by
 * the hostname. Forked ranks on one machine share a hostname, so OFCCL_HOST_ID
 * makes them two hosts, and a rank in its own network namespace has an
 * identity of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>

#include "bootfork.h"
#include "ofccl.h"

#define NRANKS 4

/* ---- the identity function ---------------------------------------------- */

static void test_override(void)
{
    char id[OFCCL__HOST_ID_MAX + 1], longest[OFCCL__HOST_ID_MAX + 2];
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_host_id("rack7-node3", &lg, id, &e), 0);
    CU_ASSERT_STRING_EQUAL(id, "rack7-node3");
    memset(longest, 'x', sizeof(longest));
    longest[OFCCL__HOST_ID_MAX] = '\0';
    CU_ASSERT_EQUAL(ofccl__boot_host_id(longest, &lg, id, &e), 0);
    CU_ASSERT_STRING_EQUAL(id, longest);
    longest[OFCCL__HOST_ID_MAX] = 'x';
    longest[OFCCL__HOST_ID_MAX + 1] = '\0';
    CU_ASSERT_EQUAL(ofccl__boot_host_id(longest, &lg, id, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_HOST_ID"));
    CU_ASSERT_EQUAL(ofccl__boot_host_id("a\tb", &lg, id, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "non-printable"));
}

/* The detected identity is "<boot id>/net:<ino>.<dev>/mnt:<ino>.<dev>/pid:<ino>.<dev>",
 * built from what this test reads itself. */
static void test_detected_format(void)
{
    static const char *const ns[] = {"net", "mnt", "pid"};
    char id[OFCCL__HOST_ID_MAX + 1], again[OFCCL__HOST_ID_MAX + 1], want[OFCCL__HOST_ID_MAX + 1];
    char boot[64] = "";
    ofccl__err_t e;
    size_t used;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY);

    if (fd < 0) {
        printf(" [no /proc/sys/kernel/random/boot_id: skipped] ");
        return;
    }
    CU_ASSERT(read(fd, boot, sizeof(boot) - 1) >= 36);
    close(fd);
    used = (size_t)snprintf(want, sizeof(want), "%.36s", boot);
    for (int k = 0; k < 3; k++) {
        char path[32];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/self/ns/%s", ns[k]);
        CU_ASSERT_FATAL(stat(path, &st) == 0);
        used += (size_t)snprintf(want + used, sizeof(want) - used, "/%s:%llu.%llu", ns[k],
                                 (unsigned long long)st.st_ino, (unsigned long long)st.st_dev);
    }
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__boot_host_id(NULL, &lg, id, &e), 0);
    CU_ASSERT_STRING_EQUAL(id, want);
    CU_ASSERT_EQUAL(ofccl__boot_host_id("", &lg, again, &e), 0); /* "" = detect */
    CU_ASSERT_STRING_EQUAL(again, id);
    printf(" [%s] ", id);
}

/* A forked child reports its identity through a pipe, optionally after
 * entering a new network namespace. Returns 0, or -1 when the child could
 * not (its exit status is the errno of unshare). */
static int child_id(int new_netns, char *out)
{
    int fds[2], ok;
    ssize_t n;
    pid_t pid;

    CU_ASSERT_FATAL(pipe(fds) == 0);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        char id[OFCCL__HOST_ID_MAX + 1];
        ofccl__err_t e;
        int code = 0;
        close(fds[0]);
        if (new_netns && unshare(CLONE_NEWNET) != 0)
            code = errno;
        else if (ofccl__boot_host_id(NULL, &lg, id, &e) != 0 || write(fds[1], id, strlen(id)) < 0)
            code = 255;
        _exit(code);
    }
    close(fds[1]);
    n = read(fds[0], out, OFCCL__HOST_ID_MAX);
    close(fds[0]);
    ok = reap(&pid, 1, 10000);
    out[n > 0 ? n : 0] = '\0';
    return n > 0 && ok == 1 ? 0 : -1;
}

static void test_netns(void)
{
    char mine[OFCCL__HOST_ID_MAX + 1], same[OFCCL__HOST_ID_MAX + 1], other[OFCCL__HOST_ID_MAX + 1];
    const char *net_mine, *net_other;
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(ofccl__boot_host_id(NULL, &lg, mine, &e), 0);
    /* Another process in the same namespaces: the same host. */
    CU_ASSERT_EQUAL_FATAL(child_id(0, same), 0);
    CU_ASSERT_STRING_EQUAL(same, mine);
    if (geteuid() != 0) {
        printf(" [not root: cannot create a network namespace, skipped] ");
        return;
    }
    if (child_id(1, other) != 0) {
        printf(" [unshare(CLONE_NEWNET) refused (container without CAP_SYS_ADMIN?): skipped] ");
        return;
    }
    /* Same kernel, mounts and PIDs; only the network namespace differs, and
     * that alone makes it another host (no shared loopback). */
    CU_ASSERT_STRING_NOT_EQUAL(other, mine);
    net_mine = strstr(mine, "/net:");
    net_other = strstr(other, "/net:");
    CU_ASSERT_FATAL(net_mine != NULL && net_other != NULL);
    CU_ASSERT_EQUAL(net_mine - mine, net_other - other);
    CU_ASSERT_EQUAL(strncmp(mine, other, (size_t)(net_mine - mine)), 0); /* boot id */
    CU_ASSERT_STRING_EQUAL(strstr(mine, "/mnt:"), strstr(other, "/mnt:"));
    CU_ASSERT_STRING_NOT_EQUAL(net_mine, net_other);
}

/* ---- the host table ------------------------------------------------------ */

static void test_numbering(void)
{
    const char *ids[] = {"m", "k", "m", "z", "k", "k"};
    const int want[] = {0, 1, 0, 2, 1, 1};
    ofccl__boot_t b;
    ofccl__err_t e;

    memset(&b, 0, sizeof(b));
    b.size = 6;
    b.rank = 4;
    b.log = &lg;
    CU_ASSERT_EQUAL_FATAL(ofccl__boot_hosts_from_ids(&b, ids, &e), 0);
    CU_ASSERT_EQUAL(b.nhosts, 3);
    for (int r = 0; r < 6; r++)
        CU_ASSERT_EQUAL(b.host_of[r], want[r]);
    ofccl__boot_local_from_hosts(&b);
    CU_ASSERT_EQUAL(b.local_rank, 1); /* ranks 1, 4, 5 share host "k" */
    CU_ASSERT_EQUAL(b.local_size, 3);
    free(b.host_of);
}

/* ---- multi-rank: the TCP rendezvous -------------------------------------- */

static const char *const ab_ids[NRANKS] = {"a", "b", "a", "b"};

/* Joins with j->host_id; expects two hosts for "a"/"b", one otherwise. */
static int host_rank(const job_t *j)
{
    ofccl__boot_params_t p = params("tcp", j->root, j->rank, j->size, j->timeout_ms, "");
    ofccl__boot_t *b = NULL;
    ofccl__err_t e;
    int two = j->host_id != NULL && strcmp(j->host_id, "same") != 0;
    char host[64];

    ofccl__err_clear(&e);
    p.host_id = j->host_id;
    if (j->delay_ms > 0)
        poll(NULL, 0, j->delay_ms);
    CHECK(ofccl__boot_open(&p, &b, &e) == 0);
    CHECK(gethostname(host, sizeof(host)) == 0 && strncmp(b->hostname, host, 63) == 0);
    CHECK(b->nhosts == (two ? 2 : 1));
    for (int r = 0; r < j->size; r++)
        CHECK(b->host_of[r] == (two ? r % 2 : 0));
    CHECK(b->local_rank == (two ? j->rank / 2 : j->rank));
    CHECK(b->local_size == (two ? 2 : j->size));
    CHECK(ofccl__boot_barrier(b, &e) == 0);
    ofccl__boot_close(b);
    return 0;
}

static void run_hosts(int (*fn)(const job_t *), const char *const ids[NRANKS])
{
    char root[64];
    job_t jobs[NRANKS];
    pid_t pids[NRANKS];

    make_root(root, sizeof(root), AF_INET);
    for (int r = 0; r < NRANKS; r++) {
        jobs[r] = (job_t){.root = root,
                          .rank = r,
                          .size = NRANKS,
                          .timeout_ms = 20000,
                          .host_id = ids != NULL ? ids[r] : NULL};
        pids[r] = spawn(fn, &jobs[r]);
        CU_ASSERT_FATAL(pids[r] > 0);
    }
    CU_ASSERT_EQUAL(reap(pids, NRANKS, 60000), NRANKS);
}

static void test_boot_two_hosts(void)
{
    run_hosts(host_rank, ab_ids);
}

static void test_boot_one_host(void)
{
    static const char *const same[NRANKS] = {"same", "same", "same", "same"};
    run_hosts(host_rank, same);
    run_hosts(host_rank, NULL); /* detected: every rank in this machine's namespaces */
}

/* Through the public API: HOST_ID set in the context's settings. Two hosts
 * make the context pick tcp (lo, since all really run here); one host picks
 * the local transport. Either way a world communicator works. */
static int ctx_rank(const job_t *j)
{
    char root[80], rank[32], size[32], hid[64], err[512] = "";
    const char *settings[] = {root, rank, size, "BOOT_TIMEOUT_MS=20000", hid, "IFACE=lo", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    int two = strcmp(j->host_id, "same") != 0, lr = -1, ls = -1;
    ofccl_ctx_t *ctx = NULL;
    ofccl_comm_t *comm = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    snprintf(root, sizeof(root), "BOOT_ROOT=%s", j->root);
    snprintf(rank, sizeof(rank), "BOOT_RANK=%d", j->rank);
    snprintf(size, sizeof(size), "BOOT_SIZE=%d", j->size);
    snprintf(hid, sizeof(hid), "HOST_ID=%s", j->host_id);
    if (!two)
        settings[5] = NULL; /* the local transport has no interfaces to name */
    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "  rank %d: %s\n", j->rank, err);
        return 2;
    }
    CHECK(strncmp(ofccl_ctx_provider(ctx), two ? "tcp;" : "local", 4) == 0);
    CHECK(ofccl_comm_world(ctx, &comm) == 0);
    CHECK(ofccl_barrier(comm) == 0);
    CHECK(ofccl_comm_local_rank(comm, &lr) == 0 && ofccl_comm_local_size(comm, &ls) == 0);
    CHECK(lr == (two ? j->rank / 2 : j->rank));
    CHECK(ls == (two ? 2 : j->size));
    CHECK(ofccl_comm_destroy(comm) == 0);
    CHECK(ofccl_ctx_destroy(ctx) == 0);
    return 0;
}

static void test_ctx_hosts(void)
{
    static const char *const same[NRANKS] = {"same", "same", "same", "same"};
    run_hosts(ctx_rank, ab_ids);
    run_hosts(ctx_rank, same);
}

/* ---- protocol versions ---------------------------------------------------- */

/* Sends `hello` to the root as a raw client and expects a rejection whose
 * reason holds `word`. Returns 0 or an exit code. */
static int raw_hello(const char *root, const uint8_t *hello, size_t len, const char *word)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    uint64_t t0 = ofccl__now_ns();
    uint8_t reply[24 + 401];
    size_t got = 0;
    int fd = -1;

    a.sin_port = htons((uint16_t)atoi(strrchr(root, ':') + 1));
    while (fd < 0 && ms_since(t0) < 5000) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(fd);
            fd = -1;
            poll(NULL, 0, 10);
        }
    }
    if (fd < 0 || send(fd, hello, len, MSG_NOSIGNAL) != (ssize_t)len)
        return 2;
    while (got < sizeof(reply) - 1 && ms_since(t0) < 8000) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        n = recv(fd, reply + got, sizeof(reply) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    reply[got] = '\0';
    if (got < 24 || ofccl__get_le32(reply) != 0x54424F4Fu || ofccl__get_le32(reply + 4) != 1)
        return 3; /* not a rejection */
    if (strstr((const char *)reply + 24, word) == NULL) {
        fprintf(stderr, "  reason '%s' lacks '%s'\n", (const char *)reply + 24, word);
        return 4;
    }
    return 0;
}

static void make_hello(uint8_t *h, unsigned version, unsigned idlen, int rank)
{
    memset(h, 0, 80);
    ofccl__put_le32(h, 0x48424F4Fu);
    ofccl__put_le16(h + 4, (uint16_t)version);
    ofccl__put_le16(h + 6, (uint16_t)idlen);
    ofccl__put_le32(h + 8, (uint32_t)rank);
    ofccl__put_le32(h + 12, 2);
    memcpy(h + 16, "elsewhere", 9);
}

static int bad_hellos(const job_t *j)
{
    uint8_t h[80 + 8];

    make_hello(h, 1, 0, 1); /* a version 1 rank: no identity */
    if (raw_hello(j->root, h, 80, "protocol 1, the root 2") != 0)
        return 10;
    make_hello(h, 2, 300, 1); /* an identity longer than allowed */
    if (raw_hello(j->root, h, 80, "300-byte host identity") != 0)
        return 11;
    make_hello(h, 2, 0, 1); /* none at all */
    if (raw_hello(j->root, h, 80, "0-byte host identity") != 0)
        return 12;
    make_hello(h, 2, 3, 1);
    memcpy(h + 80, "a\001b", 3);
    if (raw_hello(j->root, h, 83, "non-printable") != 0)
        return 13;
    return 0;
}

static void test_bad_hellos(void)
{
    char root[64];
    job_t jobs[3];
    pid_t pids[3];

    make_root(root, sizeof(root), AF_INET);
    jobs[0] = (job_t){.root = root, .rank = 0, .size = 2, .timeout_ms = 20000};
    jobs[1] = (job_t){.root = root};
    /* The real rank 1 comes after the impostors and is still welcome. */
    jobs[2] = (job_t){.root = root, .rank = 1, .size = 2, .timeout_ms = 20000, .delay_ms = 1000};
    pids[0] = spawn(host_rank, &jobs[0]);
    pids[1] = spawn(bad_hellos, &jobs[1]);
    pids[2] = spawn(host_rank, &jobs[2]);
    CU_ASSERT_EQUAL(reap(pids, 3, 60000), 3);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"identity: OFCCL_HOST_ID wins", test_override},
        {"identity: boot id and namespaces", test_detected_format},
        {"identity: another network namespace is another host", test_netns},
        {"table: hosts numbered by their lowest rank", test_numbering},
        {"tcp: HOST_ID a/b makes 2+2 ranks two hosts", test_boot_two_hosts},
        {"tcp: one identity, one host", test_boot_one_host},
        {"ctx: HOST_ID in the settings decides locality and transport", test_ctx_hosts},
        {"tcp: old and malformed hellos are rejected with a reason", test_bad_hellos},
        {NULL, NULL},
    };

    ofccl__log_init(&lg);
    signal(SIGPIPE, SIG_DFL);
    return cu_run("boot-hosts", tests);
}
