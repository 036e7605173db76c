/*
 * A tight address-space limit (RLIMIT_AS) while contexts and communicators
 * are created, used and destroyed: every step returns 0 or a clean error
 * (NO_MEMORY, or RESOURCE naming RLIMIT_AS; a peer of a rank that failed may
 * see its own BOOTSTRAP, TIMEOUT or REMOTE_ERROR), never a crash, and once
 * the limit is raised the same process creates a working communicator.
 * Two ranks forked by the test, joined through the TCP bootstrap, each round
 * a new job with the limit a little higher above what the process maps.
 * Usage: test_aslimit <provider>
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu.h"
#include "ofccl.h"

#include "forkrun.h"

/* Room left under the limit in each round, MiB above the current mapping. */
static const int headroom_mib[] = {0, 8, 16, 24, 32, 48, 56, 64, 72, 80, 88, 96, 112, 128, 160};
#define ROUNDS ((int)(sizeof(headroom_mib) / sizeof(headroom_mib[0])))
#define COUNT 65536 /* floats per rank: 256 KiB, enough for the pool to grow */

struct result {
    int step; /* 0 = all done; 1 ctx, 2 comm, 3 collective, 4 destroy: where it failed */
    int rc;
    char msg[512];
};

struct shared {
    struct result round[ROUNDS][2];
    struct result after[2]; /* with the limit raised */
};
static struct shared *sh;

static unsigned long long vm_bytes(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f != NULL) {
        if (fscanf(f, "%llu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* One job: create, all-gather, destroy; records where it failed. */
static void one_job(int rank, int port, int timeout_ms, struct result *res)
{
    char root[64], rk[32], prov[64], boot_to[48];
    const char *settings[] = {root, rk, "BOOT_SIZE=2", prov, boot_to, NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = res->msg, .errlen = sizeof(res->msg)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_req_t *req;
    static float in[COUNT], out[2 * COUNT];
    int rc;

    snprintf(root, sizeof(root), "BOOT_ROOT=127.0.0.1:%d", port);
    snprintf(rk, sizeof(rk), "BOOT_RANK=%d", rank);
    snprintf(prov, sizeof(prov), "PROVIDER=%s", provider);
    snprintf(boot_to, sizeof(boot_to), "BOOT_TIMEOUT_MS=%d", timeout_ms);
    res->step = 1;
    res->rc = ofccl_ctx_create(&p, &ctx);
    if (res->rc != 0)
        return;
    res->step = 2;
    res->rc = ofccl_comm_world(ctx, &comm);
    if (res->rc != 0) {
        snprintf(res->msg, sizeof(res->msg), "%s", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return;
    }
    ofccl_comm_set_timeout(comm, (uint64_t)timeout_ms);
    res->step = 3;
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(rank * COUNT + i);
    rc = ofccl_allgather(comm, in, out, COUNT, OFCCL_F32, &req);
    if (rc == 0) {
        rc = ofccl_wait(req);
        ofccl_req_free(req);
    }
    for (int i = 0; rc == 0 && i < 2 * COUNT; i++)
        if (out[i] != (float)i)
            rc = OFCCL_ERR_CORRUPT;
    res->rc = rc;
    if (rc != 0)
        snprintf(res->msg, sizeof(res->msg), "%s", ofccl_comm_last_error(comm));
    rc = ofccl_comm_destroy(comm);
    if (rc == 0)
        rc = ofccl_ctx_destroy(ctx);
    if (rc != 0 && res->rc == 0) {
        res->step = 4;
        res->rc = rc;
    } else if (res->rc == 0) {
        res->step = 0;
    }
}

static int rank_main(int rank, const int *ports)
{
    struct rlimit rl;

    for (int k = 0; k < ROUNDS; k++) {
        getrlimit(RLIMIT_AS, &rl);
        rl.rlim_cur = (rlim_t)(vm_bytes() + ((unsigned long long)headroom_mib[k] << 20));
        setrlimit(RLIMIT_AS, &rl);
        one_job(rank, ports[k], 3000, &sh->round[k][rank]);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_AS, &rl);
    }
    /* The limit raised again: the same process must work as before. */
    one_job(rank, ports[ROUNDS], 20000, &sh->after[rank]);
    return 0;
}

/* A code a rank may get when it, or its peer, ran out. */
static bool clean_failure(const struct result *r)
{
    if (r->rc == OFCCL_ERR_RESOURCE)
        return strstr(r->msg, "RLIMIT_AS") != NULL;
    return r->rc == OFCCL_ERR_NO_MEMORY || r->rc == OFCCL_ERR_BOOTSTRAP ||
           r->rc == OFCCL_ERR_TIMEOUT || r->rc == OFCCL_ERR_REMOTE_ERROR;
}

static void test_aslimit(void)
{
    int ports[ROUNDS + 1], st[2], limited = 0;
    pid_t pid[2];
    double deadline = now_s() + 240;

    memset(sh, 0, sizeof(*sh));
    for (int k = 0; k <= ROUNDS; k++) /* distinct, so a late rank never joins the next job */
        do
            ports[k] = free_port();
        while (k > 0 && ports[k] == ports[k - 1]);
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            exit(rank_main(r, ports));
    }
    for (int r = 0; r < 2; r++) {
        st[r] = -1;
        while (now_s() < deadline && waitpid(pid[r], &st[r], WNOHANG) != pid[r])
            usleep(20000);
        if (now_s() >= deadline) { /* bounded */
            kill(pid[r], SIGKILL);
            waitpid(pid[r], &st[r], 0);
        }
        CU_ASSERT_TRUE(exited_ok(st[r])); /* no crash in any round */
        if (WIFSIGNALED(st[r]))
            remove_shm_of(pid[r]);
    }
    for (int k = 0; k < ROUNDS; k++)
        for (int r = 0; r < 2; r++) {
            const struct result *res = &sh->round[k][r];
            if (res->step == 0)
                continue;
            printf("+%d MiB rank %d: step %d: %s: %s\n", headroom_mib[k], r, res->step,
                   ofccl_strerror(res->rc), res->msg);
            CU_ASSERT_TRUE(clean_failure(res));
            limited += res->rc == OFCCL_ERR_RESOURCE || res->rc == OFCCL_ERR_NO_MEMORY;
        }
    /* The limits were tight enough to matter, and the rounds stopped there. */
    CU_ASSERT_TRUE(limited > 0);
    for (int r = 0; r < 2; r++) {
        if (sh->after[r].step != 0)
            printf("limit raised, rank %d: step %d: %s: %s\n", r, sh->after[r].step,
                   ofccl_strerror(sh->after[r].rc), sh->after[r].msg);
        CU_ASSERT_EQUAL(sh->after[r].step, 0);
        CU_ASSERT_EQUAL(sh->after[r].rc, 0);
    }
}

/* ---- communicators created in a loop under a limit ---- */
#define MAX_COMMS 64
/* Room under the limit: a few communicators' worth (local ones are small). */
static int loop_room_mib(void)
{
    return strcmp(provider, "local") == 0 ? 32 : 200;
}

struct loop_result {
    int made, rc, destroy_rc;
    char msg[512];
};
static struct loop_result *loop_res;

static int loop_main(int rank, int port)
{
    char root[64], rk[32], prov[64];
    const char *settings[] = {root, rk, "BOOT_SIZE=2", prov, "BOOT_TIMEOUT_MS=3000", NULL};
    struct loop_result *res = &loop_res[rank];
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = res->msg, .errlen = sizeof(res->msg)};
    static ofccl_comm_t *comms[MAX_COMMS];
    ofccl_ctx_t *ctx;
    struct rlimit rl;
    float in[64] = {0}, out[128];

    snprintf(root, sizeof(root), "BOOT_ROOT=127.0.0.1:%d", port);
    snprintf(rk, sizeof(rk), "BOOT_RANK=%d", rank);
    snprintf(prov, sizeof(prov), "PROVIDER=%s", provider);
    if ((res->rc = ofccl_ctx_create(&p, &ctx)) != 0)
        return 1;
    getrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = (rlim_t)(vm_bytes() + ((unsigned long long)loop_room_mib() << 20));
    setrlimit(RLIMIT_AS, &rl);
    for (res->made = 0; res->made < MAX_COMMS; res->made++) {
        ofccl_comm_t **c = &comms[res->made];
        ofccl_req_t *req;

        res->rc = ofccl_comm_world(ctx, c);
        if (res->rc != 0) {
            snprintf(res->msg, sizeof(res->msg), "%s", ofccl_ctx_last_error(ctx));
            break;
        }
        ofccl_comm_set_timeout(*c, 3000);
        res->rc = ofccl_allgather(*c, in, out, 64, OFCCL_F32, &req);
        if (res->rc == 0) {
            res->rc = ofccl_wait(req);
            ofccl_req_free(req);
        }
        if (res->rc != 0) {
            snprintf(res->msg, sizeof(res->msg), "%s", ofccl_comm_last_error(*c));
            res->made++; /* it exists: destroyed below */
            break;
        }
    }
    /* Destroy works whatever happened, newest first. */
    for (int k = res->made - 1; k >= 0; k--)
        if (res->destroy_rc == 0)
            res->destroy_rc = ofccl_comm_destroy(comms[k]);
    if (res->destroy_rc == 0)
        res->destroy_rc = ofccl_ctx_destroy(ctx);
    return 0;
}

static void test_comm_loop(void)
{
    int port = free_port(), st[2], ran_out = 0;
    pid_t pid[2];
    double deadline = now_s() + 120;

    memset(loop_res, 0, 2 * sizeof(*loop_res));
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            exit(loop_main(r, port));
    }
    for (int r = 0; r < 2; r++) {
        st[r] = -1;
        while (now_s() < deadline && waitpid(pid[r], &st[r], WNOHANG) != pid[r])
            usleep(20000);
        if (now_s() >= deadline) { /* bounded */
            kill(pid[r], SIGKILL);
            waitpid(pid[r], &st[r], 0);
        }
        if (WIFSIGNALED(st[r]))
            remove_shm_of(pid[r]);
    }
    for (int r = 0; r < 2; r++) {
        const struct loop_result *res = &loop_res[r];
        printf("rank %d: %d communicator(s) within %d MiB, then %s: %s; destroy: %d\n", r,
               res->made, loop_room_mib(), ofccl_strerror(res->rc), res->msg, res->destroy_rc);
        CU_ASSERT_TRUE(exited_ok(st[r]));
        CU_ASSERT_TRUE(res->made >= 1 && res->made < MAX_COMMS);
        /* Its own limit, or (after the peer ran out first) the peer's absence. */
        CU_ASSERT_TRUE(res->rc == OFCCL_ERR_RESOURCE || res->rc == OFCCL_ERR_NO_MEMORY ||
                       res->rc == OFCCL_ERR_BOOTSTRAP || res->rc == OFCCL_ERR_TIMEOUT ||
                       res->rc == OFCCL_ERR_REMOTE_ERROR);
        CU_ASSERT_EQUAL(res->destroy_rc, 0);
        if (res->rc == OFCCL_ERR_RESOURCE || res->rc == OFCCL_ERR_NO_MEMORY) {
            ran_out++;
            /* The estimate against the limits, named. */
            CU_ASSERT_PTR_NOT_NULL(strstr(res->msg, "RLIMIT_AS"));
            CU_ASSERT_PTR_NOT_NULL(strstr(res->msg, "MemAvailable"));
        }
    }
    CU_ASSERT_TRUE(ran_out > 0);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"RLIMIT_AS: clean errors, then a working communicator", test_aslimit},
        {"communicators in a loop under RLIMIT_AS: a clean error, all destroyed", test_comm_loop},
        {NULL, NULL},
    };

    (void)run;
    (void)exits_seen_at_once;
    (void)on_local;
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer reserves terabytes of shadow address space. */
    (void)argc;
    (void)argv;
    (void)tests;
    printf("aslimit: skipped: an address-space limit cannot be tested under AddressSanitizer\n");
    return 77;
#endif
    if (argc > 1)
        provider = argv[1];
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    loop_res = mmap(NULL, 2 * sizeof(*loop_res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
    if (sh == MAP_FAILED || loop_res == MAP_FAILED)
        return 2;
    return cu_run("aslimit", tests);
}
