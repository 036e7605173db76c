/*
 * The TCP bootstrap's wire protocol and state, shared by its files: tcp.c
 * (parameters, the ranks' side of the rendezvous), tcp_root.c (rank 0's side:
 * accepting, vetting and evicting connections) and tcp_exchange.c (allgather
 * and barrier). Private to bootstrap/.
 *
 * Frames (little-endian), protocol version 2:
 *   hello, rank r -> root: u32 magic, u16 version, u16 id_len, u32 rank, u32 size,
 *                          char hostname[64], u8 host_identity[id_len] (1..255,
 *                          printable ASCII)
 *   up, rank r -> root:    u32 magic, u32 rank, u64 seq, u32 len, u32 0, bytes
 *   down, root -> rank r:  u32 magic, u32 status, u64 seq, u32 size, u32 body_len,
 *                          body (status OK: the rendezvous's u32 host_of[size], or
 *                          an exchange's u32 lens[size] + bytes; otherwise the
 *                          reason as text)
 * A rendezvous answer with status RETRY means the root closed the connection
 * before it read a complete hello (its table of pending connections was full,
 * or the hello was late): the rank connects again, until its deadline.
 * Version 1 hellos (no identity; the table held hostnames) are rejected with
 * a reason naming both versions.
 */
#ifndef OFCCL_BOOTSTRAP_TCP_PROTO_H
#define OFCCL_BOOTSTRAP_TCP_PROTO_H

#include <netdb.h>
#include <stdint.h>

#include "boot.h"
#include "tcp_io.h"

#define OFCCL__TCP_HELLO_MAGIC 0x48424F4Fu /* "OFBH" */
#define OFCCL__TCP_TABLE_MAGIC 0x54424F4Fu /* "OFBT" */
#define OFCCL__TCP_UP_MAGIC 0x58424F4Fu    /* "OFBX" */
#define OFCCL__TCP_DOWN_MAGIC 0x59424F4Fu  /* "OFBY" */
#define OFCCL__TCP_VERSION 2
#define OFCCL__TCP_HOST_LEN 64
#define OFCCL__TCP_HELLO_LEN (16 + OFCCL__TCP_HOST_LEN) /* without the identity */
_Static_assert(OFCCL__TCP_HELLO_LEN <= OFCCL__TCP_HDR_MAX, "a hello's header fits a conn's hdr");
#define OFCCL__TCP_FRAME_HDR 24
#define OFCCL__TCP_MAX_FRAME (64u << 20) /* no bootstrap frame is ever legitimately larger */
#define OFCCL__TCP_MAX_REASON 400

enum {
    OFCCL__TCP_ST_OK = 0,
    OFCCL__TCP_ST_REJECT = 1,
    OFCCL__TCP_ST_ABORT = 2,
    OFCCL__TCP_ST_RETRY = 3,
};

typedef struct ofccl__tcp_boot {
    ofccl__tcp_conn_t *conns; /* root: one per rank ([0] unused); others: [0] = the root */
    int nconns;
    char root[128];
    int broken; /* an exchange failed: the streams are out of step for good */
} ofccl__tcp_boot_t;

typedef struct ofccl__tcp_down {
    uint32_t magic; /* expected frame */
    uint64_t seq;
    size_t max_body; /* largest acceptable body (status OK) */
    uint8_t *body;   /* received body (malloc'd; the caller frees) */
    size_t body_len;
    int status;
    char reason[OFCCL__TCP_MAX_REASON + 1];
    const char *what;
} ofccl__tcp_down_t;

/* Receive stages of every root -> rank frame (an ofccl__tcp_step_fn over an
 * ofccl__tcp_down_t): header, then the body or the reason text. */
int ofccl__tcp_down_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e);
/* The ops table's allgather and barrier (tcp_exchange.c). */
int ofccl__tcp_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                         size_t *lens, ofccl__err_t *e);
int ofccl__tcp_barrier(ofccl__boot_t *b, ofccl__err_t *e);

/* Rank 0: listen on `ai`, gather every rank's hello, fill b->host_of and the
 * local rank, and send every rank the host table, all by `deadline`. On
 * failure the connected ranks are told why and every connection is closed. */
int ofccl__tcp_root_open(ofccl__boot_t *b, ofccl__tcp_boot_t *t, struct addrinfo *ai,
                         uint64_t deadline, ofccl__err_t *e);
/* Tell every connected rank why the root gives up (a `magic` frame with
 * status ABORT), then close its connection. Best effort, never blocks. */
void ofccl__tcp_root_abort(ofccl__tcp_boot_t *t, uint32_t magic, uint64_t seq, int size,
                           const char *why);

#endif
