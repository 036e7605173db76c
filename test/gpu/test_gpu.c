/*
 * GPU memory through the public API, one forked rank per GPU (TCP rendezvous,
 * local transport): all-gather in place and not, into the symmetric pool and
 * into other GPU memory (staged in the pool), every dtype and uneven sizes;
 * broadcast from every root; the copy kernel and the copy engines
 * (OFCCL_GPU_SMS=0); a stream of the caller's; a mismatch (MISMATCH on every
 * rank); a peer killed mid-collective (REMOTE_ERROR naming it within the
 * deadline, the stream released); and 100 communicators created and
 * destroyed with GPU buffers (device memory back where it was). Every result
 * is checked byte for byte against what each rank computes itself.
 * Skipped (77) without two GPUs.
 * Bucketed all-gather and broadcast: test_gpu_bucket.c; a bucket of host
 * and GPU tensors together is refused (INVALID_ARG) and the communicator
 * goes on.
 * The caller's own GPU memory registered: test_gpu_reg.c. Weight push on GPU
 * memory: test_gpu_push.c. Reduce-scatter: test_gpu_rs.c. GPU memory across
 * two simulated hosts (hierarchically, and every rank staged): test_gpu_staged.c.
 * A dead or stalled peer, or an abort, while the survivors wait on their
 * stream alone: test_gpu_watch.c.
 * Usage: [OFCCL_TEST_GPU_SHARED=1] test_gpu [NRANKS] [scenario...]  (scenarios: gather bcast ce
 * stream mismatch kill kill-rs leak refuse bucket bucket-ce register register-ce reg-size push rs
 * rs-ce staged staged-x staged-flat staged-async hmem hmem-need engine
 * watch-{kill,exit}-{ag,rs,bc,bucket,push} watch-stall watch-abort watch-kill-staged
 * watch-stall-staged); OFCCL_TEST_GPU_EMULATE=N: on N emulated GPUs
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "forkrun.h"
#include "gpu/gpu.h"
#include "gtest.h"
#ifdef OFCCL_TEST_EMU
#include "emu/emu.h"
#endif

#define MAXB (3u << 20) /* bytes per rank at most */

ofccl__gpu_t *gpu;
int dev;

uint8_t byte_of(int rank, size_t i, unsigned salt)
{
    return (uint8_t)(rank * 37 + i * 13 + salt * 101 + (i >> 11));
}

/* This process's GPU (the same one ofccl takes: the rank on one host). */
int gpu_up(int rank)
{
    ofccl__err_t e;

    gpu = ofccl__gpu_process(NULL, true);
    if (gpu == NULL)
        return 1;
    dev = rank % ofccl__gpu_device_count(gpu);
    (void)e;
    return 0;
}

void *dmalloc(size_t len)
{
    ofccl__err_t e;
    void *p = NULL;

    return ofccl__gpu_mem_alloc(gpu, dev, len ? len : 1, &p, &e) == 0 ? p : NULL;
}

int put(void *d, const uint8_t *h, size_t len)
{
    ofccl__err_t e;
    return len ? ofccl__gpu_copy_sync(gpu, dev, d, h, len, &e) : 0;
}

int get(uint8_t *h, const void *d, size_t len)
{
    ofccl__err_t e;
    return len ? ofccl__gpu_copy_sync(gpu, dev, h, d, len, &e) : 0;
}

int hold_stream(ofccl_comm_t *comm, held_stream_t *h)
{
    ofccl__err_t e;

    memset(h, 0, sizeof(*h));
    if (posix_memalign((void **)&h->word, 4096, 4096) != 0)
        return 1;
    atomic_store(h->word, 0);
    if (ofccl__gpu_host_register(gpu, dev, (void *)h->word, 4096, &h->dword, &e) != 0 ||
        ofccl__gpu_stream_create(gpu, dev, &h->s, &e) != 0 ||
        ofccl__gpu_wait_flag(gpu, dev, h->s, h->dword, 1, &e) != 0)
        return 1;
    return ofccl_comm_set_stream(comm, h->s) != 0;
}

int release_stream(ofccl_comm_t *comm, held_stream_t *h)
{
    ofccl__err_t e;
    int rc;

    atomic_store(h->word, 1);
    rc = ofccl__gpu_stream_sync(gpu, dev, h->s, &e);
    ofccl_comm_set_stream(comm, NULL);
    ofccl__gpu_stream_destroy(gpu, dev, h->s);
    ofccl__gpu_host_unregister(gpu, dev, (void *)h->word);
    free((void *)h->word);
    return rc;
}

/* One all-gather into `out` (block bytes of rank r at out + r * block) from
 * `in` (NULL: in place); 0 when every byte is right. */
int gather_at(int rank, int n, ofccl_comm_t *comm, char *out, const char *in, size_t count,
              ofccl_dtype_t dt, unsigned salt, const char *what)
{
    size_t es = ofccl_dtype_size(dt), block = count * es;
    uint8_t *h = malloc(block * (size_t)n + 1);
    const void *src = in != NULL ? in : out + (size_t)rank * block;
    ofccl_req_t *req;
    int rc, bad = 0;

    for (size_t i = 0; i < block; i++)
        h[i] = byte_of(rank, i, salt);
    put((void *)src, h, block);
    rc = ofccl_allgather(comm, src, out, count, dt, &req);
    if (rc == 0 && (rc = ofccl_wait(req)) == 0)
        ofccl_req_free(req);
    if (rc != 0) {
        printf("rank %d: all-gather (%s): %s: %s\n", rank, what, ofccl_strerror(rc),
               ofccl_comm_last_error(comm));
        free(h);
        return 1;
    }
    get(h, out, block * (size_t)n);
    for (int r = 0; r < n && !bad; r++)
        for (size_t i = 0; i < block; i++)
            if (h[(size_t)r * block + i] != byte_of(r, i, salt)) {
                printf("rank %d: all-gather (%s, %zu B): byte %zu of rank %d is %u, %u "
                       "expected\n",
                       rank, what, block, i, r, h[(size_t)r * block + i], byte_of(r, i, salt));
                bad = 1;
                break;
            }
    free(h);
    return bad;
}

/* One all-gather of `block` bytes per rank; `where`: 0 pool in place, 1 pool
 * out of place, 2 other GPU memory. The output starts as garbage, so nothing
 * left from before can pass. 0 when every byte is right. */
static int gather_once(int rank, ofccl_comm_t *comm, size_t block, int where, ofccl_dtype_t dt,
                       unsigned salt)
{
    static const char *const label[] = {"pool, in place", "pool", "other GPU memory"};
    size_t es = ofccl_dtype_size(dt), count = block / es, n = (size_t)nranks;
    uint8_t *h;
    void *out = NULL, *in = NULL;
    int bad;

    block = count * es;
    if (where < 2) {
        if (ofccl_gpu_buffer_alloc(comm, block * n, &out) != 0)
            return printf("rank %d: gpu_buffer_alloc: %s\n", rank, ofccl_comm_last_error(comm)), 1;
    } else {
        out = dmalloc(block * n);
    }
    in = where == 2 ? dmalloc(block) : NULL;
    if (where == 1 && ofccl_gpu_buffer_alloc(comm, block ? block : 1, &in) != 0)
        return 1;
    if ((h = malloc(block * n + 1)) == NULL)
        return 1;
    memset(h, 0xee, block * n);
    put(out, h, block * n);
    free(h);
    bad = gather_at(rank, nranks, comm, out, in, count, dt, salt, label[where]);
    if (where < 2)
        ofccl_gpu_buffer_free(comm, out);
    if (where == 1)
        ofccl_gpu_buffer_free(comm, in);
    if (where == 2) {
        ofccl__gpu_mem_free(gpu, dev, out);
        ofccl__gpu_mem_free(gpu, dev, in);
    }
    return bad;
}

static int gather(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    static const size_t sizes[] = {0, 1, 7, 1000, 4097, 65536, 1 << 20, MAXB};
    int bad = 0;
    unsigned salt = 1;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    for (int where = 0; where < 3; where++)
        for (size_t s = 0; s < sizeof(sizes) / sizeof(*sizes); s++)
            for (int dt = 0; dt < OFCCL_DTYPE_COUNT; dt++)
                if (sizes[s] % ofccl_dtype_size((ofccl_dtype_t)dt) == 0 || dt == OFCCL_U8)
                    bad |= gather_once(rank, comm, sizes[s], where, (ofccl_dtype_t)dt, salt++);
    return bad ? 60 : 0;
}

static int bcast(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    static const size_t sizes[] = {0, 3, 4096, 1 << 20, MAXB + 1};
    uint8_t *h = malloc(MAXB + 2);
    int bad = 0;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    for (int root = 0; root < nranks; root++)
        for (size_t s = 0; s < sizeof(sizes) / sizeof(*sizes); s++)
            for (int pool = 0; pool < 2; pool++) {
                size_t len = sizes[s];
                void *buf = NULL;
                ofccl_req_t *req;
                int rc;

                if (pool)
                    ofccl_gpu_buffer_alloc(comm, len ? len : 1, &buf);
                else
                    buf = dmalloc(len);
                for (size_t i = 0; i < len; i++)
                    h[i] = rank == root ? byte_of(root, i, 7) : 0x5a;
                put(buf, h, len);
                rc = ofccl_broadcast(comm, buf, len, OFCCL_U8, root, &req);
                if (rc == 0)
                    rc = ofccl_wait(req);
                if (rc == 0)
                    ofccl_req_free(req);
                get(h, buf, len);
                for (size_t i = 0; rc == 0 && i < len; i++)
                    if (h[i] != byte_of(root, i, 7)) {
                        rc = -1;
                        printf("rank %d: broadcast of %zu B from %d (%s): byte %zu wrong\n", rank,
                               len, root, pool ? "pool" : "other GPU memory", i);
                    }
                if (rc > 0 || rc < -1)
                    printf("rank %d: broadcast of %zu B from %d: %s: %s\n", rank, len, root,
                           ofccl_strerror(rc), ofccl_comm_last_error(comm));
                bad |= rc != 0;
                if (pool)
                    ofccl_gpu_buffer_free(comm, buf);
                else
                    ofccl__gpu_mem_free(gpu, dev, buf);
            }
    free(h);
    return bad ? 61 : 0;
}

/* Collectives on a stream of the caller's: posted, then another stream waits
 * for them; the host waits only at the end. */
static int stream(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    ofccl__gpu_stream_t s1, s2;
    ofccl__err_t e;
    ofccl_req_t *req[4];
    void *out;
    size_t block = 1 << 20;
    uint8_t *h = malloc(block * (size_t)nranks);
    int bad = 0;

    (void)ctx;
    if (gpu_up(rank) || ofccl__gpu_stream_create(gpu, dev, &s1, &e) ||
        ofccl__gpu_stream_create(gpu, dev, &s2, &e))
        return 70;
    if (ofccl_comm_set_stream(comm, s1) != 0 ||
        ofccl_gpu_buffer_alloc(comm, block * (size_t)nranks, &out) != 0)
        return 62;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < block; i++)
            h[i] = byte_of(rank, i, (unsigned)k);
        put((char *)out + (size_t)rank * block, h, block);
        if (ofccl_allgather(comm, (char *)out + (size_t)rank * block, out, block, OFCCL_U8,
                            &req[k]) != 0 ||
            ofccl_req_stream_wait(req[k], s2) != 0 || ofccl_wait(req[k]) != 0) {
            printf("rank %d: stream all-gather %d: %s\n", rank, k, ofccl_comm_last_error(comm));
            return 63;
        }
        ofccl_req_free(req[k]);
        ofccl__gpu_stream_sync(gpu, dev, s2, &e);
        get(h, out, block * (size_t)nranks);
        for (int r = 0; r < nranks && !bad; r++)
            for (size_t i = 0; i < block; i++)
                if (h[(size_t)r * block + i] != byte_of(r, i, (unsigned)k)) {
                    printf("rank %d: stream all-gather %d: rank %d byte %zu wrong\n", rank, k, r,
                           i);
                    bad = 1;
                    break;
                }
    }
    ofccl_gpu_buffer_free(comm, out);
    ofccl_comm_set_stream(comm, NULL);
    ofccl__gpu_stream_destroy(gpu, dev, s1);
    ofccl__gpu_stream_destroy(gpu, dev, s2);
    free(h);
    return bad ? 64 : 0;
}

/* The last rank posts another count: MISMATCH on every rank. */
static int mismatch(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    void *out;
    ofccl_req_t *req;
    size_t count = rank == nranks - 1 ? 4096 : 8192;
    int rc;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    ofccl_comm_set_timeout(comm, 10000);
    if (ofccl_gpu_buffer_alloc(comm, 8192 * (size_t)nranks, &out) != 0)
        return 65;
    rc = ofccl_allgather(comm, (char *)out + (size_t)rank * count, out, count, OFCCL_U8, &req);
    if (rc == 0)
        rc = ofccl_wait(req);
    printf("rank %d: GPU all-gather with a count that differs: %s: %s\n", rank, ofccl_strerror(rc),
           ofccl_comm_last_error(comm));
    if (rc == 0)
        ofccl_req_free(req);
    return rc == OFCCL_ERR_MISMATCH ? 0 : 66;
}

/* One collective with rank 1 killed before it (kill_peer, kill_peer_rs). */
static int kill_with(int rank, ofccl_comm_t *comm, bool rs)
{
    void *out;
    ofccl_req_t *req;
    ofccl__err_t e;
    ofccl__gpu_event_t ev;
    double t0;
    int rc, done = 0;

    if (gpu_up(rank))
        return 70;
    ofccl_comm_set_timeout(comm, 20000);
    if (ofccl_gpu_buffer_alloc(comm, 1 << 20, &out) != 0 ||
        ofccl__gpu_event_create(gpu, dev, false, &ev, &e) != 0)
        return 67;
    ofccl_barrier(comm);
    if (rank == 1)
        raise(SIGKILL);
    t0 = now_s();
    rc = rs ? ofccl_reduce_scatter(comm, out, (char *)out + (size_t)rank * 4096, 1024, OFCCL_F32,
                                   (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req)
            : ofccl_allgather(comm, (char *)out + (size_t)rank * 1024, out, 1024, OFCCL_U8, &req);
    if (rc == 0)
        rc = ofccl_wait(req);
    printf("rank %d: GPU %s with rank 1 dead: %s after %.2f s: %s\n", rank,
           rs ? "reduce-scatter" : "all-gather", ofccl_strerror(rc), now_s() - t0,
           ofccl_comm_last_error(comm));
    if (rc != OFCCL_ERR_REMOTE_ERROR || now_s() - t0 > 10 ||
        strstr(ofccl_comm_last_error(comm), "rank 1") == NULL)
        return 68;
    /* The stream was released: work enqueued after the collective runs. */
    if (ofccl__gpu_event_record(gpu, dev, ev, NULL, &e) != 0)
        return 69;
    for (double dl = now_s() + 10; done == 0 && now_s() < dl;)
        done = ofccl__gpu_event_query(gpu, dev, ev, &e);
    printf("rank %d: the stream after the failed collective: %s\n", rank,
           done == 1 ? "released" : "STILL BLOCKED");
    ofccl_req_free(req);
    return done == 1 ? 0 : 69;
}

/* Rank 1 dies before posting: the others' all-gather (or reduce-scatter, the
 * reduction kernel's abort word) fails with REMOTE_ERROR naming it, long
 * before the deadline, and their stream goes on. */
static int kill_peer(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    return kill_with(rank, comm, false);
}

static int kill_peer_rs(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    (void)ctx;
    return kill_with(rank, comm, true);
}

/* 100 communicators with GPU buffers and a collective each, created and
 * destroyed: the device's free memory comes back. */
/* Each communicator of the leak check also maps its peers' memory: a fresh
 * cudaMalloc buffer, and every tenth time virtual memory, registered and
 * gathered into, then left registered when the communicator goes (its
 * destroy must unmap them: a peer mapping left behind would keep the
 * owner's memory after the owner frees it). */
static void *regbuf, *vmm;
static size_t vmm_len;

static int reg_once(int rank, ofccl_comm_t *c, int k)
{
    ofccl__err_t e;
    int n = 0, bad = 0;
    size_t len = 4u << 20;

    ofccl_comm_size(c, &n);
    if ((regbuf = dmalloc(len)) == NULL || ofccl_gpu_register(c, regbuf, len) != 0)
        return 1;
    bad |= gather_at(rank, n, c, regbuf, NULL, len / (size_t)n, OFCCL_U8, (unsigned)k, "leak");
    if (k % 10 == 0) {
        if (ofccl__gpu_vmm_alloc(gpu, dev, 2u << 20, 2, &vmm, &vmm_len, &e) != 0 ||
            ofccl_gpu_register(c, vmm, vmm_len) != 0)
            return 1;
        bad |= gather_at(rank, n, c, vmm, NULL, vmm_len / (size_t)n, OFCCL_U8, (unsigned)k,
                         "leak, virtual memory");
    }
    return bad;
}

static int leak(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    size_t free0 = 0, free1 = 0, total;
    ofccl__err_t e;
    int bad = 0;
    long mapped0, most = 0;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    mapped0 = ofccl__gpu_mappings(); /* the parent communicator's own, if any */
    /* A first round so that the driver's own lazy allocations are made. */
    for (int k = 0; k < 101 && !bad; k++) {
        ofccl_comm_t *c;
        if (k == 1 && ofccl__gpu_mem_info(gpu, dev, &free0, &total, &e) != 0)
            return 71;
        if (ofccl_comm_split(comm, 0, rank, &c) != 0)
            return 72;
        bad |= gather_once(rank, c, 4096, k % 3, OFCCL_U8, (unsigned)k);
        bad |= reg_once(rank, c, k);
        most = ofccl__gpu_mappings() > most ? ofccl__gpu_mappings() : most;
        if (ofccl_comm_destroy(c) != 0)
            return 73;
        /* Every peer's mappings of this rank's buffers gone before they are
         * freed (CUDA leaves freeing exported memory a peer still maps
         * undefined). */
        if (ofccl_barrier(comm) != 0)
            return 78;
        ofccl__gpu_mem_free(gpu, dev, regbuf);
        if (vmm != NULL)
            ofccl__gpu_vmm_free(gpu, dev, vmm, vmm_len);
        regbuf = vmm = NULL;
    }
    /* Every peer's communicators gone (and its mappings of this rank's
     * buffers with them) before this rank looks. */
    if (ofccl_barrier(comm) != 0)
        return 76;
    ofccl__gpu_mem_info(gpu, dev, &free1, &total, &e);
    printf("rank %d: device memory free before 100 communicators %zu MiB, after %zu MiB; peers' "
           "memory mapped here at the most %ld, after %ld\n",
           rank, free0 >> 20, free1 >> 20, most, ofccl__gpu_mappings());
    /* The driver rounds to 2 MiB pages; allow one. Mappings were seen (the
     * peer class maps a pool segment and a registration; the host engine
     * the registration, its per-call ones going once their request is). */
    bool engine =
        getenv("OFCCL_GPU_PEER_CLASS") != NULL && strcmp(getenv("OFCCL_GPU_PEER_CLASS"), "0") == 0;
    return bad                                                           ? 74
           : free1 + (2u << 20) < free0                                  ? 75
           : most < (engine ? 1 : 2) || ofccl__gpu_mappings() != mapped0 ? 77
                                                                         : 0;
}

/* A bucketed reduce-scatter of host and GPU tensors together is refused
 * (INVALID_ARG, naming the tensor and both places) before anything is
 * posted: the communicator goes on to a GPU all-gather that every rank
 * checks. */
static int refuse(int rank, ofccl_ctx_t *ctx, ofccl_comm_t *comm)
{
    void *full;
    ofccl_req_t *req = NULL;
    ofccl_tensor_t t[2];
    size_t off, len;
    int rc;

    (void)ctx;
    if (gpu_up(rank))
        return 70;
    ofccl_comm_set_timeout(comm, 10000);
    if (ofccl_gpu_buffer_alloc(comm, 4096, &full) != 0)
        return 76;
    ofccl_shard_range(comm, 1024, &off, &len);
    t[0] = (ofccl_tensor_t){16, malloc(64), malloc(64)};
    t[1] = (ofccl_tensor_t){1024, full, (char *)full + off * 4};
    rc = ofccl_bucket_reduce_scatter(comm, t, 2, OFCCL_F32, (ofccl_redop_t){OFCCL_OP_SUM, 1}, &req);
    printf("rank %d: bucketed reduce-scatter of host and GPU tensors: %s: %s\n", rank,
           ofccl_strerror(rc), ofccl_comm_last_error(comm));
    free(t[0].full);
    free(t[0].shard);
    if (rc != OFCCL_ERR_INVALID_ARG || req != NULL ||
        strstr(ofccl_comm_last_error(comm), "tensor 0's full is host memory") == NULL)
        return 77;
    ofccl_gpu_buffer_free(comm, full);
    return gather_once(rank, comm, 8192, 0, OFCCL_U8, 5);
}

static scenario_fn which;
static void test_one(void)
{
    int st[FORK_MAX];

    run(which, st);
    for (int r = 0; r < nranks; r++) {
        if ((which == kill_peer || which == kill_peer_rs ||
             (which == gpu_watch && strstr(watch_case, "-kill-"))) &&
            r == 1)
            continue;
        CU_ASSERT_TRUE(exited_ok(st[r]));
        if (!exited_ok(st[r]))
            printf("rank %d %s %d\n", r, WIFSIGNALED(st[r]) ? "killed by signal" : "exited with",
                   WIFSIGNALED(st[r]) ? WTERMSIG(st[r]) : WEXITSTATUS(st[r]));
    }
}

/* The emulated GPU (test/gpu/emu), where the build has CUDA's headers. */
static int emulate(int ndev)
{
#ifdef OFCCL_TEST_EMU
    return ofccl__gpu_use_driver(ofccl__emu_install, ndev);
#else
    (void)ndev;
    return OFCCL_ERR_NOT_SUPPORTED;
#endif
}

static int gpus_here(void)
{
    int fds[2], n = 0, st;
    pid_t pid;

    if (pipe(fds) != 0)
        return 0;
    if ((pid = fork()) == 0) { /* CUDA only in a child: the parent forks the ranks */
        ofccl__gpu_t *g = ofccl__gpu_process(NULL, true);
        int c = g != NULL ? ofccl__gpu_device_count(g) : 0;
        _exit(write(fds[1], &c, sizeof(c)) == sizeof(c) ? 0 : 1);
    }
    if (read(fds[0], &n, sizeof(n)) != sizeof(n))
        n = 0;
    waitpid(pid, &st, 0);
    close(fds[0]);
    close(fds[1]);
    return n;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        scenario_fn fn;
        const char *setting; /* a rank setting, or how the ranks make two hosts */
    } all[] = {{"gather", gather, NULL},
               {"bcast", bcast, NULL},
               {"ce", gather, "GPU_SMS=0"},
               {"stream", stream, NULL},
               {"mismatch", mismatch, NULL},
               {"kill", kill_peer, NULL},
               {"kill-rs", kill_peer_rs, NULL},
               {"leak", leak, NULL},
               {"refuse", refuse, NULL},
               {"bucket", gpu_bucket, NULL},
               {"bucket-ce", gpu_bucket, "GPU_SMS=0"},
               {"register", gpu_register, NULL},
               {"register-ce", gpu_register, "GPU_SMS=0"},
               {"reg-size", gpu_register_size, NULL},
               {"push", gpu_push, NULL},
               {"rs", gpu_reduce_scatter, NULL},
               {"rs-ce", gpu_reduce_scatter, "GPU_SMS=0"},
               {"staged", gpu_staged, "halves"},
               {"staged-x", gpu_staged, "interleaved"},
               {"staged-flat", gpu_staged, "flat"},
               {"staged-async", gpu_staged, "halves"},
               {"hmem", gpu_hmem, "auto"},
               {"hmem-need", gpu_hmem, "hmem"},
               {"engine", gpu_engine, NULL},
               {"watch-kill-ag", gpu_watch, NULL},
               {"watch-kill-rs", gpu_watch, NULL},
               {"watch-kill-bc", gpu_watch, NULL},
               {"watch-kill-bucket", gpu_watch, NULL},
               {"watch-kill-push", gpu_watch, NULL},
               {"watch-exit-ag", gpu_watch, NULL},
               {"watch-exit-rs", gpu_watch, NULL},
               {"watch-exit-bc", gpu_watch, NULL},
               {"watch-exit-bucket", gpu_watch, NULL},
               {"watch-exit-push", gpu_watch, NULL},
               {"watch-stall", gpu_watch, NULL},
               {"watch-abort", gpu_watch, NULL},
               {"watch-kill-staged", gpu_watch, "halves"},
               {"watch-stall-staged", gpu_watch, "halves"}};
    const char *emu = getenv("OFCCL_TEST_GPU_EMULATE"), *pc = getenv("OFCCL_GPU_PEER_CLASS");
    char *peer_class = pc != NULL ? strdup(pc) : NULL, *algo_set[3];
    static const char *const algo_var[3] = {"OFCCL_ALGO_AG", "OFCCL_ALGO_RS", "OFCCL_ALGO_BC"};
    int n, rc = 0;
    bool shared;

    setvbuf(stdout, NULL, _IOLBF, 0); /* a rank that dies keeps what it printed */
    for (int k = 0; k < 3; k++)
        algo_set[k] = getenv(algo_var[k]) != NULL ? strdup(getenv(algo_var[k])) : NULL;
    /* OFCCL_TEST_GPU_EMULATE=N: N emulated devices (host memory, streams as
     * threads): every scenario's logic without a GPU. */
    if (emu != NULL && atoi(emu) > 0 && emulate(atoi(emu)) != 0) {
        printf("test_gpu: skipped: this build cannot emulate a GPU (no CUDA headers)\n");
        return 77;
    }
    n = gpus_here();

    if (!ofccl__gpu_built()) {
        printf("test_gpu: skipped: this build has no GPU support (no nvcc)\n");
        return 77;
    }
    /* OFCCL_TEST_GPU_SHARED=1: ranks share the GPUs there are (rank % GPUs;
     * CUDA IPC within one GPU), so one GPU runs every scenario's logic. */
    shared = getenv("OFCCL_TEST_GPU_SHARED") != NULL && n >= 1;
    if (n < 2 && !shared) {
        printf("test_gpu: skipped: %d GPU(s) here, 2 needed\n", n);
        return 77;
    }
    provider = "local";
    nranks = argc > 1 && atoi(argv[1]) > 1 ? atoi(argv[1]) : n < 2 ? 2 : n;
    nranks = nranks > n && !shared ? n : nranks > FORK_MAX ? FORK_MAX : nranks;
    for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++) {
        bool want = argc <= 2;
        for (int a = 2; a < argc; a++)
            want |= strcmp(argv[a], all[i].name) == 0;
        if (!want)
            continue;
        cu_test_t tests[] = {{all[i].name, test_one}, {NULL, NULL}};
        which = all[i].fn;
        watch_case = all[i].name;
        for (int r = 0; r < nranks; r++) /* hmem's names OFCCL_GPU_FABRIC (below) */
            rank_setting[r] = all[i].fn == gpu_hmem ? NULL : all[i].setting;
        /* Two simulated hosts (the first half of the ranks and the rest, or
         * every other rank) joined by tcp: GPU memory across hosts, staged
         * through host memory by the host engine, with the algorithm the
         * cost model picks ("staged"), hierarchical ("staged-x") or the ring
         * ("staged-flat") forced. */
        bool across = all[i].fn == gpu_staged || strstr(all[i].name, "-staged") != NULL;
        provider = across ? "tcp" : all[i].fn == gpu_hmem ? "shm" : "local";
        /* FI_HMEM: CUDA is loaded before the context, so that auto asks. */
        fork_before_ctx = all[i].fn == gpu_hmem ? gpu_up : NULL;
        if (all[i].fn == gpu_hmem)
            setenv("OFCCL_GPU_FABRIC", all[i].setting, 1);
        else
            unsetenv("OFCCL_GPU_FABRIC");
        /* "engine" turns the peer class off; the others run as the caller
         * set it (OFCCL_GPU_PEER_CLASS=0: every scenario in the host engine) */
        if (all[i].fn == gpu_engine)
            setenv("OFCCL_GPU_PEER_CLASS", "0", 1);
        else if (peer_class != NULL)
            setenv("OFCCL_GPU_PEER_CLASS", peer_class, 1);
        else
            unsetenv("OFCCL_GPU_PEER_CLASS");
        if (across) {
            bool x = all[i].setting != NULL && strcmp(all[i].setting, "interleaved") == 0;
            const char *algo = !all[i].setting                       ? NULL
                               : strcmp(all[i].setting, "flat") == 0 ? "ring"
                               : x                                   ? "hier"
                                                                     : NULL;
            for (int r = 0; r < nranks; r++)
                rank_setting[r] =
                    (x ? r % 2 == 0 : r < nranks / 2) ? "HOST_ID=gpu-host-a" : "HOST_ID=gpu-host-b";
            for (int k = 0; k < 3; k++) {
                static const char *const vars[] = {"OFCCL_ALGO_AG", "OFCCL_ALGO_RS",
                                                   "OFCCL_ALGO_BC"};
                if (algo != NULL && !(k == 2 && strcmp(algo, "ring") == 0))
                    setenv(vars[k], algo, 1);
                else
                    unsetenv(vars[k]);
            }
        } else { /* as the caller set them */
            for (int k = 0; k < 3; k++)
                if (algo_set[k] != NULL)
                    setenv(algo_var[k], algo_set[k], 1);
                else
                    unsetenv(algo_var[k]);
        }
        printf("== %s, %d ranks\n", all[i].name, nranks);
        rc |= cu_run("gpu", tests);
    }
    free(peer_class);
    for (int k = 0; k < 3; k++)
        free(algo_set[k]);
    return rc;
}
