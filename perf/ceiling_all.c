/*
 * ceiling_all: what each of N cores can do with memory while all N work at
 * once, the ceiling of an N-rank collective on one host.
 *   - copy: each process copies a block of the size into a buffer of its own
 *     (512 KiB memcpy calls, ofccl's default chunk), bytes copied per second
 *     per process: the bound of a shared-memory all-gather, whose every
 *     received byte is copied once;
 *   - read: each process streams through a buffer of the size, summing it
 *     (64-bit integer lanes, vectorised), bytes read per second per process: the bound of a
 *     multi-input reduce-scatter, which reads each input byte once;
 *   - peer read: the same sum, but over the reduce-scatter's own access pattern: every
 *     process owns (wrote) a buffer of the size in shared memory, and process i reads
 *     block i (size/N bytes) of every process's buffer, 2 KiB from each in turn, as the
 *     reduction kernel does: reads of memory other cores wrote, from N streams at once;
 *   - reduce: that very work done by ofccl's own f32 sum kernel (ofccl__reduce, the one
 *     the reduce-scatter runs), block i of every process's buffer summed into an output
 *     of its own, input bytes per second: not a property of the machine but of the kernel
 *     on it, so a reduce-scatter's ratio to it is the share the rest of the engine
 *     (meeting the peers, taking grains, the synchronisation) leaves;
 *   - reduce sync: the same, with a spinning barrier after each pass, round after round:
 *     every pass ends when the slowest process is through, as a collective does (its
 *     median is every process's rate, the slowest one's);
 *   - tcp: loopback TCP in a ring, each process sending a block of the size to the next
 *     while it receives one from the previous (non-blocking, spinning), bytes received per
 *     second per process: the reference for a collective over the tcp provider on one
 *     host, whose every byte goes through the kernel's copy out of the sender and its copy
 *     into the receiver, both on the ranks' own cores. Not a strict bound: a collective
 *     whose sends come from cache (a block sent to every peer) can pass it;
 *   - tcp mesh: the direct all-gather's pattern over loopback TCP with no protocol: each
 *     process sends its block (size/N) to every other over a connection of its own and
 *     receives theirs, then all meet at a spinning barrier, round after round; the N - 1
 *     blocks received per second per process, comparable with a tcp all-gather's bus
 *     bandwidth: what the machine does with a collective's synchronised rounds, where the
 *     ring streams (ceiling_tcp.c);
 *   - exchange: the direct all-gather's copies with no protocol: each process copies its
 *     block (size/N) into its place in every other process's buffer in shared memory and
 *     in its own (an out-of-place all-gather's), then all meet at a spinning barrier,
 *     round after round; the N - 1 blocks for the others per second per process,
 *     comparable with an all-gather's bus bandwidth. Like reduce, it is what the machine
 *     does with the collective's own pattern, writes into memory other cores use
 *     included, so an all-gather's ratio to it is the share the rest of the engine leaves.
 * Besides the median over processes, each kind's slowest process is reported: a
 * collective in which every rank waits for every other ends with its slowest rank.
 * The N processes are forked, pinned to cpus 0..N-1 (or the -p list), and
 * start each timed round together at a barrier in shared memory; each round
 * repeats the work for at least -t ms; the figure is the median over
 * processes of each one's best of 3 rounds.
 *
 *   ceiling_all -n 16 [-b 1M] [-e 64M] [-f 4] [-t 100] [-C out.csv]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ceiling_tcp.h"
#include "perfutil.h"
#include "reduce.h"

#define CHUNK (512u << 10)
#define ROUNDS 3
#define MAXN CEIL_TCP_MAXN
#define XCH_BYTES (512u << 20) /* copied per process per exchange round, at least 3 */
#define TCP_BYTES (256u << 20) /* received per process per tcp round (ring, mesh), at least 3 */
#define PIECE 2048             /* bytes read from one source before the next, as ofccl's kernel */

/* The columns, in order; the first four are timed by one loop in child(). */
enum { K_COPY, K_READ, K_PEER_READ, K_REDUCE, K_REDUCE_SYNC, K_TCP, K_MESH, K_EXCHANGE, KINDS };

typedef struct shared {
    pthread_barrier_t bar;
    _Atomic unsigned arrived, gen; /* the spinning barrier of the exchange and the mesh */
    int n;
    double rate[KINDS][MAXN]; /* per process, one column per kind */
} shared_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void copy_block(char *dst, const char *src, size_t n)
{
    for (size_t off = 0; off < n; off += CHUNK)
        memcpy(dst + off, src + off, n - off < CHUNK ? n - off : CHUNK);
}

/* Integer sums: exact, reorderable, so the compiler vectorises them and the
 * loop is bound by memory, not by add latency. */
static uint64_t read_block(const uint64_t *a, size_t n)
{
    uint64_t lane[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += a[i + k];
    uint64_t s = 0;
    for (int k = 0; k < 8; k++)
        s += lane[k];
    for (; i < n; i++)
        s += a[i];
    return s;
}

/* Block `me` of each of the n buffers of `bytes` at `all`, PIECE bytes from
 * each source in turn. */
static uint64_t read_peers(const char *all, int n, int me, size_t bytes)
{
    size_t blk = bytes / (size_t)n & ~(size_t)7, at = (size_t)me * blk;
    uint64_t s = 0;

    for (size_t off = 0; off < blk; off += PIECE) {
        size_t len = blk - off < PIECE ? blk - off : PIECE;
        for (int p = 0; p < n; p++)
            s += read_block((const uint64_t *)(all + (size_t)p * bytes + at + off),
                            len / sizeof(uint64_t));
    }
    return s;
}

/* Block `me` of each of the n buffers, summed as f32 by ofccl's kernel into out, in
 * ofccl's 16 KiB grains (OFCCL_RS_GRAIN). */
static void reduce_peers(const char *all, int n, int me, size_t bytes, float *out)
{
    static const ofccl_redop_t sum = {OFCCL_OP_SUM, 1.0};
    size_t blk = bytes / (size_t)n & ~(size_t)7, at = (size_t)me * blk;
    const void *src[MAXN];

    for (size_t off = 0; off < blk; off += 16384) {
        size_t len = blk - off < 16384 ? blk - off : 16384;
        for (int p = 0; p < n; p++)
            src[p] = all + (size_t)p * bytes + at + off;
        ofccl__reduce(OFCCL_F32, sum, (char *)out + off, src, n, len / sizeof(float), 0);
    }
}

/* All n processes meet; the last one in opens the next generation. -1 after
 * 10 s (a process that failed), never a hang. */
static int spin_barrier(shared_t *sh, int n)
{
    unsigned g = atomic_load(&sh->gen);
    double end = 0;

    if (atomic_fetch_add(&sh->arrived, 1) == (unsigned)n - 1) {
        atomic_store(&sh->arrived, 0);
        atomic_store(&sh->gen, g + 1);
        return 0;
    }
    for (unsigned spin = 0; atomic_load(&sh->gen) == g; spin++)
        if (spin % 256 == 255) {
            sched_yield(); /* as in ring_round */
            if (end == 0)
                end = now() + 10;
            else if (now() > end)
                return -1;
        }
    return 0;
}

static int meet(void *arg)
{
    shared_t *sh = arg;
    return spin_barrier(sh, sh->n);
}

/* What a synchronised column's steps work on. */
typedef struct step_of {
    char *all;
    const char *src;
    int n, me;
    size_t bytes, blk;
    float *out;
} step_of_t;

/* `reduce`, each pass ending at a barrier: every pass ends when the slowest
 * process is through, as a collective's does. */
static int reduce_step(void *arg, double deadline)
{
    step_of_t *x = arg;

    (void)deadline;
    reduce_peers(x->all, x->n, x->me, x->bytes, x->out);
    return 0;
}

/* The exchange: this process's block into the others' places, then its own
 * (an out-of-place all-gather's). */
static int exchange_step(void *arg, double deadline)
{
    step_of_t *x = arg;

    (void)deadline;
    for (int k = 1; k <= x->n; k++)
        copy_block(x->all + (size_t)((x->me + k) % x->n) * x->bytes + (size_t)x->me * x->blk,
                   x->src, x->blk);
    return 0;
}

/* One process's share: best of ROUNDS rounds of each kind, all processes
 * starting every round together. `all` holds every process's buffer for the
 * peer reads; this one writes its own first. */
static void child(shared_t *sh, char *all, const ceil_tcp_t *g, int n, int me, size_t bytes,
                  double min_s)
{
    char *src = malloc(bytes), *dst = malloc(bytes), *mine = all + (size_t)me * bytes;
    if (!src || !dst) {
        for (int k = 0; k < KINDS; k++)
            sh->rate[k][me] = -1;
        for (int k = 0; k < KINDS * ROUNDS; k++)
            pthread_barrier_wait(&sh->bar);
        return;
    }
    for (size_t i = 0; i < bytes; i++)
        src[i] = (char)(i * 7 + me), dst[i] = 0;
    /* Ordinary floats (no NaN or subnormal: no microcode assists in the kernel). */
    for (size_t i = 0; i + sizeof(float) <= bytes; i += sizeof(float)) {
        float v = 1.0f + (float)((i / 4 * 7 + (size_t)me * 13) % 251) / 256.0f;
        memcpy(mine + i, &v, sizeof(v));
    }
    volatile uint64_t sink = 0;
    for (int kind = K_COPY; kind <= K_REDUCE; kind++) {
        double best = 0;
        for (int r = 0; r < ROUNDS; r++) {
            pthread_barrier_wait(&sh->bar);
            double t0 = now(), t;
            long reps = 0;
            do {
                if (kind == K_COPY)
                    copy_block(dst, src, bytes);
                else if (kind == K_READ)
                    sink += read_block((const uint64_t *)src, bytes / sizeof(uint64_t));
                else if (kind == K_PEER_READ)
                    sink += read_peers(all, n, me, bytes);
                else
                    reduce_peers(all, n, me, bytes, (float *)dst);
                reps++;
                t = now() - t0;
            } while (t < min_s && reps < 1000000);
            double moved =
                kind >= K_PEER_READ ? (double)(bytes / (size_t)n & ~(size_t)7) * n : (double)bytes;
            double rate = moved * reps / t;
            if (rate > best)
                best = rate;
        }
        sh->rate[kind][me] = best;
    }
    ceil_sync_t sync = {&sh->bar, meet, sh, ROUNDS};
    step_of_t x = {all, src, n, me, bytes, bytes / (size_t)n & ~(size_t)63, (float *)dst};
    size_t moved = (bytes / (size_t)n & ~(size_t)7) * (size_t)n; /* as `reduce` reads */
    sh->rate[K_REDUCE_SYNC][me] = ceil_best(&sync, 1, XCH_BYTES, moved, 1, reduce_step, &x);
    sh->rate[K_TCP][me] = ceil_tcp_ring(&sync, g, n, me, src, dst, bytes, TCP_BYTES);
    sh->rate[K_MESH][me] = n > 1 ? ceil_tcp_mesh(&sync, g, n, me, src, dst, bytes, TCP_BYTES) : 0;
    sh->rate[K_EXCHANGE][me] =
        n > 1 ? ceil_best(&sync, 1, XCH_BYTES, x.blk * (size_t)(n - 1), 1, exchange_step, &x) : 0;
    (void)sink;
    free(src);
    free(dst);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double slowest(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double median(const double *v, int n)
{
    double s[MAXN];
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int n = 2, opt;
    size_t lo = 1 << 20, hi = 64 << 20;
    double factor = 4, min_ms = 100;
    const char *csv = NULL;
    while ((opt = getopt(argc, argv, "n:b:e:f:t:C:")) != -1) {
        switch (opt) {
        case 'n':
            n = atoi(optarg);
            break;
        case 'b':
            lo = perf_parse_size(optarg);
            break;
        case 'e':
            hi = perf_parse_size(optarg);
            break;
        case 'f':
            factor = atof(optarg);
            break;
        case 't':
            min_ms = atof(optarg);
            break;
        case 'C':
            csv = optarg;
            break;
        default:
            fprintf(stderr, "usage: ceiling_all -n procs [-b min] [-e max] [-f factor] "
                            "[-t ms] [-C out.csv]\n");
            return 2;
        }
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    ceil_tcp_t *net = malloc(sizeof(*net));
    if (n < 1 || n > MAXN || factor <= 1 || lo == 0 || hi < lo) {
        fprintf(stderr, "ceiling_all: -n must be 1..%d, -f > 1, 0 < -b <= -e\n", MAXN);
        return 2;
    }
    if (!net || ceil_tcp_listen(net, n) != 0)
        return 1;
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        fprintf(stderr, "ceiling_all: %s: %s\n", csv, strerror(errno));
        return 1;
    }
    if (out)
        fprintf(out, "procs,bytes,copy_Bps,read_Bps,peer_read_Bps,reduce_Bps,reduce_sync_Bps,"
                     "tcp_Bps,tcp_mesh_Bps,exchange_Bps,copy_min_Bps,read_min_Bps,"
                     "peer_read_min_Bps,reduce_min_Bps,reduce_sync_min_Bps,tcp_min_Bps,"
                     "tcp_mesh_min_Bps,exchange_min_Bps\n");
    printf("# %d processes at once on %ld cpus: per-process rates in GB/s, median over "
           "processes (slowest process in brackets)\n",
           n, ncpu);
    printf("%12s %18s %18s %18s %18s %18s %18s %18s %18s\n", "bytes", "copy", "read", "peer read",
           "reduce", "reduce sync", "tcp", "tcp mesh", "exchange");
    for (size_t bytes = lo; bytes <= hi; bytes = (size_t)(bytes * factor)) {
        shared_t *sh =
            mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED) {
            perror("ceiling_all: mmap");
            return 1;
        }
        pthread_barrierattr_t ba;
        pthread_barrierattr_init(&ba);
        pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
        pthread_barrier_init(&sh->bar, &ba, n);
        sh->n = n;
        char *all = mmap(NULL, bytes * (size_t)n, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (all == MAP_FAILED) {
            perror("ceiling_all: mmap of the shared buffers");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            pid_t pid = fork();
            if (pid < 0) {
                perror("ceiling_all: fork");
                return 1;
            }
            if (pid == 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(i % (ncpu > 0 ? ncpu : 1), &set);
                sched_setaffinity(0, sizeof(set), &set);
                child(sh, all, net, n, i, bytes, min_ms / 1e3);
                _exit(0);
            }
        }
        int bad = 0, st;
        for (int i = 0; i < n; i++)
            if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                bad = 1;
        double med[KINDS], low[KINDS];
        for (int k = 0; k < KINDS; k++) {
            med[k] = median(sh->rate[k], n);
            low[k] = slowest(sh->rate[k], n);
            bad |= low[k] <= 0 && !((k == K_EXCHANGE || k == K_MESH) && n == 1); /* none alone */
        }
        if (bad) {
            fprintf(stderr, "ceiling_all: a process failed at %zu bytes\n", bytes);
            return 1;
        }
        printf("%12zu", bytes);
        for (int k = 0; k < KINDS; k++)
            printf("   %6.2f (%6.2f)", med[k] / 1e9, low[k] / 1e9);
        printf("\n");
        if (out) {
            fprintf(out, "%d,%zu", n, bytes);
            for (int k = 0; k < 2 * KINDS; k++)
                fprintf(out, ",%.0f", k < KINDS ? med[k] : low[k - KINDS]);
            fprintf(out, "\n");
        }
        munmap(all, bytes * (size_t)n);
        munmap(sh, sizeof(*sh));
        if (bytes > hi / factor)
            break;
    }
    if (out)
        fclose(out);
    ceil_tcp_close(net, n);
    free(net);
    return 0;
}
