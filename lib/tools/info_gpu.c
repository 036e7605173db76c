/*
 * ofccl_info's GPU section: whether this build has the GPU path, the driver
 * and devices this process sees, and for every pair of devices whether
 * their memory reaches each other directly (P2P), which the GPU peer class
 * needs (docs/gpu.md); where it does not, why, and what a collective on GPU
 * memory does instead.
 */
#include <stdio.h>

#include "gpu/gpu.h"
#include "info.h"

static void print_pairs(ofccl__gpu_t *g, int n)
{
    char why[160];
    int bad = 0;

    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (a != b && !ofccl__gpu_can_access(g, a, b, why, sizeof(why))) {
                printf("  GPU %d -> GPU %d: no P2P: %s\n", a, b, why);
                bad = 1;
            }
    if (n < 2)
        printf("  one GPU: collectives between processes on one GPU are staged through host "
               "memory\n");
    else if (bad)
        printf("  collectives on GPU memory between these GPUs are staged through host memory\n");
    else
        printf("  every pair P2P: all-gather and broadcast on GPU memory run on the GPUs (CUDA "
               "IPC, ofccl's copy kernel or the copy engines)\n");
}

void ofccl__info_gpu(void)
{
    ofccl__gpu_t *g;
    ofccl__gpu_dev_info_t d;
    ofccl__err_t e = {0};
    char ver[32];
    int n;

    printf("\nGPU memory:\n");
    if (!ofccl__gpu_built()) {
        printf("  not in this build: nvcc was not found when it was configured (CUDA's nvcc on "
               "PATH, or -Dcuda=enabled to require it): collectives take host memory only\n");
        return;
    }
    if (ofccl__gpu_open(NULL, &g, &e) != 0) {
        printf("  built in, unavailable here: %s\n", e.msg);
        return;
    }
    ofccl__gpu_driver_version(g, ver, sizeof(ver));
    n = ofccl__gpu_device_count(g);
    printf("  CUDA driver %s, %d device(s) visible\n", ver, n);
    for (int k = 0; k < n; k++) {
        if (ofccl__gpu_device_info(g, k, &d, &e) != 0) {
            printf("  GPU %d: %s\n", k, e.msg);
            continue;
        }
        printf("  GPU %d: %s, bus %s, sm_%d%d, %d SMs, %zu MiB; 64-bit stream memory "
               "operations: %s\n",
               k, d.name, d.bus_id, d.cc_major, d.cc_minor, d.sms, d.total_mem >> 20,
               d.mem_ops_64 ? "yes" : "no (the GPU peer class needs them)");
    }
    print_pairs(g, n);
    ofccl__gpu_close(g);
}
