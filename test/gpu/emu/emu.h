/*
 * The emulated device, a test double of the CUDA driver: host memory behind
 * the same entry points (struct ofccl__gpu_fns, providers/gpu/gpu_impl.h),
 * so that everything above the driver table (cuda.c, ops.c, kernel.c,
 * share.c, exec.c and every GPU algorithm) runs unchanged on a machine
 * without a GPU. test_gpu installs it with ofccl__gpu_use_driver before the
 * driver is opened; the library carries none of it.
 *
 * Device memory is shared memory (a memfd per allocation) that other
 * processes of the host map through /proc (CUDA IPC), and virtual memory is
 * pieces of the same kind mapped into a reserved range (cuMemCreate,
 * cuMemMap); the driver's pointer attributes answer from a table of those
 * ranges. As on a GPU, the host cannot touch device memory: its device
 * addresses have no access, and only the emulated device reaches the pages,
 * through a second mapping (ofccl__emu_host_view). A stream is a thread running its operations in
 * order: copies, 64-bit flag waits and writes, events, and ofccl's three kernels (copy, chain,
 * reduce), run on the host with the kernels' arguments and rules (kernels.cu, kernel_args.h).
 * Devices, contexts, errors and modules: emu_dev.c; memory: emu.c; streams, events and kernels:
 * emu_stream.c.
 */
#ifndef OFCCL_PROVIDERS_GPU_EMU_H
#define OFCCL_PROVIDERS_GPU_EMU_H

#include <cuda.h>

#include "gpu/gpu_impl.h"

#define OFCCL__EMU_MEM ((size_t)16 << 30) /* each emulated device's memory */

/* What CUfunction handles point at: which of ofccl's kernels. */
struct CUfunc_st {
    int kernel; /* OFCCL__GPU_K_* */
};

/* emu.c: fill `fn` with the emulated driver of `ndev` devices. */
void ofccl__emu_install(struct ofccl__gpu_fns *fn, int ndev);
/* emu_dev.c: the device, context, error and module entry points of
 * `ndev` devices. */
void ofccl__emu_dev_install(struct ofccl__gpu_fns *fn, int ndev);
/* The device of the calling thread's current context, or -1. */
int ofccl__emu_current_dev(void);
/* Where the emulated device reads and writes the memory at device address
 * `p` (its alias); `p` itself where it is host memory. */
void *ofccl__emu_host_view(const void *p);

/* emu_stream.c: the stream, event, copy and launch entry points. */
void ofccl__emu_stream_install(struct ofccl__gpu_fns *fn);
/* Wait for everything enqueued on every stream so far (as cuMemFree does
 * before it frees). */
void ofccl__emu_device_sync(void);

#endif
