/*
 * overlap: how much of an all-gather hides behind computation, as FSDP needs
 * when it gathers the next layer's parameters while computing the current one.
 *
 * Each rank runs a fixed CPU loop (cache-resident arithmetic, so it competes
 * for the core, not for memory bandwidth), calibrated to take about as long
 * as one all-gather of -s bytes, and measures, as medians over -n rounds:
 *   comm     all-gather alone (post, wait, free);
 *   compute  the loop alone, in -k slices;
 *   overlap  post the all-gather, run the loop, then wait.
 * twice: progress thread off (the caller calls ofccl_test between slices) and
 * on (OFCCL_PROGRESS_THREAD=1; the caller calls nothing until ofccl_wait at the
 * end). Reported: compute slowdown = compute time inside overlap / compute
 * alone, and hidden = (compute + comm - overlap) / comm, the fraction of the
 * communication time that disappeared behind the loop. The gathered data of
 * the last overlapped iteration is checked element by element.
 *
 *   mpirun -np 2 overlap [-s 16M] [-n 10] [-w 3] [-k 64] [-S NAME=value]...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofccl.h"
#include "perfutil.h"

#define MAX_SETTINGS 16
#define NX 6 /* figures per rank in the exchange */
#define MAX_ITERS 1000

static double work[32];
static volatile double sink;

/* One unit of work: 32 dependent multiply-adds on a tiny array. */
__attribute__((noinline)) static void compute(long units)
{
    for (long u = 0; u < units; u++)
        for (int j = 0; j < 32; j++)
            work[j] = work[j] * 0.9999999 + 1e-7;
    sink = work[0];
}

/* Units of `compute` per microsecond on this core (median of 5 runs of ~20 ms). */
static double calibrate(void)
{
    double rates[5];
    long units = 1000;

    for (int i = 0; i < 40; i++) { /* grow until one run takes >= 20 ms; bounded */
        double t0 = perf_now_us();
        compute(units);
        if (perf_now_us() - t0 >= 20000)
            break;
        units *= 2;
    }
    for (int i = 0; i < 5; i++) {
        double t0 = perf_now_us();
        compute(units);
        rates[i] = (double)units / (perf_now_us() - t0);
    }
    for (int i = 0; i < 5; i++) /* sort 5 values, take the middle one */
        for (int j = i + 1; j < 5; j++)
            if (rates[j] < rates[i]) {
                double t = rates[i];
                rates[i] = rates[j];
                rates[j] = t;
            }
    return rates[2];
}

typedef struct run {
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    int rank, size;
    size_t count; /* f32 elements per rank */
    float *send[2], *recv[2];
    double *xch;
} run_t;

static int fail(run_t *r, const char *what, int rc)
{
    fprintf(stderr, "overlap rank %d: %s: %s: %s\n", r->rank, what, ofccl_strerror(rc),
            r->comm ? ofccl_comm_last_error(r->comm) : ofccl_ctx_last_error(r->ctx));
    return rc;
}

static int gather(run_t *r, int k, ofccl_req_t **req)
{
    int rc = ofccl_allgather(r->comm, r->send[k], r->recv[k], r->count, OFCCL_F32, req);
    return rc ? fail(r, "ofccl_allgather", rc) : 0;
}

static int finish(run_t *r, ofccl_req_t *req)
{
    int rc = ofccl_wait(req);
    ofccl_req_free(req);
    return rc ? fail(r, "ofccl_wait", rc) : 0;
}

static int open_run(run_t *r, const char *const *user, int nuser, int thread, size_t bytes)
{
    const char *settings[MAX_SETTINGS + 2];
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    int rc, n = 0;

    for (int i = 0; i < nuser; i++)
        settings[n++] = user[i];
    settings[n++] = thread ? "PROGRESS_THREAD=1" : "PROGRESS_THREAD=0";
    settings[n] = NULL;
    p.settings = settings;
    memset(r, 0, sizeof(*r));
    if ((rc = ofccl_ctx_create(&p, &r->ctx)) != 0) {
        fprintf(stderr, "overlap: ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return rc;
    }
    if ((rc = ofccl_comm_world(r->ctx, &r->comm)) != 0)
        return fail(r, "ofccl_comm_world", rc);
    ofccl_comm_rank(r->comm, &r->rank);
    ofccl_comm_size(r->comm, &r->size);
    r->count = bytes / sizeof(float) / (size_t)r->size;
    r->count = r->count ? r->count : 1;
    /* Two buckets, as FSDP alternates: one being gathered, one in use. */
    for (int k = 0; k < 2; k++) {
        if ((rc = ofccl_buffer_alloc(r->comm, r->count * sizeof(float), (void **)&r->send[k])) ||
            (rc = ofccl_buffer_alloc(r->comm, r->count * sizeof(float) * (size_t)r->size,
                                     (void **)&r->recv[k])))
            return fail(r, "ofccl_buffer_alloc", rc);
        perf_fill(PERF_F32, r->send[k], r->count, r->size, r->rank, k, (size_t)r->rank * r->count);
        memset(r->recv[k], 0, r->count * sizeof(float) * (size_t)r->size);
    }
    if ((rc = ofccl_buffer_alloc(r->comm, sizeof(double) * NX * (size_t)r->size, (void **)&r->xch)))
        return fail(r, "ofccl_buffer_alloc", rc);
    return 0;
}

static void close_run(run_t *r)
{
    if (r->comm) {
        for (int k = 0; k < 2; k++) {
            if (r->send[k])
                ofccl_buffer_free(r->comm, r->send[k]);
            if (r->recv[k])
                ofccl_buffer_free(r->comm, r->recv[k]);
        }
        if (r->xch)
            ofccl_buffer_free(r->comm, r->xch);
        ofccl_comm_destroy(r->comm);
    }
    if (r->ctx)
        ofccl_ctx_destroy(r->ctx);
}

/* Average all-gather time over `iters` after `warmup`, alternating buckets. */
static int time_comm(run_t *r, int warmup, int iters, double *us)
{
    ofccl_req_t *req;
    double t0 = 0;
    int rc = 0;

    for (int i = -warmup; i < iters && rc == 0; i++) {
        if (i == 0) {
            if ((rc = ofccl_barrier(r->comm)) != 0)
                return fail(r, "barrier", rc);
            t0 = perf_now_us();
        }
        if ((rc = gather(r, (i + warmup) & 1, &req)) == 0)
            rc = finish(r, req);
    }
    *us = (perf_now_us() - t0) / iters;
    return rc;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * fig[0..3]: compute alone, overlapped total, compute inside overlap, comm
 * alone — medians over `iters` rounds. Each round runs the three phases back
 * to back, each after a barrier, so that drifts of the machine (a busy
 * neighbour, the hypervisor) hit all three alike and ranks start together.
 */
static int measure(run_t *r, int thread, long units, int slices, int iters, double *fig,
                   long *wrong)
{
    static double t[4][MAX_ITERS];
    long slice = units / slices;
    int rc = 0;

    for (int i = 0; i < iters && rc == 0; i++) {
        ofccl_req_t *req;
        double t0;
        int done = 0;

        if ((rc = ofccl_barrier(r->comm)) != 0)
            return fail(r, "barrier", rc);
        t0 = perf_now_us();
        if ((rc = gather(r, i & 1, &req)) != 0 || (rc = finish(r, req)) != 0)
            return rc;
        t[3][i] = perf_now_us() - t0;

        if ((rc = ofccl_barrier(r->comm)) != 0)
            return fail(r, "barrier", rc);
        t0 = perf_now_us();
        for (int s = 0; s < slices; s++)
            compute(slice);
        t[0][i] = perf_now_us() - t0;

        if ((rc = ofccl_barrier(r->comm)) != 0)
            return fail(r, "barrier", rc);
        t0 = perf_now_us();
        t[2][i] = 0;
        if ((rc = gather(r, i & 1, &req)) != 0)
            return rc;
        for (int s = 0; s < slices && rc == 0; s++) {
            double c0 = perf_now_us();
            compute(slice);
            t[2][i] += perf_now_us() - c0;
            /* Without the thread nothing moves unless the caller drives it. */
            if (!thread && !done && (rc = ofccl_test(req, &done)) != 0)
                fail(r, "ofccl_test", rc);
        }
        if (rc == 0)
            rc = finish(r, req);
        else
            ofccl_req_free(req);
        t[1][i] = perf_now_us() - t0;
    }
    for (int k = 0; k < 4 && rc == 0; k++)
        fig[k] = median(t[k], iters);
    /* The last bucket gathered is (iters - 1) & 1; check all of it. */
    for (int q = 0; q < r->size && rc == 0; q++)
        *wrong += perf_check_values(PERF_F32, r->recv[(iters - 1) & 1] + (size_t)q * r->count,
                                    r->count, r->size, q, (iters - 1) & 1, (size_t)q * r->count);
    return rc;
}

static int exchange(run_t *r, const double mine[NX])
{
    ofccl_req_t *req;
    int rc;
    memcpy(r->xch + (size_t)r->rank * NX, mine, sizeof(double) * NX);
    if ((rc = ofccl_allgather(r->comm, r->xch + (size_t)r->rank * NX, r->xch, NX, OFCCL_F64, &req)))
        return fail(r, "exchange", rc);
    return finish(r, req);
}

int main(int argc, char **argv)
{
    const char *user[MAX_SETTINGS];
    size_t bytes = 16u << 20;
    int iters = 10, warmup = 3, slices = 64, nuser = 0, c, rc = 0;
    long units = 0, total_wrong = 0;
    double rate = 0;

    while ((c = getopt(argc, argv, "s:n:w:k:S:h")) != -1) {
        int bad = 0;
        switch (c) {
        case 's':
            bad = !(bytes = perf_parse_size(optarg));
            break;
        case 'n':
            bad = (iters = atoi(optarg)) < 1 || iters > MAX_ITERS;
            break;
        case 'w':
            bad = (warmup = atoi(optarg)) < 0;
            break;
        case 'k':
            bad = (slices = atoi(optarg)) < 1;
            break;
        case 'S':
            bad = nuser >= MAX_SETTINGS || !strchr(optarg, '=');
            user[nuser++] = optarg;
            break;
        default:
            bad = 1;
            break;
        }
        if (bad) {
            fprintf(stderr, "usage: overlap [-s bytes] [-n iters] [-w warmup] [-k slices] "
                            "[-S NAME=value]...\n");
            return 2;
        }
    }
    for (int thread = 0; thread < 2 && rc == 0; thread++) {
        run_t r;
        double fig[NX] = {0};
        long wrong = 0;

        if ((rc = open_run(&r, user, nuser, thread, bytes)) != 0) {
            close_run(&r);
            break;
        }
        if (thread == 0) {
            /* Calibrate once, against the all-gather without the thread, so
             * both modes run exactly the same amount of computation. */
            double us;
            rate = calibrate();
            if ((rc = time_comm(&r, warmup, iters, &us)) == 0)
                units = (long)(us * rate) > slices ? (long)(us * rate) : slices;
            if (r.rank == 0)
                printf("# overlap: %d ranks, provider %s, all-gather of %zu B (f32, pool "
                       "buffers), %d iterations, compute in %d slices of %ld units "
                       "(%.1f units/us)\n"
                       "# %-6s %4s %12s %12s %12s %12s %9s %7s %7s\n",
                       r.size, ofccl_ctx_provider(r.ctx), r.count * 4 * (size_t)r.size, iters,
                       slices, units / slices, rate, "thread", "rank", "comm(us)", "compute(us)",
                       "overlap(us)", "cmp-in-ovl", "slowdown", "hidden", "#wrong");
        }
        if (rc == 0 && thread) { /* the first run warmed up while calibrating */
            double us;
            rc = time_comm(&r, warmup, 1, &us);
        }
        if (rc == 0)
            rc = measure(&r, thread, units, slices, iters, fig, &wrong);
        fig[4] = (double)wrong;
        if (rc == 0)
            rc = exchange(&r, fig);
        for (int q = 0; q < r.size && rc == 0 && r.rank == 0; q++) {
            const double *x = r.xch + (size_t)q * NX;
            double hidden = (x[0] + x[3] - x[1]) / x[3];
            hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
            printf("  %-6s %4d %12.1f %12.1f %12.1f %12.1f %9.2f %6.0f%% %7.0f\n",
                   thread ? "on" : "off", q, x[3], x[0], x[1], x[2], x[2] / x[0], hidden * 100,
                   x[4]);
            total_wrong += (long)x[4];
        }
        close_run(&r);
        total_wrong += r.rank != 0 ? wrong : 0;
    }
    return rc || total_wrong ? 1 : 0;
}
