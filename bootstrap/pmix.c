/*
 * PMIx bootstrap: rank discovery from the launcher's PMIx server and blob
 * exchange through PMIx_Put / PMIx_Fence(collect data) / PMIx_Get, or, for
 * records read on demand (publish/get), a fence that collects nothing and a
 * PMIx_Get per record, which the server answers by direct modex.
 *
 * PMIx_Init and PMIx_Finalize are reference counted by the PMIx client
 * library (checked with PMIx 4.2: a second PMIx_Init returns the same proc,
 * and only the last PMIx_Finalize tears the client down), so every context
 * owns one reference and contexts can be opened and closed independently.
 * PMIx_Init takes a reference even when it reports PMIX_ERR_UNREACH
 * (singleton mode), so that case releases it again before returning.
 *
 * But the last PMIx_Finalize is final for the server: Open MPI 4.1.4 (with
 * PMIx 4.2.2) then treats the process as gone, and after a new PMIx_Init its
 * fences fail with PMIX_ERR_PARTIAL_SUCCESS or PMIX_ERR_BAD_PARAM, and its
 * own proc-level data (PMIX_LOCAL_RANK, PMIX_HOSTNAME) is missing. A program
 * that closes its only context and opens a new one must keep working, so the
 * first successful PMIx_Init pins one extra reference for the life of the
 * process, released by a destructor at exit (or library unload). Should a
 * server still lack PMIX_LOCAL_RANK, the position in PMIX_LOCAL_PEERS is used.
 */
#include <errno.h>
#include <limits.h>
#include <pmix.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot.h"
#include "pmix_impl.h"
#include "util.h"

/* Exchanges done by all PMIx bootstraps of this process: the key suffix. A
 * per-context counter would reuse "ofccl.0" for every new context; keys are
 * never reused, so a Get cannot return a value an earlier context (or an
 * earlier PMIx session of this process) left behind. Every exchange is a
 * fence over the whole namespace, so every rank runs them in the same order
 * and this counter agrees across ranks exactly when the fences do. */
static uint64_t key_counter;

static int pinned; /* this process holds the extra PMIx reference */

static void pin_pmix(void)
{
    pmix_proc_t me;

    if (__atomic_exchange_n(&pinned, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    PMIX_PROC_CONSTRUCT(&me);
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS)
        __atomic_store_n(&pinned, 0, __ATOMIC_RELEASE);
}

__attribute__((destructor)) static void unpin_pmix(void)
{
    if (__atomic_exchange_n(&pinned, 0, __ATOMIC_ACQ_REL) != 0)
        PMIx_Finalize(NULL, 0);
}

/* PMIx timeouts are whole seconds; round up so a short timeout never becomes 0
 * (which PMIx reads as "wait forever"). */
static int timeout_seconds(uint64_t ms)
{
    uint64_t s = (ms + 999) / 1000;

    if (s == 0)
        s = 1;
    return s > INT_MAX ? INT_MAX : (int)s;
}

/* Integer job data may come back with any integer type depending on the
 * server (Open MPI, PRRTE, Slurm); accept them all, reject negatives. */
int ofccl__pmix_value_u64(const pmix_value_t *v, uint64_t *out)
{
    int64_t s;

    switch (v->type) {
    case PMIX_UINT8:
        *out = v->data.uint8;
        return 0;
    case PMIX_UINT16:
        *out = v->data.uint16;
        return 0;
    case PMIX_UINT32:
        *out = v->data.uint32;
        return 0;
    case PMIX_UINT64:
        *out = v->data.uint64;
        return 0;
    case PMIX_UINT:
        *out = v->data.uint;
        return 0;
    case PMIX_SIZE:
        *out = v->data.size;
        return 0;
    case PMIX_PROC_RANK:
        *out = v->data.rank;
        return 0;
    case PMIX_INT8:
        s = v->data.int8;
        break;
    case PMIX_INT16:
        s = v->data.int16;
        break;
    case PMIX_INT32:
        s = v->data.int32;
        break;
    case PMIX_INT64:
        s = v->data.int64;
        break;
    case PMIX_INT:
        s = v->data.integer;
        break;
    default:
        return -1;
    }
    if (s < 0)
        return -1;
    *out = (uint64_t)s;
    return 0;
}

/* Read an integer key. Returns 0, 1 when the key is absent, or an error. */
static int get_uint(ofccl__boot_t *b, const pmix_proc_t *proc, const char *key, uint64_t max,
                    uint64_t *out, ofccl__err_t *e)
{
    pmix_value_t *v = NULL;
    pmix_info_t info;
    int to = timeout_seconds(b->timeout_ms);
    pmix_status_t rc;
    uint64_t x;

    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &to, PMIX_INT);
    rc = PMIx_Get(proc, key, &info, 1, &v);
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_ERR_NOT_FOUND)
        return 1;
    if (rc != PMIX_SUCCESS || v == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "PMIx_Get(%s) failed: %s", key, PMIx_Error_string(rc));
    if (ofccl__pmix_value_u64(v, &x) != 0 || x > max) {
        int type = v->type;
        PMIX_VALUE_RELEASE(v);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "PMIx key %s has an unusable value (type %d, or out of range 0..%llu)",
                           key, type, (unsigned long long)max);
    }
    PMIX_VALUE_RELEASE(v);
    *out = x;
    return 0;
}

/* Position of `rank` in PMIX_LOCAL_PEERS ("0,1,5" or with ranges "0-3,8"),
 * and the number of peers. Returns 0, or -1 when absent or malformed. */
static int local_from_peers(ofccl__boot_t *b, pmix_boot_t *pb, uint64_t *lrank, uint64_t *lsize)
{
    pmix_value_t *v = NULL;
    pmix_info_t info;
    bool opt = true;
    uint64_t count = 0, pos = UINT64_MAX;
    const char *s;
    int ok = -1;

    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &opt, PMIX_BOOL);
    if (PMIx_Get(&pb->all, PMIX_LOCAL_PEERS, &info, 1, &v) != PMIX_SUCCESS || v == NULL ||
        v->type != PMIX_STRING || v->data.string == NULL)
        goto out;
    for (s = v->data.string; *s != '\0';) {
        char *end;
        unsigned long lo, hi;

        errno = 0;
        lo = strtoul(s, &end, 10);
        if (end == s || errno != 0)
            goto out;
        hi = lo;
        if (*end == '-') {
            s = end + 1;
            hi = strtoul(s, &end, 10);
            if (end == s || errno != 0 || hi < lo || hi - lo > INT_MAX)
                goto out;
        }
        if (pb->me.rank >= lo && pb->me.rank <= hi)
            pos = count + (pb->me.rank - lo);
        count += hi - lo + 1;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            goto out;
        s = end;
    }
    if (pos < count) {
        *lrank = pos;
        *lsize = count;
        ok = 0;
    }
out:
    if (v != NULL)
        PMIX_VALUE_RELEASE(v);
    PMIX_INFO_DESTRUCT(&info);
    return ok;
}

static void get_hostname(ofccl__boot_t *b, pmix_boot_t *pb)
{
    pmix_value_t *v = NULL;
    pmix_info_t info;
    bool opt = true;

    /* Optional: answered from local job data or not at all, never a wait on
     * the server for a key some launchers do not provide. */
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &opt, PMIX_BOOL);
    if (PMIx_Get(&pb->me, PMIX_HOSTNAME, &info, 1, &v) == PMIX_SUCCESS && v != NULL &&
        v->type == PMIX_STRING && v->data.string != NULL && v->data.string[0] != '\0') {
        ofccl__strlcpy(b->hostname, v->data.string, sizeof(b->hostname));
    } else if (gethostname(b->hostname, sizeof(b->hostname) - 1) != 0) {
        ofccl__strlcpy(b->hostname, "localhost", sizeof(b->hostname));
    }
    b->hostname[sizeof(b->hostname) - 1] = '\0';
    if (v != NULL)
        PMIX_VALUE_RELEASE(v);
    PMIX_INFO_DESTRUCT(&info);
}

static int pmix_fence(ofccl__boot_t *b, pmix_boot_t *pb, int collect, const char *what,
                      ofccl__err_t *e)
{
    pmix_info_t info[2];
    bool yes = true;
    int to = timeout_seconds(b->timeout_ms);
    size_t n = 0;
    pmix_status_t rc;
    uint64_t t0;

    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[n], PMIX_TIMEOUT, &to, PMIX_INT);
    n++;
    if (collect) {
        PMIX_INFO_LOAD(&info[n], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
        n++;
    }
    t0 = ofccl__now_ns();
    rc = PMIx_Fence(&pb->all, 1, info, n);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc == PMIX_SUCCESS)
        return 0;
    if (rc == PMIX_ERR_TIMEOUT)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                           "PMIx fence for %s timed out after %llu ms: a rank did not reach it "
                           "(missing, stuck or dead)",
                           what, (unsigned long long)((ofccl__now_ns() - t0) / 1000000));
    return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                       "PMIx fence for %s failed: %s", what, PMIx_Error_string(rc));
}

/* Put `len` bytes under "ofccl.<kseq>" and commit them to the local server. */
static int put_commit(ofccl__boot_t *b, const void *in, size_t len, unsigned long long kseq,
                      const char *what, ofccl__err_t *e)
{
    char key[PMIX_MAX_KEYLEN + 1];
    pmix_value_t val;
    pmix_status_t rc;

    snprintf(key, sizeof(key), "ofccl.%llu", kseq);
    /* PMIx_Put copies the bytes, so the caller's buffer is not kept. */
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)(uintptr_t)in;
    val.data.bo.size = len;
    rc = PMIx_Put(PMIX_GLOBAL, key, &val);
    val.data.bo.bytes = NULL; /* not ours: keep a destructor from freeing it */
    val.data.bo.size = 0;
    if (rc != PMIX_SUCCESS)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "PMIx_Put(%s) for %s failed: %s", key, what, PMIx_Error_string(rc));
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "PMIx_Commit for %s failed: %s", what, PMIx_Error_string(rc));
    return 0;
}

/* Rank r's bytes under "ofccl.<kseq>": from the data the fence collected, or
 * (nothing collected) fetched from r's server by direct modex. */
static int get_one(ofccl__boot_t *b, unsigned long long kseq, int r, void *out, size_t slot,
                   size_t *len, const char *what, ofccl__err_t *e)
{
    pmix_boot_t *pb = b->impl;
    char key[PMIX_MAX_KEYLEN + 1];
    int to = timeout_seconds(b->timeout_ms), ret = 0;
    pmix_value_t *v = NULL;
    pmix_status_t rc;
    pmix_info_t info;
    pmix_proc_t proc;

    snprintf(key, sizeof(key), "ofccl.%llu", kseq);
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &to, PMIX_INT);
    PMIX_PROC_CONSTRUCT(&proc);
    PMIX_LOAD_PROCID(&proc, pb->me.nspace, (pmix_rank_t)r);
    rc = PMIx_Get(&proc, key, &info, 1, &v);
    if (rc == PMIX_ERR_TIMEOUT)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_TIMEOUT,
                          "PMIx_Get of rank %d's data for %s timed out after %llu ms", r, what,
                          (unsigned long long)b->timeout_ms);
    else if (rc == PMIX_ERR_NOT_SUPPORTED)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NOT_SUPPORTED,
                          "PMIx_Get of rank %d's data for %s: this launcher's PMIx server does "
                          "not fetch data that a fence did not collect (no direct modex)",
                          r, what);
    else if (rc == PMIX_ERR_NOT_FOUND)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_MISMATCH,
                          "rank %d published nothing for %s: ranks ran different sequences "
                          "of bootstrap exchanges",
                          r, what);
    else if (rc != PMIX_SUCCESS || v == NULL)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                          "PMIx_Get of rank %d's data for %s failed: %s", r, what,
                          PMIx_Error_string(rc));
    else if (v->type != PMIX_BYTE_OBJECT)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                          "rank %d published a value of PMIx type %d for %s, not bytes", r, v->type,
                          what);
    else if (v->data.bo.size > slot)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                          "rank %d published %zu bytes for %s, more than the %zu-byte slot "
                          "(ranks disagree on the exchange size)",
                          r, v->data.bo.size, what, slot);
    else if (v->data.bo.size > 0 && v->data.bo.bytes == NULL)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CORRUPT,
                          "rank %d published an empty byte object claiming %zu bytes for %s", r,
                          v->data.bo.size, what);
    else {
        if (v->data.bo.size > 0)
            memcpy(out, v->data.bo.bytes, v->data.bo.size);
        *len = v->data.bo.size;
    }
    if (v != NULL)
        PMIX_VALUE_RELEASE(v);
    PMIX_INFO_DESTRUCT(&info);
    return ret;
}

int ofccl__pmix_allgather(ofccl__boot_t *b, const void *in, size_t len, void *out, size_t slot,
                          size_t *lens, ofccl__err_t *e)
{
    unsigned long long seq = (unsigned long long)b->seq++;
    unsigned long long kseq = __atomic_fetch_add(&key_counter, 1, __ATOMIC_RELAXED);
    char what[48];
    int ret;

    if (len > slot || (len > 0 && in == NULL) || out == NULL || lens == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap allgather: %zu bytes do not fit a %zu-byte slot", len, slot);
    snprintf(what, sizeof(what), "exchange #%llu", seq);
    ret = put_commit(b, in, len, kseq, what, e);
    if (ret == 0)
        ret = pmix_fence(b, b->impl, 1, what, e);
    for (int r = 0; r < b->size && ret == 0; r++)
        ret = get_one(b, kseq, r, (char *)out + (size_t)r * slot, slot, &lens[r], what, e);
    return ret;
}

/* Lazy exchange: the fence only synchronises (PMIX_COLLECT_DATA unset), so
 * no rank receives the others' data; get() fetches one rank's on demand. */
static int pmix_publish(ofccl__boot_t *b, const void *in, size_t len, size_t slot, uint64_t *tag,
                        ofccl__err_t *e)
{
    unsigned long long seq = (unsigned long long)b->seq++;
    unsigned long long kseq = __atomic_fetch_add(&key_counter, 1, __ATOMIC_RELAXED);
    char what[48];
    int ret;

    if ((len > 0 && in == NULL) || len > slot)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "bootstrap publish: no bytes for a %zu-byte record", len);
    snprintf(what, sizeof(what), "exchange #%llu (published)", seq);
    ret = put_commit(b, in, len, kseq, what, e);
    if (ret == 0)
        ret = pmix_fence(b, b->impl, 0, what, e);
    *tag = kseq;
    return ret;
}

static int pmix_get(ofccl__boot_t *b, uint64_t tag, int rank, void *out, size_t cap, size_t *len,
                    ofccl__err_t *e)
{
    char what[48];

    snprintf(what, sizeof(what), "published record ofccl.%llu", (unsigned long long)tag);
    return get_one(b, (unsigned long long)tag, rank, out, cap, len, what, e);
}

static int pmix_barrier(ofccl__boot_t *b, ofccl__err_t *e)
{
    char what[48];

    snprintf(what, sizeof(what), "the barrier after exchange #%llu", (unsigned long long)b->seq);
    return pmix_fence(b, b->impl, 0, what, e);
}

static void pmix_finalize(ofccl__boot_t *b)
{
    pmix_status_t rc = PMIx_Finalize(NULL, 0);

    if (rc != PMIX_SUCCESS)
        OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT, "PMIx_Finalize: %s", PMIx_Error_string(rc));
    free(b->impl);
    b->impl = NULL;
}

static const ofccl__boot_ops_t pmix_ops = {
    .size = sizeof(ofccl__boot_ops_t),
    .name = "pmix",
    .flags = OFCCL__BOOT_F_GET | OFCCL__BOOT_F_LAZY_AUTO,
    .allgather = ofccl__pmix_allgather,
    .barrier = pmix_barrier,
    .finalize = pmix_finalize,
    .watch = ofccl__pmix_watch,
    .unwatch = ofccl__pmix_unwatch,
    .publish = pmix_publish,
    .get = pmix_get,
    .allreduce = ofccl__boot_allreduce_none,
};

int ofccl__boot_pmix_open(const ofccl__boot_params_t *p, ofccl__boot_t *b, int *unreachable,
                          ofccl__err_t *e)
{
    pmix_boot_t *pb;
    pmix_status_t rc;
    uint64_t size = 0, lrank = 0, lsize = 0;
    int ret, have_lrank, have_lsize, have_local = 1;

    *unreachable = 0;
    pb = calloc(1, sizeof(*pb));
    if (pb == NULL)
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory opening the PMIx bootstrap");
    PMIX_PROC_CONSTRUCT(&pb->me);
    rc = PMIx_Init(&pb->me, NULL, 0);
    if (rc == PMIX_ERR_UNREACH) {
        /* The caller decides what "no server" means (singleton or a broken
         * launch); it writes the message, so nothing is logged here. */
        PMIx_Finalize(NULL, 0);
        free(pb);
        *unreachable = 1;
        if (e != NULL) {
            e->code = OFCCL_ERR_BOOTSTRAP;
            ofccl__strlcpy(e->msg, "no PMIx server is reachable", sizeof(e->msg));
        }
        return OFCCL_ERR_BOOTSTRAP;
    }
    if (rc != PMIX_SUCCESS) {
        free(pb);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP, "PMIx_Init failed: %s",
                           PMIx_Error_string(rc));
    }
    pin_pmix();
    b->impl = pb;
    PMIX_PROC_CONSTRUCT(&pb->all);
    PMIX_LOAD_PROCID(&pb->all, pb->me.nspace, PMIX_RANK_WILDCARD);

    ret = get_uint(b, &pb->all, PMIX_JOB_SIZE, INT_MAX, &size, e);
    if (ret == 1)
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                          "the PMIx server gives no %s for namespace %s", PMIX_JOB_SIZE,
                          pb->me.nspace);
    if (ret != 0)
        goto err_fini;
    if (size == 0 || pb->me.rank >= size) {
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                          "PMIx says rank %u in a job of %llu ranks", pb->me.rank,
                          (unsigned long long)size);
        goto err_fini;
    }
    have_lrank = get_uint(b, &pb->me, PMIX_LOCAL_RANK, INT_MAX, &lrank, e);
    if (have_lrank < 0) {
        ret = have_lrank;
        goto err_fini;
    }
    have_lsize = get_uint(b, &pb->all, PMIX_LOCAL_SIZE, INT_MAX, &lsize, e);
    if (have_lsize < 0) {
        ret = have_lsize;
        goto err_fini;
    }
    if (have_lrank != 0 || have_lsize != 0) {
        uint64_t prank, psize;

        if (local_from_peers(b, pb, &prank, &psize) == 0 && (have_lsize != 0 || psize == lsize)) {
            OFCCL__DEBUG(b->log, OFCCL__SUB_BOOT,
                         "local rank %llu of %llu taken from %s (no %s from PMIx)",
                         (unsigned long long)prank, (unsigned long long)psize, PMIX_LOCAL_PEERS,
                         have_lrank != 0 ? PMIX_LOCAL_RANK : PMIX_LOCAL_SIZE);
            lrank = prank;
            lsize = psize;
        } else {
            /* Without node-local data, the host table decides below. */
            have_local = 0;
            lrank = 0;
            lsize = 1;
        }
    }
    if (lsize == 0 || lrank >= lsize) {
        ret = ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                          "PMIx says local rank %llu of %llu on this node",
                          (unsigned long long)lrank, (unsigned long long)lsize);
        goto err_fini;
    }
    b->ops = &pmix_ops;
    b->rank = (int)pb->me.rank;
    b->size = (int)size;
    b->local_rank = (int)lrank;
    b->local_size = (int)lsize;
    get_hostname(b, pb);
    ofccl__strlcpy(b->job, pb->me.nspace, sizeof(b->job));
    ret = ofccl__pmix_hosts(b, pb, e);
    if (ret != 0)
        goto err_fini;
    if (!have_local) {
        ofccl__boot_local_from_hosts(b);
        OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                    "PMIx gives no local rank/size: local rank %d of %d from the host table",
                    b->local_rank, b->local_size);
    } else {
        int here = 0;
        for (int r = 0; r < b->size; r++)
            here += b->host_of[r] == b->host_of[b->rank];
        /* PMIx's locality stays authoritative; a disagreement is worth a line. */
        if (here != b->local_size)
            OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                        "PMIx says %d ranks share this node, the host table %d: using %d",
                        b->local_size, here, b->local_size);
    }
    return 0;

err_fini:
    PMIx_Finalize(NULL, 0);
    free(pb);
    b->impl = NULL;
    return ret;
}
