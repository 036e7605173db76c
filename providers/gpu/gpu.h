/*
 * The one home of CUDA in ofccl (providers/gpu/). Everything above sees these
 * calls and opaque handles only: no CUDA header is included outside this
 * directory. The driver API is loaded at run time (dlopen of libcuda.so.1), so
 * a library built with CUDA runs on a machine without a GPU or driver (every
 * call then says why not); a library built without CUDA (no nvcc at build
 * time) has the same calls, each failing with OFCCL_ERR_NOT_SUPPORTED.
 *
 * Memory kinds: a pointer is host memory or memory of CUDA device N, as the
 * driver says (ofccl__gpu_ptr_kind), never as a caller says.
 *
 * Streams and events are the caller's CUDA handles (CUstream / CUevent, the
 * same values as cudaStream_t / cudaEvent_t), passed as opaque pointers.
 * Every stream operation here is enqueued and returns at once: copies (by
 * the copy engines or by ofccl's copy kernel), 64-bit flag writes and waits
 * (stream memory operations), events.
 */
#ifndef OFCCL_PROVIDERS_GPU_H
#define OFCCL_PROVIDERS_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "log.h"

#define OFCCL__GPU_MAX_DEVICES 64
#define OFCCL__GPU_IPC_BYTES 64 /* a CUDA IPC memory handle (CUipcMemHandle) */
#define OFCCL__GPU_COPY_DSTS 8  /* destinations of one copy-kernel launch */

typedef struct ofccl__gpu ofccl__gpu_t;
typedef void *ofccl__gpu_stream_t; /* CUstream */
typedef void *ofccl__gpu_event_t;  /* CUevent */

/* What this process's driver offers, for ofccl_info and the logs. */
typedef struct ofccl__gpu_dev_info {
    char name[96];
    char bus_id[32]; /* "0000:1b:00.0" */
    int sms;
    int cc_major, cc_minor;
    size_t total_mem;
    bool mem_ops_64;    /* 64-bit stream waits and writes */
    bool flush_remote;  /* CU_STREAM_WAIT_VALUE_FLUSH */
    bool host_register; /* host memory can be registered for device access */
} ofccl__gpu_dev_info_t;

/* The driver, loaded once per process and shared (refcounted). NOT_SUPPORTED
 * with the reason in `e` when this build has no CUDA, no driver library is
 * found, or it reports no device. */
int ofccl__gpu_open(const ofccl__log_t *log, ofccl__gpu_t **out, ofccl__err_t *e);
void ofccl__gpu_close(ofccl__gpu_t *g);
/* The process's driver, opened on first use and kept for the process's
 * life; NULL where there is none (no GPU, no driver, a build without CUDA).
 * Without `load`, NULL while nothing in the process has loaded libcuda yet:
 * no pointer can be device memory then, and a host-only program never
 * initializes CUDA because of ofccl (nor pays for it). */
ofccl__gpu_t *ofccl__gpu_process(const ofccl__log_t *log, bool load);
/* Compiled in (nvcc was found at build time)? */
bool ofccl__gpu_built(void);
/* Tests: the driver this process opens is a stand-in (the emulated GPU of
 * test/gpu/emu: `ndev` devices in host memory, streams as threads), whose
 * `install` fills the driver table (gpu_impl.h) instead of libcuda; before
 * anything opens the driver. 0, STATE once a driver is open, NOT_SUPPORTED
 * without CUDA. */
struct ofccl__gpu_fns;
int ofccl__gpu_use_driver(void (*install)(struct ofccl__gpu_fns *fn, int ndev), int ndev);
int ofccl__gpu_device_count(const ofccl__gpu_t *g);
int ofccl__gpu_device_info(ofccl__gpu_t *g, int dev, ofccl__gpu_dev_info_t *info, ofccl__err_t *e);
/* The driver's version as "13.0". */
void ofccl__gpu_driver_version(const ofccl__gpu_t *g, char *buf, size_t len);
/* This process's device for a collective: the device of the calling thread's
 * current CUDA context (as torch.cuda.set_device leaves it), else
 * `fallback` modulo the device count. */
int ofccl__gpu_current_device(ofccl__gpu_t *g, int fallback);
/* The local ordinal of the device with this PCI bus id, or -1 (not visible
 * in this process: CUDA_VISIBLE_DEVICES). */
int ofccl__gpu_device_by_bus(ofccl__gpu_t *g, const char *bus_id);
/* Can device `dev` access device `peer`'s memory directly (P2P)? When not,
 * `why` says so. */
bool ofccl__gpu_can_access(ofccl__gpu_t *g, int dev, int peer, char *why, size_t len);

/* ---- memory kinds ---- */
/* -1: host memory (or unknown to CUDA); else the ordinal of the device the
 * memory lives on. `base`/`len` (may be NULL) get the allocation holding
 * `p` (device memory only). A build without CUDA, or a process without a
 * driver, says host. */
int ofccl__gpu_ptr_kind(ofccl__gpu_t *g, const void *p, uintptr_t *base, size_t *len);

/* ---- device memory and CUDA IPC ---- */
/* `len` bytes on device `dev`, shareable with other processes of this host
 * (ofccl__gpu_ipc_export). */
int ofccl__gpu_mem_alloc(ofccl__gpu_t *g, int dev, size_t len, void **ptr, ofccl__err_t *e);
void ofccl__gpu_mem_free(ofccl__gpu_t *g, int dev, void *ptr);
/* The handle another process opens to map the allocation holding `ptr`
 * (its base), and `ptr`'s offset in it. */
int ofccl__gpu_ipc_export(ofccl__gpu_t *g, int dev, const void *ptr,
                          uint8_t handle[OFCCL__GPU_IPC_BYTES], size_t *offset, ofccl__err_t *e);
/* Map a peer's allocation into this process, for device `dev`'s access. */
int ofccl__gpu_ipc_open(ofccl__gpu_t *g, int dev, const uint8_t handle[OFCCL__GPU_IPC_BYTES],
                        void **ptr, ofccl__err_t *e);
void ofccl__gpu_ipc_close(ofccl__gpu_t *g, int dev, void *ptr);
/* The same, once per process: the allocation `id` of process `pid` (its
 * handle `handle`) mapped for device `dev`, counted, so that every endpoint
 * reaching it shares one mapping; unmapped when the last one lets go. */
int ofccl__gpu_ipc_map(ofccl__gpu_t *g, int dev, int pid, uint64_t id,
                       const uint8_t handle[OFCCL__GPU_IPC_BYTES], void **base, ofccl__err_t *e);
void ofccl__gpu_ipc_unmap(ofccl__gpu_t *g, int dev, void *base);
/* Make [p, p + len) of host memory (page-aligned, e.g. a peer's shared
 * memory mapped here) accessible to device `dev`: *devptr is its address
 * for stream operations and kernels. */
int ofccl__gpu_host_register(ofccl__gpu_t *g, int dev, void *p, size_t len, void **devptr,
                             ofccl__err_t *e);
void ofccl__gpu_host_unregister(ofccl__gpu_t *g, int dev, void *p);

/* ---- the caller's own GPU memory, shared with peer processes ---- */
/* How a range of device memory is shared: by CUDA IPC (memory from
 * cuMemAlloc / cudaMalloc: the whole allocation is mapped) or, for
 * virtual-memory allocations (cuMemCreate + cuMemMap, as PyTorch's expandable
 * segments make them), by the physical pieces behind the range, each a
 * POSIX file descriptor the peer imports and maps in order. */
#define OFCCL__GPU_SHARE_IPC 1
#define OFCCL__GPU_SHARE_VMM 2
#define OFCCL__GPU_SHARE_PIECES 240 /* pieces of one range at most (fds in one message) */
typedef struct ofccl__gpu_share {
    int kind;
    uint64_t buffer_id; /* the allocation's id in the exporting process: a cache key */
    size_t offset;      /* the range's offset in what a peer maps */
    size_t map_len;     /* what a peer maps: the allocation (IPC), the pieces (VMM) */
    uint8_t ipc[OFCCL__GPU_IPC_BYTES];
    int npieces;                                 /* VMM */
    uint64_t piece_len[OFCCL__GPU_SHARE_PIECES]; /* VMM: each piece's bytes */
    int fd[OFCCL__GPU_SHARE_PIECES];             /* VMM: its descriptor in this process, -1 */
} ofccl__gpu_share_t;
/* Describe [p, p + len) of device `dev`'s memory for peers to map. A VMM
 * range leaves open descriptors in `s` (ofccl__gpu_share_clear closes them).
 * NOT_SUPPORTED names why where the memory cannot be shared (VMM memory made
 * without a shareable handle type). */
int ofccl__gpu_share_export(ofccl__gpu_t *g, int dev, const void *p, size_t len,
                            ofccl__gpu_share_t *s, ofccl__err_t *e);
/* Map what a peer exported into this process for device `dev`'s access:
 * *base is the start of the mapping (the peer's range is at base +
 * s->offset). Takes over a VMM share's descriptors. */
int ofccl__gpu_share_open(ofccl__gpu_t *g, int dev, ofccl__gpu_share_t *s, void **base,
                          ofccl__err_t *e);
void ofccl__gpu_share_close(ofccl__gpu_t *g, int dev, int kind, void *base, size_t map_len);
void ofccl__gpu_share_clear(ofccl__gpu_share_t *s);
/* Peers' memory mapped into this process now (CUDA IPC and virtual-memory
 * mappings together, every communicator): leak checks. */
long ofccl__gpu_mappings(void);
/* Can the allocation holding p be shared by CUDA IPC (memory from
 * cuMemAlloc / cudaMalloc; virtual-memory allocations cannot)? */
bool ofccl__gpu_ipc_capable(ofccl__gpu_t *g, const void *p);
/* The allocation's id holding p (unique for the process's life: memory
 * freed and allocated again gets a new one), 0 where it has none. */
uint64_t ofccl__gpu_buffer_id(ofccl__gpu_t *g, const void *p);
/* Virtual-memory allocation the way PyTorch's expandable segments make it
 * (tests): `npieces` physical pieces of `piece` bytes (rounded up to the
 * granularity), shareable as descriptors, mapped one after the other. */
int ofccl__gpu_vmm_alloc(ofccl__gpu_t *g, int dev, size_t piece, int npieces, void **ptr,
                         size_t *total, ofccl__err_t *e);
void ofccl__gpu_vmm_free(ofccl__gpu_t *g, int dev, void *ptr, size_t total);

/* ---- streams, events, flags, copies (all enqueued, none waits) ---- */
/* A stream of ofccl's own on `dev` that does not wait for the legacy default
 * stream. */
int ofccl__gpu_stream_create(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t *s, ofccl__err_t *e);
void ofccl__gpu_stream_destroy(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s);
/* Events without timing (cheap); `timing` for benchmarks. */
int ofccl__gpu_event_create(ofccl__gpu_t *g, int dev, bool timing, ofccl__gpu_event_t *ev,
                            ofccl__err_t *e);
void ofccl__gpu_event_destroy(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev);
int ofccl__gpu_event_record(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__gpu_stream_t s,
                            ofccl__err_t *e);
/* 1 done, 0 not yet, or an error. */
int ofccl__gpu_event_query(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__err_t *e);
/* Block the host until the event completes (tests and benchmarks only). */
int ofccl__gpu_event_sync(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t ev, ofccl__err_t *e);
float ofccl__gpu_event_ms(ofccl__gpu_t *g, int dev, ofccl__gpu_event_t a, ofccl__gpu_event_t b);
/* Work enqueued on `s` after this waits for `ev`. */
int ofccl__gpu_stream_wait_event(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s,
                                 ofccl__gpu_event_t ev, ofccl__err_t *e);
/* Stream waits until the 64-bit word at device address `flag` is >= value. */
int ofccl__gpu_wait_flag(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *flag,
                         uint64_t value, ofccl__err_t *e);
/* Stream writes `value` into the 64-bit word at device address `flag`, after
 * every earlier write of the stream (a memory fence first). */
int ofccl__gpu_write_flag(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *flag,
                          uint64_t value, ofccl__err_t *e);
/* Copy by a copy engine (no SM taken). */
int ofccl__gpu_copy(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *dst, const void *src,
                    size_t len, ofccl__err_t *e);
/* Copy `len` bytes from `src` to each of `dsts[0..ndst)` (ndst <=
 * OFCCL__GPU_COPY_DSTS) with ofccl's copy kernel on at most `sms` SMs;
 * nothing where the 64-bit word at device address `abort` (may be NULL) is
 * nonzero when the kernel starts. */
int ofccl__gpu_copy_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *dsts,
                           int ndst, const void *src, size_t len, int sms, const void *abort,
                           ofccl__err_t *e);
/* Set each of the `n` 64-bit words at device addresses flags[0..n) (n <=
 * OFCCL__GPU_COPY_DSTS; peers' flags) to `value`, after everything before it
 * on the stream is visible to them, by a one-thread kernel; nothing where
 * the word at `abort` (may be NULL) is nonzero when it runs, so that a
 * stream released after a failure never signals data that did not come. */
int ofccl__gpu_signal(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *const *flags, int n,
                      uint64_t value, const void *abort, ofccl__err_t *e);
/* dst = the `nsrc` sources (<= OFCCL__GPU_REDUCE_SRCS) of `count` elements
 * reduced element by element in source order, with ofccl's reduction kernel
 * on at most `sms` SMs: dtype f32 0, f64 1, bf16 2, f16 3 (ofccl_dtype_t);
 * kind sum 0, avg 1, premul sum 2 (the redop's); the sum divided by `ndiv`
 * where it is > 0. Each operation rounded on its own, in the order
 * docs/reductions.md gives: the bits of lib/core/reduce.c's result. dst may
 * be exactly srcs[0]. Nothing where the word at `abort` is nonzero. */
#define OFCCL__GPU_REDUCE_SRCS 16
int ofccl__gpu_reduce_kernel(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, void *dst,
                             const void *const *srcs, int nsrc, size_t count, int dtype, int kind,
                             double scalar, int ndiv, int sms, const void *abort, ofccl__err_t *e);
/* Device memory free and in all on `dev` (leak checks). */
int ofccl__gpu_mem_info(ofccl__gpu_t *g, int dev, size_t *free_bytes, size_t *total,
                        ofccl__err_t *e);
/* Block the host until everything enqueued on the stream so far is done. */
int ofccl__gpu_stream_sync(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, ofccl__err_t *e);
/* Load ofccl's kernels on `dev` now (done on first launch otherwise): a
 * module load waits in the driver while a peer process that shared memory
 * with this one is being torn down, so it must not happen mid-collective. */
int ofccl__gpu_load_kernels(ofccl__gpu_t *g, int dev, ofccl__err_t *e);
/* One rank's part of a pipelined chain (broadcast): `blocks` blocks (the same
 * on every rank); chunk c of `len` bytes goes from `src` to `next` (NULL:
 * the last rank) once the predecessor's flags `in` (NULL: the root) reach
 * base + c + 1, then the successor's flags `out` are set to that. */
#define OFCCL__GPU_CHAIN_BLOCKS 64 /* at most: `in` and `out` hold this many flags */
int ofccl__gpu_chain(ofccl__gpu_t *g, int dev, ofccl__gpu_stream_t s, const void *src, void *next,
                     size_t len, size_t chunk, int blocks, void *in, void *out, uint64_t base,
                     const void *abort, ofccl__err_t *e);
/* A device's executor for the host engine (exec.c; exec_ops.h's table):
 * the process's one for `dev`, made on first use (a stream of its own, its
 * reductions on `sms` SMs); NULL with `e` set where it cannot be made. */
struct ofccl__exec_ops;
extern const struct ofccl__exec_ops ofccl__gpu_exec_ops;
void *ofccl__gpu_exec_state(ofccl__gpu_t *g, int dev, int sms, ofccl__err_t *e);
/* Copies between host and device memory, blocking the host (staging and tests). */
int ofccl__gpu_copy_sync(ofccl__gpu_t *g, int dev, void *dst, const void *src, size_t len,
                         ofccl__err_t *e);

#endif
