/*
 * Local transport: the provider handle (no fabric or domain: only its
 * capabilities), discovery (one domain, always there), and the backend's
 * operations table. The transport itself is described in local.h.
 */
#include <stdint.h>
#include <string.h>

#include "local.h"
#include "util.h"

static int lx_open(ofccl__prov_t *prov, const char *prov_name, const ofccl__prov_params_t *params,
                   ofccl__err_t *e)
{
    ofccl__prov_caps_t *c = &prov->caps;

    (void)prov_name;
    if (params->strict)
        return ofccl__fail(params->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NOT_SUPPORTED,
                           "strict mode makes a libfabric provider (tcp or shm) behave as verbs; "
                           "the local provider has no libfabric underneath: unset OFCCL_STRICT "
                           "or choose OFCCL_PROVIDER=shm or tcp");
    memset(c, 0, sizeof(*c));
    ofccl__strlcpy(c->name, OFCCL__LOCAL_NAME, sizeof(c->name));
    ofccl__strlcpy(c->fabric, OFCCL__LOCAL_NAME, sizeof(c->fabric));
    ofccl__strlcpy(c->domain, OFCCL__LOCAL_NAME, sizeof(c->domain));
    c->quirk_row = ofccl__quirk_find(OFCCL__LOCAL_NAME);
    c->key_size = 8;
    c->cq_data_size = 8;
    c->atomic_u64_sum = true;
    c->atomic_native = true;
    /* A write is placed when the post returns: completion is delivery. */
    c->delivery_complete = true;
    c->order_waw = c->order_raw = c->order_war = true;
    c->max_order_waw_size = c->max_order_raw_size = c->max_order_war_size = SIZE_MAX;
    c->inject_size = SIZE_MAX;
    c->max_msg_size = (size_t)1 << 40;
    c->peer_map = true;
    /* GPU memory, by CUDA IPC (gpu.c): registered as such, written only. */
    c->hmem = ofccl__gpu_built();
    if (!c->hmem)
        ofccl__strlcpy(c->hmem_why, "this build of ofccl has no GPU support", sizeof(c->hmem_why));
    c->quirks = c->quirk_row >= 0 ? ofccl__quirks[c->quirk_row].flags : 0;
    return 0;
}

static int lx_close(ofccl__prov_t *prov)
{
    (void)prov;
    return 0;
}

/* One domain, nothing to ask anyone. */
static int lx_list(const char *prov_name, ofccl__prov_dom_t *out, int max, int *n, ofccl__err_t *e)
{
    (void)prov_name;
    (void)e;
    *n = 0;
    if (max > 0) {
        memset(&out[0], 0, sizeof(out[0]));
        ofccl__strlcpy(out[0].prov_name, OFCCL__LOCAL_NAME, sizeof(out[0].prov_name));
        ofccl__strlcpy(out[0].fabric, OFCCL__LOCAL_NAME, sizeof(out[0].fabric));
        ofccl__strlcpy(out[0].domain, OFCCL__LOCAL_NAME, sizeof(out[0].domain));
        *n = 1;
    }
    return 0;
}

static void lx_available(char *buf, size_t len)
{
    ofccl__tp_list_add(buf, len, OFCCL__LOCAL_NAME);
}

static const char *lx_strerror(int err)
{
    return strerror(err);
}

/* Processes on this host: their host memory, and their GPU memory where
 * this build has CUDA (gpu.c). */
static bool lx_reaches(const ofccl__prov_t *prov, bool same_host, ofccl__mem_kind_t kind)
{
    (void)prov;
    return same_host && (kind == OFCCL__MEM_HOST || ofccl__gpu_built());
}

const ofccl__backend_t ofccl__local_backend = {
    .size = sizeof(ofccl__backend_t),
    .name = OFCCL__LOCAL_NAME,
    .serves = OFCCL__LOCAL_NAME,
    .mem_what = " of shared memory (memfd)",
    .open = lx_open,
    .close = lx_close,
    .list = lx_list,
    .available = lx_available,
    .ep_setup = ofccl__lx_ep_setup,
    .ep_stop = ofccl__lx_ep_stop,
    .ep_close = ofccl__lx_ep_close,
    .ep_name = ofccl__lx_ep_name,
    .insert_peers = ofccl__lx_insert_peers,
    .peers_ready = ofccl__tp_stub_peers_ready,
    /* Peers one at a time inside a composite (caps.add_peer stays false:
     * alone, every rank shares this host and all attach at creation). */
    .add_peer = ofccl__lx_add_peer,
    .mr_reg = ofccl__lx_mr_reg,
    .mr_dereg = ofccl__lx_mr_dereg,
    .mem_alloc = ofccl__lx_mem_alloc,
    .mem_free = ofccl__lx_mem_free,
    .post = ofccl__lx_post,
    .cq_read = ofccl__lx_cq_read,
    .cq_readerr = ofccl__lx_cq_readerr,
    .idle = ofccl__lx_idle,
    .strerror = lx_strerror,
    .op_name = ofccl__tp_op_name,
    .peer_gone = ofccl__lx_peer_gone,
    .peer_map = ofccl__lx_peer_map,
    .wait_fd = ofccl__tp_stub_wait_fd,
    .reaches = lx_reaches,
    .peer_class = ofccl__tp_class_local,
};
