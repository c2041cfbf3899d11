/*
 * test_storms.c: thread storms, fork storms, cancellation and exit() races
 * (issue 6, "Faults and limits"), through the public API only, so the same
 * binary runs on any allocator (make test runs it with LD_PRELOAD=
 * lib/libsalloc.so; without it, on glibc, the salloc-only checks are
 * skipped and the rest still runs).
 *
 *   - thread storm: STORM_THREADS (10,000) threads created and exited in
 *     waves of 16 to 64, each allocating a mix of sizes; some objects are
 *     freed by the thread, some by other threads (a shared pool), some are
 *     still live when the thread exits and are freed later by the main
 *     thread.  Memory must stay bounded: after a warm-up of the first
 *     STORM_WARMUP (1,000) threads, the resident set (/proc/self/statm) and
 *     salloc's stats.resident, stats.mapped and stats.metadata at the end
 *     may not exceed the warm-up figures by more than a small bound, both
 *     as held and after malloc_trim(0) (the bounds are explained where
 *     they are checked);
 *   - fork storm: FORK_COUNT (the 1,000) fork()s from a process
 *     whose 8 other threads allocate and free at full speed; every child
 *     allocates,
 *     frees, reads mallctl statistics, writes a prof.dump (every
 *     FORK_DUMP_EVERY-th child) and sometimes starts a thread, then
 *     _exits with a status the parent checks; a child that does not finish
 *     in CHILD_TIMEOUT_S (10 s) is hung (killed, a failure);
 *   - fork() while 3 threads sample every allocation (FORK_RACE_COUNT
 *     forks, 120): a child whose first sampled malloc does not finish in
 *     5 s is hung; and fork() while another thread is inside
 *     dl_iterate_phdr (held there on purpose): the child must still
 *     allocate, as it can with glibc's malloc;
 *   - pthread_cancel of threads that allocate, with deferred cancellation
 *     at pthread_testcancel, usleep and stdio calls (cleanup handlers free
 *     what the thread held; some objects are left to the main thread);
 *     and the same with interval dumps on (lg_prof_interval), in a child
 *     process with a time limit, where salloc itself reaches cancellation
 *     points (open/write of the dump) inside malloc;
 *   - exit() called from one thread while the others allocate, in a child
 *     process (with and without prof_final): the child must exit with the
 *     given status, neither crash nor hang.
 *
 * Worker threads never call cmocka asserts: they record failures, and the
 * main thread asserts after joining them.
 *
 * Environment (the heavy counts; the figures are STORM_THREADS=
 * 10000 and FORK_COUNT=1000):
 *   STORM_THREADS (default 10000; 4000 when salloc samples heavily, as in
 *   make test's lg_prof_sample:8 run), STORM_WARMUP (1000), STORM_OBJS (32
 *   objects per thread), FORK_COUNT (100; 40 when sampling heavily: a fork
 *   next to 8 busy threads takes 30-150 ms on a 2-core machine),
 *   FORK_BUSY (8), FORK_BUSY_NICE (1: the busy threads run at nice 19 so
 *   that the forking thread is not starved; 0: same priority),
 *   FORK_DUMP_EVERY (1: every child dumps), FORK_RACE_COUNT (120),
 *   CANCEL_ROUNDS (150, 8 threads each), EXIT_ROUNDS (40).
 *   CHILD_TIMEOUT_S (10).  STORM_TEST_FILTER runs only the tests matching a
 *   cmocka pattern.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "stress_common.h"

/* salloc's control interface; NULL when another allocator runs the test. */
int mallctl(const char *, void *, size_t *, void *, size_t) __attribute__((weak));

extern char **environ;

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

/* A forked or spawned child taking longer than this many seconds is hung
 * (CHILD_TIMEOUT_S in the environment overrides it). */
#define CHILD_TIMEOUT_S ((double)env_long("CHILD_TIMEOUT_S", 10, 1))

static char tmpdir[] = "/tmp/salloc_test_storms.XXXXXX";

/* ------------------------------------------------------------------ */
/* Time, environment, random numbers. */

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Whether salloc samples heavily (make test's first run uses
 * lg_prof_sample:8 with prof_unwind:check): the default counts are then
 * smaller, to keep the run short. */
static bool heavy_sampling(void)
{
    size_t lg = 19, len = sizeof lg;
    return mallctl && mallctl("prof.lg_sample", &lg, &len, NULL, 0) == 0 && lg < 12;
}

static long env_long(const char *name, long dflt, long min)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    long v = strtol(s, NULL, 0);
    return v < min ? min : v;
}

static rng_t rng_for(uint64_t salt, uint64_t n)
{
    rng_t r = {UINT64_C(0x5a110c5eed) ^ (salt << 40) ^ (n * UINT64_C(0x2545F4914F6CDD1D))};
    rng_next(&r);
    return r;
}

/* ------------------------------------------------------------------ */
/* Blocks: a tag in the first and last 16 bytes and in one byte of every
 * 4 KiB, so each page of a block is touched and a block damaged by another
 * thread's use (or handed out twice) is noticed when it is freed. */

typedef struct {
    unsigned char *p;
    size_t size;
    uint64_t tag;
} blk_t;

static inline unsigned char tag_byte(uint64_t tag, size_t i)
{
    return (unsigned char)((tag >> (8 * (i & 7))) ^ (i >> 3));
}

static void blk_mark(blk_t *b)
{
    size_t n = b->size, head = n < 16 ? n : 16;
    for (size_t i = 0; i < head; i++)
        b->p[i] = tag_byte(b->tag, i);
    for (size_t i = n > 16 ? n - 16 : head; i < n; i++)
        b->p[i] = tag_byte(b->tag, i);
    for (size_t i = 4096; i < n; i += 4096)
        b->p[i] = tag_byte(b->tag, i);
}

static bool blk_ok(const blk_t *b)
{
    size_t n = b->size, head = n < 16 ? n : 16;
    for (size_t i = 0; i < head; i++)
        if (b->p[i] != tag_byte(b->tag, i))
            return false;
    for (size_t i = n > 16 ? n - 16 : head; i < n; i++)
        if (b->p[i] != tag_byte(b->tag, i))
            return false;
    for (size_t i = 4096; i < n; i += 4096)
        if (b->p[i] != tag_byte(b->tag, i))
            return false;
    return true;
}

/* Checks and frees *b; records a failure (naming `who`) when it was damaged. */
static void blk_release(const char *who, blk_t *b)
{
    if (!b->p)
        return;
    if (!blk_ok(b))
        fail_record(who, "block %p of %zu bytes damaged before its free", (void *)b->p, b->size);
    free(b->p);
    b->p = NULL;
}

/* Mostly small, some medium, a few large (page-heap) sizes. */
static size_t pick_size(rng_t *r)
{
    uint64_t c = rng_below(r, 1000);
    if (c < 600)
        return 1 + (size_t)rng_below(r, 256);
    if (c < 880)
        return 257 + (size_t)rng_below(r, 4 * KiB);
    if (c < 985)
        return 4 * KiB + (size_t)rng_below(r, 60 * KiB);
    return 256 * KiB + (size_t)rng_below(r, 768 * KiB);
}

/* Busy threads: mostly small sizes, so that they make millions of calls;
 * rarely a large one. */
static size_t pick_busy_size(rng_t *r)
{
    uint64_t c = rng_below(r, 10000);
    if (c < 7000)
        return 1 + (size_t)rng_below(r, 256);
    if (c < 9700)
        return 257 + (size_t)rng_below(r, 4 * KiB);
    if (c < 9995)
        return 4 * KiB + (size_t)rng_below(r, 60 * KiB);
    return 256 * KiB + (size_t)rng_below(r, 768 * KiB);
}

/* A new block of `size` bytes from malloc, calloc (zeroes checked) or
 * realloc (growth of a fresh block, prefix checked); false (failure
 * recorded) when it fails. */
static bool blk_new_sized(const char *who, rng_t *r, blk_t *b, size_t size)
{
    b->size = size;
    b->tag = rng_next(r);
    uint64_t how = rng_below(r, 10);
    if (how < 6) {
        b->p = malloc(b->size);
    } else if (how < 8) {
        b->p = calloc(1, b->size);
        if (b->p)
            for (size_t i = 0; i < b->size; i += b->size / 7 + 1)
                if (b->p[i]) {
                    fail_record(who, "calloc(%zu) byte %zu is not zero", b->size, i);
                    break;
                }
    } else {
        size_t first = b->size / 2 + 1;
        unsigned char *p = malloc(first);
        if (p) {
            memset(p, 0x5c, first);
            b->p = realloc(p, b->size);
            if (!b->p)
                free(p);
            else if (b->p[0] != 0x5c || b->p[first - 1] != 0x5c)
                fail_record(who, "realloc(%zu -> %zu) lost the contents", first, b->size);
        } else {
            b->p = NULL;
        }
    }
    if (!b->p) {
        fail_record(who, "allocation of %zu bytes failed", b->size);
        return false;
    }
    blk_mark(b);
    return true;
}

static bool blk_new(const char *who, rng_t *r, blk_t *b)
{
    return blk_new_sized(who, r, b, pick_size(r));
}

/* ------------------------------------------------------------------ */
/* Where objects go between threads: a pool other threads free from, and
 * the leftovers the main thread frees after their thread has exited. */

#define POOL_CAP 1024 /* full after a few hundred storm threads */
#define LEFT_CAP (64 * 64 + 64)

static struct {
    pthread_mutex_t lock;
    blk_t slot[POOL_CAP];
    size_t n;
} g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct {
    pthread_mutex_t lock;
    blk_t slot[LEFT_CAP];
    size_t n;
} g_left = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Puts *b in the pool; when full, a random resident comes out in *out
 * (out->p NULL when nothing did). */
static void pool_put(rng_t *r, blk_t *b, blk_t *out)
{
    out->p = NULL;
    pthread_mutex_lock(&g_pool.lock);
    if (g_pool.n == POOL_CAP) {
        size_t i = (size_t)rng_below(r, g_pool.n);
        *out = g_pool.slot[i];
        g_pool.slot[i] = *b;
    } else {
        g_pool.slot[g_pool.n++] = *b;
    }
    pthread_mutex_unlock(&g_pool.lock);
    b->p = NULL;
}

static bool pool_take(rng_t *r, blk_t *out)
{
    bool ok = false;
    pthread_mutex_lock(&g_pool.lock);
    if (g_pool.n) {
        size_t i = (size_t)rng_below(r, g_pool.n);
        *out = g_pool.slot[i];
        g_pool.slot[i] = g_pool.slot[--g_pool.n];
        ok = true;
    }
    pthread_mutex_unlock(&g_pool.lock);
    return ok;
}

/* Leaves *b for the main thread; false when the list is full. */
static bool left_put(blk_t *b)
{
    bool ok = false;
    pthread_mutex_lock(&g_left.lock);
    if (g_left.n < LEFT_CAP) {
        g_left.slot[g_left.n++] = *b;
        b->p = NULL;
        ok = true;
    }
    pthread_mutex_unlock(&g_left.lock);
    return ok;
}

/* Main thread, between waves: frees every leftover; returns how many. */
static size_t left_free_all(void)
{
    pthread_mutex_lock(&g_left.lock);
    size_t n = g_left.n;
    for (size_t i = 0; i < n; i++)
        blk_release("main (leftovers)", &g_left.slot[i]);
    g_left.n = 0;
    pthread_mutex_unlock(&g_left.lock);
    return n;
}

static size_t pool_free_all(void)
{
    pthread_mutex_lock(&g_pool.lock);
    size_t n = g_pool.n;
    for (size_t i = 0; i < n; i++)
        blk_release("main (pool)", &g_pool.slot[i]);
    g_pool.n = 0;
    pthread_mutex_unlock(&g_pool.lock);
    return n;
}

/* ------------------------------------------------------------------ */
/* Memory figures. */

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static int threads_in_process(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* Waits (at most 5 s) until the main thread is the only one left, so that
 * detached threads have run their exit path to the end. */
static bool wait_single_threaded(void)
{
    for (int i = 0; i < 5000; i++) {
        if (threads_in_process() == 1)
            return true;
        sleep_us(1000);
    }
    return false;
}

typedef struct {
    size_t rss, resident, mapped, metadata, allocated;
    size_t small, large, tcache; /* stats.arenas.0.small/large.allocated, tcache_bytes */
} mem_t;

static size_t stat_read(const char *name)
{
    size_t v = 0, len = sizeof v;
    if (mallctl(name, &v, &len, NULL, 0) != 0)
        fail_record("main", "mallctl(%s) failed", name);
    return v;
}

static mem_t mem_now(void)
{
    mem_t m = {.rss = rss_bytes()};
    if (mallctl) {
        uint64_t e = 1;
        if (mallctl("epoch", NULL, NULL, &e, sizeof e) != 0)
            fail_record("main", "mallctl(epoch) failed");
        m.resident = stat_read("stats.resident");
        m.mapped = stat_read("stats.mapped");
        m.metadata = stat_read("stats.metadata");
        m.allocated = stat_read("stats.allocated");
        m.small = stat_read("stats.arenas.0.small.allocated");
        m.large = stat_read("stats.arenas.0.large.allocated");
        m.tcache = stat_read("stats.arenas.0.tcache_bytes");
    }
    return m;
}

/* One line of what stats.allocated is made of, for a failure's message. */
static void allocated_where(const char *when, size_t small, size_t large, size_t tcache)
{
    fprintf(stderr, "# %s: small.allocated %.3f MiB, large.allocated %.3f MiB, tcache_bytes %.3f MiB\n",
            when, small / 1048576.0, large / 1048576.0, tcache / 1048576.0);
}

static double g_storm_t0;

static void mem_print(const char *what, long threads, mem_t m)
{
    fprintf(stderr, "# storm %6.2f s ", now_s() - g_storm_t0);
    if (mallctl)
        fprintf(stderr, "%-8s %6ld threads: RSS %7.2f MiB, stats.resident %7.2f MiB, "
                "mapped %7.2f MiB, metadata %6.2f MiB, allocated %6.2f MiB\n", what, threads,
                m.rss / 1048576.0, m.resident / 1048576.0, m.mapped / 1048576.0,
                m.metadata / 1048576.0, m.allocated / 1048576.0);
    else
        fprintf(stderr, "%-8s %6ld threads: RSS %7.2f MiB (not salloc: no stats)\n", what,
                threads, m.rss / 1048576.0);
}

/* ------------------------------------------------------------------ */
/* Thread storm. */

static long g_storm_objs;
static atomic_int g_storm_running; /* storm threads not yet at their end */

static void *storm_thread(void *arg)
{
    uint64_t serial = (uint64_t)(uintptr_t)arg;
    char who[48];
    snprintf(who, sizeof who, "storm thread #%" PRIu64, serial);
    rng_t r = rng_for(1, serial);
    enum { MAXOBJS = 256 };
    blk_t b[MAXOBJS];
    int n = (int)g_storm_objs;
    if (n > MAXOBJS)
        n = MAXOBJS;
    if (serial % 7 == 0 && mallctl) { /* a thread name in salloc's sample records */
        const char *name = "storm";
        mallctl("thread.prof.name", NULL, NULL, &name, sizeof name);
    }
    for (int i = 0; i < n; i++) {
        if (!blk_new(who, &r, &b[i]))
            b[i].p = NULL;
        if (i % 4 == 3) { /* free one of our own earlier blocks */
            int j = (int)rng_below(&r, (uint64_t)i);
            blk_release(who, &b[j]);
        }
        if (i % 3 == 2) { /* free one another thread made */
            blk_t other;
            if (pool_take(&r, &other))
                blk_release(who, &other);
        }
    }
    for (int i = 0; i < n; i++) {
        if (!b[i].p)
            continue;
        uint64_t c = rng_below(&r, 8);
        if (c < 3) {
            blk_release(who, &b[i]);
        } else if (c < 6) { /* freed by another storm thread, or main */
            blk_t out;
            pool_put(&r, &b[i], &out);
            blk_release(who, &out);
        } else if (!left_put(&b[i])) { /* still live when this thread exits */
            blk_release(who, &b[i]);
        }
    }
    atomic_fetch_sub(&g_storm_running, 1);
    return NULL;
}

static const int wave_sizes[] = {16, 40, 64, 24, 56, 32, 48, 64, 20, 36};

static void test_thread_storm(void **state)
{
    (void)state;
    failures_reset();
    long total = env_long("STORM_THREADS", heavy_sampling() ? 4000 : 10000, 1);
    long warmup = env_long("STORM_WARMUP", total >= 2000 ? 1000 : total / 2, 0);
    g_storm_objs = env_long("STORM_OBJS", 32, 1);
    double start = now_s();
    g_storm_t0 = start;
    mem_t before = mem_now(), warm = before, warm_trim = before, end, end_trim;
    mem_print("start", 0, before);
    bool warm_taken = warmup == 0;
    long created = 0, detached = 0, next_report = 2000;
    size_t left_freed = 0;
    for (int wave = 0; created < total && !failed(); wave++) {
        int w = wave_sizes[wave % (int)(sizeof wave_sizes / sizeof wave_sizes[0])];
        if (w > total - created)
            w = (int)(total - created);
        pthread_t t[64];
        bool joinable[64];
        for (int i = 0; i < w; i++) {
            bool detach = (created + i) % 5 == 4;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            if (detach)
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            atomic_fetch_add(&g_storm_running, 1);
            int rc = pthread_create(&t[i], &attr, storm_thread, (void *)(uintptr_t)(created + i));
            pthread_attr_destroy(&attr);
            joinable[i] = rc == 0 && !detach;
            if (rc != 0) {
                atomic_fetch_sub(&g_storm_running, 1);
                fail_record("main", "pthread_create #%ld: %s", created + i, strerror(rc));
            } else {
                detached += detach;
            }
        }
        for (int i = 0; i < w; i++)
            if (joinable[i])
                pthread_join(t[i], NULL);
        while (atomic_load(&g_storm_running) > 0)
            sleep_us(100);
        created += w;
        /* The previous waves' leftovers have outlived their threads for a
         * while; free them now (every other wave). */
        if (wave % 2 == 1)
            left_freed += left_free_all();
        if ((!warm_taken && created >= warmup) || created >= next_report || created >= total) {
            left_freed += left_free_all();
            pool_free_all();
            if (!wait_single_threaded())
                fail_record("main", "detached storm threads still present after 5 s");
            mem_t m = mem_now();
            if (!warm_taken && created >= warmup) {
                warm = m;
                mem_print("warm-up", created, m);
                malloc_trim(0);
                warm_trim = mem_now();
                mem_print("trimmed", created, warm_trim);
                warm_taken = true;
            } else if (created < total) {
                mem_print("progress", created, m);
            }
            while (next_report <= created)
                next_report += 2000;
        }
    }
    left_freed += left_free_all();
    pool_free_all();
    wait_single_threaded();
    end = mem_now();
    mem_print("end", created, end);
    malloc_trim(0);
    end_trim = mem_now();
    mem_print("trimmed", created, end_trim);
    double secs = now_s() - start;
    fprintf(stderr, "# storm: %ld threads created (%ld detached) in waves of 16-64, %ld objects "
            "each, %zu objects outlived their thread and were freed by main, %.2f s\n",
            created, detached, g_storm_objs, left_freed, secs);
    failures_assert_none("thread storm");
    assert_int_equal(created, total);
    /* The bounds, from measurements (10,000 threads, plain and with
     * lg_prof_sample:8): after malloc_trim(0), which hands back every free
     * page and kept sampled page, the figures at the end are within a few
     * hundred KiB of those after the warm-up (stats.metadata moves in
     * 256 KiB chunks, RSS by the C library's cache of thread stacks).
     * Without the trim the figures depend on the highest concurrent use
     * the waves happened to reach (free pages stay resident for
     * dirty_decay_ms): they were seen to grow by up to 11 MiB after the
     * warm-up and then stay flat up to 40,000 threads.  A per-thread leak
     * of 256 bytes over the 9,000 threads after the warm-up (2.2 MiB)
     * exceeds the trimmed bounds of salloc's figures; RSS (4 MiB) also
     * carries the C library's own per-thread bookkeeping. */
    const double rss_bound = 4 * MiB, res_bound = 2 * MiB, map_bound = 2 * MiB, meta_bound = 1 * MiB;
    const double held_bound = 24 * MiB; /* untrimmed: high-water noise */
    struct { const char *name; size_t w, e, wt, et; double bound, held; bool salloc; } fig[] = {
        {"RSS", warm.rss, end.rss, warm_trim.rss, end_trim.rss, rss_bound, held_bound, false},
        {"stats.resident", warm.resident, end.resident, warm_trim.resident, end_trim.resident,
         res_bound, held_bound, true},
        {"stats.mapped", warm.mapped, end.mapped, warm_trim.mapped, end_trim.mapped, map_bound,
         held_bound, true},
        {"stats.metadata", warm.metadata, end.metadata, warm_trim.metadata, end_trim.metadata,
         meta_bound, meta_bound, true},
    };
    char bad[512] = "";
    for (size_t i = 0; i < sizeof fig / sizeof fig[0]; i++) {
        if (fig[i].salloc && !mallctl)
            continue;
        double d = ((double)fig[i].et - (double)fig[i].wt) / MiB;
        double dh = ((double)fig[i].e - (double)fig[i].w) / MiB;
        fprintf(stderr, "# storm growth from thread %ld to %ld: %-14s %+7.2f MiB after malloc_trim "
                "(bound %.0f), %+7.2f MiB as held (bound %.0f)\n", warmup, created, fig[i].name, d,
                fig[i].bound / MiB, dh, fig[i].held / MiB);
        if (total - warmup < 2000 || bad[0])
            continue; /* too few threads after the warm-up to tell a leak from noise */
        if (d * MiB > fig[i].bound || dh * MiB > fig[i].held)
            snprintf(bad, sizeof bad, "%s grew from %zu to %zu bytes after malloc_trim (bound %.0f "
                     "MiB), from %zu to %zu as held (bound %.0f MiB), from thread %ld to %ld",
                     fig[i].name, fig[i].wt, fig[i].et, fig[i].bound / MiB, fig[i].w, fig[i].e,
                     fig[i].held / MiB, warmup, created);
    }
    if (bad[0])
        fail_msg("%s", bad);
}

/* ------------------------------------------------------------------ */
/* Children: waiting with a time limit. */

/* Waits for `pid` at most `limit_s`; kills it after that.  Returns the wait
 * status, or -1 when it hung (it is killed) or waitpid failed. */
static int wait_child(pid_t pid, double limit_s, double *took)
{
    double t0 = now_s(), until = t0 + limit_s;
    long nap = 20;
    int status;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) {
            if (took)
                *took = now_s() - t0;
            return status;
        }
        if (got < 0 && errno != EINTR)
            return -1;
        if (now_s() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (took)
                *took = now_s() - t0;
            return -1;
        }
        sleep_us(nap);
        if (nap < 2000)
            nap *= 2;
    }
}

static void describe_status(int status, char *buf, size_t size)
{
    if (status == -1)
        snprintf(buf, size, "hung (killed after the time limit)");
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "exit status %d", WEXITSTATUS(status));
}

/* ------------------------------------------------------------------ */
/* Fork storm. */

static atomic_bool g_busy_stop;
static atomic_long g_busy_ops;
static bool g_busy_nice;

static void *busy_thread(void *arg)
{
    uint64_t serial = (uint64_t)(uintptr_t)arg;
    char who[32];
    snprintf(who, sizeof who, "busy thread #%" PRIu64, serial);
    rng_t r = rng_for(2, serial);
    enum { SLOTS = 64 };
    blk_t b[SLOTS] = {{0}};
    long ops = 0;
    /* Full speed, but at the lowest priority: whenever a core is free they
     * allocate, yet the forking thread and its children are not starved on
     * a small machine (each fork still finds them in the middle of calls). */
    if (g_busy_nice)
        setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
    while (!atomic_load_explicit(&g_busy_stop, memory_order_relaxed)) {
        blk_t *s = &b[rng_below(&r, SLOTS)];
        if (s->p)
            blk_release(who, s);
        else if (!blk_new_sized(who, &r, s, pick_busy_size(&r)))
            break;
        ops++;
    }
    for (int i = 0; i < SLOTS; i++)
        blk_release(who, &b[i]);
    atomic_fetch_add(&g_busy_ops, ops);
    return NULL;
}

static void start_busy(pthread_t *t, int n)
{
    atomic_store(&g_busy_stop, false);
    atomic_store(&g_busy_ops, 0);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, busy_thread, (void *)(uintptr_t)i) != 0)
            fail_msg("pthread_create failed");
}

static long stop_busy(pthread_t *t, int n)
{
    atomic_store(&g_busy_stop, true);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return atomic_load(&g_busy_ops);
}

/* Exit statuses of a fork-storm child. */
enum {
    CHILD_OK = 0,
    CHILD_INHERITED_DAMAGED = 2,
    CHILD_ALLOC_FAILED = 3,
    CHILD_BLOCK_DAMAGED = 4,
    CHILD_CALLOC_NOT_ZERO = 5,
    CHILD_MALLCTL_FAILED = 6,
    CHILD_DUMP_FAILED = 7,
    CHILD_DUMP_BAD = 8,
    CHILD_THREAD_FAILED = 9,
};

static const char *child_code_name(int code)
{
    switch (code) {
    case CHILD_INHERITED_DAMAGED: return "a block allocated before fork was damaged in the child";
    case CHILD_ALLOC_FAILED: return "an allocation failed in the child";
    case CHILD_BLOCK_DAMAGED: return "a block was damaged in the child";
    case CHILD_CALLOC_NOT_ZERO: return "calloc memory not zero in the child";
    case CHILD_MALLCTL_FAILED: return "mallctl failed in the child";
    case CHILD_DUMP_FAILED: return "prof.dump failed in the child";
    case CHILD_DUMP_BAD: return "the child's dump is not a heap_v2 profile";
    case CHILD_THREAD_FAILED: return "a thread started in the child failed";
    default: return "unknown status";
    }
}

static void *child_thread(void *arg)
{
    (void)arg;
    void *p[100];
    for (int i = 0; i < 100; i++) {
        p[i] = malloc(16 + (size_t)i * 40);
        if (!p[i])
            return (void *)1;
        memset(p[i], i, 16);
    }
    for (int i = 0; i < 100; i++)
        free(p[i]);
    return NULL;
}

/* Whether the file at `path` starts with the heap_v2 header (read with
 * open/read: nothing but the allocator is exercised). */
static bool file_is_heap_v2(const char *path)
{
    char buf[16] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n >= 9 && !memcmp(buf, "heap_v2/", 8);
}

static int fork_child_work(long serial, blk_t *inherited, int n_inherited, long dump_every)
{
    rng_t r = rng_for(3, (uint64_t)serial);
    for (int i = 0; i < n_inherited; i++) {
        if (!blk_ok(&inherited[i]))
            return CHILD_INHERITED_DAMAGED;
        if (i % 2)
            free(inherited[i].p);
    }
    enum { N = 64 };
    blk_t b[N];
    for (int i = 0; i < N; i++) {
        b[i].size = pick_size(&r) % (300 * KiB) + 1;
        b[i].tag = rng_next(&r);
        b[i].p = (i % 4) ? malloc(b[i].size) : calloc(1, b[i].size);
        if (!b[i].p)
            return CHILD_ALLOC_FAILED;
        if (i % 4 == 0)
            for (size_t k = 0; k < b[i].size; k += 997)
                if (b[i].p[k])
                    return CHILD_CALLOC_NOT_ZERO;
        blk_mark(&b[i]);
    }
    for (int i = 0; i < N; i++) {
        if (!blk_ok(&b[i]))
            return CHILD_BLOCK_DAMAGED;
        free(b[i].p);
    }
    if (mallctl) {
        uint64_t e = 1;
        size_t v = 0, len = sizeof v;
        const char *ver = NULL;
        size_t vlen = sizeof ver;
        if (mallctl("epoch", NULL, NULL, &e, sizeof e) || mallctl("stats.allocated", &v, &len, NULL, 0) ||
            v == 0 || mallctl("version", &ver, &vlen, NULL, 0) || !ver || strncmp(ver, "salloc", 6))
            return CHILD_MALLCTL_FAILED;
        if (serial % dump_every == 0) {
            char path[256];
            snprintf(path, sizeof path, "%s/fork.%ld.heap", tmpdir, serial % 8);
            const char *p = path;
            if (mallctl("prof.dump", NULL, NULL, &p, sizeof p) != 0)
                return CHILD_DUMP_FAILED;
            if (!file_is_heap_v2(path))
                return CHILD_DUMP_BAD;
        }
    }
    if (serial % 10 == 0) {
        pthread_t t;
        void *res = (void *)1;
        if (pthread_create(&t, NULL, child_thread, NULL) != 0 || pthread_join(t, &res) != 0 || res)
            return CHILD_THREAD_FAILED;
    }
    return CHILD_OK;
}

static void test_fork_storm(void **state)
{
    (void)state;
    failures_reset();
    long forks = env_long("FORK_COUNT", heavy_sampling() ? 40 : 100, 1);
    int nbusy = (int)env_long("FORK_BUSY", 8, 0);
    long dump_every = env_long("FORK_DUMP_EVERY", 1, 1);
    g_busy_nice = env_long("FORK_BUSY_NICE", 1, 0) != 0;
    if (nbusy > 64)
        nbusy = 64;
    pthread_t busy[64];
    /* Blocks the main thread holds across each fork: the child checks them
     * all and frees half (its copies). */
    enum { NINH = 16 };
    blk_t inh[NINH];
    rng_t r = rng_for(4, 0);
    for (int i = 0; i < NINH; i++)
        assert_true(blk_new("main", &r, &inh[i]));
    start_busy(busy, nbusy);
    double start = now_s(), slowest = 0;
    long done = 0, ok = 0, hung = 0, bad = 0;
    for (long i = 0; i < forks && bad < 10; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            fail_record("main", "fork #%ld: %s", i, strerror(errno));
            break;
        }
        if (pid == 0)
            _exit(fork_child_work(i, inh, NINH, dump_every));
        double took = 0;
        int status = wait_child(pid, CHILD_TIMEOUT_S, &took);
        done++;
        if (took > slowest)
            slowest = took;
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == CHILD_OK) {
            ok++;
            continue;
        }
        char how[128];
        describe_status(status, how, sizeof how);
        hung += status == -1;
        bad++;
        fail_record("main", "fork child #%ld (pid %d): %s%s%s", i, (int)pid, how,
                    status != -1 && WIFEXITED(status) ? ": " : "",
                    status != -1 && WIFEXITED(status) ? child_code_name(WEXITSTATUS(status)) : "");
        if (status == -1)
            break; /* one hang is enough: each costs the whole time limit */
    }
    long ops = stop_busy(busy, nbusy);
    for (int i = 0; i < NINH; i++)
        blk_release("main", &inh[i]);
    fprintf(stderr, "# fork storm: %ld forks with %d busy threads (%ld allocator calls meanwhile), "
            "%ld children exited 0, %ld failed, %ld hung; slowest child %.3f s; %.2f s in all; "
            "prof.dump in every %ld. child%s\n", done, nbusy, ops, ok, bad - hung, hung, slowest,
            now_s() - start, dump_every, mallctl ? "" : " (not salloc: no dumps)");
    failures_assert_none("fork storm");
    assert_int_equal(ok, forks);
}

/* ------------------------------------------------------------------ */
/* fork() while other threads sample every allocation: each sample's stack
 * capture may be anywhere, in salloc or in the C library, when fork()
 * copies the process; the child's own samples must still work. */

static atomic_bool g_race_stop;

static void *race_sampler(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&g_race_stop, memory_order_relaxed)) {
        void *volatile p = malloc(1000); /* volatile: the pair is not optimised away */
        free(p);
    }
    return NULL;
}

static int race_child(void)
{
    for (int i = 0; i < 20; i++) {
        void *volatile p = malloc(1000);
        if (!p)
            return CHILD_ALLOC_FAILED;
        free(p);
    }
    return CHILD_OK;
}

static void test_fork_while_sampling(void **state)
{
    (void)state;
    long forks = env_long("FORK_RACE_COUNT", 120, 1);
    size_t old_lg = 19, len = sizeof old_lg, lg = 8;
    if (mallctl) { /* every 1000-byte malloc sampled (mean interval 256 bytes) */
        assert_int_equal(mallctl("prof.lg_sample", &old_lg, &len, NULL, 0), 0);
        assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &lg, sizeof lg), 0);
    }
    atomic_store(&g_race_stop, false);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race_sampler, NULL), 0);
    double start = now_s();
    long done = 0;
    char bad[256] = "";
    for (long i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(bad, sizeof bad, "fork #%ld: %s", i, strerror(errno));
            break;
        }
        if (pid == 0)
            _exit(race_child());
        int status = wait_child(pid, 5, NULL);
        done++;
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != CHILD_OK) {
            char how[128];
            describe_status(status, how, sizeof how);
            snprintf(bad, sizeof bad, "fork #%ld: the child %s", i, how);
            break;
        }
    }
    atomic_store(&g_race_stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    if (mallctl)
        assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &old_lg, sizeof old_lg), 0);
    fprintf(stderr, "# fork while 3 threads sample every malloc: %ld forks, %s, %.2f s\n", done,
            bad[0] ? bad : "every child exited 0", now_s() - start);
    if (bad[0])
        fail_msg("%s (when a child hangs: another thread was inside dl_iterate_phdr, from salloc's "
                 "stack capture, when fork() copied the process; the child's own capture waits for "
                 "that lock forever)", bad);
}

/* ------------------------------------------------------------------ */
/* fork() while another thread is inside dl_iterate_phdr (as a thread
 * unwinding an exception, or salloc's own stack capture, may be at any
 * time).  glibc does not reset that lock in the child, so the child must
 * not need it to allocate: with glibc's malloc it does not. */

static pthread_mutex_t g_dl_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_dl_cv = PTHREAD_COND_INITIALIZER;
static int g_dl_state; /* 1: inside dl_iterate_phdr, 2: the fork is done */

static int dl_hold_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info, (void)size, (void)arg;
    pthread_mutex_lock(&g_dl_mu);
    g_dl_state = 1;
    pthread_cond_broadcast(&g_dl_cv);
    while (g_dl_state != 2)
        pthread_cond_wait(&g_dl_cv, &g_dl_mu);
    pthread_mutex_unlock(&g_dl_mu);
    return 1;
}

static void *dl_holder(void *arg)
{
    (void)arg;
    dl_iterate_phdr(dl_hold_cb, NULL);
    return NULL;
}

/* In the child: enough allocation that salloc samples some of it (at the
 * default 512 KiB mean, 200 blocks of 64 KiB give ~23 samples). */
static int dl_child_work(void)
{
    void *p[200];
    for (int i = 0; i < 200; i++)
        if (!(p[i] = malloc(64 * KiB + (size_t)i * 16)))
            return CHILD_ALLOC_FAILED;
    for (int i = 0; i < 200; i++)
        free(p[i]);
    for (int i = 0; i < 1000; i++)
        free(malloc(16 + (size_t)i));
    return CHILD_OK;
}

static void test_fork_while_loader_lock_held(void **state)
{
    (void)state;
    g_dl_state = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, dl_holder, NULL), 0);
    pthread_mutex_lock(&g_dl_mu);
    while (g_dl_state != 1)
        pthread_cond_wait(&g_dl_cv, &g_dl_mu);
    pthread_mutex_unlock(&g_dl_mu);
    pid_t pid = fork(); /* the other thread is inside dl_iterate_phdr now */
    if (pid == 0)
        _exit(dl_child_work());
    pthread_mutex_lock(&g_dl_mu);
    g_dl_state = 2;
    pthread_cond_broadcast(&g_dl_cv);
    pthread_mutex_unlock(&g_dl_mu);
    pthread_join(t, NULL);
    assert_true(pid > 0);
    double took = 0;
    int status = wait_child(pid, 5, &took); /* the child needs a few ms */
    char how[128];
    describe_status(status, how, sizeof how);
    fprintf(stderr, "# fork while another thread is inside dl_iterate_phdr: the child %s after %.2f s\n",
            how, took);
    if (status == -1)
        fail_msg("the child of a fork() taken while another thread was inside dl_iterate_phdr hung "
                 "in malloc: a sampled allocation's stack capture calls dl_iterate_phdr, whose lock "
                 "glibc does not reset in the child");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != CHILD_OK)
        fail_msg("the child failed: %s", how);
}

/* ------------------------------------------------------------------ */
/* pthread_cancel of allocating threads (in this process). */

#define CANCEL_HELD 32

typedef struct {
    int kind;          /* 0: testcancel, 1: usleep, 2: stdio, 3: cond wait */
    uint64_t serial;
    blk_t held[CANCEL_HELD];
    atomic_long steps;
    char who[48];
} canceller_t;

static pthread_mutex_t g_cv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

/* Cleanup handler: frees what the thread holds; every third block is left
 * to the main thread instead (it outlives its cancelled thread). */
static void cancel_cleanup(void *arg)
{
    canceller_t *c = arg;
    for (int i = 0; i < CANCEL_HELD; i++) {
        if (!c->held[i].p)
            continue;
        if (i % 3 == 0 && left_put(&c->held[i]))
            continue;
        blk_release(c->who, &c->held[i]);
    }
}

static void unlock_cv(void *arg)
{
    (void)arg;
    pthread_mutex_unlock(&g_cv_lock);
}

static void *cancel_thread(void *arg)
{
    canceller_t *c = arg;
    rng_t r = rng_for(5, c->serial);
    pthread_cleanup_push(cancel_cleanup, c);
    for (;;) {
        blk_t *s = &c->held[rng_below(&r, CANCEL_HELD)];
        if (s->p) {
            blk_release(c->who, s);
        } else {
            blk_t nb;
            if (blk_new(c->who, &r, &nb))
                *s = nb; /* published whole: the handler sees it or not */
        }
        atomic_fetch_add_explicit(&c->steps, 1, memory_order_relaxed);
        switch (c->kind) {
        case 0:
            pthread_testcancel();
            break;
        case 1:
            if (rng_below(&r, 4) == 0)
                usleep((useconds_t)rng_below(&r, 200));
            break;
        case 2: { /* stdio allocates and is full of cancellation points */
            FILE *f = fopen("/dev/null", "w");
            if (f) {
                fprintf(f, "%" PRIu64 " %zu\n", c->serial, s->size);
                fclose(f);
            }
            break;
        }
        default: { /* waits with a cleanup handler of its own */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 50000;
            if (until.tv_nsec >= 1000000000L)
                until.tv_sec++, until.tv_nsec -= 1000000000L;
            pthread_mutex_lock(&g_cv_lock);
            pthread_cleanup_push(unlock_cv, NULL);
            pthread_cond_timedwait(&g_cv, &g_cv_lock, &until);
            pthread_cleanup_pop(1);
            break;
        }
        }
    }
    pthread_cleanup_pop(1);
    return NULL;
}

/* One round: PER_ROUND threads of the given kinds (bit k: kind k), cancelled
 * after `delay_us`; adds to *cancelled and *steps. */
enum { PER_ROUND = 8 };

static void cancel_round(long round, unsigned kinds, long delay_us, long *cancelled, long *steps)
{
    canceller_t *c[PER_ROUND];
    pthread_t t[PER_ROUND];
    int nkinds = 0, kind[4];
    for (int k = 0; k < 4; k++)
        if (kinds & (1u << k))
            kind[nkinds++] = k;
    for (int i = 0; i < PER_ROUND; i++) {
        c[i] = calloc(1, sizeof *c[i]);
        assert_non_null(c[i]);
        c[i]->kind = kind[i % nkinds];
        c[i]->serial = (uint64_t)(round * PER_ROUND + i);
        snprintf(c[i]->who, sizeof c[i]->who, "cancelled thread #%" PRIu64 " kind %d", c[i]->serial,
                 c[i]->kind);
        assert_int_equal(pthread_create(&t[i], NULL, cancel_thread, c[i]), 0);
    }
    sleep_us(delay_us);
    for (int i = 0; i < PER_ROUND; i++)
        pthread_cancel(t[i]);
    for (int i = 0; i < PER_ROUND; i++) {
        void *res = NULL;
        pthread_join(t[i], &res);
        if (res != PTHREAD_CANCELED)
            fail_record("main", "%s: joined with %p, not PTHREAD_CANCELED", c[i]->who, res);
        else
            ++*cancelled;
        *steps += atomic_load(&c[i]->steps);
        free(c[i]);
    }
}

static void test_cancel_allocating_threads(void **state)
{
    (void)state;
    failures_reset();
    long rounds = env_long("CANCEL_ROUNDS", 150, 2);
    double start = now_s();
    long cancelled = 0, steps = 0;
    size_t left = 0;
    /* First half: cancellation at pthread_testcancel, usleep and a
     * condition wait; everything the threads held is freed by their
     * cleanup handlers or by main, so nothing may stay allocated. */
    mem_t before = mem_now();
    for (long round = 0; round < rounds / 2 && !failed(); round++) {
        /* From nothing to a few milliseconds: some are cancelled before
         * their first step, most in the middle of their loop. */
        cancel_round(round, 0xb, (round % 7) * 400, &cancelled, &steps);
        left += left_free_all();
    }
    mem_t mid = mem_now();
    /* Second half: stdio threads too (fopen, fprintf and fclose allocate
     * and are cancellation points; the C library may leak a FILE when it
     * is cancelled inside them, so no leak check here). */
    for (long round = rounds / 2; round < rounds && !failed(); round++) {
        cancel_round(round, 0xf, (round % 7) * 400, &cancelled, &steps);
        left += left_free_all();
    }
    mem_t after = mem_now();
    /* The allocator still works from fresh threads and from this one. */
    pthread_t t;
    void *res = (void *)1;
    assert_int_equal(pthread_create(&t, NULL, child_thread, NULL), 0);
    pthread_join(t, &res);
    assert_null(res);
    fprintf(stderr, "# cancel: %ld threads cancelled while allocating (%ld steps), %zu blocks "
            "outlived them and were freed by main, %.2f s", cancelled, steps, left, now_s() - start);
    if (mallctl)
        fprintf(stderr, "; stats.allocated %.3f MiB before, %.3f after the rounds without stdio, "
                "%.3f after those with stdio", before.allocated / 1048576.0,
                mid.allocated / 1048576.0, after.allocated / 1048576.0);
    fprintf(stderr, "\n");
    failures_assert_none("cancel");
    assert_int_equal(cancelled, rounds * PER_ROUND);
    /* Sampled blocks count whole pages in stats.allocated; 1 MiB is far
     * above what the main thread's own bookkeeping moves. */
    if (mallctl && mid.allocated > before.allocated + 1 * MiB) {
        /* Seen once (15.4 MiB, stop 57), never since: where the bytes sit,
         * and whether they are still there now, after a pause and after
         * malloc_trim (which empties the transfer caches and the exited
         * threads' records), so that the next failure says more. */
        allocated_where("after the rounds without stdio", mid.small, mid.large, mid.tcache);
        mem_t later = mem_now();
        allocated_where("after the rounds with stdio", later.small, later.large, later.tcache);
        usleep(200 * 1000);
        later = mem_now();
        allocated_where("200 ms later", later.small, later.large, later.tcache);
        malloc_trim(0);
        later = mem_now();
        allocated_where("after malloc_trim", later.small, later.large, later.tcache);
        fail_msg("stats.allocated grew from %zu to %zu over threads cancelled while allocating",
                 before.allocated, mid.allocated);
    }
}

/* ------------------------------------------------------------------ */
/* Children re-executed from this binary: exit() while threads allocate,
 * and cancellation with interval dumps on. */

static const char *self_exe(void)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        fail_msg("readlink(/proc/self/exe): %s", strerror(errno));
    path[n] = '\0';
    return path;
}

/* Starts this binary with `args` (argv[1..]) and SALLOC_CONF extended by
 * `conf_extra` (if not NULL); returns its wait status, -1 if it hung. */
static int spawn_self(char *const *args, const char *conf_extra, double limit_s, double *took)
{
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)self_exe();
    for (int i = 0; args[i] && a < 15; i++)
        argv[a++] = args[i];
    argv[a] = NULL;
    static char conf[8192];
    char *env[1024];
    int n = 0;
    const char *old = getenv("SALLOC_CONF");
    for (char **e = environ; *e && n < 1000; e++)
        if (!conf_extra || strncmp(*e, "SALLOC_CONF=", 12))
            env[n++] = *e;
    if (conf_extra) {
        snprintf(conf, sizeof conf, "SALLOC_CONF=%s%s%s", old && *old ? old : "",
                 old && *old ? "," : "", conf_extra);
        env[n++] = conf;
    }
    env[n] = NULL;
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, env);
    if (rc != 0)
        fail_msg("posix_spawn %s: %s", argv[0], strerror(rc));
    return wait_child(pid, limit_s, took);
}

static atomic_int g_exit_running;

static void *exit_worker(void *arg)
{
    long serial = (long)(intptr_t)arg;
    rng_t r = rng_for(6, (uint64_t)serial);
    blk_t b[64] = {{0}};
    atomic_fetch_add(&g_exit_running, 1);
    for (;;) {
        blk_t *s = &b[rng_below(&r, 64)];
        if (s->p) {
            if (!blk_ok(s))
                _exit(90); /* damaged */
            free(s->p);
            s->p = NULL;
        } else {
            s->size = pick_size(&r);
            s->tag = rng_next(&r);
            s->p = malloc(s->size);
            if (!s->p)
                _exit(91);
            blk_mark(s);
        }
    }
    return NULL;
}

static void exit_atexit(void)
{
    /* Allocation from an exit handler, while the other threads still run. */
    void *p[32];
    for (int i = 0; i < 32; i++)
        p[i] = malloc(100 * (size_t)i + 1);
    for (int i = 0; i < 32; i++)
        free(p[i]);
}

static void *exit_caller(void *arg)
{
    int status = (int)(intptr_t)arg;
    while (atomic_load(&g_exit_running) < 4)
        sleep_us(50);
    sleep_us(500 + 100 * (status % 13));
    exit(status);
}

/* Child mode "--exit-child <status> <from-main>": 4 allocating threads,
 * then exit(status) from another thread (or from main). */
static int exit_child_main(int status, bool from_main)
{
    atexit(exit_atexit);
    pthread_t t;
    for (long i = 0; i < 4; i++)
        if (pthread_create(&t, NULL, exit_worker, (void *)(intptr_t)i) != 0)
            return 92;
    if (from_main) {
        while (atomic_load(&g_exit_running) < 4)
            sleep_us(50);
        sleep_us(500 + 100 * (status % 13));
        exit(status);
    }
    if (pthread_create(&t, NULL, exit_caller, (void *)(intptr_t)status) != 0)
        return 93;
    for (;;)
        pause();
}

static int count_dumps(const char *prefix_name, int *complete)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    *complete = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix_name, strlen(prefix_name)))
            continue;
        n++;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char line[256];
        bool header = fgets(line, sizeof line, f) && !strncmp(line, "heap_v2/", 8), maps = false;
        while (fgets(line, sizeof line, f))
            maps |= !strcmp(line, "MAPPED_LIBRARIES:\n");
        fclose(f);
        *complete += header && maps && !strstr(e->d_name, ".tmp.");
        unlink(path);
    }
    if (d)
        closedir(d);
    return n;
}

static void test_exit_while_allocating(void **state)
{
    (void)state;
    long rounds = env_long("EXIT_ROUNDS", 40, 1);
    double start = now_s(), slowest = 0;
    long ok = 0, finals = 0, complete_finals = 0;
    char first_bad[256] = "";
    for (long i = 0; i < rounds; i++) {
        int want = 1 + (int)(i % 120);
        bool from_main = i % 4 == 3, final = i % 2 == 1;
        char st[16], fm[4], conf[512];
        snprintf(st, sizeof st, "%d", want);
        snprintf(fm, sizeof fm, "%d", from_main);
        snprintf(conf, sizeof conf, "prof_final:true,prof_prefix:%s/exitfinal", tmpdir);
        double took = 0;
        int status = spawn_self((char *const[]){(char *)"--exit-child", st, fm, NULL},
                                final ? conf : NULL, CHILD_TIMEOUT_S, &took);
        if (took > slowest)
            slowest = took;
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == want) {
            ok++;
        } else if (!first_bad[0]) {
            char how[128];
            describe_status(status, how, sizeof how);
            snprintf(first_bad, sizeof first_bad, "round %ld (exit(%d) from %s%s): %s", i, want,
                     from_main ? "main" : "a thread", final ? ", prof_final" : "", how);
        }
        if (final) {
            int complete;
            int n = count_dumps("exitfinal.", &complete);
            finals += n;
            complete_finals += complete;
            if (mallctl && (n != 1 || complete != 1) && !first_bad[0])
                snprintf(first_bad, sizeof first_bad,
                         "round %ld: %d final dump files, %d complete (want 1, 1)", i, n, complete);
        }
    }
    fprintf(stderr, "# exit(): %ld of %ld children exited with the status given to exit() while 4 "
            "threads allocated (%ld with prof_final: %ld final dumps, %ld complete); slowest "
            "%.3f s; %.2f s in all\n", ok, rounds, rounds / 2, finals, complete_finals, slowest,
            now_s() - start);
    if (first_bad[0])
        fail_msg("%s", first_bad);
}

/* Child mode "--cancel-interval-child": threads allocate (with
 * pthread_testcancel between batches) while interval dumps are due every
 * few hundred KiB, so a dump often runs inside one of their malloc calls;
 * they are cancelled, then the main thread must still be able to dump.
 * Exit 0, or a status naming what failed; a hang is caught by the parent. */
static atomic_long g_ci_steps;

static void *ci_thread(void *arg)
{
    rng_t r = rng_for(7, (uint64_t)(uintptr_t)arg);
    blk_t b[32] = {{0}};
    for (;;) {
        for (int k = 0; k < 64; k++) {
            blk_t *s = &b[rng_below(&r, 32)];
            if (s->p) {
                free(s->p);
                s->p = NULL;
            } else {
                s->size = 1 + (size_t)rng_below(&r, 16 * KiB);
                s->p = malloc(s->size);
                if (s->p)
                    s->p[0] = 1;
            }
        }
        atomic_fetch_add_explicit(&g_ci_steps, 1, memory_order_relaxed);
        pthread_testcancel();
    }
    return NULL;
}

static int cancel_interval_child_main(const char *dir)
{
    for (int round = 0; round < 30; round++) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            if (pthread_create(&t[i], NULL, ci_thread, (void *)(uintptr_t)(round * 3 + i)) != 0)
                return 2;
        sleep_us(2000 + 300 * round);
        for (int i = 0; i < 3; i++)
            pthread_cancel(t[i]);
        for (int i = 0; i < 3; i++) {
            void *res;
            pthread_join(t[i], &res);
            if (res != PTHREAD_CANCELED)
                return 3;
        }
        if (mallctl) {
            char path[512];
            snprintf(path, sizeof path, "%s/after_cancel.heap", dir);
            const char *p = path;
            if (mallctl("prof.dump", NULL, NULL, &p, sizeof p) != 0)
                return 4;
        }
        void *q = malloc(300 * KiB); /* an allocation that takes the page heap */
        if (!q)
            return 5;
        free(q);
    }
    return 0;
}

static void test_cancel_with_interval_dumps(void **state)
{
    (void)state;
    char conf[512];
    snprintf(conf, sizeof conf, "lg_prof_interval:18,prof_prefix:%s/interval", tmpdir);
    double took = 0, start = now_s();
    /* The child takes well under a second; 10 s is a hang. */
    int status = spawn_self((char *const[]){(char *)"--cancel-interval-child", tmpdir, NULL}, conf,
                            10, &took);
    int complete = 0;
    int dumps = count_dumps("interval.", &complete);
    char how[128];
    describe_status(status, how, sizeof how);
    fprintf(stderr, "# cancel with interval dumps: child %s after %.2f s; %d interval dump files "
            "(%d complete, %d incomplete or left-over temporaries); %.2f s\n", how, took, dumps,
            complete, dumps - complete, now_s() - start);
    if (status == -1)
        fail_msg("the child hung: after threads were cancelled while allocating with interval dumps "
                 "on (lg_prof_interval:18), its main thread could not finish (prof.dump, or a "
                 "malloc that dumps, blocked for 10 s)");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the child failed: %s", how);
    if (mallctl && complete != dumps)
        fail_msg("%d of %d interval dump files are incomplete or temporaries left behind",
                 dumps - complete, dumps);
}

/* ------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "--exit-child"))
        return exit_child_main(atoi(argv[2]), atoi(argv[3]) != 0);
    if (argc >= 3 && !strcmp(argv[1], "--cancel-interval-child"))
        return cancel_interval_child_main(argv[2]);
    if (!mallctl)
        fprintf(stderr, "# not running under salloc: salloc's statistics and dumps are skipped\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_storm),
        cmocka_unit_test(test_fork_storm),
        cmocka_unit_test(test_fork_while_sampling),
        cmocka_unit_test(test_fork_while_loader_lock_held),
        cmocka_unit_test(test_cancel_allocating_threads),
        cmocka_unit_test(test_exit_while_allocating),
        cmocka_unit_test(test_cancel_with_interval_dumps),
    };
    /* STORM_TEST_FILTER: run only the tests matching this pattern
     * (cmocka's wildcards * and ?), e.g. STORM_TEST_FILTER='*fork*'. */
    const char *filter = getenv("STORM_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("storms", tests, setup, teardown);
}
