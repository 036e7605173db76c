/* Helpers the GPU test files share (test_gpu.c defines them). */
#ifndef OFCCL_TEST_GPU_GTEST_H
#define OFCCL_TEST_GPU_GTEST_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"
#include "ofccl.h"

extern ofccl__gpu_t *gpu; /* this process's driver (gpu_up) */
extern int dev;           /* this rank's GPU */

/* The reference byte i of what `rank` contributes, for a test's `salt`. */
uint8_t byte_of(int rank, size_t i, unsigned salt);
/* Open the driver and take this rank's GPU; nonzero where there is none. */
int gpu_up(int rank);
/* A stream of the test's, held by a wait on a host word until released,
 * made the communicator's: collectives posted on it cannot complete before
 * release_stream, whatever the watcher does meanwhile. */
typedef struct held_stream {
    ofccl__gpu_stream_t s;
    _Atomic uint64_t *word;
    void *dword;
} held_stream_t;
int hold_stream(ofccl_comm_t *comm, held_stream_t *h);
/* Let it go, wait for it, and give the communicator the default stream back. */
int release_stream(ofccl_comm_t *comm, held_stream_t *h);
/* Plain device memory (not the pool), and synchronous copies to and from it. */
void *dmalloc(size_t len);
int put(void *d, const uint8_t *h, size_t len);
int get(uint8_t *h, const void *d, size_t len);

/* test_gpu_bucket.c: bucketed all-gather (in place and not, uneven tensors,
 * f32 and bf16) and bucketed broadcast from every root, byte for byte. */
int gpu_bucket(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* test_gpu_reg.c: the caller's GPU memory registered (cudaMalloc and virtual
 * memory), and a registration whose size differs on one rank. */
int gpu_register(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* One all-gather of `count` elements per rank into `out` from `in` (NULL: in
 * place), every byte checked; 0 when right. */
int gather_at(int rank, int n, ofccl_comm_t *comm, char *out, const char *in, size_t count,
              ofccl_dtype_t dt, unsigned salt, const char *what);
int gpu_register_size(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* test_gpu_rs.c: reduce-scatter on GPU memory, checked against the CPU
 * reduction bit for bit; an operator that differs gives MISMATCH. */
int gpu_reduce_scatter(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* One reduce-scatter of `count` elements per rank, every element checked
 * (`exact`: bit for bit against the CPU's direct order, else within the
 * bound of any order); where: 0 pool in place, 1 pool, 2 other GPU memory,
 * 3 registered, 4 other GPU memory in place. 0 when right. */
int gpu_rs_check(int me, ofccl_comm_t *comm, size_t count, int where, ofccl_dtype_t dt,
                 ofccl_redop_t op, unsigned salt, int exact);
/* test_gpu_staged.c: two simulated hosts, GPU memory staged through host
 * memory chunk by chunk. */
int gpu_staged(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* The same over shm with GPU memory asked of the fabric (FI_HMEM). */
int gpu_hmem(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* One host, the GPU peer class off: the host engine on GPU memory through
 * the local transport (CUDA IPC). */
int gpu_engine(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);
/* test_gpu_push.c: weight push on GPU memory (a GPU plan). */
int gpu_push(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);

/* test_gpu_watch.c: a peer dead, stalled or an abort while the survivors
 * only wait for their stream; `watch_case` names the scenario. */
extern const char *watch_case;
int gpu_watch(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm);

#endif
