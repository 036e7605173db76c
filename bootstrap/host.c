/*
 * Host identity: which ranks share a host, for the choice of transport
 * (shared memory, loopback) and for local ranks. A hostname cannot decide
 * it: two machines, or two containers on one machine, may report the same
 * name. Two processes can map each other's memory and reach each other over
 * loopback when they run on the same kernel (boot id) in the same network,
 * mount and PID namespaces, so that tuple is the identity. OFCCL_HOST_ID
 * replaces it, for tests that simulate several hosts on one machine and for
 * sites that know better.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boot.h"
#include "util.h"

#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
#define BOOT_ID_LEN 36 /* 8-4-4-4-12 hex digits */

/* The kernel's boot id, a UUID that changes at every boot. 0 or -1. */
static int read_boot_id(char out[BOOT_ID_LEN + 1])
{
    char buf[64];
    ssize_t n;
    int fd = open(BOOT_ID_PATH, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < BOOT_ID_LEN)
        return -1;
    for (int i = 0; i < BOOT_ID_LEN; i++) {
        char c = buf[i];
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? c != '-'
                 : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return -1;
    }
    memcpy(out, buf, BOOT_ID_LEN);
    out[BOOT_ID_LEN] = '\0';
    return 0;
}

/* "<name>:<ino>.<dev>" of the namespace /proc/self/ns/<name>: the pair the
 * kernel documents as a namespace's identity. 0 or -1 ("<name>:?"). */
static int ns_id(const char *name, char *out, size_t len)
{
    char path[32];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/self/ns/%s", name);
    if (stat(path, &st) != 0) {
        snprintf(out, len, "%s:?", name);
        return -1;
    }
    snprintf(out, len, "%s:%llu.%llu", name, (unsigned long long)st.st_ino,
             (unsigned long long)st.st_dev);
    return 0;
}

int ofccl__boot_host_id(const char *override, const ofccl__log_t *lg, char *out, ofccl__err_t *e)
{
    char boot[BOOT_ID_LEN + 1], net[48], mnt[48], pid[48];
    int bad = 0;

    if (override != NULL && override[0] != '\0') {
        size_t n = strlen(override);
        if (n > OFCCL__HOST_ID_MAX)
            return ofccl__fail(lg, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                               "OFCCL_HOST_ID is %zu bytes long, at most %d are allowed", n,
                               OFCCL__HOST_ID_MAX);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char) override[i] < 0x20 || (unsigned char) override[i] > 0x7e)
                return ofccl__fail(lg, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                                   "OFCCL_HOST_ID has a non-printable byte 0x%02x at offset %zu: "
                                   "use printable ASCII",
                                   (unsigned char) override[i], i);
        memcpy(out, override, n + 1);
        return 0;
    }
    if (read_boot_id(boot) != 0) {
        /* Without /proc the hostname is the best guess left; say so, since
         * equal names on different machines would then look like one host. */
        char host[64];
        if (gethostname(host, sizeof(host) - 1) != 0)
            ofccl__strlcpy(host, "localhost", sizeof(host));
        host[sizeof(host) - 1] = '\0';
        snprintf(boot, sizeof(boot), "%.31s", host);
        bad = 1;
    }
    bad |= ns_id("net", net, sizeof(net)) != 0;
    bad |= ns_id("mnt", mnt, sizeof(mnt)) != 0;
    bad |= ns_id("pid", pid, sizeof(pid)) != 0;
    if (bad)
        OFCCL__WARN(lg, OFCCL__SUB_BOOT,
                    "cannot read this host's boot id (%s) or namespaces (/proc/self/ns): ranks on "
                    "hosts with equal hostnames may be taken for one host; set OFCCL_HOST_ID to "
                    "a name unique to each host",
                    BOOT_ID_PATH);
    snprintf(out, OFCCL__HOST_ID_MAX + 1, "%s/%s/%s/%s", boot, net, mnt, pid);
    return 0;
}

typedef struct host_key {
    const char *id;
    int rank;
} host_key_t;

static int cmp_key(const void *a, const void *b)
{
    const host_key_t *x = a, *y = b;
    int c = strcmp(x->id, y->id);

    return c != 0 ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int ofccl__boot_hosts_from_ids(ofccl__boot_t *b, const char *const *ids, ofccl__err_t *e)
{
    host_key_t *keys = calloc((size_t)b->size, sizeof(*keys));
    int *leader = calloc((size_t)b->size, sizeof(*leader));
    int *host_of = calloc((size_t)b->size, sizeof(*host_of));
    int nhosts = 0;

    if (keys == NULL || leader == NULL || host_of == NULL) {
        free(keys);
        free(leader);
        free(host_of);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory for the host table of %d ranks", b->size);
    }
    /* Sorting by (identity, rank) puts each host's lowest rank first in its
     * group: O(n log n), where comparing every pair would be quadratic. */
    for (int r = 0; r < b->size; r++)
        keys[r] = (host_key_t){.id = ids[r], .rank = r};
    qsort(keys, (size_t)b->size, sizeof(*keys), cmp_key);
    for (int i = 0, first = 0; i < b->size; i++) {
        if (i > 0 && strcmp(keys[i].id, keys[i - 1].id) != 0)
            first = i;
        leader[keys[i].rank] = keys[first].rank;
    }
    /* A leader is never above its members, so it is numbered before them. */
    for (int r = 0; r < b->size; r++)
        host_of[r] = leader[r] == r ? nhosts++ : host_of[leader[r]];
    free(keys);
    free(leader);
    free(b->host_of);
    b->host_of = host_of;
    b->nhosts = nhosts;
    return 0;
}

void ofccl__boot_local_from_hosts(ofccl__boot_t *b)
{
    int mine = b->host_of[b->rank];

    b->local_rank = 0;
    b->local_size = 0;
    for (int r = 0; r < b->size; r++) {
        if (b->host_of[r] != mine)
            continue;
        if (r < b->rank)
            b->local_rank++;
        b->local_size++;
    }
}

void ofccl__boot_host_name(const ofccl__boot_t *b, int h, char *out, size_t len)
{
    if (b->host_names != NULL && h >= 0 && h < b->nhosts && b->host_names[(size_t)h * 64] != '\0')
        ofccl__strlcpy(out, b->host_names + (size_t)h * 64, len);
    else
        snprintf(out, len, "host #%d", h);
}

int ofccl__boot_set_host_names(ofccl__boot_t *b, const char *names, size_t stride)
{
    char *t = calloc((size_t)b->nhosts, 64);

    if (t == NULL)
        return OFCCL_ERR_NO_MEMORY;
    for (int r = b->size - 1; r >= 0; r--) { /* ends on each host's lowest rank */
        const char *n = names + (size_t)r * stride;
        char *o = t + (size_t)b->host_of[r] * 64;
        size_t k;

        for (k = 0; k < 63 && k < stride && n[k] != '\0'; k++)
            o[k] = n[k] > ' ' && n[k] < 127 ? n[k] : '?';
        o[k] = '\0';
    }
    free(b->host_names);
    b->host_names = t;
    return 0;
}
