/*
 * bench_util.h: helpers every benchmark body shares.  Header-only (static
 * inline), C11.
 *
 * - escape(): an empty asm the compiler cannot see through.  A pointer that
 *   goes through it, and the memory behind it, count as used by unknown code,
 *   so malloc/free pairs and the writes into objects survive -O2 even if the
 *   -fno-builtin-* flags are dropped.
 * - bench_rng: a xorshift64* generator.  Every body seeds it with a fixed
 *   constant, so every allocator sees exactly the same sequence of sizes,
 *   slots and hand-offs; results differ only by the allocator.
 * - alloc_or_die(), bench_now_ns(), die(): the boring parts, once.
 */
#ifndef SALLOC_BENCH_UTIL_H
#define SALLOC_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Make p (and the memory it points to) visible to "unknown code". */
static inline void escape(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* A benchmark that cannot run its workload must not report a time. */
static inline _Noreturn void die(const char *what)
{
    fprintf(stderr, "bench: %s\n", what);
    abort();
}

static inline void *alloc_or_die(size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        die("malloc returned NULL");
    return p;
}

/* Wall clock (monotonic), for bodies that time their own threads. */
static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double seconds_since(uint64_t start_ns)
{
    return (double)(bench_now_ns() - start_ns) * 1e-9;
}

/* xorshift64* (Vigna): tiny, fast, good enough to pick sizes and slots. */
typedef struct {
    uint64_t s;
} bench_rng;

static inline bench_rng bench_rng_seeded(uint64_t seed)
{
    /* xorshift must not start at 0; mix the seed so that 1, 2, 3... give
     * unrelated streams (one per thread). */
    bench_rng r = {seed * 0x9E3779B97F4A7C15u + 0x2545F4914F6CDD1Du};
    if (r.s == 0)
        r.s = 1;
    return r;
}

static inline uint64_t bench_rng_next(bench_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Du;
}

/* Uniform in [0, n), n < 2^32, without a division (Lemire's multiply-shift
 * on the high 32 bits). */
static inline uint32_t bench_rng_below(bench_rng *r, uint32_t n)
{
    return (uint32_t)(((bench_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Uniform in [lo, hi]. */
static inline size_t bench_rng_range(bench_rng *r, size_t lo, size_t hi)
{
    return lo + bench_rng_below(r, (uint32_t)(hi - lo + 1));
}

#endif
