/*
 * The memory-kind oracle on the hot path (providers/memkind.c): every
 * collective asks it about its buffers, so in a process that has not loaded
 * the CUDA driver it must answer "host" without asking the dynamic loader to
 * search for the driver (a dlopen with RTLD_NOLOAD opens the loader's cache
 * and tries every library directory: ten system calls a question, which made
 * an 8-byte all-gather take milliseconds). dlopen is wrapped
 * (-Wl,--wrap=dlopen) and counted. A library loaded later makes the oracle
 * look again, once; a stand-in named libcuda.so.1 (built beside this test)
 * is seen as the driver being there within the oracle's millisecond, and
 * asked for it once.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu.h"
#include "prov.h"

void *__real_dlopen(const char *file, int mode);
void *__wrap_dlopen(const char *file, int mode);

static int searches; /* dlopen calls the library made */

void *__wrap_dlopen(const char *file, int mode)
{
    searches++;
    return __real_dlopen(file, mode);
}

static char host_buf[4096];

static void test_host_memory_costs_no_search(void)
{
    int host = 0;

    for (int i = 0; i < 10000; i++)
        host += ofccl__mem_kind_of(host_buf + (i & 4095)) == OFCCL__MEM_HOST;
    CU_ASSERT_EQUAL(host, 10000);
    CU_ASSERT_EQUAL(searches, 0);
}

static void test_new_library_looked_at_once(void)
{
    /* A library this test does not link: the loader's count moves, and the
     * oracle walks the list once more, finding no driver. */
    void *h = __real_dlopen("libresolv.so.2", RTLD_NOW);
    int host = 0;

    for (int i = 0; i < 1000; i++)
        host += ofccl__mem_kind_of(host_buf) == OFCCL__MEM_HOST;
    CU_ASSERT_EQUAL(host, 1000);
    CU_ASSERT_EQUAL(searches, 0);
    if (h != NULL)
        dlclose(h);
}

static void test_stand_in_driver_is_asked_once(void)
{
    const char *dir = getenv("OFCCL_TEST_FAKE_CUDA_DIR");
    char path[4096];
    void *h;
    int host = 0;

    if (dir == NULL) {
        CU_PASS("no stand-in driver built (a build without CUDA)");
        return;
    }
    snprintf(path, sizeof(path), "%s/libcuda.so.1", dir);
    h = __real_dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    /* The loader is asked at most once a millisecond: a driver is seen
     * within one (long before it could have allocated device memory). */
    nanosleep(&(struct timespec){0, 5000000}, NULL);
    /* The oracle sees a libcuda.so.1 loaded and opens it as the driver; the
     * stand-in has no entry points, so the answer stays host, and the
     * driver is not looked for again. */
    for (int i = 0; i < 1000; i++)
        host += ofccl__mem_kind_of(host_buf) == OFCCL__MEM_HOST;
    CU_ASSERT_EQUAL(host, 1000);
    CU_ASSERT(searches >= 1 && searches <= 2);
}

int main(void)
{
    cu_test_t tests[] = {{"host memory costs no search", test_host_memory_costs_no_search},
                         {"a new library is looked at once", test_new_library_looked_at_once},
                         {"a stand-in driver is asked once", test_stand_in_driver_is_asked_once},
                         {NULL, NULL}};
    return cu_run("memkind", tests);
}
