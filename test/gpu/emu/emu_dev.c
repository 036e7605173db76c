/*
 * The emulated device (emu.h): devices, contexts, errors, and ofccl's
 * kernels as a module. Each device answers the attributes the library asks
 * for as a compute capability 9 GPU with 64-bit stream memory operations and
 * host registration would (with 8 multiprocessors); every device reaches
 * every other (peer access), and each has OFCCL__EMU_MEM bytes.
 */
#include <stdio.h>
#include <string.h>

#include "emu.h"

struct CUctx_st {
    int dev;
};
struct CUmod_st {
    int loaded;
};

static int ndevices;
static struct CUctx_st ctxs[OFCCL__GPU_MAX_DEVICES];
static struct CUmod_st module;
static struct CUfunc_st funcs[OFCCL__GPU_KERNELS];
static _Thread_local CUcontext current;

int ofccl__emu_current_dev(void)
{
    return current != NULL ? current->dev : -1;
}

/* ---- driver, devices, contexts, errors ---- */
static CUresult e_init(unsigned int flags)
{
    return CUDA_SUCCESS;
}

static CUresult e_version(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult res;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument (emulated device)"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory (emulated device)"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of a peer's memory failed"},
};

static CUresult e_err(CUresult res, const char **s, int text)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(*errors); i++)
        if (errors[i].res == res) {
            *s = text ? errors[i].text : errors[i].name;
            return CUDA_SUCCESS;
        }
    *s = text ? "unknown error" : "CUDA_ERROR_UNKNOWN";
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult e_err_string(CUresult res, const char **s)
{
    return e_err(res, s, 1);
}

static CUresult e_err_name(CUresult res, const char **s)
{
    return e_err(res, s, 0);
}

static CUresult e_count(int *n)
{
    *n = ndevices;
    return CUDA_SUCCESS;
}

static CUresult e_get(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static CUresult e_name(char *name, int len, CUdevice d)
{
    snprintf(name, (size_t)len, "ofccl emulated GPU %d (host memory)", d);
    return CUDA_SUCCESS;
}

static CUresult e_attr(int *v, CUdevice_attribute a, CUdevice d)
{
    *v = a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT            ? 8
         : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR      ? 9
         : a == CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS ? 1
         : a == CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES       ? 1
         : a == CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED       ? 1
                                                                  : 0;
    return CUDA_SUCCESS;
}

static CUresult e_bus(char *bus, int len, CUdevice d)
{
    snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + d);
    return CUDA_SUCCESS;
}

static CUresult e_by_bus(CUdevice *d, const char *bus)
{
    unsigned dom, b;

    if (sscanf(bus, "%x:%x", &dom, &b) != 2 || b < 0x10 || (int)b - 0x10 >= ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = (int)b - 0x10;
    return CUDA_SUCCESS;
}

static CUresult e_total(size_t *bytes, CUdevice d)
{
    *bytes = OFCCL__EMU_MEM;
    return CUDA_SUCCESS;
}

static CUresult e_can_access(int *can, CUdevice a, CUdevice b)
{
    *can = 1;
    return CUDA_SUCCESS;
}

static CUresult e_ctx_retain(CUcontext *c, CUdevice d)
{
    if (d < 0 || d >= ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    ctxs[d].dev = d;
    *c = &ctxs[d];
    return CUDA_SUCCESS;
}

static CUresult e_ctx_release(CUdevice d)
{
    return CUDA_SUCCESS;
}

static CUresult e_ctx_get(CUcontext *c)
{
    *c = current;
    return CUDA_SUCCESS;
}

static CUresult e_ctx_set(CUcontext c)
{
    current = c;
    return CUDA_SUCCESS;
}

static CUresult e_ctx_dev(CUdevice *d)
{
    if (current == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = current->dev;
    return CUDA_SUCCESS;
}

/* ---- modules: ofccl's kernels, by name ---- */
static CUresult e_mod_load(CUmodule *m, const void *image)
{
    module.loaded = 1;
    *m = &module;
    return CUDA_SUCCESS;
}

static CUresult e_mod_fn(CUfunction *f, CUmodule m, const char *name)
{
    for (int k = 0; k < OFCCL__GPU_KERNELS; k++)
        if (strcmp(name, ofccl__gpu_kernel_names[k]) == 0) {
            funcs[k].kernel = k;
            *f = &funcs[k];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

static CUresult e_mod_unload(CUmodule m)
{
    return CUDA_SUCCESS;
}

void ofccl__emu_dev_install(struct ofccl__gpu_fns *fn, int ndev)
{
    ndevices = ndev < OFCCL__GPU_MAX_DEVICES ? ndev : OFCCL__GPU_MAX_DEVICES;
    fn->cuInit = e_init;
    fn->cuDriverGetVersion = e_version;
    fn->cuGetErrorString = e_err_string;
    fn->cuGetErrorName = e_err_name;
    fn->cuDeviceGetCount = e_count;
    fn->cuDeviceGet = e_get;
    fn->cuDeviceGetName = e_name;
    fn->cuDeviceGetAttribute = e_attr;
    fn->cuDeviceGetPCIBusId = e_bus;
    fn->cuDeviceGetByPCIBusId = e_by_bus;
    fn->cuDeviceTotalMem = e_total;
    fn->cuDeviceCanAccessPeer = e_can_access;
    fn->cuDevicePrimaryCtxRetain = e_ctx_retain;
    fn->cuDevicePrimaryCtxRelease = e_ctx_release;
    fn->cuCtxGetCurrent = e_ctx_get;
    fn->cuCtxSetCurrent = e_ctx_set;
    fn->cuCtxGetDevice = e_ctx_dev;
    fn->cuModuleLoadData = e_mod_load;
    fn->cuModuleGetFunction = e_mod_fn;
    fn->cuModuleUnload = e_mod_unload;
}
