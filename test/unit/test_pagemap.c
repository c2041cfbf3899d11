/*
 * test_pagemap.c: address -> span/class lookups, for addresses salloc owns
 * and for every kind it does not.
 */
#include "unit.h"

static int static_object;

static void test_pagemap_foreign_addresses_have_no_class(void **state)
{
    (void)state;
    int on_stack;
    assert_int_equal(pagemap_class(NULL), 0);
    assert_int_equal(pagemap_class(&on_stack), 0);
    assert_int_equal(pagemap_class(&static_object), 0);
    assert_int_equal(pagemap_class((void *)0xdead000000001000ull), 0); /* non-canonical */
    assert_int_equal(pagemap_class((void *)~(uintptr_t)0), 0);
    assert_null(pagemap_span((void *)0xdead000000001000ull));
    assert_null(pagemap_span(&on_stack));
}

static void test_pagemap_small_span_pages_carry_class(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(3000);
    struct span *s = pageheap_alloc(sizeclass_pages(cls), 1, cls, NULL);
    assert_non_null(s);
    for (size_t p = 0; p < s->npages; p++) {
        char *page = (char *)s->start + p * SA_PAGE_SIZE;
        assert_int_equal(pagemap_class(page), cls);
        assert_int_equal(pagemap_class(page + SA_PAGE_SIZE - 1), cls);
        assert_ptr_equal(pagemap_span(page + 17), s);
    }
    pageheap_free(s);
    assert_int_equal(pagemap_class((void *)s->start), 0);
    pageheap_check();
}

static void test_pagemap_large_span_is_class_zero(void **state)
{
    (void)state;
    struct span *s = pageheap_alloc(40, 1, 0, NULL);
    assert_non_null(s);
    assert_int_equal(pagemap_class((void *)s->start), 0);
    assert_ptr_equal(pagemap_span((void *)s->start), s);
    assert_ptr_equal(pagemap_span((void *)(span_end(s) - 1)), s);
    assert_ptr_equal(pageheap_large_span((void *)s->start), s);
    assert_null(pageheap_large_span((void *)(s->start + SA_PAGE_SIZE)));
    pageheap_free(s);
    assert_null(pageheap_large_span((void *)s->start));
}

/* The writers on an address range nobody uses: leaves appear on demand and
 * a range that crosses a leaf boundary works. */
static void test_pagemap_writers_cross_leaves(void **state)
{
    (void)state;
    uintptr_t page = ((uintptr_t)0x7e00 << 28 >> SA_PAGE_SHIFT) + PM_LEAF_LEN - 2;
    struct span fake = {.start = page << SA_PAGE_SHIFT, .npages = 4};
    assert_true(pagemap_ensure(page, 4));
    pagemap_set_span_range(page, 4, &fake);
    pagemap_set_class_range(page, 4, 7);
    for (uintptr_t p = page; p < page + 4; p++) {
        assert_ptr_equal(pagemap_span((void *)(p << SA_PAGE_SHIFT)), &fake);
        assert_int_equal(pagemap_class((void *)(p << SA_PAGE_SHIFT)), 7);
    }
    pagemap_set_class_range(page, 4, 0);
    pagemap_set_span_range(page, 4, NULL);
    assert_int_equal(pagemap_class((void *)(page << SA_PAGE_SHIFT)), 0);
    assert_false(pagemap_ensure((uintptr_t)1 << (SA_ADDRESS_BITS - SA_PAGE_SHIFT), 1));
}

/* stats.metadata's share of the pagemap: a fresh leaf costs nothing until
 * a writer touches its pages, then each page touched counts (a whole huge
 * page where the kernel backs it with one). */
static void test_pagemap_resident_bytes_counts_touched_leaf_pages(void **state)
{
    (void)state;
    uintptr_t page = (uintptr_t)0x7d00 << 28 >> SA_PAGE_SHIFT;
    assert_null(pagemap_leaf_of((void *)(page << SA_PAGE_SHIFT)));
    size_t before = pagemap_resident_bytes();
    assert_true(pagemap_ensure(page, 1));
    assert_int_equal(pagemap_resident_bytes(), before);
    pagemap_set_span(page, NULL); /* a write: its page of span[] faults in */
    size_t one = pagemap_resident_bytes();
    assert_true(one >= before + os_page_size());
    pagemap_set_class_range(page, 1, 0); /* cls[] and owner[], further on */
    assert_true(pagemap_resident_bytes() > one);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pagemap_foreign_addresses_have_no_class),
        cmocka_unit_test(test_pagemap_small_span_pages_carry_class),
        cmocka_unit_test(test_pagemap_large_span_is_class_zero),
        cmocka_unit_test(test_pagemap_writers_cross_leaves),
        cmocka_unit_test(test_pagemap_resident_bytes_counts_touched_leaf_pages),
    };
    return cmocka_run_group_tests_name("pagemap", tests, NULL, NULL);
}
