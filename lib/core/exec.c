/*
 * Executors of requests (exec.h): the host's table, the context's registry,
 * choosing a request's executor, and the work of an executor that completes
 * later, which a request follows by the ticket of its latest post.
 */
#include "exec.h"

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

int ofccl__exec_choose(ofccl__req_t *r, ofccl__mem_kind_t a, ofccl__mem_kind_t b)
{
    const ofccl__exec_t *ex;

    /* Device memory on either side: that device's executor. */
    ex = ofccl__exec_find(&r->comm->ctx->execs, a, b);
    if (ex == NULL)
        return ofccl__comm_fail(r->comm, OFCCL_ERR_NOT_SUPPORTED,
                                "%s: a buffer is device memory (cuda:%d), and no executor for it "
                                "is registered with the context",
                                ofccl__coll_name(r->coll), a != OFCCL__MEM_HOST ? a : b);
    r->exec = ex;
    return 0;
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

int ofccl__exec_post_fill(ofccl__req_t *r, void *dst, int byte, size_t len)
{
    uint64_t ticket = 0;

    if (len == 0)
        return 0;
    return posted(r, r->exec->ops->fill(r->exec->state, dst, byte, len, &ticket), ticket, "a fill");
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

int ofccl__exec_pump(ofccl__req_t *r)
{
    int rc;

    if (!r->exec_busy)
        return 0;
    rc = r->exec->ops->test(r->exec->state, r->exec_ticket);
    if (rc == 0)
        return 0;
    /* Done, or failed: either way nothing of it is in flight any more. */
    r->exec_busy = false;
    ofccl__ctx_moved(r->comm->ctx);
    if (rc < 0)
        return ofccl__coll_fail(r, rc, "executor %s failed", r->exec->ops->name);
    return 0;
}
