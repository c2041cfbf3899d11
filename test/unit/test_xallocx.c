/*
 * test_xallocx.c: jemalloc's own allocation functions (xallocx.c): each
 * flag (alignment, zeroing, arena, thread cache), the sizes nallocx
 * promises against those mallocx and sallocx give, resizing with rallocx
 * and in place with xallocx, thread.allocated's counts, and sdallocx's
 * size check under opt.check.
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "conf.h"
#include "prof.h"
#include "unit.h"

#define KiB ((size_t)1 << 10)

static uint64_t read_u64(const char *name)
{
    uint64_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

static void check_zero(const unsigned char *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (p[i])
            fail_msg("byte %zu of %p is not zero", i, (const void *)p);
}

/* jemalloc's header gives these values; a program built with it passes
 * them. */
static void test_xallocx_flag_values_are_jemallocs(void **state)
{
    (void)state;
    assert_int_equal(MALLOCX_LG_ALIGN(6), 6);
    assert_int_equal(MALLOCX_ALIGN(4096), 12);
    assert_int_equal(MALLOCX_ZERO, 0x40);
    assert_int_equal(MALLOCX_TCACHE_NONE, 0x100);
    assert_int_equal(MALLOCX_TCACHE(3), 0x500);
    assert_int_equal(MALLOCX_ARENA(0), 1 << 20);
}

/* Every alignment from 1 to 2 MiB over sizes from 1 byte to 1 MiB, with
 * sampling every 4 KiB (samples on pages of their own among the blocks):
 * aligned, and nallocx's size is what mallocx gives and sallocx reads. */
static void test_xallocx_alignment_and_sizes_agree(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(12);
    for (unsigned lg = 0; lg <= 21; lg++) {
        size_t align = (size_t)1 << lg;
        for (size_t size = 0; size <= ((size_t)1 << 20); size = size * 3 + 1) {
            int flags = MALLOCX_LG_ALIGN(lg);
            unsigned char *p = mallocx(size, flags);
            assert_non_null(p);
            assert_int_equal((uintptr_t)p % (align > 16 ? align : size >= 16 ? 16 : 8), 0);
            size_t usable = sallocx(p, 0);
            assert_int_equal(usable, nallocx(size, flags));
            assert_int_equal(usable, malloc_usable_size(p));
            assert_true(usable >= size);
            p[0] = 1;
            if (size)
                p[size - 1] = 2;
            if (size % 2)
                dallocx(p, flags);
            else
                sdallocx(p, size, flags);
        }
    }
    prof_lg_sample_set(saved);
}

/* MALLOCX_ZERO: the whole usable size zero, for blocks cached dirty, for
 * large ones and for aligned ones. */
static void test_xallocx_zero_flag(void **state)
{
    (void)state;
    static const size_t sizes[] = {8, 100, 4000, 40000, 300000, 3000000};
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (unsigned round = 0; round < 3; round++) {
            size_t n = sizes[i];
            unsigned char *dirty = malloc(n);
            memset(dirty, 0xa5, malloc_usable_size(dirty));
            free(dirty); /* cached, or its pages kept: the next block of the size may be it */
            int flags = MALLOCX_ZERO | (round == 2 ? MALLOCX_ALIGN(256) : 0);
            unsigned char *p = mallocx(n, flags);
            assert_non_null(p);
            check_zero(p, 0, sallocx(p, 0));
            dallocx(p, 0);
        }
    }
}

/* MALLOCX_ARENA(0) is salloc's one arena; another index fails as a
 * missing arena does, and leaves the block alone.  The thread-cache field
 * is a hint. */
static void test_xallocx_arena_and_tcache_flags(void **state)
{
    (void)state;
    void *p = mallocx(100, MALLOCX_ARENA(0) | MALLOCX_TCACHE_NONE);
    assert_non_null(p);
    dallocx(p, MALLOCX_TCACHE(2));
    errno = 0;
    assert_null(mallocx(100, MALLOCX_ARENA(1)));
    assert_int_equal(errno, ENOMEM);
    unsigned char *q = mallocx(300 * KiB, 0);
    unit_fill(q, 300 * KiB, 5);
    errno = 0;
    assert_null(rallocx(q, 600 * KiB, MALLOCX_ARENA(7)));
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(xallocx(q, 100 * KiB, 0, MALLOCX_ARENA(7)), sallocx(q, 0));
    unit_check(q, 300 * KiB, 5);
    assert_int_equal(nallocx(100, MALLOCX_ARENA(3)), nallocx(100, 0));
    dallocx(q, 0);
}

/* Sizes no block can hold: NULL and ENOMEM, nallocx 0. */
static void test_xallocx_unservable_sizes(void **state)
{
    (void)state;
    errno = 0;
    assert_null(mallocx(SIZE_MAX - 4096, 0));
    assert_int_equal(errno, ENOMEM);
    assert_null(mallocx(SIZE_MAX / 2, MALLOCX_ZERO));
    assert_int_equal(nallocx(SIZE_MAX - 4096, 0), 0);
    assert_int_equal(nallocx(SIZE_MAX / 2, MALLOCX_ALIGN(64)), 0);
    void *p = mallocx(64, 0);
    assert_null(rallocx(p, SIZE_MAX / 2, 0));
    assert_int_equal(xallocx(p, SIZE_MAX / 2, 0, 0), sallocx(p, 0));
    dallocx(p, 0);
}

/* rallocx keeps what fits across classes, spans and alignments; with
 * MALLOCX_ZERO the bytes past the old usable size are zero. */
static void test_xallocx_rallocx_preserves_and_zeroes(void **state)
{
    (void)state;
    static const size_t steps[] = {10, 100, 5000, 70000, 400000, 2000000, 30000, 50, 1};
    for (unsigned lg = 0; lg <= 13; lg += 4) {
        int align = MALLOCX_LG_ALIGN(lg);
        unsigned char *p = mallocx(1, align);
        size_t have = 1;
        unit_fill(p, have, 9);
        for (unsigned i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
            size_t n = steps[i], old = sallocx(p, 0);
            unsigned char *dirty = malloc(n); /* what rallocx may move into: not zero */
            memset(dirty, 0xa5, malloc_usable_size(dirty));
            free(dirty);
            unsigned char *q = rallocx(p, n, align | MALLOCX_ZERO);
            assert_non_null(q);
            assert_int_equal((uintptr_t)q % ((size_t)1 << lg), 0);
            unit_check(q, have < n ? have : n, 9);
            size_t now = sallocx(q, 0);
            assert_true(now >= n);
            if (now > old)
                check_zero(q, old, now);
            unit_fill(q, n, 9);
            have = n;
            p = q;
        }
        dallocx(p, 0);
    }
    /* An aligned block that still fits stays where it is. */
    unsigned char *a = mallocx(3000, MALLOCX_ALIGN(1024));
    assert_ptr_equal(rallocx(a, 2900, MALLOCX_ALIGN(1024)), a);
    /* One that is not aligned so moves. */
    unsigned char *b = malloc(100);
    while ((uintptr_t)b % 4096 == 0) {
        unsigned char *c = malloc(100);
        free(b);
        b = c;
    }
    unit_fill(b, 100, 1);
    unsigned char *c = rallocx(b, 100, MALLOCX_ALIGN(4096));
    assert_int_equal((uintptr_t)c % 4096, 0);
    unit_check(c, 100, 1);
    dallocx(a, 0);
    dallocx(c, 0);
    /* rallocx(NULL, ...) allocates (undefined in jemalloc). */
    void *d = rallocx(NULL, 10, MALLOCX_ZERO);
    check_zero(d, 0, sallocx(d, 0));
    dallocx(d, 0);
}

/* xallocx: a small block keeps its class's size; a large one shrinks in
 * place, grows back into the pages it gave up, takes what it can of
 * `extra`, and with MALLOCX_ZERO zeroes what it gained. */
static void test_xallocx_resizes_in_place(void **state)
{
    (void)state;
    prof_thread_active_set(false); /* a sampled large block is a span too, but keep it plain */
    unsigned char *s = mallocx(100, 0);
    size_t cls = sallocx(s, 0);
    assert_int_equal(xallocx(s, 5000, 0, 0), cls);
    assert_int_equal(xallocx(s, 10, 0, 0), cls);
    dallocx(s, 0);

    size_t page = (size_t)1 << 13;
    unsigned char *big = mallocx(4096 * KiB, 0);
    unit_fill(big, 4096 * KiB, 4);
    /* Shrunk: the tail is free, and keeps what unit_fill() wrote there. */
    assert_int_equal(xallocx(big, 1024 * KiB, 0, 0), 1024 * KiB);
    assert_int_equal(xallocx(big, 2048 * KiB + 1, 0, MALLOCX_ZERO), 2048 * KiB + page);
    unit_check(big, 1000 * KiB, 4);
    check_zero(big, 1024 * KiB, 2048 * KiB + page);
    size_t got = xallocx(big, 2100 * KiB, 1000 * KiB, 0);
    assert_int_equal(got, 3104 * KiB); /* all of extra, in whole pages: 4 MiB were free */
    assert_int_equal(xallocx(big, 3100 * KiB, 0, 0), 3104 * KiB); /* nothing to do */
    /* Past what follows it, nothing moves. */
    unsigned char *next = mallocx(64 * KiB, 0);
    size_t before = sallocx(big, 0);
    size_t tried = xallocx(big, 1 << 30, 0, 0);
    assert_true(tried == before || tried >= ((size_t)1 << 30));
    unit_check(big, 1000 * KiB, 4);
    dallocx(next, 0);
    dallocx(big, 0);
    prof_thread_active_set(true);
}

/* thread.allocated and thread.deallocated count the *allocx functions as
 * their C counterparts: a resize as a free of the old size and an
 * allocation of the new (in place or not), an xallocx that changes
 * nothing as nothing. */
static void test_xallocx_thread_counters(void **state)
{
    (void)state;
    uint64_t a0 = read_u64("thread.allocated"), d0 = read_u64("thread.deallocated");
    void *p = mallocx(5000, MALLOCX_ALIGN(64));
    size_t u1 = sallocx(p, 0);
    assert_int_equal(read_u64("thread.allocated") - a0, u1);
    p = rallocx(p, 9000, 0);
    size_t u2 = sallocx(p, 0);
    assert_int_equal(read_u64("thread.allocated") - a0, u1 + u2);
    assert_int_equal(read_u64("thread.deallocated") - d0, u1);
    void *big = mallocx(1024 * KiB, 0);
    uint64_t a1 = read_u64("thread.allocated"), d1 = read_u64("thread.deallocated");
    assert_int_equal(xallocx(big, 512 * KiB, 0, 0), 512 * KiB);
    assert_int_equal(read_u64("thread.allocated") - a1, 512 * KiB);
    assert_int_equal(read_u64("thread.deallocated") - d1, 1024 * KiB);
    sdallocx(p, 9000, 0);
    dallocx(big, 0);
    assert_int_equal(read_u64("thread.allocated") - read_u64("thread.deallocated"),
                     a0 - d0);
}

struct sized_free {
    int flags;
    size_t size;
};

static void free_with_size(void *arg)
{
    const struct sized_free *f = arg;
    opt_check = true; /* the size check of a sized free */
    void *p = mallocx(100, f->flags);
    sdallocx(p, f->size, f->flags);
}

/* sdallocx of a 100-byte block with `size`, in a child that must abort;
 * its stderr. */
static const char *wrong_size_in_child(int flags, size_t size)
{
    int sig;
    char *err = unit_run_in_child(free_with_size, &(struct sized_free){flags, size}, &sig);
    assert_int_equal(sig, SIGABRT);
    return err;
}

/* Under opt.check, sdallocx with a size the block was not asked for
 * aborts naming it, as free_sized does. */
static void test_xallocx_sdallocx_checks_its_size(void **state)
{
    (void)state;
    assert_non_null(strstr(wrong_size_in_child(0, 5000),
                           "sdallocx(): size 5000 does not match the 112-byte block"));
    assert_non_null(strstr(wrong_size_in_child(MALLOCX_ALIGN(4096), 100000),
                           "sdallocx(): size 100000 does not match"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xallocx_flag_values_are_jemallocs),
        cmocka_unit_test(test_xallocx_alignment_and_sizes_agree),
        cmocka_unit_test(test_xallocx_zero_flag),
        cmocka_unit_test(test_xallocx_arena_and_tcache_flags),
        cmocka_unit_test(test_xallocx_unservable_sizes),
        cmocka_unit_test(test_xallocx_rallocx_preserves_and_zeroes),
        cmocka_unit_test(test_xallocx_resizes_in_place),
        cmocka_unit_test(test_xallocx_thread_counters),
        cmocka_unit_test(test_xallocx_sdallocx_checks_its_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
