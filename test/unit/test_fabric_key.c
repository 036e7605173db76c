/*
 * The fabric's domain authorization key from the job secret: the bytes every
 * rank derives (against an HMAC computed here from the documented recipe),
 * which providers take them (a provider reporting a key size does, cxi keeps
 * its launcher's VNI, one with none says so), and a real provider here
 * opened with a job key (none of them has a key: the fabric says so).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <rdma/fi_domain.h>

#include "boot.h"
#include "cu.h"
#include "fabric/fabric.h"
#include "prov.h"

static ofccl__log_t g_log;

static void write_secret(const char *path, const char *secret)
{
    FILE *f = fopen(path, "w");

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(secret, f);
    fputs("\n", f); /* trailing white space is not part of the secret */
    fclose(f);
    CU_ASSERT_EQUAL(chmod(path, 0600), 0);
}

/* The recipe of boot.h, written out: K = SHA-256("ofccl job secret v1" |
 * secret), block b = HMAC-SHA-256(K, "ofccl fabric key" | b). */
static void expected(const char *secret, uint8_t out[64])
{
    uint8_t k[32], msg[64];
    char in[256];
    unsigned len = 0;

    snprintf(in, sizeof(in), "ofccl job secret v1%s", secret);
    SHA256((const uint8_t *)in, strlen(in), k);
    for (int b = 0; b < 2; b++) {
        size_t n = strlen("ofccl fabric key");
        memcpy(msg, "ofccl fabric key", n);
        msg[n] = (uint8_t)b;
        HMAC(EVP_sha256(), k, 32, msg, n + 1, out + 32 * b, &len);
        CU_ASSERT_EQUAL(len, 32);
    }
}

static void test_derive(void)
{
    char path[] = "/tmp/ofccl-fabkey-XXXXXX";
    uint8_t got[64], want[64], again[64], other[64], shortk[8];
    ofccl__err_t e = {0};
    int fd = mkstemp(path);

    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    write_secret(path, "correct horse battery staple");
    CU_ASSERT_EQUAL(ofccl__boot_fabric_key(path, &g_log, got, sizeof(got), &e), 0);
    expected("correct horse battery staple", want);
    CU_ASSERT_EQUAL(memcmp(got, want, 64), 0);
    /* every rank derives the same bytes; a prefix for a shorter key */
    CU_ASSERT_EQUAL(ofccl__boot_fabric_key(path, &g_log, again, sizeof(again), &e), 0);
    CU_ASSERT_EQUAL(memcmp(got, again, 64), 0);
    CU_ASSERT_EQUAL(ofccl__boot_fabric_key(path, &g_log, shortk, sizeof(shortk), &e), 0);
    CU_ASSERT_EQUAL(memcmp(shortk, want, 8), 0);
    /* another secret, other bytes */
    write_secret(path, "correct horse battery stapler");
    CU_ASSERT_EQUAL(ofccl__boot_fabric_key(path, &g_log, other, sizeof(other), &e), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(got, other, 64), 0);
    /* a bad secret names the setting, never the content */
    write_secret(path, "short");
    CU_ASSERT_EQUAL(ofccl__boot_fabric_key(path, &g_log, other, sizeof(other), &e),
                    OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_BOOT_SECRET_FILE"));
    CU_ASSERT_PTR_NULL(strstr(e.msg, "short"));
    unlink(path);
    CU_ASSERT_EQUAL(ofccl__boot_fabric_key(path, &g_log, other, sizeof(other), &e),
                    OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path));
}

static struct fi_info *entry(const char *prov, size_t key_size)
{
    struct fi_info *i = fi_allocinfo();

    CU_ASSERT_PTR_NOT_NULL_FATAL(i);
    i->fabric_attr->prov_name = strdup(prov);
    i->domain_attr->auth_key_size = key_size;
    return i;
}

static void test_which_providers(void)
{
    uint8_t job[OFCCL__PROV_JOB_KEY_LEN];
    ofccl__prov_params_t p = {.log = &g_log, .job_key = job};
    struct fi_info *i;

    for (size_t k = 0; k < sizeof(job); k++)
        job[k] = (uint8_t)(0xa5 ^ k);
    /* a provider that reports a 16-byte key takes the first 16 bytes */
    i = entry("keyed", 16);
    CU_ASSERT_EQUAL(ofccl__fab_auth_key(&p, i), OFCCL__AUTH_KEY_DERIVED);
    CU_ASSERT_PTR_NOT_NULL_FATAL(i->domain_attr->auth_key);
    CU_ASSERT_EQUAL(i->domain_attr->auth_key_size, 16);
    CU_ASSERT_EQUAL(memcmp(i->domain_attr->auth_key, job, 16), 0);
    fi_freeinfo(i); /* frees the key with the entry */
    /* none offered, or longer than the job key */
    i = entry("tcp", 0);
    CU_ASSERT_EQUAL(ofccl__fab_auth_key(&p, i), OFCCL__AUTH_KEY_UNOFFERED);
    CU_ASSERT_PTR_NULL(i->domain_attr->auth_key);
    fi_freeinfo(i);
    i = entry("keyed", OFCCL__PROV_JOB_KEY_LEN + 1);
    CU_ASSERT_EQUAL(ofccl__fab_auth_key(&p, i), OFCCL__AUTH_KEY_UNOFFERED);
    CU_ASSERT_PTR_NULL(i->domain_attr->auth_key);
    fi_freeinfo(i);
    /* cxi keeps its launcher's VNI */
    i = entry("cxi", 8);
    CU_ASSERT_EQUAL(ofccl__fab_auth_key(&p, i), OFCCL__AUTH_KEY_LAUNCHER);
    CU_ASSERT_PTR_NULL(i->domain_attr->auth_key);
    fi_freeinfo(i);
    /* no secret: nothing asked */
    p.job_key = NULL;
    i = entry("keyed", 16);
    CU_ASSERT_EQUAL(ofccl__fab_auth_key(&p, i), OFCCL__AUTH_KEY_NO_SECRET);
    CU_ASSERT_PTR_NULL(i->domain_attr->auth_key);
    fi_freeinfo(i);
}

/* The providers here have no key: opened with a job key, each says so. */
static void test_real_providers(void)
{
    static const char *const names[][2] = {{"tcp", "lo"}, {"shm", ""}};
    uint8_t job[OFCCL__PROV_JOB_KEY_LEN] = {1, 2, 3};

    for (size_t n = 0; n < 2; n++) {
        ofccl__prov_params_t p = {
            .provider = names[n][0], .domain = names[n][1], .log = &g_log, .job_key = job};
        ofccl__prov_t *prov = NULL;
        ofccl__err_t e = {0};

        CU_ASSERT_EQUAL_FATAL(ofccl__prov_open(&p, &prov, &e), 0);
        CU_ASSERT_EQUAL(ofccl__prov_caps(prov)->auth_key, OFCCL__AUTH_KEY_UNOFFERED);
        CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
        p.job_key = NULL;
        CU_ASSERT_EQUAL_FATAL(ofccl__prov_open(&p, &prov, &e), 0);
        CU_ASSERT_EQUAL(ofccl__prov_caps(prov)->auth_key, OFCCL__AUTH_KEY_NO_SECRET);
        CU_ASSERT_EQUAL(ofccl__prov_close(prov), 0);
    }
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"key bytes from the job secret", test_derive},
        {"which providers take it", test_which_providers},
        {"tcp and shm have none", test_real_providers},
        {NULL, NULL},
    };

    ofccl__log_init(&g_log);
    return cu_run("fabric-key", tests);
}
