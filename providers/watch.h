/*
 * Private to providers/: watching peers' processes on this host.
 *
 * A transport that knows a peer's process id (the local transport from its
 * peer's name and segment, libfabric's shm from the endpoint names ofccl gives
 * it) opens a pidfd on it; a pidfd turns readable when its process exits.
 * ofccl__watch_poll, called from every progress pass, polls at most once per
 * millisecond and at most WATCH_WINDOW pidfds per call, the next window each
 * time, so a pass costs the same at 8 peers as at 1,024, and an exit is seen
 * within ceil(peers / WATCH_WINDOW) + 1 polls: 3 ms at 128 watched peers.
 *
 * A peer seen exited is reported one poll late: whatever it wrote before it
 * exited has been drained by the progress passes in between, so a collective
 * it finished feeding still completes. Once reported, that peer is reported
 * on every later call.
 */
#ifndef OFCCL_PROVIDERS_WATCH_H
#define OFCCL_PROVIDERS_WATCH_H

#include <stdint.h>

/* A zeroed watch is empty (holds nothing; ofccl__watch_poll answers -1). */
typedef struct ofccl__watch {
    int *pidfd; /* [n]: -1 = not watched */
    int *pid;   /* [n]: the process watched, -1 = none */
    int n;      /* peers (0 until the first ofccl__watch_add) */
    int next;   /* first peer of the next poll's window */
    int gone;   /* a peer whose process has exited, reported; -1 = none */
    int dying;  /* seen exited at the last poll, reported at the next; -1 = none */
    uint64_t next_ns;
} ofccl__watch_t;

/* Watch `pid` as peer `peer` of `n` (the arrays are made on the first call,
 * for n peers). Returns 0 when watched, ESRCH when no such process exists
 * (the peer is then reported as exited), or another errno value (ENOSYS
 * before Linux 5.3, EMFILE, ENOMEM: not watched; the caller says so). */
int ofccl__watch_add(ofccl__watch_t *w, int n, int peer, int pid);
/* The peer whose process has exited, or -1; *pid (if not NULL) gets its
 * process id, else -1. Cheap: polls at most once per millisecond. */
int ofccl__watch_poll(ofccl__watch_t *w, int *pid);
/* Close every pidfd and free the arrays; the watch is empty again. */
void ofccl__watch_close(ofccl__watch_t *w);

#endif
