/*
 * test_trim.c: memory goes back to the kernel.  1 GiB of small objects,
 * all freed, then malloc_trim(0): the resident set must fall back to within
 * 64 MiB of where it started.  Its own binary, so nothing else in the
 * process disturbs the resident-set figures.
 */
#include <malloc.h>

#include "unit.h"

#define TOTAL ((size_t)1 << 30)
#define SLACK ((size_t)64 << 20)

static void test_trim_small_objects_return_to_kernel(void **state)
{
    (void)state;
    size_t before = unit_rss_bytes();
    size_t cap = TOTAL / 64, n = 0, bytes = 0;
    void **objs = malloc(cap * sizeof(void *));
    assert_non_null(objs);
    unsigned seed = 12345;
    while (bytes < TOTAL && n < cap) {
        seed = seed * 1103515245u + 12345u;
        size_t size = 64 + (seed >> 8) % 4033; /* 64..4096 bytes: small classes */
        char *p = malloc(size);
        assert_non_null(p);
        memset(p, (int)n, size);
        objs[n++] = p;
        bytes += size;
    }
    size_t peak = unit_rss_bytes();
    assert_true(peak >= before + TOTAL * 9 / 10); /* the test measured something */
    for (size_t i = 0; i < n; i++)
        free(objs[i]);
    free(objs);
    malloc_trim(0);
    size_t after = unit_rss_bytes();
    fprintf(stderr, "# rss: before %zu MiB, peak %zu MiB, after trim %zu MiB\n",
            before >> 20, peak >> 20, after >> 20);
    assert_true(after <= before + SLACK);
    pageheap_check();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trim_small_objects_return_to_kernel),
    };
    return cmocka_run_group_tests_name("trim", tests, NULL, NULL);
}
