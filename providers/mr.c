/*
 * Memory, whatever the transport: registering regions (argument checks,
 * least-privilege access, counting, fault injection; the backend makes the
 * key), and the memory peers write into (ofccl__prov_mem_alloc).
 *
 * Every such allocation joins one registry, with the backend that made it:
 * freeing needs no provider handle (a pool may outlive it), and a backend
 * can tell its own memory from anyone's (local/ maps only its memfds).
 */
#include <errno.h>
#include <stdlib.h>

#include "prov_impl.h"
#include "util.h"

#define PAGE 4096u

int ofccl__mr_reg(ofccl__ep_t *ep, void *addr, size_t len, unsigned access, ofccl__mr_t **out,
                  ofccl__err_t *e)
{
    const unsigned all = OFCCL__ACC_LOCAL | OFCCL__ACC_REMOTE_WRITE | OFCCL__ACC_REMOTE_READ |
                         OFCCL__ACC_REMOTE_ATOMIC;
    const ofccl__log_t *log = ep ? ep->prov->log : NULL;
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
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
    mr->addr = addr;
    mr->len = len;
    mr->access = access;
    mr->ep = ep;
    mr->kind = ofccl__mem_kind_of(addr);
    ret = ep->be->mr_reg(ep, mr, e);
    if (ret != 0) {
        free(mr);
        return ret;
    }
    mr->base = ep->prov->caps.virt_addr ? (uint64_t)(uintptr_t)addr : 0;
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
    /* Revoking the key: later remote access fails. A transport that refuses
     * keeps its object (closing the provider reports it); ours goes
     * regardless, so the endpoint can still be closed. */
    ret = ep->be->mr_dereg(mr);
    if (ret != 0)
        ret = ofccl__fail(ep->prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_PROVIDER,
                          "rank %d: deregistering %zu bytes at %p failed: %s", ep->params.rank,
                          mr->len, mr->addr, ep->be->strerror(-ret));
    pthread_mutex_lock(&ep->lock);
    ep->n_mrs--;
    pthread_mutex_unlock(&ep->lock);
    free(mr);
    return ret;
}

/* ---- memory peers write into ---- */

struct tp_alloc {
    char *addr;
    size_t len;
    const ofccl__backend_t *be;
    intptr_t cookie;
    struct tp_alloc *next;
};

static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp_alloc *allocs;

void *ofccl__prov_mem_alloc_on(const ofccl__prov_t *prov, size_t len)
{
    struct tp_alloc *a;
    size_t n;
    int saved;

    if (len > SIZE_MAX - PAGE)
        return NULL;
    n = ((len ? len : 1) + PAGE - 1) / PAGE * PAGE;
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->addr = prov->mem_be->mem_alloc(n, &a->cookie);
    if (a->addr == NULL) {
        saved = errno;
        free(a);
        errno = saved; /* for ofccl__prov_mem_error */
        return NULL;
    }
    a->len = n;
    a->be = prov->mem_be;
    pthread_mutex_lock(&allocs_lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&allocs_lock);
    return a->addr;
}

void *ofccl__prov_mem_alloc(const ofccl__ep_t *ep, size_t len)
{
    return ofccl__prov_mem_alloc_on(ep->prov, len);
}

int ofccl__prov_mem_error(const ofccl__ep_t *ep, size_t len, ofccl__err_t *e)
{
    int err = errno ? errno : ENOMEM;

    /* No log: the caller adds where it was and logs once. */
    return ofccl__limit_fail(NULL, e, err, NULL, len, OFCCL_ERR_NO_MEMORY, "allocating %zu bytes%s",
                             len, ep != NULL ? ep->be->mem_what : "");
}

void ofccl__prov_mem_free(void *ptr)
{
    struct tp_alloc **pp, *a = NULL;

    if (ptr == NULL)
        return;
    pthread_mutex_lock(&allocs_lock);
    for (pp = &allocs; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->addr == ptr) {
            a = *pp;
            *pp = a->next;
            break;
        }
    pthread_mutex_unlock(&allocs_lock);
    if (a == NULL)
        return; /* not ours: nothing to free */
    a->be->mem_free(a->addr, a->len, a->cookie);
    free(a);
}

bool ofccl__tp_mem_find(const ofccl__backend_t *be, const void *addr, size_t len, intptr_t *cookie,
                        uint64_t *off)
{
    uintptr_t p = (uintptr_t)addr;
    bool found = false;

    pthread_mutex_lock(&allocs_lock);
    for (struct tp_alloc *a = allocs; a != NULL && !found; a = a->next) {
        uintptr_t b = (uintptr_t)a->addr;
        if (a->be->mem_alloc == be->mem_alloc && p >= b && len <= a->len && p - b <= a->len - len) {
            *cookie = a->cookie;
            *off = p - b;
            found = true;
        }
    }
    pthread_mutex_unlock(&allocs_lock);
    return found;
}
