/*
 * The outside-in test's random sequence (outside.c runs it): all-gathers,
 * reduce-scatters and their bucket forms drawn alike on every rank from the
 * seed, posted in batches, waited in random order, and checked element by
 * element against a reference each rank computes from every rank's inputs.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outside.h"

/* ---- the sequence every rank draws alike ---- */
static uint64_t rng(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static size_t pick(size_t n) /* uniform in [0, n) */
{
    return n ? (size_t)(rng() % n) : 0;
}

static size_t next_prime(size_t n)
{
    for (;; n++) {
        int prime = n >= 2;
        for (size_t d = 2; prime && d * d <= n; d++)
            prime = n % d != 0;
        if (prime)
            return n;
    }
}

/* 0, 1, or a prime: small, medium or up to `max`. */
static size_t random_count(size_t max)
{
    size_t k = pick(20), n;

    if (k < 2 || max < 2)
        return max < 1 ? 0 : k < 2 ? k : 1;
    n = k < 10 ? 2 + pick(100) : k < 16 ? 100 + pick(20000) : 2 + pick(max);
    n = next_prime(n);
    return n > max ? max : n;
}

/* ---- elements, encoded here rather than by the library ---- */
static const char *const dt_names[] = {"f32", "f64", "bf16", "f16", "u8"};
static const char *const op_names[] = {"sum", "avg", "premul"};
static const char *const mem_names[] = {"user", "pool", "registered"};

static uint16_t f32_to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x40);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static void store(ofccl_dtype_t dt, void *buf, size_t i, double v)
{
    if (dt == OFCCL_F32) {
        ((float *)buf)[i] = (float)v;
    } else if (dt == OFCCL_F64) {
        ((double *)buf)[i] = v;
    } else if (dt == OFCCL_BF16) {
        ((uint16_t *)buf)[i] = f32_to_bf16((float)v);
    } else if (dt == OFCCL_U8) {
        ((uint8_t *)buf)[i] = (uint8_t)((int)(v * 8) & 0xff); /* raw bytes */
    } else {
        _Float16 h = (_Float16)(float)v;
        memcpy((uint16_t *)buf + i, &h, 2);
    }
}

static double load(ofccl_dtype_t dt, const void *buf, size_t i)
{
    if (dt == OFCCL_F32)
        return ((const float *)buf)[i];
    if (dt == OFCCL_F64)
        return ((const double *)buf)[i];
    if (dt == OFCCL_BF16) {
        uint32_t b = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (dt == OFCCL_U8)
        return ((const uint8_t *)buf)[i];
    _Float16 h;
    memcpy(&h, (const uint16_t *)buf + i, 2);
    return (double)h;
}

/* Element i of tensor t of collective k on rank r: a multiple of 1/8 in
 * [-32, 32), exact in every dtype. */
static double input(int r, unsigned k, unsigned t, size_t i)
{
    uint64_t h = (uint64_t)r * 0x9E3779B97F4A7C15ull ^ (uint64_t)k * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)t * 0x165667B19E3779F9ull ^ (uint64_t)i * 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (double)((int)(h % 512) - 256) / 8.0;
}

/* docs/reductions.md: |out - ref| <= rel * A + abs, A = sum |x * c| / d. */
static void tolerance(ofccl_dtype_t dt, int n, double *rel, double *abs_)
{
    switch (dt) {
    case OFCCL_F64:
        *rel = (n + 2) * 0x1p-53, *abs_ = (n + 2) * 0x1p-1074;
        break;
    case OFCCL_F32:
        *rel = (n + 2) * 0x1p-24, *abs_ = (n + 2) * 0x1p-150;
        break;
    case OFCCL_BF16:
        *rel = 0x1p-8 + (n + 3) * 0x1p-24, *abs_ = 0x1p-134 + (n + 2) * 0x1p-150;
        break;
    default:
        *rel = 0x1p-11 + (n + 3) * 0x1p-24, *abs_ = 0x1p-25 + (n + 2) * 0x1p-150;
        break;
    }
}

/* ---- buffers of three kinds ---- */
enum { MEM_USER, MEM_POOL, MEM_REG, MEM_KINDS };
typedef struct buf {
    char *p;
    int kind;
    ofccl_mem_t *mh;
} buf_t;

static int buf_get(buf_t *b, size_t bytes, int kind)
{
    int rc = 0;

    b->kind = kind;
    b->mh = NULL;
    b->p = NULL;
    bytes = bytes ? bytes : 1;
    if (kind == MEM_POOL) {
        rc = ofccl_buffer_alloc(comm, bytes, (void **)&b->p);
    } else {
        b->p = malloc(bytes);
        if (b->p == NULL)
            rc = OFCCL_ERR_NO_MEMORY;
        else if (kind == MEM_REG)
            rc = ofccl_mem_register(ctx, b->p, bytes, &b->mh);
    }
    if (rc)
        FAIL("allocating %zu bytes of %s memory: %s: %s", bytes, mem_names[kind],
             ofccl_strerror(rc), ofccl_comm_last_error(comm));
    else
        memset(b->p, 0xff, bytes); /* NaN in every dtype: a result never written shows */
    return rc;
}

static void buf_put(buf_t *b)
{
    if (b->p == NULL)
        return;
    if (b->kind == MEM_POOL) {
        EXPECT_RC(ofccl_buffer_free(comm, b->p), 0);
    } else {
        if (b->kind == MEM_REG)
            EXPECT_RC(ofccl_mem_deregister(b->mh), 0);
        free(b->p);
    }
    b->p = NULL;
}

/* ---- one collective ---- */
static const char *const kind_names[] = {"all-gather", "reduce-scatter", "bucket all-gather",
                                         "bucket reduce-scatter"};

typedef struct coll {
    unsigned k; /* number in the sequence */
    int kind, mem, inplace, ntensors;
    ofccl_dtype_t dt;
    ofccl_redop_t op;
    size_t count;             /* flat: elements per rank block */
    buf_t send, recv;         /* flat */
    buf_t full[MAX_TENSORS];  /* bucket */
    buf_t shard[MAX_TENSORS]; /* bucket, out of place */
    ofccl_tensor_t t[MAX_TENSORS];
    ofccl_req_t *req;
} coll_t;

static size_t esize(ofccl_dtype_t dt)
{
    return ofccl_dtype_size(dt);
}

static void describe(const coll_t *c, char *s, size_t len)
{
    char op[48] = "copy";

    if (c->kind == RS || c->kind == BRS)
        snprintf(op, sizeof(op), c->op.kind == OFCCL_OP_PREMUL_SUM ? "%s %.17g" : "%s",
                 op_names[c->op.kind], c->op.scalar);
    snprintf(s, len, "collective #%u (%s, %s, %s, %s memory, %s)", c->k, kind_names[c->kind],
             dt_names[c->dt], op, mem_names[c->mem], c->inplace ? "in place" : "out of place");
}

void shard_of(size_t count, int r, size_t *off, size_t *len)
{
    size_t chunk = (count + (size_t)size - 1) / (size_t)size, first = (size_t)r * chunk;

    *off = first < count ? first : count;
    *len = first >= count ? 0 : (count - first < chunk ? count - first : chunk);
}

/* Draw the next collective (every rank draws alike) and fill its inputs. */
static int prepare(coll_t *c, unsigned k, size_t max_elems)
{
    size_t es, per_rank = max_elems / (size_t)size;
    int rc = 0;

    memset(c, 0, sizeof(*c));
    c->k = k;
    c->kind = (int)pick(KINDS);
    c->dt = (ofccl_dtype_t)pick(OFCCL_DTYPE_COUNT);
    if (c->dt == OFCCL_U8 && (c->kind == RS || c->kind == BRS))
        c->dt = (ofccl_dtype_t)pick(OFCCL_U8); /* bytes are never reduced */
    c->op.kind = (ofccl_op_kind_t)pick(OFCCL_OP_COUNT);
    c->op.scalar =
        c->op.kind == OFCCL_OP_PREMUL_SUM ? ((double)(rng() >> 11) * 0x1p-53 - 0.5) * 8 : 0;
    c->mem = (int)pick(MEM_KINDS);
    c->inplace = (int)pick(2);
    es = esize(c->dt);
    if (c->kind == AG || c->kind == RS) {
        size_t n = c->count = random_count(per_rank), all = n * (size_t)size;
        if (c->kind == AG) {
            rc = buf_get(&c->recv, all * es, c->mem);
            if (rc == 0 && !c->inplace)
                rc = buf_get(&c->send, n * es, c->mem);
            if (rc == 0) {
                char *s = c->inplace ? c->recv.p + (size_t)rank * n * es : c->send.p;
                for (size_t i = 0; i < n; i++)
                    store(c->dt, s, i, input(rank, k, 0, i));
            }
        } else {
            rc = buf_get(&c->send, all * es, c->mem);
            if (rc == 0 && !c->inplace)
                rc = buf_get(&c->recv, n * es, c->mem);
            for (size_t i = 0; rc == 0 && i < all; i++)
                store(c->dt, c->send.p, i, input(rank, k, 0, i));
        }
        return rc;
    }
    /* A bucket: uneven tensors, some empty (their pointers NULL). */
    c->ntensors = 1 + (int)pick(MAX_TENSORS);
    for (int t = 0; t < c->ntensors && rc == 0; t++) {
        size_t n = random_count(max_elems / (size_t)c->ntensors), off, len;
        ofccl_tensor_t *x = &c->t[t];

        shard_of(n, rank, &off, &len);
        x->count = n;
        if (n == 0)
            continue;
        rc = buf_get(&c->full[t], n * es, c->mem);
        if (rc == 0 && !c->inplace && len > 0)
            rc = buf_get(&c->shard[t], len * es, c->mem);
        if (rc)
            break;
        x->full = c->full[t].p;
        x->shard = c->inplace ? c->full[t].p + off * es : c->shard[t].p; /* NULL if empty */
        if (c->kind == BAG)
            for (size_t i = 0; i < len; i++) /* element off + i of the tensor */
                store(c->dt, x->shard, i, input(0, k, (unsigned)t, off + i));
        else
            for (size_t i = 0; i < n; i++)
                store(c->dt, x->full, i, input(rank, k, (unsigned)t, i));
    }
    return rc;
}

static int post(coll_t *c)
{
    size_t es = esize(c->dt);

    switch (c->kind) {
    case AG:
        return ofccl_allgather(comm,
                               c->inplace ? c->recv.p + (size_t)rank * c->count * es : c->send.p,
                               c->recv.p, c->count, c->dt, &c->req);
    case RS:
        return ofccl_reduce_scatter(
            comm, c->send.p, c->inplace ? c->send.p + (size_t)rank * c->count * es : c->recv.p,
            c->count, c->dt, c->op, &c->req);
    case BAG:
        return ofccl_bucket_allgather(comm, c->t, c->ntensors, c->dt, &c->req);
    default:
        return ofccl_bucket_reduce_scatter(comm, c->t, c->ntensors, c->dt, c->op, &c->req);
    }
}

/* Check `n` reduced elements at `out` (elements first.. of tensor t, block of collective k). */
static int check_reduced(const coll_t *c, const void *out, unsigned t, size_t first, size_t n,
                         const char *where)
{
    double rel, abs_;
    double d = c->op.kind == OFCCL_OP_AVG ? size : 1;

    tolerance(c->dt, size, &rel, &abs_);
    checked += n;
    for (size_t i = 0; i < n; i++) {
        double ref = 0, mag = 0, got = load(c->dt, out, i);
        for (int r = 0; r < size; r++) {
            double x = input(r, c->k, t, first + i);
            if (c->op.kind == OFCCL_OP_PREMUL_SUM)
                x *= c->op.scalar;
            ref += x;
            mag += fabs(x);
        }
        ref /= d;
        mag /= d;
        if (!(fabs(got - ref) <= rel * mag + abs_)) {
            char s[192];
            describe(c, s, sizeof(s));
            FAIL("%s: %s index %zu: got %.17g, expected %.17g (tolerance %.3g)", s, where,
                 first + i, got, ref, rel * mag + abs_);
            return 1;
        }
    }
    return 0;
}

static int check_copied(const coll_t *c, const void *out, int r, unsigned t, size_t first, size_t n,
                        const char *where)
{
    checked += n;
    for (size_t i = 0; i < n; i++) {
        double got = load(c->dt, out, i), want = input(r, c->k, t, first + i);
        if (c->dt == OFCCL_U8) /* bytes: what store() kept of the value */
            want = (double)((int)(want * 8) & 0xff);
        if (!(got == want)) {
            char s[192];
            describe(c, s, sizeof(s));
            FAIL("%s: %s index %zu (from rank %d): got %.17g, expected %.17g", s, where, first + i,
                 r, got, want);
            return 1;
        }
    }
    return 0;
}

static void verify(const coll_t *c)
{
    done_by_kind[c->kind]++;
    size_t es = esize(c->dt);
    char where[64];

    switch (c->kind) {
    case AG:
        for (int r = 0; r < size; r++) {
            snprintf(where, sizeof(where), "count %zu, block %d", c->count, r);
            if (check_copied(c, c->recv.p + (size_t)r * c->count * es, r, 0, 0, c->count, where))
                return;
        }
        return;
    case RS:
        snprintf(where, sizeof(where), "count %zu", c->count);
        check_reduced(c, c->inplace ? c->send.p + (size_t)rank * c->count * es : c->recv.p, 0,
                      (size_t)rank * c->count, c->count, where);
        return;
    default:
        for (int t = 0; t < c->ntensors; t++) {
            const ofccl_tensor_t *x = &c->t[t];
            size_t off, len;
            shard_of(x->count, rank, &off, &len);
            snprintf(where, sizeof(where), "tensor %d of %d (%zu elements)", t, c->ntensors,
                     x->count);
            if (x->count == 0)
                continue;
            if (c->kind == BAG ? check_copied(c, x->full, 0, (unsigned)t, 0, x->count, where)
                               : check_reduced(c, x->shard, (unsigned)t, off, len, where))
                return;
        }
    }
}

static void release(coll_t *c)
{
    buf_put(&c->send);
    buf_put(&c->recv);
    for (int t = 0; t < MAX_TENSORS; t++) {
        buf_put(&c->full[t]);
        buf_put(&c->shard[t]);
    }
}

/* Complete c: by ofccl_wait, or by polling ofccl_test (and ofccl_progress). */
static int complete(coll_t *c, int by_test)
{
    int rc, done = 0;
    double t0 = now_s();

    if (!by_test) {
        rc = ofccl_wait(c->req);
    } else {
        for (;;) {
            rc = ofccl_test(c->req, &done);
            if (rc || done)
                break;
            EXPECT_RC(ofccl_progress(ctx), 0);
            if (now_s() - t0 > WAIT_LIMIT_S) {
                rc = OFCCL_ERR_TIMEOUT;
                break;
            }
        }
    }
    if (rc) {
        char s[192];
        describe(c, s, sizeof(s));
        FAIL("%s: %s: %s: %s", s, by_test ? "ofccl_test" : "ofccl_wait", ofccl_strerror(rc),
             ofccl_comm_last_error(comm));
        /* A failed request is complete and can be freed; one still running cannot,
         * and its buffers stay where they are. */
        if (ofccl_req_free(c->req) == 0)
            release(c);
        return rc;
    }
    EXPECT_RC(ofccl_req_free(c->req), 0);
    EXPECT_RC(ofccl_req_free(c->req), OFCCL_ERR_INVALID_ARG);
    verify(c);
    release(c);
    return 0;
}

/* The random sequence: batches of 1..MAX_OUT outstanding collectives. */
int run_sequence(unsigned ncoll, size_t max_elems)
{
    static coll_t out[MAX_OUT];
    unsigned k = 0;
    int rc = 0;

    while (k < ncoll && rc == 0) {
        int batch = 1 + (int)pick(MAX_OUT), n = 0, order[MAX_OUT];

        for (; n < batch && k < ncoll; n++, k++) {
            coll_t *c = &out[n];
            if ((rc = prepare(c, k, max_elems)) != 0)
                break;
            /* Staging buffers are few (OFCCL_AG_BUFFERS, OFCCL_RS_BUFFERS): AGAIN
             * says complete an earlier one first. Posting order stays the same on
             * every rank; only which earlier one is waited for may differ. */
            rc = post(c);
            for (int w = 0; rc == OFCCL_ERR_AGAIN && w < n; w++) {
                if (out[w].req == NULL)
                    continue;
                if (complete(&out[w], 0) != 0)
                    break;
                out[w].req = NULL;
                rc = post(c);
            }
            if (rc) {
                char s[192];
                describe(c, s, sizeof(s));
                FAIL("%s: posting: %s: %s", s, ofccl_strerror(rc), ofccl_comm_last_error(comm));
                release(c);
                n++;
                break;
            }
        }
        /* Wait in a random order (the same on every rank, which nothing needs). */
        for (int i = 0; i < n; i++)
            order[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)pick((size_t)i + 1), tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        for (int i = 0; i < n; i++) {
            coll_t *c = &out[order[i]];
            int by_test = pick(3) == 0; /* drawn whatever happens: ranks stay in step */
            if (c->req != NULL && complete(c, by_test) != 0 && rc == 0)
                rc = OFCCL_ERR_INTERNAL;
            c->req = NULL;
        }
        if (rc == 0 && pick(4) == 0) {
            int brc = ofccl_barrier(comm);
            if (brc) {
                FAIL("barrier after collective #%u: %s: %s", k, ofccl_strerror(brc),
                     ofccl_comm_last_error(comm));
                rc = brc;
            }
        }
    }
    return rc;
}
