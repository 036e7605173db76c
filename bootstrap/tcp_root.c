/*
 * Rank 0's side of the TCP rendezvous: listen on the root address, let
 * tcp_admit.c vet every connection until all ranks have joined, and answer
 * them all with the host table (or with the reason the rendezvous failed).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_proto.h"
#include "util.h"

#define MAX_CONFLICT_HOSTS 64 /* hosts checked for a shared hostname (a log line only) */

/* The ranks' hostnames ([size][HOST_LEN]) and host identities, as joined. */
typedef struct joined {
    char *hosts;
    char **ids;
} joined_t;

void ofccl__tcp_root_abort(ofccl__tcp_boot_t *t, uint32_t magic, uint64_t seq, int size,
                           const char *why)
{
    uint8_t frame[OFCCL__TCP_FRAME_HDR + OFCCL__TCP_MAX_REASON];
    size_t len = OFCCL__MIN(strlen(why), (size_t)OFCCL__TCP_MAX_REASON);

    ofccl__put_le32(frame, magic);
    ofccl__put_le32(frame + 4, OFCCL__TCP_ST_ABORT);
    ofccl__put_le64(frame + 8, seq);
    ofccl__put_le32(frame + 16, (uint32_t)size);
    ofccl__put_le32(frame + 20, (uint32_t)len);
    memcpy(frame + OFCCL__TCP_FRAME_HDR, why, len);
    for (int r = 1; r < t->nconns; r++) {
        ofccl__tcp_conn_t *c = &t->conns[r];
        if (c->fd < 0)
            continue;
        /* A peer that was mid-frame only sees the close. */
        if (c->out_off == 0 || c->out_off == c->out_len)
            (void)send(c->fd, frame, OFCCL__TCP_FRAME_HDR + len, MSG_NOSIGNAL | MSG_DONTWAIT);
        ofccl__tcp_conn_close(c);
    }
}

static int root_listen(ofccl__boot_t *b, ofccl__tcp_boot_t *t, struct addrinfo *ai, int *lfd,
                       ofccl__err_t *e)
{
    int err = 0;
    const char *hint = "";

    for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        int one = 1, fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        /* Reuse the port of a previous run still in TIME_WAIT. */
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            *lfd = fd;
            return 0;
        }
        err = errno;
        close(fd);
    }
    if (err == EADDRINUSE)
        hint = ": the port is taken (another job, or a previous run still alive?); choose "
               "another port";
    else if (err == EADDRNOTAVAIL)
        hint = ": the address is not one of this host's; OFCCL_BOOT_ROOT must name rank 0's host";
    return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                       "rank 0 cannot listen on OFCCL_BOOT_ROOT=%s: %s%s", t->root, strerror(err),
                       hint);
}

/* Different hosts with one hostname are legal, but the likely cause of a
 * surprise ("spans several hosts" on what looks like one machine): say so. */
static void log_name_conflict(ofccl__boot_t *b, const joined_t *v)
{
    int leaders[MAX_CONFLICT_HOSTS], n = 0;

    /* Hosts are numbered by their lowest rank: host n's first rank is the
     * first r with host_of[r] == n. */
    for (int r = 0; r < b->size && n < MAX_CONFLICT_HOSTS; r++) {
        const char *h = v->hosts + (size_t)r * OFCCL__TCP_HOST_LEN;
        if (b->host_of[r] != n)
            continue;
        for (int k = 0; k < n; k++) {
            if (strcmp(v->hosts + (size_t)leaders[k] * OFCCL__TCP_HOST_LEN, h) != 0)
                continue;
            OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                        "TCP bootstrap: ranks %d and %d both run on a host named %s, but on "
                        "different hosts (host identities %s and %s): they will not share "
                        "memory or loopback",
                        leaders[k], r, h, v->ids[leaders[k]], v->ids[r]);
            return;
        }
        leaders[n++] = r;
    }
}

/* Nothing is received while the table goes out. */
static int no_step(ofccl__boot_t *b, ofccl__tcp_conn_t *c, void *arg, ofccl__err_t *e)
{
    c->stage = 0;
    return 0;
}

/* Send every rank the host table: u32 host_of[size], then each host's name
 * (64 bytes, NUL-padded), as b->host_names holds them. */
static int send_table(ofccl__boot_t *b, ofccl__tcp_boot_t *t, uint64_t deadline, uint8_t **framep,
                      ofccl__err_t *e)
{
    size_t blen = 4 * (size_t)b->size + (size_t)OFCCL__TCP_HOST_LEN * (size_t)b->nhosts;
    uint8_t *frame = malloc(OFCCL__TCP_FRAME_HDR + blen);
    int rc;

    *framep = frame;
    if (frame == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the host table of %d ranks", b->size);
    ofccl__put_le32(frame, OFCCL__TCP_TABLE_MAGIC);
    ofccl__put_le32(frame + 4, OFCCL__TCP_ST_OK);
    ofccl__put_le64(frame + 8, 0);
    ofccl__put_le32(frame + 16, (uint32_t)b->size);
    ofccl__put_le32(frame + 20, (uint32_t)blen);
    for (int r = 0; r < b->size; r++)
        ofccl__put_le32(frame + OFCCL__TCP_FRAME_HDR + 4 * (size_t)r, (uint32_t)b->host_of[r]);
    memcpy(frame + OFCCL__TCP_FRAME_HDR + 4 * (size_t)b->size, b->host_names,
           (size_t)OFCCL__TCP_HOST_LEN * (size_t)b->nhosts);
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = frame;
        t->conns[r].out_len = OFCCL__TCP_FRAME_HDR + blen;
        t->conns[r].out_off = 0;
    }
    rc = ofccl__tcp_io_run(b, t->conns, b->size, deadline, no_step, NULL, "the rendezvous", e);
    if (rc == OFCCL_ERR_TIMEOUT)
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                         "TCP rendezvous at %s: sending the host table timed out after %llu ms",
                         t->root, (unsigned long long)b->timeout_ms);
    for (int r = 1; r < b->size; r++) {
        t->conns[r].out = NULL;
        t->conns[r].out_len = t->conns[r].out_off = 0;
    }
    return rc;
}

int ofccl__tcp_root_open(ofccl__boot_t *b, ofccl__tcp_boot_t *t, struct addrinfo *ai,
                         uint64_t deadline, ofccl__err_t *e)
{
    joined_t j = {.hosts = calloc((size_t)b->size, OFCCL__TCP_HOST_LEN),
                  .ids = calloc((size_t)b->size, sizeof(char *))};
    uint8_t *frame = NULL;
    int rc, lfd = -1;

    if (j.hosts == NULL || j.ids == NULL) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory for the TCP rendezvous of %d ranks", b->size);
        goto out;
    }
    j.ids[0] = b->host_id;
    memcpy(j.hosts, b->hostname, OFCCL__MIN(sizeof(b->hostname), (size_t)OFCCL__TCP_HOST_LEN));
    j.hosts[OFCCL__TCP_HOST_LEN - 1] = '\0';

    rc = root_listen(b, t, ai, &lfd, e);
    if (rc != 0)
        goto out;
    rc = ofccl__tcp_admit(b, t, lfd, deadline, j.hosts, j.ids, e);
    close(lfd); /* latecomers and strays now get "connection refused" */
    if (rc == 0)
        rc = ofccl__boot_hosts_from_ids(b, (const char *const *)j.ids, e);
    if (rc != 0)
        goto err_abort;
    ofccl__boot_local_from_hosts(b);
    log_name_conflict(b, &j);
    if (ofccl__boot_set_host_names(b, j.hosts, OFCCL__TCP_HOST_LEN) != 0) {
        rc = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                         "out of memory for the names of %d hosts", b->nhosts);
        goto err_abort;
    }
    rc = send_table(b, t, deadline, &frame, e);
    if (rc != 0)
        goto err_abort;
    goto out;

err_abort:
    ofccl__tcp_root_abort(t, OFCCL__TCP_TABLE_MAGIC, 0, b->size,
                          e != NULL ? e->msg : "the rendezvous failed");
out:
    free(frame);
    if (j.ids != NULL)
        for (int r = 1; r < b->size; r++)
            free(j.ids[r]);
    free(j.ids);
    free(j.hosts);
    return rc;
}
