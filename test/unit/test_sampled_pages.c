/*
 * test_sampled_pages.c: the cache of sampled allocations' mappings
 * (src/sampled_pages.h).
 *
 *   - a freed mapping comes back, unpurged, to the next sample of its
 *     length: same address and span record (parked in between, so free()
 *     would not take it), not known to be zero, contents kept;
 *   - with dirty_decay_ms:0 it is purged on the way in (reads as zero);
 *   - sampled_pages_purge() (malloc_trim) purges every kept mapping and the
 *     dirty count goes to zero;
 *   - a kept mapping idle longer than the decay time is purged by a later
 *     put;
 *   - beyond 32 dirty mappings of one length, a freed one goes back to
 *     its region, dirty: a later sample carves the same pages, contents
 *     kept, with nothing purged or mapped anew; a decay pass purges the
 *     runs of a region dirty longer than the decay time, and
 *     sampled_pages_purge() all of them;
 *   - the cache is bounded: per length, in bytes, and in mapping length;
 *   - threads that get and put one length at once (its hot slot, taken
 *     without the lock) never hold the same mapping together;
 *   - thousands of live samples' pages share a few regions, not a kernel
 *     mapping each (vm.max_map_count); runs the cache does not keep go
 *     back to their region, and later samples of any length reuse them,
 *     dirty ones first; an aligned run is aligned.
 */
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dump.h"
#include "prof.h"
#include "sampled_pages.h"
#include "unit.h"

#define LEN (4 * SA_PAGE_SIZE)

/* The mapping of a span from sampled_pages_get. */
static char *mem_of(struct span *s) { return (char *)s->start; }

static long saved_decay;

static int setup(void **state)
{
    (void)state;
    saved_decay = pageheap_decay_ms();
    sampled_pages_purge();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pageheap_set_decay_ms(saved_decay);
    return 0;
}

/* Resident OS pages of [p, p + len), from mincore(2). */
static size_t resident_pages(void *p, size_t len)
{
    unsigned char vec[LEN / 4096 + 1];
    assert_true(len / os_page_size() <= sizeof(vec));
    assert_int_equal(mincore(p, len, vec), 0);
    size_t n = 0;
    for (size_t i = 0; i < len / os_page_size(); i++)
        n += vec[i] & 1;
    return n;
}

static void test_sampled_pages_reused_unpurged(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    bool zeroed;
    struct span *sp = sampled_pages_get(LEN, 16, &zeroed);
    assert_non_null(sp);
    char *p = mem_of(sp);
    assert_true(zeroed);
    assert_int_equal(sp->state, SPAN_PARKED); /* free() would not accept it */
    assert_ptr_equal(pagemap_span(p), sp);
    assert_null(pageheap_sampled_span(p));
    memset(p, 0xab, LEN);
    size_t dirty = sampled_pages_dirty();
    sampled_pages_put(sp);
    assert_int_equal(sampled_pages_dirty(), dirty + LEN);
    struct span *sq = sampled_pages_get(LEN, 16, &zeroed);
    assert_ptr_equal(sq, sp); /* the same mapping and record, no new registration */
    char *q = mem_of(sq);
    assert_false(zeroed); /* calloc must clear it */
    assert_int_equal((unsigned char)q[LEN - 1], 0xab);
    assert_int_equal(resident_pages(q, LEN), LEN / os_page_size()); /* no refault */
    assert_int_equal(sampled_pages_dirty(), dirty);
    sampled_pages_put(sq);
}

static void test_sampled_pages_decay_zero_purges_at_once(void **state)
{
    (void)state;
    pageheap_set_decay_ms(0);
    bool zeroed;
    struct span *sp = sampled_pages_get(LEN, 16, &zeroed);
    char *p = mem_of(sp);
    memset(p, 0xcd, LEN);
    sampled_pages_put(sp);
    assert_int_equal(sampled_pages_dirty(), 0);
    struct span *sq = sampled_pages_get(LEN, 16, &zeroed);
    char *q = mem_of(sq);
    assert_ptr_equal(q, p);
    assert_true(zeroed);
    assert_int_equal(resident_pages(q, LEN), 0);
    assert_int_equal(q[100], 0);
    sampled_pages_put(sq);
}

static void test_sampled_pages_purge_empties_the_dirty_cache(void **state)
{
    (void)state;
    pageheap_set_decay_ms(-1); /* only an explicit purge */
    bool zeroed;
    struct span *sp[3];
    char *p[3];
    for (int i = 0; i < 3; i++) {
        sp[i] = sampled_pages_get(LEN, 16, &zeroed);
        p[i] = mem_of(sp[i]);
        memset(p[i], 1, LEN);
    }
    for (int i = 0; i < 3; i++)
        sampled_pages_put(sp[i]);
    assert_true(sampled_pages_dirty() >= 3 * LEN);
    assert_true(sampled_pages_purge() >= 3 * LEN);
    assert_int_equal(sampled_pages_dirty(), 0);
    assert_true(sampled_pages_cached() >= 3 * LEN);
    for (int i = 0; i < 3; i++)
        assert_int_equal(resident_pages(p[i], LEN), 0);
}

static void test_sampled_pages_idle_mappings_decay(void **state)
{
    (void)state;
    pageheap_set_decay_ms(40);
    bool zeroed;
    struct span *sp = sampled_pages_get(LEN, 16, &zeroed);
    struct span *other = sampled_pages_get(SA_PAGE_SIZE, 16, &zeroed);
    char *p = mem_of(sp);
    memset(p, 1, LEN);
    sampled_pages_put(sp);
    assert_int_equal(sampled_pages_dirty(), LEN);
    struct timespec nap = {0, 150 * 1000000L};
    nanosleep(&nap, NULL);
    sampled_pages_put(other); /* any later put decays */
    assert_int_equal(sampled_pages_dirty(), SA_PAGE_SIZE);
    assert_int_equal(resident_pages(p, LEN), 0);
}

static void test_sampled_pages_cache_is_bounded(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    sampled_pages_purge();
    size_t before = sampled_pages_cached();
    enum { N = 40 };
    struct span *p[N];
    bool zeroed;
    for (int i = 0; i < N; i++)
        p[i] = sampled_pages_get(LEN, 16, &zeroed);
    for (int i = 0; i < N; i++)
        sampled_pages_put(p[i]);
    /* At most 32 dirty mappings of one length are kept: the other 8 went
     * back to their region, still dirty. */
    assert_true(sampled_pages_cached() - before <= 32 * LEN);
    assert_int_equal(sampled_pages_dirty(), N * LEN);
    for (int i = 0; i < 3 * N; i++)
        p[i % N] = sampled_pages_get(LEN, 16, &zeroed);
    for (int i = 0; i < N; i++)
        sampled_pages_put(p[i]);
    assert_true(sampled_pages_cached() - before <= 64 * LEN);
    /* Longer than SAMPLED_CACHE_MAX_PAGES: never kept. */
    size_t big = (SAMPLED_CACHE_MAX_PAGES + 1) * SA_PAGE_SIZE, cached = sampled_pages_cached();
    struct span *b = sampled_pages_get(big, 16, &zeroed);
    assert_true(zeroed);
    sampled_pages_put(b);
    assert_int_equal(sampled_pages_cached(), cached);
    /* 8 MiB in all, across lengths. */
    for (size_t pages = 1; pages <= SAMPLED_CACHE_MAX_PAGES; pages++) {
        struct span *q[16];
        for (int i = 0; i < 16; i++)
            q[i] = sampled_pages_get(pages * SA_PAGE_SIZE, 16, &zeroed);
        for (int i = 0; i < 16; i++)
            sampled_pages_put(q[i]);
    }
    assert_true(sampled_pages_cached() <= (size_t)8 << 20);
}

/* 40 mappings of one length freed at once, then taken again: the cache
 * keeps 32, dirty; the other 8 go back to their region, dirty, and the
 * next samples carve the same pages, contents kept (no page purged, none
 * mapped anew).  sampled_pages_purge() then purges both. */
static void test_sampled_pages_beyond_dirty_bound_back_to_region_dirty(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    sampled_pages_purge();
    enum { N = 40, DIRTY = 32 };
    struct span *p[N], *q[N];
    uintptr_t at[N];
    bool zeroed;
    for (int i = 0; i < N; i++) {
        p[i] = sampled_pages_get(LEN, 16, &zeroed);
        assert_non_null(p[i]);
        at[i] = p[i]->start;
        mem_of(p[i])[0] = 'x';
    }
    size_t cached = sampled_pages_cached(), retained = sampled_pages_retained();
    for (int i = 0; i < N; i++)
        sampled_pages_put(p[i]);
    assert_int_equal(sampled_pages_cached() - cached, DIRTY * LEN);
    assert_int_equal(sampled_pages_dirty(), N * LEN);
    assert_int_equal(sampled_pages_retained(), retained); /* none purged */
    size_t mappings = unit_mapping_count();
    for (int i = 0; i < N; i++) {
        q[i] = sampled_pages_get(LEN, 16, &zeroed);
        bool known = false;
        for (int j = 0; j < N; j++)
            known |= q[i]->start == at[j];
        assert_true(known); /* the same pages, cache or region */
        assert_false(zeroed);
        assert_int_equal(mem_of(q[i])[0], 'x');
    }
    assert_int_equal(unit_mapping_count(), mappings);
    assert_int_equal(sampled_pages_dirty(), 0);
    for (int i = 0; i < N; i++)
        sampled_pages_put(q[i]);
    assert_true(sampled_pages_purge() >= N * LEN);
    assert_int_equal(sampled_pages_dirty(), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(resident_pages((void *)at[i], LEN), 0);
}

/* A region's runs dirty longer than the decay time are purged by a later
 * put's decay pass, whole runs of neighbours at a time. */
static void test_sampled_pages_region_runs_decay(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    sampled_pages_purge();
    enum { N = 100 };
    struct span *p[N];
    uintptr_t at[N];
    bool zeroed;
    /* Taken first: taken later, it would be carved from the dirty runs. */
    struct span *other = sampled_pages_get(2 * SA_PAGE_SIZE, 16, &zeroed);
    for (int i = 0; i < N; i++) {
        assert_non_null(p[i] = sampled_pages_get(SA_PAGE_SIZE, 16, &zeroed));
        at[i] = p[i]->start;
        memset(mem_of(p[i]), 7, SA_PAGE_SIZE);
    }
    pageheap_set_decay_ms(40);
    for (int i = 0; i < N; i++)
        sampled_pages_put(p[i]);
    size_t resident = 0;
    for (int i = 0; i < N; i++)
        resident += resident_pages((void *)at[i], SA_PAGE_SIZE);
    assert_int_equal(resident, N * (SA_PAGE_SIZE / os_page_size())); /* not purged yet */
    assert_true(sampled_pages_dirty() >= N * SA_PAGE_SIZE);
    struct timespec nap = {0, 150 * 1000000L};
    nanosleep(&nap, NULL);
    sampled_pages_put(other); /* any later put decays */
    assert_int_equal(sampled_pages_dirty(), 2 * SA_PAGE_SIZE);
    for (int i = 0; i < N; i++)
        assert_int_equal(resident_pages((void *)at[i], SA_PAGE_SIZE), 0);
    sampled_pages_purge();
}

/* Each round: a mapping of LEN, filled with this thread's mark, checked
 * still whole after a yield, and put back.  Two owners of one mapping at
 * once would overwrite each other's mark. */
enum { RACERS = 4, RACE_ROUNDS = 20000 };

static void *race_one_length(void *arg)
{
    unsigned char mark = (unsigned char)(uintptr_t)arg;
    uintptr_t bad = 0;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        bool zeroed;
        struct span *sp = sampled_pages_get(LEN, 16, &zeroed);
        if (!sp)
            return (void *)1;
        char *p = mem_of(sp);
        p[0] = (char)mark;
        p[LEN - 1] = (char)mark;
        if (i % 64 == 0)
            sched_yield();
        bad += (unsigned char)p[0] != mark || (unsigned char)p[LEN - 1] != mark;
        sampled_pages_put(sp);
    }
    return (void *)bad;
}

static void test_sampled_pages_one_owner_at_a_time(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    pthread_t t[RACERS];
    for (uintptr_t i = 0; i < RACERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race_one_length, (void *)(i + 1)), 0);
    for (int i = 0; i < RACERS; i++) {
        void *bad;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_int_equal((uintptr_t)bad, 0);
    }
    /* Everything came back: the cache holds at most 64 of this length. */
    assert_true(sampled_pages_cached() <= (size_t)8 << 20);
    sampled_pages_purge();
    assert_int_equal(sampled_pages_dirty(), 0);
}

enum { MANY = 3000 };
static struct span *many[MANY];

/* Before regions, each of these was a mapping of its own: 3000 more. */
static void test_sampled_pages_share_regions(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    bool zeroed;
    size_t before = unit_mapping_count();
    for (int i = 0; i < MANY; i++) {
        size_t pages = i % 7 == 0 ? 1 + (size_t)i % SAMPLED_CACHE_MAX_PAGES : 1;
        assert_non_null(many[i] = sampled_pages_get(pages * SA_PAGE_SIZE, 16, &zeroed));
        memset(mem_of(many[i]), 0x5a, SA_PAGE_SIZE);
    }
    size_t during = unit_mapping_count();
    fprintf(stderr, "# %d live runs: %zu mappings more\n", MANY, during - before);
    assert_true(during - before < 40);
    for (int i = 0; i < MANY; i++)
        sampled_pages_put(many[i]);
}

/* Runs beyond the cache's bounds go back to their region, dirty: taking
 * as many again maps nothing new and gets dirty runs first; once purged, a
 * run said to be zero is. */
static void test_sampled_pages_runs_return_to_their_region(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    bool zeroed;
    for (int i = 0; i < MANY; i++) {
        assert_non_null(many[i] = sampled_pages_get(SA_PAGE_SIZE, 16, &zeroed));
        memset(mem_of(many[i]), 0x5a, SA_PAGE_SIZE);
    }
    size_t retained = sampled_pages_retained(), dirty = sampled_pages_dirty();
    for (int i = 0; i < MANY; i++)
        sampled_pages_put(many[i]);
    /* All dirty, in the cache or back in their regions: none purged. */
    assert_int_equal(sampled_pages_dirty() - dirty, MANY * SA_PAGE_SIZE);
    assert_int_equal(sampled_pages_retained(), retained);
    size_t before = unit_mapping_count();
    for (int i = 0; i < MANY / 2; i++) {
        assert_non_null(many[i] = sampled_pages_get(SA_PAGE_SIZE, 16, &zeroed));
        assert_false(zeroed); /* a dirty run while there is one */
        assert_int_equal(mem_of(many[i])[SA_PAGE_SIZE - 1], 0x5a);
    }
    for (int i = 0; i < MANY / 2; i++)
        sampled_pages_put(many[i]);
    /* Purged: the regions' free runs, stats.retained. */
    sampled_pages_purge();
    assert_true(sampled_pages_retained() >= retained + (MANY - 64) * SA_PAGE_SIZE);
    size_t zero_runs = 0;
    for (int i = 0; i < MANY; i++) {
        size_t pages = 1 + (size_t)i % 3; /* other lengths reuse them too */
        assert_non_null(many[i] = sampled_pages_get(pages * SA_PAGE_SIZE, 16, &zeroed));
        if (zeroed) {
            zero_runs++;
            for (size_t k = 0; k < pages * SA_PAGE_SIZE; k++)
                assert_int_equal(mem_of(many[i])[k], 0);
        }
    }
    assert_true(unit_mapping_count() <= before + 2); /* at most a new region */
    assert_true(zero_runs > MANY / 2);
    for (int i = 0; i < MANY; i++)
        sampled_pages_put(many[i]);
}

/* ---- a burst of sampled frees, through malloc and free ---- */

/* volatile: gcc takes free() for a function that calls no code of the
 * program's, and would read the count before the frees as after them. */
static volatile unsigned madvise_calls;

static int counting_madvise(void *addr, size_t len, int advice)
{
    madvise_calls++;
    return madvise(addr, len, advice);
}

/* 2000 sampled blocks freed at once, past the shard's spares and the
 * cache: their pages wait in their regions, dirty, and a purge gives them
 * back a run of neighbours at a time.  Purged as each was freed, they cost
 * one madvise each (node's worker threads at lg_prof_sample:10: 48,901). */
static void test_sampled_pages_burst_of_frees_purges_in_runs(void **state)
{
    (void)state;
    pageheap_set_decay_ms(10000);
    sampled_pages_purge();
    size_t saved_lg = prof_lg_sample_get();
    prof_lg_sample_set(0); /* every allocation sampled */
    enum { BURST = 2000 };
    static void *p[BURST];
    size_t sampled = 0;
    for (int i = 0; i < BURST; i++) {
        assert_non_null(p[i] = malloc(100));
        memset(p[i], 1, 100);
        sampled += prof_is_sampled(p[i]);
    }
    prof_lg_sample_set(saved_lg);
    assert_true(sampled >= BURST * 9 / 10);
    madvise_calls = 0;
    os_syscalls.madvise = counting_madvise;
    for (int i = 0; i < BURST; i++)
        free(p[i]);
    unsigned at_free = madvise_calls;
    size_t dirty = sampled_pages_dirty();
    size_t purged = sampled_pages_purge();
    unsigned at_purge = madvise_calls - at_free;
    os_syscalls.madvise = madvise;
    fprintf(stderr, "# %zu sampled blocks freed: %u madvise calls then, %u to purge %zu KiB\n",
            sampled, at_free, at_purge, purged >> 10);
    assert_true(dirty >= (sampled - 64) * SA_PAGE_SIZE); /* kept resident until the purge */
    assert_true(purged >= (sampled - 64) * SA_PAGE_SIZE);
    assert_true(at_free < 20);
    assert_true(at_purge < BURST / 10);
    assert_int_equal(sampled_pages_dirty(), 0);
}

/* The failure regions fixed, end to end: 70,000 live samples, more than
 * the kernel's default vm.max_map_count (65,530).  With a mapping each,
 * malloc returned NULL once the limit was reached. */
static void test_sampled_pages_more_live_samples_than_the_map_limit(void **state)
{
    (void)state;
    enum { LIVE = 70000 };
    void **p = calloc(LIVE, sizeof(void *));
    assert_non_null(p);
    size_t saved = prof_lg_sample_get(), before = unit_mapping_count();
    prof_lg_sample_set(0); /* every allocation sampled */
    size_t sampled = 0;
    for (int i = 0; i < LIVE; i++) {
        p[i] = malloc(16 + (size_t)i % 1000);
        if (!p[i])
            fail_msg("malloc NULL after %d live samples", i);
        sampled += prof_is_sampled(p[i]);
    }
    prof_lg_sample_set(saved);
    size_t during = unit_mapping_count();
    fprintf(stderr, "# %zu live samples: %zu mappings more\n", sampled, during - before);
    assert_true(sampled > LIVE * 99 / 100);
    assert_true(during - before < 400);
    for (int i = 0; i < LIVE; i++)
        free(p[i]);
    free(p);
}

static void test_sampled_pages_aligned_runs(void **state)
{
    (void)state;
    bool zeroed;
    for (size_t align = 16; align <= ((size_t)1 << 20); align *= 4) {
        struct span *s = sampled_pages_get(3 * SA_PAGE_SIZE, align, &zeroed);
        assert_non_null(s);
        assert_int_equal(s->start % (align > SA_PAGE_SIZE ? align : SA_PAGE_SIZE), 0);
        assert_int_equal(s->npages, 3);
        sampled_pages_put(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_pages_reused_unpurged),
        cmocka_unit_test(test_sampled_pages_decay_zero_purges_at_once),
        cmocka_unit_test(test_sampled_pages_purge_empties_the_dirty_cache),
        cmocka_unit_test(test_sampled_pages_idle_mappings_decay),
        cmocka_unit_test(test_sampled_pages_beyond_dirty_bound_back_to_region_dirty),
        cmocka_unit_test(test_sampled_pages_region_runs_decay),
        cmocka_unit_test(test_sampled_pages_cache_is_bounded),
        cmocka_unit_test(test_sampled_pages_one_owner_at_a_time),
        cmocka_unit_test(test_sampled_pages_share_regions),
        cmocka_unit_test(test_sampled_pages_runs_return_to_their_region),
        cmocka_unit_test(test_sampled_pages_aligned_runs),
        cmocka_unit_test(test_sampled_pages_burst_of_frees_purges_in_runs),
        cmocka_unit_test(test_sampled_pages_more_live_samples_than_the_map_limit),
    };
    return cmocka_run_group_tests_name("sampled pages", tests, setup, teardown);
}
