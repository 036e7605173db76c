/*
 * The parameter registry: every tunable is declared once in OFCCL__CONFIG_TABLE,
 * read once at context creation (explicit settings override OFCCL_<NAME>
 * environment variables), validated, and listed by `ofccl_info -c`.
 */
#ifndef OFCCL_BASE_CONFIG_H
#define OFCCL_BASE_CONFIG_H

#include <stdint.h>

#include "err.h"

typedef enum ofccl__cfg_type {
    OFCCL__CT_BOOL,   /* 0/1, true/false, yes/no, on/off */
    OFCCL__CT_INT,    /* decimal integer within [min, max] */
    OFCCL__CT_SIZE,   /* bytes, optional K/M/G suffix (powers of 1024), within [min, max] */
    OFCCL__CT_ENUM,   /* one of `allowed` ("a|b|c"); value = index */
    OFCCL__CT_LIST,   /* comma-separated subset of `allowed`; value = bit mask */
    OFCCL__CT_STRING, /* free text, validated by its user */
} ofccl__cfg_type_t;

/* X(ID, TYPE, SCOPE, default, allowed, min, max, help). SCOPE is AGREE for settings that
 * shape the wire protocol or decide when a collective fails (every rank of a communicator must
 * use the same value: checked when it is created) and LOCAL for the others. */
#define OFCCL__CONFIG_TABLE(X)                                                                     \
    X(LOG_LEVEL, ENUM, LOCAL, "warn", "error|warn|info|debug|trace", 0, 0,                         \
      "Log verbosity; each line is prefixed host:pid:rank")                                        \
    X(LOG_SUBSYS, LIST, LOCAL, "all", "core|coll|prov|boot|mem|all", 0, 0,                         \
      "Subsystems whose messages are printed (comma-separated)")                                   \
    X(PROVIDER, STRING, AGREE, "auto", "auto|local|shm|tcp|verbs|<libfabric provider>", 0, 0,      \
      "Transport; local = ofccl's own shared-memory transport (one host, no libfabric); auto = "   \
      "local when all ranks share a host, tcp otherwise")                                          \
    X(IFACE, STRING, LOCAL, "", "<libfabric domain name>", 0, 0,                                   \
      "Domain (NIC or interface) to use; empty = the one closest to this process "                 \
      "(loopback for tcp when all ranks share a host)")                                            \
    X(STRICT, BOOL, AGREE, "0", "0|1", 0, 0,                                                       \
      "Behave as verbs;ofi_rxm requires (register local buffers, provider keys, offset "           \
      "addressing, 4-byte CQ data, posted receives for CQ data) on any provider")                  \
    X(SIGNAL, ENUM, AGREE, "auto", "auto|cqdata|atomic", 0, 0,                                     \
      "How arrivals are signalled: remote CQ data, or a 64-bit atomic add on a counter")           \
    X(BOOT, ENUM, LOCAL, "auto", "auto|pmix|tcp|singleton", 0, 0,                                  \
      "Bootstrap; auto = tcp when BOOT_ROOT is set, else PMIx, else singleton")                    \
    X(BOOT_TIMEOUT_MS, INT, LOCAL, "60000", "", 1, 86400000,                                       \
      "Timeout of each bootstrap exchange (PMIx fence, TCP rendezvous), in ms")                    \
    X(BOOT_EXCHANGE, ENUM, AGREE, "auto", "auto|all|lazy", 0, 0,                                   \
      "How a world communicator's setup records travel: all = every rank collects every "          \
      "record when it is created; lazy = each rank publishes its own and reads a peer's on "       \
      "first use (PMIx direct modex, or the TCP rendezvous root's record server; local+fabric "    \
      "per peer reads the host's peers at creation), on providers that insert peers one at a "     \
      "time (not shm or local); auto = lazy under PMIx from 64 ranks on, else all")                \
    X(BOOT_ROOT, STRING, LOCAL, "", "<host:port>", 0, 0,                                           \
      "TCP rendezvous: address where rank 0 listens and the others connect")                       \
    X(BOOT_RANK, INT, LOCAL, "-1", "", -1, 1048575, "TCP rendezvous: rank of this process")        \
    X(BOOT_SECRET_FILE, STRING, LOCAL, "", "<path>", 0, 0,                                         \
      "TCP rendezvous: file holding the job secret (16 to 4096 bytes, mode 0600); every rank "     \
      "sets one, and only processes that prove they know it join; empty = anyone who reaches "     \
      "the root's port may join")                                                                  \
    X(BOOT_SIZE, INT, LOCAL, "0", "", 0, 1048576, "TCP rendezvous: number of ranks")               \
    X(TIMEOUT_MS, INT, LOCAL, "300000", "", 0, 86400000,                                           \
      "Deadline of a blocking call or request, in ms; 0 = none")                                   \
    X(TOPO_XML, STRING, LOCAL, "", "<path>", 0, 0,                                                 \
      "Load the hwloc topology from this XML file instead of probing the machine")                 \
    X(OPS_INFLIGHT, INT, LOCAL, "1024", "", 16, 1048576,                                           \
      "Fabric operations in flight per communicator, including the EAGAIN retry queue")            \
    X(RX_POSTED, INT, LOCAL, "256", "", 8, 65536,                                                  \
      "Receives kept posted for remote CQ data where the provider consumes one per signal")        \
    X(ALGO_AG, ENUM, AGREE, "auto", "auto|direct|ring|hier", 0, 0,                                 \
      "All-gather algorithm; auto = eager when small, else the cheapest of direct, ring and hier " \
      "(between hosts along rails, then within each host; where every host has as many ranks, "    \
      "more than one) by the cost model (OFCCL_LINK_*; ofccl_info -j prints its choices); hier "   \
      "where it does not fit is direct")                                                           \
    X(ALGO_RS, ENUM, AGREE, "auto", "auto|direct|ring|hier", 0, 0,                                 \
      "Reduce-scatter algorithm; auto = eager when small, else the cheapest of direct, ring and "  \
      "hier (within each host, then between hosts along rails; where it fits, as for the "         \
      "all-gather) by the cost model; where peers' memory maps direct reads their blocks in "      \
      "place (pull); hier where it does not fit is direct")                                        \
    X(CHUNK_BYTES, SIZE, AGREE, "512K", "", 4096, 1073741824,                                      \
      "Pipeline chunk: a collective moves each rank's block in chunks of this size")               \
    X(AG_TAKE, SIZE, AGREE, "1M", "0|<bytes>", 0, 1073741824,                                      \
      "All-gather on the local transport (direct), blocks of at least this many bytes per rank: "  \
      "a rank done with its own writes copies, from the peer's buffer, each block that has not "   \
      "reached it yet (claimed in its control region, so each block is copied once), where the "   \
      "peer's source is ofccl memory; a late rank no longer sets the pace. 0 = never: every "      \
      "rank writes its block to every peer")                                                       \
    X(RS_GRAIN, SIZE, AGREE, "16K", "0|<bytes>", 0, 1073741824,                                    \
      "Reduce-scatter on the local transport (pull): blocks are reduced in grains of this many "   \
      "bytes, taken from a counter in the owner's control region; a rank done with its own "       \
      "block takes the grains left in other ranks' blocks whose output is ofccl memory, so a "     \
      "slow core does not set the pace; 0 = each rank reduces only its own block")                 \
    X(EAGER_BYTES, SIZE, AGREE, "16K", "", 0, 1048576,                                             \
      "Direct collectives moving at most this many bytes in all go eagerly: data straight into "   \
      "the receiver's control region, no descriptor round trip; 0 = never")                        \
    X(DEPTH, INT, LOCAL, "4", "", 1, 32, "Chunks in flight per peer")                              \
    X(ALIGN, SIZE, AGREE, "128", "", 8, 4096,                                                      \
      "Alignment of each rank's shard in a bucket (power of 2)")                                   \
    X(POOL_BYTES, SIZE, AGREE, "0", "", 0, INT64_MAX,                                              \
      "Budget of pool and staging memory per communicator; 0 = grow as needed")                    \
    X(AG_BUFFERS, INT, AGREE, "2", "", 1, 16,                                                      \
      "Staging buffers for all-gathers (how many can be in flight on staged memory)")              \
    X(RS_BUFFERS, INT, AGREE, "1", "", 1, 16,                                                      \
      "Staging buffers for reduce-scatters (how many can be in flight)")                           \
    X(FAULT, STRING, LOCAL, "", "<eagain=A-B,mrfail=N,cqerr=N,kill=N[@rank]>", 0, 0,               \
      "Inject faults (builds with -Dfault_injection=true only): EAGAIN for post attempts A..B, "   \
      "fail the Nth registration, turn the Nth completion into an error, SIGKILL this rank when "  \
      "it posts collective N; @rank limits an item to one rank")                                   \
    X(PROGRESS_THREAD, BOOL, LOCAL, "0", "0|1", 0, 0,                                              \
      "Run a progress thread (pinned away from the caller's cores when possible)")                 \
    X(SPIN_US, INT, LOCAL, "10000", "", 0, 60000000,                                               \
      "A waiting call (or the progress thread) polls without pause for this long after the last "  \
      "sign of progress, then naps between polls for 1/16 of the time waited (20 us to 1 ms): a "  \
      "rank waiting on a slow or stopped peer costs little CPU")                                   \
    X(WATCH_US, INT, LOCAL, "1000", "", 10, 1000000,                                               \
      "While a stream-ordered (GPU) collective is in flight, a thread of the context checks this " \
      "often for dead peers, deadlines and aborts, and releases the stream of a failed one; it "   \
      "starts with the first such collective and sleeps while none is in flight")                  \
    X(PEER_WATCH, BOOL, LOCAL, "1", "0|1", 0, 0,                                                   \
      "Notice a same-host peer's exit from its process (a pidfd; local transport, and shm peers "  \
      "in this PID namespace) within milliseconds; 0 = only from the launcher's failure events, "  \
      "the transport's errors, the peers' failure notices and the deadline")                       \
    X(HOST_ID, STRING, LOCAL, "", "<text>", 0, 0,                                                  \
      "Identity of this rank's host for transport choice and locality; empty = boot id + "         \
      "network, mount and PID namespace identities (tests that simulate hosts set it)")            \
    X(LIBRARY, STRING, LOCAL, "", "<path>", 0, 0,                                                  \
      "Python package only: path of the libofccl.so it loads; the C library ignores it")           \
    X(ALGO_BC, ENUM, AGREE, "auto", "auto|direct|chain|pull|hier", 0, 0,                           \
      "Broadcast algorithm; auto = eager when small, else the cheapest of direct, chain and hier " \
      "(slices along rails between hosts, then within each host) by the cost model; where peers' " \
      "memory maps direct is pull (every rank reads the root's buffer); hier where it does not "   \
      "fit is direct")                                                                             \
    X(BOOT_GROUP, STRING, LOCAL, "", "<name>", 0, 0,                                               \
      "TCP rendezvous of separately launched jobs: this process's group (BOOT_RANK is its rank "   \
      "in it)")                                                                                    \
    X(BOOT_GROUPS, STRING, LOCAL, "", "<name:size,...>", 0, 0,                                     \
      "TCP rendezvous of separately launched jobs: every group and its size, in rank order; the "  \
      "same on every process (the job's size is their sum)")                                       \
    X(TRACE, STRING, LOCAL, "", "<directory>", 0, 0,                                               \
      "Write a timeline of every collective, its phases per peer and its writes to "               \
      "<directory>/ofccl-trace-<job>-<rank>.json (Chrome trace-event JSON; merge the ranks' "      \
      "files with ofccl-trace merge); empty = off")                                                \
    X(TRACE_EVENTS, INT, LOCAL, "262144", "", 16, 67108864,                                        \
      "Events a context's trace buffer holds (64 B each); later ones are counted as dropped")      \
    X(DUMP_SIGNAL, BOOL, LOCAL, "0", "0|1", 0, 0,                                                  \
      "On SIGUSR1, log every pending request of every communicator (operation, sequence, phase, "  \
      "the peers it waits for) and write the trace, without stopping the job")                     \
    X(PEER_TRANSPORT, ENUM, AGREE, "auto", "auto|fabric", 0, 0,                                    \
      "Transport per peer in a job spanning hosts: auto = peers on this rank's host through the "  \
      "local shared-memory transport, the others through OFCCL_PROVIDER; fabric = every peer "     \
      "through OFCCL_PROVIDER")                                                                    \
    X(LINK_LOCAL, STRING, AGREE, "auto", "auto|<alpha_us>:<GB/s>", 0, 0,                           \
      "Cost model, same-host peers through the local transport: latency (us) and bandwidth "       \
      "(GB/s) per rank; auto = 0.2 us and, in a job across hosts, the copy rate measured when "    \
      "the context is created (else 10 GB/s), the median over the communicator's ranks")           \
    X(LINK_FABRIC, STRING, AGREE, "auto", "auto|<alpha_us>:<GB/s>", 0, 0,                          \
      "Cost model, peers through the fabric provider: latency (us) and bandwidth (GB/s) of a "     \
      "host's link; auto = 13.5 us and the NIC's link speed where the provider gives one, else "   \
      "2.5 GB/s, the median over the communicator's ranks")                                        \
    X(LINK_STREAMS, INT, AGREE, "13", "", 1, 1000000,                                              \
      "Cost model: fabric peers an endpoint writes to at once at its full rate; direct's "         \
      "all-pairs traffic to m > this many runs m/this times slower (13: loopback tcp at 16 "       \
      "ranks; on a NIC, compare ofccl_perf -a direct and -a ring)")                                \
    X(GPU_SMS, INT, AGREE, "16", "", 0, 1024,                                                      \
      "GPU collectives: SMs ofccl's kernels may take (the copy kernel, the broadcast chain at "    \
      "most 64, the reduction); 0 = the copy engines only (no SM taken from the caller's "         \
      "kernels but the reduce-scatter's 8)")                                                       \
    X(GPU_CHAIN_BYTES, SIZE, AGREE, "0", "", 0, 1073741824,                                        \
      "GPU broadcast: chunk of the pipelined chain; 0 = by size (1/16 of the buffer, 256 KiB to "  \
      "4 MiB)")                                                                                    \
    X(GPU_FABRIC, ENUM, AGREE, "auto", "auto|hmem|stage", 0, 0,                                    \
      "GPU memory the GPU peer class does not serve (other hosts, no P2P, a libfabric provider "   \
      "on one host): auto = registered with the transport as GPU memory where every peer is "      \
      "reached so (the local transport by CUDA IPC; a fabric provider by libfabric FI_HMEM where " \
      "it takes CUDA memory and calls no CUDA itself, asked when CUDA is loaded as the context "   \
      "is made), else staged through host memory, said once; hmem = that always, and a GPU "       \
      "collective fails where it is unavailable; stage = always staged. Reduce-scatter is "        \
      "staged unless every peer is the local transport's")                                         \
    X(GPU_PEER_CLASS, BOOL, AGREE, "1", "0|1", 0, 0,                                               \
      "GPU memory of ranks on one host with P2P: 1 = the GPU peer class (stream programs, no "     \
      "host work); 0 = the host engine, as any collective: the local transport writes peers' "     \
      "GPU memory by CUDA IPC (OFCCL_GPU_FABRIC decides as for other hosts)")                      \
    X(GPU_POOL_BYTES, SIZE, AGREE, "0", "", 0, INT64_MAX,                                          \
      "Budget of the symmetric GPU pool per communicator (its segments, mapped into every "        \
      "same-host peer); 0 = grow as needed")

enum ofccl__cfg_id {
#define OFCCL__X_ID(id, type, scope, def, allowed, min, max, help) OFCCL__CFG_##id,
    OFCCL__CONFIG_TABLE(OFCCL__X_ID)
#undef OFCCL__X_ID
        OFCCL__CFG_COUNT
};

typedef struct ofccl__cfg_param {
    const char *name; /* without the OFCCL_ prefix */
    ofccl__cfg_type_t type;
    int agree; /* 1: must be equal on every rank of a communicator (checked at creation) */
    const char *def;
    const char *allowed;
    int64_t min, max;
    const char *help;
} ofccl__cfg_param_t;

typedef struct ofccl__cfg_value {
    int64_t i;   /* bool, int, size, enum index, list mask */
    char s[256]; /* the text as given (or the default) */
    int from;    /* 0 = default, 1 = environment, 2 = explicit setting */
} ofccl__cfg_value_t;

typedef struct ofccl__config {
    ofccl__cfg_value_t v[OFCCL__CFG_COUNT];
} ofccl__config_t;

/* Returns the value of environment variable `name` or NULL. */
typedef const char *(*ofccl__cfg_lookup_fn)(void *arg, const char *name);

extern const ofccl__cfg_param_t ofccl__cfg_params[OFCCL__CFG_COUNT];

/* Load every parameter: defaults, then `lookup("OFCCL_<NAME>")` (NULL lookup =
 * the process environment), then `settings` ("NAME=value", NULL-terminated,
 * may be NULL). An invalid value fails with OFCCL_ERR_CONFIG naming the
 * variable and the allowed values. */
int ofccl__config_load(ofccl__config_t *cfg, const char *const *settings,
                       ofccl__cfg_lookup_fn lookup, void *arg, ofccl__err_t *e);
/* Parse one value of parameter `id`; used by load and by the fuzzer. */
int ofccl__config_parse(int id, const char *text, ofccl__cfg_value_t *out, ofccl__err_t *e);

static inline int64_t ofccl__cfg_int(const ofccl__config_t *c, int id)
{
    return c->v[id].i;
}
static inline const char *ofccl__cfg_str(const ofccl__config_t *c, int id)
{
    return c->v[id].s;
}

/* Value `v` of parameter `id` as a user would write it (enum names, numbers). */
void ofccl__config_format(int id, int64_t v, char *buf, size_t len);

/* OFCCL_* variables in the environment that name no parameter (typos), as a
 * comma-separated list in `buf` ("" if none). */
void ofccl__config_unknown_env(char *buf, size_t len);
/* Launcher variables present in the environment (SLURM_*, PMI_*, OMPI_*,
 * PMIX_*), as a comma-separated list of names in `buf` ("" if none). */
void ofccl__config_launcher_env(char *buf, size_t len);

#endif
