/*
 * Per-operation timelines (OFCCL_TRACE=<dir>): each context records spans —
 * a collective, its phases per peer (waiting for a descriptor, sending,
 * receiving) and every data write — into a bounded in-memory buffer, and
 * writes them as Chrome trace-event JSON to <dir>/ofccl-trace-<job>-<rank>.json
 * when a communicator is destroyed, when the context closes, at exit and on a
 * state dump. Off (ctx->trace == NULL) it costs one predictable branch.
 */
#ifndef OFCCL_CORE_TRACE_H
#define OFCCL_CORE_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "core.h"

enum ofccl__trace_kind {
    OFCCL__TR_COLL = 0,   /* one collective, post to completion */
    OFCCL__TR_BUCKET = 1, /* one bucket collective (tensors copied in and out) */
    OFCCL__TR_DESC = 2,   /* phase: waiting for a peer's descriptor (its buffer is free) */
    OFCCL__TR_SEND = 3,   /* phase: first write posted to a peer until the last completed */
    OFCCL__TR_RECV = 4,   /* phase: post until the last unit from a peer arrived */
    OFCCL__TR_CHUNK = 5,  /* one data write (a chunk of a block at a step) */
    OFCCL__TR_FINISH = 6, /* phase: results copied out of staging at completion */
};

typedef struct ofccl__trace_ev {
    uint64_t ts_ns, dur_ns; /* CLOCK_MONOTONIC */
    uint64_t seq, bytes;
    const char *algo;
    uint32_t comm;
    int32_t peer; /* -1: none */
    uint32_t unit;
    int16_t kind, coll;
    int32_t status;
} ofccl__trace_ev_t;

/* What a request remembers per peer while tracing (ofccl__req_t.tr). */
typedef struct ofccl__trace_peer {
    uint64_t ready_ns;  /* its descriptor was taken */
    uint64_t first_out; /* first write to it posted */
    uint64_t last_out;  /* last write to it completed */
    uint64_t last_in;   /* last unit from it arrived */
    uint64_t bytes_out; /* bytes written to it */
} ofccl__trace_peer_t;

typedef struct ofccl__trace ofccl__trace_t;

/* Open the context's trace when OFCCL_TRACE names a directory (ctx->trace
 * stays NULL otherwise): checks the directory is writable now. */
int ofccl__trace_open(ofccl_ctx_t *ctx);
/* Write the file (all events so far) and free the trace. */
void ofccl__trace_close(ofccl_ctx_t *ctx);
/* Write the file now (comm destroy, state dump); 0 or an error code. */
int ofccl__trace_write(ofccl__trace_t *t);
/* Record one event (dropped and counted when the buffer is full). */
void ofccl__trace_add(ofccl__trace_t *t, const ofccl__trace_ev_t *ev);
/* The clock offset to rank 0 estimated when the world communicator was made
 * (ns, this rank's clock minus rank 0's) and how. */
void ofccl__trace_set_offset(ofccl__trace_t *t, int64_t offset_ns, const char *method);
/* The file's path ("" when off). */
const char *ofccl__trace_path(const ofccl__trace_t *t);
/* Events recorded and dropped so far. */
void ofccl__trace_counts(const ofccl__trace_t *t, uint64_t *events, uint64_t *dropped);

/* The engine's hooks, called only when ctx->trace != NULL: a request was
 * posted; a descriptor from `peer` was taken; a unit from `peer` arrived; a
 * request completed (records its span and its phases; `finish_ns`: when its
 * copy out of staging began, 0 if it had none). */
void ofccl__trace_req_start(ofccl_req_t *r);
void ofccl__trace_req_ready(ofccl_req_t *r, int peer);
void ofccl__trace_req_in(ofccl_req_t *r, int peer);
/* A data write of `len` bytes to `peer`, posted at `t0`, completed now. */
void ofccl__trace_chunk(ofccl_req_t *r, int peer, uint32_t unit, size_t len, uint64_t t0);
void ofccl__trace_req_done(ofccl_req_t *r, uint64_t finish_ns);

#endif
