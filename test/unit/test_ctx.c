/*
 * Contexts without a launcher (singleton): the whole stack end to end on one
 * rank, on shm and on the local provider that auto picks there, and the bad
 * inputs a user meets first — unknown provider, a provider lacking a
 * capability, an unknown interface, a broken launch, a missing topology file —
 * each with its error code and a message that says what to do.
 */
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "ofccl.h"

static int create(const char *const *settings, char *err, size_t errlen, ofccl_ctx_t **ctx)
{
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = errlen};
    err[0] = '\0';
    return ofccl_ctx_create(&p, ctx);
}

static void test_singleton_world(void)
{
    const char *const settings[] = {"PROVIDER=shm", NULL};
    char err[512];
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_req_t *req;
    float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    int r = -1, n = -1, done = 0;

    CU_ASSERT_EQUAL_FATAL(create(settings, err, sizeof(err), &ctx), 0);
    CU_ASSERT_STRING_EQUAL(ofccl_ctx_provider(ctx), "shm");
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_world(ctx, &comm), 0);
    CU_ASSERT_EQUAL(ofccl_comm_rank(comm, &r), 0);
    CU_ASSERT_EQUAL(ofccl_comm_size(comm, &n), 0);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, 5, OFCCL_F32, &req), 0);
    CU_ASSERT_EQUAL(ofccl_test(req, &done), 0);
    CU_ASSERT_EQUAL(done, 1);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof(in)), 0);
    CU_ASSERT_EQUAL_FATAL(
        ofccl_reduce_scatter(comm, in, out, 5, OFCCL_F32, (ofccl_redop_t){OFCCL_OP_AVG, 1}, &req),
        0);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    CU_ASSERT_EQUAL(out[4], 5.0f);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), OFCCL_ERR_BUSY);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

/* OFCCL_PROVIDER=auto (the default) with every rank on this host picks the
 * local provider, and a whole job runs on it: collectives on ofccl's own
 * buffers (shared memory) and on user memory. */
static void test_auto_is_local(void)
{
    char err[512];
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_req_t *req;
    float in[7], out[7] = {0}, *pool_in = NULL, *pool_out = NULL;

    for (int i = 0; i < 7; i++)
        in[i] = (float)(i * 3 + 1);
    CU_ASSERT_EQUAL_FATAL(create(NULL, err, sizeof(err), &ctx), 0);
    CU_ASSERT_STRING_EQUAL(ofccl_ctx_provider(ctx), "local");
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_world(ctx, &comm), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_allgather(comm, in, out, 7, OFCCL_F32, &req), 0);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(out[i], in[i]);
    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, sizeof(in), (void **)&pool_in), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, sizeof(in), (void **)&pool_out), 0);
    memcpy(pool_in, in, sizeof(in));
    CU_ASSERT_EQUAL_FATAL(ofccl_reduce_scatter(comm, pool_in, pool_out, 7, OFCCL_F32,
                                               (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req),
                          0);
    CU_ASSERT_EQUAL(ofccl_wait(req), 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(pool_out[i], in[i]);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, pool_in), 0);
    CU_ASSERT_EQUAL(ofccl_buffer_free(comm, pool_out), 0);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

/* Calls on destroyed objects say so; nothing reads freed memory (ASan checks). */
static void test_use_after_destroy(void)
{
    const char *const settings[] = {"PROVIDER=shm", NULL};
    char err[512];
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    ofccl_mem_t *mh;
    ofccl_req_t *req;
    float buf[4] = {0};
    int r;

    CU_ASSERT_EQUAL_FATAL(create(settings, err, sizeof(err), &ctx), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_comm_world(ctx, &comm), 0);
    CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, buf, sizeof(buf), &mh), 0);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(mh), 0);
    CU_ASSERT_EQUAL(ofccl_mem_deregister(mh), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), 0);
    CU_ASSERT_EQUAL(ofccl_barrier(comm), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_allgather(comm, buf, buf, 1, OFCCL_F32, &req), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_comm_rank(comm, &r), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_comm_abort(comm), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(comm), OFCCL_ERR_STATE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_comm_last_error(comm), "destroyed"));
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
    CU_ASSERT_EQUAL(ofccl_comm_world(ctx, &comm), OFCCL_ERR_STATE);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), OFCCL_ERR_STATE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_ctx_last_error(ctx), "destroyed"));
}

static void test_unknown_provider(void)
{
    const char *const settings[] = {"PROVIDER=carrier-pigeon", NULL};
    char err[512];
    ofccl_ctx_t *ctx = NULL;

    const char *const known[] = {"PROVIDER=efa", NULL}; /* known to ofccl, absent here */

    /* A name nobody knows is a mistake in the setting: CONFIG. */
    CU_ASSERT_EQUAL(create(settings, err, sizeof(err), &ctx), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NULL(ctx);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "carrier-pigeon"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "shm")); /* lists what is offered */
    /* A known provider this machine lacks: NOT_SUPPORTED, with the list too. */
    CU_ASSERT_EQUAL(create(known, err, sizeof(err), &ctx), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(ctx);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "efa"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "shm"));
}

/* libfabric's "net" provider has no 64-bit atomics: forcing the atomic signal
 * path on it must fail when the transport is opened (context creation),
 * naming the capability. */
static void test_missing_capability(void)
{
    const char *const settings[] = {"PROVIDER=net", "IFACE=lo", "SIGNAL=atomic", NULL};
    char err[512];
    ofccl_ctx_t *ctx = NULL;

    CU_ASSERT_EQUAL(create(settings, err, sizeof(err), &ctx), OFCCL_ERR_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(ctx);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "atomic"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "OFCCL_SIGNAL=cqdata"));
}

static void test_unknown_iface(void)
{
    const char *const settings[] = {"PROVIDER=tcp", "IFACE=nosuch0", NULL};
    char err[512];
    ofccl_ctx_t *ctx = NULL;

    CU_ASSERT_EQUAL(create(settings, err, sizeof(err), &ctx), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "nosuch0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "lo")); /* lists the domains offered */
}

static void test_broken_launch(void)
{
    char err[512];
    ofccl_ctx_t *ctx = NULL;

    setenv("SLURM_JOB_ID", "4242", 1);
    CU_ASSERT_EQUAL(create(NULL, err, sizeof(err), &ctx), OFCCL_ERR_BOOTSTRAP);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "srun --mpi=pmix"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "SLURM_JOB_ID"));
    unsetenv("SLURM_JOB_ID");
    /* The same process can still create a context once the environment is sane. */
    CU_ASSERT_EQUAL(create(NULL, err, sizeof(err), &ctx), 0);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

static void test_missing_topology(void)
{
    const char *const settings[] = {"TOPO_XML=/nonexistent/topology.xml", NULL};
    char err[512];
    ofccl_ctx_t *ctx = NULL;

    CU_ASSERT_EQUAL(create(settings, err, sizeof(err), &ctx), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/topology.xml"));
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"singleton world end to end", test_singleton_world},
        {"auto picks local on one host", test_auto_is_local},
        {"use after destroy", test_use_after_destroy},
        {"unknown provider lists the offered ones", test_unknown_provider},
        {"provider lacking a capability", test_missing_capability},
        {"unknown interface lists the domains", test_unknown_iface},
        {"launcher without PMIx names the fix", test_broken_launch},
        {"missing topology file", test_missing_topology},
        {NULL, NULL},
    };
    return cu_run("ctx", tests);
}
