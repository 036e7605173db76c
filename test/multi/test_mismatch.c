/*
 * Multi-rank negative test: ranks started with different settings (provider,
 * strict mode or signal path, given per rank by the launcher) must fail
 * communicator creation with OFCCL_ERR_MISMATCH naming the field and a rank —
 * not hang, not run with an inconsistent protocol. A setting that changes the
 * exchanges themselves (OFCCL_BOOT_EXCHANGE) fails them instead: "bootstrap"
 * expects OFCCL_ERR_BOOTSTRAP naming the field.
 * Usage: test_mismatch <field text expected in the message> [bootstrap]
 */
#include <stdio.h>
#include <string.h>

#include "cu.h"
#include "ofccl.h"

static const char *field;
static int want = OFCCL_ERR_MISMATCH;

static void test_mismatch_detected(void)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx = NULL;
    ofccl_comm_t *comm = NULL;
    int rc;

    rc = ofccl_ctx_create(&p, &ctx);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    rc = ofccl_comm_world(ctx, &comm);
    CU_ASSERT_EQUAL(rc, want);
    CU_ASSERT_PTR_NULL(comm);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_ctx_last_error(ctx), field));
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_ctx_last_error(ctx), "rank "));
    printf("reported: %s\n", ofccl_ctx_last_error(ctx));
    /* The context stays usable: nothing leaked into it. */
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(ctx), 0);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"mismatched settings are reported", test_mismatch_detected},
        {NULL, NULL},
    };
    field = argc > 1 ? argv[1] : "";
    if (argc > 2 && strcmp(argv[2], "bootstrap") == 0)
        want = OFCCL_ERR_BOOTSTRAP;
    return cu_run("mismatch", tests);
}
