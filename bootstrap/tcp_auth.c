/*
 * The job secret's primitives (tcp_auth.h): loading the secret, nonces, and
 * HMAC-SHA-256, all from OpenSSL's libcrypto; and the fabric key derived
 * from the secret (boot.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "boot.h"
#include "tcp_auth.h"
#include "util.h"

#define SECRET_MAX 4096
#define SECRET_MIN 16
#define KEY_LABEL "ofccl job secret v1"

int ofccl__auth_load(const char *path, const ofccl__log_t *log, ofccl__auth_t *a, ofccl__err_t *e)
{
    uint8_t buf[SECRET_MAX + 1], in[sizeof(KEY_LABEL) - 1 + SECRET_MAX];
    struct stat st;
    ssize_t n = 0, got;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return ofccl__fail(log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_SECRET_FILE=%s: cannot open it: %s", path, strerror(errno));
    while (n <= SECRET_MAX && (got = read(fd, buf + n, (size_t)(SECRET_MAX + 1 - n))) > 0)
        n += got;
    if (fstat(fd, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
        OFCCL__WARN(log, OFCCL__SUB_BOOT,
                    "OFCCL_BOOT_SECRET_FILE=%s is readable by its group or others (mode %03o): "
                    "make it 0600",
                    path, (unsigned)(st.st_mode & 0777));
    close(fd);
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    if (n > SECRET_MAX || n < SECRET_MIN) {
        OPENSSL_cleanse(buf, sizeof(buf));
        return ofccl__fail(log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                           "OFCCL_BOOT_SECRET_FILE=%s holds %s: a job secret is %d to %d bytes",
                           path, n > SECRET_MAX ? "more than 4096 bytes" : "too few bytes",
                           SECRET_MIN, SECRET_MAX);
    }
    memcpy(in, KEY_LABEL, sizeof(KEY_LABEL) - 1);
    memcpy(in + sizeof(KEY_LABEL) - 1, buf, (size_t)n);
    SHA256(in, sizeof(KEY_LABEL) - 1 + (size_t)n, a->key);
    OPENSSL_cleanse(buf, sizeof(buf));
    OPENSSL_cleanse(in, sizeof(in));
    a->on = true;
    return 0;
}

int ofccl__auth_nonce(uint8_t n[OFCCL__AUTH_LEN])
{
    return RAND_bytes(n, OFCCL__AUTH_LEN) == 1 ? 0 : OFCCL_ERR_INTERNAL;
}

void ofccl__auth_mac(const ofccl__auth_t *a, const char *label, const void *p1, size_t l1,
                     const void *p2, size_t l2, const void *p3, size_t l3,
                     uint8_t out[OFCCL__AUTH_LEN])
{
    uint8_t msg[64 + 2 * OFCCL__AUTH_LEN + 512];
    size_t ll = strlen(label), n = 0;
    unsigned outlen = 0;

    /* Every part is short: the label, two nonces or a rank, a hello. */
    const void *parts[4] = {label, p1, p2, p3};
    size_t lens[4] = {ll, l1, l2, l3};
    for (int i = 0; i < 4; i++) {
        size_t l = OFCCL__MIN(lens[i], sizeof(msg) - n);
        if (l > 0)
            memcpy(msg + n, parts[i], l);
        n += l;
    }
    HMAC(EVP_sha256(), a->key, OFCCL__AUTH_LEN, msg, n, out, &outlen);
}

bool ofccl__auth_equal(const uint8_t *x, const uint8_t *y)
{
    return CRYPTO_memcmp(x, y, OFCCL__AUTH_LEN) == 0;
}

void ofccl__auth_clear(ofccl__auth_t *a)
{
    OPENSSL_cleanse(a, sizeof(*a));
}

void ofccl__auth_warn_open(const ofccl__log_t *log, const char *root)
{
    static atomic_int said;

    if (atomic_exchange(&said, 1) == 0)
        OFCCL__WARN(log, OFCCL__SUB_BOOT,
                    "TCP rendezvous at %s has no job secret: any process that can reach its "
                    "port can join as a rank (set OFCCL_BOOT_SECRET_FILE on every rank)",
                    root);
}

int ofccl__boot_fabric_key(const char *secret_file, const ofccl__log_t *log, uint8_t *out, size_t n,
                           ofccl__err_t *e)
{
    ofccl__auth_t a = {0};
    uint8_t block[OFCCL__AUTH_LEN];
    int rc = ofccl__auth_load(secret_file, log, &a, e);

    if (rc != 0)
        return rc;
    n = OFCCL__MIN(n, (size_t)OFCCL__BOOT_FABRIC_KEY_MAX);
    for (size_t at = 0, b = 0; at < n; at += OFCCL__AUTH_LEN, b++) {
        uint8_t counter = (uint8_t)b;
        ofccl__auth_mac(&a, "ofccl fabric key", &counter, 1, NULL, 0, NULL, 0, block);
        memcpy(out + at, block, OFCCL__MIN((size_t)OFCCL__AUTH_LEN, n - at));
    }
    OPENSSL_cleanse(block, sizeof(block));
    ofccl__auth_clear(&a);
    return 0;
}
