/*
 * test_oom.c: out of memory, through the OS seam (os_syscalls, writable in
 * test builds): mmap refused always, or at random points, or madvise
 * refused.
 *
 *   - once the heap has nothing left, every allocation function returns
 *     NULL with ENOMEM (posix_memalign returns ENOMEM), nothing crashes,
 *     and everything works again when the kernel gives memory again;
 *   - a random workload under heavy sampling with one mmap in three
 *     refused (heap chunks, pagemap leaves, metadata, thread caches,
 *     sampled pages, dump buffers all fail somewhere): every NULL comes
 *     with ENOMEM, and afterwards the heap's invariants hold, every block
 *     frees, thread.deallocated is exact and a dump works;
 *   - a sample that cannot get its pages is served unsampled and counted
 *     in prof.samples_failed; the samples recorded are unaffected;
 *   - madvise refused: purging keeps the pages dirty and retries later.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "dump.h"
#include "meta.h"
#include "prof.h"
#include "sampled_pages.h"
#include "unit.h"

/* ---- the injectors ---- */

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static unsigned mmap_calls, mmap_refused, refuse_every; /* 1: every call */
static unsigned chunk_calls; /* of mmap_calls, the page heap's chunks' */

/* The page heap's chunks (PAGEHEAP_GROW_MIN and up) are counted apart
 * from the smaller mappings (a sampled block's, whose number follows the
 * sampler's clock-seeded draws).  Counted together, which growths of the
 * heap were refused was a draw too: test_oom_random_refusals saw 1 to 20
 * NULLs in 1260 runs, and by extrapolation none, its assertion failing,
 * about one run in 1200. */
static void *refusing_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    mmap_calls++;
    unsigned n = len >= PAGEHEAP_GROW_MIN ? ++chunk_calls : mmap_calls - chunk_calls;
    if (refuse_every && n % refuse_every == 0) {
        mmap_refused++;
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return real_mmap(addr, len, prot, flags, fd, off);
}

static void refuse_mmap(unsigned every)
{
    real_mmap = mmap;
    mmap_calls = mmap_refused = chunk_calls = 0;
    refuse_every = every;
    os_syscalls.mmap = refusing_mmap;
}

static void allow_mmap(void) { os_syscalls.mmap = mmap; }

static int refusing_madvise(void *addr, size_t len, int advice)
{
    (void)addr, (void)len, (void)advice;
    errno = EAGAIN;
    return -1;
}

static uint64_t read_u64(const char *name)
{
    uint64_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

/* Every layer's invariants (SA_DEBUG test build: these abort on a break). */
static void check_heap(void)
{
    pageheap_check();
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
        central_check(cls);
    if (tcache_get() != &tcache_empty)
        tcache_check(tcache_get());
}

/* ---- nothing left ---- */

#define KEEP_MAX (1u << 21)

static void *kept[KEEP_MAX];
static size_t nkept;

/* Allocates `size` bytes with `how` until it fails (the heap exhausted and
 * the kernel refusing): the failure must be NULL with ENOMEM. */
static void exhaust(const char *how, size_t size)
{
    for (;;) {
        errno = 0;
        void *p = NULL;
        if (!strcmp(how, "malloc"))
            p = malloc(size);
        else if (!strcmp(how, "calloc"))
            p = calloc(1, size);
        else if (!strcmp(how, "aligned_alloc"))
            p = aligned_alloc(64, size);
        else if (!strcmp(how, "memalign"))
            p = memalign(4096, size);
        else if (!strcmp(how, "valloc"))
            p = valloc(size);
        else if (!strcmp(how, "realloc"))
            p = realloc(NULL, size);
        else if (!strcmp(how, "posix_memalign")) {
            int saved = errno = 77;
            int rc = posix_memalign(&p, 64, size);
            assert_int_equal(errno, saved); /* posix_memalign leaves errno alone */
            if (rc) {
                assert_int_equal(rc, ENOMEM);
                assert_null(p);
                return;
            }
        }
        if (!p) {
            if (errno != ENOMEM)
                fail_msg("%s(%zu): NULL with errno %d, not ENOMEM", how, size, errno);
            return;
        }
        if (nkept == KEEP_MAX)
            fail_msg("%s(%zu) never failed with mmap refused", how, size);
        kept[nkept++] = p;
    }
}

static void test_oom_every_function_fails_cleanly_and_recovers(void **state)
{
    (void)state;
    const char *how[] = {"malloc", "calloc", "aligned_alloc", "memalign",
                         "valloc", "realloc", "posix_memalign"};
    size_t sizes[] = {16, 1000, 70000, (size_t)1 << 20}; /* small, medium, large */
    refuse_mmap(1);
    for (size_t h = 0; h < sizeof(how) / sizeof(how[0]); h++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            exhaust(how[h], sizes[k]);
    /* realloc that cannot grow keeps the block (gcc cannot know that it
     * is still ours after a failed realloc: read it back from kept[]). */
    errno = 0;
    assert_null(realloc(kept[0], (size_t)64 << 20));
    assert_int_equal(errno, ENOMEM);
    assert_true(malloc_usable_size(*(void *volatile *)&kept[0]) >= 16);
    allow_mmap();
    assert_true(mmap_refused > 0);
    /* The kernel gives memory again: everything works. */
    for (size_t h = 0; h < sizeof(how) / sizeof(how[0]); h++) {
        void *p = NULL;
        if (!strcmp(how[h], "posix_memalign"))
            assert_int_equal(posix_memalign(&p, 64, 1 << 20), 0);
        else
            p = !strcmp(how[h], "calloc") ? calloc(1, 1 << 20) : malloc(1 << 20);
        assert_non_null(p);
        free(p);
    }
    for (size_t i = 0; i < nkept; i++)
        free(kept[i]);
    fprintf(stderr, "# nothing left: %zu blocks allocated, %u mmap calls refused\n", nkept,
            mmap_refused);
    nkept = 0;
    check_heap();
}

/* ---- sampled pages already there ---- */

/* Takes every mapping the sampled-page cache keeps and every free run of
 * the regions, longest first, with mmap refused, so that the next small
 * sample needs a new region: an mmap.  A region made before main() (a
 * sample among the runtime's first allocations, before main sets
 * sampled_pages_region_pages) holds 2048 pages: with its runs free, the
 * random test's samples never called mmap and none could be refused. */
#define TAKEN_MAX 8192

static struct span *taken[TAKEN_MAX];
static size_t ntaken;

static void take_sampled_pages(void)
{
    refuse_mmap(1);
    bool zeroed;
    for (size_t pages = SAMPLED_CACHE_MAX_PAGES; pages >= 1; pages--)
        while ((taken[ntaken] = sampled_pages_get(pages << SA_PAGE_SHIFT, 16, &zeroed)))
            if (++ntaken == TAKEN_MAX)
                fail_msg("more than %u sampled mappings kept", TAKEN_MAX);
    assert_int_equal(sampled_pages_retained(), 0);
    allow_mmap();
}

static void give_back_sampled_pages(void)
{
    while (ntaken)
        sampled_pages_put(taken[--ntaken]);
}

/* ---- refused at random points ---- */

#define SLOTS 4096

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *fresh_thread(void *arg)
{
    /* Its cache may not get memory: it must still allocate, uncached. */
    void **out = arg;
    *out = malloc(100);
    return NULL;
}

static void test_oom_random_refusals_under_sampling(void **state)
{
    (void)state;
    size_t saved_lg = prof_lg_sample_get();
    prof_lg_sample_set(12); /* a sample every 4 KiB: sampled pages and records too */
    void **slot = calloc(SLOTS, sizeof(void *));
    uint64_t rng = 0x243f6a8885a308d3ull, nulls = 0, freed = 0;
    uint64_t d0 = read_u64("thread.deallocated");
    uint64_t failed0 = read_u64("prof.samples_failed");
    take_sampled_pages();
    refuse_mmap(3);
    for (int step = 0; step < 60000; step++) {
        size_t i = rng_next(&rng) % SLOTS;
        uint64_t r = rng_next(&rng);
        size_t n = r % 16 == 0 ? (r >> 8) % (4u << 20) : (r >> 8) % 2000 + 1;
        if (slot[i]) {
            freed += malloc_usable_size(slot[i]);
            free(slot[i]);
        }
        errno = 0;
        slot[i] = r % 7 == 0 ? calloc(1, n) : malloc(n);
        if (!slot[i]) {
            nulls++;
            if (errno != ENOMEM)
                fail_msg("step %d: malloc(%zu) NULL with errno %d", step, n, errno);
        }
        if (step % 9973 == 0) {
            const char *path = "/tmp/salloc_test_oom.heap";
            int rc = mallctl("prof.dump", NULL, NULL, &path, sizeof(path));
            assert_true(rc == 0 || rc == EFAULT); /* no memory for the dump: an error */
            pthread_t t;
            void *p = NULL;
            if (pthread_create(&t, NULL, fresh_thread, &p) == 0) {
                pthread_join(t, NULL);
                if (p)
                    freed += malloc_usable_size(p);
                free(p);
            }
        }
    }
    allow_mmap();
    give_back_sampled_pages();
    uint64_t failed = read_u64("prof.samples_failed") - failed0;
    fprintf(stderr, "# random refusals: %u of %u mmap calls refused, %llu NULLs, %llu samples lost\n",
            mmap_refused, mmap_calls, (unsigned long long)nulls, (unsigned long long)failed);
    assert_true(mmap_refused > 10 && nulls > 0 && failed > 0);
    check_heap();
    for (size_t i = 0; i < SLOTS; i++)
        if (slot[i]) {
            freed += malloc_usable_size(slot[i]);
            free(slot[i]);
        }
    assert_int_equal(read_u64("thread.deallocated") - d0, freed);
    free(slot);
    check_heap();
    const char *path = "/tmp/salloc_test_oom.heap";
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &path, sizeof(path)), 0);
    unlink(path);
    prof_lg_sample_set(saved_lg);
}

/* ---- samples without pages ---- */

static void test_oom_lost_samples_are_counted_and_served(void **state)
{
    (void)state;
    size_t saved_lg = prof_lg_sample_get();
    enum { N = 2000 };
    void *warm[N];
    for (int i = 0; i < N; i++) /* memory in the heap for what follows */
        warm[i] = malloc(5000);
    for (int i = 0; i < N; i++)
        free(warm[i]);
    prof_lg_sample_set(0); /* every allocation due */
    size_t live0 = prof_sample_count();
    /* Earlier tests left kept mappings of every length and free runs. */
    take_sampled_pages();
    refuse_mmap(1);
    uint64_t failed0 = read_u64("prof.samples_failed");
    void *p[100];
    for (int i = 0; i < 100; i++) {
        /* A size no kept mapping has: a sample needs a new one. */
        p[i] = malloc(5000 + (size_t)i * 8192);
        assert_non_null(p[i]); /* served from the heap, unsampled */
    }
    allow_mmap();
    give_back_sampled_pages();
    /* Every one was due: each is a sample, or counted lost and served as
     * an ordinary block (the small ones: no mapping to be had; the large
     * ones are heap spans and need no mmap). */
    uint64_t failed = read_u64("prof.samples_failed") - failed0;
    size_t sampled = 0;
    for (int i = 0; i < 100; i++) {
        sampled += prof_is_sampled(p[i]);
        assert_true(malloc_usable_size(p[i]) >= 5000 + (size_t)i * 8192);
    }
    fprintf(stderr, "# samples without pages: %zu sampled, %llu lost\n", sampled,
            (unsigned long long)failed);
    assert_true(failed >= 1);
    assert_int_equal(sampled + failed, 100);
    assert_int_equal(prof_sample_count(), live0 + sampled);
    for (int i = 0; i < 100; i++)
        free(p[i]);
    assert_int_equal(prof_sample_count(), live0);
    prof_lg_sample_set(saved_lg);
}

/* ---- madvise refused ---- */

static void test_oom_purge_refused_keeps_pages(void **state)
{
    (void)state;
    void *p = malloc((size_t)8 << 20);
    memset(p, 1, (size_t)8 << 20);
    free(p);
    os_syscalls.madvise = refusing_madvise;
    malloc_trim(0); /* nothing purged: still dirty, still consistent */
    struct pageheap_stats st;
    pageheap_get_stats(&st);
    assert_true(st.free_dirty >= ((size_t)8 << 20));
    check_heap();
    os_syscalls.madvise = madvise;
    assert_int_equal(malloc_trim(0), 1);
    pageheap_get_stats(&st);
    assert_int_equal(st.free_dirty, 0);
    check_heap();
}

/* An allocation that fails allocates nothing: thread.allocated and
 * thread.deallocated stay where they were, for malloc, a realloc that
 * cannot move and an aligned allocation.  Each once added its size to
 * thread.allocated (and to thread.deallocated, to keep them balanced). */
static void test_oom_failure_counts_nothing(void **state)
{
    (void)state;
    char *p = malloc(64 << 10);
    size_t usable = malloc_usable_size(p);
    uint64_t a0 = read_u64("thread.allocated"), d0 = read_u64("thread.deallocated");
    refuse_mmap(1);
    void *big = malloc((size_t)1 << 44);
    char *q = realloc(p, (size_t)1 << 44);
    void *aligned = NULL;
    int rc = posix_memalign(&aligned, (size_t)1 << 21, (size_t)1 << 44);
    allow_mmap();
    assert_null(big);
    assert_null(q);
    assert_int_equal(rc, ENOMEM);
    assert_int_equal(read_u64("thread.allocated"), a0);
    assert_int_equal(read_u64("thread.deallocated"), d0);
    free(p);
    assert_int_equal(read_u64("thread.allocated"), a0);
    assert_int_equal(read_u64("thread.deallocated") - d0, usable);
}

/* realloc shrinking a large block in place when no record for the freed
 * tail can be had (metadata spent, mmap refused): it moves or fails, and
 * the counts agree with the blocks.  The shrink once kept the tail
 * silently while realloc counted the block shrunk: the counts then
 * differed by 1.41 MiB where p's 1 MiB was out. */
static void test_oom_shrink_without_a_record(void **state)
{
    (void)state;
    static struct span *held[1 << 16];
    prof_thread_active_set(false); /* no sample's record in the way */
    char *p = malloc((size_t)1 << 20);
    memset(p, 7, 600 << 10);
    size_t live = malloc_usable_size(p); /* out at the start, none at the end */
    uint64_t a0 = read_u64("thread.allocated"), d0 = read_u64("thread.deallocated");
    refuse_mmap(1);
    while (meta_alloc(sizeof(struct span), 64)) /* the metadata chunk runs dry */
        ;
    size_t n = 0;
    struct span *s;
    while (n < (1u << 16) && (s = pageheap_alloc(1, 1, 0, NULL))) /* and the spare records */
        held[n++] = s;
    char *q = realloc(p, 600 << 10);
    allow_mmap();
    if (q) { /* shrunk, or moved to a free span that needed no new record */
        assert_true(malloc_usable_size(q) >= (600 << 10));
        assert_true(q[0] == 7 && q[(600 << 10) - 1] == 7);
        free(q);
        /* p and q freed, q counted allocated: the counts differ by p. */
        assert_int_equal(read_u64("thread.deallocated") - d0,
                         read_u64("thread.allocated") - a0 + live);
    } else { /* a move that found no memory either: p as it was */
        assert_int_equal(errno, ENOMEM);
        assert_int_equal(malloc_usable_size(p), live);
        assert_true(p[0] == 7 && p[(600 << 10) - 1] == 7);
        free(p);
        /* Nothing allocated, p freed. */
        assert_int_equal(read_u64("thread.allocated"), a0);
        assert_int_equal(read_u64("thread.deallocated") - d0, live);
    }
    while (n)
        pageheap_free(held[--n]);
    check_heap();
    prof_thread_active_set(true);
}

int main(void)
{
    /* Regions of one longest run: a sample needs a new region, so an mmap
     * that may be refused, every few samples rather than every 2048 pages. */
    sampled_pages_region_pages = SAMPLED_CACHE_MAX_PAGES;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_every_function_fails_cleanly_and_recovers),
        cmocka_unit_test(test_oom_random_refusals_under_sampling),
        cmocka_unit_test(test_oom_lost_samples_are_counted_and_served),
        cmocka_unit_test(test_oom_purge_refused_keeps_pages),
        cmocka_unit_test(test_oom_shrink_without_a_record),
        cmocka_unit_test(test_oom_failure_counts_nothing),
    };
    return cmocka_run_group_tests_name("out of memory", tests, NULL, NULL);
}
