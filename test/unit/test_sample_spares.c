/*
 * test_sample_spares.c: the freed mappings each sample shard keeps for its
 * next samples (prof.c, "spare mappings").
 *
 *   - a freed sample's mapping comes back to the thread's next sample of
 *     its length, at the same address; another length does not take it;
 *   - a shard keeps a few (samples freed in any order), the most recently
 *     freed first out, up to a count and a byte bound; a mapping freed
 *     when they are full pushes the ones freed longest ago out to
 *     sampled_pages' cache, so a spare of a length no longer sampled does
 *     not keep out the length sampled now;
 *   - a sample freed by another thread leaves its mapping to the shard of
 *     the thread that took it, whose next sample gets it;
 *   - spares count as dirty, malloc_trim purges them, and so does decay
 *     once they are idle longer than dirty_decay_ms; with dirty_decay_ms 0
 *     there are none;
 *   - a new thread samples on the shard an exited thread left its spares
 *     in, and reuses them: threads started one after another keep one
 *     shard's spares, not one set per thread;
 *   - threads alive at once get shards of their own, however many came
 *     and went before them;
 *   - in a forked child the parent's other threads hold no shard: the
 *     child's new thread takes one they held, and its spares.
 */
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "dump.h"
#include "pageheap.h"
#include "prof.h"
#include "sampled_pages.h"
#include "tcache.h"
#include "unit.h"

#define SMALL 64                 /* a small sample: one salloc page */
#define OTHER (3 * SA_PAGE_SIZE) /* a sample of another length */
#define SPARES_MAX PROF_SHARD_SPARES
#define SPARE_BYTES_MAX PROF_SHARD_SPARE_BYTES

static long saved_decay;

static int setup(void **state)
{
    (void)state;
    saved_decay = pageheap_decay_ms();
    prof_reset(0); /* R = 1 byte: every allocation is sampled */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pageheap_set_decay_ms(saved_decay);
    prof_reset(19);
    return 0;
}

/* A sampled allocation of `size` bytes: the rate change reaches a thread
 * within its next check-in, so allocate until one is sampled. */
static char *sampled_malloc(size_t size)
{
    for (int i = 0; i < (1 << 20); i++) {
        char *p = malloc(size);
        assert_non_null(p);
        if (prof_is_sampled(p))
            return p;
        free(p);
    }
    fail_msg("no allocation of %zu bytes was sampled", size);
    return NULL;
}

/* Whether the page of `p` is resident (false too if no longer mapped). */
static bool page_resident(const void *p)
{
    unsigned char vec;
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)(os_page_size() - 1));
    return mincore(page, os_page_size(), &vec) == 0 && (vec & 1);
}

/* With dirty_decay_ms `decay_ms` and no spare left by an earlier test: a
 * small sample, written with `fill` and freed; its address. */
static char *sampled_and_freed(long decay_ms, int fill)
{
    pageheap_set_decay_ms(decay_ms);
    malloc_trim(0);
    char *p = sampled_malloc(SMALL);
    memset(p, fill, SMALL);
    free(p);
    return p;
}

static void test_spare_reused_by_the_next_sample_of_its_length(void **state)
{
    (void)state;
    char *p = sampled_and_freed(10000, 0xab);
    assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    char *other = sampled_malloc(OTHER); /* another length: not the spare */
    assert_ptr_not_equal(other, p);
    assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    char *q = sampled_malloc(SMALL);
    assert_ptr_equal(q, p); /* the spare, unpurged */
    assert_int_equal(prof_spare_bytes(), 0);
    assert_int_equal((unsigned char)q[SMALL - 1], 0xab);
    free(q);
    free(other);
}

/* A thread keeps a few samples live and frees them in any order: each
 * freed mapping waits in the shard (a shard of one spare sent all but one
 * to sampled_pages' shared cache), and the next samples of the length take
 * them back, the most recently freed first. */
static void test_spares_hold_samples_freed_in_any_order(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    size_t cache_before = sampled_pages_dirty();
    char *a = sampled_malloc(SMALL), *b = sampled_malloc(SMALL), *c = sampled_malloc(SMALL);
    free(b);
    free(a);
    free(c);
    assert_int_equal(prof_spare_bytes(), 3 * SA_PAGE_SIZE);
    assert_int_equal(sampled_pages_dirty(), cache_before); /* none went there */
    assert_ptr_equal(sampled_malloc(SMALL), c);
    assert_ptr_equal(sampled_malloc(SMALL), a);
    assert_ptr_equal(sampled_malloc(SMALL), b);
    assert_int_equal(prof_spare_bytes(), 0);
    free(a);
    free(b);
    free(c);
}

/* At most SPARES_MAX spares and SPARE_BYTES_MAX bytes of them a shard: the
 * rest wait in sampled_pages' cache, so a thread that freed many samples
 * at once keeps no more than that for itself.  The shard keeps the ones
 * freed last. */
static void test_spares_are_bounded(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    char *small[SPARES_MAX + 1];
    for (int i = 0; i <= SPARES_MAX; i++)
        small[i] = sampled_malloc(SMALL);
    for (int i = 0; i <= SPARES_MAX; i++)
        free(small[i]);
    assert_int_equal(prof_spare_bytes(), SPARES_MAX * SA_PAGE_SIZE);
    assert_int_equal(sampled_pages_dirty(), SA_PAGE_SIZE); /* the one over */
    for (int i = SPARES_MAX; i >= 1; i--) /* small[0], freed first, went out */
        assert_ptr_equal(sampled_malloc(SMALL), small[i]);
    assert_int_equal(prof_spare_bytes(), 0);
    for (int i = 1; i <= SPARES_MAX; i++)
        free(small[i]);
    malloc_trim(0);
    enum { N = SPARE_BYTES_MAX / OTHER + 1 };
    char *other[N];
    for (int i = 0; i < N; i++)
        other[i] = sampled_malloc(OTHER);
    for (int i = 0; i < N; i++)
        free(other[i]);
    assert_int_equal(prof_spare_bytes(), (N - 1) * OTHER);
    assert_int_equal(sampled_pages_dirty(), OTHER);
}

/* A spare of a length the thread samples no more (start-up's small one)
 * leaves room for the length it samples now, the shard's whole byte bound:
 * the big mapping pushes it out, and comes back to the next sample of its
 * length from the shard.  (Kept first come, the small spare stayed, and
 * every big sample went through sampled_pages' shared cache.) */
static void test_a_new_length_pushes_out_an_old_spare(void **state)
{
    (void)state;
    sampled_and_freed(10000, 1); /* a SMALL spare */
    assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    size_t cache_before = sampled_pages_dirty();
    for (int i = 0; i < 3; i++) {
        char *big = sampled_malloc(SPARE_BYTES_MAX);
        free(big);
        assert_int_equal(prof_spare_bytes(), SPARE_BYTES_MAX);
        /* the small spare went to the cache once; the big one never */
        assert_int_equal(sampled_pages_dirty(), cache_before + SA_PAGE_SIZE);
    }
    malloc_trim(0);
}

static pthread_barrier_t step;
static char *taken_by_thread, *taken_again;

/* Takes a sample, lets main free it, then takes another. */
static void *taker(void *arg)
{
    (void)arg;
    taken_by_thread = sampled_malloc(SMALL);
    pthread_barrier_wait(&step); /* main frees it and samples */
    pthread_barrier_wait(&step);
    taken_again = sampled_malloc(SMALL);
    return NULL;
}

static void test_spare_goes_home_when_freed_elsewhere(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    assert_int_equal(pthread_barrier_init(&step, NULL, 2), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, taker, NULL), 0);
    pthread_barrier_wait(&step);
    free(taken_by_thread); /* freed here: the spare of the taker's shard */
    char *mine = sampled_malloc(SMALL);
    assert_ptr_not_equal(mine, taken_by_thread);
    pthread_barrier_wait(&step);
    pthread_join(t, NULL);
    assert_ptr_equal(taken_again, taken_by_thread);
    free(taken_again);
    free(mine);
    pthread_barrier_destroy(&step);
}

static void test_spare_is_dirty_and_purged_by_trim(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    size_t resident_before = 0, sz = sizeof(size_t);
    uint64_t epoch = 1;
    assert_int_equal(mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)), 0);
    assert_int_equal(mallctl("stats.resident", &resident_before, &sz, NULL, 0), 0);
    char *p = sampled_malloc(SMALL);
    memset(p, 1, SMALL);
    free(p);
    assert_true(page_resident(p));
    assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    size_t resident = 0;
    assert_int_equal(mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)), 0);
    assert_int_equal(mallctl("stats.resident", &resident, &sz, NULL, 0), 0);
    assert_true(resident >= resident_before + SA_PAGE_SIZE); /* counted while it waits */
    assert_int_equal(malloc_trim(0), 1);
    assert_int_equal(prof_spare_bytes(), 0);
    assert_false(page_resident(p));
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_spare_decays_when_idle(void **state)
{
    (void)state;
    char *p = sampled_and_freed(50, 1);
    assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    sleep_ms(150); /* idle past the decay time, and past a check's step */
    /* The next free of a sample runs the decay check: the idle spare goes,
     * the one just freed stays. */
    free(sampled_malloc(OTHER));
    assert_int_equal(prof_spare_bytes(), OTHER);
    assert_false(page_resident(p));
}

static void test_no_spare_with_decay_zero(void **state)
{
    (void)state;
    char *p = sampled_and_freed(0, 1);
    assert_int_equal(prof_spare_bytes(), 0);
    assert_false(page_resident(p)); /* purged on the way back */
}

/* dirty_decay_ms set to 0 as a program sets it (which purges what waits). */
static void set_decay_zero(void)
{
    ssize_t zero = 0;
    assert_int_equal(mallctl("arenas.dirty_decay_ms", NULL, NULL, &zero, sizeof(zero)), 0);
}

/* dirty_decay_ms set to 0 while sampled mappings wait dirty (a shard's
 * spare, and one in sampled_pages' cache): both purged at once.  Their
 * decay passes skip a time of 0, so they once stayed until malloc_trim. */
static void test_decay_set_to_zero_purges_what_waits(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    /* More than a shard keeps: the last ones freed go to the cache. */
    char *p[2 * SPARES_MAX];
    for (int i = 0; i < 2 * SPARES_MAX; i++) {
        p[i] = sampled_malloc(SMALL);
        memset(p[i], 1, SMALL);
    }
    for (int i = 0; i < 2 * SPARES_MAX; i++)
        free(p[i]);
    assert_true(prof_spare_bytes() > 0);
    assert_true(sampled_pages_dirty() > 0);
    set_decay_zero();
    assert_int_equal(prof_spare_bytes(), 0);
    assert_int_equal(sampled_pages_dirty(), 0);
    for (int i = 0; i < 2 * SPARES_MAX; i++)
        assert_false(page_resident(p[i]));
}

/* dirty_decay_ms set to 0 while a sampled free is on its way to keeping
 * the mapping as a spare (after it read the old time): the purge that the
 * setting makes has passed the shard already, so the free gives the spare
 * back itself.  It once waited, dirty, for malloc_trim. */
static void decay_to_zero_once(void)
{
    prof_test_before_spare_keep = NULL;
    sampled_pages_test_before_keep = NULL;
    set_decay_zero();
}

static void test_decay_set_to_zero_during_a_sampled_free(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    char *p = sampled_malloc(SMALL);
    memset(p, 1, SMALL);
    prof_test_before_spare_keep = decay_to_zero_once;
    free(p);
    assert_null(prof_test_before_spare_keep); /* the setting ran */
    assert_int_equal(prof_spare_bytes(), 0);
    assert_false(page_resident(p));
}

/* The same for a mapping on its way into sampled_pages' cache (the shard's
 * spares full): the put gives it back itself. */

static void test_decay_set_to_zero_during_a_put_to_the_cache(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    char *p[SPARES_MAX + 1];
    for (int i = 0; i <= SPARES_MAX; i++) {
        p[i] = sampled_malloc(SMALL);
        memset(p[i], 1, SMALL);
    }
    for (int i = 0; i < SPARES_MAX; i++)
        free(p[i]); /* the shard's spares */
    assert_int_equal(prof_spare_bytes(), SPARES_MAX * SA_PAGE_SIZE);
    sampled_pages_test_before_keep = decay_to_zero_once;
    free(p[SPARES_MAX]); /* to the cache */
    assert_null(sampled_pages_test_before_keep); /* the setting ran */
    assert_int_equal(sampled_pages_dirty(), 0);
    assert_false(page_resident(p[SPARES_MAX]));
}

/* A thread that takes a small sample, writes `fill` into it, frees it and
 * exits; `arg`: where to put the sample's address. */
static void *sample_and_exit(void *arg)
{
    char *p = sampled_malloc(SMALL);
    memset(p, 0x5a, SMALL);
    free(p);
    *(char **)arg = p;
    return NULL;
}

static char *run_sampling_thread(void)
{
    char *p = NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, sample_and_exit, &p), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_non_null(p);
    return p;
}

/* A program that starts a thread per task: each thread's sample reuses the
 * mapping the thread before it freed, and the spares stay those of one
 * shard.  With shards handed out round robin, each thread left a spare in
 * a shard of its own, dirty until decay: 8 threads, 8 pages. */
static void test_threads_one_after_another_reuse_one_shards_spares(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    char *first = run_sampling_thread();
    assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    for (int i = 0; i < 8; i++) {
        char *p = run_sampling_thread();
        assert_ptr_equal(p, first);
        assert_int_equal(prof_spare_bytes(), SA_PAGE_SIZE);
    }
}

enum { LIVE_THREADS = PROF_SAMPLE_SHARDS - 1 }; /* with the main thread, one a shard */
static pthread_barrier_t all_started;
static unsigned live_shard[LIVE_THREADS];

static void *report_shard(void *arg)
{
    free(malloc(16)); /* the thread's cache, and its shard */
    live_shard[(uintptr_t)arg] = tcache_get()->prof.shard;
    pthread_barrier_wait(&all_started); /* alive until all have one */
    return NULL;
}

/* Starts LIVE_THREADS threads, each alive until all have a shard, and
 * whether those and the calling thread hold PROF_SAMPLE_SHARDS different
 * shards. */
static bool live_threads_hold_different_shards(void)
{
    if (pthread_barrier_init(&all_started, NULL, LIVE_THREADS + 1) != 0)
        return false;
    pthread_t t[LIVE_THREADS];
    for (uintptr_t i = 0; i < LIVE_THREADS; i++)
        if (pthread_create(&t[i], NULL, report_shard, (void *)i) != 0)
            return false;
    pthread_barrier_wait(&all_started);
    for (int i = 0; i < LIVE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&all_started);
    bool taken[PROF_SAMPLE_SHARDS] = {false};
    taken[tcache_get()->prof.shard] = true;
    for (int i = 0; i < LIVE_THREADS; i++) {
        if (live_shard[i] >= PROF_SAMPLE_SHARDS || taken[live_shard[i]])
            return false;
        taken[live_shard[i]] = true;
    }
    return true;
}

/* Up to PROF_SAMPLE_SHARDS threads alive at once never share a shard, whatever
 * threads came and went before them (round robin, after 3 exited threads,
 * gave the 13th of these the main thread's shard). */
static void test_live_threads_get_shards_of_their_own(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        run_sampling_thread();
    assert_true(live_threads_hold_different_shards());
}

enum { PARKED = 4 };
static pthread_barrier_t parked;
static unsigned parked_shard[PARKED];

/* A thread alive across the fork.  The first leaves 3 spares in its shard
 * (the others 1, from their first allocation, sampled like all here). */
static void *park(void *arg)
{
    uintptr_t i = (uintptr_t)arg;
    char *p[3] = {sampled_malloc(SMALL), i == 0 ? sampled_malloc(SMALL) : NULL,
                  i == 0 ? sampled_malloc(SMALL) : NULL};
    for (int k = 0; k < 3; k++)
        free(p[k]);
    parked_shard[i] = tcache_get()->prof.shard;
    pthread_barrier_wait(&parked); /* started */
    pthread_barrier_wait(&parked); /* main has forked */
    return NULL;
}

static void *report_one_shard(void *arg)
{
    free(malloc(16));
    *(unsigned *)arg = tcache_get()->prof.shard;
    return NULL;
}

/* A forked child has only the thread that forked: the parent's other
 * threads, alive at the fork, hold no shard there, and the child's first
 * new thread takes the shard the first of them left 3 spares in.  Counted
 * still, they kept the child's threads off their shards and spares. */
static void test_forked_child_counts_only_its_own_thread(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer stops a child that starts a thread after a fork
     * from a process with threads. */
    print_message("skipped: tsan does not start threads after a multi-threaded fork\n");
    skip();
#endif
    pageheap_set_decay_ms(10000);
    malloc_trim(0);
    assert_int_equal(pthread_barrier_init(&parked, NULL, PARKED + 1), 0);
    pthread_t t[PARKED];
    for (uintptr_t i = 0; i < PARKED; i++)
        assert_int_equal(pthread_create(&t[i], NULL, park, (void *)i), 0);
    pthread_barrier_wait(&parked);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        unsigned shard = PROF_SAMPLE_SHARDS;
        pthread_t c;
        if (pthread_create(&c, NULL, report_one_shard, &shard) != 0 || pthread_join(c, NULL) != 0)
            _exit(2);
        _exit(shard == parked_shard[0] ? 0 : 1);
    }
    pthread_barrier_wait(&parked);
    for (int i = 0; i < PARKED; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&parked);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spare_reused_by_the_next_sample_of_its_length),
        cmocka_unit_test(test_spares_hold_samples_freed_in_any_order),
        cmocka_unit_test(test_spares_are_bounded),
        cmocka_unit_test(test_a_new_length_pushes_out_an_old_spare),
        cmocka_unit_test(test_spare_goes_home_when_freed_elsewhere),
        cmocka_unit_test(test_spare_is_dirty_and_purged_by_trim),
        cmocka_unit_test(test_spare_decays_when_idle),
        cmocka_unit_test(test_no_spare_with_decay_zero),
        cmocka_unit_test(test_decay_set_to_zero_purges_what_waits),
        cmocka_unit_test(test_decay_set_to_zero_during_a_sampled_free),
        cmocka_unit_test(test_decay_set_to_zero_during_a_put_to_the_cache),
        cmocka_unit_test(test_threads_one_after_another_reuse_one_shards_spares),
        cmocka_unit_test(test_live_threads_get_shards_of_their_own),
        cmocka_unit_test(test_forked_child_counts_only_its_own_thread),
    };
    return cmocka_run_group_tests_name("sample_spares", tests, setup, teardown);
}
