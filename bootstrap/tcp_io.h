/*
 * Socket plumbing of the TCP bootstrap (private to bootstrap/): connections
 * with one pending outgoing frame and a chain of receive stages each, driven
 * together by poll() until done or until a deadline. tcp.c holds the
 * protocol; this file only moves bytes, so every wait in the protocol is
 * bounded by the same loop.
 */
#ifndef OFCCL_BOOTSTRAP_TCP_IO_H
#define OFCCL_BOOTSTRAP_TCP_IO_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "boot.h"
#include "util.h"

#define OFCCL__TCP_HDR_MAX 80 /* largest fixed-size frame or header */

typedef struct ofccl__tcp_conn {
    int fd;
    int rank;           /* the peer's rank (0 on non-root ranks) */
    const uint8_t *out; /* frame being sent */
    size_t out_len, out_off;
    uint8_t *in; /* where the current receive stage lands */
    size_t in_len, in_off;
    int stage;                       /* receive stage; 0 = nothing (more) to receive */
    uint8_t hdr[OFCCL__TCP_HDR_MAX]; /* fixed-size frames and headers */
    char addr[64];                   /* peer address, for logs */
} ofccl__tcp_conn_t;

/* Called when c->in is full: validate, then point c->in at the next stage or
 * set c->stage = 0. Returns 0 or an error (with the message recorded). */
typedef int (*ofccl__tcp_step_fn)(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg,
                                  ofccl__err_t *e);

#define OFCCL__TCP_CLOSED 1

/* Milliseconds until `deadline` (ns, ofccl__now_ns clock), rounded up; 0 once passed. */
int ofccl__tcp_ms_left(uint64_t deadline);
void ofccl__tcp_sleep_ms(int ms);
void ofccl__tcp_set_nodelay(int fd);
/* "1.2.3.4:5" or "[::1]:5" */
void ofccl__tcp_addr_str(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen);
/* "rank 2" or "ranks 2,3,5": the entries of cs[first..n) that `pick` selects. */
void ofccl__tcp_rank_list(char *buf, size_t len, const ofccl__tcp_conn_t *cs, int n, int first,
                          int (*pick)(const ofccl__tcp_conn_t *c));
/* Open and with something left to send or receive. */
int ofccl__tcp_conn_busy(const ofccl__tcp_conn_t *c);
int ofccl__tcp_conn_missing(const ofccl__tcp_conn_t *c);
void ofccl__tcp_conn_close(ofccl__tcp_conn_t *c);
/* Read until the stage chain ends or the socket would block. Returns 0,
 * OFCCL__TCP_CLOSED (with *err = errno or 0 for EOF), or a step's error. */
int ofccl__tcp_conn_recv(ofccl__boot_t *b, ofccl__tcp_conn_t *c, ofccl__tcp_step_fn step, void *arg,
                         int *err, ofccl__err_t *e);
/*
 * Drive every connection's pending send and receive stages until all are
 * done. Returns 0; OFCCL_ERR_TIMEOUT at the deadline with no message (the
 * caller knows what was awaited and names the late ranks via conn_busy);
 * OFCCL_ERR_REMOTE_ERROR naming a peer that closed; or a step's error.
 */
int ofccl__tcp_io_run(ofccl__boot_t *b, ofccl__tcp_conn_t *cs, int n, uint64_t deadline,
                      ofccl__tcp_step_fn step, void *arg, const char *what, ofccl__err_t *e);
/* One non-blocking connect attempt to one address, bounded by `ms`. Returns
 * a connected non-blocking fd, or -1 with *err set. */
int ofccl__tcp_connect_once(const struct addrinfo *a, int ms, int *err);

#endif
