/*
 * Shared by the benchmarks in perf/: element types and their conversions,
 * test values whose sums are exact, reference reductions, size parsing, and
 * the nccl-tests-style table with its CSV and JSON copies. Independent of
 * ofccl (mpi_perf and ceiling use it without the library), so the reference
 * used to check results is not the code under test.
 */
#ifndef OFCCL_PERFUTIL_H
#define OFCCL_PERFUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum perf_dtype { PERF_F32, PERF_F64, PERF_BF16, PERF_F16, PERF_DTYPE_COUNT } perf_dtype_t;
typedef enum perf_op { PERF_SUM, PERF_AVG } perf_op_t;

extern const char *const perf_dtype_names[PERF_DTYPE_COUNT];
extern const char *const perf_op_names[2]; /* "sum", "avg", as -r takes them */
size_t perf_dtype_size(perf_dtype_t dt);
/* Index of `name` in `names` (n entries), or -1. */
int perf_lookup(const char *name, const char *const *names, int n);

/* "64", "4K", "16M", "1G" (powers of 1024) -> bytes; 0 on a malformed value. */
size_t perf_parse_size(const char *s);
double perf_now_us(void);
/* A TCP socket listening on an ephemeral port of 127.0.0.1 (*port), or -1. */
int perf_tcp_listen(uint16_t *port);

/* Conversions, round to nearest even like the library promises (docs/reductions.md). */
uint16_t perf_f32_to_bf16(float f);
float perf_bf16_to_f32(uint16_t h);
uint16_t perf_f32_to_f16(float f);
float perf_f16_to_f32(uint16_t h);

void perf_store(perf_dtype_t dt, void *p, size_t i, double v);
double perf_load(perf_dtype_t dt, const void *p, size_t i);

/*
 * Test value of element g of rank r at iteration it: a multiple of 1/8 whose
 * magnitude is small enough that every partial sum over `nranks` ranks is
 * exact in the element type (bf16 has 8 significant bits), so a reduction in
 * any order gives exactly the reference.
 */
double perf_value(perf_dtype_t dt, int nranks, int r, int it, size_t g);
/* The expected reduction of element g over ranks 0..nranks-1: f32 accumulation
 * (f64 for f64), AVG divides in the accumulator type, then one rounding to dt. */
double perf_reference(perf_dtype_t dt, perf_op_t op, int nranks, int it, size_t g);
/* Fill elements [0, n) of p with perf_value(rank, it, first + i). */
void perf_fill(perf_dtype_t dt, void *p, size_t n, int nranks, int rank, int it, size_t first);
/* Count elements i in [0, n) of p that differ from perf_value(rank, it, first + i). */
long perf_check_values(perf_dtype_t dt, const void *p, size_t n, int nranks, int rank, int it,
                       size_t first);
/* Count elements i in [0, n) of p that differ from perf_reference(first + i). */
long perf_check_reduced(perf_dtype_t dt, perf_op_t op, const void *p, size_t n, int nranks, int it,
                        size_t first);

/* Sizes of the sweep: b, b*f, b*f^2, ... <= e (at most PERF_MAX_SIZES). */
#define PERF_MAX_SIZES 64
int perf_sweep(size_t b, size_t e, double f, size_t *sizes);

/* One line of the table. */
typedef struct perf_row {
    const char *coll; /* "ag", "rs", "bc" (broadcast) or "push" */
    size_t bytes;     /* full gathered buffer / reduce input, as nccl-tests */
    size_t count;     /* elements per rank (bucket: elements of the whole bucket) */
    const char *type, *redop;
    double us;  /* average per iteration, slowest rank */
    long wrong; /* elements wrong, summed over ranks */
    int nranks;
} perf_row_t;

/* Fixed description of a run, repeated in every CSV line and in the JSON header. */
typedef struct perf_meta {
    const char *impl;      /* ofccl or mpi */
    const char *transport; /* provider name, or MPI btl list */
    const char *algo;      /* ofccl algorithm, "-" for MPI */
    const char *mem;       /* pool, reg, plain */
    const char *mode;      /* flat or bucket */
    int nranks, iters, warmup, check;
    int in_place; /* 0: separate send and receive buffers (the default) */
} perf_meta_t;

typedef struct perf_out {
    perf_meta_t meta;
    FILE *csv, *json;
    int rows;
} perf_out_t;

/* Open the CSV/JSON files (either path may be NULL) and print the table header. */
int perf_out_open(perf_out_t *o, const perf_meta_t *meta, const char *csv, const char *json);
void perf_out_row(perf_out_t *o, const perf_row_t *r);
/* One collective's result as a row: coll 0 = all-gather ("ag", no redop), else
 * reduce-scatter ("rs" with `op`). */
void perf_out_result(perf_out_t *o, int coll, size_t bytes, size_t count, perf_dtype_t dt,
                     perf_op_t op, double us, long wrong, int nranks);
/* Broadcast ("bc") or push: size is the bytes every receiver gets, busbw =
 * algbw (as nccl-tests for broadcast). */
void perf_out_bytes(perf_out_t *o, const char *coll, size_t bytes, size_t count, const char *type,
                    double us, long wrong, int nranks);
/* `extra_json`: optional "key": value members appended to the JSON object. */
int perf_out_close(perf_out_t *o, const char *extra_json);

/* The -o choices of ofccl_perf and mpi_perf: ag, rs, all, bc, push, bp, in
 * that order; whether choice `sel` runs collective `coll` (0 ag, 1 rs, 3 bc,
 * 4 push): all is ag and rs, bp is bc and push. */
int perf_coll_selected(int sel, int coll);

/*
 * Weight push layout shared by ofccl_perf and mpi_perf: PERF_PUSH_NT tensors
 * of bytes/PERF_PUSH_NT bytes (the last takes the rest), grouped in order into
 * buckets of about bucket_bytes (a larger tensor alone), as
 * ofccl_push_plan_create groups them. Sender i of n owns bytes
 * [i*c, min((i+1)*c, len)) of each tensor, c = ceil(len / n).
 */
#define PERF_PUSH_NT 8
size_t perf_push_tensor_bytes(size_t bytes, int t);
/* First tensor of each bucket, and the number of buckets (<= PERF_PUSH_NT);
 * first[nbuckets] = PERF_PUSH_NT. */
int perf_push_buckets(size_t bytes, size_t bucket_bytes, int first[PERF_PUSH_NT + 1]);
/* Sender i's piece of a len-byte tensor: offset, length. */
size_t perf_push_shard(size_t len, int nsenders, int i, size_t *off);
/* Byte i of tensor t at iteration it: what senders write and receivers check. */
unsigned char perf_push_byte(int t, size_t i, int it);

/*
 * Progress of a sweep on stderr ("ofccl_perf: bc 5/14 sizes, about 12 s
 * left"), only when stderr is a terminal: piped or redirected runs stay
 * quiet. Sizes grow geometrically, so time left is estimated from the bytes
 * still to move at the rate measured so far.
 */
typedef struct perf_progress {
    const char *tool;
    int on, total, done;
    double t0_us, bytes_total, bytes_done;
} perf_progress_t;
void perf_progress_start(perf_progress_t *p, const char *tool, int enabled);
/* Announce a sweep of n sizes (called once per sweep; totals add up). */
void perf_progress_add(perf_progress_t *p, const size_t *sizes, int n);
void perf_progress_step(perf_progress_t *p, const char *what, size_t bytes);
void perf_progress_end(perf_progress_t *p);

#endif
