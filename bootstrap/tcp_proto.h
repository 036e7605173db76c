/*
 * The TCP bootstrap's wire protocol and state, shared by its files: tcp.c
 * (parameters, the ranks' side of the rendezvous), tcp_root.c (rank 0's side:
 * listening, the host table), tcp_admit.c (rank 0 accepting, vetting and
 * evicting connections) and tcp_exchange.c (allgather and barrier). Private to
 * bootstrap/.
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
 *   get, rank r -> root's record server (tcp_records.c): u32 magic, u32 rank,
 *                          u64 tag, u32 wanted rank, u32 0
 *   record, server -> r:   a down frame with magic REC and seq = tag; body: the
 *                          wanted rank's published bytes
 * A publish is an exchange whose down frame carries only the record server's
 * port (u32) and a u32 0: the root keeps the records and serves them one at a
 * time, instead of relaying all N to every rank.
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
#include "tcp_auth.h"
#include "tcp_io.h"

#define OFCCL__TCP_HELLO_MAGIC 0x48424F4Fu /* "OFBH" */
#define OFCCL__TCP_TABLE_MAGIC 0x54424F4Fu /* "OFBT" */
#define OFCCL__TCP_UP_MAGIC 0x58424F4Fu    /* "OFBX" */
#define OFCCL__TCP_DOWN_MAGIC 0x59424F4Fu  /* "OFBY" */
#define OFCCL__TCP_GET_MAGIC 0x47424F4Fu   /* "OFBG" */
#define OFCCL__TCP_REC_MAGIC 0x52424F4Fu   /* "OFBR" */
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
    /* a job secret's handshake (tcp_auth.h): 32-byte bodies, the nonce and
     * the root's proof */
    OFCCL__TCP_ST_CHALLENGE = 4,
    OFCCL__TCP_ST_PROVEN = 5,
};

typedef struct ofccl__tcp_records ofccl__tcp_records_t;

typedef struct ofccl__tcp_boot {
    ofccl__tcp_conn_t *conns; /* root: one per rank ([0] unused); others: [0] = the root */
    int nconns;
    char root[128];
    int broken; /* an exchange failed: the streams are out of step for good */
    /* The root's address as resolved at open: the record server listens on
     * its host (root), ranks connect to it with the server's port (others). */
    struct sockaddr_storage root_sa;
    socklen_t root_salen;
    int root_socktype;
    ofccl__tcp_records_t *rec; /* published records (tcp_records.c); NULL until a publish */
    /* Root only: bytes the exchanges took in and sent out (INFO at finalize). */
    uint64_t bytes_in, bytes_out;
    ofccl__auth_t auth; /* the job secret's key, if one is set */
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

/* Publish (lazy exchange): every rank's bytes go to the root, which keeps
 * them; *tag names them for get. Collective (tcp_exchange.c). */
int ofccl__tcp_publish(ofccl__boot_t *b, const void *in, size_t len, size_t slot, uint64_t *tag,
                       ofccl__err_t *e);
int ofccl__tcp_allreduce(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n,
                         const uint8_t *ops, ofccl__err_t *e);
/* Read rank `rank`'s bytes published under `tag` from the root's record
 * server (the root reads its own table). Local to the caller; bounded by the
 * timeout (tcp_records.c). */
int ofccl__tcp_get(ofccl__boot_t *b, uint64_t tag, int rank, void *out, size_t cap, size_t *len,
                   ofccl__err_t *e);
/* Root: keep `n` records (data [n * slot], lens [n]; taken over, freed by the
 * server) under `tag`, starting the record server the first time; *port gets
 * its port. Others: remember the server's port. */
int ofccl__tcp_rec_store(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t tag, uint8_t *data,
                         size_t slot, size_t *lens, int *port, ofccl__err_t *e);
int ofccl__tcp_rec_port(ofccl__boot_t *b, ofccl__tcp_boot_t *t, int port, ofccl__err_t *e);
/* Stop the server (root), close the connection to it, free the records. */
void ofccl__tcp_rec_close(ofccl__boot_t *b, ofccl__tcp_boot_t *t);

/* Rank 0: listen on `ai`, gather every rank's hello, fill b->host_of and the
 * local rank, and send every rank the host table, all by `deadline`. On
 * failure the connected ranks are told why and every connection is closed. */
int ofccl__tcp_root_open(ofccl__boot_t *b, ofccl__tcp_boot_t *t, struct addrinfo *ai,
                         uint64_t deadline, ofccl__err_t *e);
/* Rank 0, tcp_admit.c: accept connections on `lfd` and vet their hellos until
 * every other rank has joined, by `deadline`; a joined rank r's connection
 * becomes t->conns[r], its hostname hosts[r] ([size][OFCCL__TCP_HOST_LEN])
 * and its host identity ids[r] (strdup'ed: the caller frees them). */
int ofccl__tcp_admit(ofccl__boot_t *b, ofccl__tcp_boot_t *t, int lfd, uint64_t deadline,
                     char *hosts, char **ids, ofccl__err_t *e);
/* Tell every connected rank why the root gives up (a `magic` frame with
 * status ABORT), then close its connection. Best effort, never blocks. */
void ofccl__tcp_root_abort(ofccl__tcp_boot_t *t, uint32_t magic, uint64_t seq, int size,
                           const char *why);

#endif
