/*
 * Bootstrap at scale, one process of it: create a context (joining the job
 * through the bootstrap, normally the TCP rendezvous), the world communicator
 * and one split, move no data, and print one line with the times (CLOCK_REALTIME,
 * so that perf/boot_scale.sh can line up the processes), this process's peak
 * resident memory after each step and what the split gave. The split is the
 * rail split of a hierarchical job: color rank % G, key rank, so split
 * communicator c holds ranks c, c + G, c + 2G, ...; the line says whether its
 * size and rank are the ones that rule gives. A barrier on the world
 * communicator ends the run, so no process tears down while another still
 * creates.
 * Usage: boot_scale [-g groups]   (exit status 0 only if every step succeeded
 *                                  and the split is the expected one)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ofccl.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time this process has used so far (user + system), in seconds: on a
 * machine with far more processes than cores, the wall time of a step is
 * mostly waiting for a turn on a core, its CPU time what it costs. */
static double cpu_s(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* A "Name: value kB" field of a /proc/self file, in KiB; -1 if absent. */
static long proc_kib(const char *file, const char *name)
{
    char line[256], path[64];
    size_t n = strlen(name);
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/self/%s", file);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, name, n) == 0 && line[n] == ':') {
            kib = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kib;
}

static void usage(void)
{
    fprintf(stderr, "usage: boot_scale [-g groups]\n");
}

int main(int argc, char **argv)
{
    double t_start = now_s(), t_ctx = 0, t_world = 0, t_split = 0, t_end = 0;
    double c_ctx = 0, c_world = 0, c_split = 0;
    long hwm_ctx = 0, hwm_world = 0, hwm_split = 0;
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx = NULL;
    ofccl_comm_t *world = NULL, *rail = NULL;
    int groups = 8, rank = -1, size = 0, nrank = -1, nsize = -1, want_size, ok = 0, opt, rc;

    while ((opt = getopt(argc, argv, "g:h")) != -1) {
        if (opt == 'g' && atoi(optarg) > 0) {
            groups = atoi(optarg);
        } else {
            usage();
            return 2;
        }
    }
    rc = ofccl_ctx_create(&p, &ctx);
    if (rc != 0) {
        fprintf(stderr, "boot_scale: ofccl_ctx_create: %s\n", err);
        return 1;
    }
    t_ctx = now_s();
    c_ctx = cpu_s();
    hwm_ctx = proc_kib("status", "VmHWM");
    rc = ofccl_comm_world(ctx, &world);
    if (rc != 0) {
        fprintf(stderr, "boot_scale: ofccl_comm_world: %s\n", ofccl_ctx_last_error(ctx));
        goto out;
    }
    t_world = now_s();
    c_world = cpu_s();
    hwm_world = proc_kib("status", "VmHWM");
    ofccl_comm_rank(world, &rank);
    ofccl_comm_size(world, &size);
    rc = ofccl_comm_split(world, rank % groups, rank, &rail);
    if (rc != 0) {
        fprintf(stderr, "boot_scale: rank %d: ofccl_comm_split: %s\n", rank,
                ofccl_comm_last_error(world));
        goto out;
    }
    t_split = now_s();
    c_split = cpu_s();
    hwm_split = proc_kib("status", "VmHWM");
    ofccl_comm_rank(rail, &nrank);
    ofccl_comm_size(rail, &nsize);
    /* Ranks c, c + G, ... below size: (size - c + G - 1) / G of them. */
    want_size = (size - rank % groups + groups - 1) / groups;
    ok = nsize == want_size && nrank == rank / groups;
    if (!ok)
        fprintf(stderr,
                "boot_scale: rank %d: the split gave rank %d of %d, expected rank %d of %d\n", rank,
                nrank, nsize, rank / groups, want_size);
    rc = ofccl_barrier(world);
    if (rc != 0) {
        fprintf(stderr, "boot_scale: rank %d: closing barrier: %s\n", rank,
                ofccl_comm_last_error(world));
        ok = 0;
    }
    t_end = now_s();
    /* One write per process: lines from many processes stay whole. */
    /* Resident memory counts every page of the peers' shared segments this
     * process touched, though each exists once: what it holds alone is its
     * anonymous memory and page tables, its fair share the PSS. */
    printf("boot_scale rank %d size %d provider %s start %.6f ctx %.6f world %.6f split %.6f "
           "end %.6f cpu_ctx %.4f cpu_world %.4f cpu_split %.4f hwm_ctx_kib %ld hwm_world_kib %ld "
           "hwm_split_kib %ld anon_kib %ld pte_kib %ld pss_kib %ld split_rank %d "
           "split_size %d ok %d\n",
           rank, size, ofccl_ctx_provider(ctx), t_start, t_ctx, t_world, t_split, t_end, c_ctx,
           c_world, c_split, hwm_ctx, hwm_world, hwm_split, proc_kib("status", "RssAnon"),
           proc_kib("status", "VmPTE"), proc_kib("smaps_rollup", "Pss"), nrank, nsize, ok);
    fflush(stdout);
out:
    if (rail != NULL)
        ofccl_comm_destroy(rail);
    if (world != NULL)
        ofccl_comm_destroy(world);
    ofccl_ctx_destroy(ctx);
    return rc == 0 && ok ? 0 : 1;
}
