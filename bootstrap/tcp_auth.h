/*
 * The TCP rendezvous's job secret (private to bootstrap/): who may join.
 *
 * With a secret set (OFCCL_BOOT_SECRET_FILE), admission is a challenge and
 * response in both directions, by HMAC-SHA-256 (OpenSSL's libcrypto) under a
 * key derived from the secret:
 *
 *   rank -> root: its hello (as without a secret);
 *   root -> rank: CHALLENGE, a fresh 32-byte nonce Nr;
 *   rank -> root: PROOF, its own fresh nonce Nc and
 *                 HMAC(K, "ofccl rank" | Nr | Nc | hello);
 *   root -> rank: PROVEN, HMAC(K, "ofccl root" | Nc | Nr | hello), which the
 *                 rank checks before it sends anything else;
 *   then the host table, as without a secret.
 *
 * Both nonces are fresh per connection, so nothing seen on the wire lets
 * anyone join later, and a process posing as the root learns no setup
 * record. The record server (tcp_records.c) opens each connection with a
 * nonce Ns and serves a rank only after HMAC(K, "ofccl records" | Ns | rank).
 * CHALLENGE and PROVEN are host-table frames with their own status, so a
 * rank without a secret that meets a root with one says what is missing.
 * The secret never leaves the process: not in frames, logs or messages.
 */
#ifndef OFCCL_BOOTSTRAP_TCP_AUTH_H
#define OFCCL_BOOTSTRAP_TCP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "log.h"

#define OFCCL__AUTH_LEN 32                             /* key, nonce and MAC bytes */
#define OFCCL__TCP_PROOF_MAGIC 0x50424F4Fu             /* "OFBP" */
#define OFCCL__TCP_RECAUTH_MAGIC 0x41424F4Fu           /* "OFBA" */
#define OFCCL__TCP_PROOF_LEN (8 + 2 * OFCCL__AUTH_LEN) /* magic, rank, Nc, MAC */
#define OFCCL__TCP_RECAUTH_LEN (8 + OFCCL__AUTH_LEN)   /* magic, rank, MAC */

typedef struct ofccl__auth {
    bool on;
    uint8_t key[OFCCL__AUTH_LEN];
} ofccl__auth_t;

/* Read the secret in `path` (at most 4 KiB, at least 16 bytes once trailing
 * white space is dropped) and derive the key. Errors name the setting and
 * the path, never the content. */
int ofccl__auth_load(const char *path, const ofccl__log_t *log, ofccl__auth_t *a, ofccl__err_t *e);
/* A fresh nonce from the system's generator; 0 or OFCCL_ERR_INTERNAL. */
int ofccl__auth_nonce(uint8_t n[OFCCL__AUTH_LEN]);
/* HMAC(K, label | p1 | p2 | p3) (any part may be empty). */
void ofccl__auth_mac(const ofccl__auth_t *a, const char *label, const void *p1, size_t l1,
                     const void *p2, size_t l2, const void *p3, size_t l3,
                     uint8_t out[OFCCL__AUTH_LEN]);
/* Constant-time comparison of two MACs. */
bool ofccl__auth_equal(const uint8_t *x, const uint8_t *y);
/* Forget the key. */
void ofccl__auth_clear(ofccl__auth_t *a);
/* The one-time warning of a root without a secret (once per process). */
void ofccl__auth_warn_open(const ofccl__log_t *log, const char *root);

#endif
