/*
 * libfabric memory registration for every FI_MR_* mode ofccl accepts:
 * provider keys (read back) or unpredictable keys of our own, endpoint-bound
 * regions, and virtual-address or offset addressing. Memory peers write into
 * is ordinary page-aligned memory here.
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

int ofccl__fab_mr_reg_raw(ofccl__ep_t *ep, void *addr, size_t len, uint64_t fi_access,
                          struct fid_mr **out, uint64_t *key_out, ofccl__err_t *e)
{
    ofccl__prov_t *prov = ep->prov;
    struct ofccl__fab_prov *fp = ofccl__fab_prov_of(prov);
    const ofccl__prov_caps_t *c = &prov->caps;
    const ofccl__log_t *log = prov->log;
    struct fid_mr *mr = NULL;
    uint64_t key = 0, want = key_out != NULL ? *key_out : 0;
    int ret = -FI_ENOKEY;

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
        ret = fi_mr_reg(fp->domain, addr, len, fi_access, 0, key, 0, &mr, NULL);
    }
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
    ret = ofccl__fab_mr_reg_raw(ep, mr->addr, mr->len, fi_access, &fmr, &mr->key, e);
    if (ret != 0)
        return ret;
    mr->handle = fmr;
    mr->desc = ep->prov->caps.mr_local ? fi_mr_desc(fmr) : NULL;
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
