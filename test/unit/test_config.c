/* Unit tests: the parameter registry, error strings and base helpers. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cu.h"
#include "ofccl.h"
#include "util.h"

/* A fake environment: "NAME=value" pairs. */
static const char *const *fake_env;

static const char *fake_lookup(void *arg, const char *name)
{
    size_t n = strlen(name);

    (void)arg;
    for (const char *const *p = fake_env; p && *p; p++)
        if (strncmp(*p, name, n) == 0 && (*p)[n] == '=')
            return *p + n + 1;
    return NULL;
}

static int load(const char *const *env, const char *const *settings, ofccl__config_t *cfg,
                ofccl__err_t *e)
{
    fake_env = env;
    return ofccl__config_load(cfg, settings, fake_lookup, NULL, e);
}

static void test_defaults(void)
{
    ofccl__config_t cfg;
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(load(NULL, NULL, &cfg, &e), 0);
    for (int id = 0; id < OFCCL__CFG_COUNT; id++) {
        CU_ASSERT_EQUAL(cfg.v[id].from, 0);
        CU_ASSERT_STRING_EQUAL(cfg.v[id].s, ofccl__cfg_params[id].def);
        CU_ASSERT_PTR_NOT_NULL(ofccl__cfg_params[id].help);
        CU_ASSERT(strlen(ofccl__cfg_params[id].help) > 10);
    }
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_LOG_LEVEL), 1); /* warn */
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_STRICT), 0);
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_BOOT_RANK), -1);
    CU_ASSERT_STRING_EQUAL(ofccl__cfg_str(&cfg, OFCCL__CFG_PROVIDER), "auto");
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_LOG_SUBSYS), 0x1f);
}

static void test_env_values(void)
{
    const char *const env[] = {"OFCCL_LOG_LEVEL=DEBUG",
                               "OFCCL_STRICT=yes",
                               "OFCCL_BOOT_TIMEOUT_MS=1500",
                               "OFCCL_LOG_SUBSYS=core,prov",
                               "OFCCL_PROVIDER=tcp",
                               "OFCCL_SIGNAL=atomic",
                               NULL};
    ofccl__config_t cfg;
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(load(env, NULL, &cfg, &e), 0);
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_LOG_LEVEL), 3);
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_STRICT), 1);
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_BOOT_TIMEOUT_MS), 1500);
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_LOG_SUBSYS), (1 << 0) | (1 << 2));
    CU_ASSERT_STRING_EQUAL(ofccl__cfg_str(&cfg, OFCCL__CFG_PROVIDER), "tcp");
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_SIGNAL), 2);
    CU_ASSERT_EQUAL(cfg.v[OFCCL__CFG_PROVIDER].from, 1);
}

/* Each bad value fails with OFCCL_ERR_CONFIG and names the variable and the allowed values. */
static void expect_bad(const char *var, const char *allowed_fragment)
{
    const char *env[] = {var, NULL};
    char name[64];
    ofccl__config_t cfg;
    ofccl__err_t e;

    memset(&cfg, 0x5a, sizeof(cfg));
    CU_ASSERT_EQUAL(load(env, NULL, &cfg, &e), OFCCL_ERR_CONFIG);
    ofccl__strlcpy(name, var, sizeof(name));
    *strchr(name, '=') = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, name));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, allowed_fragment));
    CU_ASSERT_EQUAL(((unsigned char *)&cfg)[0], 0x5a); /* output untouched on failure */
}

static void test_bad_values(void)
{
    expect_bad("OFCCL_LOG_LEVEL=loud", "error|warn|info|debug|trace");
    expect_bad("OFCCL_STRICT=maybe", "true|false");
    expect_bad("OFCCL_BOOT_TIMEOUT_MS=12abc", "integer");
    expect_bad("OFCCL_BOOT_TIMEOUT_MS=", "integer");
    expect_bad("OFCCL_BOOT_TIMEOUT_MS=99999999999999999999", "integer");
    expect_bad("OFCCL_BOOT_TIMEOUT_MS=0", "1..86400000");
    expect_bad("OFCCL_BOOT_RANK=-2", "-1..");
    expect_bad("OFCCL_LOG_SUBSYS=core,bogus", "core|coll|prov|boot|mem|all");
    expect_bad("OFCCL_LOG_SUBSYS=", "comma-separated");
    expect_bad("OFCCL_SIGNAL=carrier-pigeon", "auto|cqdata|atomic");
    expect_bad("OFCCL_BOOT=mpi", "auto|pmix|tcp|singleton");
}

static void test_too_long(void)
{
    char big[400], var[420];
    const char *env[] = {var, NULL};
    ofccl__config_t cfg;
    ofccl__err_t e;

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    snprintf(var, sizeof(var), "OFCCL_PROVIDER=%s", big);
    CU_ASSERT_EQUAL(load(env, NULL, &cfg, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_PROVIDER"));
}

static void test_settings_override(void)
{
    const char *const env[] = {"OFCCL_PROVIDER=tcp", "OFCCL_STRICT=0", NULL};
    const char *const settings[] = {"PROVIDER=shm", "OFCCL_STRICT=1", "log_level=info", NULL};
    const char *const unknown[] = {"PROVDER=shm", NULL};
    const char *const malformed[] = {"PROVIDER", NULL};
    const char *const invalid[] = {"STRICT=perhaps", NULL};
    ofccl__config_t cfg;
    ofccl__err_t e;

    CU_ASSERT_EQUAL_FATAL(load(env, settings, &cfg, &e), 0);
    CU_ASSERT_STRING_EQUAL(ofccl__cfg_str(&cfg, OFCCL__CFG_PROVIDER), "shm");
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_STRICT), 1);
    CU_ASSERT_EQUAL(ofccl__cfg_int(&cfg, OFCCL__CFG_LOG_LEVEL), 2);
    CU_ASSERT_EQUAL(cfg.v[OFCCL__CFG_PROVIDER].from, 2);

    CU_ASSERT_EQUAL(load(env, unknown, &cfg, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "PROVDER"));
    CU_ASSERT_EQUAL(load(env, malformed, &cfg, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "NAME=value"));
    CU_ASSERT_EQUAL(load(env, invalid, &cfg, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_STRICT"));
}

static void test_parse_direct(void)
{
    ofccl__cfg_value_t v;
    ofccl__err_t e;

    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_LOG_SUBSYS, "all", &v, &e), 0);
    CU_ASSERT_EQUAL(v.i, 0x1f);
    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_LOG_SUBSYS, "mem", &v, &e), 0);
    CU_ASSERT_EQUAL(v.i, 1 << 4);
    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_STRICT, "OFF", &v, &e), 0);
    CU_ASSERT_EQUAL(v.i, 0);
    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_OPS_INFLIGHT, "16", &v, &e), 0);
    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_OPS_INFLIGHT, "15", &v, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_EQUAL(ofccl__config_parse(-1, "1", &v, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_COUNT, "1", &v, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__config_parse(OFCCL__CFG_STRICT, NULL, &v, &e), OFCCL_ERR_INVALID_ARG);
}

static void test_environment_scans(void)
{
    char buf[512];

    setenv("OFCCL_PROVDER", "tcp", 1);
    setenv("OFCCL_STRICT", "0", 1);
    setenv("OFCCL_TEST_SEED", "7", 1);
    ofccl__config_unknown_env(buf, sizeof(buf));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "OFCCL_PROVDER"));
    CU_ASSERT_PTR_NULL(strstr(buf, "OFCCL_STRICT"));
    CU_ASSERT_PTR_NULL(strstr(buf, "OFCCL_TEST_SEED")); /* the test suite's, not a typo */
    unsetenv("OFCCL_PROVDER");
    unsetenv("OFCCL_STRICT");
    unsetenv("OFCCL_TEST_SEED");

    setenv("SLURM_JOB_ID", "42", 1);
    setenv("OMPI_MCA_btl", "self", 1);
    setenv("SLURM_CONF", "/etc/slurm/slurm.conf", 1);
    ofccl__config_launcher_env(buf, sizeof(buf));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "SLURM_JOB_ID"));
    CU_ASSERT_PTR_NULL(strstr(buf, "OMPI_MCA_btl"));
    CU_ASSERT_PTR_NULL(strstr(buf, "SLURM_CONF"));
    unsetenv("SLURM_JOB_ID");
    unsetenv("OMPI_MCA_btl");
    unsetenv("SLURM_CONF");

    /* srun --mpi=pmi2 sets dozens of SLURM_* variables before PMI_FD: the
     * PMI_ name must still be listed, first, however full the buffer gets. */
    for (int k = 0; k < 64; k++) {
        char name[32];
        snprintf(name, sizeof(name), "SLURM_TEST_VARIABLE_%02d", k);
        setenv(name, "1", 1);
    }
    setenv("PMI_FD", "5", 1);
    ofccl__config_launcher_env(buf, sizeof(buf));
    CU_ASSERT_EQUAL(strncmp(buf, "PMI_FD", 6), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "SLURM_TEST_VARIABLE_00"));
    for (int k = 0; k < 64; k++) {
        char name[32];
        snprintf(name, sizeof(name), "SLURM_TEST_VARIABLE_%02d", k);
        unsetenv(name);
    }
    unsetenv("PMI_FD");
}

static void test_strerror(void)
{
    static const int codes[] = {
#define X_CODE(name, code, text) code,
        OFCCL_ERROR_LIST(X_CODE)
#undef X_CODE
    };
    for (size_t k = 0; k < OFCCL__ARRAY_LEN(codes); k++) {
        CU_ASSERT_TRUE(codes[k] <= 0);
        CU_ASSERT_STRING_NOT_EQUAL(ofccl_strerror(codes[k]), "unknown error code");
        for (size_t j = 0; j < k; j++)
            CU_ASSERT_NOT_EQUAL(codes[j], codes[k]);
    }
    CU_ASSERT_STRING_EQUAL(ofccl_strerror(0), "success");
    CU_ASSERT_STRING_EQUAL(ofccl_strerror(12345), "unknown error code");
}

static void test_base_helpers(void)
{
    uint8_t a[32] = {0}, b[32] = {0};
    char small[4];
    int major = -1;

    CU_ASSERT_EQUAL(ofccl__crc32(0, "123456789", 9), 0xCBF43926u); /* the standard check value */
    CU_ASSERT_EQUAL(ofccl__random_bytes(a, sizeof(a)), 0);
    CU_ASSERT_EQUAL(ofccl__random_bytes(b, sizeof(b)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    CU_ASSERT_EQUAL(ofccl__strlcpy(small, "abcdef", sizeof(small)), 6);
    CU_ASSERT_STRING_EQUAL(small, "abc");
    ofccl_version(&major, NULL, NULL);
    CU_ASSERT_EQUAL(major, OFCCL_VERSION_MAJOR);
    CU_ASSERT_PTR_NOT_NULL(strstr(ofccl_version_string(), "."));
}

static void test_ctx_bad_params(void)
{
    char err[256] = "";
    const char *const bad[] = {"LOG_LEVEL=shouty", NULL};
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = bad, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_params_t tiny = {.size = 4};
    ofccl_ctx_t *ctx = (ofccl_ctx_t *)&p; /* must stay untouched */

    CU_ASSERT_EQUAL(ofccl_ctx_create(&p, &ctx), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_EQUAL(ctx, (ofccl_ctx_t *)&p);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "OFCCL_LOG_LEVEL=shouty"));
    CU_ASSERT_EQUAL(ofccl_ctx_create(&tiny, &ctx), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_ctx_create(NULL, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_ctx_destroy(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_world(NULL, NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_destroy(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_barrier(NULL), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl_comm_rank(NULL, NULL), OFCCL_ERR_INVALID_ARG);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"defaults", test_defaults},
        {"environment values", test_env_values},
        {"bad values name the variable", test_bad_values},
        {"too long value", test_too_long},
        {"settings override the environment", test_settings_override},
        {"parse directly", test_parse_direct},
        {"environment scans", test_environment_scans},
        {"strerror covers every code", test_strerror},
        {"base helpers", test_base_helpers},
        {"ctx create rejects bad params", test_ctx_bad_params},
        {NULL, NULL},
    };
    return cu_run("config", tests);
}
