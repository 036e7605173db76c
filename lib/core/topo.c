/*
 * Topology (hwloc): which NIC is closest to where this process runs.
 *
 * The topology is loaded once per context with I/O objects kept, because hwloc
 * drops PCI and OS devices by default and the NIC choice needs exactly those.
 * Everything after loading is a pure query over the topology and a CPU set, so
 * the choice is tested against XML topologies with any number of sockets and
 * NICs on a machine that has neither.
 */
#include "topo.h"

#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#if HWLOC_API_VERSION < 0x00020000
#error "ofccl needs hwloc 2.x (I/O type filters, I/O objects without cpusets)"
#endif

#define TOPO_LINE_LEN OFCCL__ERRMSG_LEN
#define TOPO_LABEL_LEN 96
#define TOPO_SET_LEN 128

struct ofccl__topo {
    hwloc_topology_t hw;
    const ofccl__log_t *lg; /* the context's logger; outlives the topology */
    char source[256];       /* "this machine" or the XML path, for messages */
    int from_xml;
};

/* How a NIC relates to the process's CPU set. Ordered: a larger value is a
 * better class, whatever the depth. A NIC without an hwloc object ranks below
 * every NIC whose place is known, remote ones included: a known remote NIC
 * still reaches the fabric, while "lo" or "shm" usually does not leave the host. */
enum topo_class {
    TOPO_UNKNOWN = 0,
    TOPO_REMOTE = 1,  /* the NIC's CPUs and the process's CPUs are disjoint */
    TOPO_PARTIAL = 2, /* they overlap, but the process also runs elsewhere */
    TOPO_LOCAL = 3,   /* every CPU of the process is local to the NIC */
};

typedef struct topo_place {
    hwloc_obj_t anc; /* first non-I/O ancestor of the NIC; NULL = unknown */
    int cls;         /* enum topo_class */
    int depth;       /* depth of the common ancestor with the process; -1 if unknown */
} topo_place_t;

/* A bounded line builder: appends never overflow and the text stays
 * NUL-terminated; what does not fit is dropped and marked with "...". */
typedef struct topo_line {
    char buf[TOPO_LINE_LEN];
    size_t off;
} topo_line_t;

static void line_add(topo_line_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line_add(topo_line_t *l, const char *fmt, ...)
{
    size_t room = sizeof(l->buf) - l->off;
    va_list ap;
    int n;

    if (room <= 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(l->buf + l->off, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= room) {
        l->off = sizeof(l->buf) - 1;
        memcpy(l->buf + sizeof(l->buf) - 4, "...", 4);
        return;
    }
    l->off += (size_t)n;
}

static void set_to_list(hwloc_const_bitmap_t set, char *buf, size_t len)
{
    if (hwloc_bitmap_list_snprintf(buf, len, set) < 0)
        ofccl__strlcpy(buf, "?", len);
}

static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

/*
 * Strict parser for hwloc list syntax ("0-3,8"). hwloc_bitmap_list_sscanf()
 * is lenient: it accepts "0x3" as 3, "3-1" as the empty set and "0-" as an
 * infinite set, each of which would silently pick a NIC for a CPU set nobody
 * meant, so the syntax is checked here and only well-formed ranges are set.
 */
static int parse_list(const char *s, hwloc_bitmap_t set)
{
    const char *p = s;

    hwloc_bitmap_zero(set);
    for (;;) {
        unsigned long lo, hi;
        char *end;

        while (isspace((unsigned char)*p))
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        errno = 0;
        lo = strtoul(p, &end, 10);
        if (errno != 0 || lo > INT_MAX)
            return -1;
        hi = lo;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p))
                return -1;
            hi = strtoul(p, &end, 10);
            if (errno != 0 || hi > INT_MAX || hi < lo)
                return -1;
            p = end;
        }
        if (hwloc_bitmap_set_range(set, (unsigned)lo, (int)hi) != 0)
            return -1;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

/* "Package P#1, NUMANode P#1": the OS index is what users see in lstopo and
 * numactl; objects without one (Groups, caches) fall back to the logical index.
 * The NUMA node is added when the object sits within exactly one of several,
 * because "which NUMA node" is what a user checks against the process binding. */
static void obj_label(ofccl__topo_t *t, hwloc_obj_t o, char *buf, size_t len)
{
    char type[32];
    int nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
    int n;

    hwloc_obj_type_snprintf(type, sizeof(type), o, 0);
    if (o->type == HWLOC_OBJ_MACHINE || o->parent == NULL)
        n = snprintf(buf, len, "%s", type);
    else if (o->os_index != HWLOC_UNKNOWN_INDEX)
        n = snprintf(buf, len, "%s P#%u", type, o->os_index);
    else
        n = snprintf(buf, len, "%s L#%u", type, o->logical_index);
    if (n < 0 || (size_t)n >= len)
        return;
    if (nnuma > 1 && o->type != HWLOC_OBJ_NUMANODE && o->nodeset != NULL &&
        hwloc_bitmap_weight(o->nodeset) == 1)
        snprintf(buf + n, len - (size_t)n, ", NUMANode P#%d", hwloc_bitmap_first(o->nodeset));
}

/* The PUs this process may run on, restricted to the topology. Returns 1 when
 * the process is bound to a strict subset of the allowed PUs, 0 when it is not
 * bound or the binding cannot be read: the whole topology is then its set. */
static int process_set(ofccl__topo_t *t, hwloc_bitmap_t set)
{
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(t->hw);

    if (hwloc_get_cpubind(t->hw, set, 0) != 0) {
        OFCCL__DEBUG(t->lg, OFCCL__SUB_CORE, "hwloc cannot read the CPU binding (%s)",
                     strerror(errno));
        hwloc_bitmap_copy(set, allowed);
        return 0;
    }
#ifdef _SC_NPROCESSORS_ONLN
    /* The binding comes from the real machine, the PUs from the XML: an
     * unbound process on a machine other than the one the XML describes would
     * otherwise look bound to whatever PUs the two have in common. */
    if (t->from_xml && hwloc_bitmap_weight(set) >= sysconf(_SC_NPROCESSORS_ONLN)) {
        hwloc_bitmap_copy(set, allowed);
        return 0;
    }
#endif
    hwloc_bitmap_and(set, set, allowed);
    if (hwloc_bitmap_iszero(set)) {
        hwloc_bitmap_copy(set, allowed);
        return 0;
    }
    return !hwloc_bitmap_isequal(set, allowed);
}

/* The OS device called `name`. libfabric names verbs domains after the device
 * and may append the endpoint flavour ("mlx5_0-xrc", "mlx5_0-dgram"), so the
 * part before the last '-' is tried when the whole name matches nothing. */
static hwloc_obj_t osdev_by_name(hwloc_topology_t hw, const char *name)
{
    const char *dash = strrchr(name, '-');
    hwloc_obj_t o = NULL;

    while ((o = hwloc_get_next_osdev(hw, o)) != NULL)
        if (o->name != NULL && strcmp(o->name, name) == 0)
            return o;
    if (dash == NULL || dash == name)
        return NULL;
    while ((o = hwloc_get_next_osdev(hw, o)) != NULL)
        if (o->name != NULL && strncmp(o->name, name, (size_t)(dash - name)) == 0 &&
            o->name[dash - name] == '\0')
            return o;
    return NULL;
}

/* The bus id is the more reliable key (names differ between libfabric and the
 * kernel for some providers); the name is the fallback, also when the bus id
 * is not in the topology (e.g. an XML exported without that device). */
static hwloc_obj_t nic_obj(hwloc_topology_t hw, const ofccl__topo_nic_t *nic)
{
    hwloc_obj_t o = NULL;

    if (nic->pci_busid != NULL && nic->pci_busid[0] != '\0')
        o = hwloc_get_pcidev_by_busidstring(hw, nic->pci_busid);
    if (o == NULL && nic->name != NULL && nic->name[0] != '\0')
        o = osdev_by_name(hw, nic->name);
    return o;
}

static void place_nic(ofccl__topo_t *t, hwloc_const_cpuset_t set, hwloc_obj_t cover,
                      const ofccl__topo_nic_t *nic, topo_place_t *p)
{
    hwloc_obj_t io = nic_obj(t->hw, nic);
    hwloc_obj_t common;

    p->anc = io != NULL ? hwloc_get_non_io_ancestor_obj(t->hw, io) : NULL;
    p->cls = TOPO_UNKNOWN;
    p->depth = -1;
    if (p->anc == NULL || p->anc->cpuset == NULL)
        return;
    if (hwloc_bitmap_isincluded(set, p->anc->cpuset))
        p->cls = TOPO_LOCAL;
    else if (hwloc_bitmap_intersects(set, p->anc->cpuset))
        p->cls = TOPO_PARTIAL;
    else
        p->cls = TOPO_REMOTE;
    common = hwloc_get_common_ancestor_obj(t->hw, p->anc, cover);
    p->depth = common != NULL ? common->depth : 0;
}

static int place_better(const topo_place_t *a, const topo_place_t *b)
{
    return a->cls > b->cls || (a->cls == b->cls && a->depth > b->depth);
}

static const char *nic_name(const ofccl__topo_nic_t *nic)
{
    if (nic->name != NULL && nic->name[0] != '\0')
        return nic->name;
    return nic->pci_busid != NULL && nic->pci_busid[0] != '\0' ? nic->pci_busid : "(unnamed)";
}

int ofccl__topo_load(const char *xml_path, const ofccl__log_t *lg, ofccl__topo_t **out,
                     ofccl__err_t *e)
{
    int from_xml = xml_path != NULL && xml_path[0] != '\0';
    ofccl__topo_t *t;
    FILE *f;
    int rc;

    if (out == NULL)
        return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_INVALID_ARG,
                           "topology load: output pointer is NULL");
    /* Checked here rather than left to hwloc so that the message says why:
     * hwloc reports a missing file and a malformed one the same way. */
    if (from_xml) {
        f = fopen(xml_path, "r");
        if (f == NULL)
            return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                               "cannot read the hwloc topology XML '%s' given by OFCCL_TOPO_XML: "
                               "%s; fix the path or unset OFCCL_TOPO_XML to probe this machine",
                               xml_path, strerror(errno));
        fclose(f);
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_NO_MEMORY,
                           "topology load: out of memory");
    t->lg = lg;
    t->from_xml = from_xml;
    ofccl__strlcpy(t->source, from_xml ? xml_path : "this machine", sizeof(t->source));
    if (hwloc_topology_init(&t->hw) != 0) {
        rc = ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_INTERNAL,
                         "hwloc_topology_init failed: %s", strerror(errno));
        goto err_free;
    }
    /* hwloc drops I/O objects by default. KEEP_IMPORTANT keeps network and
     * OpenFabrics devices with their PCI parents and bridges, not every PCI
     * function on the machine, which keeps the topology small on big hosts. */
    hwloc_topology_set_io_types_filter(t->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* Discovery plugins that cost time and tell the NIC choice nothing: "gl"
     * probes X displays, "opencl" starts the OpenCL runtimes, and "pci" goes
     * through libpciaccess (which leaks its pci.ids name strings) while the
     * linux backend finds the same PCI devices and their locality in sysfs.
     * Best effort: a name the installed hwloc does not know is simply unused,
     * and hwloc 2.0 (no blacklist yet) just probes everything. */
#if HWLOC_API_VERSION >= 0x00020100
    if (!from_xml) {
        static const char *const skip[] = {"gl", "opencl", "pci"};

        for (size_t i = 0; i < OFCCL__ARRAY_LEN(skip); i++)
            (void)hwloc_topology_set_components(t->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                                skip[i]);
    }
#endif
    if (from_xml) {
        /* OFCCL_TOPO_XML exists to skip probing on large nodes, so the file is
         * meant to describe this machine: let hwloc read the process binding.
         * A binding outside the XML's PUs is treated as "not bound". */
        hwloc_topology_set_flags(t->hw, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
        /* hwloc parses the file here already; a parse error may surface
         * either here or in hwloc_topology_load(). */
        if (hwloc_topology_set_xml(t->hw, xml_path) != 0)
            goto err_xml;
    }
    if (hwloc_topology_load(t->hw) != 0) {
        if (from_xml)
            goto err_xml;
        rc = ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_INTERNAL,
                         "hwloc cannot probe this machine's topology: %s", strerror(errno));
        goto err_destroy;
    }
    OFCCL__INFO(lg, OFCCL__SUB_CORE,
                "hwloc topology from %s: %d package%s, %d NUMA node%s, %d core%s, %d PU%s",
                t->source, hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE),
                plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE)),
                hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE),
                plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE)),
                hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE),
                plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE)),
                hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU),
                plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU)));
    *out = t;
    return 0;

err_xml:
    rc = ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_CONFIG,
                     "'%s' given by OFCCL_TOPO_XML is not a valid hwloc topology XML (%s); "
                     "export one with 'lstopo --of xml' or unset OFCCL_TOPO_XML",
                     xml_path, strerror(errno));
err_destroy:
    hwloc_topology_destroy(t->hw);
err_free:
    free(t);
    return rc;
}

void ofccl__topo_free(ofccl__topo_t *t)
{
    if (t == NULL)
        return;
    hwloc_topology_destroy(t->hw);
    free(t);
}

/* One clause about a candidate that was not chosen, relative to the chosen one. */
static void why_other(ofccl__topo_t *t, topo_line_t *l, const char *name, const topo_place_t *o,
                      const topo_place_t *best)
{
    char label[TOPO_LABEL_LEN];

    if (o->cls == TOPO_UNKNOWN) {
        line_add(l, "; %s has unknown locality", name);
        return;
    }
    obj_label(t, o->anc, label, sizeof(label));
    if (o->cls == best->cls && o->depth == best->depth)
        line_add(l, "; %s (%s) is as close, later in the provider's order", name, label);
    else if (o->cls == best->cls)
        line_add(l, "; %s is %s but farther, on %s", name,
                 o->cls == TOPO_LOCAL     ? "local too"
                 : o->cls == TOPO_PARTIAL ? "partly local too"
                                          : "remote too",
                 label);
    else
        line_add(l, "; %s is on %s, %s", name, label,
                 o->cls == TOPO_PARTIAL ? "partly local" : "remote");
}

static void why_chosen(ofccl__topo_t *t, topo_line_t *l, const char *name, const topo_place_t *p,
                       hwloc_const_cpuset_t set)
{
    char label[TOPO_LABEL_LEN], nicpus[TOPO_SET_LEN], procpus[TOPO_SET_LEN];

    if (p->cls == TOPO_UNKNOWN) {
        /* Unknown ranks last, so the choice is unknown only when all are, and
         * then the tie rule keeps the first candidate. */
        line_add(l, "no candidate has known locality; kept the provider's first (%s)", name);
        return;
    }
    obj_label(t, p->anc, label, sizeof(label));
    set_to_list(p->anc->cpuset, nicpus, sizeof(nicpus));
    set_to_list(set, procpus, sizeof(procpus));
    if (p->cls == TOPO_LOCAL)
        line_add(l, "%s: local to PU%s %s (%s)", name, plural(hwloc_bitmap_weight(p->anc->cpuset)),
                 nicpus, label);
    else if (p->cls == TOPO_PARTIAL)
        line_add(l, "%s: on %s (PUs %s), local to part of the process's PUs %s", name, label,
                 nicpus, procpus);
    else
        line_add(l, "%s: remote, on %s (PUs %s); no candidate is local to the process's PUs %s",
                 name, label, nicpus, procpus);
}

int ofccl__topo_pick_nic(ofccl__topo_t *t, const char *cpuset, const ofccl__topo_nic_t *nics, int n,
                         int *chosen, char *why, size_t whylen, ofccl__err_t *e)
{
    const ofccl__log_t *lg = t != NULL ? t->lg : NULL;
    topo_place_t *places = NULL;
    hwloc_bitmap_t set = NULL;
    hwloc_obj_t cover;
    topo_line_t line;
    int best = 0, rc;

    if (t == NULL || nics == NULL || n <= 0 || chosen == NULL)
        return ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_INVALID_ARG, "NIC choice: %s",
                           t == NULL      ? "no topology"
                           : nics == NULL ? "candidate array is NULL"
                           : n <= 0       ? "no candidate NIC (n <= 0)"
                                          : "output index pointer is NULL");
    set = hwloc_bitmap_alloc();
    places = calloc((size_t)n, sizeof(*places));
    if (set == NULL || places == NULL) {
        rc = ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_NO_MEMORY,
                         "NIC choice: out of memory for %d candidates", n);
        goto out;
    }
    if (cpuset == NULL) {
        process_set(t, set);
    } else {
        if (parse_list(cpuset, set) != 0) {
            rc = ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_INVALID_ARG,
                             "NIC choice: CPU set '%s' is not an hwloc list such as \"0-3,8\"",
                             cpuset);
            goto out;
        }
        hwloc_bitmap_and(set, set, hwloc_topology_get_topology_cpuset(t->hw));
        if (hwloc_bitmap_iszero(set)) {
            char all[TOPO_SET_LEN];

            set_to_list(hwloc_topology_get_topology_cpuset(t->hw), all, sizeof(all));
            rc = ofccl__fail(lg, OFCCL__SUB_CORE, e, OFCCL_ERR_INVALID_ARG,
                             "NIC choice: CPU set '%s' names no PU of the topology from %s "
                             "(PUs %s)",
                             cpuset, t->source, all);
            goto out;
        }
    }
    /* The smallest object holding every PU of the process: NICs are compared
     * by how deep their common ancestor with it lies. */
    cover = hwloc_get_obj_covering_cpuset(t->hw, set);
    if (cover == NULL)
        cover = hwloc_get_root_obj(t->hw);
    for (int i = 0; i < n; i++) {
        place_nic(t, set, cover, &nics[i], &places[i]);
        /* Strictly better only: ties keep the earliest, libfabric's order. */
        if (i > 0 && place_better(&places[i], &places[best]))
            best = i;
    }
    line.off = 0;
    line.buf[0] = '\0';
    why_chosen(t, &line, nic_name(&nics[best]), &places[best], set);
    if (places[best].cls != TOPO_UNKNOWN)
        for (int i = 0; i < n; i++)
            if (i != best)
                why_other(t, &line, nic_name(&nics[i]), &places[i], &places[best]);
    OFCCL__INFO(lg, OFCCL__SUB_CORE, "NIC choice: %s", line.buf);
    if (why != NULL && whylen > 0)
        ofccl__strlcpy(why, line.buf, whylen);
    *chosen = best;
    rc = 0;
out:
    free(places);
    hwloc_bitmap_free(set);
    return rc;
}

void ofccl__topo_describe(ofccl__topo_t *t, const ofccl__topo_nic_t *nics, int n, char *buf,
                          size_t len)
{
    static const char *const cls_word[] = {"unknown", "remote", "partly local", "local"};
    char procpus[TOPO_SET_LEN], nodes[TOPO_SET_LEN];
    hwloc_bitmap_t set, nodeset;
    topo_line_t line;
    hwloc_obj_t cover;
    int bound, nnuma;

    if (buf == NULL || len == 0)
        return;
    if (t == NULL) {
        ofccl__strlcpy(buf, "topology not loaded", len);
        return;
    }
    set = hwloc_bitmap_alloc();
    nodeset = hwloc_bitmap_alloc();
    if (set == NULL || nodeset == NULL) {
        ofccl__strlcpy(buf, "topology: out of memory", len);
        goto out;
    }
    line.off = 0;
    line.buf[0] = '\0';
    bound = process_set(t, set);
    hwloc_cpuset_to_nodeset(t->hw, set, nodeset);
    set_to_list(set, procpus, sizeof(procpus));
    set_to_list(nodeset, nodes, sizeof(nodes));
    nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
    if (bound)
        line_add(&line, "bound to PU%s %s", plural(hwloc_bitmap_weight(set)), procpus);
    else
        line_add(&line, "not bound (PUs %s)", procpus);
    line_add(&line, ", NUMA node%s %s of %d", plural(hwloc_bitmap_weight(nodeset)), nodes, nnuma);
    line_add(&line, "; %s: %d package%s, %d NUMA node%s, %d core%s, %d PU%s", t->source,
             hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE),
             plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE)), nnuma, plural(nnuma),
             hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE),
             plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE)),
             hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU),
             plural(hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU)));
    cover = hwloc_get_obj_covering_cpuset(t->hw, set);
    if (cover == NULL)
        cover = hwloc_get_root_obj(t->hw);
    for (int i = 0; nics != NULL && i < n; i++) {
        char label[TOPO_LABEL_LEN], nicpus[TOPO_SET_LEN];
        topo_place_t p;

        place_nic(t, set, cover, &nics[i], &p);
        if (p.cls == TOPO_UNKNOWN) {
            line_add(&line, "; %s: unknown locality", nic_name(&nics[i]));
            continue;
        }
        obj_label(t, p.anc, label, sizeof(label));
        set_to_list(p.anc->cpuset, nicpus, sizeof(nicpus));
        line_add(&line, "; %s: %s (PUs %s), %s", nic_name(&nics[i]), label, nicpus,
                 cls_word[p.cls]);
    }
    ofccl__strlcpy(buf, line.buf, len);
out:
    hwloc_bitmap_free(nodeset);
    hwloc_bitmap_free(set);
}

int ofccl__topo_cpuset(ofccl__topo_t *t, char *buf, size_t len)
{
    hwloc_bitmap_t set;
    int n;

    if (t == NULL || buf == NULL || len == 0)
        return OFCCL_ERR_INVALID_ARG;
    set = hwloc_bitmap_alloc();
    if (set == NULL)
        return OFCCL_ERR_NO_MEMORY;
    process_set(t, set);
    /* Written only when it fits: a truncated list would pin to the wrong PUs. */
    n = hwloc_bitmap_list_snprintf(NULL, 0, set);
    if (n < 0 || (size_t)n >= len) {
        hwloc_bitmap_free(set);
        return OFCCL_ERR_INVALID_ARG;
    }
    hwloc_bitmap_list_snprintf(buf, len, set);
    hwloc_bitmap_free(set);
    return 0;
}

/*
 * Pin the calling thread (the progress thread) away from the cores the caller
 * runs on. The caller's binding is `caller`; if it leaves some PU of the
 * machine free, take the last free one; otherwise share the caller's last PU
 * (best effort) and say so. `why` receives the decision.
 */
int ofccl__topo_pin_thread(ofccl__topo_t *t, const char *caller, char *why, size_t whylen)
{
    hwloc_bitmap_t mine = hwloc_bitmap_alloc(), target = hwloc_bitmap_alloc();
    hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(t->hw);
    char list[128];
    int pu, rc = 0;

    if (mine == NULL || target == NULL) {
        rc = OFCCL_ERR_NO_MEMORY;
        goto out;
    }
    if (caller == NULL || parse_list(caller, mine) != 0)
        hwloc_bitmap_copy(mine, all);
    hwloc_bitmap_andnot(target, all, mine);
    pu = hwloc_bitmap_last(target);
    if (pu < 0) {
        pu = hwloc_bitmap_last(mine);
        snprintf(why, whylen, "no PU outside the caller's (%s): sharing PU %d",
                 caller ? caller : "all", pu);
    } else {
        set_to_list(mine, list, sizeof(list));
        snprintf(why, whylen, "PU %d, outside the caller's PUs %s", pu, list);
    }
    hwloc_bitmap_only(target, (unsigned)pu);
    if (t->from_xml || hwloc_set_cpubind(t->hw, target, HWLOC_CPUBIND_THREAD) != 0) {
        snprintf(why + strlen(why), whylen - strlen(why), " (not bound: %s)",
                 t->from_xml ? "topology from XML" : "binding refused");
        rc = OFCCL_ERR_NOT_SUPPORTED;
    }
out:
    hwloc_bitmap_free(mine);
    hwloc_bitmap_free(target);
    return rc;
}
