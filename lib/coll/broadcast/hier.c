/*
 * Broadcast, hierarchical, for H hosts of L ranks each (the communicator's
 * node table; rank (h, i) is the i-th rank of host h), root (hr, ir). The
 * buffer is cut into L slices of whole chunks; slice i travels along rail i:
 *   1. within the root's host: the root writes slice i to (hr, i);
 *   2. between hosts: (h, i) forwards slice i to (h + 1, i), host after host
 *      from hr (a chain along the rail), so every rank of a host drives its
 *      own NIC-facing stream at once and each byte crosses to each host once;
 *   3. within every host: (h, i) forwards slice i to every other rank of its
 *      host but the root (the root forwards its own slice ir itself).
 * Each chunk is forwarded as soon as it has arrived, so the phases overlap.
 * Units: a rank other than the root receives every chunk c once, as unit c
 * (from its rail predecessor when c is in its own slice, else from the rank
 * of its host whose slice it is), and, when the root writes it no data, the
 * root's go as unit nchunks; the root counts one done per rank (plan.c).
 * A writer sends each peer its chunks in a fixed order (the root: the peer's
 * slice, then its own), which the atomic signal path's unit_of follows.
 */
#include "coll.h"
#include "util.h"

/* Chunks per slice the plan aims for: enough for the phases to overlap. */
#define CHUNKS_PER_SLICE 4
#define MIN_CHUNK (32u << 10)
#define CHUNK_ALIGN 4096u /* a multiple of every element size */

typedef struct geo {
    int H, L, hr, ir, h, j; /* shape, the root's place and ours */
} geo_t;

static geo_t geo(const ofccl__req_t *r)
{
    const ofccl_comm_t *comm = r->comm;

    return (geo_t){comm->nnodes,
                   comm->node_width,
                   comm->node_of[r->root],
                   comm->node_idx[r->root],
                   comm->node_of[comm->rank],
                   comm->node_idx[comm->rank]};
}

/* The rank of host h on rail i. */
static int at(const ofccl__req_t *r, int h, int i)
{
    const ofccl_comm_t *comm = r->comm;

    return comm->node_rank[(h % comm->nnodes) * comm->node_width + i];
}

/* Host h's place on the rails' chains, counted from the root's host. */
static int hop(const geo_t *g, int h)
{
    return (h - g->hr + g->H) % g->H;
}

/* Slice i is chunks [lo(i), lo(i + 1)). */
static unsigned lo(const ofccl__req_t *r, const geo_t *g, int i)
{
    return (unsigned)((uint64_t)i * r->nchunks / (unsigned)g->L);
}

static unsigned slice_len(const ofccl__req_t *r, const geo_t *g, int i)
{
    return lo(r, g, i + 1) - lo(r, g, i);
}

/* The slice chunk c is in: the last i with lo(i) <= c. */
static int slice_of(const ofccl__req_t *r, const geo_t *g, unsigned c)
{
    return (int)((((uint64_t)c + 1) * (unsigned)g->L - 1) / r->nchunks);
}

/* Who writes chunk c to rank (h, j) (not the root). */
static int writer_here(const ofccl__req_t *r, const geo_t *g, int h, int j, unsigned c)
{
    int i = slice_of(r, g, c);

    if (i != j)
        return at(r, h, i); /* its host's rank of that rail (the root's on hr) */
    return hop(g, h) == 0 ? r->root : at(r, h + g->H - 1, j);
}

/* Data chunks the root writes to rank (h, j), and the k-th of them: slice j
 * on its own host, then the root's slice; slice ir to its rail successor. */
static unsigned root_sends(const ofccl__req_t *r, const geo_t *g, int h, int j)
{
    if (h == g->hr)
        return slice_len(r, g, j) + slice_len(r, g, g->ir);
    return hop(g, h) == 1 && j == g->ir ? slice_len(r, g, g->ir) : 0;
}

static unsigned root_chunk(const ofccl__req_t *r, const geo_t *g, int h, int j, unsigned k)
{
    if (h == g->hr && k < slice_len(r, g, j))
        return lo(r, g, j) + k;
    return lo(r, g, g->ir) + (h == g->hr ? k - slice_len(r, g, j) : k);
}

/* Our rail successor, or -1 on the last host of the chain. */
static int successor(const ofccl__req_t *r, const geo_t *g)
{
    return hop(g, g->h) + 1 < g->H ? at(r, g->h + 1, g->j) : -1;
}

/* Only where the all-gather's hierarchy fits (several hosts, as many ranks
 * on each, more than one); chunks shrunk so every slice has a few. */
static int plan(ofccl__req_t *r)
{
    ofccl_comm_t *comm = r->comm;
    geo_t g;
    size_t max_units = OFCCL__MAX_UNITS / (size_t)comm->size;

    if (!ofccl__ag_hier_fits(comm))
        return ofccl__coll_fail(r, OFCCL_ERR_INVALID_ARG,
                                "hierarchical broadcast needs several hosts with as many ranks "
                                "each, more than one: here %d host%s of %d ranks%s",
                                comm->nnodes, comm->nnodes == 1 ? "" : "s", comm->node_width,
                                comm->node_width ? "" : " (unequal)");
    g = geo(r);
    /* Every slice gets a few chunks (same on every rank: block, L, dtype). */
    size_t want = (size_t)g.L * CHUNKS_PER_SLICE;
    if (r->block > 0 && r->nchunks < want && want <= max_units && r->chunk > MIN_CHUNK) {
        size_t c = OFCCL__MAX((r->block + want - 1) / want, (size_t)MIN_CHUNK);
        c = (c + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
        c += (r->esize - c % r->esize) % r->esize;
        if (c < r->chunk) {
            r->chunk = c;
            r->nchunks = (unsigned)((r->block + c - 1) / c);
        }
    }
    if (comm->rank == r->root) {
        for (int p = 0; p < comm->size; p++)
            r->writes_to_me[p] = r->i_write_to[p] = p != r->root; /* data or go; done */
        r->units_in = (unsigned)comm->size - 1;
        return 0;
    }
    for (int i = 0; i < g.L; i++)
        if (slice_len(r, &g, i) > 0)
            r->writes_to_me[writer_here(r, &g, g.h, g.j, lo(r, &g, i))] = 1;
    r->writes_to_me[r->root] = 1;
    r->i_write_to[r->root] = 1; /* our done */
    if (slice_len(r, &g, g.j) > 0) {
        int succ = successor(r, &g);
        if (succ >= 0)
            r->i_write_to[succ] = 1;
        for (int k = 0; k < g.L; k++)
            if (k != g.j && at(r, g.h, k) != r->root)
                r->i_write_to[at(r, g.h, k)] = 1;
    }
    r->units_in = r->nchunks + (root_sends(r, &g, g.h, g.j) == 0);
    return 0;
}

static int writer_of(const ofccl__req_t *r, uint32_t unit)
{
    geo_t g = geo(r);

    if (r->comm->rank == r->root)
        return unit < (uint32_t)r->comm->size ? (int)unit : -1; /* a done */
    if (unit < r->nchunks)
        return writer_here(r, &g, g.h, g.j, unit);
    return unit == r->nchunks ? r->root : -1; /* the go */
}

static uint32_t unit_of(const ofccl__req_t *r, int p, uint32_t k)
{
    geo_t g = geo(r);

    if (r->comm->rank == r->root)
        return (uint32_t)p;
    if (p == r->root)
        return k < root_sends(r, &g, g.h, g.j) ? root_chunk(r, &g, g.h, g.j, k) : r->nchunks;
    return lo(r, &g, r->comm->node_idx[p]) + k; /* another rank sends its slice */
}

static unsigned units_from(const ofccl__req_t *r, int p)
{
    geo_t g = geo(r);
    unsigned n = 0;

    if (!r->writes_to_me[p])
        return 0;
    if (r->comm->rank == r->root)
        return 1;
    if (p == r->root)
        return OFCCL__MAX(root_sends(r, &g, g.h, g.j), 1u);
    for (int i = 0; i < g.L; i++)
        if (slice_len(r, &g, i) > 0 && writer_here(r, &g, g.h, g.j, lo(r, &g, i)) == p)
            n += slice_len(r, &g, i);
    return n;
}

/* Bytes we may write into what p announced: data (up to the block) or none. */
static uint64_t need_of(const ofccl__req_t *r, int p)
{
    const ofccl_comm_t *comm = r->comm;

    if (p == r->root)
        return 0; /* only our done */
    if (comm->rank == r->root)
        return comm->node_of[p] == comm->node_of[r->root] ||
                       (p == at(r, comm->node_of[r->root] + 1, comm->node_idx[r->root]))
                   ? r->block
                   : 0;
    return r->block;
}

/* Post to q, in order, the chunks numbered first..first+n-1 of our buffer
 * that are here, counting from `base` writes already made to q. */
static int forward(ofccl__req_t *r, int q, unsigned base, unsigned first, unsigned n, bool *all)
{
    bool root = r->comm->rank == r->root;
    const char *buf = root ? r->src.ptr : r->dst.ptr;
    const ofccl__mr_t *mr = root ? r->src.mr : r->dst.mr;

    while (r->sent[q] >= base && r->sent[q] < base + n) {
        unsigned c = first + (r->sent[q] - base);
        size_t off = (size_t)c * r->chunk;
        int rc;

        if (!root && r->unit_cnt[c] == 0)
            break; /* not here yet */
        rc = ofccl__coll_put(r, q, buf + off, mr, ofccl__chunk_len(r, c), off, c);
        if (rc == OFCCL_ERR_AGAIN)
            break;
        if (rc)
            return rc;
    }
    *all &= r->sent[q] >= base + n;
    return 0;
}

/* The root: each rank of its host gets its slice, then the root's own; the
 * rail successor the root's slice; everyone else (and anyone those leave
 * empty) a go. Done once every rank's done is in. */
static int progress_root(ofccl__req_t *r, const geo_t *g)
{
    ofccl_comm_t *comm = r->comm;
    bool all = true;
    int rc = 0;

    for (int k = 1; k < g->L && rc == 0; k++) {
        int j = (g->ir + k) % g->L, q = at(r, g->hr, j);
        unsigned own = slice_len(r, g, j);
        rc = forward(r, q, 0, lo(r, g, j), own, &all);
        if (rc == 0 && r->sent[q] >= own)
            rc = forward(r, q, own, lo(r, g, g->ir), slice_len(r, g, g->ir), &all);
    }
    if (rc == 0)
        rc = forward(r, at(r, g->hr + 1, g->ir), 0, lo(r, g, g->ir), slice_len(r, g, g->ir), &all);
    for (int p = 0; p < comm->size && rc == 0; p++) {
        if (p == r->root || r->sent[p] > 0 ||
            root_sends(r, g, comm->node_of[p], comm->node_idx[p]) > 0)
            continue;
        rc = ofccl__coll_put(r, p, NULL, NULL, 0, 0, r->nchunks);
        if (rc == OFCCL_ERR_AGAIN)
            rc = 0;
        all &= r->sent[p] > 0;
    }
    if (rc)
        return rc;
    r->finished = all && r->arrived >= r->units_in;
    return 0;
}

static int progress(ofccl__req_t *r)
{
    geo_t g = geo(r);
    unsigned mine = slice_len(r, &g, g.j), first = lo(r, &g, g.j);
    int succ = successor(r, &g), rc = 0;
    bool all = true;

    if (r->comm->rank == r->root)
        return progress_root(r, &g);
    if (mine > 0 && succ >= 0)
        rc = forward(r, succ, 0, first, mine, &all);
    for (int k = 1; k < g.L && rc == 0 && mine > 0; k++) {
        int q = at(r, g.h, (g.j + k) % g.L);
        if (q != r->root)
            rc = forward(r, q, 0, first, mine, &all);
    }
    if (rc || r->arrived < r->units_in)
        return rc;
    if ((rc = ofccl__bcast_done(r)) <= 0)
        return rc;
    r->finished = all;
    return 0;
}

const ofccl__algo_t ofccl__bc_hier = {
    .size = sizeof(ofccl__algo_t),
    .name = "hier",
    .coll = OFCCL__BC,
    .wire_id = OFCCL__WIRE_HIER,
    .flags = 0,
    .plan = plan,
    .progress = progress,
    .writer_of = writer_of,
    .unit_of = unit_of,
    .need_of = need_of,
    .units_from = units_from,
};
