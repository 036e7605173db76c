/*
 * GPU memory through a libfabric provider (FI_HMEM), as far as a machine
 * without a GPU shows it: which providers have an FI_HMEM entry (shm does,
 * tcp does not), that asking only where it works (OFCCL__HMEM_WANT) opens
 * the provider as without when CUDA is not there, and either way says why
 * GPU memory does not go through it (caps.hmem_why), that a region of device
 * memory is refused with the reason (a domain without FI_HMEM; Debian's
 * libfabric, which has no CUDA support), and that host memory still
 * registers on the FI_HMEM entry. The path itself runs on a GPU machine
 * (test_gpu "hmem").
 */
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "fabric/fabric.h"
#include "prov.h"
#include "prov_impl.h"

static ofccl__log_t g_log;

static ofccl__prov_t *open_prov(const char *name, const char *dom, int hmem)
{
    ofccl__prov_params_t p = {.provider = name, .domain = dom, .log = &g_log, .hmem = hmem};
    ofccl__prov_t *prov = NULL;
    ofccl__err_t e = {0};

    CU_ASSERT_EQUAL(ofccl__prov_open(&p, &prov, &e), 0);
    if (prov == NULL)
        printf("opening %s: %s\n", name, e.msg);
    return prov;
}

/* Register `len` bytes of `buf` as memory of `kind` on a bare endpoint of
 * `prov` (registration needs no peers): 0 or the error, its text in `e`. */
static int reg_as(ofccl__prov_t *prov, void *buf, size_t len, int kind, ofccl__err_t *e)
{
    ofccl__ep_t ep = {.prov = prov, .be = prov->be};
    struct fid_mr *mr = NULL;
    uint64_t key = 0;
    int rc = ofccl__fab_mr_reg_raw(&ep, buf, len, FI_REMOTE_WRITE, kind, &mr, &key, e);

    if (rc == 0)
        fi_close(&mr->fid);
    return rc;
}

static void test_entries(void)
{
    ofccl__prov_t *shm = open_prov("shm", "", OFCCL__HMEM_NEED);
    ofccl__prov_t *tcp = open_prov("tcp", "lo", OFCCL__HMEM_NEED);

    CU_ASSERT_PTR_NOT_NULL_FATAL(shm);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tcp);
    /* shm has an FI_HMEM entry, kept as asked; device memory does not go
     * through it (this libfabric, 1.17, cannot be told to make no CUDA
     * calls, and has no CUDA support), and the provider says why */
    CU_ASSERT_TRUE(ofccl__prov_caps(shm)->hmem);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl__prov_caps(shm)->hmem_why, "FI_OPT_CUDA_API_PERMITTED"));
    printf("(shm: %s) ", ofccl__prov_caps(shm)->hmem_why);
    CU_ASSERT_FALSE(shm->be->reaches(shm, false, 0));
    CU_ASSERT_TRUE(shm->be->reaches(shm, true, OFCCL__MEM_HOST));
    /* tcp (and tcp;ofi_rxm) in 1.17 has none */
    CU_ASSERT_FALSE(ofccl__prov_caps(tcp)->hmem);
    CU_ASSERT_FALSE(tcp->be->reaches(tcp, false, 0));
    CU_ASSERT_TRUE(tcp->be->reaches(tcp, false, OFCCL__MEM_HOST));
    CU_ASSERT_EQUAL(ofccl__prov_close(shm), 0);
    CU_ASSERT_EQUAL(ofccl__prov_close(tcp), 0);
}

static void test_want_without_cuda(void)
{
    /* No CUDA in this process: the FI_HMEM entry is not kept. */
    ofccl__prov_t *shm = open_prov("shm", "", OFCCL__HMEM_WANT);

    CU_ASSERT_PTR_NOT_NULL_FATAL(shm);
    CU_ASSERT_FALSE(ofccl__prov_caps(shm)->hmem);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl__prov_caps(shm)->hmem_why, "CUDA is not loaded"));
    CU_ASSERT_FALSE(shm->be->reaches(shm, false, 0));
    CU_ASSERT_EQUAL(ofccl__prov_close(shm), 0);
}

static void test_registration(void)
{
    ofccl__prov_t *shm = open_prov("shm", "", OFCCL__HMEM_NEED);
    ofccl__prov_t *tcp = open_prov("tcp", "lo", OFCCL__HMEM_NO);
    size_t len = 1 << 16;
    void *buf = aligned_alloc(4096, len);
    ofccl__err_t e = {0};
    int rc;

    CU_ASSERT_PTR_NOT_NULL_FATAL(shm);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tcp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    /* host memory registers on the FI_HMEM entry as on any */
    CU_ASSERT_EQUAL(reg_as(shm, buf, len, OFCCL__MEM_HOST, &e), 0);
    /* a domain opened without FI_HMEM refuses device memory, saying so */
    CU_ASSERT_EQUAL(reg_as(tcp, buf, len, 0, &e), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not opened for GPU memory"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cuda:0"));
    /* shm's entry takes it where libfabric has CUDA support; this one's
     * registration goes to CUDA and fails, naming the provider and why */
    rc = reg_as(shm, buf, len, 0, &e);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "FI_HMEM"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cuda:0"));
    printf("(shm, host memory registered as cuda:0: %s) ", e.msg);
    free(buf);
    CU_ASSERT_EQUAL(ofccl__prov_close(shm), 0);
    CU_ASSERT_EQUAL(ofccl__prov_close(tcp), 0);
}

static void test_kinds(void)
{
    /* With a transport that takes device memory open, kinds are asked of
     * CUDA; without CUDA in the process every pointer is host memory. */
    ofccl__prov_t *shm = open_prov("shm", "", OFCCL__HMEM_NEED);
    int x = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(shm);
    CU_ASSERT_EQUAL(ofccl__mem_kind_of(&x), OFCCL__MEM_HOST);
    CU_ASSERT_EQUAL(ofccl__mem_kind_of(NULL), OFCCL__MEM_HOST);
    CU_ASSERT_EQUAL(ofccl__prov_close(shm), 0);
    CU_ASSERT_EQUAL(ofccl__mem_kind_of(&x), OFCCL__MEM_HOST);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"FI_HMEM entries: shm has one, tcp none", test_entries},
        {"asked where it works: kept only with CUDA", test_want_without_cuda},
        {"device memory registration refused with the reason", test_registration},
        {"memory kinds without CUDA", test_kinds},
        {NULL, NULL},
    };

    ofccl__log_init(&g_log);
    return cu_run("hmem", tests);
}
