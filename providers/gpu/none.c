/*
 * The GPU calls of a build without CUDA (no nvcc at build time): the library
 * still links and every CPU path works; each call says why there is no GPU.
 */
#include "gpu.h"

#define NO_CUDA                                                                                    \
    "no GPU support in this build of ofccl (CUDA's nvcc was not found when it was built)"

bool ofccl__gpu_built(void)
{
    return false;
}

int ofccl__gpu_open(const ofccl__log_t *log, ofccl__gpu_t **out, ofccl__err_t *e)
{
    (void)log;
    *out = NULL;
    return ofccl__fail(NULL, 0, e, OFCCL_ERR_NOT_SUPPORTED, NO_CUDA);
}

void ofccl__gpu_close(ofccl__gpu_t *g)
{
    (void)g;
}

int ofccl__gpu_use_driver(void (*install)(struct ofccl__gpu_fns *fn, int ndev), int ndev)
{
    (void)install;
    (void)ndev;
    return OFCCL_ERR_NOT_SUPPORTED;
}

ofccl__gpu_t *ofccl__gpu_process(const ofccl__log_t *log, bool load)
{
    (void)log;
    (void)load;
    return NULL;
}

int ofccl__gpu_device_count(const ofccl__gpu_t *g)
{
    (void)g;
    return 0;
}

#define UNSUPPORTED return ofccl__fail(NULL, 0, e, OFCCL_ERR_NOT_SUPPORTED, NO_CUDA)

int ofccl__gpu_device_info(ofccl__gpu_t *g, int dev, ofccl__gpu_dev_info_t *info, ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_driver_version(const ofccl__gpu_t *g, char *buf, size_t len)
{
    if (len > 0)
        buf[0] = '\0';
}

int ofccl__gpu_current_device(ofccl__gpu_t *g, int fallback)
{
    return -1;
}

int ofccl__gpu_device_by_bus(ofccl__gpu_t *g, const char *bus_id)
{
    return -1;
}

bool ofccl__gpu_can_access(ofccl__gpu_t *g, int dev, int peer, char *why, size_t len)
{
    return false;
}

int ofccl__gpu_ptr_kind(ofccl__gpu_t *g, const void *p, uintptr_t *base, size_t *len)
{
    return -1;
}

int ofccl__gpu_mem_alloc(ofccl__gpu_t *g, int dev, size_t len, void **ptr, ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_mem_free(ofccl__gpu_t *g, int dev, void *ptr) {}

int ofccl__gpu_ipc_export(ofccl__gpu_t *g, int dev, const void *ptr,
                          uint8_t handle[OFCCL__GPU_IPC_BYTES], size_t *offset, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_ipc_open(ofccl__gpu_t *g, int dev, const uint8_t handle[OFCCL__GPU_IPC_BYTES],
                        void **ptr, ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_ipc_close(ofccl__gpu_t *g, int dev, void *ptr) {}

int ofccl__gpu_ipc_map(ofccl__gpu_t *g, int dev, int pid, uint64_t id,
                       const uint8_t handle[OFCCL__GPU_IPC_BYTES], void **base, ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_ipc_unmap(ofccl__gpu_t *g, int dev, void *base) {}

bool ofccl__gpu_ipc_capable(ofccl__gpu_t *g, const void *p)
{
    return false;
}

int ofccl__gpu_host_register(ofccl__gpu_t *g, int dev, void *p, size_t len, void **devptr,
                             ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_host_unregister(ofccl__gpu_t *g, int dev, void *p) {}

int ofccl__gpu_share_export(ofccl__gpu_t *g, int dev, const void *p, size_t len,
                            ofccl__gpu_share_t *s, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_share_open(ofccl__gpu_t *g, int dev, ofccl__gpu_share_t *s, void **base,
                          ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_share_close(ofccl__gpu_t *g, int dev, int kind, void *base, size_t map_len) {}

void ofccl__gpu_share_clear(ofccl__gpu_share_t *s) {}

long ofccl__gpu_mappings(void)
{
    return 0;
}

uint64_t ofccl__gpu_buffer_id(ofccl__gpu_t *g, const void *p)
{
    return 0;
}

int ofccl__gpu_vmm_alloc(ofccl__gpu_t *g, int dev, size_t piece, int npieces, void **ptr,
                         size_t *total, ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_vmm_free(ofccl__gpu_t *g, int dev, void *ptr, size_t total) {}

int ofccl__gpu_stream_create(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t *s, ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_stream_destroy(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s) {}

int ofccl__gpu_event_create(ofccl__gpu_t *g, int dev, bool timing, ofccl__gpu_event_t *ev,
                            ofccl__err_t *e)
{
    UNSUPPORTED;
}

void ofccl__gpu_event_destroy(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev) {}

int ofccl__gpu_event_record(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__gpu_stream_t s,
                            ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_event_query(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_event_sync(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__err_t *e)
{
    UNSUPPORTED;
}

float ofccl__gpu_event_ms(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t a, ofccl__gpu_event_t b)
{
    return -1;
}

int ofccl__gpu_stream_wait_event(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s,
                                 ofccl__gpu_event_t ev, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_wait_flag(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *flag,
                         uint64_t value, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_write_flag(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *flag,
                          uint64_t value, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_copy(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *dst, const void *src,
                    size_t len, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_copy_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *dsts,
                           int ndst, const void *src, size_t len, int sms, const void *abort,
                           ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_signal(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *flags, int n,
                      uint64_t value, const void *abort, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_reduce_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *dst,
                             const void *const *srcs, int nsrc, size_t count, int dtype, int kind,
                             double scalar, int ndiv, int sms, const void *abort, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_mem_info(ofccl__gpu_t *g, int dev, size_t *free_bytes, size_t *total,
                        ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_stream_sync(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_load_kernels(ofccl__gpu_t *g, int dev, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_chain(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, const void *src, void *next,
                     size_t len, size_t chunk, int blocks, void *in, void *out, uint64_t base,
                     const void *abort, ofccl__err_t *e)
{
    UNSUPPORTED;
}

int ofccl__gpu_copy_sync(ofccl__gpu_t *g, int dev, void *dst, const void *src, size_t len,
                         ofccl__err_t *e)
{
    UNSUPPORTED;
}
