/*
 * Executors: what moves and combines bytes between buffers of given memory
 * kinds, once a transport or an algorithm has decided what goes where. The
 * host's is memcpy and the reduction kernels, done at once; a device's is a
 * copy engine or a kernel on a stream, done later. So every call is a post
 * that may complete later, and `test` says when.
 *
 * The table lives at the lowest layer that moves bytes: the local transport
 * copies through it (its signal and completion follow the copy's), and
 * lib/core routes the algorithms' copies and reductions through it
 * (lib/core/exec.h) after choosing one from the context's registry by the
 * memory kinds of the buffers involved. A GPU executor is one more table
 * registered for its device ordinal; nothing above chooses by name.
 */
#ifndef OFCCL_PROVIDERS_EXEC_OPS_H
#define OFCCL_PROVIDERS_EXEC_OPS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ofccl.h"
#include "prov.h"

/* A post returned this: in flight; ask `test` with the ticket it set. */
#define OFCCL__EXEC_POSTED 1

/*
 * Every slot is filled (stubs answer OFCCL_ERR_NOT_SUPPORTED, never NULL).
 * Posting slots return 0 when the work is done already, OFCCL__EXEC_POSTED
 * when it is in flight (*ticket set), or an error. Arguments, the source
 * list of a reduction included, are consumed at post; the buffers must stay
 * until the work is done. `test` returns 1 done, 0 not yet, or an error. An
 * executor's work completes in the order it was posted (a stream's order),
 * so a ticket that tests done stands for every one before it; done means
 * the bytes are visible to a host thread that reads them after an acquire.
 */
typedef struct ofccl__exec_ops {
    size_t size; /* sizeof(ofccl__exec_ops_t) it was written for: the table can grow */
    const char *name;
    int (*copy)(void *state, void *dst, const void *src, size_t len, uint64_t *ticket);
    int (*fill)(void *state, void *dst, int byte, size_t len, uint64_t *ticket);
    /* As ofccl__reduce (lib/core/reduce.h). */
    int (*reduce)(void *state, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                  const void *const *srcs, int nsrc, size_t count, int ndiv, uint64_t *ticket);
    int (*test)(void *state, uint64_t ticket);
    /*
     * Stream-ordered requests: a request on device memory follows the
     * caller's `stream` (a device's executor; the host's answers
     * OFCCL_ERR_NOT_SUPPORTED). Work that must come after the caller's work
     * on its buffers goes on that stream itself (copy_on, reduce_on: as
     * copy and reduce, done when the next mark is), and `mark`
     * records an event there after it: *mark is its handle, `marked` says 1
     * once the stream has run everything enqueued on it before (0 not yet,
     * or an error), `unmark` releases it whatever its state. The request's
     * end is a 64-bit word of host memory the device can read: `word` lends
     * one (*handle, *word for the host, *dev for streams) with the value
     * that will mean "over" (*value: larger than any it held before, so a
     * word never goes back and a stream left waiting on it from an earlier
     * loan is let through), `word_put` takes it back once the host stored
     * that value, and `wait_word` makes `stream` wait until the word at
     * `dev` is >= value.
     */
    int (*copy_on)(void *state, ofccl_stream_t stream, void *dst, const void *src, size_t len);
    int (*reduce_on)(void *state, ofccl_stream_t stream, ofccl_dtype_t dtype, ofccl_redop_t op,
                     void *dst, const void *const *srcs, int nsrc, size_t count, int ndiv);
    int (*mark)(void *state, ofccl_stream_t stream, uint64_t *mark);
    int (*marked)(void *state, uint64_t mark);
    void (*unmark)(void *state, uint64_t mark);
    int (*word)(void *state, uint64_t *handle, _Atomic uint64_t **word, void **dev,
                uint64_t *value);
    void (*word_put)(void *state, uint64_t handle);
    int (*wait_word)(void *state, ofccl_stream_t stream, void *dev, uint64_t value);
} ofccl__exec_ops_t;

/* An executor: its table, its state (a device's stream, ...) and the memory
 * kind it serves (OFCCL__MEM_HOST, or the device ordinal). */
typedef struct ofccl__exec {
    const ofccl__exec_ops_t *ops;
    void *state;
    ofccl__mem_kind_t kind;
} ofccl__exec_t;

/* The executors a context knows, one per memory kind. Entry 0 serves host
 * memory and is always there. */
#define OFCCL__EXEC_MAX 9
typedef struct ofccl__exec_reg {
    int n;
    ofccl__exec_t ex[OFCCL__EXEC_MAX];
} ofccl__exec_reg_t;

/* A registry holding the host mover alone (copy and fill; no reduction). */
void ofccl__exec_reg_init(ofccl__exec_reg_t *reg);
/* Add or replace the executor of `kind`: 0, or OFCCL_ERR_RESOURCE when full. */
int ofccl__exec_reg_add(ofccl__exec_reg_t *reg, ofccl__mem_kind_t kind,
                        const ofccl__exec_ops_t *ops, void *state);
/* The executor that moves bytes between memory of kinds `dst` and `src`:
 * the host's when both are host memory, else the device's (the destination's
 * where both are devices); NULL where none is registered. */
const ofccl__exec_t *ofccl__exec_find(const ofccl__exec_reg_t *reg, ofccl__mem_kind_t dst,
                                      ofccl__mem_kind_t src);

/* The host's mover: memcpy and memset, done at post. */
extern const ofccl__exec_ops_t ofccl__exec_host_ops;
int ofccl__exec_host_copy(void *state, void *dst, const void *src, size_t len, uint64_t *ticket);
int ofccl__exec_host_fill(void *state, void *dst, int byte, size_t len, uint64_t *ticket);
/* Stubs for slots an executor has no use for. */
int ofccl__exec_stub_reduce(void *state, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                            const void *const *srcs, int nsrc, size_t count, int ndiv,
                            uint64_t *ticket);
/* Nothing of this executor is ever in flight: every ticket is done. */
int ofccl__exec_test_done(void *state, uint64_t ticket);
/* The stream-ordered slots of an executor that follows no stream (the
 * host's): NOT_SUPPORTED, and nothing to release. */
#define OFCCL__EXEC_NO_STREAMS                                                                     \
    .copy_on = ofccl__exec_stub_copy_on, .reduce_on = ofccl__exec_stub_reduce_on,                  \
    .mark = ofccl__exec_stub_mark, .marked = ofccl__exec_test_done,                                \
    .unmark = ofccl__exec_stub_unmark, .word = ofccl__exec_stub_word,                              \
    .word_put = ofccl__exec_stub_word_put, .wait_word = ofccl__exec_stub_wait_word
int ofccl__exec_stub_copy_on(void *state, ofccl_stream_t stream, void *dst, const void *src,
                             size_t len);
int ofccl__exec_stub_reduce_on(void *state, ofccl_stream_t stream, ofccl_dtype_t dtype,
                               ofccl_redop_t op, void *dst, const void *const *srcs, int nsrc,
                               size_t count, int ndiv);
int ofccl__exec_stub_mark(void *state, ofccl_stream_t stream, uint64_t *mark);
void ofccl__exec_stub_unmark(void *state, uint64_t mark);
int ofccl__exec_stub_word(void *state, uint64_t *handle, _Atomic uint64_t **word, void **dev,
                          uint64_t *value);
void ofccl__exec_stub_word_put(void *state, uint64_t handle);
int ofccl__exec_stub_wait_word(void *state, ofccl_stream_t stream, void *dev, uint64_t value);

#endif
