/*
 * What ofccl sees of a simulated cluster (test/hosts/cluster.sh): ranks placed
 * host-major, RPH per host, rank r on host<r / RPH>. Each rank checks that the
 * harness built what it claims (its hostname, a /dev/shm shared with exactly
 * its host's ranks) and that ofccl found the same structure: local rank and
 * size, every peer's host in the communicator's host table, and a provider
 * that crosses hosts. Usage: test_hosts RPH
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "hosts.h"

#define MARK_PREFIX "ofccl-hosts-check."

static int rph;

static void test_placement(void)
{
    char host[64] = "", want[32];
    int local_rank = -1, local_size = -1;

    CU_ASSERT_EQUAL_FATAL(size % rph, 0);
    snprintf(want, sizeof(want), "host%d", rank / rph);
    CU_ASSERT_EQUAL(gethostname(host, sizeof(host) - 1), 0);
    CU_ASSERT_STRING_EQUAL(host, want);
    CU_ASSERT_EQUAL(ofccl_comm_local_rank(comm, &local_rank), 0);
    CU_ASSERT_EQUAL(ofccl_comm_local_size(comm, &local_size), 0);
    CU_ASSERT_EQUAL(local_size, rph);
    CU_ASSERT_EQUAL(local_rank, rank % rph);
    if (local_size != rph || local_rank != rank % rph)
        fprintf(stderr, "rank %d on %s: ofccl says local rank %d of %d, expected %d of %d\n", rank,
                host, local_rank, local_size, rank % rph, rph);
}

/* The host table that timeout messages quote ("rank 2 on host1"). */
static void test_host_table(void)
{
    int wrong = 0;

    for (int p = 0; p < size; p++) {
        char want[32];
        snprintf(want, sizeof(want), "host%d", p / rph);
        if (strcmp(ofccl__comm_host(comm, p), want) != 0) {
            fprintf(stderr, "rank %d: ofccl places rank %d on '%s', expected %s\n", rank, p,
                    ofccl__comm_host(comm, p), want);
            wrong++;
        }
    }
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(comm->nhosts, size / rph);
}

/* More than one host: the automatic choice must be a network provider. */
static void test_provider(void)
{
    const char *forced = getenv("OFCCL_PROVIDER");
    const char *prov = ofccl_ctx_provider(ctx);

    if (size > rph && (forced == NULL || strcmp(forced, "auto") == 0))
        CU_ASSERT_EQUAL(strncmp(prov, "tcp", 3), 0);
    if (rank == 0)
        printf("provider %s\n", prov);
}

/* Every rank leaves a mark in /dev/shm; after a barrier each must see the
 * marks of its own host's ranks and of no other. */
static void test_private_shm(void)
{
    char path[64];
    int seen[256] = {0}, fd, wrong = 0;
    DIR *d;
    struct dirent *de;

    CU_ASSERT_FATAL(size <= 256);
    snprintf(path, sizeof(path), "/dev/shm/" MARK_PREFIX "%d", rank);
    fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(ofccl_barrier(comm), 0);
    d = opendir("/dev/shm");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    while ((de = readdir(d)) != NULL) {
        int r;
        if (strncmp(de->d_name, MARK_PREFIX, strlen(MARK_PREFIX)) != 0)
            continue;
        r = atoi(de->d_name + strlen(MARK_PREFIX));
        if (r >= 0 && r < size)
            seen[r] = 1;
    }
    closedir(d);
    for (int p = 0; p < size; p++)
        if (seen[p] != (p / rph == rank / rph)) {
            fprintf(stderr, "rank %d: /dev/shm %s rank %d's mark\n", rank,
                    seen[p] ? "holds" : "lacks", p);
            wrong++;
        }
    CU_ASSERT_EQUAL(wrong, 0);
    /* Nobody removes a mark before every rank has looked. */
    CU_ASSERT_EQUAL(ofccl_barrier(comm), 0);
    CU_ASSERT_EQUAL(unlink(path), 0);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"placement: hostname, local rank and size", test_placement},
        {"host table: every peer's host", test_host_table},
        {"provider across hosts", test_provider},
        {"/dev/shm shared within a host only", test_private_shm},
        {NULL, NULL},
    };

    rph = argc > 1 ? atoi(argv[1]) : 0;
    if (rph < 1) {
        fprintf(stderr, "usage: test_hosts RANKS_PER_HOST\n");
        return 2;
    }
    return hosts_run_suite("hosts", tests, 0, NULL);
}
