/*
 * What every rank completed stays completed (docs/reliability.md): a failure
 * notice about a later collective, or a peer that dies after it, never turns
 * a barrier or a collective that had all it needs into an error on one rank.
 *
 * mismatch: rounds on a fresh communicator each (split off the world), with
 *   random delays on every rank: a barrier, an all-gather, then a collective
 *   whose arguments differ on one rank (eleven kinds, below). Every rank's
 *   barrier and all-gather must succeed, the all-gather's result checked
 *   element by element (waited before the mismatched post or after it, as
 *   each rank draws), and every rank must get MISMATCH from the mismatched
 *   collective, from its post or its wait.
 * kill: a barrier and an all-gather, then a victim drawn from the shared seed
 *   SIGKILLs itself right after its barrier or its all-gather returned. The
 *   survivors' barrier and all-gather must succeed (checked element by
 *   element; one survivor's next collective finds the victim gone first and
 *   tells the others before they wait), and a later all-gather must fail
 *   naming the victim.
 *
 * Usage:
 *   test_settled pmix mismatch ROUNDS    under mpirun: the job from PMIx, the
 *                                        transport from OFCCL_PROVIDER
 *   test_settled pmix kill               under mpirun --enable-recovery (one
 *                                        victim per launch); prints "rank N: ok"
 *   test_settled fork PROVIDER NRANKS mismatch|kill ROUNDS
 *                                        ranks forked here and joined through
 *                                        the TCP rendezvous (kill: ROUNDS jobs)
 * The seed is OFCCL_TEST_SEED or the time; each run prints it.
 */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "forkrun.h"

#define N 8192       /* elements per rank of the large kinds: 32 KiB, above the eager size */
#define SMALL 16     /* eager-sized */
#define MAXR 8       /* ranks at most */
#define LATE_MS 1500 /* the deadline of the kill scenario (tcp may see no death) */

enum kind {
    K_COUNT,       /* all-gather, n against n + 1 elements */
    K_COUNT_EAGER, /* the same on the eager path */
    K_PATH,        /* eager-sized against descriptor-sized */
    K_DTYPE,       /* f32 against bf16 */
    K_REDOP,       /* reduce-scatter, sum against average */
    K_SCALAR,      /* premul scalar 0.5 against 0.25 */
    K_OPERATION,   /* all-gather against reduce-scatter */
    K_LAYOUT,      /* bucket of 3000 + 5000 elements against 5000 + 3000 */
    K_TENSORS,     /* bucket of 2 tensors against 3 */
    K_CALL,        /* bucket against a flat all-gather */
    K_ROOT,        /* broadcast: rank 0 names root 1, the others root 0 */
    KINDS
};
static const char *const kind_name[KINDS] = {
    "count",     "count (eager)", "path",           "dtype", "reduction op", "premul scalar",
    "operation", "bucket layout", "bucket tensors", "call",  "root"};

static unsigned long long seed;
static int mode_rounds = 4;
static float *sendb, *recvb, *full[3], *shard[3];

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

/* Drawn alike on every rank: round k's kind and victim. */
static uint64_t shared(unsigned round, unsigned what)
{
    return mix(seed ^ (uint64_t)round << 20 ^ what);
}

/* Drawn per rank: delays and waiting orders. */
static uint64_t mine(int rank, unsigned round, unsigned what)
{
    return mix(seed * 31 ^ (uint64_t)rank << 40 ^ (uint64_t)round << 20 ^ what ^ 0x5bd1e995u);
}

static void pause_us(uint64_t r, unsigned max_us)
{
    usleep((useconds_t)(r % max_us));
}

static float value_of(int rank, size_t i)
{
    return (float)((rank * 131 + (int)(i % 997)) % 1000);
}

/* The all-gather every round runs before the mismatched collective. */
static int gather_post(ofccl_comm_t *c, int rank, ofccl_req_t **req)
{
    for (size_t i = 0; i < N; i++)
        sendb[i] = value_of(rank, i);
    memset(recvb, 0xff, sizeof(float) * N * MAXR);
    return ofccl_allgather(c, sendb, recvb, N, OFCCL_F32, req);
}

static int gather_check(int size, int rank, const char *what)
{
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < N; i++)
            if (recvb[(size_t)r * N + i] != value_of(r, i)) {
                printf("rank %d: %s: element %zu of rank %d is %g, %g expected\n", rank, what, i, r,
                       (double)recvb[(size_t)r * N + i], (double)value_of(r, i));
                return 1;
            }
    return 0;
}

/* Post the collective of kind k, with this rank's side of the difference. */
static int post_mismatched(ofccl_comm_t *c, int rank, int size, int k, ofccl_req_t **req)
{
    int odd = rank == size - 1;
    ofccl_redop_t sum = {OFCCL_OP_SUM, 1};
    ofccl_tensor_t t[3];
    size_t c3000 = odd ? 5000 : 3000, c5000 = odd ? 3000 : 5000;

    for (int i = 0; i < 3; i++)
        t[i] = (ofccl_tensor_t){i == 0 ? c3000 : c5000, full[i], shard[i]};
    switch (k) {
    case K_COUNT:
        return ofccl_allgather(c, sendb, recvb, odd ? N - 1 : N, OFCCL_F32, req);
    case K_COUNT_EAGER:
        return ofccl_allgather(c, sendb, recvb, odd ? SMALL + 1 : SMALL, OFCCL_F32, req);
    case K_PATH:
        return ofccl_allgather(c, sendb, recvb, odd ? N : SMALL, OFCCL_F32, req);
    case K_DTYPE:
        return ofccl_allgather(c, sendb, recvb, N, odd ? OFCCL_BF16 : OFCCL_F32, req);
    case K_REDOP:
        return ofccl_reduce_scatter(c, recvb, sendb, N, OFCCL_F32,
                                    (ofccl_redop_t){odd ? OFCCL_OP_AVG : OFCCL_OP_SUM, 1}, req);
    case K_SCALAR:
        return ofccl_reduce_scatter(c, recvb, sendb, N, OFCCL_F32,
                                    (ofccl_redop_t){OFCCL_OP_PREMUL_SUM, odd ? 0.25 : 0.5}, req);
    case K_OPERATION:
        return odd ? ofccl_reduce_scatter(c, recvb, sendb, N, OFCCL_F32, sum, req)
                   : ofccl_allgather(c, sendb, recvb, N, OFCCL_F32, req);
    case K_LAYOUT:
        return ofccl_bucket_allgather(c, t, 2, OFCCL_F32, req);
    case K_TENSORS:
        t[0].count = t[1].count = 3000;
        return ofccl_bucket_allgather(c, t, odd ? 3 : 2, OFCCL_F32, req);
    case K_CALL:
        t[0].count = (size_t)N * (size_t)size;
        return odd ? ofccl_allgather(c, sendb, recvb, N, OFCCL_F32, req)
                   : ofccl_bucket_allgather(c, t, 1, OFCCL_F32, req);
    default: /* K_ROOT: rank 0 waits for rank 1 and rank 1 for rank 0, both see it */
        return ofccl_broadcast(c, recvb, SMALL, OFCCL_F32, rank == 0 ? 1 : 0, req);
    }
}

/* One round of the mismatch scenario on a fresh communicator: 0 when every
 * expectation held on this rank. */
static int mismatch_round(ofccl_comm_t *world, int rank, unsigned round)
{
    /* Every kind once in each KINDS rounds, from a place the seed draws. */
    int k = (int)((round + shared(0, 1)) % KINDS), size, rc, bad = 0;
    bool wait_first = mine(rank, round, 2) % 2 == 0;
    ofccl_comm_t *c = NULL;
    ofccl_req_t *ag = NULL, *mm = NULL;
    double t0;

    if (ofccl_comm_split(world, 0, rank, &c) != 0) {
        printf("rank %d round %u: split: %s\n", rank, round, ofccl_comm_last_error(world));
        return 1;
    }
    ofccl_comm_size(c, &size);
    ofccl_comm_set_timeout(c, 20000);
    pause_us(mine(rank, round, 3), 3000);
    if ((rc = ofccl_barrier(c)) != 0) {
        printf("rank %d round %u (%s): barrier: %s: %s\n", rank, round, kind_name[k],
               ofccl_strerror(rc), ofccl_comm_last_error(c));
        bad = 1;
    }
    if ((rc = gather_post(c, rank, &ag)) != 0) {
        printf("rank %d round %u: all-gather post: %s\n", rank, round, ofccl_strerror(rc));
        ofccl_comm_destroy(c);
        return 1;
    }
    if (wait_first) {
        rc = ofccl_wait(ag);
        bad |= rc != 0 || gather_check(size, rank, "all-gather");
        if (rc != 0)
            printf("rank %d round %u (%s): all-gather: %s: %s\n", rank, round, kind_name[k],
                   ofccl_strerror(rc), ofccl_comm_last_error(c));
    }
    pause_us(mine(rank, round, 4), 2000);
    t0 = now_s();
    rc = post_mismatched(c, rank, size, k, &mm);
    if (rc == 0) {
        rc = ofccl_wait(mm);
        ofccl_req_free(mm);
    }
    if (now_s() - t0 > 0.5) /* reported, not asserted: a loaded machine is slow */
        printf("rank %d round %u (%s): the mismatch took %.2f s to report\n", rank, round,
               kind_name[k], now_s() - t0);
    if (rc != OFCCL_ERR_MISMATCH) {
        printf("rank %d round %u (%s): mismatched collective: %s: %s\n", rank, round, kind_name[k],
               ofccl_strerror(rc), ofccl_comm_last_error(c));
        bad = 1;
    }
    if (!wait_first) {
        rc = ofccl_wait(ag);
        bad |= rc != 0 || gather_check(size, rank, "all-gather waited after the mismatch");
        if (rc != 0)
            printf("rank %d round %u (%s): all-gather waited after the mismatch: %s: %s\n", rank,
                   round, kind_name[k], ofccl_strerror(rc), ofccl_comm_last_error(c));
    }
    ofccl_req_free(ag);
    if (ofccl_comm_destroy(c) != 0)
        bad = 1;
    return bad;
}

static int mismatch_rounds(int rank, ofccl_comm_t *world)
{
    int bad = 0;

    for (int k = 0; k < mode_rounds; k++)
        bad |= mismatch_round(world, rank, (unsigned)k);
    /* The world is untouched by its children's failures. */
    if (ofccl_barrier(world) != 0)
        bad = 1;
    return bad;
}

/* Does `msg` name rank v: "rank v " or "rank v)" or a range "ranks a-b" around it? */
static bool names_rank(const char *msg, int v)
{
    char one[32], two[32];

    snprintf(one, sizeof(one), "rank %d ", v);
    snprintf(two, sizeof(two), "rank %d)", v);
    if (strstr(msg, one) != NULL || strstr(msg, two) != NULL)
        return true;
    for (const char *at = strstr(msg, "ranks "); at != NULL; at = strstr(at + 1, "ranks ")) {
        int a, b;
        if (sscanf(at, "ranks %d-%d", &a, &b) == 2 && a <= v && v <= b)
            return true;
    }
    return false;
}

/* The victim, as it leaves: stop the survivors but `fast` (local transport
 * only: its writes are stores into the peers' memory, so nothing the victim
 * wrote can be lost with it; on a libfabric provider a message a stopped rank
 * had not read yet may go with its sender), leave a helper that lets them go
 * on 60-100 ms later, and die. */
static void leave(int size, int victim, int fast, const int64_t *pids, bool stop, uint64_t r)
{
    if (stop) {
        for (int p = 0; p < size; p++)
            if (p != victim && p != fast)
                kill((pid_t)pids[p], SIGSTOP);
        if (fork() == 0) {
            usleep(60000 + (useconds_t)(r % 40000));
            for (int p = 0; p < size; p++)
                if (p != victim && p != fast)
                    kill((pid_t)pids[p], SIGCONT);
            _exit(0);
        }
    }
    raise(SIGKILL);
}

/* The kill scenario: a victim drawn from the seed dies right after its barrier
 * or its all-gather returned. The first survivor ("fast") goes on at once,
 * finds the victim gone in its next collective and tells the others; they
 * are stopped meanwhile (local) or wait 10-40 ms (elsewhere) before they look
 * at the barrier or all-gather the victim completed, so that news comes
 * first. 0 when every expectation held on this survivor. */
static int kill_round(ofccl_ctx_t *ctx, ofccl_comm_t *c, int rank, unsigned round)
{
    int size, victim, fast, after_gather, rc, bad = 0;
    bool stop = strcmp(ofccl_ctx_provider(ctx), "local") == 0;
    ofccl_comm_t *alive = NULL;
    ofccl_req_t *ag = NULL, *late = NULL;
    int64_t pid = getpid(), pids[MAXR];

    ofccl_comm_size(c, &size);
    victim = (int)(shared(round, 5) % (uint64_t)size);
    fast = victim == 0 ? 1 : 0;
    after_gather = (int)(shared(round, 6) % 2);
    /* The survivors' own communicator: none leaves before all are through
     * (one that left would be a second departure for the others). */
    if (ofccl_comm_split(c, rank == victim ? OFCCL_UNDEFINED : 0, rank, &alive) != 0)
        return 1;
    ofccl_comm_set_timeout(c, LATE_MS);
    if (ofccl_allgather(c, &pid, pids, sizeof(pid), OFCCL_U8, &ag) != 0 || ofccl_wait(ag) != 0)
        return 1;
    ofccl_req_free(ag);
    pause_us(mine(rank, round, 7), 3000);
    if ((rc = ofccl_barrier(c)) != 0) {
        printf("rank %d round %u: barrier: %s: %s\n", rank, round, ofccl_strerror(rc),
               ofccl_comm_last_error(c));
        bad = 1;
    }
    if (rank == victim && !after_gather)
        leave(size, victim, fast, pids, stop, mine(rank, round, 9));
    /* Refused at once where the news of the victim came first: fine after
     * its barrier (this all-gather cannot complete), not after its all-gather
     * (every rank had posted it). */
    if ((rc = gather_post(c, rank, &ag)) != 0) {
        printf("rank %d round %u: all-gather post: %s: %s\n", rank, round, ofccl_strerror(rc),
               ofccl_comm_last_error(c));
        bad |= rank == victim || after_gather;
        ag = NULL;
    }
    if (rank == victim) {
        if (ofccl_wait(ag) == 0)
            leave(size, victim, fast, pids, stop, mine(rank, round, 9));
        printf("rank %d round %u: the victim's all-gather failed\n", rank, round);
        return 1;
    }
    if (rank == fast) { /* the next collective first: it needs the victim */
        rc = gather_post(c, rank, &late);
        if (rc == 0)
            rc = ofccl_wait(late);
    } else if (!stop) {
        usleep(10000 + (useconds_t)(mine(rank, round, 8) % 30000));
    }
    if (ag != NULL) {
        int arc = ofccl_wait(ag);
        if (after_gather) {
            bad |= arc != 0 || gather_check(size, rank, "all-gather the victim completed");
            if (arc != 0)
                printf("rank %d round %u: all-gather the victim completed: %s: %s\n", rank, round,
                       ofccl_strerror(arc), ofccl_comm_last_error(c));
        } else {
            bad |= arc == 0; /* the victim died after its barrier: this one cannot complete */
        }
        ofccl_req_free(ag);
    }
    if (rank != fast) {
        rc = gather_post(c, rank, &late);
        if (rc == 0)
            rc = ofccl_wait(late);
    }
    if (late != NULL)
        ofccl_req_free(late);
    if ((rc != OFCCL_ERR_REMOTE_ERROR && rc != OFCCL_ERR_TIMEOUT) ||
        !names_rank(ofccl_comm_last_error(c), victim)) {
        printf("rank %d round %u: the collective after rank %d died: %s: %s\n", rank, round, victim,
               ofccl_strerror(rc), ofccl_comm_last_error(c));
        bad = 1;
    }
    if ((rc = ofccl_barrier(alive)) != 0) {
        printf("rank %d round %u: the survivors' barrier: %s: %s\n", rank, round,
               ofccl_strerror(rc), ofccl_comm_last_error(alive));
        bad = 1;
    }
    if (ofccl_comm_destroy(alive) != 0)
        bad = 1;
    printf("rank %d round %u: rank %d killed after its %s; %s\n", rank, round, victim,
           after_gather ? "all-gather" : "barrier", bad ? "FAILED" : "as expected");
    return bad;
}

/* ---- the forked job (TCP rendezvous) ---- */
static unsigned fork_round;

static int fork_mismatch(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    return mismatch_rounds(rank, comm);
}

static int fork_kill(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    return kill_round(ctx, comm, rank, fork_round);
}

static void test_fork_mismatch(void)
{
    int st[FORK_MAX];

    run(fork_mismatch, st);
    for (int r = 0; r < nranks; r++)
        CU_ASSERT_TRUE(exited_ok(st[r]));
}

static void test_fork_kill(void)
{
    for (fork_round = 0; fork_round < (unsigned)mode_rounds; fork_round++) {
        int st[FORK_MAX], victim = (int)(shared(fork_round, 5) % (uint64_t)nranks);

        run(fork_kill, st);
        for (int r = 0; r < nranks; r++) {
            if (r == victim)
                CU_ASSERT_TRUE(WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL);
            if (r != victim)
                CU_ASSERT_TRUE(exited_ok(st[r]));
            if (r != victim && !exited_ok(st[r]))
                printf("round %u: rank %d %s %d\n", fork_round, r,
                       WIFSIGNALED(st[r]) ? "killed by signal" : "exited with",
                       WIFSIGNALED(st[r]) ? WTERMSIG(st[r]) : WEXITSTATUS(st[r]));
        }
    }
}

/* ---- under a PMIx launcher ---- */
static int pmix_main(bool kill)
{
    ofccl_ctx_t *ctx = NULL;
    ofccl_comm_t *world = NULL;
    ofccl_req_t *req = NULL;
    int rank = -1, bad;

    if (ofccl_ctx_create(NULL, &ctx) != 0 || ofccl_comm_world(ctx, &world) != 0) {
        fprintf(stderr, "setup: %s\n", ctx ? ofccl_ctx_last_error(ctx) : "no context");
        return 3;
    }
    ofccl_comm_rank(world, &rank);
    /* Every rank draws the kinds and the victim from rank 0's seed. */
    if (ofccl_broadcast(world, &seed, sizeof(seed), OFCCL_U8, 0, &req) != 0 ||
        ofccl_wait(req) != 0) {
        fprintf(stderr, "rank %d: seed broadcast: %s\n", rank, ofccl_comm_last_error(world));
        return 3;
    }
    ofccl_req_free(req);
    if (rank == 0)
        printf("test_settled: seed %llu broadcast from rank 0\n", seed);
    bad = kill ? kill_round(ctx, world, rank, 0) : mismatch_rounds(rank, world);
    if (ofccl_comm_destroy(world) != 0 || ofccl_ctx_destroy(ctx) != 0)
        bad = 1;
    printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
    return bad;
}

int main(int argc, char **argv)
{
    const char *s = getenv("OFCCL_TEST_SEED");
    bool pmix = argc > 2 && strcmp(argv[1], "pmix") == 0;
    bool fork_mode = argc > 5 && strcmp(argv[1], "fork") == 0;
    const char *scenario = pmix ? argv[2] : fork_mode ? argv[4] : "";
    static const cu_test_t mismatch_tests[] = {
        {"barrier and all-gather before a mismatch succeed everywhere", test_fork_mismatch},
        {NULL, NULL}};
    static const cu_test_t kill_tests[] = {
        {"barrier and all-gather a killed peer completed succeed everywhere", test_fork_kill},
        {NULL, NULL}};
    int rc;

    if ((!pmix && !fork_mode) ||
        (strcmp(scenario, "mismatch") != 0 && strcmp(scenario, "kill") != 0)) {
        fprintf(stderr, "usage: test_settled pmix mismatch|kill [ROUNDS]\n"
                        "       test_settled fork PROVIDER NRANKS mismatch|kill ROUNDS\n");
        return 2;
    }
    seed = s != NULL ? strtoull(s, NULL, 10) : (unsigned long long)time(NULL);
    sendb = calloc(N, sizeof(float));
    recvb = calloc((size_t)N * MAXR, sizeof(float));
    for (int i = 0; i < 3; i++) {
        full[i] = calloc((size_t)N * MAXR, sizeof(float));
        shard[i] = calloc(N, sizeof(float));
        if (full[i] == NULL || shard[i] == NULL)
            return 2;
    }
    if (sendb == NULL || recvb == NULL)
        return 2;
    printf("test_settled %s: seed %llu (OFCCL_TEST_SEED replays it)\n", scenario, seed);
    if (pmix) {
        mode_rounds = argc > 3 ? atoi(argv[3]) : mode_rounds;
        rc = pmix_main(strcmp(scenario, "kill") == 0);
    } else {
        provider = argv[2];
        nranks = atoi(argv[3]);
        mode_rounds = atoi(argv[5]);
        if (nranks < 2 || nranks > MAXR || nranks > FORK_MAX)
            return 2;
        rc = cu_run("settled", strcmp(scenario, "kill") == 0 ? kill_tests : mismatch_tests);
    }
    free(sendb);
    free(recvb);
    for (int i = 0; i < 3; i++) {
        free(full[i]);
        free(shard[i]);
    }
    return rc;
}
