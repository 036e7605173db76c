/* The host reduction's throughput on this machine, the ceiling a
 * reduce-scatter's reduction puts on it (`ofccl_info -k` prints it per size).
 * Setup time only: it allocates. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "reduce.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Ordinary finite values (no subnormals, no NaN), so the timing is the common
 * case and not a microcode assist. */
static void fill(ofccl_dtype_t dtype, void *buf, size_t count, int k)
{
    for (size_t i = 0; i < count; i++) {
        float v = 1.0f + (float)((i * 7 + (size_t)k * 13) % 251) * (1.0f / 256.0f);

        switch (dtype) {
        case OFCCL_F32:
            ((float *)buf)[i] = v;
            break;
        case OFCCL_F64:
            ((double *)buf)[i] = (double)v;
            break;
        case OFCCL_BF16:
            ((uint16_t *)buf)[i] = ofccl__f32_to_bf16(v);
            break;
        default:
            ((uint16_t *)buf)[i] = ofccl__f32_to_f16(v);
            break;
        }
    }
}

/*
 * Output bytes per second of a SUM (ndiv 0, the intermediate-step case) over
 * `bytes` of output with `nsrc` distinct malloc'd sources: one warm-up call,
 * then repetitions for at least 50 ms (3 to 1000 of them), best repetition
 * reported. Returns 0 for bad arguments or when memory runs out.
 */
double ofccl__reduce_rate(ofccl_dtype_t dtype, int nsrc, size_t bytes)
{
    size_t esize = ofccl_dtype_size(dtype), count;
    ofccl_redop_t op = {OFCCL_OP_SUM, 1.0};
    void **bufs;
    double best = 0.0, start;
    int ok = 1;

    if (esize == 0 || nsrc < 1 || bytes < esize)
        return 0.0;
    count = bytes / esize;
    bytes = count * esize;
    bufs = calloc((size_t)nsrc + 1, sizeof(*bufs));
    if (bufs == NULL)
        return 0.0;
    for (int k = 0; k <= nsrc && ok; k++) {
        bufs[k] = malloc(bytes);
        if (bufs[k] == NULL)
            ok = 0;
        else
            fill(dtype, bufs[k], count, k);
    }
    if (ok)
        ok = ofccl__reduce(dtype, op, bufs[nsrc], (const void *const *)bufs, nsrc, count, 0) == 0;
    start = now_s();
    for (int rep = 0; ok && rep < 1000 && (rep < 3 || now_s() - start < 0.05); rep++) {
        double t0 = now_s(), dt;

        ofccl__reduce(dtype, op, bufs[nsrc], (const void *const *)bufs, nsrc, count, 0);
        dt = now_s() - t0;
        if (best == 0.0 || dt < best)
            best = dt;
    }
    for (int k = 0; k <= nsrc; k++)
        free(bufs[k]);
    free(bufs);
    if (!ok || best <= 0.0)
        return 0.0;
    return (double)bytes / best;
}
