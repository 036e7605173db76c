/*
 * Bootstrap: rank discovery and blob exchange behind a small ops interface.
 * The only code in ofccl that calls PMIx_*. Used while creating communicators
 * (and registering windows), never on the data path.
 */
#ifndef OFCCL_BOOTSTRAP_BOOT_H
#define OFCCL_BOOTSTRAP_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "log.h"

/* Bytes of a host identity (see host.c), without the terminating NUL. */
#define OFCCL__HOST_ID_MAX 255

typedef struct ofccl__boot ofccl__boot_t;

/* A rank the launcher reports gone (killed, aborted, exited, its connection
 * lost). Called on the bootstrap's own thread (PMIx's event thread), never
 * with a lock of the caller held: it must only record, thread-safely.
 * `source` is a static string naming the report ("PMIx event
 * PMIX_ERR_PROC_ABORTED_BY_SIG"). */
typedef void (*ofccl__boot_dead_fn)(void *arg, int rank, const char *source);

/* What a backend offers beyond the all-gather and barrier every one has. */
enum ofccl__boot_flag {
    /* Serves single records on demand (publish, get: PMIx's direct modex,
     * the TCP root's record server). */
    OFCCL__BOOT_F_GET = 1u << 0,
    /* Reduces at one place (allreduce: the TCP rendezvous root). */
    OFCCL__BOOT_F_REDUCE = 1u << 1,
    /* OFCCL_BOOT_EXCHANGE=auto reads records on demand from 64 ranks on
     * (PMIx, whose server holds them anyway). */
    OFCCL__BOOT_F_LAZY_AUTO = 1u << 2,
};

/* Every slot is filled: a backend without a use for one points it at a stub
 * answering OFCCL_ERR_NOT_SUPPORTED, and says what it offers in `flags`. */
typedef struct ofccl__boot_ops {
    size_t size;      /* sizeof(ofccl__boot_ops_t): the table can grow */
    const char *name; /* "pmix", "tcp", "singleton": for messages */
    unsigned flags;   /* enum ofccl__boot_flag */
    /* Every rank contributes `len` (<= slot) bytes; on return out[r * slot] holds
     * rank r's bytes and lens[r] their length. Collective; bounded by the timeout. */
    int (*allgather)(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                     size_t *lens, ofccl__err_t *e);
    /* Collective; bounded by the timeout. */
    int (*barrier)(ofccl__boot_t *b, ofccl__err_t *e);
    /* Release everything; local. */
    void (*finalize)(ofccl__boot_t *b);
    /* Failure events: from now on call `dead` for each rank of the job the
     * launcher reports gone. OFCCL_ERR_NOT_SUPPORTED where the bootstrap hears
     * of none (TCP, singleton). One watch per bootstrap. */
    int (*watch)(ofccl__boot_t *b, ofccl__boot_dead_fn dead, void *arg, ofccl__err_t *e);
    /* Stop: once it returns, `dead` is not running and never runs again. */
    void (*unwatch)(ofccl__boot_t *b);
    /* Lazy exchange (OFCCL__BOOT_F_GET; a stub elsewhere): make `len` (<= slot, the most any rank
     * publishes) bytes readable by every rank under a new *tag and synchronise without collecting
     * anything. Collective; bounded by the timeout. */
    int (*publish)(ofccl__boot_t *b, const void *in, size_t len, size_t slot, uint64_t *tag,
                   ofccl__err_t *e);
    /* Read the `cap` bytes at most that `rank` published under `tag`; *len gets
     * their length. Local call, answered by the launcher; bounded by the timeout. */
    int (*get)(ofccl__boot_t *b, uint64_t tag, int rank, void *out, size_t cap, size_t *len,
               ofccl__err_t *e);
    /* As ofccl__boot_allreduce (OFCCL__BOOT_F_REDUCE; a stub elsewhere:
     * done there as an all-gather). */
    int (*allreduce)(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n, const uint8_t *ops,
                     ofccl__err_t *e);
} ofccl__boot_ops_t;

struct ofccl__boot {
    const ofccl__boot_ops_t *ops;
    int rank, size;
    int local_rank, local_size;
    int nhosts;
    int *host_of;      /* [size]: host index of each rank, hosts numbered by their lowest rank */
    char hostname[64]; /* for messages; hosts are told apart by host_id */
    /* [nhosts][64]: each host's name for messages, where the bootstrap knows
     * them all (the rendezvous root's table, PMIx's PMIX_HOSTNAME); NULL else */
    char *host_names;
    char host_id[OFCCL__HOST_ID_MAX + 1];
    char job[64]; /* PMIx namespace, "tcp:<root>", or "singleton" */
    uint64_t timeout_ms;
    const ofccl__log_t *log;
    uint64_t seq; /* exchanges done so far (makes keys unique) */
    void *impl;
};

typedef struct ofccl__boot_params {
    const char *method; /* "auto", "pmix", "tcp", "singleton" */
    uint64_t timeout_ms;
    const char *root;          /* TCP rendezvous "host:port" ("" = unset) */
    int rank;                  /* TCP rendezvous rank (-1 = unset) */
    int size;                  /* TCP rendezvous size (0 = unset) */
    const char *launcher_vars; /* launcher variables seen in the environment ("" = none) */
    const char *host_id;       /* OFCCL_HOST_ID: this host's identity ("" or NULL = detect) */
    const char *secret_file;   /* OFCCL_BOOT_SECRET_FILE: the TCP rendezvous's job secret */
    const ofccl__log_t *log;
} ofccl__boot_params_t;

/* auto: tcp when `root` is set; else PMIx; PMIx unreachable -> singleton when
 * no launcher variables are set, else OFCCL_ERR_BOOTSTRAP naming the likely
 * misconfiguration (e.g. srun without --mpi=pmix). */
int ofccl__boot_open(const ofccl__boot_params_t *p, ofccl__boot_t **out, ofccl__err_t *e);
void ofccl__boot_close(ofccl__boot_t *b);

static inline int ofccl__boot_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out,
                                        size_t slot, size_t *lens, ofccl__err_t *e)
{
    return b->ops->allgather(b, in, len, out, slot, lens, e);
}
static inline int ofccl__boot_barrier(ofccl__boot_t *b, ofccl__err_t *e)
{
    return b->ops->barrier(b, e);
}

/* Failure events (see the ops table); bootstraps without them answer
 * OFCCL_ERR_NOT_SUPPORTED, and an ops table too old to have the slots too. */
static inline int ofccl__boot_watch(ofccl__boot_t *b, ofccl__boot_dead_fn dead, void *arg,
                                    ofccl__err_t *e)
{
    if (b->ops->size < offsetof(ofccl__boot_ops_t, unwatch) + sizeof(b->ops->unwatch))
        return OFCCL_ERR_NOT_SUPPORTED;
    return b->ops->watch(b, dead, arg, e);
}
static inline void ofccl__boot_unwatch(ofccl__boot_t *b)
{
    if (b->ops->size >= offsetof(ofccl__boot_ops_t, unwatch) + sizeof(b->ops->unwatch))
        b->ops->unwatch(b);
}
/* The stubs of bootstraps that hear of no failures (boot.c). */
int ofccl__boot_watch_none(ofccl__boot_t *b, ofccl__boot_dead_fn dead, void *arg, ofccl__err_t *e);
void ofccl__boot_unwatch_none(ofccl__boot_t *b);
int ofccl__boot_publish_none(ofccl__boot_t *b, const void *in, size_t len, size_t slot,
                             uint64_t *tag, ofccl__err_t *e);
int ofccl__boot_get_none(ofccl__boot_t *b, uint64_t tag, int rank, void *out, size_t cap,
                         size_t *len, ofccl__err_t *e);
int ofccl__boot_allreduce_none(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n,
                               const uint8_t *ops, ofccl__err_t *e);
/* Records published for reading one at a time (publish.c): where the backend
 * has publish/get, only a tag; elsewhere every rank's record, all-gathered. */
typedef struct ofccl__boot_pub {
    uint64_t tag;   /* the backend's (publish) */
    bool lazy;      /* read through ops->get; else from table */
    size_t slot;    /* bytes per rank in table */
    uint8_t *table; /* [size * slot] when !lazy */
    size_t *lens;   /* [size] when !lazy */
    uint64_t gets;  /* records read so far */
} ofccl__boot_pub_t;

/* Does the backend serve single records on demand (PMIx: direct modex)? */
static inline bool ofccl__boot_can_get(const ofccl__boot_t *b)
{
    return (b->ops->flags & OFCCL__BOOT_F_GET) != 0;
}
/* Should OFCCL_BOOT_EXCHANGE=auto read records on demand at scale? */
static inline bool ofccl__boot_lazy_auto(const ofccl__boot_t *b)
{
    return ofccl__boot_can_get(b) && (b->ops->flags & OFCCL__BOOT_F_LAZY_AUTO) != 0;
}
/* Publish this rank's `len` (<= slot) bytes, collectively. `lazy`: through
 * the backend's publish where it has one, no data collected; otherwise (or
 * without one) an all-gather whose result *out keeps. len 0: nothing (this
 * rank's side failed). *out is freed with ofccl__boot_pub_free. */
int ofccl__boot_publish(ofccl__boot_t *b, bool lazy, const void *in, size_t len, size_t slot,
                        ofccl__boot_pub_t **out, ofccl__err_t *e);
/* `rank`'s published bytes (cap at most): from the table or the launcher. */
int ofccl__boot_get(ofccl__boot_t *b, ofccl__boot_pub_t *pub, int rank, void *out, size_t cap,
                    size_t *len, ofccl__err_t *e);
void ofccl__boot_pub_free(ofccl__boot_pub_t *pub);

enum ofccl__boot_op { OFCCL__BOOT_MIN = 0, OFCCL__BOOT_MAX = 1 };
#define OFCCL__BOOT_REDUCE_MAX 8
/* out[k] = ops[k] (MIN or MAX) of every rank's in[k], k < n <= OFCCL__BOOT_REDUCE_MAX.
 * Collective; where the backend reduces at one place (the TCP rendezvous
 * root) each rank sends and receives n words, else an all-gather of them. */
int ofccl__boot_allreduce(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n,
                          const uint8_t *ops, ofccl__err_t *e);
/* Fold rank data (n words) into acc (the first rank's copy): the reduction step. */
void ofccl__boot_reduce_into(uint64_t *acc, const uint64_t *in, int n, const uint8_t *ops);

/* Key material for a fabric's domain authorization key, derived from the
 * job secret in `secret_file` (OFCCL_BOOT_SECRET_FILE, read as the TCP
 * rendezvous reads it): n bytes (at most OFCCL__BOOT_FABRIC_KEY_MAX), block
 * b of 32 bytes HMAC-SHA-256(K, "ofccl fabric key" | b) under the secret's
 * key K. Every rank of a job derives the same bytes; nothing else on the
 * wire or in the rendezvous is made from this label. Errors as loading the
 * secret's: they name the setting and the path, never the content. */
#define OFCCL__BOOT_FABRIC_KEY_MAX 64
int ofccl__boot_fabric_key(const char *secret_file, const ofccl__log_t *log, uint8_t *out, size_t n,
                           ofccl__err_t *e);
/* Host identity (host.c): `override` when set (printable, at most
 * OFCCL__HOST_ID_MAX bytes, else OFCCL_ERR_CONFIG), otherwise
 * "<boot id>/net:<ino>.<dev>/mnt:<ino>.<dev>/pid:<ino>.<dev>" of the calling
 * process. Writes at most OFCCL__HOST_ID_MAX + 1 bytes to `out`. */
int ofccl__boot_host_id(const char *override, const ofccl__log_t *lg, char *out, ofccl__err_t *e);
/* Fill b->host_of and b->nhosts from every rank's identity (ids[size]):
 * equal identities share a host, hosts are numbered by their lowest rank. */
int ofccl__boot_hosts_from_ids(ofccl__boot_t *b, const char *const *ids, ofccl__err_t *e);
/* The name of host h for messages: b->host_names[h], else "host #h". */
void ofccl__boot_host_name(const ofccl__boot_t *b, int h, char *out, size_t len);
/* b->host_names from each host's lowest rank's name (names[r * stride]):
 * printable characters only, at most 63. 0 or OFCCL_ERR_NO_MEMORY. */
int ofccl__boot_set_host_names(ofccl__boot_t *b, const char *names, size_t stride);
/* local_rank / local_size from b->host_of: the ranks on this rank's host. */
void ofccl__boot_local_from_hosts(ofccl__boot_t *b);

/* Backends (each in its own file); each fills host_of / nhosts. */
int ofccl__boot_pmix_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, int *unreachable,
                          ofccl__err_t *e);
int ofccl__boot_tcp_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e);
int ofccl__boot_singleton_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, ofccl__err_t *e);

#endif
