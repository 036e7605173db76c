/*
 * This process's own resource limits, as the provider layer meets them.
 *
 * An errno of EMFILE, ENFILE or ENOMEM from a socket, an open, an mmap or a
 * provider call means this rank ran out of something of its own: it is
 * never a peer's failure, whatever the operation was aimed at. Such errors
 * are reported as OFCCL_ERR_RESOURCE (descriptors, address space) or
 * OFCCL_ERR_NO_MEMORY, with the limit that was reached and what to raise.
 * Address space is also checked before a step that a provider would take
 * without checking (libfabric 1.17's shm maps every peer's region at AV
 * insert and uses the result of mmap unchecked), and a communicator's
 * footprint before its endpoint is created.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "prov_impl.h"
#include "util.h"

#define MIB (1024.0 * 1024.0)
/* Below this much room under RLIMIT_AS, EAGAIN means no thread stack could be mapped. */
#define AS_THREAD_ROOM (64ull << 20)

/* Bytes mapped by this process (VmSize: what RLIMIT_AS counts), 0 if unknown. */
static unsigned long long mapped_bytes(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu", &pages) != 1)
        pages = 0;
    fclose(f);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

unsigned long long ofccl__limit_mem_available(void)
{
    char line[128];
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

unsigned long long ofccl__limit_as_room(void)
{
    struct rlimit rl;
    unsigned long long used;

    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return ULLONG_MAX;
    used = mapped_bytes();
    return used >= rl.rlim_cur ? 0 : (unsigned long long)rl.rlim_cur - used;
}

static unsigned long long file_max(void)
{
    unsigned long long n = 0;
    FILE *f = fopen("/proc/sys/fs/file-max", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu", &n) != 1)
        n = 0;
    fclose(f);
    return n;
}

/* Explain an ENOMEM: the address-space limit when one is set, else memory. */
static int explain_nomem(size_t want, char *buf, size_t len)
{
    struct rlimit rl;

    char more[48] = "";

    if (want > 0)
        snprintf(more, sizeof(more), ", %.1f MiB more needed", (double)want / MIB);
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        snprintf(buf, len,
                 "address space: RLIMIT_AS is %.0f MiB and this process maps %.0f MiB%s; "
                 "this rank's own limit: raise it (ulimit -v) or use fewer communicators",
                 (double)rl.rlim_cur / MIB, (double)mapped_bytes() / MIB, more);
        return OFCCL_ERR_RESOURCE;
    }
    snprintf(buf, len,
             "memory: %.0f MiB available (MemAvailable in /proc/meminfo)%s; this rank ran out, "
             "not a peer: free memory or use fewer communicators",
             (double)ofccl__limit_mem_available() / MIB, more);
    return OFCCL_ERR_NO_MEMORY;
}

int ofccl__limit_explain(int err, size_t want, char *buf, size_t len)
{
    struct rlimit rl;

    switch (err) {
    case EMFILE:
        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(buf, len,
                 "open files: limit %llu (RLIMIT_NOFILE) reached; this rank's own limit, not "
                 "a peer's failure: raise it (ulimit -n) or use fewer communicators",
                 (unsigned long long)rl.rlim_cur);
        return OFCCL_ERR_RESOURCE;
    case ENFILE:
        snprintf(buf, len,
                 "open files: the system-wide limit of %llu (fs.file-max) reached on this "
                 "host: raise it (sysctl fs.file-max) or close files",
                 file_max());
        return OFCCL_ERR_RESOURCE;
    case ENOMEM:
        return explain_nomem(want, buf, len);
    case EAGAIN:
        /* What pthread_create (a provider's progress thread) says when no
         * stack can be mapped: the address-space limit, if it is that tight. */
        if (ofccl__limit_as_room() < AS_THREAD_ROOM)
            return explain_nomem(want, buf, len);
        buf[0] = '\0';
        return 0;
    default:
        buf[0] = '\0';
        return 0;
    }
}

int ofccl__limit_fail(const ofccl__log_t *log, ofccl__err_t *e, int err, const char *errtext,
                      size_t want, int fallback, const char *fmt, ...)
{
    char what[256], why[256];
    va_list ap;
    int code;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (errtext == NULL)
        errtext = err > 0 ? strerror(err) : "failed";
    code = ofccl__limit_explain(err, want, why, sizeof(why));
    if (code == 0)
        return ofccl__fail(log, OFCCL__SUB_PROV, e, fallback, "%s: %s", what,
                           err > 0 ? errtext : "failed");
    return ofccl__fail(log, OFCCL__SUB_PROV, e, code, "%s: %s; %s", what, errtext, why);
}

int ofccl__limit_reserve(const ofccl__log_t *log, ofccl__err_t *e, size_t bytes, const char *what,
                         int rank)
{
    void *p;

    if (bytes == 0 || ofccl__limit_as_room() == ULLONG_MAX)
        return 0;
    /* A PROT_NONE, unreserved mapping costs no memory but counts against
     * RLIMIT_AS exactly as the real mappings will. */
    p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, bytes);
        return 0;
    }
    return ofccl__limit_fail(log, e, errno, NULL, bytes, OFCCL_ERR_NO_MEMORY, "rank %d: %s", rank,
                             what);
}

/* Used for providers perf/footprint has not measured. */
#define DEFAULT_RSS_MIB 32u
#define DEFAULT_VM_MIB 64u
#define DEFAULT_VM_PER_PEER_MIB 4u

int ofccl__limit_footprint(const ofccl__prov_t *prov, int rank, int size, ofccl__err_t *e)
{
    const ofccl__prov_caps_t *c = &prov->caps;
    const ofccl__quirk_t *q = c->quirk_row >= 0 && (size_t)c->quirk_row < ofccl__quirk_count
                                  ? &ofccl__quirks[c->quirk_row]
                                  : NULL;
    unsigned rss = q && q->rss_mib ? q->rss_mib : DEFAULT_RSS_MIB;
    unsigned vm = q && q->vm_mib ? q->vm_mib : DEFAULT_VM_MIB;
    unsigned per_peer = q && q->vm_mib ? q->vm_per_peer_mib : DEFAULT_VM_PER_PEER_MIB;
    double need_rss = (double)rss * MIB,
           need_vm = ((double)vm + (double)per_peer * (size - 1)) * MIB;
    unsigned long long avail = ofccl__limit_mem_available(), room = ofccl__limit_as_room();
    struct rlimit rl;
    char as[96] = "RLIMIT_AS unlimited";

    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(as, sizeof(as), "RLIMIT_AS %.0f MiB with %.0f MiB of it free",
                 (double)rl.rlim_cur / MIB, (double)room / MIB);
    /* Checked before anything is allocated: running out half-way through
     * creation, the kernel may kill the process before any error is seen. */
    if (room != ULLONG_MAX && (double)room < need_vm)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_RESOURCE,
                           "rank %d: a %s communicator of %d ranks maps about %.0f MiB of "
                           "address space and %.0f MiB of memory; %s (MemAvailable %.0f MiB): "
                           "this rank's own limit: raise it (ulimit -v) or destroy communicators",
                           rank, c->name, size, need_vm / MIB, need_rss / MIB, as,
                           (double)avail / MIB);
    if (avail != 0 && (double)avail < need_rss)
        return ofccl__fail(prov->log, OFCCL__SUB_PROV, e, OFCCL_ERR_NO_MEMORY,
                           "rank %d: a %s communicator of %d ranks needs about %.0f MiB of "
                           "memory beyond its pool; MemAvailable (/proc/meminfo) is %.0f MiB, %s: "
                           "free memory or destroy communicators",
                           rank, c->name, size, need_rss / MIB, (double)avail / MIB, as);
    return 0;
}
