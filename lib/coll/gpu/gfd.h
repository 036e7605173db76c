/*
 * Private to lib/coll/gpu: file descriptors from rank to rank on one host
 * (gfd.c), for the pieces of a caller's virtual GPU memory (greg.c).
 */
#ifndef OFCCL_COLL_GPU_GFD_H
#define OFCCL_COLL_GPU_GFD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

/* A mailbox: peers reach it by (pid, box). */
typedef struct ofccl__gfd {
    int fd;
    uint32_t pid, box;
} ofccl__gfd_t;

/* Open this process's mailbox (m->fd < 0 until then); `why` on failure. */
int ofccl__gfd_open(ofccl__gfd_t *m, char *why, size_t len);
void ofccl__gfd_close(ofccl__gfd_t *m);
/* Send a share's descriptors and piece lengths to the mailbox (pid, box),
 * marked with the registration's tag and this rank; s NULL: tell the peer
 * this rank failed (nothing rides along). */
int ofccl__gfd_send(const ofccl__gfd_t *m, uint32_t pid, uint32_t box, uint64_t tag, int from,
                    const ofccl__gpu_share_t *s, char *why, size_t len);
/* Receive one datagram of `tag` from every rank r with expect[r] into
 * shares[r] (npieces 0 there until it comes), by the deadline. A rank that
 * said it failed, or one whose datagram did not come, is *culprit. */
int ofccl__gfd_recv(const ofccl__gfd_t *m, uint64_t tag, const bool *expect, int n,
                    ofccl__gpu_share_t *shares, uint64_t deadline_ns, int *culprit, char *why,
                    size_t len);

#endif
