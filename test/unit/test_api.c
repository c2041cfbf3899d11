/*
 * test_api.c: the public functions' semantics and every bad input: sizes
 * that cannot be served, overflow, bad alignments, invalid frees.
 * The aborting cases run in a child process whose stderr is captured.
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "conf.h"
#include "dump.h"
#include "meta.h"
#include "pagemap.h"
#include "prof.h"
#include "unit.h"

/* These tests pass impossible sizes on purpose, and use a pointer after a
 * reallocarray that failed (and so left it alone): silence gcc's checks. */
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#pragma GCC diagnostic ignored "-Wuse-after-free"

static void test_api_malloc_sizes_and_alignment(void **state)
{
    (void)state;
    void *p0 = malloc(0), *p0b = malloc(0);
    assert_non_null(p0);
    assert_ptr_not_equal(p0, p0b);
    free(p0);
    free(p0b);
    for (size_t size = 1; size < ((size_t)8 << 20); size = size * 5 / 4 + 1) {
        unsigned char *p = malloc(size);
        assert_non_null(p);
        assert_true(malloc_usable_size(p) >= size);
        if (size >= 16)
            assert_int_equal((uintptr_t)p % 16, 0);
        p[0] = 1;
        p[size - 1] = 2;
        memset(p, 0x33, malloc_usable_size(p));
        free(p);
    }
    assert_int_equal(malloc_usable_size(NULL), 0);
    free(NULL);
}

static void test_api_unservable_sizes_fail_with_enomem(void **state)
{
    (void)state;
    size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, PTRDIFF_MAX, (size_t)1 << 62, (size_t)1 << 48};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        errno = 0;
        assert_null(malloc(huge[i]));
        assert_int_equal(errno, ENOMEM);
        errno = 0;
        assert_null(calloc(1, huge[i]));
        assert_int_equal(errno, ENOMEM);
        errno = 0;
        assert_null(pvalloc(huge[i]));
        assert_int_equal(errno, ENOMEM);
        errno = 0;
        assert_null(aligned_alloc(64, huge[i]));
        assert_int_equal(errno, ENOMEM);
        void *p = NULL;
        int saved = errno = 1234;
        assert_int_equal(posix_memalign(&p, 64, huge[i]), ENOMEM);
        assert_int_equal(errno, saved);
        assert_null(p);
    }
    errno = 0;
    assert_null(calloc(SIZE_MAX / 2, 3)); /* overflowing product */
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(calloc((size_t)1 << 33, (size_t)1 << 33));
    assert_int_equal(errno, ENOMEM);
}

static void test_api_calloc_zeroes_reused_memory(void **state)
{
    (void)state;
    size_t sizes[] = {8, 100, 5000, 200000, 300000, (size_t)3 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (int round = 0; round < 3; round++) {
            unsigned char *dirty = malloc(sizes[i]);
            memset(dirty, 0xee, sizes[i]);
            free(dirty);
            unsigned char *p = calloc(1, sizes[i]);
            assert_non_null(p);
            for (size_t k = 0; k < sizes[i]; k++)
                if (p[k])
                    fail_msg("calloc(%zu) byte %zu is %d", sizes[i], k, p[k]);
            free(p);
        }
    }
}

static void test_api_realloc_preserves_contents(void **state)
{
    (void)state;
    size_t sizes[] = {1, 24, 100, 1000, 4000, 40000, 262144, 262145, 600000, (size_t)5 << 20,
                      100000, 3000, 10, (size_t)9 << 20, 1};
    unsigned char *p = NULL;
    size_t have = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *q = realloc(p, sizes[i]);
        assert_non_null(q);
        unit_check(q, have < sizes[i] ? have : sizes[i], 7);
        unit_fill(q, sizes[i], 7);
        assert_true(malloc_usable_size(q) >= sizes[i]);
        p = q;
        have = sizes[i];
    }
    /* realloc(p, 0) frees and returns NULL (glibc's choice). */
    assert_null(realloc(p, 0));
    /* realloc(NULL, n) is malloc(n). */
    p = realloc(NULL, 77);
    assert_non_null(p);
    free(p);
}

/* A small block that must move to grow moves to one a quarter larger at
 * least (about half the moves of going class by class), keeping its
 * bytes; a block that fits stays. */
static void test_api_realloc_grows_by_a_quarter_when_moving(void **state)
{
    (void)state;
    unsigned char *p = malloc(1024);
    unit_fill(p, 1024, 5);
    unsigned char *q = realloc(p, 1025);
    assert_non_null(q);
    assert_true(malloc_usable_size(q) >= 1024 + 1024 / 4);
    unit_check(q, 1024, 5);
    assert_ptr_equal(realloc(q, 1030), q); /* room now: in place */
    q = realloc(q, 2000); /* asks for more than a quarter: its own class */
    assert_int_equal(malloc_usable_size(q), sizeclass_size(sizeclass_of(2000)));
    unit_check(q, 1024, 5);
    free(q);
}

/* The same move when the thread has a block of the new class cached
 * (realloc's own path, without realloc_slow): it takes that block, keeps
 * the bytes, asks for a quarter more, and frees the old block, which the
 * next allocation of its class gets back. */
static void test_api_realloc_moves_into_a_cached_block(void **state)
{
    (void)state;
    prof_thread_active_set(false); /* a sampled block would live elsewhere */
    unsigned char *p = malloc(1024);
    unit_fill(p, 1024, 6);
    void *cached = malloc(1024 + 1024 / 4);
    free(cached); /* on top of its class's list now */
    unsigned char *q = realloc(p, 1025);
    assert_ptr_equal(q, cached);
    assert_true(malloc_usable_size(q) >= 1024 + 1024 / 4);
    unit_check(q, 1024, 6);
    void *again = malloc(1024);
    assert_ptr_equal(again, p); /* the old block went back to its list */
    /* More than a quarter more: the class of the size asked for. */
    cached = malloc(3000);
    free(cached);
    unit_fill(q, 1025, 8);
    unsigned char *r = realloc(q, 3000);
    assert_ptr_equal(r, cached);
    unit_check(r, 1025, 8);
    free(again);
    free(r);
    prof_thread_active_set(true);
}

/* A block grown past 28 KiB by a quarter lands in a span of its own of 5
 * pages; for every size it keeps as a small block would (more than half
 * its 40 KiB) it stays where it is, through realloc's own check as through
 * realloc_slow's; at half or less it moves to a class. */
static void test_api_realloc_keeps_a_span_as_a_small_block(void **state)
{
    (void)state;
    prof_thread_active_set(false);
    size_t cls_size = sizeclass_size(sizeclass_of(28 << 10));
    unsigned char *p = malloc(cls_size);
    unit_fill(p, cls_size, 2);
    unsigned char *q = realloc(p, cls_size + 1);
    size_t old = malloc_usable_size(q);
    assert_int_equal(pagemap_class_of(q), 0);
    assert_int_equal(old, sa_pages_for(cls_size + cls_size / 4) << SA_PAGE_SHIFT);
    assert_true(sa_pages_for(cls_size + 1) < old >> SA_PAGE_SHIFT); /* fewer pages would do */
    for (size_t n = cls_size + 2; n <= old; n += 997)
        assert_ptr_equal(realloc(q, n), q);
    assert_ptr_equal(realloc(q, old / 2 + 1), q);
    unit_check(q, old / 2 + 1, 2);
    unsigned char *r = realloc(q, old / 2);
    assert_ptr_not_equal(r, q);
    assert_int_equal(malloc_usable_size(r), sizeclass_size(sizeclass_of(old / 2)));
    unit_check(r, old / 2, 2);
    free(r);
    prof_thread_active_set(true);
}

/* A block realloc grows to 32 KiB or more gets a span of its own
 * (page-granular usable size, no size class), so that later growth can
 * take the pages after it: a buffer doubled from 32 KiB to 1 MiB moves
 * rarely, not at every step as it would through the classes.  (With
 * sampling off, as above.) */
static void test_api_realloc_grown_blocks_get_their_own_span(void **state)
{
    (void)state;
    prof_thread_active_set(false);
    unsigned char *p = malloc(20000);
    unit_fill(p, 20000, 9);
    unsigned char *q = realloc(p, 40000);
    assert_int_equal(pagemap_class_of(q), 0);
    assert_int_equal(malloc_usable_size(q), sa_pages_for(40000) << SA_PAGE_SHIFT);
    unit_check(q, 20000, 9);
    free(q);
    unsigned moves = 0;
    for (int round = 0; round < 50; round++) {
        p = malloc((size_t)32 << 10);
        for (size_t n = (size_t)64 << 10; n <= (size_t)1 << 20; n *= 2) {
            q = realloc(p, n);
            assert_non_null(q);
            moves += q != p;
            p = q;
        }
        free(p);
    }
    assert_true(moves < 50 * 5 / 4); /* 5 doublings a round: most in place */
    prof_thread_active_set(true);
}

/* A large block grows in place when the pages after it are free.  (With
 * sampling off: a sampled block lives on its own mapping and moves.) */
static void test_api_realloc_large_grows_in_place(void **state)
{
    (void)state;
    prof_thread_active_set(false);
    unsigned char *big = malloc((size_t)4 << 20);
    unit_fill(big, (size_t)4 << 20, 3);
    unsigned char *p = realloc(big, (size_t)1 << 20); /* shrink: frees the tail */
    assert_ptr_equal(p, big);
    unsigned char *q = realloc(p, (size_t)3 << 20);   /* the tail is still free */
    assert_ptr_equal(q, big);
    unit_check(q, (size_t)1 << 20, 3);
    free(q);
    prof_thread_active_set(true);
}

static void test_api_reallocarray(void **state)
{
    (void)state;
    int *p = reallocarray(NULL, 10, sizeof(int));
    assert_non_null(p);
    for (int i = 0; i < 10; i++)
        p[i] = i;
    errno = 0;
    assert_null(reallocarray(p, SIZE_MAX / 2, 4));
    assert_int_equal(errno, ENOMEM);
    p = reallocarray(p, 1000, sizeof(int)); /* p survived the failure */
    for (int i = 0; i < 10; i++)
        assert_int_equal(p[i], i);
    free(p);
}

/* Aligned requests that the thread cache answers: the stack of the size's
 * class holds objects (freed just before), so the cached case sees them,
 * and must refuse those of a class whose size is not a multiple of the
 * alignment (posix_memalign(64, 80) would get an 80-byte class's object,
 * aligned to 16 only), as it must take those of one whose size is. */
static void test_api_aligned_from_cached_stacks(void **state)
{
    (void)state;
    for (size_t align = 32; align <= 8192; align *= 2)
        for (size_t size = 1; size <= 3 * align + 64 && size <= 20000; size += 1 + size / 8) {
            void *warm[8];
            for (int i = 0; i < 8; i++)
                warm[i] = malloc(i % 2 ? size : align);
            for (int i = 0; i < 8; i++)
                free(warm[i]);
            for (int rep = 0; rep < 3; rep++) {
                void *p = NULL;
                assert_int_equal(posix_memalign(&p, align, size), 0);
                size_t whole = (size + align - 1) & ~(align - 1);
                void *q = aligned_alloc(align, whole), *m = memalign(align, size);
                assert_non_null(q);
                assert_non_null(m);
                assert_int_equal((uintptr_t)p % align, 0);
                assert_int_equal((uintptr_t)q % align, 0);
                assert_int_equal((uintptr_t)m % align, 0);
                assert_true(malloc_usable_size(p) >= size);
                assert_true(malloc_usable_size(q) >= whole);
                assert_true(malloc_usable_size(m) >= size);
                memset(p, 1, size);
                memset(q, 2, whole);
                memset(m, 3, size);
                free(p);
                free(q);
                free(m);
            }
        }
}

static void test_api_alignment_functions(void **state)
{
    (void)state;
    for (size_t align = 1; align <= ((size_t)1 << 30); align *= 2) {
        size_t sizes[] = {0, 1, 16, 100, align, 3 * align + 5};
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            if (sizes[i] > ((size_t)1 << 28))
                continue;
            void *a = aligned_alloc(align, sizes[i]);
            void *m = memalign(align, sizes[i]);
            void *pm = NULL;
            int rc = posix_memalign(&pm, align < sizeof(void *) ? sizeof(void *) : align, sizes[i]);
            assert_non_null(a);
            assert_non_null(m);
            assert_int_equal(rc, 0);
            assert_int_equal((uintptr_t)a % align, 0);
            assert_int_equal((uintptr_t)m % align, 0);
            assert_int_equal((uintptr_t)pm % align, 0);
            assert_true(malloc_usable_size(a) >= sizes[i]);
            if (sizes[i])
                memset(a, 1, sizes[i]);
            free(a);
            free_aligned_sized(m, align, sizes[i]);
            free_sized(pm, sizes[i]);
        }
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *v = valloc(10), *pv = pvalloc(10);
    assert_int_equal((uintptr_t)v % page, 0);
    assert_int_equal((uintptr_t)pv % page, 0);
    assert_true(malloc_usable_size(pv) >= page);
    free(v);
    free(pv);
    pv = pvalloc(0);
    assert_non_null(pv);
    free(pv);
}

static void test_api_bad_alignments(void **state)
{
    (void)state;
    size_t bad[] = {0, 3, 24, 48, 100, 4097, SIZE_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        assert_null(aligned_alloc(bad[i], 64));
        assert_int_equal(errno, EINVAL);
        errno = 0;
        assert_null(memalign(bad[i], 64));
        assert_int_equal(errno, EINVAL);
        void *p = (void *)0x1;
        assert_int_equal(posix_memalign(&p, bad[i], 64), EINVAL);
        assert_ptr_equal(p, (void *)0x1);
    }
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4, 64), EINVAL); /* < sizeof(void *) */
    assert_int_equal(posix_memalign(&p, 2, 64), EINVAL);
    /* Absurd but well-formed alignments: no memory, not a crash. */
    errno = 0;
    assert_null(aligned_alloc((size_t)1 << 62, 64));
    assert_int_equal(errno, ENOMEM);
}

static void do_free(void *p) { free(p); }

static void double_free_large(void *unused)
{
    (void)unused;
    void *volatile p = malloc((size_t)1 << 20); /* volatile: gcc elides malloc+free */
    free(p);
    free(p);
}

/* Every allocation sampled: a small one on its own mapping (parked once
 * freed), a large one a heap span with a record. */
static void double_free_sampled(void *size)
{
    prof_lg_sample_set(0);
    void *volatile p = malloc((size_t)size);
    if (!prof_is_sampled(p))
        _exit(3);
    free(p);
    free(p);
}

/* A small block freed twice, each free flushed from the thread's cache
 * to the block's span: the second finds its bit set.  48 bytes: a class
 * with no transfer cache, so a flush reaches the spans.  A neighbour stays
 * out, so that the span is not emptied, and given to the page heap, by
 * the first free (the second would then be an invalid pointer's). */
static void double_free_small(void *unused)
{
    (void)unused;
    bool off = false; /* a sampled block is freed another way */
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &off, sizeof(off)), 0);
    static void *blocks[64];
    for (int i = 0; i < 64; i++)
        blocks[i] = malloc(48);
    int k = 1; /* a block with a neighbour before it in its span */
    while (k < 64 && pagemap_span(blocks[k]) != pagemap_span(blocks[k - 1]))
        k++;
    if (k == 64)
        _exit(4);
    void *volatile p = blocks[k];
    free(p);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    free(p);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
}

static void realloc_foreign(void *p) { (void)!realloc(p, 10); }

static void usable_size_foreign(void *p) { (void)malloc_usable_size(p); }

static void expect_invalid(void (*fn)(void *), void *arg, void *shown, const char *what)
{
    int sig;
    char *err = unit_run_in_child(fn, arg, &sig);
    char want[128];
    snprintf(want, sizeof(want), "salloc: %s(): invalid pointer %p", what, shown);
    if (sig != SIGABRT || !strstr(err, want))
        fail_msg("expected abort with \"%s\", got signal %d and stderr \"%s\"", want, sig, err);
}

static int static_object[4];

static void test_api_invalid_free_aborts_with_message(void **state)
{
    (void)state;
    int on_stack[4];
    expect_invalid(do_free, on_stack, on_stack, "free");
    expect_invalid(do_free, static_object, static_object, "free");
    void *foreign = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    expect_invalid(do_free, foreign, foreign, "free");
    expect_invalid(do_free, (void *)0xdead000000001000ull, (void *)0xdead000000001000ull, "free");
    char *large = malloc((size_t)1 << 20);
    expect_invalid(do_free, large + 8192, large + 8192, "free"); /* inside a large block */
    free(large);
    int sig;
    char *err = unit_run_in_child(double_free_large, NULL, &sig);
    assert_int_equal(sig, SIGABRT);
    assert_non_null(strstr(err, "salloc: free(): invalid pointer 0x"));
    /* Without opt.check too, once both frees reach the block's span. */
    err = unit_run_in_child(double_free_small, NULL, &sig);
    if (sig != SIGABRT || !strstr(err, "salloc: free(): double free of the 48-byte block at 0x"))
        fail_msg("double free of a small block: signal %d, stderr \"%s\"", sig, err);
    const size_t sampled_sizes[] = {100, (size_t)1 << 20};
    for (size_t k = 0; k < 2; k++) {
        size_t size = sampled_sizes[k];
        err = unit_run_in_child(double_free_sampled, (void *)size, &sig);
        if (sig != SIGABRT || !strstr(err, "salloc: free(): invalid pointer 0x"))
            fail_msg("double free of a sampled %zu-byte block: signal %d, stderr \"%s\"", size,
                     sig, err);
    }
    /* Into salloc's own metadata: the span record of a live block, and a
     * fresh metadata allocation; neither is a block. */
    void *block = malloc(64);
    void *span = pagemap_span(block);
    assert_non_null(span);
    expect_invalid(do_free, span, span, "free");
    void *meta = meta_alloc(64, 16);
    assert_non_null(meta);
    expect_invalid(do_free, meta, meta, "free");
    expect_invalid(do_free, (char *)meta + 8, (char *)meta + 8, "free");
    free(block);
    expect_invalid(realloc_foreign, on_stack, on_stack, "realloc");
    expect_invalid(usable_size_foreign, foreign, foreign, "malloc_usable_size");
    munmap(foreign, 1 << 16);
}

static void test_api_malloc_trim_returns_memory(void **state)
{
    (void)state;
    void *p = malloc((size_t)64 << 20);
    memset(p, 1, (size_t)64 << 20);
    free(p);
    assert_int_equal(malloc_trim(0), 1);
    assert_int_equal(malloc_trim(0), 0); /* nothing left to give */
}

static size_t zero_reallocs(void)
{
    uint64_t epoch = 1;
    size_t n = 0, len = sizeof(n);
    assert_int_equal(mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)), 0);
    assert_int_equal(mallctl("stats.zero_reallocs", &n, &len, NULL, 0), 0);
    return n;
}

static void realloc_to_zero_in_child(void *unused)
{
    (void)unused;
    conf_apply("zero_realloc:abort", "test");
    void *p = malloc(100);
    void *volatile q = realloc(p, 0); /* aborts */
    (void)q;
}

/* opt.zero_realloc: realloc(p, 0) frees (glibc's "free", the default),
 * allocates the smallest block ("alloc") or aborts ("abort"); each call
 * with p not NULL counts in stats.zero_reallocs, realloc(NULL, 0) not. */
static void test_api_zero_realloc(void **state)
{
    (void)state;
    const char *mode = NULL;
    size_t len = sizeof(mode);
    assert_int_equal(mallctl("opt.zero_realloc", &mode, &len, NULL, 0), 0);
    assert_string_equal(mode, "free");
    size_t before = zero_reallocs();
    void *p = malloc(100);
    assert_null(realloc(p, 0));
    assert_int_equal(zero_reallocs(), before + 1);
    void *q = realloc(NULL, 0); /* malloc(0): not counted */
    assert_non_null(q);
    assert_int_equal(zero_reallocs(), before + 1);

    assert_int_equal(conf_apply("zero_realloc:alloc", "test"), 0);
    void *r = realloc(q, 0);
    assert_non_null(r);
    assert_true(malloc_usable_size(r) >= 1);
    assert_int_equal(zero_reallocs(), before + 2);
    free(r);
    assert_int_equal(conf_apply("zero_realloc:free", "test"), 0);

    int sig;
    char *err = unit_run_in_child(realloc_to_zero_in_child, NULL, &sig);
    assert_int_equal(sig, SIGABRT);
    assert_non_null(strstr(err, "salloc: realloc(0x"));
    assert_non_null(strstr(err, ", 0): a zero size, refused under zero_realloc:abort"));
}

/* glibc's <malloc.h> interface, answered with salloc's figures (glibc's
 * own, preloaded over, would read its empty arena: zeros). */
static void test_api_glibc_mallinfo(void **state)
{
    (void)state;
    bool off = false, on = true; /* unsampled: the blocks are the class's own */
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &off, sizeof(off)), 0);
    struct mallinfo2 before = mallinfo2();
    static void *keep[256];
    for (int i = 0; i < 256; i++)
        keep[i] = malloc(64 << 10);
    struct mallinfo2 after = mallinfo2();
    assert_true(after.uordblks >= before.uordblks + (256u << 16));
    assert_true(after.arena >= after.uordblks);
    assert_int_equal(after.fordblks, after.arena - after.uordblks);
    assert_true(after.hblkhd > 0); /* salloc's metadata */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* glibc deprecates it, programs call it */
    struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
    assert_true(old.uordblks >= (int)(256u << 16));
    for (int i = 0; i < 256; i++)
        free(keep[i]);
    struct mallinfo2 freed = mallinfo2();
    assert_true(freed.uordblks + (256u << 16) <= after.uordblks + (1u << 20));
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &on, sizeof(on)), 0);

    assert_int_equal(mallopt(M_ARENA_MAX, 1), 0); /* no glibc tunable is salloc's */
    /* Into a buffer of the test's own: libc's open_memstream would hand
     * back memory of the process's malloc, not always salloc's (tsan). */
    static char xml[4096];
    FILE *f = fmemopen(xml, sizeof(xml), "w");
    assert_non_null(f);
    assert_int_equal(malloc_info(0, f), 0);
    fclose(f);
    assert_non_null(strstr(xml, "<malloc version=\"salloc-1\">\n"));
    assert_non_null(strstr(xml, "<total type=\"allocated\" size=\""));
    assert_non_null(strstr(xml, "</malloc>\n"));
    errno = 0;
    assert_int_equal(malloc_info(1, stdout), -1);
    assert_int_equal(errno, EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_malloc_sizes_and_alignment),
        cmocka_unit_test(test_api_unservable_sizes_fail_with_enomem),
        cmocka_unit_test(test_api_calloc_zeroes_reused_memory),
        cmocka_unit_test(test_api_realloc_preserves_contents),
        cmocka_unit_test(test_api_realloc_grows_by_a_quarter_when_moving),
        cmocka_unit_test(test_api_realloc_moves_into_a_cached_block),
        cmocka_unit_test(test_api_realloc_keeps_a_span_as_a_small_block),
        cmocka_unit_test(test_api_realloc_grown_blocks_get_their_own_span),
        cmocka_unit_test(test_api_realloc_large_grows_in_place),
        cmocka_unit_test(test_api_reallocarray),
        cmocka_unit_test(test_api_alignment_functions),
        cmocka_unit_test(test_api_aligned_from_cached_stacks),
        cmocka_unit_test(test_api_bad_alignments),
        cmocka_unit_test(test_api_invalid_free_aborts_with_message),
        cmocka_unit_test(test_api_malloc_trim_returns_memory),
        cmocka_unit_test(test_api_glibc_mallinfo),
        cmocka_unit_test(test_api_zero_realloc),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
