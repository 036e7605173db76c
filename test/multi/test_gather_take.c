/*
 * The all-gather's takes (local transport, OFCCL_AG_TAKE): a rank done with
 * its own writes copies, from the writer's buffer, each block that has not
 * reached it yet. One rank (the "sleeper") posts and then stays away without
 * driving progress. The others must take its block themselves where its
 * source is ofccl memory, and must leave it to the sleeper where it is not;
 * the sleeper, back, takes nothing (every block has been written to it by
 * then). Every element of every rank's result is checked against the value its
 * writer put there. Who copied what is read from ofccl_stats_t.pulled_bytes,
 * gathered from every rank. Blocks below OFCCL_AG_TAKE go direct: nobody
 * takes them.
 * Usage: OFCCL_AG_TAKE=64K test_gather_take (with OFCCL_PROVIDER=local)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "away.h"
#include "cu.h"
#include "ofccl.h"

static uint64_t pulled_here(void)
{
    ofccl_stats_t s = {.size = sizeof(s)};

    CU_ASSERT_EQUAL_FATAL(ofccl_ctx_stats(ctx, &s), 0);
    return s.pulled_bytes;
}

static uint32_t value(int w, size_t j)
{
    return (uint32_t)w * 0x9E3779B1u ^ (uint32_t)j * 0x85EBCA77u;
}

enum buf_kind { BUF_POOL, BUF_REGISTERED };

/* One in-place all-gather of `count` u32 per rank while `sleeper` stays away
 * 500 ms after posting; this rank's buffer of kind `kind` (registered malloc'd
 * memory cannot be mapped by peers). Gathers every rank's bytes taken. */
static void run_once(int sleeper, int kind, size_t count, uint64_t *pulled)
{
    size_t bytes = count * 4 * (size_t)size, wrong = 0;
    uint32_t *buf = NULL;
    ofccl_mem_t *mh = NULL;
    ofccl_req_t *req = NULL;
    uint64_t before = pulled_here();
    int rc;

    if (kind == BUF_POOL) {
        CU_ASSERT_EQUAL_FATAL(ofccl_buffer_alloc(comm, bytes, (void **)&buf), 0);
    } else {
        buf = malloc(bytes);
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        CU_ASSERT_EQUAL_FATAL(ofccl_mem_register(ctx, buf, bytes, &mh), 0);
    }
    memset(buf, 0xA5, bytes);
    for (size_t j = 0; j < count; j++)
        buf[(size_t)rank * count + j] = value(rank, j);
    CU_ASSERT_EQUAL_FATAL(
        ofccl_allgather(comm, buf + (size_t)rank * count, buf, count * 4, OFCCL_U8, &req), 0);
    if (rank == sleeper)
        sleep_ms(500);
    rc = ofccl_wait(req);
    if (rc)
        fprintf(stderr, "rank %d: allgather: %s: %s\n", rank, ofccl_strerror(rc),
                ofccl_comm_last_error(comm));
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(ofccl_req_free(req), 0);
    for (int w = 0; w < size; w++)
        for (size_t j = 0; j < count; j++)
            if (buf[(size_t)w * count + j] != value(w, j) && wrong++ < 3)
                fprintf(stderr, "rank %d: block %d [%zu] = %08x, want %08x\n", rank, w, j,
                        buf[(size_t)w * count + j], value(w, j));
    CU_ASSERT_EQUAL(wrong, 0);
    gather_u64(pulled_here() - before, pulled);
    if (kind == BUF_POOL) {
        CU_ASSERT_EQUAL(ofccl_buffer_free(comm, buf), 0);
    } else {
        CU_ASSERT_EQUAL(ofccl_mem_deregister(mh), 0);
        free(buf);
    }
}

/* The sleeper's block is taken by every other rank (each may take other
 * blocks too, from writers that had not reached it yet); the sleeper takes
 * nothing: when it is back, every block has been written to it. */
static void test_away(void)
{
    size_t count = 65536 + 3, block = count * 4;
    uint64_t *pulled = calloc((size_t)size, 8);

    CU_ASSERT_PTR_NOT_NULL_FATAL(pulled);
    for (int sleeper = 0; sleeper<size; sleeper += size - 1> 0 ? size - 1 : 1) {
        run_once(sleeper, BUF_POOL, count, pulled);
        CU_ASSERT_EQUAL(pulled[sleeper], 0);
        for (int r = 0; r < size; r++)
            if (r != sleeper) {
                CU_ASSERT(pulled[r] >= block);
                CU_ASSERT(pulled[r] <= (uint64_t)(size - 1) * block);
            }
        if (rank == 0)
            printf("\n  sleeper %d: rank %d took %llu bytes (a block is %zu)", sleeper,
                   (sleeper + 1) % size, (unsigned long long)pulled[(sleeper + 1) % size], block);
        if (size == 1)
            break;
    }
    free(pulled);
}

/* A source peers cannot map is written by its owner only: nobody takes the
 * sleeper's block, so every rank waits for it; the others may still take each
 * other's. */
static void test_unmapped_source(void)
{
    size_t count = 16384, block = count * 4;
    uint64_t *pulled = calloc((size_t)size, 8);

    CU_ASSERT_PTR_NOT_NULL_FATAL(pulled);
    run_once(size - 1, rank == size - 1 ? BUF_REGISTERED : BUF_POOL, count, pulled);
    CU_ASSERT_EQUAL(pulled[size - 1], 0);
    for (int r = 0; r < size - 1; r++)
        CU_ASSERT(pulled[r] <= (uint64_t)(size > 2 ? size - 2 : 0) * block);
    free(pulled);
}

/* Blocks below OFCCL_AG_TAKE (64 KiB here): plain direct, nothing is taken,
 * however long a rank stays away. */
static void test_small_blocks(void)
{
    uint64_t *pulled = calloc((size_t)size, 8);

    CU_ASSERT_PTR_NOT_NULL_FATAL(pulled);
    run_once(0, BUF_POOL, 8192, pulled);
    for (int r = 0; r < size; r++)
        CU_ASSERT_EQUAL(pulled[r], 0);
    free(pulled);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"a rank away: the others take its block", test_away},
        {"a source peers cannot map is left to its owner", test_unmapped_source},
        {"blocks below OFCCL_AG_TAKE are not taken", test_small_blocks},
        {NULL, NULL},
    };

    return world_run("gather-take", tests);
}
