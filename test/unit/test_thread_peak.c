/*
 * test_thread_peak.c: thread.peak.read and thread.peak.reset
 * (src/thread_peak.h): a thread's high-water mark of allocated minus
 * deallocated bytes, never above the truth and at most THREAD_PEAK_WINDOW
 * below it, whatever the sizes, and each thread's own.
 *
 * Each test runs in a thread of its own, so that its difference starts
 * from a cache nobody else used.  The whole suite runs again in children
 * under other options: profiling off for good (no sampler window at all
 * unless the peak asks for one), one sample in every KiB (windows cut by
 * intervals), and no thread cache (every allocation a slow one).
 */
#include "unit.h"

#include <errno.h>
#include <pthread.h>
#include <malloc.h>

#include "../../include/salloc.h"
#include "../integration/child_run.h"
#include "thread_peak.h"

static uint64_t peak_read(void)
{
    uint64_t v = UINT64_MAX;
    size_t len = sizeof(v);
    assert_int_equal(mallctl("thread.peak.read", &v, &len, NULL, 0), 0);
    return v;
}

static void peak_reset(void)
{
    assert_int_equal(mallctl("thread.peak.reset", NULL, NULL, NULL, 0), 0);
}

static void run_in_thread(void *(*body)(void *))
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, body, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* `n` blocks of `size` bytes, allocated, then all freed: the peak is their
 * usable bytes (no assertion in between: cmocka's could allocate). */
#define MAX_BLOCKS 70000
static void *blocks[MAX_BLOCKS];

static size_t allocate_then_free(size_t n, size_t size)
{
    size_t usable = 0;
    for (size_t i = 0; i < n; i++) {
        blocks[i] = malloc(size);
        usable += malloc_usable_size(blocks[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
    return usable;
}

/* The mark is within [truth - window, truth]. */
static void expect_peak(uint64_t peak, size_t truth)
{
    if (peak > truth || peak + THREAD_PEAK_WINDOW < truth)
        fail_msg("peak %llu for a true peak of %zu (window %lld)", (unsigned long long)peak,
                 truth, (long long)THREAD_PEAK_WINDOW);
}

/* Small blocks, 3 MiB of them, then a reset and 1 MiB: each time the
 * mark is the batch's size, within a window, long after it was freed.
 * Without the thread's own window, the sampler's 1 MiB one left it up to
 * 1 MiB short. */
static void *small_blocks(void *arg)
{
    (void)arg;
    for (int round = 0; round < 3; round++) {
        peak_reset();
        size_t truth = allocate_then_free(65536, 48);
        expect_peak(peak_read(), truth);
        expect_peak(peak_read(), truth); /* reading changes nothing */
    }
    peak_reset();
    assert_true(peak_read() < THREAD_PEAK_WINDOW); /* nothing live since */
    size_t truth = allocate_then_free(1000, 1000);
    expect_peak(peak_read(), truth);
    return NULL;
}

static void test_thread_peak_small_blocks(void **state)
{
    (void)state;
    run_in_thread(small_blocks);
}

/* One block far larger than the window, freed before anything else is
 * allocated: the look at the window's end counts the block it is in the
 * middle of (without that, this read gave 0). */
static void *one_large_block(void *arg)
{
    (void)arg;
    peak_reset();
    size_t truth = allocate_then_free(1, 10 << 20);
    expect_peak(peak_read(), truth);
    /* Grown and shrunk again: the peak is the grown size, plus the old
     * block if the growth moved it (both were live for the copy). */
    peak_reset();
    char *p = malloc(1 << 20);
    size_t before = malloc_usable_size(p);
    uintptr_t was = (uintptr_t)p;
    char *q = realloc(p, 4 << 20);
    size_t grown = malloc_usable_size(q) + ((uintptr_t)q != was ? before : 0);
    char *r = realloc(q, 1 << 20);
    free(r);
    expect_peak(peak_read(), grown);
    return NULL;
}

static void test_thread_peak_one_large_block(void **state)
{
    (void)state;
    run_in_thread(one_large_block);
}

/* Frees of blocks another thread allocated count against this thread:
 * the difference goes below its value at the reset, and the mark stays
 * at 0 (it is never negative). */
static void *free_foreign(void *arg)
{
    peak_reset();
    void **foreign = arg;
    for (int i = 0; i < 1000; i++)
        free(foreign[i]);
    assert_int_equal(peak_read(), 0);
    return NULL;
}

static void test_thread_peak_foreign_frees(void **state)
{
    (void)state;
    static void *foreign[1000];
    for (int i = 0; i < 1000; i++)
        foreign[i] = malloc(4096);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_foreign, foreign), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* Each thread's mark is its own: a thread allocating 8 MiB at the same
 * time does not move another's. */
static pthread_barrier_t both_reset, both_done;

static void *busy_neighbour(void *arg)
{
    (void)arg;
    peak_reset();
    pthread_barrier_wait(&both_reset);
    size_t truth = allocate_then_free(2048, 4096);
    pthread_barrier_wait(&both_done);
    expect_peak(peak_read(), truth);
    return NULL;
}

static void test_thread_peak_per_thread(void **state)
{
    (void)state;
    assert_int_equal(pthread_barrier_init(&both_reset, NULL, 2), 0);
    assert_int_equal(pthread_barrier_init(&both_done, NULL, 2), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, busy_neighbour, NULL), 0);
    peak_reset();
    pthread_barrier_wait(&both_reset);
    void *mine = malloc(100);
    pthread_barrier_wait(&both_done);
    uint64_t peak = peak_read();
    free(mine);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(peak <= 128);
    pthread_barrier_destroy(&both_reset);
    pthread_barrier_destroy(&both_done);
}

/* jemalloc's interface: read is read-only, reset takes nothing. */
static void test_thread_peak_ctl_errors(void **state)
{
    (void)state;
    uint64_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl("thread.peak.read", NULL, NULL, &v, sizeof(v)), EPERM);
    assert_int_equal(mallctl("thread.peak.reset", &v, &len, NULL, 0), EPERM);
    uint32_t small = 0;
    len = sizeof(small);
    assert_int_equal(mallctl("thread.peak.read", &small, &len, NULL, 0), EINVAL);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_thread_peak_small_blocks),
    cmocka_unit_test(test_thread_peak_one_large_block),
    cmocka_unit_test(test_thread_peak_foreign_frees),
    cmocka_unit_test(test_thread_peak_per_thread),
    cmocka_unit_test(test_thread_peak_ctl_errors),
};

/* The suite again in a child under `conf`. */
static void expect_suite_passes_under(const char *conf)
{
    struct child_outcome o;
    child_run("test_thread_peak", "suite", conf, false, &o);
    if (o.signal || o.status != 0)
        fail_msg("under %s: signal %d, status %d\n%s%s", conf, o.signal, o.status, o.out, o.err);
}

static void test_thread_peak_without_profiling(void **state)
{
    (void)state;
    expect_suite_passes_under("prof:false");
}

static void test_thread_peak_dense_sampling(void **state)
{
    (void)state;
    expect_suite_passes_under("lg_prof_sample:10");
}

static void test_thread_peak_without_cache(void **state)
{
    (void)state;
    expect_suite_passes_under("tcache:false");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "suite"))
        return cmocka_run_group_tests_name("under SALLOC_CONF", tests, NULL, NULL) ? 1 : 0;
    const struct CMUnitTest children[] = {
        cmocka_unit_test(test_thread_peak_without_profiling),
        cmocka_unit_test(test_thread_peak_dense_sampling),
        cmocka_unit_test(test_thread_peak_without_cache),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed + cmocka_run_group_tests_name("children", children, NULL, NULL);
}
