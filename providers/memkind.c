/*
 * Memory kinds and the host's executor.
 *
 * A buffer's kind is learned from where it lives, never taken on the
 * caller's word; everything that records a kind (registrations, pool
 * buffers, memory references, a bucket's tensors, the collective entry
 * points) asks here, the one oracle. CUDA is asked (its pointer attributes)
 * only once something in the process has loaded the driver: a host-only
 * program never starts CUDA because of ofccl, and asking costs it a check
 * that the driver is not loaded.
 */
#include <stdatomic.h>
#include <string.h>

#include "exec_ops.h"
#include "gpu/gpu.h"

ofccl__mem_kind_t ofccl__mem_kind_of(const void *p)
{
    static _Atomic(ofccl__gpu_t *) g;
    ofccl__gpu_t *gp;

    if (p == NULL)
        return OFCCL__MEM_HOST;
    gp = atomic_load_explicit(&g, memory_order_acquire);
    if (gp == NULL) {
        gp = ofccl__gpu_process(NULL, false);
        if (gp == NULL)
            return OFCCL__MEM_HOST; /* nothing in the process has loaded CUDA */
        atomic_store_explicit(&g, gp, memory_order_release);
    }
    return ofccl__gpu_ptr_kind(gp, p, NULL, NULL);
}

int ofccl__exec_host_copy(void *state, void *dst, const void *src, size_t len, uint64_t *ticket)
{
    (void)state;
    (void)ticket;
    if (len > 0)
        memcpy(dst, src, len);
    return 0;
}

int ofccl__exec_host_fill(void *state, void *dst, int byte, size_t len, uint64_t *ticket)
{
    (void)state;
    (void)ticket;
    if (len > 0)
        memset(dst, byte, len);
    return 0;
}

int ofccl__exec_stub_reduce(void *state, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                            const void *const *srcs, int nsrc, size_t count, int ndiv,
                            uint64_t *ticket)
{
    (void)state;
    (void)dtype;
    (void)op;
    (void)dst;
    (void)srcs;
    (void)nsrc;
    (void)count;
    (void)ndiv;
    (void)ticket;
    return OFCCL_ERR_NOT_SUPPORTED;
}

int ofccl__exec_test_done(void *state, uint64_t ticket)
{
    (void)state;
    (void)ticket;
    return 1;
}

int ofccl__exec_stub_copy_on(void *state, ofccl_stream_t stream, void *dst, const void *src,
                             size_t len)
{
    return OFCCL_ERR_NOT_SUPPORTED;
}

int ofccl__exec_stub_reduce_on(void *state, ofccl_stream_t stream, ofccl_dtype_t dtype,
                               ofccl_redop_t op, void *dst, const void *const *srcs, int nsrc,
                               size_t count, int ndiv)
{
    return OFCCL_ERR_NOT_SUPPORTED;
}

int ofccl__exec_stub_mark(void *state, ofccl_stream_t stream, uint64_t *mark)
{
    return OFCCL_ERR_NOT_SUPPORTED;
}

void ofccl__exec_stub_unmark(void *state, uint64_t mark) {}

int ofccl__exec_stub_word(void *state, uint64_t *handle, _Atomic uint64_t **word, void **dev,
                          uint64_t *value)
{
    return OFCCL_ERR_NOT_SUPPORTED;
}

void ofccl__exec_stub_word_put(void *state, uint64_t handle) {}

int ofccl__exec_stub_wait_word(void *state, ofccl_stream_t stream, void *dev, uint64_t value)
{
    return OFCCL_ERR_NOT_SUPPORTED;
}

/* What the transports need of host memory: copies. lib/core registers the
 * full host executor (with the reduction kernels) over it. */
const ofccl__exec_ops_t ofccl__exec_host_ops = {
    .size = sizeof(ofccl__exec_ops_t),
    .name = "host",
    .copy = ofccl__exec_host_copy,
    .fill = ofccl__exec_host_fill,
    .reduce = ofccl__exec_stub_reduce,
    .test = ofccl__exec_test_done,
    OFCCL__EXEC_NO_STREAMS,
};

void ofccl__exec_reg_init(ofccl__exec_reg_t *reg)
{
    memset(reg, 0, sizeof(*reg));
    reg->ex[0] = (ofccl__exec_t){&ofccl__exec_host_ops, NULL, OFCCL__MEM_HOST};
    reg->n = 1;
}

int ofccl__exec_reg_add(ofccl__exec_reg_t *reg, ofccl__mem_kind_t kind,
                        const ofccl__exec_ops_t *ops, void *state)
{
    int i = 0;

    while (i < reg->n && reg->ex[i].kind != kind)
        i++;
    if (i == OFCCL__EXEC_MAX)
        return OFCCL_ERR_RESOURCE;
    reg->ex[i] = (ofccl__exec_t){ops, state, kind};
    reg->n += i == reg->n;
    return 0;
}

const ofccl__exec_t *ofccl__exec_find(const ofccl__exec_reg_t *reg, ofccl__mem_kind_t dst,
                                      ofccl__mem_kind_t src)
{
    ofccl__mem_kind_t want = dst != OFCCL__MEM_HOST ? dst : src;

    for (int i = 0; i < reg->n; i++)
        if (reg->ex[i].kind == want)
            return &reg->ex[i];
    return NULL;
}
