/*
 * Executors of requests (exec.h): the host's table, the context's registry,
 * choosing a request's executor, and the work of an executor that completes
 * later, which a request follows by the ticket of its latest post.
 */
#include <stdlib.h>

#include "exec.h"
#include "gpu/gpu.h"
#include "util.h"

static int cpu_reduce(void *state, ofccl_dtype_t dtype, ofccl_redop_t op, void *dst,
                      const void *const *srcs, int nsrc, size_t count, int ndiv, uint64_t *ticket)
{
    (void)state;
    (void)ticket;
    return ofccl__reduce(dtype, op, dst, srcs, nsrc, count, ndiv);
}

const ofccl__exec_ops_t ofccl__exec_cpu_ops = {
    .size = sizeof(ofccl__exec_ops_t),
    .name = "cpu",
    .copy = ofccl__exec_host_copy,
    .fill = ofccl__exec_host_fill,
    .reduce = cpu_reduce,
    .test = ofccl__exec_test_done,
    OFCCL__EXEC_NO_STREAMS,
};

void ofccl__exec_init(ofccl_ctx_t *ctx)
{
    ofccl__exec_reg_init(&ctx->execs);
    ofccl__exec_reg_add(&ctx->execs, OFCCL__MEM_HOST, &ofccl__exec_cpu_ops, NULL);
}

int ofccl__exec_register(ofccl_ctx_t *ctx, ofccl__mem_kind_t kind, const ofccl__exec_ops_t *ops,
                         void *state)
{
    if (ops == NULL || ops->size < sizeof(ofccl__exec_ops_t))
        return OFCCL_ERR_INVALID_ARG;
    return ofccl__exec_reg_add(&ctx->execs, kind, ops, state);
}

/* The executor of device `kind`, registered with the context on first use
 * (the process's one for that device: providers/gpu/exec.c), or NULL. */
static const ofccl__exec_t *device_exec(ofccl_ctx_t *ctx, ofccl__mem_kind_t kind)
{
    const ofccl__exec_t *ex = ofccl__exec_find(&ctx->execs, kind, kind);
    ofccl__gpu_t *g;
    ofccl__err_t e = {0};
    void *state;

    if (ex != NULL || kind == OFCCL__MEM_HOST)
        return ex;
    if ((g = ofccl__gpu_process(&ctx->log, true)) == NULL)
        return NULL;
    state = ofccl__gpu_exec_state(g, kind, (int)ofccl__cfg_int(&ctx->cfg, OFCCL__CFG_GPU_SMS), &e);
    if (state == NULL) {
        OFCCL__WARN(&ctx->log, OFCCL__SUB_CORE, "GPU %d's executor: %s", kind, e.msg);
        return NULL;
    }
    if (ofccl__exec_register(ctx, kind, &ofccl__gpu_exec_ops, state) != 0)
        return NULL;
    return ofccl__exec_find(&ctx->execs, kind, kind);
}

int ofccl__exec_choose(ofccl__req_t *r, ofccl__mem_kind_t a, ofccl__mem_kind_t b)
{
    ofccl__mem_kind_t kind = a != OFCCL__MEM_HOST ? a : b;
    const ofccl__exec_t *ex = kind == OFCCL__MEM_HOST ? ofccl__exec_find(&r->comm->ctx->execs, a, b)
                                                      : device_exec(r->comm->ctx, kind);

    if (ex == NULL)
        return ofccl__comm_fail(r->comm, OFCCL_ERR_NOT_SUPPORTED,
                                "%s: a buffer is device memory (cuda:%d), and no executor for it "
                                "can be made (the log says why)",
                                ofccl__coll_name(r->coll), kind);
    r->exec = r->io = ex;
    r->stream_ord = r->gated = kind != OFCCL__MEM_HOST;
    r->stream = r->comm->stream;
    return 0;
}

void ofccl__exec_staged(ofccl__req_t *r)
{
    r->exec = &r->comm->ctx->execs.ex[0];
}

/* An executor's answer to a post: the ticket of work in flight. Tickets of
 * one executor complete in the order they were posted (exec_ops.h), so the
 * last one stands for all of r's work. */
static int posted(ofccl__req_t *r, int rc, uint64_t ticket, const char *what)
{
    if (rc == OFCCL__EXEC_POSTED) {
        r->exec_ticket = ticket;
        r->exec_busy = true;
        return 0;
    }
    if (rc < 0)
        return ofccl__coll_fail(r, rc, "%s on executor %s failed", what, r->exec->ops->name);
    return 0;
}

int ofccl__exec_post_copy(ofccl__req_t *r, void *dst, const void *src, size_t len)
{
    uint64_t ticket = 0;

    if (len == 0)
        return 0;
    return posted(r, r->exec->ops->copy(r->exec->state, dst, src, len, &ticket), ticket, "a copy");
}

int ofccl__exec_post_io_copy(ofccl__req_t *r, void *dst, const void *src, size_t len)
{
    uint64_t ticket = 0;
    int rc;

    if (len == 0)
        return 0;
    if (r->gated) { /* behind the caller's work, on its stream; the mark covers it */
        rc = r->io->ops->copy_on(r->io->state, r->stream, dst, src, len);
        return rc < 0 ? ofccl__coll_fail(r, rc, "a copy on the caller's stream failed") : 0;
    }
    rc = r->io->ops->copy(r->io->state, dst, src, len, &ticket);
    if (rc == OFCCL__EXEC_POSTED) {
        r->io_ticket = ticket;
        r->io_busy = true;
        return 0;
    }
    return rc < 0 ? ofccl__coll_fail(r, rc, "a copy on executor %s failed", r->io->ops->name) : 0;
}

int ofccl__exec_post_fill(ofccl__req_t *r, void *dst, int byte, size_t len)
{
    uint64_t ticket = 0;

    if (len == 0)
        return 0;
    return posted(r, r->exec->ops->fill(r->exec->state, dst, byte, len, &ticket), ticket, "a fill");
}

int ofccl__exec_io_reduce(ofccl__req_t *r, ofccl_redop_t op, void *dst, const void *const *srcs,
                          int nsrc, size_t count, int ndiv)
{
    uint64_t ticket = 0;
    int rc;

    if (ofccl__exec_io_on_host(r))
        return ofccl__reduce(r->dtype, op, dst, srcs, nsrc, count, ndiv);
    if (r->gated)
        return r->io->ops->reduce_on(r->io->state, r->stream, r->dtype, op, dst, srcs, nsrc, count,
                                     ndiv);
    rc = r->io->ops->reduce(r->io->state, r->dtype, op, dst, srcs, nsrc, count, ndiv, &ticket);
    if (rc == OFCCL__EXEC_POSTED) {
        r->io_ticket = ticket;
        r->io_busy = true;
        return 0;
    }
    return rc;
}

int ofccl__exec_post_reduce(ofccl__req_t *r, ofccl_redop_t op, void *dst, const void *const *srcs,
                            int nsrc, size_t count, int ndiv)
{
    uint64_t ticket = 0;
    int rc =
        r->exec->ops->reduce(r->exec->state, r->dtype, op, dst, srcs, nsrc, count, ndiv, &ticket);

    /* A refused reduction (bad arguments) is the caller's to name, as on the host. */
    if (rc < 0)
        return rc;
    return posted(r, rc, ticket, "a reduction");
}

/* Test one executor's latest ticket of r's. */
static int pump_one(ofccl__req_t *r, const ofccl__exec_t *ex, uint64_t ticket, bool *busy)
{
    int rc;

    if (!*busy)
        return 0;
    rc = ex->ops->test(ex->state, ticket);
    if (rc == 0)
        return 0;
    /* Done, or failed: either way nothing of it is in flight any more. */
    *busy = false;
    ofccl__ctx_moved(r->comm->ctx);
    if (rc < 0)
        return ofccl__coll_fail(r, rc, "executor %s failed", ex->ops->name);
    return 0;
}

int ofccl__exec_pump(ofccl__req_t *r)
{
    int rc = pump_one(r, r->exec, r->exec_ticket, &r->exec_busy);

    return rc ? rc : pump_one(r, r->io, r->io_ticket, &r->io_busy);
}

/* ---- stream-ordered requests ---- */

/* Release the input's marks not yet passed. */
static void in_release(ofccl__req_t *r)
{
    while (r->in_passed < r->in_pieces)
        r->io->ops->unmark(r->io->state, r->in_mark[r->in_passed++]);
}

/* Entering failed: every mark made on the caller's stream released. */
static void marks_release(ofccl__req_t *r)
{
    in_release(r);
    if (r->mark != 0)
        r->io->ops->unmark(r->io->state, r->mark);
    r->mark = 0;
}

int ofccl__exec_enter(ofccl__req_t *r)
{
    const ofccl__exec_t *io = r->io;
    int rc = io->ops->word(io->state, &r->word_handle, &r->word, &r->word_dev, &r->word_v);

    if (rc != 0) {
        r->word = NULL;
        rc = ofccl__comm_fail(r->comm, rc,
                              "%s: no word for the caller's stream to wait on (GPU %d): %s",
                              ofccl__coll_name(r->coll), io->kind, ofccl_strerror(rc));
    } else {
        /* The gate: a mark after the copies in, unless the first piece's is it. */
        if (r->mark == 0)
            rc = io->ops->mark(io->state, r->stream, &r->mark);
        if (rc == 0)
            rc = io->ops->wait_word(io->state, r->stream, r->word_dev, r->word_v);
        if (rc != 0) {
            io->ops->word_put(io->state, r->word_handle);
            r->word = NULL;
            rc = ofccl__comm_fail(r->comm, rc, "%s: the caller's stream cannot be ordered with it",
                                  ofccl__coll_name(r->coll));
        }
    }
    if (rc != 0)
        marks_release(r);
    return rc;
}

#define IN_PIECE_MIN ((size_t)1 << 20)

int ofccl__exec_io_copy_in(ofccl__req_t *r, void *dst, const void *src, size_t len)
{
    const ofccl__exec_t *io = r->io;
    size_t piece = OFCCL__MAX(len / OFCCL__IN_PIECES + 1, IN_PIECE_MIN);
    int rc = 0;

    if (!r->gated || len < 2 * IN_PIECE_MIN)
        return ofccl__exec_io_copy(r, dst, src, len);
    if (r->mark != 0) /* the gate is set: a copy after it would not hold it */
        return ofccl__coll_fail(r, OFCCL_ERR_INTERNAL, "the input copied in by pieces twice");
    piece = (piece + 4095) & ~(size_t)4095;
    for (size_t at = 0; at < len && rc == 0; at += piece) {
        uint64_t *m = at == 0 ? &r->mark : &r->in_mark[r->in_pieces];

        rc = io->ops->copy_on(io->state, r->stream, (char *)dst + at, (const char *)src + at,
                              OFCCL__MIN(piece, len - at));
        if (rc == 0 && (rc = io->ops->mark(io->state, r->stream, m)) == 0 && at > 0)
            r->in_pieces++;
    }
    if (rc != 0) {
        marks_release(r);
        return ofccl__coll_fail(r, rc, "a copy on the caller's stream failed");
    }
    r->in_piece = piece;
    r->in_ready = r->in_pieces ? piece : SIZE_MAX;
    return 0;
}

size_t ofccl__exec_in_ready(ofccl__req_t *r)
{
    while (r->in_passed < r->in_pieces) {
        int rc = r->io->ops->marked(r->io->state, r->in_mark[r->in_passed]);

        if (rc == 0)
            return r->in_ready;
        if (rc < 0) {
            ofccl__coll_fail(r, rc, "waiting for the caller's stream failed");
            return r->in_ready;
        }
        r->io->ops->unmark(r->io->state, r->in_mark[r->in_passed++]);
        r->in_ready += r->in_piece;
    }
    return r->in_ready = SIZE_MAX;
}

int ofccl__exec_in_done(ofccl__req_t *r)
{
    int rc;

    if (r->in_passed == r->in_pieces)
        return 1;
    /* Marks of one stream pass in order: the last one stands for all. */
    if ((rc = r->io->ops->marked(r->io->state, r->in_mark[r->in_pieces - 1])) == 0)
        return 0;
    in_release(r);
    r->in_ready = SIZE_MAX;
    return 1;
}

int ofccl__exec_gate(ofccl__req_t *r)
{
    int rc;

    if (!r->gated || r->mark == 0) {
        r->gated = false;
        return 1;
    }
    rc = r->io->ops->marked(r->io->state, r->mark);
    if (rc == 1) {
        r->io->ops->unmark(r->io->state, r->mark);
        r->mark = 0;
        r->gated = false;
        ofccl__ctx_moved(r->comm->ctx);
    }
    return rc < 0 ? ofccl__coll_fail(r, rc, "waiting for the caller's stream failed") : rc;
}

void ofccl__exec_release(ofccl__req_t *r)
{
    const ofccl__exec_t *io = r->io;

    if (r->mark != 0) {
        io->ops->unmark(io->state, r->mark);
        r->mark = 0;
    }
    if (r->word != NULL) {
        atomic_store_explicit(r->word, r->word_v, memory_order_release);
        io->ops->word_put(io->state, r->word_handle);
        r->word = NULL;
    }
    r->gated = false;
}

int ofccl__exec_stream_wait(ofccl__req_t *r, ofccl_stream_t stream)
{
    const ofccl__exec_t *io = r->io;
    int rc = r->word != NULL ? io->ops->wait_word(io->state, stream, r->word_dev, r->word_v) : 0;

    return rc ? ofccl__comm_fail(r->comm, rc, "ofccl_req_stream_wait: a wait on the stream failed")
              : 0;
}
