/*
 * stress_common.h: what the stress tests share: failure recording that is
 * safe from any thread, the monotonic clock, and a small seeded generator.
 * Header-only (static functions), included once by each test program.
 *
 * Worker threads never call cmocka asserts (a longjmp into another thread
 * is undefined): they record failures (a counter and the first message,
 * naming the thread and its seed), and the main thread asserts after
 * joining them.  Never from a forked child: the lock may be held for good
 * there.
 */
#ifndef SALLOC_TEST_STRESS_COMMON_H
#define SALLOC_TEST_STRESS_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

/* Failures printed as they happen, at most; all are counted. */
#define FAILURES_PRINTED 20

static atomic_long g_failures;
static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_first_error[768];

static void failures_reset(void)
{
    atomic_store(&g_failures, 0);
    g_first_error[0] = '\0';
}

static bool failed(void)
{
    return atomic_load_explicit(&g_failures, memory_order_relaxed) != 0;
}

/* Records one failure; `who` names the thread and its seed. */
__attribute__((format(printf, 2, 3)))
static void fail_record(const char *who, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_err_lock);
    long n = atomic_fetch_add(&g_failures, 1);
    if (n == 0)
        snprintf(g_first_error, sizeof g_first_error, "%s: %s", who, msg);
    pthread_mutex_unlock(&g_err_lock);
    if (n < FAILURES_PRINTED)
        fprintf(stderr, "failure: %s: %s\n", who, msg);
}

/* Main thread only, after every worker is joined. */
static void failures_assert_none(const char *test)
{
    long n = atomic_load(&g_failures);
    if (n != 0)
        fail_msg("%s: %ld failure(s); first: %s", test, n, g_first_error);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct { uint64_t s; } rng_t;

/* splitmix64: small state, good enough spread for picking sizes. */
static uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t rng_below(rng_t *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

#endif
