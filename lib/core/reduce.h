/*
 * Host reduction kernels for reduce-scatter: f32, f64, bf16, f16 (the 16-bit
 * types accumulate in f32), ops sum, avg and premul-sum. Written as simple
 * blocked loops the compiler auto-vectorises; no allocation.
 */
#ifndef OFCCL_CORE_REDUCE_H
#define OFCCL_CORE_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ofccl.h"

/*
 * dst[i] = post( sum over k < nsrc of pre(srcs[k][i]) ), i < count, where
 * pre(x) = x * op.scalar for OFCCL_OP_PREMUL_SUM and x otherwise, and
 * post(s) = s / ndiv when `ndiv` > 0 (the caller passes the rank count for
 * OFCCL_OP_AVG on the last step, 0 on intermediate steps).
 * The sum runs in f32 for bf16/f16/f32 and f64 for f64, in source order, and
 * the result is rounded once to dtype (round-to-nearest-even). `dst` may alias
 * srcs[0] (in-place accumulate) but no other source.
 * Returns 0, or OFCCL_ERR_INVALID_ARG for a bad dtype/op/nsrc.
 */
int ofccl__reduce(ofccl_dtype_t dtype, ofccl_redop_t op, void *dst, const void *const *srcs,
                  int nsrc, size_t count, int ndiv);

/* The kernel set ofccl__reduce uses on this CPU, the widest it runs:
 * "avx512bf16", "avx512", "avx2" or "base". All give the same bits, but for
 * the NaN payload where two NaNs meet (docs/reductions.md); avx512bf16 gives
 * exactly avx512's. */
const char *ofccl__reduce_isa(void);

/* ofccl__reduce on the named kernel set, for tests that compare them;
 * OFCCL_ERR_NOT_SUPPORTED when this build or CPU cannot run it,
 * OFCCL_ERR_INVALID_ARG for an unknown name. */
int ofccl__reduce_on(const char *isa, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                     const void *const *srcs, int nsrc, size_t count, int ndiv);

/* Scalar conversions (round-to-nearest-even; NaN stays NaN, infinities and
 * subnormals handled), exposed for tests and for the reference checks. */
float ofccl__bf16_to_f32(uint16_t h);
uint16_t ofccl__f32_to_bf16(float f);
float ofccl__f16_to_f32(uint16_t h);
uint16_t ofccl__f32_to_f16(float f);

/* Bytes per second of ofccl__reduce for (dtype, nsrc) on this machine, for
 * perf ceilings; measured over `bytes` of output. */
double ofccl__reduce_rate(ofccl_dtype_t dtype, int nsrc, size_t bytes);

#endif
