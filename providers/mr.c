/*
 * Memory registration for every FI_MR_* mode ofccl accepts: provider keys
 * (read back) or unpredictable keys of our own, endpoint-bound regions, and
 * virtual-address or offset addressing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "local.h"
#include "prov_impl.h"
#include "util.h"

/* Random keys collide with live ones about never; a few retries bound the
 * damage of a provider that keeps answering -FI_ENOKEY. */
#define KEY_TRIES 8

static uint64_t key_mask(size_t key_size)
{
    return key_size >= 8 ? UINT64_MAX : ((uint64_t)1 << (8 * key_size)) - 1;
}

int ofccl__mr_reg_raw(ofccl__ep_t *ep, void *addr, size_t len, uint64_t fi_access,
                      struct fid_mr **out, uint64_t *key_out, ofccl__err_t *e)
{
    ofccl__prov_t *prov = ep->prov;
    const ofccl__prov_caps_t *c = &prov->caps;
    const ofccl__log_t *log = prov->log;
    struct fid_mr *mr = NULL;
    uint64_t key = 0;
    int ret = -FI_ENOKEY;

    for (int t = 0; t < KEY_TRIES && ret == -FI_ENOKEY; t++) {
        if (!prov->real_prov_key) {
            /* Unpredictable keys: a peer cannot guess its way into our memory. */
            if (ofccl__random_bytes(&key, sizeof(key)) != 0)
                return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INTERNAL,
                                   "getrandom failed while choosing a memory key");
            key &= key_mask(c->key_size);
        }
        ret = fi_mr_reg(prov->domain, addr, len, fi_access, 0, key, 0, &mr, NULL);
    }
    if (ret != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER,
                           "rank %d: registering %zu bytes at %p failed: %s", ep->params.rank, len,
                           addr, fi_strerror(-ret));
    if (c->mr_endpoint) {
        ret = fi_mr_bind(mr, &ep->ep->fid, 0);
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
    if (c->prov_key || prov->real_prov_key)
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

int ofccl__mr_reg(ofccl__ep_t *ep, void *addr, size_t len, unsigned access, ofccl__mr_t **out,
                  ofccl__err_t *e)
{
    const unsigned all = OFCCL__ACC_LOCAL | OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_READ |
                         OFCCL__ACC_REMOTE_ATOMIC;
    const ofccl__log_t *log = ep ? ep->prov->log : NULL;
    uint64_t fi_access = 0, key;
    struct fid_mr *fmr;
    ofccl__mr_t *mr;
    int ret;

    if (ep == NULL || out == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__mr_reg: no endpoint or output");
    if (addr == NULL || len == 0 || access == 0 || (access & ~all) != 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_INVALID_ARG,
                           "rank %d: cannot register %p (%zu bytes, access 0x%x): need a "
                           "non-NULL, non-empty buffer and known access flags",
                           ep->params.rank, addr, len, access);
    if (ofccl__fault_hit(&ep->prov->f_regs, ep->prov->fault.mr_fail_at, ep->prov->fault.mr_fail_at))
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: registering %zu bytes failed: Cannot allocate memory "
                           "(injected by OFCCL_FAULT)",
                           ep->params.rank, len);
    /* Least privilege: each ofccl access maps to the fewest libfabric rights. */
    if (access & OFCCL__ACC_LOCAL)
        fi_access |= FI_WRITE | FI_READ;
    if (access & OFCCL__ACC_REMOTE_WRITE)
        fi_access |= FI_REMOTE_WRITE;
    if (access & OFCCL__ACC_REMOTE_READ)
        fi_access |= FI_REMOTE_READ;
    if (access & OFCCL__ACC_REMOTE_ATOMIC)
        fi_access |= FI_REMOTE_WRITE | FI_REMOTE_READ;

    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    if (ep->lx != NULL) {
        ret = ofccl__lx_mr_reg(ep, addr, len, access, &mr->fid, &key, &mr->shared, e);
        fmr = NULL;
    } else {
        ret = ofccl__mr_reg_raw(ep, addr, len, fi_access, &fmr, &key, e);
        mr->fid = fmr;
    }
    if (ret != 0) {
        free(mr);
        return ret;
    }
    mr->addr = addr;
    mr->len = len;
    mr->desc = ep->prov->caps.mr_local ? fi_mr_desc(fmr) : NULL;
    mr->key = key;
    mr->base = ep->prov->caps.virt_addr ? (uint64_t)(uintptr_t)addr : 0;
    mr->access = access;
    mr->ep = ep;
    pthread_mutex_lock(&ep->lock);
    ep->n_mrs++;
    pthread_mutex_unlock(&ep->lock);
    *out = mr;
    return 0;
}

int ofccl__mr_dereg(ofccl__mr_t *mr)
{
    ofccl__ep_t *ep;
    int ret;

    if (mr == NULL)
        return 0;
    ep = mr->ep;
    /* Closing the MR is what revokes the key: later remote access fails. */
    if (ep->lx != NULL) {
        ofccl__lx_mr_dereg(ep, mr->fid);
        ret = 0;
    } else {
        ret = fi_close(&((struct fid_mr *)mr->fid)->fid);
    }
    /* A provider that refuses keeps its object (the domain's close reports
     * it); ours goes regardless, so the endpoint can still be closed. */
    if (ret != 0)
        ret = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_PROVIDER,
                          "rank %d: deregistering %zu bytes at %p failed: %s", ep->params.rank,
                          mr->len, mr->addr, fi_strerror(-ret));
    pthread_mutex_lock(&ep->lock);
    ep->n_mrs--;
    pthread_mutex_unlock(&ep->lock);
    free(mr);
    return ret;
}

void *ofccl__prov_mem_alloc_on(const ofccl__prov_t *prov, size_t len)
{
    size_t n = (len ? len : 1) + 4095;

    if (len > SIZE_MAX - 4096)
        return NULL;
    if (prov->local)
        return ofccl__lx_mem_alloc(len);
    return aligned_alloc(4096, n - n % 4096);
}

void *ofccl__prov_mem_alloc(const ofccl__ep_t *ep, size_t len)
{
    return ofccl__prov_mem_alloc_on(ep->prov, len);
}

int ofccl__prov_mem_error(const ofccl__ep_t *ep, size_t len, ofccl__err_t *e)
{
    int err = errno ? errno : ENOMEM;

    /* No log: the caller adds where it was and logs once. */
    return ofccl__limit_fail(NULL, e, err, len, OFCCL_ERR_NO_MEMORY, "allocating %zu bytes%s", len,
                             ep != NULL && ep->prov->local ? " of shared memory (memfd)" : "");
}

void ofccl__prov_mem_free(void *ptr)
{
    /* Shared memory is known by its address. */
    if (ptr != NULL && !ofccl__lx_mem_free(ptr))
        free(ptr);
}
