/*
 * Between reduce.c and reduce_bf16.c (the bf16 kernels for CPUs with
 * AVX512-BF16); nothing else includes this.
 */
#ifndef OFCCL_CORE_REDUCE_BF16_H
#define OFCCL_CORE_REDUCE_BF16_H

#include <stddef.h>

#if defined(__x86_64__) &&                                                                         \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
#define OFCCL__RED_AVX512BF16 1

/* Elements per block in both kernels (reduce.c checks it equals its own). */
#define OFCCL__BF16_BLOCK 512

/* The bf16 kernel of the avx512bf16 set: elements [off, off + count) as
 * reduce.c's table entries do them (`divide`: 0 for SUM, 1 to divide by
 * `ndiv`; `c` the scalar). Only for CPUs and OSes that run AVX512-F/BW/DQ/VL
 * and AVX512-BF16. Returns 0, or 1 without touching dst when MXCSR.DAZ is
 * set: then the avx512 kernels must do the work. */
int ofccl__bf16_avx512bf16(int divide, void *dst, const void *const *srcs, int nsrc, size_t off,
                           size_t count, double c, int ndiv);

/* Elements [off, off + n) of the same reduction, done by the avx512 table's
 * bf16 entry: the blocks the fast kernel cannot round, or leaves to it. `off`
 * is the start of one of the table's blocks (of the call's first element
 * plus a multiple of OFCCL__BF16_BLOCK), so the table cuts the range alike. */
void ofccl__bf16_redo_avx512(int divide, void *dst, const void *const *srcs, int nsrc, size_t off,
                             size_t n, double c, int ndiv);
#endif

#endif
