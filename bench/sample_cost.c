/*
 * sample_cost.c: what a sampled allocation costs, call by call.
 *
 *   sample_cost [--check] [SIZE [PAIRS]]   SIZE defaults to 1024 bytes,
 *                                          PAIRS to 8,000,000
 *
 * Runs PAIRS of p = malloc(SIZE); p[0] = 1; free(p), and times each malloc
 * and each free alone: the time-stamp counter read between two lfences on
 * either side of the call (x86-64; elsewhere clock_gettime, in ns).  The
 * brackets themselves cost a few dozen ticks, the same for every call.
 *
 * Which calls were sampled: under salloc a pair gets the same block every
 * time (the top of its thread cache's stack) unless the allocation is
 * sampled, which gets pages of its own and leaves that block on the stack
 * as its proxy (README, "Sampling").  So a pair whose block is not the usual
 * one is a sample.  The usual block is the one most of the first pairs
 * got.  Under another allocator no pair differs, and the report says so.
 *
 * Why it exists: the suite's rows (bench_core) show a sample only as a few
 * percent of a pair's time, within this VM's noise, and callgrind counts
 * a sample's instructions but not what it waits for.  The median of the
 * sampled calls is a warm sample; their mean, at the default rate, adds
 * what a rare sample pays for caches and TLB entries other work took since
 * the last one (the 2-core VM, 1 KiB blocks: medians 245 and 147 ticks,
 * means 430-500 and 220-280 at R = 512 KiB; at R = 16 KiB the means are
 * within 20 ticks of the medians).
 *
 * Prints the sampled pairs, and the count the sampling rate predicts
 * (PAIRS x (1 - e^(-usable/R)), R from salloc's mallctl prof.lg_sample, 0
 * with profiling off); then median, 90th percentile and mean of the
 * sampled calls' ticks and of every 64th unsampled call's.  --check: exit
 * 1 unless the sampled count is within 10% (and 20 pairs) of the
 * prediction, so that make test knows the tool still finds the samples it
 * claims to measure.
 *
 * Built like the benchmark bodies (-fno-builtin-malloc -fno-builtin-free,
 * the pointer escapes through an empty asm); it links no allocator: run it
 * with LD_PRELOAD=lib/libsalloc.so (and SALLOC_CONF for the rate).
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h" /* escape, die, bench_now_ns */

#if defined(__x86_64__)
#include <x86intrin.h>
#define UNIT "TSC ticks"
static inline uint64_t stamp(void)
{
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}
#else
#define UNIT "ns"
static inline uint64_t stamp(void) { return bench_now_ns(); }
#endif

#define PRIMING_PAIRS 64
#define KEPT_MAX 1000000 /* calls kept of each kind: 4 MB an array */
#define UNSAMPLED_EVERY 64

struct calls {
    uint32_t *malloc_ticks, *free_ticks;
    size_t n;
};

/* An array the allocator under test does not serve, so that keeping the
 * timings allocates nothing during the pairs. */
static uint32_t *ticks_array(void)
{
    static uint32_t store[4][KEPT_MAX];
    static unsigned next;
    return store[next++];
}

static void keep(struct calls *c, uint64_t m, uint64_t f)
{
    if (c->n == KEPT_MAX)
        return;
    c->malloc_ticks[c->n] = m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
    c->free_ticks[c->n] = f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
    c->n++;
}

/* The block most of PRIMING_PAIRS pairs got (a sample among them differs). */
static void *usual_block(size_t size)
{
    void *seen[PRIMING_PAIRS];
    for (int i = 0; i < PRIMING_PAIRS; i++) {
        char *p = alloc_or_die(size);
        p[0] = 1;
        escape(p);
        seen[i] = p;
        free(p);
    }
    void *best = seen[0];
    int best_count = 0;
    for (int i = 0; i < PRIMING_PAIRS; i++) {
        int count = 0;
        for (int j = 0; j < PRIMING_PAIRS; j++)
            count += seen[j] == seen[i];
        if (count > best_count) {
            best = seen[i];
            best_count = count;
        }
    }
    return best;
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, uint32_t *ticks, size_t n)
{
    if (n == 0) {
        printf("  %-7s none\n", what);
        return;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ticks[i];
    qsort(ticks, n, sizeof(*ticks), by_value);
    printf("  %-7s median %6u  p90 %6u  mean %8.1f\n", what, ticks[n / 2], ticks[n * 9 / 10],
           sum / (double)n);
}

/* The pairs salloc's sampling rate predicts, or -1 under an allocator
 * without salloc's mallctl. */
static double predicted_samples(size_t size, unsigned long pairs)
{
    int (*ctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
    size_t (*usable)(void *) = (size_t(*)(void *))dlsym(RTLD_DEFAULT, "malloc_usable_size");
    if (!ctl || !usable)
        return -1;
    bool active = false, prof = false;
    size_t lg = 0, len = sizeof(bool);
    if (ctl("opt.prof", &prof, &len, NULL, 0) != 0)
        return -1;
    len = sizeof(bool);
    if (ctl("prof.active", &active, &len, NULL, 0) != 0)
        return -1;
    len = sizeof(lg);
    if (ctl("prof.lg_sample", &lg, &len, NULL, 0) != 0)
        return -1;
    if (!prof || !active)
        return 0;
    void *p = malloc(size);
    double bytes = (double)usable(p);
    free(p);
    return (double)pairs * -expm1(-bytes / ldexp(1.0, (int)lg));
}

int main(int argc, char **argv)
{
    bool check = argc > 1 && !strcmp(argv[1], "--check");
    if (check)
        argc--, argv++;
    size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    unsigned long pairs = argc > 2 ? strtoul(argv[2], NULL, 10) : 8000000;
    if (argc > 3 || size == 0 || pairs == 0) {
        fprintf(stderr, "usage: sample_cost [--check] [SIZE [PAIRS]]\n");
        return 2;
    }

    struct calls sampled = {ticks_array(), ticks_array(), 0};
    struct calls unsampled = {ticks_array(), ticks_array(), 0};
    void *usual = usual_block(size);
    unsigned long nsampled = 0;
    for (unsigned long i = 0; i < pairs; i++) {
        uint64_t t0 = stamp();
        char *p = malloc(size);
        uint64_t t1 = stamp();
        if (!p)
            die("malloc returned NULL");
        p[0] = 1;
        escape(p);
        uint64_t t2 = stamp();
        free(p);
        uint64_t t3 = stamp();
        if (p != usual) {
            nsampled++;
            keep(&sampled, t1 - t0, t3 - t2);
        } else if (i % UNSAMPLED_EVERY == 0) {
            keep(&unsampled, t1 - t0, t3 - t2);
        }
    }

    double predicted = predicted_samples(size, pairs);
    printf("size %zu, pairs %lu, sampled %lu", size, pairs, nsampled);
    if (predicted >= 0)
        printf(" (the rate predicts %.0f)", predicted);
    else
        printf(" (no salloc mallctl: no prediction)");
    printf("\nsampled pairs, %s a call:\n", UNIT);
    report("malloc", sampled.malloc_ticks, sampled.n);
    report("free", sampled.free_ticks, sampled.n);
    printf("unsampled pairs (every %dth), %s a call:\n", UNSAMPLED_EVERY, UNIT);
    report("malloc", unsampled.malloc_ticks, unsampled.n);
    report("free", unsampled.free_ticks, unsampled.n);

    if (check) {
        double off = predicted < 0 ? 0 : fabs((double)nsampled - predicted);
        if (predicted < 0 || off > 0.1 * predicted + 20) {
            fprintf(stderr, "sample_cost: --check: %lu sampled pairs, the rate predicts %.0f\n",
                    nsampled, predicted);
            return 1;
        }
    }
    return 0;
}
