/*
 * Partition: ranks run all-gathers until the network between them is cut
 * (by test/multi/netfault.sh, with nftables, on the data ports only); the next
 * all-gather must fail with TIMEOUT naming the peer, within the deadline plus a
 * small margin. Exit 0 when that is what happened.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ofccl.h"

#define DEADLINE_MS 3000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
    char err[512] = "";
    ofccl_ctx_params_t p = {.size = sizeof(p), .errbuf = err, .errlen = sizeof(err)};
    ofccl_ctx_t *ctx;
    ofccl_comm_t *comm;
    size_t count = 65536;
    float *in = calloc(count, 4), *out = calloc(count * 2, 4);
    double start = now_s();
    int rank = -1, rc = 0, ok_rounds = 0;

    if (ofccl_ctx_create(&p, &ctx) || ofccl_comm_world(ctx, &comm)) {
        fprintf(stderr, "setup failed: %s\n", err);
        return 1;
    }
    ofccl_comm_rank(comm, &rank);
    ofccl_comm_set_timeout(comm, DEADLINE_MS);
    /* Bounded: the partition comes after ~2 s; give up after 30 s. */
    while (now_s() - start < 30) {
        ofccl_req_t *req;
        double t0 = now_s();
        rc = ofccl_allgather(comm, in, out, count, OFCCL_F32, &req);
        if (rc == 0) {
            rc = ofccl_wait(req);
            ofccl_req_free(req);
        }
        if (rc != 0) {
            double took = now_s() - t0;
            printf("rank %d: after %d good rounds: %s in %.2f s: %s\n", rank, ok_rounds,
                   ofccl_strerror(rc), took, ofccl_comm_last_error(comm));
            rc = rc == OFCCL_ERR_TIMEOUT && took < DEADLINE_MS / 1000.0 + 1.0 &&
                         strstr(ofccl_comm_last_error(comm), rank ? "rank 0" : "rank 1") != NULL &&
                         ok_rounds > 0
                     ? 0
                     : 2;
            break;
        }
        ok_rounds++;
        usleep(50000);
    }
    if (now_s() - start >= 30) {
        printf("rank %d: no failure within 30 s: the partition did not happen\n", rank);
        rc = 3;
    }
    ofccl_comm_destroy(comm);
    ofccl_ctx_destroy(ctx);
    free(in);
    free(out);
    return rc;
}
