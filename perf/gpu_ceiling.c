/*
 * The GPUs' own ceilings for an all-gather, with no collective library: one
 * process per GPU (forked here), each pushing its block of a buffer into
 * every other GPU's buffer through CUDA IPC, as an all-gather in place does,
 * by the copy engines (one stream per peer, 0 SMs) and by ofccl's copy kernel
 * on a given number of SMs. Also checks the mechanisms the GPU peer class
 * stands on: IPC mapping between processes, host shared memory registered for
 * every GPU, and stream writes and waits on it across processes. Prints the
 * devices, the P2P matrix, and a table of bus bandwidth (bytes of the whole
 * gathered buffer x (n-1)/n / time, the slowest process's median), checking
 * every byte each GPU received in the last round of each column.
 *
 * Usage: gpu_ceiling [-n GPUS] [-b MIN] [-e MAX] [-r REPS] [-s SMS,...]
 * Sizes are of the gathered buffer (nccl-tests' convention). Exit 0 when
 * every check passed (2 when there is no GPU to measure: skipped).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu/gpu.h"

#define MAXG 8
#define MAXCOLS 8
#define MAXSIZES 32

struct board {
    _Atomic uint64_t arrive, gen;
    _Atomic int fail;
    uint8_t ipc[MAXG][OFCCL__GPU_IPC_BYTES];
    uint64_t flags[MAXG][8];
    double ms[MAXG][MAXCOLS][MAXSIZES];
    int checked[MAXG][MAXCOLS][MAXSIZES];
};

static struct board *bd;
static int ngpu, reps = 20, ncol, nsizes;
static int sms_list[MAXCOLS] = {0};
static size_t sizes[MAXSIZES];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* All processes meet (bounded: 60 s). */
static int barrier(void)
{
    uint64_t g = atomic_load(&bd->gen);
    double dl = now_s() + 60;

    if (atomic_fetch_add(&bd->arrive, 1) + 1 == (uint64_t)ngpu) {
        atomic_store(&bd->arrive, 0);
        atomic_fetch_add(&bd->gen, 1);
        return 0;
    }
    while (atomic_load(&bd->gen) == g)
        if (now_s() > dl || atomic_load(&bd->fail))
            return -1;
    return 0;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            fprintf(stderr, "gpu %d: %s: %s\n", me, #call, e.msg);                                 \
            atomic_store(&bd->fail, 1);                                                            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int child(int me)
{
    ofccl__gpu_t *g = NULL;
    ofccl__err_t e = {0};
    ofccl__gpu_stream_t st[MAXG];
    ofccl__gpu_event_t e0, e1;
    void *buf, *peer[MAXG] = {0}, *flags_dev;
    size_t max = sizes[nsizes - 1];
    uint8_t *host = malloc(max);
    double t[256];

    CHECK(ofccl__gpu_open(NULL, &g, &e));
    if (me == 0) {
        char v[16];
        ofccl__gpu_driver_version(g, v, sizeof(v));
        printf("CUDA driver %s, %d devices\n", v, ofccl__gpu_device_count(g));
        for (int d = 0; d < ngpu; d++) {
            ofccl__gpu_dev_info_t in;
            CHECK(ofccl__gpu_device_info(g, d, &in, &e));
            printf("  gpu %d: %s, bus %s, %d SMs, cc %d.%d, %.0f GiB, 64-bit stream memops %s, "
                   "flush remote writes %s, host register %s\n",
                   d, in.name, in.bus_id, in.sms, in.cc_major, in.cc_minor,
                   (double)in.total_mem / (1 << 30), in.mem_ops_64 ? "yes" : "no",
                   in.flush_remote ? "yes" : "no", in.host_register ? "yes" : "no");
        }
        printf("  P2P:");
        for (int a = 0; a < ngpu; a++)
            for (int b = 0; b < ngpu; b++) {
                char why[128];
                if (a != b)
                    printf(" %d->%d %s", a, b,
                           ofccl__gpu_can_access(g, a, b, why, sizeof(why)) ? "yes" : "NO");
            }
        printf("\n");
        fflush(stdout);
    }
    CHECK(ofccl__gpu_mem_alloc(g, me, max, &buf, &e));
    {
        size_t off;
        CHECK(ofccl__gpu_ipc_export(g, me, buf, bd->ipc[me], &off, &e));
    }
    /* Every process registers the whole shared board: flags written by one
     * GPU's stream are waited on by another's. */
    CHECK(
        ofccl__gpu_host_register(g, me, bd, (sizeof(*bd) + 4095) & ~(size_t)4095, &flags_dev, &e));
    for (int p = 0; p < ngpu; p++)
        CHECK(ofccl__gpu_stream_create(g, me, &st[p], &e));
    CHECK(ofccl__gpu_event_create(g, me, true, &e0, &e));
    CHECK(ofccl__gpu_event_create(g, me, true, &e1, &e));
    if (barrier())
        return 1;
    for (int p = 0; p < ngpu; p++)
        if (p != me)
            CHECK(ofccl__gpu_ipc_open(g, me, bd->ipc[p], &peer[p], &e));
    if (me == 0 && ofccl__gpu_ptr_kind(g, buf, NULL, NULL) != me) {
        fprintf(stderr, "gpu 0: its own buffer is not device memory to the driver\n");
        atomic_store(&bd->fail, 1);
        return 1;
    }
    if (ofccl__gpu_ptr_kind(g, host, NULL, NULL) != -1) {
        fprintf(stderr, "gpu %d: malloc'ed memory is device memory to the driver\n", me);
        atomic_store(&bd->fail, 1);
        return 1;
    }
    /* Flags across processes: each stream writes its own word, then waits
     * for every other's; the host waits on an event, bounded. */
    {
        char *fd = flags_dev;
        double dl = now_s() + 20;
        int done = 0;
        CHECK(
            ofccl__gpu_write_flag(g, me, st[0], fd + offsetof(struct board, flags[me][0]), 1, &e));
        for (int p = 0; p < ngpu; p++)
            CHECK(ofccl__gpu_wait_flag(g, me, st[0], fd + offsetof(struct board, flags[p][0]), 1,
                                       &e));
        CHECK(ofccl__gpu_event_record(g, me, e1, st[0], &e));
        while (!done && now_s() < dl)
            done = ofccl__gpu_event_query(g, me, e1, &e);
        if (done != 1) {
            fprintf(stderr, "gpu %d: stream flags across processes did not meet in 20 s\n", me);
            atomic_store(&bd->fail, 1);
            return 1;
        }
        if (me == 0)
            printf("stream flags across processes: ok\n");
    }
    for (int c = 0; c < ncol; c++) {
        for (int si = 0; si < nsizes; si++) {
            size_t block = sizes[si] / (size_t)ngpu;
            char *mine = (char *)buf + (size_t)me * block;
            int n = 0;

            for (size_t i = 0; i < block; i++)
                host[i] = (uint8_t)(me * 31 + i * 7 + si);
            CHECK(ofccl__gpu_copy_sync(g, me, mine, host, block, &e));
            for (int r = -2; r < reps; r++) {
                if (barrier())
                    return 1;
                CHECK(ofccl__gpu_event_record(g, me, e0, st[0], &e));
                if (sms_list[c] == 0) {
                    /* Copy engines: one stream per peer, joined back on st[0]. */
                    for (int p = 0; p < ngpu; p++) {
                        if (p == me)
                            continue;
                        CHECK(ofccl__gpu_stream_wait_event(g, me, st[p], e0, &e));
                        CHECK(ofccl__gpu_copy(g, me, st[p], (char *)peer[p] + (size_t)me * block,
                                              mine, block, &e));
                    }
                    for (int p = 0; p < ngpu; p++)
                        if (p != me) {
                            ofccl__gpu_event_t j = e1;
                            CHECK(ofccl__gpu_event_record(g, me, j, st[p], &e));
                            CHECK(ofccl__gpu_stream_wait_event(g, me, st[0], j, &e));
                        }
                } else {
                    void *d[MAXG];
                    int nd = 0;
                    for (int p = 0; p < ngpu; p++)
                        if (p != me)
                            d[nd++] = (char *)peer[p] + (size_t)me * block;
                    CHECK(ofccl__gpu_copy_kernel(g, me, st[0], d, nd, mine, block, sms_list[c],
                                                 NULL, &e));
                }
                CHECK(ofccl__gpu_event_record(g, me, e1, st[0], &e));
                CHECK(ofccl__gpu_event_sync(g, me, e1, &e));
                if (r >= 0)
                    t[n++] = ofccl__gpu_event_ms(g, me, e0, e1);
            }
            qsort(t, (size_t)n, sizeof(double), cmp_d);
            bd->ms[me][c][si] = t[n / 2];
            if (barrier())
                return 1;
            /* Every peer's block here, byte for byte. */
            CHECK(ofccl__gpu_copy_sync(g, me, host, buf, block * (size_t)ngpu, &e));
            bd->checked[me][c][si] = 1;
            for (int p = 0; p < ngpu && bd->checked[me][c][si]; p++)
                for (size_t i = 0; i < block; i++)
                    if (host[(size_t)p * block + i] != (uint8_t)(p * 31 + i * 7 + si)) {
                        fprintf(stderr, "gpu %d: byte %zu of gpu %d's block is wrong (%s)\n", me, i,
                                p, sms_list[c] ? "kernel" : "copy engines");
                        bd->checked[me][c][si] = 0;
                        break;
                    }
        }
    }
    for (int p = 0; p < ngpu; p++)
        if (peer[p] != NULL)
            ofccl__gpu_ipc_close(g, me, peer[p]);
    ofccl__gpu_host_unregister(g, me, bd);
    ofccl__gpu_mem_free(g, me, buf);
    ofccl__gpu_close(g);
    free(host);
    return 0;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    return (size_t)(v * (*end == 'G'   ? 1 << 30
                         : *end == 'M' ? 1 << 20
                         : *end == 'K' ? 1 << 10
                                       : 1));
}

int main(int argc, char **argv)
{
    size_t lo = 4 << 20, hi = 512u << 20;
    int opt, bad = 0, st;
    static char deflist[] = "0,16,32,64";
    char *list = deflist;
    pid_t pid[MAXG];

    ngpu = 0;
    while ((opt = getopt(argc, argv, "n:b:e:r:s:")) != -1) {
        if (opt == 'n')
            ngpu = atoi(optarg);
        else if (opt == 'b')
            lo = parse_size(optarg);
        else if (opt == 'e')
            hi = parse_size(optarg);
        else if (opt == 'r')
            reps = atoi(optarg);
        else if (opt == 's')
            list = optarg;
    }
    for (char *tok = strtok(list, ","); tok != NULL && ncol < MAXCOLS; tok = strtok(NULL, ","))
        sms_list[ncol++] = atoi(tok);
    for (size_t s = lo; s <= hi && nsizes < MAXSIZES; s *= 2)
        sizes[nsizes++] = s;
    if (ngpu <= 0) { /* ask the driver in a child: the parent must not touch CUDA before fork */
        int fds[2];
        if (pipe(fds) == 0 && (pid[0] = fork()) == 0) {
            ofccl__gpu_t *g;
            ofccl__err_t e;
            int n = ofccl__gpu_open(NULL, &g, &e) == 0 ? ofccl__gpu_device_count(g) : 0;
            if (n == 0)
                fprintf(stderr, "%s\n", e.msg);
            if (write(fds[1], &n, sizeof(n)) != sizeof(n))
                _exit(1);
            _exit(0);
        }
        if (read(fds[0], &ngpu, sizeof(ngpu)) != sizeof(ngpu))
            ngpu = 0;
        waitpid(pid[0], &st, 0);
    }
    if (ngpu < 2) {
        printf("gpu_ceiling: skipped: %d GPU(s) here, 2 needed\n", ngpu);
        return 2;
    }
    ngpu = ngpu > MAXG ? MAXG : ngpu;
    bd = mmap(NULL, (sizeof(*bd) + 4095) & ~(size_t)4095, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (bd == MAP_FAILED)
        return 1;
    memset(bd, 0, sizeof(*bd));
    fflush(stdout);
    for (int r = 0; r < ngpu; r++)
        if ((pid[r] = fork()) == 0)
            _exit(child(r));
    for (int r = 0; r < ngpu; r++) {
        waitpid(pid[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (bad) {
        printf("gpu_ceiling: a process failed\n");
        return 1;
    }
    printf("\n%d GPUs, all-gather pattern (each pushes size/%d to every other), bus GB/s\n%12s",
           ngpu, ngpu, "size");
    for (int c = 0; c < ncol; c++)
        printf(sms_list[c] ? "  kernel %3d SMs" : "    copy engines", sms_list[c]);
    printf("\n");
    for (int si = 0; si < nsizes; si++) {
        printf("%10zu B", sizes[si]);
        for (int c = 0; c < ncol; c++) {
            double worst = 0;
            int ok = 1;
            for (int r = 0; r < ngpu; r++) {
                worst = bd->ms[r][c][si] > worst ? bd->ms[r][c][si] : worst;
                ok &= bd->checked[r][c][si];
            }
            bad |= !ok;
            printf("  %12.1f%s", (double)sizes[si] * (ngpu - 1) / ngpu / (worst * 1e6),
                   ok ? "  " : " X");
        }
        printf("\n");
    }
    printf(bad ? "gpu_ceiling: a check FAILED (X)\n" : "gpu_ceiling: every byte checked\n");
    return bad;
}
