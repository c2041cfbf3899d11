/*
 * test_sizeclass.c: the size-class table's properties (size_classes/README.md)
 * and that regenerating it changes nothing.
 */
#include "unit.h"

static void test_sizeclass_maps_to_smallest_fit(void **state)
{
    (void)state;
    for (size_t size = 0; size <= SA_MAX_SMALL; size++) {
        unsigned cls = sizeclass_of(size);
        assert_true(cls >= 1 && cls < SA_NUM_CLASSES);
        assert_true(sizeclass_size(cls) >= size);
        if (cls > 1)
            assert_true(sizeclass_size(cls - 1) < size);
    }
}

static void test_sizeclass_sizes_ascend_and_align(void **state)
{
    (void)state;
    assert_int_equal(sizeclass_size(0), 0);
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        size_t size = sizeclass_size(cls);
        if (cls > 1)
            assert_true(size > sizeclass_size(cls - 1));
        if (size >= 16)
            assert_int_equal(size % 16, 0);
        else
            assert_int_equal(size % 8, 0);
    }
    assert_true(sizeclass_size(SA_NUM_CLASSES - 1) >= 256 * 1024);
    assert_int_equal(sizeclass_size(SA_NUM_CLASSES - 1), SA_MAX_SMALL);
}

/* Worst case: the smallest request that lands in a class. */
static void test_sizeclass_waste_at_most_one_eighth_above_128(void **state)
{
    (void)state;
    for (unsigned cls = 2; cls < SA_NUM_CLASSES; cls++) {
        size_t size = sizeclass_size(cls), smallest = sizeclass_size(cls - 1) + 1;
        if (size > 128)
            assert_true((size - smallest) * 8 <= size);
    }
}

static void test_sizeclass_span_tail_at_most_one_eighth(void **state)
{
    (void)state;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        size_t span = sizeclass_pages(cls) * SA_PAGE_SIZE;
        assert_true(sizeclass_objects(cls) >= 1);
        assert_true((span % sizeclass_size(cls)) * 8 <= span);
        assert_true(sizeclass_batch(cls) >= 2 && sizeclass_batch(cls) <= 64);
    }
}

/* Each span is the smallest that holds two objects (or 256 KiB, at least
 * a page) with a tail of at most 1/8: a page less would break one of the
 * two.  Spans sized for more objects let a few live objects of a big class
 * pin more free ones (size_classes/README.md). */
static void test_sizeclass_spans_are_the_smallest_for_two_objects(void **state)
{
    (void)state;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        size_t size = sizeclass_size(cls), want = 2 * size < SA_MAX_SMALL ? 2 * size : SA_MAX_SMALL;
        if (want < SA_PAGE_SIZE)
            want = SA_PAGE_SIZE;
        size_t span = sizeclass_pages(cls) * SA_PAGE_SIZE, less = span - SA_PAGE_SIZE;
        assert_true(span >= want);
        assert_true(less < want || (less % size) * 8 > less);
    }
}

/* The lookup is one load: the byte table covers 0..SA_BYTE_LOOKUP_MAX, the
 * granule table every size above it up to SA_MAX_SMALL, and both agree with
 * each other where they overlap (sizes that are multiples of a granule). */
static void test_sizeclass_lookup_is_a_table(void **state)
{
    (void)state;
    assert_int_equal(sizeof(sa_class_by_byte), SA_BYTE_LOOKUP_MAX + 1);
    assert_int_equal((SA_MAX_SMALL + (1 << SA_GRANULE_SHIFT) - 1) >> SA_GRANULE_SHIFT,
                     SA_GRANULE_LOOKUP_LEN - 1);
    for (size_t i = 0; i <= SA_BYTE_LOOKUP_MAX; i++)
        assert_true(sa_class_by_byte[i] >= 1 && sa_class_by_byte[i] < SA_NUM_CLASSES);
    for (size_t i = 0; i < SA_GRANULE_LOOKUP_LEN; i++) {
        assert_true(sa_class_by_granule[i] >= 1 && sa_class_by_granule[i] < SA_NUM_CLASSES);
        if (i << SA_GRANULE_SHIFT <= SA_BYTE_LOOKUP_MAX)
            assert_int_equal(sa_class_by_granule[i], sa_class_by_byte[i << SA_GRANULE_SHIFT]);
    }
}

static void test_sizeclass_aligned_classes(void **state)
{
    (void)state;
    for (size_t align = 16; align <= SA_PAGE_SIZE; align *= 2)
        for (size_t size = 1; size <= SA_MAX_SMALL; size = size * 3 + 1) {
            unsigned cls = sizeclass_aligned(size, align);
            assert_true(cls != 0);
            assert_true(sizeclass_size(cls) >= size);
            assert_int_equal(sizeclass_size(cls) % align, 0);
        }
    assert_int_equal(sizeclass_aligned(SA_MAX_SMALL + 1, 16), 0);
    assert_int_equal(sizeclass_aligned(64, SA_PAGE_SIZE * 2), 0);
}

/* aligned_alloc's cached case (malloc.c, alloc_aligned_cached) takes the
 * size's own class and refuses it if its objects are not aligned: for a
 * size that is a multiple of the alignment, the own class must be the
 * aligned one, or every such request would take the slow way. */
static void test_sizeclass_multiples_of_an_alignment_keep_it(void **state)
{
    (void)state;
    for (size_t align = 32; align <= SA_PAGE_SIZE; align *= 2)
        for (size_t size = align; size <= SA_MAX_SMALL; size += align)
            assert_int_equal(sizeclass_of(size), sizeclass_aligned(size, align));
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    *len = n;
    return buf;
}

/* `make size-classes` must be a no-op on the committed table. */
static void test_sizeclass_regeneration_changes_nothing(void **state)
{
    (void)state;
    const char *gen = getenv("GEN_SIZE_CLASSES"), *header = getenv("SIZE_CLASSES_H");
    if (!gen || !header) {
        fprintf(stderr, "GEN_SIZE_CLASSES / SIZE_CLASSES_H not set: run through make test\n");
        fail();
    }
    FILE *p = popen(gen, "r"), *f = fopen(header, "r");
    assert_non_null(p);
    assert_non_null(f);
    size_t n1, n2;
    char *generated = read_all(p, &n1), *committed = read_all(f, &n2);
    assert_int_equal(pclose(p), 0);
    fclose(f);
    assert_true(n1 > 1000);
    assert_int_equal(n1, n2);
    assert_memory_equal(generated, committed, n1);
    free(generated);
    free(committed);
}

/* ... and the table in size_classes/README.md is the generator's too. */
static void test_sizeclass_readme_table_is_current(void **state)
{
    (void)state;
    const char *gen = getenv("GEN_SIZE_CLASSES"), *readme = getenv("SIZE_CLASSES_README");
    if (!gen || !readme) {
        fprintf(stderr, "GEN_SIZE_CLASSES / SIZE_CLASSES_README not set: run through make test\n");
        fail();
    }
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s --markdown", gen);
    FILE *p = popen(cmd, "r"), *f = fopen(readme, "r");
    assert_non_null(p);
    assert_non_null(f);
    size_t n1, n2;
    char *table = read_all(p, &n1), *doc = read_all(f, &n2);
    assert_int_equal(pclose(p), 0);
    fclose(f);
    table = realloc(table, n1 + 1);
    table[n1] = '\0';
    doc = realloc(doc, n2 + 1);
    doc[n2] = '\0';
    const char *start = strstr(doc, "<!-- table:");
    assert_non_null(start);
    start = strchr(start, '\n') + 1;
    const char *end = strstr(start, "<!-- end of table -->");
    assert_non_null(end);
    assert_int_equal((size_t)(end - start), n1);
    assert_memory_equal(start, table, n1);
    free(table);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizeclass_maps_to_smallest_fit),
        cmocka_unit_test(test_sizeclass_sizes_ascend_and_align),
        cmocka_unit_test(test_sizeclass_waste_at_most_one_eighth_above_128),
        cmocka_unit_test(test_sizeclass_span_tail_at_most_one_eighth),
        cmocka_unit_test(test_sizeclass_spans_are_the_smallest_for_two_objects),
        cmocka_unit_test(test_sizeclass_lookup_is_a_table),
        cmocka_unit_test(test_sizeclass_aligned_classes),
        cmocka_unit_test(test_sizeclass_multiples_of_an_alignment_keep_it),
        cmocka_unit_test(test_sizeclass_regeneration_changes_nothing),
        cmocka_unit_test(test_sizeclass_readme_table_is_current),
    };
    return cmocka_run_group_tests_name("sizeclass", tests, NULL, NULL);
}
