/*
 * ofccl_perf: all-gather / reduce-scatter / broadcast / weight push bandwidth
 * in the style of nccl-tests, through the public API only.
 *
 *   mpirun -np 2 ofccl_perf -o ag|rs|all|bc|push|bp -b 8 -e 64M -f 2 -n 20 -w 5 -d f32
 *          -r sum -a auto|direct|ring|hier -c 0|1 -i 0|1 -z pool|reg|plain [-B] [-R root]
 *          [-S senders] [-K bucket] [-C out.csv] [-J out.json] [-s NAME=value ...]
 *
 * -o all runs all-gather and reduce-scatter, bp broadcast and push (their
 * options and layout: ofccl_perf_bp.c). Progress goes to stderr when it is a
 * terminal.
 *
 * Timing: a barrier, then -n back-to-back iterations (post, wait, free); the
 * time is their average, taken on the slowest rank. -m R repeats that batch R
 * times (a barrier before each) and takes the best batch (on its slowest
 * rank), as machine ceilings take the best of their rounds. With -c 1 another -n
 * iterations follow, each with fresh inputs and a poisoned output, and every
 * element of every one is compared with a reference each rank computes on its
 * own. The footprint (registered and pool bytes) is sampled after warm-up and
 * after the measured iterations; any growth fails the run, as does any wrong
 * element or error.
 *
 * -i 1 runs the in-place forms the API defines (as nccl-tests' in-place mode):
 * all-gather with sendbuf = recvbuf + rank * block, reduce-scatter with
 * recvbuf = sendbuf + rank * block. The input shard is overwritten (by the
 * reduction) or is part of the output, so every checked iteration seeds it
 * again, and only the rest of the output can be poisoned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofccl.h"
#include "ofccl_perf_bp.h"
#include "perfutil.h"

#define NT 5 /* tensors per bucket with -B */
#define MAX_SETTINGS 24
#define MAX_ROUNDS 8         /* -m */
#define XCH (3 + MAX_ROUNDS) /* doubles each rank contributes to the per-size exchange */

enum { MEM_POOL, MEM_REG, MEM_PLAIN };
static const char *const mem_names[] = {"pool", "reg", "plain"};
/* -a sets both OFCCL_ALGO_AG and OFCCL_ALGO_RS. */
static const char *const algo_names[] = {"auto", "direct", "ring", "hier"};

typedef struct bench {
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    int rank, size;
    perf_dtype_t dt;
    perf_op_t op;
    int iters, rounds, warmup, check, bucket, mem, in_place;
    size_t es, bufbytes;
    char *sendbuf, *recvbuf;
    ofccl_mem_t *mh[2];
    double *xch; /* pool buffer: size * XCH doubles, all-gathered in place */
    ofccl_tensor_t t[NT];
    size_t toff[NT]; /* first element of each tensor in the bucket's numbering */
    /* footprint */
    ofccl_stats_t start, end;
    double max_growth, max_new_regs;
} bench_t;

static ofccl_dtype_t to_ofccl(perf_dtype_t dt)
{
    static const ofccl_dtype_t map[] = {OFCCL_F32, OFCCL_F64, OFCCL_BF16, OFCCL_F16};
    return map[dt];
}

static int fail(bench_t *b, const char *what, int rc)
{
    fprintf(stderr, "ofccl_perf rank %d: %s: %s: %s\n", b->rank, what, ofccl_strerror(rc),
            ofccl_comm_last_error(b->comm));
    return rc;
}

static void stats(bench_t *b, ofccl_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    st->size = sizeof(*st);
    ofccl_ctx_stats(b->ctx, st);
}

/* Rank r's shard of a count-element tensor, as docs/api.md defines it. */
static size_t shard_of(size_t count, int nranks, int r, size_t *first)
{
    size_t c = (count + (size_t)nranks - 1) / (size_t)nranks;
    *first = (size_t)r * c < count ? (size_t)r * c : count;
    return count - *first < c ? count - *first : c;
}

static char *align64(char *p)
{
    return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Uneven tensors in the ratio 1:2:...:NT over `total` elements, carved out of
 * the two buffers (inputs from sendbuf, outputs from recvbuf). */
static void bucket_layout(bench_t *b, int coll, size_t total)
{
    char *in = b->sendbuf, *out = b->recvbuf;
    size_t used = 0;

    for (int k = 0; k < NT; k++) {
        size_t count = k < NT - 1 ? total * (size_t)(k + 1) / (NT * (NT + 1) / 2) : total - used;
        size_t first, n;
        if (count == 0)
            count = 1; /* total >= NT keeps this from overrunning; see run_size */
        n = shard_of(count, b->size, b->rank, &first);
        b->toff[k] = used;
        b->t[k].count = count;
        used += count;
        in = align64(in);
        out = align64(out);
        if (coll == 0) { /* all-gather: shard in, full out */
            b->t[k].shard = in;
            b->t[k].full = out;
            in += n * b->es;
            out += count * b->es;
        } else {
            b->t[k].full = in;
            b->t[k].shard = out;
            in += count * b->es;
            out += n * b->es;
        }
    }
}

/* The input of a flat collective: its own buffer, or with -i 1 this rank's
 * block of the output (all-gather); the output likewise (reduce-scatter). */
static char *flat_in(bench_t *b, int coll, size_t count)
{
    if (b->in_place && coll == 0)
        return b->recvbuf + (size_t)b->rank * count * b->es;
    return b->sendbuf;
}

static char *flat_out(bench_t *b, int coll, size_t count)
{
    if (b->in_place && coll == 1)
        return b->sendbuf + (size_t)b->rank * count * b->es;
    return b->recvbuf;
}

static void fill(bench_t *b, int coll, size_t count, int it)
{
    int n = b->size;
    if (!b->bucket) {
        if (coll == 0)
            perf_fill(b->dt, flat_in(b, coll, count), count, n, b->rank, it,
                      (size_t)b->rank * count);
        else
            perf_fill(b->dt, b->sendbuf, (size_t)n * count, n, b->rank, it, 0);
        return;
    }
    for (int k = 0; k < NT; k++) {
        size_t first, len = shard_of(b->t[k].count, n, b->rank, &first);
        if (coll == 0)
            perf_fill(b->dt, b->t[k].shard, len, n, b->rank, it, b->toff[k] + first);
        else
            perf_fill(b->dt, b->t[k].full, b->t[k].count, n, b->rank, it, b->toff[k]);
    }
}

/* All-ones bytes are a NaN in every float type: an element left untouched can
 * never pass the check. In place, the output this rank's input lives in is not
 * poisoned: the all-gather keeps its own block (checked as any other), and the
 * reduce-scatter's output is its input, so an unwritten element shows there as
 * the rank's own input, which differs from the reference except where the other
 * ranks' values sum to zero. */
static void poison(bench_t *b, int coll, size_t count)
{
    size_t block = count * b->es;

    if (!b->bucket) {
        if (!b->in_place) {
            memset(b->recvbuf, 0xff, (coll == 0 ? (size_t)b->size : 1) * block);
        } else if (coll == 0) {
            memset(b->recvbuf, 0xff, (size_t)b->rank * block);
            memset(b->recvbuf + (size_t)(b->rank + 1) * block, 0xff,
                   (size_t)(b->size - b->rank - 1) * block);
        }
        return;
    }
    for (int k = 0; k < NT; k++) {
        size_t first, len = shard_of(b->t[k].count, b->size, b->rank, &first);
        if (coll == 0)
            memset(b->t[k].full, 0xff, b->t[k].count * b->es);
        else
            memset(b->t[k].shard, 0xff, len * b->es);
    }
}

static long check(bench_t *b, int coll, size_t count, int it)
{
    int n = b->size;
    long wrong = 0;

    if (!b->bucket) {
        if (coll == 1)
            return perf_check_reduced(b->dt, b->op, flat_out(b, coll, count), count, n, it,
                                      (size_t)b->rank * count);
        for (int r = 0; r < n; r++)
            wrong += perf_check_values(b->dt, b->recvbuf + (size_t)r * count * b->es, count, n, r,
                                       it, (size_t)r * count);
        return wrong;
    }
    for (int k = 0; k < NT; k++) {
        size_t first, len;
        if (coll == 1) {
            len = shard_of(b->t[k].count, n, b->rank, &first);
            wrong +=
                perf_check_reduced(b->dt, b->op, b->t[k].shard, len, n, it, b->toff[k] + first);
            continue;
        }
        for (int r = 0; r < n; r++) {
            len = shard_of(b->t[k].count, n, r, &first);
            wrong += perf_check_values(b->dt, (char *)b->t[k].full + first * b->es, len, n, r, it,
                                       b->toff[k] + first);
        }
    }
    return wrong;
}

static int once(bench_t *b, int coll, size_t count)
{
    ofccl_redop_t op = {b->op == PERF_AVG ? OFCCL_OP_AVG : OFCCL_OP_SUM, 1.0};
    ofccl_dtype_t dt = to_ofccl(b->dt);
    ofccl_req_t *req;
    int rc;

    if (b->bucket)
        rc = coll == 0 ? ofccl_bucket_allgather(b->comm, b->t, NT, dt, &req)
                       : ofccl_bucket_reduce_scatter(b->comm, b->t, NT, dt, op, &req);
    else
        rc = coll == 0
                 ? ofccl_allgather(b->comm, flat_in(b, coll, count), b->recvbuf, count, dt, &req)
                 : ofccl_reduce_scatter(b->comm, b->sendbuf, flat_out(b, coll, count), count, dt,
                                        op, &req);
    if (rc)
        return fail(b, coll == 0 ? "post all-gather" : "post reduce-scatter", rc);
    if ((rc = ofccl_wait(req)) != 0)
        fail(b, "wait", rc);
    ofccl_req_free(req);
    return rc;
}

/* Every rank's {wrong, footprint growth, time, new registrations}, gathered
 * through the library itself (f64 all-gather in place: exact). */
static int exchange(bench_t *b, const double mine[XCH])
{
    ofccl_req_t *req;
    int rc;

    memcpy(b->xch + (size_t)b->rank * XCH, mine, sizeof(double) * XCH);
    rc = ofccl_allgather(b->comm, b->xch + (size_t)b->rank * XCH, b->xch, XCH, OFCCL_F64, &req);
    if (rc)
        return fail(b, "exchange results", rc);
    if ((rc = ofccl_wait(req)) != 0)
        fail(b, "exchange results", rc);
    ofccl_req_free(req);
    return rc;
}

static int run_size(bench_t *b, perf_out_t *out, int coll, size_t bytes, long *total_wrong)
{
    size_t count, total = bytes / b->es;
    ofccl_stats_t a, z;
    double t0, mine[XCH] = {0}, us, growth = 0, regs = 0, round_us[MAX_ROUNDS] = {0};
    long wrong = 0;
    int rc = 0;

    if (b->bucket) {
        total = total < NT ? NT : total;
        bucket_layout(b, coll, total);
        count = total;
        bytes = total * b->es;
    } else {
        count = bytes / (b->es * (size_t)b->size);
        count = count ? count : 1;
        bytes = count * b->es * (size_t)b->size;
    }
    fill(b, coll, count, 0);
    for (int i = 0; i < b->warmup && rc == 0; i++)
        rc = once(b, coll, count);
    stats(b, &a);
    for (int k = 0; k < b->rounds && rc == 0; k++) {
        if ((rc = ofccl_barrier(b->comm)) != 0) {
            fail(b, "barrier", rc);
            break;
        }
        t0 = perf_now_us();
        for (int i = 0; i < b->iters && rc == 0; i++)
            rc = once(b, coll, count);
        mine[3 + k] = (perf_now_us() - t0) / b->iters;
    }
    for (int it = 1; b->check && it <= b->iters && rc == 0; it++) {
        fill(b, coll, count, it);
        poison(b, coll, count);
        rc = once(b, coll, count);
        wrong += rc == 0 ? check(b, coll, count, it) : 0;
    }
    if (rc)
        return rc;
    stats(b, &z);
    growth =
        (double)(z.registered_bytes - a.registered_bytes) + (double)(z.pool_bytes - a.pool_bytes);
    regs = (double)(z.registrations - a.registrations);
    mine[0] = (double)wrong;
    mine[1] = growth;
    mine[2] = regs;
    if ((rc = exchange(b, mine)) != 0)
        return rc;
    wrong = 0;
    for (int r = 0; r < b->size; r++) {
        const double *x = b->xch + (size_t)r * XCH;
        wrong += (long)x[0];
        b->max_growth = x[1] > b->max_growth ? x[1] : b->max_growth;
        b->max_new_regs = x[2] > b->max_new_regs ? x[2] : b->max_new_regs;
        for (int k = 0; k < b->rounds; k++) /* each batch on its slowest rank */
            round_us[k] = x[3 + k] > round_us[k] ? x[3 + k] : round_us[k];
    }
    us = round_us[0];
    for (int k = 1; k < b->rounds; k++)
        us = round_us[k] < us ? round_us[k] : us;
    *total_wrong += wrong;
    if (b->rank == 0)
        perf_out_result(out, coll, bytes, count, b->dt, b->op, us, wrong, b->size);
    return 0;
}

static int alloc_buffers(bench_t *b)
{
    char **bufs[2] = {&b->sendbuf, &b->recvbuf};
    int rc;

    for (int i = 0; i < 2; i++) {
        void *p = NULL;
        if (b->mem == MEM_POOL) {
            if ((rc = ofccl_buffer_alloc(b->comm, b->bufbytes, &p)) != 0)
                return fail(b, "ofccl_buffer_alloc", rc);
        } else {
            if (posix_memalign(&p, 4096, b->bufbytes) != 0)
                return OFCCL_ERR_NO_MEMORY;
            if (b->mem == MEM_REG && (rc = ofccl_mem_register(b->ctx, p, b->bufbytes, &b->mh[i])))
                return fail(b, "ofccl_mem_register", rc);
        }
        memset(p, 0, b->bufbytes); /* touch the pages before timing */
        *bufs[i] = p;
    }
    return 0;
}

static void free_buffers(bench_t *b)
{
    char **bufs[2] = {&b->sendbuf, &b->recvbuf};
    for (int i = 0; i < 2; i++) {
        if (!*bufs[i])
            continue;
        if (b->mem == MEM_POOL) {
            ofccl_buffer_free(b->comm, *bufs[i]);
        } else {
            if (b->mh[i])
                ofccl_mem_deregister(b->mh[i]);
            free(*bufs[i]);
        }
        *bufs[i] = NULL;
    }
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: ofccl_perf [-o ag|rs|all] [-b min] [-e max] [-f factor] [-n iters] [-m rounds]\n"
        "       [-w warmup] [-d f32|bf16|f16|f64] [-r sum|avg] [-a auto|direct|ring|hier]\n"
        "       [-c 0|1] [-i 0|1] [-z pool|reg|plain] [-B] [-R root] [-S senders] [-K bucket]\n"
        "       [-C file.csv] [-J file.json] [-s NAME=value]...\n"
        "-o: ag, rs, all (ag and rs), bc (broadcast), push (weight push), bp (bc and push)\n"
        "sizes: bytes of the gathered buffer / reduce input / broadcast buffer / pushed\n"
        "       weights (what each receiver gets), suffixes K M G\n"
        "-R: broadcast root (0); -S: push senders, ranks 0..S-1 (half the ranks);\n"
        "-K: push bucket bytes (4M)\n"
        "-m: timed batches of -n iterations (1..8; ag, rs), the best one reported (1)\n"
        "-i 1: in place (all-gather: sendbuf = recvbuf + rank * block; reduce-scatter:\n"
        "      recvbuf = sendbuf + rank * block); not with -B\n");
}

static int get_choice(const char *arg, const char *const *names, int n, int *out)
{
    int i = perf_lookup(arg, names, n);
    if (i < 0) {
        fprintf(stderr, "ofccl_perf: unknown value '%s'\n", arg);
        return -1;
    }
    *out = i;
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const coll_names[] = {"ag", "rs", "all", "bc", "push", "bp"};
    bench_t bb = {.iters = 20, .rounds = 1, .warmup = 5, .mem = MEM_POOL}, *b = &bb;
    size_t minb = 8, maxb = 64u << 20, sizes[PERF_MAX_SIZES];
    double factor = 2;
    bp_t bp = {.root = 0, .nsenders = 0, .bucket_bytes = 4u << 20};
    perf_progress_t prog;
    int colls = 2, algo = 0, dt = PERF_F32, op = PERF_SUM, nsizes, c, rc, ns = 0;
    const char *csv = NULL, *json = NULL, *settings[MAX_SETTINGS + 1];
    char algo_ag[32], algo_rs[32], err[512] = "", extra[1024];
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    long total_wrong = 0;

    while ((c = getopt(argc, argv, "o:b:e:f:n:m:w:d:r:a:c:i:z:BR:S:K:C:J:s:h")) != -1) {
        int bad = 0;
        switch (c) {
        case 'o':
            bad = get_choice(optarg, coll_names, 6, &colls);
            break;
        case 'b':
            bad = !(minb = perf_parse_size(optarg));
            break;
        case 'e':
            bad = !(maxb = perf_parse_size(optarg));
            break;
        case 'f':
            bad = (factor = atof(optarg)) < 1;
            break;
        case 'n':
            bad = (b->iters = atoi(optarg)) < 1;
            break;
        case 'm':
            bad = (b->rounds = atoi(optarg)) < 1 || b->rounds > MAX_ROUNDS;
            break;
        case 'w':
            bad = (b->warmup = atoi(optarg)) < 0;
            break;
        case 'd':
            bad = get_choice(optarg, perf_dtype_names, PERF_DTYPE_COUNT, &dt);
            break;
        case 'r':
            bad = get_choice(optarg, perf_op_names, 2, &op);
            break;
        case 'a':
            bad = get_choice(optarg, algo_names, 4, &algo);
            break;
        case 'c':
            b->check = atoi(optarg) != 0;
            break;
        case 'i':
            b->in_place = atoi(optarg) != 0;
            break;
        case 'z':
            bad = get_choice(optarg, mem_names, 3, &b->mem);
            break;
        case 'B':
            b->bucket = 1;
            break;
        case 'R':
            bp.root = atoi(optarg);
            break;
        case 'S':
            bad = (bp.nsenders = atoi(optarg)) < 1;
            break;
        case 'K':
            bad = !(bp.bucket_bytes = perf_parse_size(optarg));
            break;
        case 'C':
            csv = optarg;
            break;
        case 'J':
            json = optarg;
            break;
        case 's':
            bad = ns >= MAX_SETTINGS - 2 || !strchr(optarg, '=');
            settings[ns++] = optarg;
            break;
        default:
            bad = 1;
            break;
        }
        if (bad) {
            usage();
            return 2;
        }
    }
    if (b->in_place && b->bucket) {
        /* Bucket collectives always pack the tensors through the library's own
         * flat buffer, and the API defines no in-place form for them. */
        fprintf(stderr, "ofccl_perf: -i 1 (in place) does not apply to -B (buckets): a bucket "
                        "always goes through the library's flat buffer and the API defines no "
                        "in-place form for it; drop one of the two\n");
        return 2;
    }
    if (b->rounds > 1 && colls >= 3) {
        fprintf(stderr, "ofccl_perf: -m (best of several batches) applies to -o ag, rs and all; "
                        "broadcast and push time one batch\n");
        return 2;
    }
    b->dt = (perf_dtype_t)dt;
    b->op = (perf_op_t)op;
    b->es = perf_dtype_size(b->dt);
    /* The algorithm goes through the settings list, like any parameter. */
    snprintf(algo_ag, sizeof(algo_ag), "ALGO_AG=%s", algo_names[algo]);
    snprintf(algo_rs, sizeof(algo_rs), "ALGO_RS=%s", algo_names[algo]);
    settings[ns++] = algo_ag;
    settings[ns++] = algo_rs;
    settings[ns] = NULL;
    p.settings = settings;

    if ((rc = ofccl_ctx_create(&p, &b->ctx)) != 0) {
        fprintf(stderr, "ofccl_ctx_create: %s: %s\n", ofccl_strerror(rc), err);
        return 1;
    }
    if ((rc = ofccl_comm_world(b->ctx, &b->comm)) != 0) {
        fprintf(stderr, "ofccl_comm_world: %s\n", ofccl_ctx_last_error(b->ctx));
        ofccl_ctx_destroy(b->ctx);
        return 1;
    }
    ofccl_comm_rank(b->comm, &b->rank);
    ofccl_comm_size(b->comm, &b->size);
    nsizes = perf_sweep(minb, maxb, factor, sizes);
    /* Room for the largest size, at least one element per rank, and the
     * alignment gaps between bucket tensors. */
    b->bufbytes = (maxb > b->es * (size_t)b->size ? maxb : b->es * (size_t)b->size) +
                  NT * (64 + b->es * (size_t)b->size) + 4096;
    rc = colls <= 2 ? alloc_buffers(b) : 0;
    if (rc == 0 && (rc = ofccl_buffer_alloc(b->comm, sizeof(double) * XCH * (size_t)b->size,
                                            (void **)&b->xch)) != 0)
        fail(b, "ofccl_buffer_alloc", rc);
    bp.push = perf_coll_selected(colls, 4);
    if (rc == 0 && colls >= 3)
        rc = bp_open(&bp, b->ctx, b->comm, b->dt, b->iters, b->warmup, b->check, maxb);
    stats(b, &b->start);

    perf_out_t out = {0};
    int opened = 0;
    perf_meta_t meta = {"ofccl",
                        ofccl_ctx_provider(b->ctx),
                        algo_names[algo],
                        mem_names[b->mem],
                        b->bucket ? "bucket" : "flat",
                        b->size,
                        b->iters,
                        b->warmup,
                        b->check,
                        b->in_place};
    if (rc == 0 && b->rank == 0 && !(opened = perf_out_open(&out, &meta, csv, json) == 0))
        rc = OFCCL_ERR_INVALID_ARG; /* other ranks then wait for rank 0 until the timeout */
    perf_progress_start(&prog, "ofccl_perf", b->rank == 0);
    for (int coll = 0; coll < 5; coll++)
        if (perf_coll_selected(colls, coll))
            perf_progress_add(&prog, sizes, nsizes);
    for (int coll = 0; coll < 2 && rc == 0; coll++) {
        if (!perf_coll_selected(colls, coll))
            continue;
        for (int i = 0; i < nsizes && rc == 0; i++) {
            rc = run_size(b, &out, coll, sizes[i], &total_wrong);
            perf_progress_step(&prog, coll_names[coll], sizes[i]);
        }
    }
    for (int coll = 3; coll < 5 && rc == 0; coll++) {
        if (!perf_coll_selected(colls, coll))
            continue;
        for (int i = 0; i < nsizes && rc == 0; i++) {
            rc = coll == 3 ? bp_bcast_size(&bp, &out, sizes[i], &total_wrong)
                           : bp_push_size(&bp, &out, sizes[i], &total_wrong);
            perf_progress_step(&prog, coll_names[coll], sizes[i]);
        }
    }
    perf_progress_end(&prog);
    stats(b, &b->end);
    if (rc == 0 && b->rank == 0) {
        int grew = b->max_growth > 0;
        printf("# footprint (rank 0): start registered %llu B, pool %llu B; end registered %llu "
               "B, pool %llu B; after warm-up, on every rank and size: %.0f B more, %.0f new "
               "registrations -> %s\n",
               (unsigned long long)b->start.registered_bytes,
               (unsigned long long)b->start.pool_bytes, (unsigned long long)b->end.registered_bytes,
               (unsigned long long)b->end.pool_bytes, b->max_growth, b->max_new_regs,
               grew ? "GREW (FAILED)" : "flat (ok)");
        snprintf(
            extra, sizeof(extra),
            "\"footprint\": {\"start\": {\"registered_bytes\": %llu, \"pool_bytes\": %llu}, "
            "\"end\": {\"registered_bytes\": %llu, \"pool_bytes\": %llu}, "
            "\"growth_after_warmup_bytes\": %.0f, \"registrations_after_warmup\": %.0f},\n"
            " \"wrong\": %ld, \"ok\": %s",
            (unsigned long long)b->start.registered_bytes, (unsigned long long)b->start.pool_bytes,
            (unsigned long long)b->end.registered_bytes, (unsigned long long)b->end.pool_bytes,
            b->max_growth, b->max_new_regs, total_wrong, total_wrong || grew ? "false" : "true");
        if (perf_out_close(&out, extra) != 0)
            rc = OFCCL_ERR_INTERNAL;
        printf("# %s: %ld wrong elements\n", total_wrong || grew ? "FAILED" : "OK", total_wrong);
    } else if (opened) {
        perf_out_close(&out, "\"ok\": false");
    }
    if (b->xch)
        ofccl_buffer_free(b->comm, b->xch);
    bp_teardown(&bp);
    free_buffers(b);
    ofccl_comm_destroy(b->comm);
    ofccl_ctx_destroy(b->ctx);
    return rc || total_wrong || b->max_growth > 0 ? 1 : 0;
}
