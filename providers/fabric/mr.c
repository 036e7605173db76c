/*
 * libfabric memory registration for every FI_MR_* mode ofccl accepts:
 * provider keys (read back) or unpredictable keys of our own, endpoint-bound
 * regions, and virtual-address or offset addressing; GPU memory where the
 * domain takes it (FI_HMEM). Memory peers write into is ordinary page-aligned
 * memory here, or the device's.
 */
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "util.h"

/* Random keys collide with live ones about never; a few retries bound the
 * damage of a provider that keeps answering -FI_ENOKEY. */
#define KEY_TRIES 8

static uint64_t key_mask(size_t key_size)
{
    return key_size >= 8 ? UINT64_MAX : ((uint64_t)1 << (8 * key_size)) - 1;
}

/* One registration: host memory by fi_mr_reg, device memory (a domain with
 * caps.hmem) by fi_mr_regattr naming CUDA and the device, device-only so that
 * a provider may move it device to device (shm's CUDA IPC). */
static int reg_one(struct ofccl__fab_prov *fp, void *addr, size_t len, uint64_t fi_access,
                   uint64_t key, ofccl__mem_kind_t kind, struct fid_mr **mr)
{
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = fi_access,
                              .requested_key = key,
                              .iface = FI_HMEM_CUDA};

    if (kind == OFCCL__MEM_HOST)
        return fi_mr_reg(fp->domain, addr, len, fi_access, 0, key, 0, mr, NULL);
    attr.device.cuda = kind;
    return fi_mr_regattr(fp->domain, &attr, FI_HMEM_DEVICE_ONLY, mr);
}

int ofccl__fab_mr_reg_raw(ofccl__ep_t *ep, void *addr, size_t len, uint64_t fi_access,
                          ofccl__mem_kind_t kind, struct fid_mr **out, uint64_t *key_out,
                          ofccl__err_t *e)
{
    ofccl__prov_t *prov = ep->prov;
    struct ofccl__fab_prov *fp = ofccl__fab_prov_of(prov);
    const ofccl__prov_caps_t *c = &prov->caps;
    const ofccl__log_t *log = prov->log;
    struct fid_mr *mr = NULL;
    uint64_t key = 0, want = key_out != NULL ? *key_out : 0;
    int ret = -FI_ENOKEY;

    if (kind != OFCCL__MEM_HOST && !c->hmem)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: provider %s was not opened for GPU memory (FI_HMEM): "
                           "%zu bytes of cuda:%d cannot be registered with it",
                           ep->params.rank, c->name, len, kind);
    for (int t = 0; t < KEY_TRIES && ret == -FI_ENOKEY; t++) {
        if (!fp->real_prov_key && want != 0) {
            /* A key chosen by the caller (a composite endpoint gives both of
             * its transports one key): one try; a collision is the caller's. */
            key = want;
            t = KEY_TRIES;
        } else if (!fp->real_prov_key) {
            /* Unpredictable keys: a peer cannot guess its way into our memory. */
            if (ofccl__random_bytes(&key, sizeof(key)) != 0)
                return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                                   "getrandom failed while choosing a memory key");
            key &= key_mask(c->key_size);
        }
        ret = reg_one(fp, addr, len, fi_access, key, kind, &mr);
    }
    if (ret != 0 && kind != OFCCL__MEM_HOST)
        return ofccl__fail(log, OFCCL__SUB_PROV, e,
                           ret == -FI_ENOSYS ? OFCCL_ERR_NOT_SUPPORTED : OFCCL_ERR_PROVIDER,
                           "rank %d: registering %zu bytes of cuda:%d with %s (FI_HMEM) failed: "
                           "%s%s",
                           ep->params.rank, len, kind, c->name, fi_strerror(-ret),
                           ret == -FI_ENOSYS ? " (this libfabric has no CUDA support)" : "");
    if (ret != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                           "rank %d: registering %zu bytes at %p failed: %s", ep->params.rank, len,
                           addr, fi_strerror(-ret));
    if (c->mr_endpoint) {
        ret = fi_mr_bind(mr, &ofccl__fab_ep_of(ep)->ep->fid, 0);
        if (ret == 0)
            ret = fi_mr_enable(mr);
        if (ret != 0) {
            fi_close(&mr->fid);
            return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                               "rank %d: binding a region of %zu bytes to the endpoint failed: %s",
                               ep->params.rank, len, fi_strerror(-ret));
        }
    }
    /* Strict mode reads the key back even where we chose it, as verbs forces. */
    if (c->prov_key || fp->real_prov_key)
        key = fi_mr_key(mr);
    if (key == FI_KEY_NOTAVAIL) {
        fi_close(&mr->fid);
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "rank %d: provider %s has no 64-bit key for a region (raw keys)",
                           ep->params.rank, c->name);
    }
    *out = mr;
    if (key_out != NULL)
        *key_out = key;
    return 0;
}

int ofccl__fab_mr_reg(ofccl__ep_t *ep, ofccl__mr_t *mr, ofccl__err_t *e)
{
    uint64_t fi_access = 0;
    struct fid_mr *fmr;
    int ret;

    /* Least privilege: each ofccl access maps to the fewest libfabric rights. */
    if (mr->access & OFCCL__ACC_LOCAL)
        fi_access |= FI_WRITE | FI_READ;
    if (mr->access & OFCCL__ACC_REMOTE_WRITE)
        fi_access |= FI_REMOTE_WRITE;
    if (mr->access & OFCCL__ACC_REMOTE_READ)
        fi_access |= FI_REMOTE_READ;
    if (mr->access & OFCCL__ACC_REMOTE_ATOMIC)
        fi_access |= FI_REMOTE_WRITE | FI_REMOTE_READ;
    ret = ofccl__fab_mr_reg_raw(ep, mr->addr, mr->len, fi_access, mr->kind, &fmr, &mr->key, e);
    if (ret != 0)
        return ret;
    mr->handle = fmr;
    /* FI_MR_HMEM: device memory goes with its descriptor. */
    mr->desc = ep->prov->caps.mr_local || mr->kind != OFCCL__MEM_HOST ? fi_mr_desc(fmr) : NULL;
    return 0;
}

int ofccl__fab_mr_dereg(ofccl__mr_t *mr)
{
    /* Closing the MR is what revokes the key. */
    return fi_close(&((struct fid_mr *)mr->handle)->fid);
}

void *ofccl__fab_mem_alloc(size_t len, intptr_t *cookie)
{
    *cookie = 0;
    return aligned_alloc(4096, len);
}

void ofccl__fab_mem_free(void *ptr, size_t len, intptr_t cookie)
{
    (void)len;
    (void)cookie;
    free(ptr);
}
