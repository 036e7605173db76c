/*
 * Opening a libfabric provider: the fabric and domain of the chosen fi_info,
 * the capabilities probed from it (and from the open domain, for atomics),
 * the quirk row applied on top, and the backend's operations table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "gpu/gpu.h"
#include "util.h"

static void fill_caps(ofccl__prov_caps_t *c, const struct fi_info *i)
{
    uint64_t mr = i->domain_attr->mr_mode, order = i->tx_attr->msg_order;

    memset(c, 0, sizeof(*c));
    ofccl__strlcpy(c->name, i->fabric_attr->prov_name, sizeof(c->name));
    ofccl__strlcpy(c->fabric, i->fabric_attr->name ? i->fabric_attr->name : "", sizeof(c->fabric));
    ofccl__strlcpy(c->domain, i->domain_attr->name ? i->domain_attr->name : "", sizeof(c->domain));
    c->virt_addr = (mr & FI_MR_VIRT_ADDR) != 0;
    c->prov_key = (mr & FI_MR_PROV_KEY) != 0;
    c->mr_local = (mr & FI_MR_LOCAL) != 0;
    c->mr_endpoint = (mr & FI_MR_ENDPOINT) != 0;
    c->mr_allocated = (mr & FI_MR_ALLOCATED) != 0;
    c->mr_raw = (mr & FI_MR_RAW) != 0;
    c->key_size = i->domain_attr->mr_key_size;
    c->cq_data_size = OFCCL__MIN(i->domain_attr->cq_data_size, (size_t)8);
    c->rx_cq_data = (i->mode & FI_RX_CQ_DATA) != 0;
    /* Our writes are RMA: the RMA-specific order bits (1.17) count as much as
     * the generic ones that cover every transfer type. */
    c->order_waw = (order & (FI_ORDER_WAW | FI_ORDER_RMA_WAW)) != 0;
    c->order_raw = (order & (FI_ORDER_RAW | FI_ORDER_RMA_RAW)) != 0;
    c->order_war = (order & (FI_ORDER_WAR | FI_ORDER_RMA_WAR)) != 0;
    c->max_order_waw_size = i->ep_attr->max_order_waw_size;
    c->max_order_raw_size = i->ep_attr->max_order_raw_size;
    c->max_order_war_size = i->ep_attr->max_order_war_size;
    c->inject_size = i->tx_attr->inject_size;
    c->max_msg_size = i->ep_attr->max_msg_size;
    c->hmem = (i->caps & FI_HMEM) && (mr & FI_MR_HMEM); /* only where asked for */
    if (i->nic != NULL && i->nic->link_attr != NULL)
        c->link_bps = (uint64_t)i->nic->link_attr->speed;
}

/* What the chosen entry says that ofccl cannot work with. */
static int check_info(const ofccl__prov_params_t *p, const struct fi_info *i, ofccl__err_t *e)
{
    const char *prov = i->fabric_attr->prov_name;

    if (i->domain_attr->mr_mode & FI_MR_RAW)
        return ofccl__fail(p->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider '%s' needs raw memory keys (FI_MR_RAW), which ofccl does "
                           "not support",
                           prov);
    if (i->domain_attr->mr_key_size > 8)
        return ofccl__fail(p->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider '%s' uses %zu-byte memory keys; ofccl supports at most 8",
                           prov, i->domain_attr->mr_key_size);
    if (i->domain_attr->cq_data_size < 4)
        return ofccl__fail(p->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider '%s' does not offer remote CQ data of at least 4 bytes "
                           "(cq_data_size %zu), which ofccl's signals need",
                           prov, i->domain_attr->cq_data_size);
    return 0;
}

/* cxi's key is a VNI and service the fabric manager grants the job (Slurm's
 * switch plugin hands them to libfabric): bytes derived from a secret would
 * be no VNI it knows, so that provider keeps the launcher's. Other providers
 * that report a key size take the first auth_key_size bytes of the job key. */
int ofccl__fab_auth_key(const ofccl__prov_params_t *p, struct fi_info *i)
{
    size_t n = i->domain_attr->auth_key_size;
    uint8_t *key;

    if (p->job_key == NULL)
        return OFCCL__AUTH_KEY_NO_SECRET;
    if (strncmp(i->fabric_attr->prov_name, "cxi", 3) == 0)
        return OFCCL__AUTH_KEY_LAUNCHER;
    if (n == 0 || n > OFCCL__PROV_JOB_KEY_LEN)
        return OFCCL__AUTH_KEY_UNOFFERED;
    key = malloc(n); /* fi_freeinfo frees it with the entry */
    if (key == NULL)
        return -OFCCL_ERR_NO_MEMORY;
    memcpy(key, p->job_key, n);
    free(i->domain_attr->auth_key);
    i->domain_attr->auth_key = key;
    return OFCCL__AUTH_KEY_DERIVED;
}

/* Atomic support that needs the open domain. */
static int probe_atomics(ofccl__prov_t *prov, ofccl__err_t *e)
{
    struct ofccl__fab_prov *fp = ofccl__fab_prov_of(prov);
    struct fi_atomic_attr attr;
    ofccl__prov_caps_t *c = &prov->caps;

    c->atomic_u64_sum = fi_query_atomic(fp->domain, FI_UINT64, FI_SUM, &attr, 0) == 0;
    fp->fetch_atomic_ok =
        fi_query_atomic(fp->domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC) == 0;
    if (!c->atomic_u64_sum) {
        OFCCL__INFO(prov->log, OFCCL__SUB_PROV,
                    "%s: no 64-bit unsigned FI_SUM atomics; signals must use CQ data", c->name);
        return 0;
    }
    bool dc_atomic = c->delivery_complete && !(c->quirks & OFCCL__Q_NO_DC_ATOMIC);
    if (!dc_atomic && !fp->fetch_atomic_ok)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "provider '%s' has neither usable FI_DELIVERY_COMPLETE atomics nor a "
                           "fetching 64-bit sum, so ofccl has no atomic that completes at the "
                           "target",
                           c->name);
    if (dc_atomic)
        OFCCL__DEBUG(prov->log, OFCCL__SUB_PROV,
                     "%s: atomic adds use fi_atomicmsg with FI_DELIVERY_COMPLETE", c->name);
    else if (c->delivery_complete)
        OFCCL__INFO(prov->log, OFCCL__SUB_PROV,
                    "%s: the quirk table rules out delivery-complete atomics; atomic adds use "
                    "fi_fetch_atomic so their completion means applied at the target",
                    c->name);
    else
        OFCCL__INFO(prov->log, OFCCL__SUB_PROV,
                    "%s: FI_DELIVERY_COMPLETE not accepted; atomic adds use fi_fetch_atomic so "
                    "their completion means applied at the target",
                    c->name);
    return 0;
}

int ofccl__fab_forbid_cuda(struct fid_ep *ep)
{
    bool permitted = false;

    return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, OFCCL__FI_OPT_CUDA_API_PERMITTED, &permitted,
                     sizeof(permitted));
}

/* Does the provider move GPU memory without calling CUDA itself? NULL, or
 * why not. One that copies it with CUDA calls of its own (shm, tcp) runs
 * them on CUDA's legacy default stream, which waits for every blocking
 * stream: for a caller's stream held until the collective ends too, or for
 * a stream made to wait for it (ofccl_stream_wait, torch's Work.wait), so
 * the collective would wait for itself. One that moves it without
 * (GPUDirect RDMA on a NIC) accepts FI_OPT_CUDA_API_PERMITTED=false. */
static const char *calls_cuda(struct ofccl__fab_prov *fp, char *why, size_t len)
{
    struct fid_ep *ep = NULL;
    int ret = fi_endpoint(fp->domain, fp->info, &ep, NULL);

    if (ret == 0) {
        ret = ofccl__fab_forbid_cuda(ep);
        fi_close(&ep->fid);
    }
    if (ret == 0)
        return NULL;
    snprintf(why, len, "%s (FI_OPT_CUDA_API_PERMITTED=false: %s)",
             ret == -FI_EOPNOTSUPP
                 ? "it copies GPU memory with CUDA calls of its own, on CUDA's legacy default "
                   "stream, where they would wait for a stream held for the collective itself"
             : ret == -FI_ENOPROTOOPT ? "this libfabric cannot be told to make no CUDA calls"
             : ret == -FI_EINVAL      ? "this libfabric has no CUDA support or finds no GPU"
                                      : "it may make CUDA calls of its own",
             fi_strerror(-ret));
    return why;
}

/* Can the open domain take GPU memory of the process's current device
 * (registered, and moved without CUDA calls of the provider's own)? NULL,
 * or why not. Without CUDA in the process, only the second is asked where
 * the entry is needed (OFCCL__HMEM_NEED), and the first is left to the
 * GPU setup. */
static const char *hmem_unusable(struct ofccl__fab_prov *fp, const ofccl__prov_params_t *params,
                                 char *why, size_t len)
{
    ofccl__gpu_t *g = ofccl__gpu_process(params->log, false);
    int dev = g != NULL ? ofccl__gpu_current_device(g, 0) : -1;
    struct iovec iov = {.iov_len = 4096};
    struct fi_mr_attr attr = {
        .mr_iov = &iov, .iov_count = 1, .access = FI_REMOTE_WRITE, .iface = FI_HMEM_CUDA};
    struct fid_mr *mr = NULL;
    ofccl__err_t e = {0};
    int ret;

    if (g == NULL)
        return params->hmem == OFCCL__HMEM_NEED ? calls_cuda(fp, why, len)
                                                : "CUDA is not loaded in this process";
    if (ofccl__gpu_mem_alloc(g, dev, iov.iov_len, &iov.iov_base, &e) != 0) {
        ofccl__strlcpy(why, e.msg, len);
        return why;
    }
    attr.device.cuda = dev;
    ret = fi_mr_regattr(fp->domain, &attr, FI_HMEM_DEVICE_ONLY, &mr);
    if (ret == 0)
        fi_close(&mr->fid);
    ofccl__gpu_mem_free(g, dev, iov.iov_base);
    if (ret == 0)
        return calls_cuda(fp, why, len);
    snprintf(why, len, "registering GPU %d's memory fails: %s%s", dev, fi_strerror(-ret),
             ret == -FI_ENOSYS ? " (this libfabric has no CUDA support)" : "");
    return why;
}

static int fab_open(ofccl__prov_t *prov, const char *prov_name, const ofccl__prov_params_t *params,
                    ofccl__err_t *e)
{
    const ofccl__log_t *log = prov->log;
    const char *domain = params->domain != NULL ? params->domain : "";
    struct fi_info *list = NULL, *pick = NULL;
    struct ofccl__fab_prov *fp;
    const char *why = NULL; /* its FI_HMEM entry does not serve: reopened without */
    char buf[256];
    int ret;

    ofccl__fab_env_defaults();
    ret = ofccl__fab_choose(params, prov_name, domain, &list, &pick, e);
    if (ret != 0)
        return ret;
    ret = check_info(params, pick, e);
    if (ret != 0)
        goto err_list;
    fp = calloc(1, sizeof(*fp));
    if (fp == NULL) {
        ret = ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
        goto err_list;
    }
    prov->be_state = fp;
    fp->info = fi_dupinfo(pick);
    if (fp->info == NULL) {
        ret = ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "fi_dupinfo failed");
        goto err_fp;
    }
    fill_caps(&prov->caps, pick);
    ret = ofccl__fab_auth_key(params, fp->info);
    if (ret < 0) {
        ret = ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY, "out of memory");
        goto err_info;
    }
    prov->caps.auth_key = ret;
    fp->real_prov_key = prov->caps.prov_key;
    prov->caps.delivery_complete = ofccl__fab_probe_delivery_complete(pick);
    fi_freeinfo(list);
    list = NULL;

    ret = fi_fabric(fp->info->fabric_attr, &fp->fabric, NULL);
    if (ret != 0) {
        ret =
            ofccl__fail(log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER, "fi_fabric(%s, %s) failed: %s",
                        prov->caps.name, prov->caps.fabric, fi_strerror(-ret));
        goto err_info;
    }
    ret = fi_domain(fp->fabric, fp->info, &fp->domain, NULL);
    if (ret != 0) {
        ret = ofccl__fail(
            log, OFCCL__SUB_PROV, e, OFCCL_ERR_PROVIDER, "fi_domain(%s, %s)%s failed: %s",
            prov->caps.name, prov->caps.domain,
            prov->caps.auth_key == OFCCL__AUTH_KEY_DERIVED
                ? " with the authorization key derived from the job secret (OFCCL_BOOT_SECRET_FILE)"
                : "",
            fi_strerror(-ret));
        goto err_fabric;
    }
    if (prov->caps.hmem && (why = hmem_unusable(fp, params, buf, sizeof(buf))) != NULL) {
        OFCCL__INFO(log, OFCCL__SUB_PROV, "%s: FI_HMEM entry, but %s: %s", prov->caps.name, why,
                    params->hmem == OFCCL__HMEM_WANT ? "opened without it" : "GPU memory refused");
        if (params->hmem == OFCCL__HMEM_WANT)
            goto err_domain; /* torn down as on failure, then opened again */
        ofccl__strlcpy(prov->caps.hmem_why, why, sizeof(prov->caps.hmem_why));
        why = NULL;
    }
    /* The row first: it can rule out delivery-complete atomics. */
    ofccl__quirk_apply(&prov->caps, ofccl__quirk_find(prov->caps.name), params->strict);
    ret = probe_atomics(prov, e);
    if (ret != 0)
        goto err_domain;
    /* shm's endpoint files are reserved and unlinked for all peers at once. */
    prov->caps.add_peer = !(prov->caps.quirks & OFCCL__Q_NAME_PER_PROCESS);
    if (prov->caps.quirks & OFCCL__Q_NAME_PER_PROCESS)
        ofccl__shm_sweep(log); /* endpoint files of killed ofccl processes */
    return 0;

err_domain:
    fi_close(&fp->domain->fid);
err_fabric:
    fi_close(&fp->fabric->fid);
err_info:
    fi_freeinfo(fp->info);
err_fp:
    free(fp);
    prov->be_state = NULL;
err_list:
    fi_freeinfo(list);
    if (why != NULL) {
        ofccl__prov_params_t plain = *params;
        plain.hmem = OFCCL__HMEM_NO;
        if ((ret = fab_open(prov, prov_name, &plain, e)) == 0)
            ofccl__strlcpy(prov->caps.hmem_why, why, sizeof(prov->caps.hmem_why));
    }
    return ret;
}

static int fab_close(ofccl__prov_t *prov)
{
    struct ofccl__fab_prov *fp = ofccl__fab_prov_of(prov);
    int ret, rc = 0;

    ret = fi_close(&fp->domain->fid);
    if (ret != 0)
        rc = ofccl__fail(prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_PROVIDER,
                         "closing domain %s: %s", prov->caps.domain, fi_strerror(-ret));
    ret = fi_close(&fp->fabric->fid);
    if (ret != 0 && rc == 0)
        rc = ofccl__fail(prov->log, OFCCL__SUB_PROV, NULL, OFCCL_ERR_PROVIDER,
                         "closing fabric %s: %s", prov->caps.fabric, fi_strerror(-ret));
    fi_freeinfo(fp->info);
    free(fp);
    prov->be_state = NULL;
    return rc;
}

/* Host memory of any peer; device memory too where the domain takes it. */
static bool fab_reaches(const ofccl__prov_t *prov, bool same_host, ofccl__mem_kind_t kind)
{
    (void)same_host;
    return kind == OFCCL__MEM_HOST || (prov->caps.hmem && prov->caps.hmem_why[0] == '\0');
}

const ofccl__backend_t ofccl__fabric_backend = {
    .size = sizeof(ofccl__backend_t),
    .name = "libfabric",
    .serves = NULL, /* every provider name the local transport does not serve */
    .mem_what = "",
    .open = fab_open,
    .close = fab_close,
    .list = ofccl__fab_list,
    .available = ofccl__fab_available,
    .ep_setup = ofccl__fab_ep_setup,
    .ep_stop = ofccl__fab_ep_stop,
    .ep_close = ofccl__fab_ep_close,
    .ep_name = ofccl__fab_ep_name,
    .insert_peers = ofccl__fab_insert_peers,
    .peers_ready = ofccl__fab_peers_ready,
    .add_peer = ofccl__fab_add_peer,
    .mr_reg = ofccl__fab_mr_reg,
    .mr_dereg = ofccl__fab_mr_dereg,
    .mem_alloc = ofccl__fab_mem_alloc,
    .mem_free = ofccl__fab_mem_free,
    .post = ofccl__fab_post,
    .cq_read = ofccl__fab_cq_read,
    .cq_readerr = ofccl__fab_cq_readerr,
    .idle = ofccl__tp_stub_idle,
    .strerror = ofccl__fab_strerror,
    .op_name = ofccl__fab_op_name,
    .peer_gone = ofccl__fab_peer_gone,
    .peer_map = ofccl__tp_stub_peer_map,
    .wait_fd = ofccl__tp_stub_wait_fd,
    .reaches = fab_reaches,
    .peer_class = ofccl__tp_class_fabric,
};
