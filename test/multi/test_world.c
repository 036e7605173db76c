/*
 * Multi-rank: world communicator, barrier, and rank-to-rank data movement
 * with RMA write-with-data and 64-bit atomic adds. Runs under mpirun (PMIx)
 * or under the TCP bootstrap; the provider and mode come from OFCCL_* variables.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "util.h"
#include "world.h"

#define WORDS 1003 /* odd on purpose: chunks are not aligned to anything */
#define ITERS 3

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v ? atoi(v) : dflt;
}

/* The value rank `r` writes at index `i` in iteration `it`: computed independently
 * by the writer and the checker. */
static uint32_t pattern(int r, int i, int it)
{
    return (uint32_t)r * 2654435761u ^ (uint32_t)i * 40503u ^ (uint32_t)(it + 1) * 97u;
}

static int wait_until(bool (*cond)(void *), void *arg, const char *what)
{
    uint64_t deadline = ofccl__now_ns() + 20000000000ull;

    while (!cond(arg)) {
        int rc = ofccl__comm_progress(comm);
        if (rc) {
            fprintf(stderr, "rank %d: %s: %s\n", rank, what, ofccl_comm_last_error(comm));
            return rc;
        }
        if (ofccl__now_ns() > deadline) {
            fprintf(stderr, "rank %d: %s: timed out\n", rank, what);
            return OFCCL_ERR_TIMEOUT;
        }
    }
    return 0;
}

static void test_world_shape(void)
{
    int r = -1, s = -1, lr = -1, ls = -1;
    int expect_rank = env_int("OMPI_COMM_WORLD_RANK", env_int("OFCCL_BOOT_RANK", -1));
    int expect_size = env_int("OMPI_COMM_WORLD_SIZE", env_int("OFCCL_BOOT_SIZE", -1));

    CU_ASSERT_EQUAL(ofccl_comm_rank(comm, &r), 0);
    CU_ASSERT_EQUAL(ofccl_comm_size(comm, &s), 0);
    CU_ASSERT_EQUAL(ofccl_comm_local_rank(comm, &lr), 0);
    CU_ASSERT_EQUAL(ofccl_comm_local_size(comm, &ls), 0);
    /* Checked against what the launcher itself says, not against ofccl. */
    CU_ASSERT_EQUAL(r, expect_rank);
    CU_ASSERT_EQUAL(s, expect_size);
    CU_ASSERT_TRUE(lr >= 0 && lr < ls && ls <= s);
    CU_ASSERT_EQUAL(ls, s); /* every test rank runs on this host */
    CU_ASSERT_EQUAL(ofccl_comm_rank(comm, NULL), OFCCL_ERR_INVALID_ARG);
}

/* Round i: every rank adds 1 to a word of every peer, then enters the barrier.
 * Leaving barrier i with fewer than (size-1)*(i+1) adds would mean the barrier
 * let a rank through before all peers had arrived. */
static void test_barrier_and_atomics(void)
{
    const int rounds = 20;

    for (int i = 0; i < rounds; i++) {
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            int rc;
            do {
                ofccl__err_t e;
                rc = ofccl__ep_atomic_add(comm->ep, p, 1, &comm->peer_ctrl[p],
                                          OFCCL__CTRL_TEST * sizeof(uint64_t),
                                          &ofccl__comm_op_plain, &e);
                if (rc == OFCCL_ERR_AGAIN)
                    ofccl__comm_progress(comm);
            } while (rc == OFCCL_ERR_AGAIN);
            CU_ASSERT_EQUAL_FATAL(rc, 0);
            comm->ops_pending++;
        }
        /* Our adds are applied at the target once complete (delivery complete). */
        CU_ASSERT_EQUAL_FATAL(ofccl__comm_quiesce(comm, ofccl__now_ns() + 20000000000ull, "adds"),
                              0);
        CU_ASSERT_EQUAL_FATAL(ofccl_barrier(comm), 0);
        uint64_t got = atomic_load(&comm->ctrl[OFCCL__CTRL_TEST]);
        if (got != (uint64_t)(size - 1) * (uint64_t)(i + 1))
            fprintf(stderr, "rank %d: round %d: counter %llu, expected %llu\n", rank, i,
                    (unsigned long long)got, (unsigned long long)(size - 1) * (i + 1));
        CU_ASSERT_EQUAL(got, (uint64_t)(size - 1) * (uint64_t)(i + 1));
        /* Nobody starts the next round's adds before everyone has read this one. */
        CU_ASSERT_EQUAL_FATAL(ofccl_barrier(comm), 0);
    }
}

static uint64_t arrivals[64];

static void count_arrival(void *arg, uint32_t payload)
{
    (void)arg;
    if (payload < 64)
        arrivals[payload]++;
}

static bool all_arrived(void *arg)
{
    uint64_t want = *(uint64_t *)arg;
    for (int p = 0; p < size; p++)
        if (p != rank && arrivals[p] < want)
            return false;
    return comm->ops_pending == 0;
}

static void test_writedata(void)
{
    size_t chunk = WORDS * sizeof(uint32_t);
    uint32_t *src = aligned_alloc(64, 4096 * ((chunk + 4095) / 4096));
    uint32_t *win_buf = aligned_alloc(4096, 4096 * ((chunk * (size_t)size + 4095) / 4096));
    ofccl__win_t *win = NULL;
    ofccl__mr_t *src_mr = NULL;
    ofccl__err_t e;

    CU_ASSERT_FATAL(src != NULL && win_buf != NULL && size <= 64);
    memset(win_buf, 0xEE, chunk * (size_t)size); /* poison */
    memset(arrivals, 0, sizeof(arrivals));
    ofccl__comm_set_sink(comm, OFCCL__SIG_TEST, count_arrival, NULL);
    CU_ASSERT_EQUAL_FATAL(
        ofccl__win_create(comm, win_buf, chunk * (size_t)size, OFCCL__ACC_REMOTE_WRITE, &win), 0);
    /* Strict mode demands registered sources, as verbs does. */
    CU_ASSERT_EQUAL_FATAL(ofccl__mr_reg(comm->ep, src, chunk, OFCCL__ACC_LOCAL, &src_mr, &e), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), OFCCL_ERR_BUSY); /* window still open */

    for (int it = 0; it < ITERS; it++) {
        uint64_t want = (uint64_t)it + 1;

        for (int i = 0; i < WORDS; i++)
            src[i] = pattern(rank, i, it);
        for (int p = 0; p < size; p++) {
            int rc;
            if (p == rank)
                continue;
            do {
                rc = ofccl__ep_writedata(
                    comm->ep, p, src, chunk, src_mr, &win->peers[p], (uint64_t)rank * chunk,
                    ofccl__sig_encode(OFCCL__SIG_TEST, comm->id, (uint32_t)rank),
                    &ofccl__comm_op_plain, &e);
                if (rc == OFCCL_ERR_AGAIN)
                    ofccl__comm_progress(comm);
            } while (rc == OFCCL_ERR_AGAIN);
            CU_ASSERT_EQUAL_FATAL(rc, 0);
            comm->ops_pending++;
        }
        CU_ASSERT_EQUAL_FATAL(wait_until(all_arrived, &want, "writedata"), 0);
        /* Exactly one signal per peer per iteration: none lost, none duplicated. */
        for (int p = 0; p < size; p++)
            if (p != rank)
                CU_ASSERT_EQUAL(arrivals[p], want);
        for (int p = 0; p < size; p++) {
            int wrong = 0;
            if (p == rank)
                continue;
            for (int i = 0; i < WORDS; i++) {
                uint32_t got = win_buf[(size_t)p * WORDS + (size_t)i];
                if (got != pattern(p, i, it) && wrong++ < 3)
                    fprintf(stderr, "rank %d: from %d, iteration %d, [%d] = 0x%x, want 0x%x\n",
                            rank, p, it, i, got, pattern(p, i, it));
            }
            CU_ASSERT_EQUAL(wrong, 0);
        }
        /* Nobody overwrites a window before its owner has checked it. */
        CU_ASSERT_EQUAL_FATAL(ofccl_barrier(comm), 0);
    }
    CU_ASSERT_EQUAL(comm->corrupt_signals, 0);
    CU_ASSERT_EQUAL(ofccl__mr_dereg(src_mr), 0);
    CU_ASSERT_EQUAL(ofccl__win_destroy(win), 0);
    ofccl__comm_set_sink(comm, OFCCL__SIG_TEST, NULL, NULL);
    free(src);
    free(win_buf);
}

/* A window on a sub-communicator: its keys travel over that communicator, so
 * every rank sees exactly its members' regions (each rank registers a length
 * of its own, 4 KiB times one more than its world rank). */
static void test_window_on_split(void)
{
    int color = rank % 2, subrank = -1, subsize = 0;
    size_t mine = 4096 * (size_t)(rank + 1);
    ofccl_comm_t *sub = NULL;
    ofccl__win_t *win = NULL;
    void *buf = aligned_alloc(4096, mine);

    CU_ASSERT_FATAL(buf != NULL);
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_split(comm, color, rank, &sub), 0);
    ofccl_comm_rank(sub, &subrank);
    ofccl_comm_size(sub, &subsize);
    CU_ASSERT_EQUAL(subsize, (size - color + 1) / 2);
    CU_ASSERT_EQUAL_FATAL(ofccl__win_create(sub, buf, mine, OFCCL__ACC_REMOTE_WRITE, &win), 0);
    for (int r = 0; r < subsize; r++) {
        int world_rank = 2 * r + color; /* split ordered by key = world rank */
        CU_ASSERT_EQUAL(win->peers[r].len, 4096 * (uint64_t)(world_rank + 1));
    }
    CU_ASSERT_EQUAL(win->peers[subrank].key, win->mr->key);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(sub), OFCCL_ERR_BUSY); /* window still open */
    CU_ASSERT_EQUAL(ofccl__win_destroy(win), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(sub), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(sub), 0);
    free(buf);
}

/* A second context in the same process, with a different signal path, works
 * alongside the first. */
static void test_two_contexts(void)
{
    const char *const settings[] = {"SIGNAL=atomic", NULL};
    char err[512] = "";
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx2 = NULL;
    ofccl_comm_t *comm2 = NULL;

    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_create(&p, &ctx2), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_world(ctx2, &comm2), 0);
    CU_ASSERT_EQUAL(comm2->signal_mode, OFCCL__SIGNAL_ATOMIC);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(ofccl_barrier(comm2), 0);
        CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    }
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx2), OFCCL_ERR_BUSY);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_ctx_last_error(ctx2), "still open"));
    CU_ASSERT_EQUAL(ofccl_barrier(comm2), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm2), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx2), 0);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"world shape matches the launcher", test_world_shape},
        {"barrier and atomic adds", test_barrier_and_atomics},
        {"write with data, element by element", test_writedata},
        {"window on a sub-communicator", test_window_on_split},
        {"two contexts in one process", test_two_contexts},
        {NULL, NULL},
    };
    int rc;

    if (world_open(NULL) != 0)
        return 1;
    /* The tests below post to every peer through the endpoint itself, below
     * the collectives that resolve peers on first use (OFCCL_BOOT_EXCHANGE). */
    for (int peer = 0; peer < size; peer++)
        if (ofccl__comm_resolve(comm, peer) != 0) {
            fprintf(stderr, "rank %d: resolving peer %d: %s\n", rank, peer,
                    ofccl_comm_last_error(comm));
            return 1;
        }
    if (rank == 0)
        printf("world: %d ranks, provider %s, signals %s\n", size, ofccl_ctx_provider(ctx),
               comm->signal_mode == OFCCL__SIGNAL_CQDATA ? "cqdata" : "atomic");
    rc = cu_run("world", tests);
    if (world_close(true) != 0)
        rc = 1;
    return rc;
}
