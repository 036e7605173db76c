/*
 * ceiling_all's loopback TCP columns (ceiling_tcp.c), the references for a
 * collective over the tcp provider on one host:
 *   - the ring: each process streams blocks to the next while it receives from
 *     the previous, no synchronisation between blocks;
 *   - the mesh: the direct all-gather's own pattern over sockets, with no
 *     protocol: each process sends its block (size/N) to every other process
 *     and receives theirs, then all meet at a barrier, round after round.
 * Both send and receive without sleeping, as ofccl's progress loop does, and
 * report bytes received per second per process (best of `rounds` rounds, all
 * processes starting every round together). ceil_best, the timing of those
 * rounds, also times ceiling_all's other synchronised columns.
 */
#ifndef OFCCL_PERF_CEILING_TCP_H
#define OFCCL_PERF_CEILING_TCP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CEIL_TCP_MAXN 1024

/* One listener per process on 127.0.0.1, made before the fork. */
typedef struct ceil_tcp {
    int lfd[CEIL_TCP_MAXN];
    uint16_t port[CEIL_TCP_MAXN];
} ceil_tcp_t;

/* How processes meet: every round starts at `bar`; the steps of a
 * synchronised pattern end at `meet(arg)` (0, or -1 after a timeout: a process
 * failed). */
typedef struct ceil_sync {
    pthread_barrier_t *bar;
    int (*meet)(void *arg);
    void *arg;
    int rounds;
} ceil_sync_t;

/* Best of s->rounds rounds, every process starting each at s->bar: a round
 * runs step(arg, deadline) max(3, total / per) times, each followed by
 * s->meet when `meet` is set, and is rated at `per` bytes a step per second;
 * deadline is 30 s after the round's start. `ok` 0 (a set-up that failed) or a
 * failed step or meeting still takes part in every round's start, and gives
 * -1, as does per == 0. */
double ceil_best(const ceil_sync_t *s, int ok, size_t total, size_t per, int meet,
                 int (*step)(void *arg, double deadline), void *arg);

/* Listeners for n processes, each taking up to n connections; -1 on failure. */
int ceil_tcp_listen(ceil_tcp_t *g, int n);
void ceil_tcp_close(ceil_tcp_t *g, int n);
/* The ring with blocks of `bytes` (src and dst of that size), at least 3
 * blocks and `total` bytes per round; -1 if it could not be made or failed. */
double ceil_tcp_ring(const ceil_sync_t *s, const ceil_tcp_t *g, int n, int me, const char *src,
                     char *dst, size_t bytes, size_t total);
/* The mesh on a collective of `bytes` (blocks of bytes/n: src holds at least
 * one, dst all n), at least 3 rounds and `total` bytes received per round;
 * -1 as for the ring. Needs n >= 2 and the ring's connections closed. */
double ceil_tcp_mesh(const ceil_sync_t *s, const ceil_tcp_t *g, int n, int me, const char *src,
                     char *dst, size_t bytes, size_t total);

#endif
