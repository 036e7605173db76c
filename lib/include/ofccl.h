/*
 * ofccl — collectives for sharded training over libfabric RMA.
 *
 * The one installed header. Every handle is opaque; every call returns 0 on
 * success or a negative OFCCL_ERR_* code; outputs are written only on success.
 * The last error message of a context or communicator says what failed, where
 * (rank, peer, phase) and what to do about it.
 */
#ifndef OFCCL_H
#define OFCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OFCCL_API __attribute__((visibility("default")))
#else
#define OFCCL_API
#endif

#define OFCCL_VERSION_MAJOR 0
#define OFCCL_VERSION_MINOR 1
#define OFCCL_VERSION_PATCH 0

/*
 * Error codes: one list, expanded into the enum and into ofccl_strerror().
 * Codes are stable: new ones are appended, none is ever renumbered.
 */
#define OFCCL_ERROR_LIST(X)                                                                        \
    X(SUCCESS, 0, "success")                                                                       \
    X(INVALID_ARG, -1, "invalid argument")                                                         \
    X(NO_MEMORY, -2, "out of memory")                                                              \
    X(NOT_SUPPORTED, -3, "operation or capability not supported")                                  \
    X(PROVIDER, -4, "fabric provider error")                                                       \
    X(BOOTSTRAP, -5, "bootstrap (rank discovery / key exchange) error")                            \
    X(TIMEOUT, -6, "timed out")                                                                    \
    X(AGAIN, -7, "resource temporarily unavailable; call again")                                   \
    X(REMOTE_ERROR, -8, "a peer failed or became unreachable")                                     \
    X(CORRUPT, -9, "corrupt or incompatible data received from a peer")                            \
    X(CONFIG, -10, "invalid configuration")                                                        \
    X(BUSY, -11, "object busy: dependent objects are still open")                                  \
    X(INTERNAL, -12, "internal error")                                                             \
    X(ABORTED, -13, "communicator aborted")                                                        \
    X(MISMATCH, -14, "arguments differ across ranks")                                              \
    X(STATE, -15, "object in the wrong state for this call")                                       \
    X(OVER_BUDGET, -16, "memory budget exceeded")

enum ofccl_error {
#define OFCCL_X_ENUM(name, code, text) OFCCL_ERR_##name = (code),
    OFCCL_ERROR_LIST(OFCCL_X_ENUM)
#undef OFCCL_X_ENUM
};
#define OFCCL_SUCCESS OFCCL_ERR_SUCCESS

/* Human-readable text of an error code; never NULL. */
OFCCL_API const char *ofccl_strerror(int code);

/* Library version (of the library loaded, not of the header compiled against). */
OFCCL_API void ofccl_version(int *major, int *minor, int *patch);
OFCCL_API const char *ofccl_version_string(void);

typedef struct ofccl_ctx ofccl_ctx_t;
typedef struct ofccl_comm ofccl_comm_t;

/*
 * Parameters of ofccl_ctx_create(). `size` must be set to sizeof(ofccl_ctx_params_t)
 * so that fields can be appended without breaking older callers.
 */
typedef struct ofccl_ctx_params {
    size_t size;
    /* NULL-terminated list of "NAME=value" settings that override the OFCCL_NAME
     * environment variables (NAME without the OFCCL_ prefix, e.g. "PROVIDER=tcp"). */
    const char *const *settings;
    /* If creation fails, the reason is written here (NUL-terminated, truncated). */
    char *errbuf;
    size_t errlen;
} ofccl_ctx_params_t;

/*
 * Create a context: read the configuration, join the job through the bootstrap
 * (PMIx by default), load the topology and open the fabric. Collective over
 * the job. `params` may be NULL. Several contexts may live in one process.
 */
OFCCL_API int ofccl_ctx_create(const ofccl_ctx_params_t *params, ofccl_ctx_t **ctx);
/* Destroy a context. Returns OFCCL_ERR_BUSY while communicators are still open. */
OFCCL_API int ofccl_ctx_destroy(ofccl_ctx_t *ctx);
/* Last error message of this context ("" if none). Valid until the next call on it. */
OFCCL_API const char *ofccl_ctx_last_error(const ofccl_ctx_t *ctx);
/* Name of the provider chosen for this context (e.g. "tcp;ofi_rxm"). */
OFCCL_API const char *ofccl_ctx_provider(const ofccl_ctx_t *ctx);

/* Create a communicator over every rank of the job. Collective. */
OFCCL_API int ofccl_comm_world(ofccl_ctx_t *ctx, ofccl_comm_t **comm);
/* Destroy a communicator. Local (needs no peer), so it works after a peer died. */
OFCCL_API int ofccl_comm_destroy(ofccl_comm_t *comm);
OFCCL_API int ofccl_comm_rank(const ofccl_comm_t *comm, int *rank);
OFCCL_API int ofccl_comm_size(const ofccl_comm_t *comm, int *size);
OFCCL_API int ofccl_comm_local_rank(const ofccl_comm_t *comm, int *local_rank);
OFCCL_API int ofccl_comm_local_size(const ofccl_comm_t *comm, int *local_size);
/* Last error message of this communicator ("" if none). */
OFCCL_API const char *ofccl_comm_last_error(const ofccl_comm_t *comm);

/* Block until every rank of the communicator has entered the barrier. Goes over
 * the fabric (not the bootstrap); fails with OFCCL_ERR_TIMEOUT after OFCCL_TIMEOUT_MS. */
OFCCL_API int ofccl_barrier(ofccl_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif /* OFCCL_H */
