/*
 * What OFCCL_TRACE adds to one collective, measured on the hooks themselves
 * (a wall-clock on/off comparison drowns in noise on a shared machine): a
 * singleton context with tracing on, and a request of a 2-rank direct
 * all-gather of one chunk per peer driven through the engine's trace hooks in
 * the order the engine calls them (post, descriptor taken, write posted and
 * completed, unit arrived, completion): 5 events and 6 clock reads. Prints
 * the cost per collective; fails above a bound far beyond it (10 us), and
 * checks that the file written holds every event.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu.h"
#include "engine_impl.h"
#include "trace.h"
#include "util.h"

enum { ROUNDS = 20000, EVENTS_PER = 5 };

static char dir[64];

static void test_hook_cost(void)
{
    char events[32], path[160];
    const char *settings[] = {"BOOT=singleton", "PROVIDER=local", events, NULL, NULL};
    char tracedir[96];
    ofccl_ctx_params_t p = {.size = sizeof(p), .settings = settings};
    ofccl__algo_t algo = {.size = sizeof(algo), .name = "direct", .coll = OFCCL__AG};
    ofccl_comm_t comm = {.rank = 0, .size = 2, .id = 1};
    ofccl__req_t r = {.comm = &comm, .algo = &algo, .coll = OFCCL__AG, .block = 512 << 10};
    uint8_t writes_to_me[2] = {0, 1};
    uint32_t from_cnt[2] = {0, 1};
    uint64_t t0, ns, n = 0, dropped = 0;
    ofccl_ctx_t *ctx;
    FILE *f;

    snprintf(events, sizeof(events), "TRACE_EVENTS=%d", ROUNDS * EVENTS_PER);
    snprintf(tracedir, sizeof(tracedir), "TRACE=%s", dir);
    settings[3] = tracedir;
    CU_ASSERT_FATAL(ofccl_ctx_create(&p, &ctx) == 0);
    CU_ASSERT_FATAL(ctx->trace != NULL);
    comm.ctx = ctx;
    r.writes_to_me = writes_to_me;
    r.from_cnt = from_cnt;
    r.tr = calloc(2, sizeof(*r.tr));
    t0 = ofccl__now_ns();
    for (unsigned k = 0; k < ROUNDS; k++) {
        uint64_t posted;
        r.seq = k;
        ofccl__trace_req_start(&r);
        ofccl__trace_req_ready(&r, 1);
        posted = ofccl__now_ns();
        ofccl__trace_chunk(&r, 1, 0, 512 << 10, posted);
        ofccl__trace_req_in(&r, 1);
        ofccl__trace_req_done(&r, 0);
    }
    ns = (ofccl__now_ns() - t0) / ROUNDS;
    ofccl__trace_counts(ctx->trace, &n, &dropped);
    printf("\ntrace hooks: %llu ns per collective (%d events, 6 clock reads)\n",
           (unsigned long long)ns, EVENTS_PER);
    CU_ASSERT(n == (uint64_t)ROUNDS * EVENTS_PER && dropped == 0);
    CU_ASSERT(ns < 10000);
    snprintf(path, sizeof(path), "%s", ofccl__trace_path(ctx->trace));
    free(r.tr);
    CU_ASSERT(ofccl_ctx_destroy(ctx) == 0); /* writes the file */
    f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    {
        char line[1024];
        uint64_t spans = 0;
        while (fgets(line, sizeof(line), f) != NULL)
            spans += strstr(line, "\"ph\":\"X\"") != NULL;
        CU_ASSERT(spans == (uint64_t)ROUNDS * EVENTS_PER);
    }
    fclose(f);
    unlink(path);
}

int main(void)
{
    static const cu_test_t tests[] = {{"hook_cost", test_hook_cost}, {NULL, NULL}};
    int rc;

    snprintf(dir, sizeof(dir), "/tmp/ofccl-trace-cost-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 2;
    rc = cu_run("trace_cost", tests);
    rmdir(dir);
    return rc;
}
