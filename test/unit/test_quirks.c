/*
 * The quirk table and ofccl__quirk_apply(): pure data and a pure function,
 * so they are checked here without opening any provider.
 */
#include <string.h>

#include "cu.h"
#include "prov.h"

static ofccl__prov_caps_t probed(void)
{
    ofccl__prov_caps_t c;

    /* What a permissive provider (tcp-like) reports before quirks. */
    memset(&c, 0, sizeof(c));
    strcpy(c.name, "tcp;ofi_rxm");
    c.virt_addr = true;
    c.key_size = 8;
    c.cq_data_size = 8;
    c.atomic_u64_sum = true;
    c.delivery_complete = true;
    return c;
}

static void test_rows_complete(void)
{
    CU_ASSERT_TRUE(ofccl__quirk_count >= 6);
    for (size_t i = 0; i < ofccl__quirk_count; i++) {
        const ofccl__quirk_t *q = &ofccl__quirks[i];
        CU_ASSERT_PTR_NOT_NULL_FATAL(q->prov_name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(q->alias);
        CU_ASSERT_PTR_NOT_NULL_FATAL(q->note);
        CU_ASSERT_TRUE(strlen(q->note) > 10);
        CU_ASSERT_EQUAL(ofccl__quirk_find(q->alias), (int)i);
        CU_ASSERT_EQUAL(ofccl__quirk_find(q->prov_name), (int)i);
    }
}

static void test_find(void)
{
    static const char *const names[] = {"shm",     "tcp;ofi_rxm", "verbs;ofi_rxm",
                                        "sockets", "efa",         "cxi"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int row = ofccl__quirk_find(names[i]);
        CU_ASSERT_TRUE_FATAL(row >= 0);
        CU_ASSERT_STRING_EQUAL(ofccl__quirks[row].prov_name, names[i]);
    }
    CU_ASSERT_STRING_EQUAL(ofccl__quirks[ofccl__quirk_find("tcp")].prov_name, "tcp;ofi_rxm");
    CU_ASSERT_STRING_EQUAL(ofccl__quirks[ofccl__quirk_find("verbs")].prov_name, "verbs;ofi_rxm");
    CU_ASSERT_EQUAL(ofccl__quirk_find("foo"), -1);
    CU_ASSERT_EQUAL(ofccl__quirk_find(""), -1);
    CU_ASSERT_EQUAL(ofccl__quirk_find(NULL), -1);
    CU_ASSERT_EQUAL(ofccl__quirk_find("TCP"), -1);
}

static void test_flags(void)
{
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("shm")].flags & OFCCL__Q_STRICT_CAPABLE);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("shm")].flags & OFCCL__Q_INTRA_NODE_ONLY);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("tcp")].flags & OFCCL__Q_STRICT_CAPABLE);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("tcp")].flags & OFCCL__Q_ATOMIC_EMULATED);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("tcp")].flags & OFCCL__Q_LOOPBACK_DOMAIN);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("sockets")].flags & OFCCL__Q_STRICT_CAPABLE);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("sockets")].flags & OFCCL__Q_DEPRECATED);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("sockets")].flags & OFCCL__Q_LOOPBACK_DOMAIN);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("verbs")].flags & OFCCL__Q_CQDATA_4);
    CU_ASSERT_TRUE(ofccl__quirks[ofccl__quirk_find("efa")].flags & OFCCL__Q_CQDATA_4);
    CU_ASSERT_FALSE(ofccl__quirks[ofccl__quirk_find("cxi")].flags & OFCCL__Q_ATOMIC_EMULATED);
}

static void test_apply_cqdata4(void)
{
    ofccl__prov_caps_t c = probed();
    int row = ofccl__quirk_find("verbs");

    ofccl__quirk_apply(&c, row, false);
    CU_ASSERT_EQUAL(c.cq_data_size, 4);
    CU_ASSERT_EQUAL(c.quirk_row, row);
    CU_ASSERT_EQUAL(c.quirks, ofccl__quirks[row].flags);
    CU_ASSERT_FALSE(c.atomic_native);
    CU_ASSERT_FALSE(c.strict);

    /* Already small: never raised. */
    c = probed();
    c.cq_data_size = 2;
    ofccl__quirk_apply(&c, row, false);
    CU_ASSERT_EQUAL(c.cq_data_size, 2);
}

static void test_apply_strict(void)
{
    ofccl__prov_caps_t c = probed();

    ofccl__quirk_apply(&c, ofccl__quirk_find("tcp"), true);
    CU_ASSERT_TRUE(c.strict);
    CU_ASSERT_TRUE(c.mr_local);
    CU_ASSERT_TRUE(c.prov_key);
    CU_ASSERT_TRUE(c.rx_cq_data);
    CU_ASSERT_EQUAL(c.cq_data_size, 4);
    /* Addressing is the provider's to decide: apply() leaves it as probed. */
    CU_ASSERT_TRUE(c.virt_addr);
    CU_ASSERT_EQUAL(c.key_size, 8);
    CU_ASSERT_TRUE(c.delivery_complete);
}

static void test_apply_normal_keeps_probed(void)
{
    ofccl__prov_caps_t c = probed(), before;

    c.order_waw = true;
    c.inject_size = 64;
    before = c;
    ofccl__quirk_apply(&c, ofccl__quirk_find("tcp"), false);
    CU_ASSERT_FALSE(c.strict);
    CU_ASSERT_EQUAL(c.mr_local, before.mr_local);
    CU_ASSERT_EQUAL(c.prov_key, before.prov_key);
    CU_ASSERT_EQUAL(c.rx_cq_data, before.rx_cq_data);
    CU_ASSERT_EQUAL(c.cq_data_size, 8);
    CU_ASSERT_EQUAL(c.virt_addr, before.virt_addr);
    CU_ASSERT_EQUAL(c.order_waw, before.order_waw);
    CU_ASSERT_EQUAL(c.inject_size, before.inject_size);
    CU_ASSERT_FALSE(c.atomic_native); /* rxm emulates atomics */

    /* A provider-demanded FI_MR_LOCAL is kept in normal mode too. */
    c = probed();
    c.mr_local = true;
    c.prov_key = true;
    ofccl__quirk_apply(&c, ofccl__quirk_find("shm"), false);
    CU_ASSERT_TRUE(c.mr_local);
    CU_ASSERT_TRUE(c.prov_key);
    CU_ASSERT_TRUE(c.atomic_native);
}

static void test_apply_verbs_needs(void)
{
    ofccl__prov_caps_t c = probed();

    ofccl__quirk_apply(&c, ofccl__quirk_find("verbs"), false);
    CU_ASSERT_TRUE(c.rx_cq_data);
    CU_ASSERT_TRUE(c.mr_local);
}

static void test_apply_no_row(void)
{
    ofccl__prov_caps_t c = probed();

    c.cq_data_size = 16; /* more than ofccl can carry */
    ofccl__quirk_apply(&c, -1, false);
    CU_ASSERT_EQUAL(c.quirk_row, -1);
    CU_ASSERT_EQUAL(c.quirks, 0);
    CU_ASSERT_EQUAL(c.cq_data_size, 8);
    CU_ASSERT_TRUE(c.atomic_native);
    c = probed();
    ofccl__quirk_apply(&c, 1000, false); /* out of range behaves as no row */
    CU_ASSERT_EQUAL(c.quirk_row, -1);
}

int main(void)
{
    static const cu_test_t tests[] = {
        {"every row complete", test_rows_complete},
        {"find by name and alias", test_find},
        {"row flags", test_flags},
        {"apply CQDATA_4", test_apply_cqdata4},
        {"apply strict", test_apply_strict},
        {"apply normal keeps probed values", test_apply_normal_keeps_probed},
        {"apply verbs needs", test_apply_verbs_needs},
        {"apply without a row", test_apply_no_row},
        {NULL, NULL},
    };

    return cu_run("quirks", tests);
}
