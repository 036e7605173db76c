/*
 * Bootstrap selection: which backend discovers the ranks, and what to tell
 * the user when the launch looks broken. The expensive mistake is a rank that
 * silently runs as a one-rank job because its launcher gave it no PMIx
 * server, so "no server" becomes a singleton only when nothing in the
 * environment says a launcher started this process.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "util.h"

#define DEFAULT_TIMEOUT_MS 60000

static const char tcp_hint[] =
    "or use the TCP bootstrap: OFCCL_BOOT_ROOT=host:port OFCCL_BOOT_RANK=r OFCCL_BOOT_SIZE=n";

/* Does the comma-separated list `vars` hold a name starting with `prefix`? */
static int has_prefix(const char *vars, const char *prefix)
{
    size_t n = strlen(prefix);

    for (const char *s = vars; s != NULL && *s != '\0';) {
        if (strncmp(s, prefix, n) == 0)
            return 1;
        s = strchr(s, ',');
        if (s != NULL)
            s++;
    }
    return 0;
}

/* The most specific explanation of why a launcher's ranks see no PMIx server. */
static const char *launcher_diagnosis(const char *vars)
{
    /* OMPI_ and PMIX_ first: they mean a PMIx server was promised, whatever
     * else is set (srun --mpi=pmix also sets SLURM_*). */
    if (has_prefix(vars, "OMPI_") || has_prefix(vars, "PMIX_"))
        return "launched by Open MPI/PRRTE but its PMIx server is unreachable (mismatched Open "
               "MPI/PMIx versions?)";
    if (has_prefix(vars, "PMI_"))
        return "a PMI-1/PMI-2 launcher (e.g. MPICH hydra, srun --mpi=pmi2): ofccl needs a PMIx "
               "server";
    if (has_prefix(vars, "SLURM_"))
        return "started by Slurm without PMIx: use `srun --mpi=pmix` (see `srun --mpi=list`)";
    return "a launcher started this process without a PMIx server";
}

/* At most ~160 characters of the variable list, so the advice still fits. */
static void short_list(char *dst, size_t len, const char *vars)
{
    size_t n = ofccl__strlcpy(dst, vars, len);

    if (n >= len && len > 4)
        memcpy(dst + len - 4, "...", 4);
}

static int open_pmix_or_fallback(const ofccl__boot_params_t *p, ofccl__boot_t *b, int forced,
                                 ofccl__err_t *e)
{
    const char *vars = p->launcher_vars != NULL ? p->launcher_vars : "";
    char list[160];
    int unreachable = 0;
    int rc;

    rc = ofccl__boot_pmix_open(p, b, &unreachable, e);
    if (rc == 0 || !unreachable)
        return rc;
    if (forced) {
        if (vars[0] == '\0')
            return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                               "OFCCL_BOOT=pmix but no PMIx server is reachable: start the "
                               "program with a PMIx launcher (mpirun, srun --mpi=pmix, prterun), "
                               "set OFCCL_BOOT=auto to run a single rank, %s",
                               tcp_hint);
        short_list(list, sizeof(list), vars);
        return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                           "OFCCL_BOOT=pmix but no PMIx server is reachable (launcher variables "
                           "%s): %s; %s",
                           list, launcher_diagnosis(vars), tcp_hint);
    }
    if (vars[0] == '\0') {
        OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                    "no PMIx server and no launcher variables: running as a single rank");
        return ofccl__boot_singleton_open(p, b, e);
    }
    short_list(list, sizeof(list), vars);
    return ofccl__fail(b->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_BOOTSTRAP,
                       "no PMIx server is reachable, yet launcher variables are set (%s): %s; %s",
                       list, launcher_diagnosis(vars), tcp_hint);
}

int ofccl__boot_open(const ofccl__boot_params_t *p, ofccl__boot_t **out, ofccl__err_t *e)
{
    const char *method;
    ofccl__boot_t *b;
    int rc;

    if (p == NULL || out == NULL)
        return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_INVALID_ARG,
                           "ofccl__boot_open: NULL parameters");
    method = p->method != NULL && p->method[0] != '\0' ? p->method : "auto";
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return ofccl__fail(p->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_NO_MEMORY,
                           "out of memory opening the bootstrap");
    b->log = p->log;
    /* 0 means "unset" to callers that build params by hand; the config
     * registry never passes 0 (its minimum is 1). */
    b->timeout_ms = p->timeout_ms != 0 ? p->timeout_ms : DEFAULT_TIMEOUT_MS;
    b->local_size = 1;
    rc = ofccl__boot_host_id(p->host_id, p->log, b->host_id, e);
    if (rc != 0) {
        free(b);
        return rc;
    }

    if (strcmp(method, "tcp") == 0 ||
        (strcmp(method, "auto") == 0 && p->root != NULL && p->root[0] != '\0'))
        rc = ofccl__boot_tcp_open(p, b, e);
    else if (strcmp(method, "auto") == 0)
        rc = open_pmix_or_fallback(p, b, 0, e);
    else if (strcmp(method, "pmix") == 0)
        rc = open_pmix_or_fallback(p, b, 1, e);
    else if (strcmp(method, "singleton") == 0)
        rc = ofccl__boot_singleton_open(p, b, e);
    else
        rc = ofccl__fail(p->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_CONFIG,
                         "unknown bootstrap method OFCCL_BOOT=%.64s: use auto, pmix, tcp or "
                         "singleton",
                         method);
    if (rc == 0 && (b->host_of == NULL || b->nhosts < 1)) {
        rc = ofccl__fail(p->log, OFCCL__SUB_BOOT, e, OFCCL_ERR_INTERNAL,
                         "bootstrap %s filled no host table", b->ops->name);
        ofccl__boot_close(b);
        return rc;
    }
    if (rc != 0) {
        free(b->host_of);
        free(b);
        return rc;
    }
    OFCCL__INFO(b->log, OFCCL__SUB_BOOT,
                "bootstrap %s (OFCCL_BOOT=%s): rank %d of %d, local %d of %d on %s (host %d of "
                "%d, identity %s), job %s",
                b->ops->name, method, b->rank, b->size, b->local_rank, b->local_size, b->hostname,
                b->host_of[b->rank], b->nhosts, b->host_id, b->job);
    *out = b;
    return 0;
}

int ofccl__boot_watch_none(ofccl__boot_t *b, ofccl__boot_dead_fn dead, void *arg, ofccl__err_t *e)
{
    (void)dead;
    (void)arg;
    return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_NOT_SUPPORTED,
                       "the %s bootstrap raises no failure events", b->ops->name);
}

void ofccl__boot_unwatch_none(ofccl__boot_t *b)
{
    (void)b;
}

int ofccl__boot_publish_none(ofccl__boot_t *b, const void *in, size_t len, size_t slot,
                             uint64_t *tag, ofccl__err_t *e)
{
    (void)in;
    (void)len;
    (void)slot;
    (void)tag;
    return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_NOT_SUPPORTED,
                       "the %s bootstrap serves no records on demand", b->ops->name);
}

int ofccl__boot_get_none(ofccl__boot_t *b, uint64_t tag, int rank, void *out, size_t cap,
                         size_t *len, ofccl__err_t *e)
{
    (void)tag;
    (void)rank;
    (void)out;
    (void)cap;
    (void)len;
    return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_NOT_SUPPORTED,
                       "the %s bootstrap serves no records on demand", b->ops->name);
}

int ofccl__boot_allreduce_none(ofccl__boot_t *b, const uint64_t *in, uint64_t *out, int n,
                               const uint8_t *ops, ofccl__err_t *e)
{
    (void)in;
    (void)out;
    (void)n;
    (void)ops;
    return ofccl__fail(NULL, OFCCL__SUB_BOOT, e, OFCCL_ERR_NOT_SUPPORTED,
                       "the %s bootstrap reduces nowhere", b->ops->name);
}

void ofccl__boot_close(ofccl__boot_t *b)
{
    if (b == NULL)
        return;
    if (b->ops != NULL)
        ofccl__boot_unwatch(b);
    if (b->ops != NULL && b->ops->finalize != NULL)
        b->ops->finalize(b);
    free(b->host_of);
    free(b->host_names);
    free(b);
}
