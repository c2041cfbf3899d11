/*
 * bodies_memory.c: a long-running program whose heap changes shape, for
 * what an allocator does with memory rather than how fast it hands it out.
 *
 * phase: build a heap of ~256 MiB of small objects (16..512 B, plus one
 * 64 KiB block per 1000), free 90% of it in random order, build ~256 MiB
 * again with a DIFFERENT size mix (tiny 8..64 B objects and 0.5..2.5 KiB
 * buffers, which fit the 16..512 B holes badly), then free everything.
 *   - rss_peak_mib: an allocator that reuses the holes of the first phase
 *     for the second peaks near 10% + 100% = ~280 MiB; one that cannot
 *     (size-segregated pages that stay 10% full) peaks near ~510 MiB.
 *   - rss_after_free_mib: resident memory once everything is freed: what
 *     the allocator hands back to the kernel unasked.  Allocators that
 *     return memory after a delay (jemalloc's and salloc's decay) show
 *     their delay here; nobody calls malloc_trim.
 * The time per allocation covers all four phases (frees included) and
 * writes every object in full, as programs initialise what they allocate.
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_bodies.h"
#include "bench_util.h"

#define BIG_BLOCK ((size_t)64 << 10)

/* First phase: 999 of 1000 uniform in 16..512 B (mean 264 B), 1 of 1000 a
 * 64 KiB block (~20% of the bytes). */
static size_t first_mix(bench_rng *rng)
{
    return bench_rng_below(rng, 1000) == 0 ? BIG_BLOCK : bench_rng_range(rng, 16, 512);
}

/* Second phase: 80% tiny (8..64 B), 20% buffers (512..2560 B); mean ~336 B. */
static size_t second_mix(bench_rng *rng)
{
    return bench_rng_below(rng, 5) < 4 ? bench_rng_range(rng, 8, 64)
                                       : bench_rng_range(rng, 512, 2560);
}

static void build(void **obj, size_t n, size_t (*mix)(bench_rng *), bench_rng *rng)
{
    for (size_t i = 0; i < n; i++) {
        size_t size = mix(rng);
        obj[i] = alloc_or_die(size);
        memset(obj[i], (int)(i & 0xff), size);
        escape(obj[i]);
    }
}

/* A random permutation of 0..n-1 (Fisher-Yates): programs free in an order
 * that has nothing to do with the order they allocated in. */
static uint32_t *random_order(size_t n, bench_rng *rng)
{
    uint32_t *order = alloc_or_die(n * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = bench_rng_below(rng, (uint32_t)i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    return order;
}

/* ---- resident memory, read without malloc (no stdio) ---- */

/* Reads a small /proc file into buf (NUL-terminated); 0 on failure. */
static size_t read_proc(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (size_t)n;
}

/* Writing 5 to clear_refs resets the peak RSS (VmHWM), so the peak is this
 * call's, not an earlier benchmark's in the same process.  Best effort: if
 * it fails the peak is the process's, still right when it runs alone. */
static void reset_peak_rss(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0)
        return;
    if (write(fd, "5", 1) != 1) {
        /* keep the process-wide peak */
    }
    close(fd);
}

static double peak_rss_mib(void)
{
    char buf[8192];
    if (read_proc("/proc/self/status", buf, sizeof buf) == 0)
        return -1;
    const char *line = strstr(buf, "VmHWM:");
    if (line == NULL)
        return -1;
    return (double)strtoull(line + 6, NULL, 10) / 1024.0;   /* kB */
}

static double resident_mib(void)
{
    char buf[256];
    if (read_proc("/proc/self/statm", buf, sizeof buf) == 0)
        return -1;
    char *field2;
    strtoull(buf, &field2, 10);   /* size; resident is next */
    unsigned long long pages = strtoull(field2, NULL, 10);
    return (double)pages * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

struct phase_result bench_phase(size_t objects_per_build)
{
    size_t n = objects_per_build;
    bench_rng rng = bench_rng_seeded(3);
    void **first = alloc_or_die(n * sizeof *first);
    void **second = alloc_or_die(n * sizeof *second);
    uint32_t *order = random_order(n, &rng);
    reset_peak_rss();

    uint64_t t0 = bench_now_ns();
    build(first, n, first_mix, &rng);
    uint64_t t1 = bench_now_ns();
    size_t freed_most = 0, freed_rest = 0;
    for (size_t i = 0; i < n; i++)
        if (bench_rng_below(&rng, 10) != 0) {   /* 90% of the first heap */
            free(first[order[i]]);
            first[order[i]] = NULL;
            freed_most++;
        }
    uint64_t t2 = bench_now_ns();
    build(second, n, second_mix, &rng);
    uint64_t t3 = bench_now_ns();
    for (size_t i = 0; i < n; i++) {
        freed_rest += first[order[i]] != NULL;
        free(first[order[i]]);   /* NULL for the 90% already gone */
        free(second[order[i]]);
    }
    uint64_t t4 = bench_now_ns();
    double seconds = (double)(t4 - t0) / 1e9;
    freed_rest += n;

    free(order);
    free(second);
    free(first);
    return (struct phase_result){
        .seconds = seconds,
        .build_ns = (double)(t1 - t0) / (double)n,
        .free_most_ns = (double)(t2 - t1) / (double)freed_most,
        .rebuild_ns = (double)(t3 - t2) / (double)n,
        .free_rest_ns = (double)(t4 - t3) / (double)freed_rest,
        .allocations = 2 * n,
        .rss_peak_mib = peak_rss_mib(),
        .rss_after_free_mib = resident_mib(),
    };
}
