/*
 * ceiling: what one core of this machine can do with memory, measured at the
 * benchmark's sizes, to put the collectives' figures in proportion:
 *   - memcpy rate (bytes copied per second): the bound of any shared-memory
 *     transfer that copies each byte once;
 *   - a two-input sum, out[i] = a[i] + b[i], in f32 and in bf16 (f32
 *     arithmetic, rounded to nearest even), rated in output bytes per second.
 *   - memcpy on two cores at once (-2 cpu): the same copy, timed while a
 *     forked twin pinned to the other cpu copies too (its own buffers, same
 *     size, started together): what each core of a 2-rank collective can copy
 *     when both copy, sharing the L3 and the memory bus. Reported per core;
 *   - loopback TCP, both ways at once (-T cpu): this process and a twin on the
 *     other cpu each send a block of the size to the other over one TCP
 *     connection on 127.0.0.1 while receiving the other's (non-blocking
 *     sockets, one poll loop per side, kernel socket buffers as configured):
 *     bytes received per second per side, the bound of any 2-rank collective
 *     over loopback TCP, whose every byte the kernel copies twice on these
 *     same cores. Sizes from 4 KiB; the best of 3 runs (it varies a lot).
 *   - exchange (-X cpu): this process and a twin on the other cpu share a
 *     window holding both sides' outputs; each copies its block of the size
 *     into the other's output, then both meet at a barrier, and again: the
 *     copies of a 2-rank in-place
 *     all-gather on shared memory with no protocol around them, bytes copied
 *     per second per side. Copies go in 512 KiB memcpy calls, ofccl's default
 *     chunk (one larger memcpy switches glibc to non-temporal stores, slower
 *     while the data fits in the L3). Sizes from 4 KiB.
 * The sums are this file's own loops (16-lane vectors, AVX-512 / AVX2 / SSE2
 * clones): an approximation of the library's reduction kernel, not the kernel
 * itself, which may be vectorised, blocked and dispatched differently.
 *
 *   ceiling [-b 8] [-e 64M] [-f 2] [-t ms] [-p cpu] [-2 cpu] [-T cpu] [-X cpu] [-C out.csv]
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perfutil.h"

static char *src, *src2, *dst;
static int sock = -1; /* -T: the connection to the twin */

/* -X: the window both sides write into (half each) and their barrier. */
#define XCHG_PIECE ((size_t)512 << 10)
static struct xchg {
    atomic_ulong *done[2]; /* in the shared window, one cache line each */
    char *half[2];
    int me;
    unsigned long rounds;
} xw;

/* The window: two counters' lines, then each side's all-gather output of two
 * blocks of up to `max` bytes. */
static bool xchg_window(size_t max)
{
    size_t len = 128 + 4 * max;
    char *w = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (w == MAP_FAILED)
        return false;
    memset(w, 1, len);
    memset(w, 0, 128);
    xw.done[0] = (atomic_ulong *)(void *)w;
    xw.done[1] = (atomic_ulong *)(void *)(w + 64);
    xw.half[0] = w + 128;
    xw.half[1] = w + 128 + 2 * max;
    return true;
}

/* Send `n` bytes of `out` to the twin while receiving n into `in`. 0, or -1 on
 * a socket error or 10 s without progress. */
static int exchange(const char *out, char *in, size_t n)
{
    size_t sent = 0, got = 0;

    while (sent < n || got < n) {
        struct pollfd p = {sock, (short)((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
        ssize_t k;
        if (poll(&p, 1, 10000) <= 0)
            return -1;
        if (sent < n && (p.revents & POLLOUT)) {
            k = send(sock, out + sent, n - sent, MSG_DONTWAIT);
            if (k < 0 && errno != EAGAIN)
                return -1;
            sent += k > 0 ? (size_t)k : 0;
        }
        if (got < n && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            k = recv(sock, in + got, n - got, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN))
                return -1;
            got += k > 0 ? (size_t)k : 0;
        }
    }
    return 0;
}

/*
 * Explicit 16-lane vectors (GCC vector extensions) so -O2 gives vector code
 * without relying on the auto-vectoriser; one clone per ISA level, picked at
 * load time, as a library kernel with AVX2/AVX-512 variants would be.
 * Out of line so that repeated calls cannot be folded together.
 */
typedef float v16f __attribute__((vector_size(64), aligned(4)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32), aligned(2)));
#define CLONES __attribute__((noinline, target_clones("arch=x86-64-v4", "avx2", "default")))

CLONES static void sum_f32(float *restrict out, const float *restrict a, const float *restrict b,
                           size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        *(v16f *)(out + i) = *(const v16f *)(a + i) + *(const v16f *)(b + i);
    for (; i < n; i++)
        out[i] = a[i] + b[i];
}

static uint16_t bf16_add(uint16_t a, uint16_t b)
{
    float x, y, s;
    uint32_t ua = (uint32_t)a << 16, ub = (uint32_t)b << 16, us;
    memcpy(&x, &ua, 4);
    memcpy(&y, &ub, 4);
    s = x + y;
    memcpy(&us, &s, 4);
    /* round to nearest even; the inputs here are finite, so no NaN case */
    return (uint16_t)((us + 0x7fffu + ((us >> 16) & 1u)) >> 16);
}

CLONES static void sum_bf16(uint16_t *restrict out, const uint16_t *restrict a,
                            const uint16_t *restrict b, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16u ua = __builtin_convertvector(*(const v16h *)(a + i), v16u) << 16;
        v16u ub = __builtin_convertvector(*(const v16h *)(b + i), v16u) << 16;
        v16u us = (v16u)((v16f)ua + (v16f)ub);
        us = (us + 0x7fffu + ((us >> 16) & 1u)) >> 16;
        *(v16h *)(out + i) = __builtin_convertvector(us, v16h);
    }
    for (; i < n; i++)
        out[i] = bf16_add(a[i], b[i]);
}

__attribute__((noinline)) static void copy(void *d, const void *s, size_t n)
{
    memcpy(d, s, n);
}

enum kind { K_COPY, K_SUM_F32, K_SUM_BF16, K_TCP, K_XCHG };

/* One exchange round, as an in-place all-gather's: our block (block `me` of
 * our output) into block `me` of the peer's output, then wait for its block
 * in ours (bounded: -1 after 10 s without it). */
static int xchg_round(size_t bytes)
{
    char *to = xw.half[1 - xw.me] + xw.me * bytes, *from = xw.half[xw.me] + xw.me * bytes;
    double end = 0;

    for (size_t off = 0; off < bytes; off += XCHG_PIECE)
        copy(to + off, from + off, bytes - off < XCHG_PIECE ? bytes - off : XCHG_PIECE);
    xw.rounds++;
    atomic_store_explicit(xw.done[xw.me], xw.rounds, memory_order_release);
    for (unsigned spin = 0;
         atomic_load_explicit(xw.done[1 - xw.me], memory_order_acquire) < xw.rounds; spin++)
        if (spin % 1024 == 1023) {
            if (end == 0)
                end = perf_now_us() + 10e6;
            else if (perf_now_us() > end)
                return -1;
        }
    return 0;
}

static int run_once(int kind, size_t bytes)
{
    switch (kind) {
    case K_COPY:
        copy(dst, src, bytes);
        return 0;
    case K_SUM_F32:
        sum_f32((float *)dst, (const float *)src, (const float *)src2, bytes / 4);
        return 0;
    case K_SUM_BF16:
        sum_bf16((uint16_t *)dst, (const uint16_t *)src, (const uint16_t *)src2, bytes / 2);
        return 0;
    case K_XCHG:
        return xchg_round(bytes);
    default:
        return exchange(src, dst, bytes);
    }
}

/* Rate in GB/s of `kind` over `bytes`, repeating until `target_us` has passed
 * (at least 3 and at most 1e7 repetitions, so it always ends); 0 on failure.
 * K_TCP doubles batches in step with the twin (same sizes, same counts).
 * K_XCHG, whose every round is a barrier, runs a count both sides know:
 * 4 GiB of copies (20 to 100000 rounds). */
static double measure(int kind, size_t bytes, double target_us)
{
    double t0, t = 0;
    long reps = 0, batch = 1;

    for (int i = 0; i < 2; i++) /* warm caches and TLB */
        if (run_once(kind, bytes) != 0)
            return 0;
    if (kind == K_XCHG) {
        long n = (long)(((size_t)4 << 30) / bytes);
        n = n < 20 ? 20 : n > 100000 ? 100000 : n;
        t0 = perf_now_us();
        for (long i = 0; i < n; i++)
            if (xchg_round(bytes) != 0)
                return 0;
        return (double)bytes * (double)n / (perf_now_us() - t0) / 1e3;
    }
    while ((t < target_us || reps < 3) && reps < 10000000) {
        t0 = perf_now_us();
        for (long i = 0; i < batch; i++)
            if (run_once(kind, bytes) != 0)
                return 0;
        t += perf_now_us() - t0;
        reps += batch;
        batch *= 2;
        if (kind == K_TCP) { /* both sides stop together: on the longer of their times */
            double theirs = 0;
            if (exchange((const char *)&t, (char *)&theirs, sizeof(t)) != 0)
                return 0;
            if (theirs >= target_us && reps >= 3)
                break;
        }
    }
    return (double)bytes * (double)reps / t / 1e3;
}

static void pin(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("sched_setaffinity");
}

/* What the two copiers share: a generation barrier and the twin's figures. */
struct twin {
    atomic_uint arrived, gen;
    double rate[PERF_MAX_SIZES];
};

/* Both sides call it the same number of times; bounded by a 10 s spin. */
static void twin_barrier(struct twin *t)
{
    unsigned g = atomic_load(&t->gen);
    double end = perf_now_us() + 10e6;

    if (atomic_fetch_add(&t->arrived, 1) == 1) {
        atomic_store(&t->arrived, 0);
        atomic_store(&t->gen, g + 1);
        return;
    }
    while (atomic_load(&t->gen) == g && perf_now_us() < end)
        sched_yield();
}

/* A TCP connection over 127.0.0.1 between this process (*fd) and the forked
 * twin: `lfd` (perf_tcp_listen) listens before the fork; each side then holds
 * one end. */
static int tcp_end(int lfd, uint16_t port, bool child)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, fd;

    if (child) {
        close(lfd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(fd);
            fd = -1;
        }
    } else {
        struct pollfd p = {lfd, POLLIN, 0};
        fd = poll(&p, 1, 10000) == 1 ? accept(lfd, NULL, NULL) : -1;
        close(lfd);
    }
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    return fd;
}

/* `kind` per size on this core while the twin on `cpu2` does the same (K_COPY:
 * its own copy; K_TCP, K_XCHG: the other end of the exchange): rate[i] = the
 * mean of the two sides' figures; false if anything failed. K_TCP and K_XCHG
 * from 4 KiB only. */
static bool measure_twin(int kind, const size_t *sizes, int n, int cpu2, double target_us,
                         double *rate)
{
    struct twin *t =
        mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint16_t port = 0;
    int st = 0, lfd = -1;
    bool ok = true;
    pid_t pid;

    if (t == MAP_FAILED)
        return false;
    if (kind == K_TCP && (lfd = perf_tcp_listen(&port)) < 0) {
        munmap(t, sizeof(*t));
        return false;
    }
    pid = fork();
    if (pid < 0) {
        munmap(t, sizeof(*t));
        return false;
    }
    if (pid == 0)
        pin(cpu2);
    if (kind == K_TCP && (sock = tcp_end(lfd, port, pid == 0)) < 0)
        ok = false;
    xw.me = pid == 0;
    for (int i = 0; i < n && ok; i++) {
        double r = 0;
        twin_barrier(t);
        if (kind == K_XCHG && sizes[i] < 4096)
            r = 0;
        else if (kind != K_TCP)
            r = measure(kind, sizes[i], target_us);
        else if (sizes[i] >= 4096) /* loopback TCP varies from run to run: the best of 3 */
            for (int k = 0; k < 3 && ok; k++) {
                double v = measure(kind, sizes[i], target_us);
                ok = v > 0;
                r = v > r ? v : r;
            }
        if (pid == 0)
            t->rate[i] = r;
        else
            rate[i] = r;
        twin_barrier(t);
    }
    if (sock >= 0) {
        close(sock);
        sock = -1;
    }
    if (pid == 0)
        _exit(ok ? 0 : 1);
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        ok = false;
    for (int i = 0; i < n; i++)
        rate[i] = (rate[i] + t->rate[i]) / 2;
    munmap(t, sizeof(*t));
    return ok;
}

int main(int argc, char **argv)
{
    size_t minb = 8, maxb = 64u << 20, sizes[PERF_MAX_SIZES];
    double factor = 2, target_ms = 20;
    const char *csv = NULL;
    FILE *f = NULL;
    int c, cpu = -1, cpu2 = -1, cpu_tcp = -1, cpu_x = -1, n;
    double twin[PERF_MAX_SIZES] = {0}, tcp[PERF_MAX_SIZES] = {0}, xch[PERF_MAX_SIZES] = {0};

    while ((c = getopt(argc, argv, "b:e:f:t:p:2:T:X:C:h")) != -1) {
        switch (c) {
        case 'b':
            minb = perf_parse_size(optarg);
            break;
        case 'e':
            maxb = perf_parse_size(optarg);
            break;
        case 'f':
            factor = atof(optarg);
            break;
        case 't':
            target_ms = atof(optarg);
            break;
        case 'p':
            cpu = atoi(optarg);
            break;
        case '2':
            cpu2 = atoi(optarg);
            break;
        case 'T':
            cpu_tcp = atoi(optarg);
            break;
        case 'X':
            cpu_x = atoi(optarg);
            break;
        case 'C':
            csv = optarg;
            break;
        default:
            fprintf(stderr, "usage: ceiling [-b min] [-e max] [-f factor] [-t ms] [-p cpu] "
                            "[-2 cpu] [-T cpu] [-X cpu] [-C file.csv]\n");
            return 2;
        }
    }
    if (!minb || !maxb || factor < 1 || target_ms <= 0) {
        fprintf(stderr, "ceiling: bad size, factor or time\n");
        return 2;
    }
    if (cpu >= 0)
        pin(cpu);
    if (posix_memalign((void **)&src, 4096, maxb + 64) ||
        posix_memalign((void **)&src2, 4096, maxb + 64) ||
        posix_memalign((void **)&dst, 4096, maxb + 64)) {
        fprintf(stderr, "ceiling: out of memory\n");
        return 1;
    }
    /* Finite values in every type: small multiples of 1/8 in f32 and bf16 alike. */
    for (size_t i = 0; i + 4 <= maxb; i += 4) {
        float v = (float)((int)(i % 61) - 30) / 8.0f;
        memcpy(src + i, &v, 4);
        memcpy(src2 + i, &v, 4);
    }
    memset(dst, 0, maxb);
    if (csv && !(f = fopen(csv, "w"))) {
        perror(csv);
        return 1;
    }
    if (f)
        fputs("size,memcpy_GBps,sum_f32_GBps,sum_bf16_GBps,memcpy_2core_GBps,tcp_duplex_GBps,"
              "exchange_GBps\n",
              f);
    printf("# one core%s; GB/s = 1e9 bytes/s (memcpy: bytes copied; sums: output bytes)\n"
           "# sums are 16-lane vector loops approximating ofccl's reduction kernel\n"
           "# memcpy_2core: per core, with cpu %d copying the same size at the same time\n"
           "# tcp_duplex: bytes received per second per side, with cpu %d sending the same\n"
           "# size back over loopback TCP at the same time\n"
           "# exchange: per side, copying the size into cpu %d's half of a shared window\n"
           "# while it copies into ours, a barrier after each round\n"
           "# %12s %12s %12s %12s %12s %12s %12s\n",
           cpu >= 0 ? " (pinned)" : "", cpu2, cpu_tcp, cpu_x, "size(B)", "memcpy", "sum_f32",
           "sum_bf16", "memcpy_2core", "tcp_duplex", "exchange");
    n = perf_sweep(minb, maxb, factor, sizes);
    if (cpu2 >= 0 && !measure_twin(K_COPY, sizes, n, cpu2, target_ms * 1e3, twin)) {
        fprintf(stderr, "ceiling: the copy on cpu %d failed\n", cpu2);
        return 1;
    }
    if (cpu_tcp >= 0 && !measure_twin(K_TCP, sizes, n, cpu_tcp, target_ms * 1e3, tcp)) {
        fprintf(stderr, "ceiling: the loopback TCP exchange with cpu %d failed\n", cpu_tcp);
        return 1;
    }
    if (cpu_x >= 0 &&
        (!xchg_window(maxb) || !measure_twin(K_XCHG, sizes, n, cpu_x, target_ms * 1e3, xch))) {
        fprintf(stderr, "ceiling: the exchange with cpu %d failed\n", cpu_x);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        double m = measure(K_COPY, sizes[i], target_ms * 1e3);
        double s32 = sizes[i] >= 4 ? measure(K_SUM_F32, sizes[i], target_ms * 1e3) : 0;
        double s16 = sizes[i] >= 2 ? measure(K_SUM_BF16, sizes[i], target_ms * 1e3) : 0;
        printf("  %12zu %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f\n", sizes[i], m, s32, s16,
               twin[i], tcp[i], xch[i]);
        if (f)
            fprintf(f, "%zu,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", sizes[i], m, s32, s16, twin[i],
                    tcp[i], xch[i]);
    }
    if (f && fclose(f) != 0)
        return 1;
    free(src);
    free(src2);
    free(dst);
    return 0;
}
