/* A few lines shared by every CUnit test program: register one suite, run it
 * verbosely, and fail when a test failed or when no test ran at all. */
#ifndef OFCCL_TEST_CU_H
#define OFCCL_TEST_CU_H

#include <CUnit/Basic.h>
#include <stdio.h>

typedef struct cu_test {
    const char *name;
    CU_TestFunc fn;
} cu_test_t;

static inline int cu_run(const char *suite, const cu_test_t *tests)
{
    unsigned failed, ran;
    CU_pSuite s;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite(suite, NULL, NULL);
    for (const cu_test_t *t = tests; t->name != NULL; t++)
        CU_add_test(s, t->name, t->fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_tests_failed();
    ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    printf("\n%s: %u passed, %u failed\n", suite, ran - failed, failed);
    if (ran == 0) {
        fprintf(stderr, "%s: no test ran\n", suite);
        return 1;
    }
    return failed ? 1 : 0;
}

#endif
