/*
 * ofccl_info -j: join the job (under mpirun / srun / the TCP rendezvous, or
 * alone as a singleton), make the world communicator, and print from rank 0
 * what the job looks like to ofccl: hosts and their ranks, the transport
 * each class of peer gets, the algorithm the chooser picks for each
 * collective and block size, the cost model behind it (link constants and
 * predicted times), and every setting with where its value came from.
 */
#include <stdio.h>
#include <string.h>

#include "coll.h"
#include "cost.h"
#include "core.h"
#include "info.h"

static const char *const source_words[] = {"default", "environment", "API"};

static void print_hosts(const ofccl_comm_t *comm)
{
    printf("Hosts: %d, ranks: %d\n", comm->nhosts, comm->size);
    for (int h = 0; h < comm->nhosts; h++) {
        int n = 0, first = -1, prev = -2;
        char list[512] = "";
        size_t used = 0;

        for (int r = 0; r <= comm->size; r++) {
            bool here = r < comm->size && comm->host_of[r] == h;
            if (here && r == prev + 1) { /* the run goes on */
                prev = r, n++;
                continue;
            }
            if (first >= 0 && used + 32 < sizeof(list)) /* a run ended: name it */
                used += (size_t)snprintf(list + used, sizeof(list) - used,
                                         first == prev ? "%s%d" : "%s%d-%d", used ? "," : "", first,
                                         prev);
            first = here ? r : -1;
            prev = here ? r : -2;
            n += here;
        }
        printf("  %-24s %d rank%s per host: %s\n", comm->host_name[h], n, n == 1 ? "" : "s", list);
    }
}

static void print_transport(const ofccl_comm_t *comm)
{
    const ofccl__prov_caps_t *caps = ofccl__comm_caps(comm);
    int same = 0, other = 0;

    for (int r = 0; r < comm->size; r++)
        if (r != comm->rank)
            same += comm->host_of[r] == comm->host_of[comm->rank],
                other += comm->host_of[r] != comm->host_of[comm->rank];
    printf("\nTransport per peer class (seen from rank %d; %s signals):\n", comm->rank,
           comm->signal_mode == OFCCL__SIGNAL_CQDATA ? "CQ data" : "atomic");
    printf("  same host   (%3d peer%s): %s%s\n", same, same == 1 ? "" : "s", caps->name,
           same ? "" : " (no such peer in this job)");
    printf("  other hosts (%3d peer%s): %s%s\n", other, other == 1 ? "" : "s", caps->name,
           other ? "" : " (no such peer in this job)");
    printf("  context's choice: %s\n", comm->ctx->choice_why);
}

static void print_chooser(ofccl_comm_t *comm)
{
    static const size_t sizes[] = {256, 4096, 16384, 65536, 262144, 1 << 20, 16 << 20, 256 << 20};
    static const int colls[] = {OFCCL__AG, OFCCL__RS, OFCCL__BC};

    printf("\nAlgorithm the chooser picks for %d ranks (OFCCL_ALGO_AG=%s, OFCCL_ALGO_RS=%s, "
           "OFCCL_ALGO_BC=%s):\n",
           comm->size, ofccl__cfg_str(&comm->ctx->cfg, OFCCL__CFG_ALGO_AG),
           ofccl__cfg_str(&comm->ctx->cfg, OFCCL__CFG_ALGO_RS),
           ofccl__cfg_str(&comm->ctx->cfg, OFCCL__CFG_ALGO_BC));
    printf("  %-14s %-16s %-16s %-16s %s\n", "bytes/rank", "all-gather", "reduce-scatter",
           "broadcast", "bucket all-gather / reduce-scatter");
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const char *name[3];
        for (int c = 0; c < 3; c++)
            name[c] = ofccl__choose(comm, colls[c], sizes[k], 0, 0)->name;
        printf("  %-14zu %-16s %-16s %-16s %s / %s\n", sizes[k], name[0], name[1], name[2],
               ofccl__choose(comm, OFCCL__AG, sizes[k], 1, 0)->name,
               ofccl__choose(comm, OFCCL__RS, sizes[k], 1, 0)->name);
    }
}

/* The cost model behind auto: the agreed link constants, this rank's own
 * figures, and each candidate's predicted time. */
static void print_cost(const ofccl_comm_t *comm)
{
    static const size_t sizes[] = {65536, 1 << 20, 16 << 20, 256 << 20};
    static const int colls[] = {OFCCL__AG, OFCCL__RS, OFCCL__BC};
    static const char *const names[] = {"all-gather", "reduce-scatter", "broadcast"};
    static const char *const words[] = {"measured", "default", "configured"};
    ofccl__cost_topo_t t;
    char line[1024];

    printf("\nCost model (agreed by the communicator's ranks; this rank's own figures in "
           "brackets):\n");
    for (int c = 0; c < OFCCL__LINK_CLASSES; c++) {
        const ofccl__link_t *l = &comm->link[c], *own = &comm->ctx->link[c];
        printf("  %-7s alpha %8.2f us  beta %8.2f GB/s  %-10s [%.2f us, %.2f GB/s, %s]\n",
               c == OFCCL__LINK_LOCAL ? "local" : "fabric", l->alpha_ns / 1e3, l->mbps / 1e3,
               words[l->source % 3], own->alpha_ns / 1e3, own->mbps / 1e3, words[own->source % 3]);
    }
    ofccl__cost_topo_of(comm, &t);
    printf("  shape: %d ranks, %d host%s of %d, same-host peers %s\n", t.n, t.hosts,
           t.hosts == 1 ? "" : "s", t.width, t.local_peers ? "local" : "through the fabric");
    printf("  an endpoint's full-rate streams %d (OFCCL_LINK_STREAMS); fabric bytes copied by "
           "the CPU: %s\n",
           t.streams, t.fabric_cpu ? "yes" : "no");
    printf("  predicted us per candidate (- = cannot run here); bytes per rank, broadcast "
           "bytes in all:\n");
    printf("  %-15s %-10s", "collective", "bytes");
    for (int k = 0; k < OFCCL__CAND_COUNT; k++)
        printf(" %10s", ofccl__cost_cand_name(k));
    printf("  picks\n");
    for (int i = 0; i < 3; i++) {
        unsigned valid = ofccl__choose_valid(comm, colls[i]);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            printf("  %-15s %-10zu", names[i], sizes[k]);
            for (int c = 0; c < OFCCL__CAND_COUNT; c++) {
                if (valid & (1u << c))
                    printf(" %10.1f", ofccl__cost_time(&t, colls[i], c, sizes[k]) * 1e6);
                else
                    printf(" %10s", "-");
            }
            printf("  %s\n", ofccl__cost_cand_name(ofccl__choose_model(comm, colls[i], sizes[k])));
        }
    }
    unsigned valid[3] = {ofccl__choose_valid(comm, OFCCL__AG), ofccl__choose_valid(comm, OFCCL__RS),
                         ofccl__choose_valid(comm, OFCCL__BC)};
    ofccl__cost_describe(comm, valid, line, sizeof(line));
    printf("  %s\n", line);
}

static void print_settings(const ofccl__config_t *cfg)
{
    printf("\nSettings (value and source: default, environment or API):\n");
    for (int id = 0; id < OFCCL__CFG_COUNT; id++)
        printf("  OFCCL_%-18s %-24s %s\n", ofccl__cfg_params[id].name,
               cfg->v[id].s[0] ? cfg->v[id].s : "\"\"", source_words[cfg->v[id].from]);
}

int ofccl__info_job(const char *const *settings)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {
        .size = sizeof(p), .settings = settings, .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;

    if (ofccl_ctx_create(&p, &ctx) != 0) {
        fprintf(stderr, "ofccl_info -j: %s\n", err);
        return 1;
    }
    if (ofccl_comm_world(ctx, &comm) != 0) {
        fprintf(stderr, "ofccl_info -j: %s\n", ofccl_ctx_last_error(ctx));
        ofccl_ctx_destroy(ctx);
        return 1;
    }
    if (comm->rank == 0) {
        printf("Job %s (bootstrap %s), ofccl %s\n", ctx->boot->job, ctx->boot->ops->name,
               ofccl_version_string());
        print_hosts(comm);
        print_transport(comm);
        print_chooser(comm);
        print_cost(comm);
        print_settings(&ctx->cfg);
        fflush(stdout);
    }
    ofccl_barrier(comm); /* nobody leaves before rank 0 has read the communicator */
    ofccl_comm_destroy(comm);
    ofccl_ctx_destroy(ctx);
    return 0;
}
