/*
 * Topology unit tests: the NIC choice over XML topologies in test/data, so a
 * 2-package machine with one NIC per package is tested on any laptop.
 *
 * Every pick passes an explicit CPU set: the XML files do not describe this
 * machine, so nothing here depends on how the test process is bound.
 */
#include <stdio.h>
#include <string.h>

#include "cu.h"
#include "topo.h"

static const char *data_dir = "test/data";

/* A logger that stays quiet: the error paths are exercised on purpose. */
static ofccl__log_t quiet;

static ofccl__topo_t *load(const char *file)
{
    char path[1024];
    ofccl__topo_t *t = NULL;
    ofccl__err_t e;
    int rc;

    ofccl__err_clear(&e);
    snprintf(path, sizeof(path), "%s/%s", data_dir, file);
    rc = ofccl__topo_load(path, &quiet, &t, &e);
    if (rc != 0)
        fprintf(stderr, "loading %s: %s\n", path, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

/* Pick among `nics` for `cpuset`; returns the chosen index (or the error code)
 * and leaves the explanation in `why`. */
static int pick(ofccl__topo_t *t, const char *cpuset, const ofccl__topo_nic_t *nics, int n,
                char *why, size_t whylen)
{
    ofccl__err_t e;
    int chosen = -1;
    int rc;

    ofccl__err_clear(&e);
    rc = ofccl__topo_pick_nic(t, cpuset, nics, n, &chosen, why, whylen, &e);
    if (rc != 0)
        return rc;
    CU_ASSERT(chosen >= 0 && chosen < n);
    return chosen;
}

static void test_two_packages_one_nic_each(void)
{
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    const ofccl__topo_nic_t fwd[] = {{"mlx5_0", NULL}, {"mlx5_1", NULL}};
    const ofccl__topo_nic_t rev[] = {{"mlx5_1", NULL}, {"mlx5_0", NULL}};
    char why[512];

    /* Package 0 holds PUs 0-3 and mlx5_0, package 1 PUs 4-7 and mlx5_1. */
    CU_ASSERT_EQUAL(pick(t, "0-3", fwd, 2, why, sizeof(why)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "mlx5_0: local to PUs 0-3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "Package P#0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "mlx5_1 is on Package P#1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "remote"));
    CU_ASSERT_EQUAL(pick(t, "0-3", rev, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_0:", 7), 0);

    CU_ASSERT_EQUAL(pick(t, "4-7", fwd, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_1: local to PUs 4-7", 24), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "NUMANode P#1"));
    CU_ASSERT_EQUAL(pick(t, "4-7", rev, 2, why, sizeof(why)), 0);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_1:", 7), 0);

    /* One PU is enough to be local; a subset of a package likewise. */
    CU_ASSERT_EQUAL(pick(t, "6", fwd, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(pick(t, "1,3", rev, 2, why, sizeof(why)), 1);

    /* Spanning both packages, both NICs are equally close: libfabric's order wins. */
    CU_ASSERT_EQUAL(pick(t, "0-7", fwd, 2, why, sizeof(why)), 0);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_0:", 7), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "mlx5_1"));
    CU_ASSERT_EQUAL(pick(t, "0-7", rev, 2, why, sizeof(why)), 0);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_1:", 7), 0);
    CU_ASSERT_EQUAL(pick(t, "3-4", rev, 2, why, sizeof(why)), 0);

    /* Network interfaces ("tcp" domains) are found just like OpenFabrics devices. */
    {
        const ofccl__topo_nic_t eth[] = {{"eth0", NULL}, {"eth1", NULL}};

        CU_ASSERT_EQUAL(pick(t, "5", eth, 2, why, sizeof(why)), 1);
        CU_ASSERT_EQUAL(pick(t, "2", eth, 2, why, sizeof(why)), 0);
    }
    ofccl__topo_free(t);
}

static void test_nics_on_one_package(void)
{
    ofccl__topo_t *t = load("topo-2pkg-1side.xml");
    const ofccl__topo_nic_t nics[] = {{"lo", NULL}, {"mlx5_0", NULL}, {"mlx5_1", NULL}};
    char why[512];

    /* Package 1 has no NIC: it still gets one (the first known one, since both
     * are equally remote), the virtual "lo" is not preferred, and the reason
     * says it is remote. */
    CU_ASSERT_EQUAL(pick(t, "4-7", nics, 3, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_0: remote", 14), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "Package P#0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "lo has unknown locality"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "mlx5_1 (Package P#0"));

    /* Package 0 picks its local NIC over the virtual one. */
    CU_ASSERT_EQUAL(pick(t, "0-1", nics, 3, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_0: local", 13), 0);

    /* Half on each package: partly local beats unknown. */
    CU_ASSERT_EQUAL(pick(t, "3-4", nics, 3, why, sizeof(why)), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "part of the process's PUs 3-4"));
    ofccl__topo_free(t);
}

static void test_deeper_common_ancestor_wins(void)
{
    /* hsn0 hangs off the package (PUs 0-3), hsn1 off the group of PUs 2-3. */
    ofccl__topo_t *t = load("topo-1pkg-2group.xml");
    const ofccl__topo_nic_t fwd[] = {{"hsn0", NULL}, {"hsn1", NULL}};
    const ofccl__topo_nic_t rev[] = {{"hsn1", NULL}, {"hsn0", NULL}};
    char why[512];

    /* Both are local to PU 3; the group is the closer of the two. */
    CU_ASSERT_EQUAL(pick(t, "3", fwd, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "hsn1: local to PUs 2-3 (Group0 L#1)", 35), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "hsn0 is local too but farther"));
    CU_ASSERT_EQUAL(pick(t, "2-3", rev, 2, why, sizeof(why)), 0);
    /* PUs 0-1 are outside hsn1's group: the package NIC is local, hsn1 remote. */
    CU_ASSERT_EQUAL(pick(t, "0-1", rev, 2, why, sizeof(why)), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "hsn1 is on Group0 L#1, remote"));
    /* PUs 1-2 straddle the groups: only hsn0 holds them all. */
    CU_ASSERT_EQUAL(pick(t, "1-2", rev, 2, why, sizeof(why)), 1);
    /* All four PUs: hsn0 is local, hsn1 only partly. */
    CU_ASSERT_EQUAL(pick(t, "0-3", rev, 2, why, sizeof(why)), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "hsn1 is on Group0 L#1, partly local"));
    ofccl__topo_free(t);
}

static void test_lookup_by_pci_busid(void)
{
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    /* Names that match no OS device: only the bus id can place them. */
    const ofccl__topo_nic_t nics[] = {{"nic-a", "0000:01:00.0"}, {"nic-b", "0000:81:00.0"}};
    /* The bus id wins over a misleading name; without a domain it means domain 0. */
    const ofccl__topo_nic_t crossed[] = {{"mlx5_1", "0000:01:00.0"}, {"mlx5_0", "81:00.0"}};
    /* A bus id not in the topology falls back to the name. */
    const ofccl__topo_nic_t stale[] = {{"mlx5_0", "0000:42:00.0"}, {"mlx5_1", "0000:43:00.0"}};
    /* libfabric appends the endpoint flavour to verbs domain names. */
    const ofccl__topo_nic_t suffixed[] = {{"mlx5_0-xrc", ""}, {"mlx5_1-dgram", ""}};
    char why[512];

    CU_ASSERT_EQUAL(pick(t, "0-3", nics, 2, why, sizeof(why)), 0);
    CU_ASSERT_EQUAL(pick(t, "4-7", nics, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "nic-b: local to PUs 4-7", 23), 0);
    CU_ASSERT_EQUAL(pick(t, "0-3", crossed, 2, why, sizeof(why)), 0);
    CU_ASSERT_EQUAL(pick(t, "4-7", crossed, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(pick(t, "4-7", stale, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(pick(t, "0-3", stale, 2, why, sizeof(why)), 0);
    CU_ASSERT_EQUAL(pick(t, "4-7", suffixed, 2, why, sizeof(why)), 1);
    CU_ASSERT_EQUAL(strncmp(why, "mlx5_1-dgram: local", 19), 0);
    ofccl__topo_free(t);
}

static void test_virtual_candidates(void)
{
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    const ofccl__topo_nic_t mixed[] = {{"lo", NULL}, {"shm", NULL}, {"eth1", NULL}};
    const ofccl__topo_nic_t virt[] = {{"shm", NULL}, {"lo", NULL}, {"ib9", "0000:99:00.0"}};
    char why[512];

    CU_ASSERT_EQUAL(pick(t, "4-7", mixed, 3, why, sizeof(why)), 2);
    CU_ASSERT_EQUAL(strncmp(why, "eth1: local", 11), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "lo has unknown locality"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "shm has unknown locality"));
    /* eth1 is remote to package 0, yet a NIC with a known place still beats lo. */
    CU_ASSERT_EQUAL(pick(t, "0", mixed, 3, why, sizeof(why)), 2);
    CU_ASSERT_EQUAL(strncmp(why, "eth1: remote", 12), 0);

    /* Nothing has locality (an unknown bus id and name included): keep the first. */
    CU_ASSERT_EQUAL(pick(t, "0-3", virt, 3, why, sizeof(why)), 0);
    CU_ASSERT_STRING_EQUAL(why, "no candidate has known locality; kept the provider's first (shm)");
    CU_ASSERT_EQUAL(pick(t, "0-3", &virt[1], 1, why, sizeof(why)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "(lo)"));
    ofccl__topo_free(t);
}

static void test_why_truncates_safely(void)
{
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    const ofccl__topo_nic_t nics[] = {{"mlx5_0", NULL}, {"mlx5_1", NULL}};
    char why[9];
    int chosen = -1;

    memset(why, 'x', sizeof(why));
    CU_ASSERT_EQUAL(pick(t, "4-7", nics, 2, why, sizeof(why)), 1);
    CU_ASSERT_STRING_EQUAL(why, "mlx5_1: ");
    /* `why` is optional. */
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, "4-7", nics, 2, &chosen, NULL, 0, NULL), 0);
    CU_ASSERT_EQUAL(chosen, 1);
    ofccl__topo_free(t);
}

static void test_describe(void)
{
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    const ofccl__topo_nic_t nics[] = {{"mlx5_0", NULL}, {"eth1", NULL}, {"lo", NULL}};
    char buf[1024];

    ofccl__topo_describe(t, nics, 3, buf, sizeof(buf));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "2 packages, 2 NUMA nodes, 8 cores, 8 PUs"));
    CU_ASSERT(strstr(buf, "bound to PU") != NULL || strstr(buf, "not bound") != NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "mlx5_0: Package P#0, NUMANode P#0 (PUs 0-3)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "eth1: Package P#1, NUMANode P#1 (PUs 4-7)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "lo: unknown locality"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "topo-2pkg-2nic.xml"));
    CU_ASSERT_PTR_NULL(strchr(buf, '\n'));

    /* No NICs, tiny buffers, no topology: still a terminated string. */
    ofccl__topo_describe(t, NULL, 0, buf, sizeof(buf));
    CU_ASSERT_PTR_NULL(strstr(buf, "mlx5_0"));
    ofccl__topo_describe(t, nics, 3, buf, 5);
    CU_ASSERT_EQUAL(strlen(buf), 4);
    ofccl__topo_describe(NULL, nics, 3, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "topology not loaded");
    ofccl__topo_free(t);
}

static void test_missing_xml(void)
{
    const char *path = "/nonexistent/ofccl-topo.xml";
    ofccl__topo_t *t = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__topo_load(path, &quiet, &t, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_EQUAL(e.code, OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_TOPO_XML"));
}

static void test_unparsable_xml(void)
{
    char path[1024];
    ofccl__topo_t *t = NULL;
    ofccl__err_t e;

    ofccl__err_clear(&e);
    snprintf(path, sizeof(path), "%s/topo-broken.xml", data_dir);
    CU_ASSERT_EQUAL(ofccl__topo_load(path, &quiet, &t, &e), OFCCL_ERR_CONFIG);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "OFCCL_TOPO_XML"));
}

static void test_invalid_args(void)
{
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    const ofccl__topo_nic_t nics[] = {{"mlx5_0", NULL}, {"mlx5_1", NULL}};
    const char *bad[] = {"x-y", "", "3-1", "0-", "-1", "0x3", "1,,2", "0-3abc", "64-127"};
    char why[64] = "untouched";
    ofccl__err_t e;
    int chosen = 42;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ofccl__err_clear(&e);
        CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, bad[i], nics, 2, &chosen, why, sizeof(why), &e),
                        OFCCL_ERR_INVALID_ARG);
        CU_ASSERT_EQUAL(e.code, OFCCL_ERR_INVALID_ARG);
    }
    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, "x-y", nics, 2, &chosen, why, sizeof(why), &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "x-y"));
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, "0-3", nics, 0, &chosen, why, sizeof(why), &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, "0-3", nics, -1, &chosen, why, sizeof(why), &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, "0-3", NULL, 2, &chosen, why, sizeof(why), &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, "0-3", nics, 2, NULL, why, sizeof(why), &e),
                    OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(NULL, "0-3", nics, 2, &chosen, why, sizeof(why), &e),
                    OFCCL_ERR_INVALID_ARG);
    /* Outputs are written only on success. */
    CU_ASSERT_EQUAL(chosen, 42);
    CU_ASSERT_STRING_EQUAL(why, "untouched");
    CU_ASSERT_EQUAL(ofccl__topo_load(NULL, &quiet, NULL, &e), OFCCL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ofccl__topo_cpuset(NULL, why, sizeof(why)), OFCCL_ERR_INVALID_ARG);
    ofccl__topo_free(NULL);
    ofccl__topo_free(t);
}

static void test_this_machine(void)
{
    const ofccl__topo_nic_t nics[] = {{"lo", NULL}, {"eth0", NULL}};
    ofccl__topo_t *t = NULL;
    char buf[1024], small[2];
    ofccl__err_t e;
    int chosen = -1;

    ofccl__err_clear(&e);
    CU_ASSERT_EQUAL_FATAL(ofccl__topo_load(NULL, &quiet, &t, &e), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(ofccl__topo_cpuset(t, buf, sizeof(buf)), 0);
    CU_ASSERT(strlen(buf) > 0);
    printf("\n  this machine: cpuset %s\n", buf);
    /* Too small a buffer for anything but the empty list is refused, not truncated. */
    memset(small, 'x', sizeof(small));
    if (strlen(buf) >= sizeof(small))
        CU_ASSERT_EQUAL(ofccl__topo_cpuset(t, small, sizeof(small)), OFCCL_ERR_INVALID_ARG);
    /* The process's own binding: whatever it is, a candidate is chosen. */
    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, NULL, nics, 2, &chosen, buf, sizeof(buf), &e), 0);
    CU_ASSERT(chosen == 0 || chosen == 1);
    printf("  this machine: %s\n", buf);
    ofccl__topo_describe(t, nics, 2, buf, sizeof(buf));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "this machine"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "lo: unknown locality"));
    printf("  this machine: %s\n", buf);
    ofccl__topo_free(t);

    /* "" means this machine too. */
    t = NULL;
    CU_ASSERT_EQUAL(ofccl__topo_load("", &quiet, &t, &e), 0);
    ofccl__topo_free(t);
}

static void test_xml_with_process_binding(void)
{
    /* The XML does not describe this machine, so only the contract is checked:
     * with no CPU set given, the binding (or the whole topology) is used. */
    ofccl__topo_t *t = load("topo-2pkg-2nic.xml");
    const ofccl__topo_nic_t nics[] = {{"mlx5_0", NULL}, {"mlx5_1", NULL}};
    char buf[256];
    int chosen = -1;

    CU_ASSERT_EQUAL(ofccl__topo_pick_nic(t, NULL, nics, 2, &chosen, buf, sizeof(buf), NULL), 0);
    CU_ASSERT(chosen == 0 || chosen == 1);
    CU_ASSERT_EQUAL(ofccl__topo_cpuset(t, buf, sizeof(buf)), 0);
    CU_ASSERT(strlen(buf) > 0);
    ofccl__topo_free(t);
}

int main(int argc, char **argv)
{
    static const cu_test_t tests[] = {
        {"two packages, one NIC each", test_two_packages_one_nic_each},
        {"NICs on one package only", test_nics_on_one_package},
        {"deeper common ancestor wins", test_deeper_common_ancestor_wins},
        {"lookup by PCI bus id", test_lookup_by_pci_busid},
        {"virtual candidates", test_virtual_candidates},
        {"why truncates safely", test_why_truncates_safely},
        {"describe", test_describe},
        {"missing XML", test_missing_xml},
        {"unparsable XML", test_unparsable_xml},
        {"invalid arguments", test_invalid_args},
        {"this machine", test_this_machine},
        {"XML with the process binding", test_xml_with_process_binding},
        {NULL, NULL},
    };

    if (argc > 1)
        data_dir = argv[1];
    ofccl__log_init(&quiet);
    quiet.level = OFCCL__LOG_ERROR;
    return cu_run("topo", tests);
}
