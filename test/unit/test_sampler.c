/*
 * test_sampler.c: the sampler's statistics.
 *
 *   - salloc's libm-free ln and 1 - e^-x against libm;
 *   - the interval draw is exponential with mean R, in every part of its
 *     range (the ziggurat's strips, wedges and tail);
 *   - through the real malloc path, an allocation of usable size Z is
 *     sampled with probability 1 - e^(-Z/R), for several Z and R;
 *   - a block realloc'd is sampled with the probability of its usable
 *     size, moved, kept in place (not decided again) or grown in place (due
 *     for its growth; a sample's record resized);
 *   - rate changes and prof.active reach the thread at once.
 *
 * Statistical checks use fixed seeds (or many draws) and a |z| < 6 bound
 * per check: a false failure has probability below 5e-9 per check (the
 * skewed tails of the binomials' included), under 1e-7 for the whole
 * file.
 */
#include <malloc.h>
#include <math.h>

#include "dump.h"
#include "fmath.h"
#include "init.h"
#include "prof.h"
#include "sampler.h"
#include "unit.h"

#define Z_LIMIT 6.0

/* `hits` successes of trials with the given mean and variance of their sum
 * (independent trials, not necessarily of one probability). */
static void assert_hits(uint64_t hits, double mean, double var, const char *what)
{
    double sd = sqrt(var);
    double z = sd > 0 ? (hits - mean) / sd : 0;
    if (fabs(z) > Z_LIMIT)
        fail_msg("%s: %llu, expected %.1f (z = %.2f)", what, (unsigned long long)hits, mean, z);
}

static void assert_binomial(uint64_t hits, uint64_t n, double p, const char *what)
{
    assert_hits(hits, n * p, n * p * (1 - p), what);
}

static void test_sampler_math_matches_libm(void **state)
{
    (void)state;
    for (double x = 1e-300; x <= 1; x *= 1.01)
        assert_true(fabs(sa_ln(x) - log(x)) <= 2e-15 * fabs(log(x)) + 1e-300);
    /* Densely where the tables' points and the halving at sqrt(2) are,
     * and next to 1, where ln is small. */
    for (double x = 0.70; x <= 1.42; x += 1.0 / 8192)
        assert_true(fabs(sa_ln(x) - log(x)) <= 2e-15 * fabs(log(x)));
    for (int k = 1; k < 4096; k++) {
        double below = 1 - k * 0x1p-53, above = 1 + k * 0x1p-52;
        assert_true(fabs(sa_ln(below) - log(below)) <= 2e-15 * fabs(log(below)));
        assert_true(fabs(sa_ln(above) - log(above)) <= 2e-15 * fabs(log(above)));
    }
    for (double x = 1e-15; x < 1.2; x += x < 1e-3 ? x : 1.0 / 4096)
        assert_true(fabs(sa_one_minus_exp_neg(x) + expm1(-x)) <= 2e-15 * -expm1(-x));
    for (double x = 1e-12; x < 60; x *= 1.01)
        assert_true(fabs(sa_one_minus_exp_neg(x) + expm1(-x)) <= 2e-15 * -expm1(-x));
    for (double x = 0; x < 700; x += 0.37)
        assert_true(fabs(sa_exp_neg(-x) - exp(-x)) <= 2e-15 * exp(-x));
}

/* P(interval < Z) = 1 - e^(-Z/R) for every Z: checked at the deciles, and
 * the mean is R. */
static void test_sampler_intervals_are_exponential(void **state)
{
    (void)state;
    uint64_t prng = 0x12345678abcdefull;
    const uint64_t rate = 1 << 19, n = 400000;
    uint64_t below[9] = {0};
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t x = sampler_draw(&prng, rate);
        sum += (double)x;
        for (int d = 0; d < 9; d++)
            below[d] += x < (int64_t)(-log(1 - (d + 1) / 10.0) * rate);
    }
    for (int d = 0; d < 9; d++)
        assert_binomial(below[d], n, (d + 1) / 10.0, "decile");
    double mean = sum / n, se = rate / sqrt((double)n);
    assert_true(fabs(mean - rate) < Z_LIMIT * se);
}

/* The draw's whole shape: 256 equally likely bins of e^-x (a chi-square
 * test, which sees a wrong ziggurat strip or wedge), the tail beyond the
 * ziggurat's base strip and far beyond it, and the variance R^2. */
static void test_sampler_intervals_follow_the_exponential_everywhere(void **state)
{
    (void)state;
    enum { BINS = 256 };
    uint64_t prng = 0x9e3779b97f4a7c15ull;
    const uint64_t n = 4000000;
    const double rate = 1099511627776.0; /* 2^40: fine-grained intervals */
    static uint64_t bins[BINS];
    uint64_t beyond_r = 0, beyond_14 = 0;
    double sum = 0, sum2 = 0;
    memset(bins, 0, sizeof(bins));
    for (uint64_t i = 0; i < n; i++) {
        double x = (double)sampler_draw(&prng, (uint64_t)rate) / rate;
        sum += x;
        sum2 += x * x;
        unsigned b = (unsigned)(-expm1(-x) * BINS);
        bins[b < BINS ? b : BINS - 1]++;
        beyond_r += x > 7.69711747013104972;
        beyond_14 += x > 14;
    }
    double chi2 = 0, expect = (double)n / BINS;
    for (unsigned b = 0; b < BINS; b++)
        chi2 += (bins[b] - expect) * (bins[b] - expect) / expect;
    /* 255 degrees of freedom: mean 255, sd sqrt(510). */
    if (chi2 > 255 + 6 * sqrt(510.0))
        fail_msg("chi-square over %d bins: %.1f", BINS, chi2);
    assert_binomial(beyond_r, n, exp(-7.69711747013104972), "beyond the base strip");
    assert_binomial(beyond_14, n, exp(-14.0), "far tail");
    double mean = sum / n, var = sum2 / n - mean * mean;
    assert_true(fabs(mean - 1) < Z_LIMIT / sqrt((double)n));
    /* Var of the sample variance of a unit exponential: (mu4 - 1) / n = 8 / n. */
    assert_true(fabs(var - 1) < Z_LIMIT * sqrt(8.0 / (double)n));
}

/* Through malloc itself: the fraction of allocations that land on sampled
 * pages is 1 - e^(-Z/R). */
static void test_sampler_probability_through_malloc(void **state)
{
    (void)state;
    struct { size_t size, lg; unsigned n; } cases[] = {
        {16, 12, 100000},   /* p = 0.0039 */
        {16, 8, 60000},     /* p = 0.061 */
        {500, 12, 40000},   /* usable 512: p = 0.118 */
        {4096, 12, 20000},  /* p = 0.632: Z = R */
        {40000, 14, 8000},  /* usable 40960: p = 0.918 */
        {300000, 18, 8000}, /* large, usable 303104 (37 pages): p = 0.685 */
    };
    size_t saved = prof_lg_sample_get();
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        prof_lg_sample_set(cases[k].lg);
        double rate = (double)((uint64_t)1 << cases[k].lg);
        uint64_t hits = 0;
        size_t usable = 0;
        for (unsigned i = 0; i < cases[k].n; i++) {
            void *p = malloc(cases[k].size);
            usable = malloc_usable_size(p);
            hits += prof_is_sampled(p);
            free(p);
        }
        char what[64];
        snprintf(what, sizeof(what), "Z=%zu R=%.0f", usable, rate);
        assert_binomial(hits, cases[k].n, -expm1(-(double)usable / rate), what);
    }
    prof_lg_sample_set(saved);
}

/* Every allocation path samples: calloc, realloc's new block, aligned. */
static void test_sampler_every_path_samples(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0); /* R = 1: a block of u bytes is missed with chance e^-u */
    void *c = calloc(10, 10), *a = aligned_alloc(4096, 100), *r = realloc(NULL, 70);
    void *m = memalign(64, 5000), *big = malloc(1 << 20);
    void *pm = NULL;
    assert_int_equal(posix_memalign(&pm, 1 << 16, 300), 0);
    void *ptrs[] = {c, a, r, m, big, pm};
    for (size_t i = 0; i < 6; i++) {
        assert_true(prof_is_sampled(ptrs[i]));
        memset(ptrs[i], 7, 8);
    }
    assert_int_equal((uintptr_t)a % 4096, 0);
    assert_int_equal((uintptr_t)m % 64, 0);
    assert_int_equal((uintptr_t)pm % (1 << 16), 0);
    assert_int_equal(((unsigned char *)c)[99], 0);
    assert_int_equal(malloc_usable_size(c), 112);
    r = realloc(r, 5000); /* moves to a new, again sampled, block */
    assert_true(prof_is_sampled(r));
    assert_int_equal(((unsigned char *)r)[7], 7);
    for (size_t i = 0; i < 6; i++)
        free(ptrs[i] == ptrs[2] ? r : ptrs[i]);
    prof_lg_sample_set(saved);
}

/* The recorded size of the live sample at `p` (0 if there is none). */
static size_t recorded_usable(const void *p)
{
    static struct dump_entry entries[4096];
    size_t n = prof_snapshot(entries, 4096);
    for (size_t i = 0; i < n; i++)
        if (entries[i].ptr == p)
            return entries[i].usable;
    return 0;
}

/* A buffer grown by appends of 16..64 bytes from 16 bytes to at least
 * `limit`, as a program appending to a vector would. */
static void *grown_by_appends(size_t limit, uint64_t *rng)
{
    size_t size = 16;
    char *p = malloc(size);
    while (size < limit) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        size += 16 + (size_t)(*rng >> 58); /* + 16..79 */
        p = realloc(p, size);
        p[size - 1] = 1;
    }
    return p;
}

/* realloc for the sampler (realloc_slow in malloc.c): whatever the path a
 * block took, a live block is sampled with the probability of its usable
 * size now.  A block that keeps its usable size charges nothing and keeps
 * its state; a large one grown in place charges its growth; everything
 * else is a new allocation. */
static void test_sampler_realloc_keeps_the_probability_of_the_size(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    /* Large, grown in place: sampled as often as a fresh block its size. */
    prof_lg_sample_set(18);
    uint64_t hits = 0, in_place = 0;
    size_t usable = 0;
    const unsigned n = 8000;
    for (unsigned i = 0; i < n; i++) {
        void *p = malloc(300000), *q = realloc(p, 310000);
        in_place += q == p;
        usable = malloc_usable_size(q);
        hits += prof_is_sampled(q);
        free(q);
    }
    assert_true(in_place > n * 9 / 10);
    assert_binomial(hits, n, -expm1(-(double)usable / (1 << 18)), "realloc in place, large");
    /* Small, kept in its class: sampled with its class size's probability. */
    prof_lg_sample_set(12);
    hits = 0;
    for (unsigned i = 0; i < 20000; i++) {
        void *p = malloc(1000), *q = realloc(p, 900);
        hits += prof_is_sampled(q);
        free(q);
    }
    assert_binomial(hits, 20000, -expm1(-1024.0 / 4096), "realloc in place, small");
    /* Grown by appends, through many classes (moves, each to a block a
     * quarter larger at least, so the final size varies) and many reallocs
     * in each (in place): the final block's class size decides. */
    prof_lg_sample_set(16);
    uint64_t rng = 42;
    double mean = 0, var = 0;
    hits = 0;
    for (unsigned i = 0; i < 1500; i++) {
        void *p = grown_by_appends(50000, &rng);
        double prob = -expm1(-(double)malloc_usable_size(p) / (1 << 16));
        mean += prob;
        var += prob * (1 - prob);
        hits += prof_is_sampled(p);
        free(p);
    }
    assert_hits(hits, mean, var, "grown by appends");
    prof_lg_sample_set(saved);
}

/* In place means in place: a block that keeps its usable size is not
 * decided again, so it neither moves to a sample's pages nor leaves them,
 * even when every allocation is due (R = 1). */
static void test_sampler_realloc_in_class_stays(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0);
    size_t count0 = prof_sample_count();
    char *sampled = malloc(1000);
    assert_true(prof_is_sampled(sampled));
    prof_thread_active_set(false);
    char *plain = malloc(1000);
    prof_thread_active_set(true);
    assert_false(prof_is_sampled(plain));
    for (size_t size = 600; size <= 1024; size++) {
        assert_ptr_equal(realloc(sampled, size), sampled);
        assert_ptr_equal(realloc(plain, size), plain);
    }
    assert_true(prof_is_sampled(sampled));
    assert_false(prof_is_sampled(plain));
    assert_int_equal(prof_sample_count(), count0 + 1);
    assert_int_equal(recorded_usable(sampled), 1024);
    free(sampled);
    free(plain);

    /* A large block that keeps its pages (growth within its last page)
     * is the same; one that gains pages is due for its growth. */
    prof_thread_active_set(false);
    char *big = malloc(300000);
    prof_thread_active_set(true);
    size_t pages_end = malloc_usable_size(big);
    assert_ptr_equal(realloc(big, pages_end - 100), big);
    assert_ptr_equal(realloc(big, pages_end), big);
    assert_false(prof_is_sampled(big));
    char *grown = realloc(big, pages_end + 1);
    assert_true(prof_is_sampled(grown));
    free(grown);
    assert_int_equal(prof_sample_count(), count0);
    prof_lg_sample_set(saved);
}

/* Every result due (R = 1): a sampled large block grows in place and its
 * record grows with it, contents kept; with the thread's sampling off a
 * shrink (decided afresh) unsamples it where it stands; grown again, it is
 * due for the growth. */
static void test_sampler_large_sample_resized_in_place(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0);
    size_t count0 = prof_sample_count();
    char *big = malloc(1 << 20);
    assert_true(prof_is_sampled(big));
    assert_int_equal(recorded_usable(big), 1 << 20);
    memset(big, 0x5a, 1 << 20);
    char *grown = realloc(big, 3 << 19);
    assert_true(prof_is_sampled(grown));
    assert_int_equal(grown[(1 << 20) - 1], 0x5a);
    /* In place (usually) its record resized; moved, a new one: either way
     * the record is the block's size now. */
    assert_int_equal(recorded_usable(grown), 3 << 19);
    assert_int_equal(prof_sample_count(), count0 + 1);
    prof_thread_active_set(false);
    char *plain = realloc(grown, 1 << 20);
    assert_ptr_equal(plain, grown); /* a shrink never moves */
    assert_false(prof_is_sampled(plain));
    assert_int_equal(prof_sample_count(), count0);
    prof_thread_active_set(true);
    char *again = realloc(plain, 5 << 18);
    assert_true(prof_is_sampled(again));
    assert_int_equal(again[12345], 0x5a);
    assert_int_equal(prof_sample_count(), count0 + 1);
    free(again);
    assert_int_equal(prof_sample_count(), count0);
    prof_lg_sample_set(saved);
}

/* A small sample's page is reused without a purge: calloc must still see
 * zeros, and the page's old contents must not leak into a new sample. */
static void test_sampler_reused_pages_are_cleared_for_calloc(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0);
    for (int round = 0; round < 50; round++) {
        size_t size = 64 + (size_t)round * 80; /* up to 3984: one OS page; missed: e^-64 */
        unsigned char *p = malloc(size);
        assert_true(prof_is_sampled(p));
        memset(p, 0xff, size);
        free(p);
        unsigned char *q = calloc(1, size);
        assert_true(prof_is_sampled(q));
        for (size_t i = 0; i < size; i++)
            if (q[i])
                fail_msg("calloc(%zu) byte %zu is %d after reuse", size, i, q[i]);
        free(q);
    }
    prof_lg_sample_set(saved);
}

/* Counts sampled allocations among n of `size` bytes. */
static unsigned count_sampled(unsigned n, size_t size)
{
    unsigned hits = 0;
    for (unsigned i = 0; i < n; i++) {
        void *p = malloc(size);
        hits += prof_is_sampled(p);
        free(p);
    }
    return hits;
}

/* prof.active and thread.prof.active stop sampling and restart it, and the
 * change reaches a thread whose lists are hot (no refill, no flush) within
 * SAMPLER_CHECKIN bytes of its allocation. */
static void test_sampler_active_switches(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    const unsigned checkin = SAMPLER_CHECKIN / 64;
    prof_lg_sample_set(4);
    prof_active_set(false);
    count_sampled(checkin, 64); /* the change arrives within this */
    assert_int_equal(count_sampled(20000, 64), 0);
    prof_active_set(true);
    count_sampled(checkin, 64);
    assert_true(count_sampled(2000, 64) > 1900); /* p(64) at R = 16 is 0.98 */

    prof_thread_active_set(false); /* this thread: applies at once */
    assert_false(prof_thread_active_get());
    assert_int_equal(count_sampled(20000, 64), 0);
    prof_thread_active_set(true);
    assert_true(count_sampled(2000, 64) > 1900);

    /* A rate change also arrives within the check-in distance: from R = 16
     * (p = 0.98) to R = 2^30 (p = 6e-8). */
    prof_lg_sample_set(30);
    count_sampled(checkin, 64);
    assert_true(count_sampled(20000, 64) <= 10); /* at R = 16: 19,600 */
    prof_lg_sample_set(saved);
}

/* thread.allocated and thread.deallocated count usable bytes, once each,
 * sampled (every allocation, lg_prof_sample 0) or not (sampling off for
 * the thread).  A warm-up first: the unwinder may allocate the first time
 * it walks through code it has not seen, which the thread really did. */
static void check_byte_counts(void)
{
    uint64_t a0 = prof_thread_allocated(), d0 = prof_thread_deallocated();
    void *volatile p = malloc(1000), *volatile q = malloc(1 << 20);
    uint64_t a1 = prof_thread_allocated();
    size_t up = malloc_usable_size(p), uq = malloc_usable_size(q);
    assert_int_equal(a1 - a0, up + uq);
    /* realloc: the new usable size allocated, the old freed, moved or not */
    void *volatile r = realloc(q, 3 << 19); /* grows in place, usually */
    size_t ur = malloc_usable_size(r);
    assert_int_equal(prof_thread_allocated() - a1, ur);
    assert_int_equal(prof_thread_deallocated() - d0, uq);
    void *volatile kept = realloc(p, 990); /* kept in its class */
    assert_ptr_equal(kept, p);
    assert_int_equal(prof_thread_allocated() - a1, ur + up);
    assert_int_equal(prof_thread_deallocated() - d0, uq + up);
    free(p);
    free(r);
    assert_int_equal(prof_thread_deallocated() - d0, up + uq + ur + up);
}

static void test_sampler_thread_byte_counts(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0);
    for (int i = 0; i < 3; i++) {
        void *volatile p = malloc(1000), *volatile q = malloc(1 << 20);
        free(p);
        free(q);
    }
    check_byte_counts();
    prof_thread_active_set(false);
    check_byte_counts();
    prof_thread_active_set(true);
    prof_lg_sample_set(saved);
}

/* opt.prof false (prof_boot calls sampler_never_sample before any cache
 * exists): a thread's window is the whole 2^62-byte interval, so it never
 * leaves the fast path for the sampler, and its byte counts stay exact.
 * Irreversible, so the last test of this program. */
static void test_sampler_never_sampling_never_checks_in(void **state)
{
    (void)state;
    struct tcache *tc = tcache_get();
    sampler_never_sample();
    sampler_set_on(false);
    sampler_refresh(tc);
    assert_true(tc->bytes_until_sample >= (int64_t)1 << 61);
    assert_int_equal(tc->prof.rate, 0);
    check_byte_counts();
    /* Megabytes of allocation later, still on the first interval. */
    for (int i = 0; i < 64; i++)
        free(malloc(1 << 17));
    assert_true(tc->bytes_until_sample >= (int64_t)1 << 61);
    check_byte_counts();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_math_matches_libm),
        cmocka_unit_test(test_sampler_intervals_are_exponential),
        cmocka_unit_test(test_sampler_intervals_follow_the_exponential_everywhere),
        cmocka_unit_test(test_sampler_probability_through_malloc),
        cmocka_unit_test(test_sampler_every_path_samples),
        cmocka_unit_test(test_sampler_realloc_keeps_the_probability_of_the_size),
        cmocka_unit_test(test_sampler_realloc_in_class_stays),
        cmocka_unit_test(test_sampler_large_sample_resized_in_place),
        cmocka_unit_test(test_sampler_active_switches),
        cmocka_unit_test(test_sampler_reused_pages_are_cleared_for_calloc),
        cmocka_unit_test(test_sampler_thread_byte_counts),
        cmocka_unit_test(test_sampler_never_sampling_never_checks_in), /* last: irreversible */
    };
    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
