/*
 * mpi_perf: the MPI baseline for ofccl_perf — same sweep, same columns, same
 * checks — through MPI_Allgather and MPI_Reduce_scatter_block, and for
 * broadcast and weight push MPI_Bcast and gather-then-broadcast
 * (mpi_perf_bp.c).
 *
 *   mpirun -np 2 --mca pml ob1 --mca btl self,vader mpi_perf -o ag|rs|all|bc|push|bp
 *          -b 8 -e 64M -f 2 -n 20 -w 5 -d f32|f64|bf16|f16 -r sum|avg -c 0|1
 *          [-R root] [-S senders] [-K bucket] [-T label] [-C out.csv] [-J out.json]
 *
 * MPI has no bf16 or f16: all-gather moves them as MPI_UINT16_T; reduce-scatter
 * uses a user-defined commutative op that sums in f32 and rounds to nearest
 * even, which Open MPI runs as a plain (unvectorised) callback, so bf16/f16
 * reduce-scatter figures are a floor for MPI, not its best case. MPI has no
 * average either: avg is the sum followed by a division of this rank's block,
 * timed as part of the iteration, as an application would have to do it.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_perf_bp.h"
#include "perfutil.h"

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    (void)type;
    for (int i = 0; i < *len; i++)
        b[i] = perf_f32_to_bf16(perf_bf16_to_f32(a[i]) + perf_bf16_to_f32(b[i]));
}

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *type)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    (void)type;
    for (int i = 0; i < *len; i++)
        b[i] = perf_f32_to_f16(perf_f16_to_f32(a[i]) + perf_f16_to_f32(b[i]));
}

/* out[i] /= n in the accumulator type, then rounded to the element type. */
static void divide(perf_dtype_t dt, void *p, size_t count, int n)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == PERF_F64)
            ((double *)p)[i] /= n;
        else
            perf_store(dt, p, i, (double)((float)perf_load(dt, p, i) / (float)n));
    }
}

typedef struct bench {
    int rank, size, iters, warmup, check;
    perf_dtype_t dt;
    perf_op_t op;
    size_t es;
    char *sendbuf, *recvbuf;
    MPI_Datatype mtype;
    MPI_Op mop;
} bench_t;

static int once(bench_t *b, int coll, size_t count)
{
    int rc;
    if (coll == 0)
        return MPI_Allgather(b->sendbuf, (int)count, b->mtype, b->recvbuf, (int)count, b->mtype,
                             MPI_COMM_WORLD);
    rc = MPI_Reduce_scatter_block(b->sendbuf, b->recvbuf, (int)count, b->mtype, b->mop,
                                  MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && b->op == PERF_AVG)
        divide(b->dt, b->recvbuf, count, b->size);
    return rc;
}

static int run_size(bench_t *b, perf_out_t *out, int coll, size_t bytes, long *total_wrong)
{
    size_t count = bytes / (b->es * (size_t)b->size);
    double t0, us, maxus;
    long wrong = 0, sum;
    int rc = MPI_SUCCESS, n = b->size;

    count = count ? count : 1;
    bytes = count * b->es * (size_t)n;
    if (coll == 0)
        perf_fill(b->dt, b->sendbuf, count, n, b->rank, 0, (size_t)b->rank * count);
    else
        perf_fill(b->dt, b->sendbuf, (size_t)n * count, n, b->rank, 0, 0);
    for (int i = 0; i < b->warmup && rc == MPI_SUCCESS; i++)
        rc = once(b, coll, count);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = perf_now_us();
    for (int i = 0; i < b->iters && rc == MPI_SUCCESS; i++)
        rc = once(b, coll, count);
    us = (perf_now_us() - t0) / b->iters;
    for (int it = 1; b->check && it <= b->iters && rc == MPI_SUCCESS; it++) {
        if (coll == 0)
            perf_fill(b->dt, b->sendbuf, count, n, b->rank, it, (size_t)b->rank * count);
        else
            perf_fill(b->dt, b->sendbuf, (size_t)n * count, n, b->rank, it, 0);
        memset(b->recvbuf, 0xff, (coll == 0 ? (size_t)n : 1) * count * b->es); /* NaN */
        if ((rc = once(b, coll, count)) != MPI_SUCCESS)
            break;
        if (coll == 1)
            wrong +=
                perf_check_reduced(b->dt, b->op, b->recvbuf, count, n, it, (size_t)b->rank * count);
        else
            for (int r = 0; r < n; r++)
                wrong += perf_check_values(b->dt, b->recvbuf + (size_t)r * count * b->es, count, n,
                                           r, it, (size_t)r * count);
    }
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "mpi_perf rank %d: MPI error %d\n", b->rank, rc);
        return rc;
    }
    MPI_Allreduce(&us, &maxus, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&wrong, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    *total_wrong += sum;
    if (b->rank == 0)
        perf_out_result(out, coll, bytes, count, b->dt, b->op, maxus, sum, n);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const coll_names[] = {"ag", "rs", "all", "bc", "push", "bp"};
    bench_t bb = {.iters = 20, .warmup = 5}, *b = &bb;
    size_t minb = 8, maxb = 64u << 20, sizes[PERF_MAX_SIZES], bufbytes;
    double factor = 2;
    int colls = 2, dt = PERF_F32, op = PERF_SUM, c, rc = 0, nsizes, bad = 0;
    const char *csv = NULL, *json = NULL, *label = getenv("OMPI_MCA_btl");
    long total_wrong = 0;
    perf_out_t out = {0};
    mpi_bp_t bp = {.bucket_bytes = 4u << 20, .senders = MPI_COMM_NULL, .bcast = MPI_COMM_NULL};
    perf_progress_t prog;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->size);
    while ((c = getopt(argc, argv, "o:b:e:f:n:w:d:r:c:R:S:K:T:C:J:h")) != -1) {
        switch (c) {
        case 'o':
            bad |= (colls = perf_lookup(optarg, coll_names, 6)) < 0;
            break;
        case 'b':
            bad |= !(minb = perf_parse_size(optarg));
            break;
        case 'e':
            bad |= !(maxb = perf_parse_size(optarg));
            break;
        case 'f':
            bad |= (factor = atof(optarg)) < 1;
            break;
        case 'n':
            bad |= (b->iters = atoi(optarg)) < 1;
            break;
        case 'w':
            bad |= (b->warmup = atoi(optarg)) < 0;
            break;
        case 'd':
            bad |= (dt = perf_lookup(optarg, perf_dtype_names, PERF_DTYPE_COUNT)) < 0;
            break;
        case 'r':
            bad |= (op = perf_lookup(optarg, perf_op_names, 2)) < 0;
            break;
        case 'c':
            b->check = atoi(optarg) != 0;
            break;
        case 'R':
            bp.root = atoi(optarg);
            break;
        case 'S':
            bad |= (bp.nsenders = atoi(optarg)) < 1;
            break;
        case 'K':
            bad |= !(bp.bucket_bytes = perf_parse_size(optarg));
            break;
        case 'T':
            label = optarg;
            break;
        case 'C':
            csv = optarg;
            break;
        case 'J':
            json = optarg;
            break;
        default:
            bad = 1;
            break;
        }
    }
    if (bad) {
        if (b->rank == 0)
            fprintf(stderr, "usage: mpi_perf [-o ag|rs|all] [-b min] [-e max] [-f factor] "
                            "[-n iters] [-w warmup] [-d f32|f64|bf16|f16] [-r sum|avg] "
                            "[-c 0|1] [-R root] [-S senders] [-K bucket] [-T label] "
                            "[-C file.csv] [-J file.json]\n"
                            "-o: ag, rs, all (ag and rs), bc, push, bp (bc and push)\n");
        MPI_Finalize();
        return 2;
    }
    b->dt = (perf_dtype_t)dt;
    b->op = (perf_op_t)op;
    b->es = perf_dtype_size(b->dt);
    switch (b->dt) {
    case PERF_F32:
        b->mtype = MPI_FLOAT;
        b->mop = MPI_SUM;
        break;
    case PERF_F64:
        b->mtype = MPI_DOUBLE;
        b->mop = MPI_SUM;
        break;
    default:
        b->mtype = MPI_UINT16_T;
        MPI_Op_create(b->dt == PERF_BF16 ? sum_bf16 : sum_f16, 1, &b->mop);
        break;
    }
    /* MPI counts are ints: keep the largest per-rank count within range. */
    if (maxb / b->es > (size_t)2147483647) {
        if (b->rank == 0)
            fprintf(stderr, "mpi_perf: -e too large for MPI int counts\n");
        MPI_Finalize();
        return 2;
    }
    nsizes = perf_sweep(minb, maxb, factor, sizes);
    bufbytes = (maxb > b->es * (size_t)b->size ? maxb : b->es * (size_t)b->size) + 4096;
    if (posix_memalign((void **)&b->sendbuf, 4096, bufbytes) ||
        posix_memalign((void **)&b->recvbuf, 4096, bufbytes)) {
        fprintf(stderr, "mpi_perf: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(b->sendbuf, 0, bufbytes);
    memset(b->recvbuf, 0, bufbytes);

    /* Out of place (in_place 0): MPI_IN_PLACE is not measured. */
    perf_meta_t meta = {.impl = "mpi",
                        .transport = label ? label : "default",
                        .algo = "-",
                        .mem = "plain",
                        .mode = "flat",
                        .nranks = b->size,
                        .iters = b->iters,
                        .warmup = b->warmup,
                        .check = b->check};
    if (b->rank == 0 && perf_out_open(&out, &meta, csv, json) != 0)
        MPI_Abort(MPI_COMM_WORLD, 1);
    bp.rank = b->rank;
    bp.size = b->size;
    bp.dt = b->dt;
    bp.iters = b->iters;
    bp.warmup = b->warmup;
    bp.check = b->check;
    bp.nsenders = !perf_coll_selected(colls, 4) ? 0 : bp.nsenders ? bp.nsenders : b->size / 2;
    bp.maxb = maxb;
    if (colls >= 3 &&
        (bp.root < 0 || bp.root >= b->size ||
         (perf_coll_selected(colls, 4) && (bp.nsenders < 1 || bp.nsenders >= b->size)) ||
         mpi_bp_setup(&bp) != 0)) {
        if (b->rank == 0)
            fprintf(stderr,
                    "mpi_perf: -R %d / -S %d: the root must be a rank and the senders "
                    "at least 1 and fewer than the %d ranks (or out of memory)\n",
                    bp.root, bp.nsenders, b->size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    perf_progress_start(&prog, "mpi_perf", b->rank == 0);
    for (int coll = 0; coll < 5; coll++)
        if (perf_coll_selected(colls, coll))
            perf_progress_add(&prog, sizes, nsizes);
    for (int coll = 0; coll < 5 && rc == 0; coll++) {
        if (!perf_coll_selected(colls, coll))
            continue;
        for (int i = 0; i < nsizes && rc == 0; i++) {
            if (coll < 2)
                rc = run_size(b, &out, coll, sizes[i], &total_wrong);
            else if (coll == 3)
                rc = mpi_bp_bcast_size(&bp, &out, sizes[i], &total_wrong);
            else if (coll == 4)
                rc = mpi_bp_push_size(&bp, &out, sizes[i], &total_wrong);
            perf_progress_step(&prog, coll_names[coll], sizes[i]);
        }
    }
    perf_progress_end(&prog);
    mpi_bp_teardown(&bp);
    if (b->rank == 0) {
        char extra[64];
        snprintf(extra, sizeof(extra), "\"wrong\": %ld, \"ok\": %s", total_wrong,
                 total_wrong || rc ? "false" : "true");
        perf_out_close(&out, extra);
        printf("# %s: %ld wrong elements\n", total_wrong || rc ? "FAILED" : "OK", total_wrong);
    }
    if (b->mop != MPI_SUM)
        MPI_Op_free(&b->mop);
    free(b->sendbuf);
    free(b->recvbuf);
    if (rc)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
