/*
 * test_stress.c: multi-threaded stress of the public malloc API only, so it
 * runs against any allocator (glibc, jemalloc, salloc via LD_PRELOAD).
 *
 * Every block is filled with a pattern derived from a per-object tag and
 * checked before it is freed or resized; calloc must give zeros, aligned
 * results must be aligned, malloc_usable_size must cover the request.
 * Objects cross threads through a mutex-protected exchange, workers come and
 * go, threads allocate big blocks in bursts and free each other's, and a
 * few fork()s happen while other threads are busy.  Where the allocator has
 * jemalloc's thread.tcache.enabled (salloc, jemalloc), workers turn their
 * thread caches off and on as they go.
 *
 * Worker threads never call cmocka asserts: they record failures
 * (stress_common.h) and the main thread asserts after joining them.
 *
 * Environment: STRESS_SECONDS (default 4) is the length of the random-ops
 * test; STRESS_SEED (default fixed) changes every thread's seed;
 * STRESS_FORKS (default 50) is how many times the fork loop forks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "stress_common.h"

/* The allocator's control interface (salloc's, jemalloc's); NULL when it
 * has none (glibc). */
int mallctl(const char *, void *, size_t *, void *, size_t) __attribute__((weak));

#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRESS_TSAN 1
#endif
#endif
#ifndef STRESS_TSAN
#define STRESS_TSAN 0
#endif
#if STRESS_TSAN || defined(__SANITIZE_ADDRESS__)
#define STRESS_SANITIZER 1
#else
#define STRESS_SANITIZER 0
#endif

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

#define NWORKERS        6          /* live workers in the random-ops test */
#define NSLOTS          256        /* objects a worker holds at most */
#define WORKER_BUDGET   (32 * MiB) /* requested bytes a worker holds at most */
#define XSLOTS          2048       /* capacity of the cross-thread exchange */
#define XBUDGET         (64 * MiB) /* bytes the exchange holds at most */
#define MAX_SIZE        (4 * MiB)  /* largest single request */
#define CHILD_TIMEOUT_S 60         /* a forked child taking longer is hung */

/* ------------------------------------------------------------------ */
/* Time, configuration, random numbers. */

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static double stress_seconds(void)
{
    const char *s = getenv("STRESS_SECONDS");
    double v = s ? strtod(s, NULL) : 0.0;
    return v > 0.0 ? v : 4.0;
}

static uint64_t base_seed(void)
{
    const char *s = getenv("STRESS_SEED");
    return s ? strtoull(s, NULL, 0) : UINT64_C(0x5a110c5eed);
}

/* A seed for the n-th thread of a test, fixed for a given STRESS_SEED. */
static uint64_t thread_seed(uint64_t test_salt, uint64_t n)
{
    rng_t r = { base_seed() ^ (test_salt << 40) ^ (n * UINT64_C(0x2545F4914F6CDD1D)) };
    return rng_next(&r);
}

/* ------------------------------------------------------------------ */
/* Block patterns: byte i of a block is byte (i % 8) of word(tag, i / 8),
 * so a realloc'd block keeps a valid prefix under the same tag.  Words
 * step by an odd constant: cheap to produce in a loop, and a block copied
 * to the wrong offset or another block's words never match. */

#define PATTERN_STEP UINT64_C(0x9E3779B97F4A7C15)

static inline uint64_t pattern_word(uint64_t tag, uint64_t k)
{
    return tag + k * PATTERN_STEP;
}

/* Host order to the little-endian order the pattern has in memory. */
static inline uint64_t to_le(uint64_t w)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static inline unsigned char pattern_byte(uint64_t tag, size_t i)
{
    return (unsigned char)(pattern_word(tag, i >> 3) >> (8 * (i & 7)));
}

static void pattern_fill(unsigned char *p, size_t from, size_t to, uint64_t tag)
{
    size_t i = from;
    for (; i < to && (i & 7); i++)
        p[i] = pattern_byte(tag, i);
    uint64_t w = pattern_word(tag, i >> 3);
    for (; i + 8 <= to; i += 8, w += PATTERN_STEP) {
        uint64_t m = to_le(w);
        memcpy(p + i, &m, 8);
    }
    for (; i < to; i++)
        p[i] = pattern_byte(tag, i);
}

/* Whether the words at p (byte offset i, a multiple of 8) through i + n*8
 * all match; no early exit, so the compiler can vectorise it. */
static bool pattern_words_ok(const unsigned char *p, size_t i, size_t n, uint64_t tag)
{
    uint64_t w = pattern_word(tag, i >> 3), diff = 0;
    for (size_t k = 0; k < n; k++, w += PATTERN_STEP) {
        uint64_t m;
        memcpy(&m, p + i + 8 * k, 8);
        diff |= m ^ to_le(w);
    }
    return diff == 0;
}

/* Offset of the first byte in [from, to) that breaks the pattern, or
 * SIZE_MAX when all are intact. */
static size_t pattern_check(const unsigned char *p, size_t from, size_t to, uint64_t tag)
{
    enum { CHUNK = 64 };   /* words checked at a time */
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (p[i] != pattern_byte(tag, i))
            return i;
    for (; i + 8 * CHUNK <= to; i += 8 * CHUNK)
        if (!pattern_words_ok(p, i, CHUNK, tag))
            break;   /* the byte loop below finds the exact offset */
    for (; i < to; i++)
        if (p[i] != pattern_byte(tag, i))
            return i;
    return SIZE_MAX;
}

/* Offset of the first non-zero byte of p[0, n), or SIZE_MAX. */
static size_t zero_check(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return i;
    return SIZE_MAX;
}

static uint64_t make_tag(const void *p, size_t size, uint64_t salt)
{
    rng_t r = { (uint64_t)(uintptr_t)p ^ ((uint64_t)size << 17) ^ salt };
    return rng_next(&r);
}

/* The alignment malloc owes a request of `size` bytes (fundamental
 * alignment, 16 on x86-64, or less for objects too small to need it). */
static size_t natural_align(size_t size)
{
    size_t a = 1;
    while (a < _Alignof(max_align_t) && a * 2 <= size)
        a *= 2;
    return a;
}

/* ------------------------------------------------------------------ */
/* Objects and the cross-thread exchange. */

typedef struct {
    unsigned char *p;  /* may be NULL only for a 0-byte request */
    size_t size;       /* bytes requested and patterned */
    size_t align;      /* alignment asked for (natural one if none) */
    uint64_t tag;      /* pattern tag */
    int owner;         /* serial number of the allocating thread */
    bool used;
} obj_t;

/* Checks the pattern of a live object; false (and a recorded failure) when
 * it was damaged.  `what` says when the check happened. */
static bool obj_verify(const char *who, const obj_t *o, const char *what)
{
    size_t bad = pattern_check(o->p, 0, o->size, o->tag);
    if (bad == SIZE_MAX)
        return true;
    fail_record(who, "%s: block %p size %zu (align %zu, allocated by thread #%d) "
                "corrupted at offset %zu", what, (void *)o->p, o->size, o->align,
                o->owner, bad);
    return false;
}

static void obj_release(const char *who, obj_t *o, const char *what)
{
    obj_verify(who, o, what);
    free(o->p);
    o->used = false;
}

static struct {
    pthread_mutex_t lock;
    obj_t slot[XSLOTS];
    size_t count;
    size_t bytes;
} g_x = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Puts *o in the exchange.  When the exchange is full, a random resident
 * leaves it through *evicted (used=false when nothing left).  Returns false
 * when *o does not fit the byte budget (the caller then frees it itself). */
static bool exchange_put(obj_t *o, rng_t *r, obj_t *evicted)
{
    bool ok = false;
    evicted->used = false;
    pthread_mutex_lock(&g_x.lock);
    if (g_x.bytes + o->size <= XBUDGET) {
        if (g_x.count == XSLOTS) {
            size_t i = (size_t)rng_below(r, g_x.count);
            *evicted = g_x.slot[i];
            g_x.slot[i] = g_x.slot[--g_x.count];
            g_x.bytes -= evicted->size;
        }
        g_x.slot[g_x.count++] = *o;
        g_x.bytes += o->size;
        ok = true;
    }
    pthread_mutex_unlock(&g_x.lock);
    return ok;
}

/* Takes a random object out of the exchange; false when it is empty. */
static bool exchange_take(rng_t *r, obj_t *out)
{
    bool ok = false;
    pthread_mutex_lock(&g_x.lock);
    if (g_x.count > 0) {
        size_t i = (size_t)rng_below(r, g_x.count);
        *out = g_x.slot[i];
        g_x.slot[i] = g_x.slot[--g_x.count];
        g_x.bytes -= out->size;
        ok = true;
    }
    pthread_mutex_unlock(&g_x.lock);
    return ok;
}

/* Main thread, no workers running: verify and free whatever is left. */
static size_t exchange_drain(void)
{
    rng_t r = { 1 };
    obj_t o;
    size_t n = 0;
    while (exchange_take(&r, &o)) {
        obj_release("main (drain)", &o, "exchange drain");
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ */
/* Random requests. */

/* Mostly small, some medium, rare few-MiB ones. */
static size_t pick_size(rng_t *r)
{
    uint64_t c = rng_below(r, 10000);
    if (c < 7000)
        return (size_t)rng_below(r, 129);
    if (c < 9000)
        return 129 + (size_t)rng_below(r, 2 * KiB);
    if (c < 9940)
        return 2 * KiB + (size_t)rng_below(r, 128 * KiB);
    if (c < 9990)
        return 128 * KiB + (size_t)rng_below(r, 1 * MiB);
    return 1 * MiB + (size_t)rng_below(r, 3 * MiB + 1);
}

/* Powers of two from 16; rarely up to 64 MiB. */
static size_t pick_align(rng_t *r)
{
    uint64_t c = rng_below(r, 10000);
    if (c < 8000)
        return (size_t)16 << rng_below(r, 5);     /* 16 .. 256 */
    if (c < 9900)
        return (size_t)512 << rng_below(r, 4);    /* 512 .. 4 KiB */
    if (c < 9995)
        return (size_t)8192 << rng_below(r, 9);   /* 8 KiB .. 2 MiB */
    return (size_t)(4 * MiB) << rng_below(r, 5);  /* 4 .. 64 MiB */
}

/* ------------------------------------------------------------------ */
/* A worker of the random-ops test. */

typedef struct worker {
    pthread_t thread;
    int serial;             /* n-th worker of the test */
    uint64_t seed;
    rng_t rng;
    long ops_goal;          /* exits after this many operations */
    double deadline;
    char who[64];           /* "worker #n seed 0x..." for messages */
    size_t live_bytes;      /* requested bytes held in slot[] */
    bool huge_align_live;   /* holds one alignment > 2 MiB */
    bool done;              /* set under g_sup.lock when it exits */
    /* results, read by the main thread after joining */
    long ops, allocs, frees, cross_frees, handed, reallocs, forks, toggles;
    obj_t slot[NSLOTS];
} worker_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int finished;           /* workers that set done since last reset */
    double next_fork;       /* when the next fork may happen */
    int forks_left;
    double fork_every;
} g_sup = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0 };

/* Alignment of a freshly returned block, size and usable size: all that
 * can be checked without knowing the allocator. */
static bool check_new_block(worker_t *w, const obj_t *o, const char *fn)
{
    if (o->p == NULL) {
        if (o->size == 0)
            return true;
        fail_record(w->who, "%s(%zu, align %zu) returned NULL (errno %d)", fn,
                    o->size, o->align, errno);
        return false;
    }
    /* A 0-byte block holds no object, so no alignment is owed (jemalloc's
     * memalign(a, 0) returns 8-byte aligned pointers). */
    if (o->size != 0 && (uintptr_t)o->p % o->align != 0) {
        fail_record(w->who, "%s(%zu) returned %p, not aligned to %zu", fn, o->size,
                    (void *)o->p, o->align);
        return false;
    }
    size_t usable = malloc_usable_size(o->p);
    if (usable < o->size) {
        fail_record(w->who, "%s(%zu): malloc_usable_size %zu < requested", fn,
                    o->size, usable);
        return false;
    }
    return true;
}

/* The cost an object counts against the worker's budget. */
static size_t obj_cost(const obj_t *o)
{
    return o->size;
}

static size_t budget_size(worker_t *w, size_t want)
{
    if (w->live_bytes + want > WORKER_BUDGET)
        return want % 256;
    return want;
}

/* calloc(n, m) with n * m == size: the split is random. */
static void *do_calloc(rng_t *r, size_t size)
{
    static const size_t elems[] = { 1, 2, 4, 8, 16, 24 };
    size_t m = elems[rng_below(r, 6)];
    size_t n = size / m;
    if (n * m != size)
        n = size, m = 1;
    return calloc(n, m);
}

/* Allocates into the empty slot *o with a random function. */
static bool worker_alloc(worker_t *w, obj_t *o)
{
    rng_t *r = &w->rng;
    const char *fn;
    int rc = 0;
    memset(o, 0, sizeof *o);
    o->size = budget_size(w, pick_size(r));
    o->align = natural_align(o->size);
    o->owner = w->serial;
    uint64_t c = rng_below(r, 100);
    bool zeroed = false;

    if (c < 25 && !w->huge_align_live) {
        o->align = pick_align(r);
        if (o->align > 2 * MiB)
            o->size %= 64 * KiB;   /* keep the huge-alignment ones cheap */
        if (c < 10) {
            fn = "posix_memalign";
            void *p = NULL;
            rc = posix_memalign(&p, o->align, o->size);
            o->p = rc == 0 ? p : NULL;
            errno = rc;
        } else if (c < 18 && o->align <= 64 * KiB) {
            /* C11 wants a size that is a multiple of the alignment (TSan
             * enforces it); larger alignments go to memalign below. */
            fn = "aligned_alloc";
            o->size = (o->size + o->align - 1) & ~(o->align - 1);
            o->p = aligned_alloc(o->align, o->size);
        } else {
            fn = "memalign";
            o->p = memalign(o->align, o->size);
        }
    } else if (c < 45) {
        fn = "calloc";
        o->p = do_calloc(r, o->size);
        zeroed = true;
    } else if (c < 52) {
        fn = "reallocarray(NULL)";
        o->p = reallocarray(NULL, 1, o->size);
    } else if (c < 57) {
        fn = "realloc(NULL)";
        o->p = realloc(NULL, o->size);
    } else {
        fn = "malloc";
        o->p = malloc(o->size);
    }
    if (!check_new_block(w, o, fn)) {
        free(o->p);
        return false;
    }
    if (zeroed && o->p) {
        size_t bad = zero_check(o->p, o->size);
        if (bad != SIZE_MAX) {
            fail_record(w->who, "calloc(%zu) byte %zu is not zero", o->size, bad);
            free(o->p);
            return false;
        }
    }
    o->tag = make_tag(o->p, o->size, w->seed);
    pattern_fill(o->p, 0, o->size, o->tag);
    o->used = true;
    w->live_bytes += obj_cost(o);
    if (o->align > 2 * MiB)
        w->huge_align_live = true;
    w->allocs++;
    return true;
}

/* Drops *o from the worker's books (before it is freed or handed over). */
static void worker_forget(worker_t *w, obj_t *o)
{
    w->live_bytes -= obj_cost(o);
    if (o->align > 2 * MiB)
        w->huge_align_live = false;
}

static void worker_free_foreign(worker_t *w, obj_t *o, const char *what)
{
    if (o->owner != w->serial)
        w->cross_frees++;
    w->frees++;
    obj_release(w->who, o, what);
}

/* Hands *o to some other thread through the exchange. */
static void worker_hand_over(worker_t *w, obj_t *o)
{
    obj_t evicted;
    worker_forget(w, o);
    if (!obj_verify(w->who, o, "before hand-over")) {
        o->used = false;   /* leaked on purpose: it is corrupt */
        return;
    }
    if (exchange_put(o, &w->rng, &evicted)) {
        w->handed++;
        o->used = false;
        if (evicted.used)
            worker_free_foreign(w, &evicted, "evicted from exchange");
    } else {
        worker_free_foreign(w, o, "exchange full");
    }
}

/* realloc or reallocarray to a new size; the prefix must survive. */
static void worker_realloc(worker_t *w, obj_t *o)
{
    rng_t *r = &w->rng;
    size_t old = o->size;
    size_t want;
    uint64_t c = rng_below(r, 4);
    if (c == 0)
        want = old < 64 * KiB ? old * 2 + 1 : old / 3;   /* no runaway growth */
    else if (c == 1)
        want = old / 2;
    else if (c == 2)
        want = old + rng_below(r, 64);
    else
        want = pick_size(r);
    if (want > MAX_SIZE)
        want = MAX_SIZE;
    if (want > old && w->live_bytes + (want - old) > WORKER_BUDGET)
        want = old / 2;
    if (want == 0)
        want = 1;   /* realloc(p, 0) frees in glibc, not everywhere */
    if (!obj_verify(w->who, o, "before realloc"))
        return;
    bool as_array = rng_below(r, 4) == 0 && want % 8 == 0;
    unsigned char *q = as_array ? reallocarray(o->p, want / 8, 8) : realloc(o->p, want);
    const char *fn = as_array ? "reallocarray" : "realloc";
    if (q == NULL) {
        fail_record(w->who, "%s(%p, %zu) returned NULL", fn, (void *)o->p, want);
        return;
    }
    worker_forget(w, o);
    o->p = q;
    o->size = want;
    o->align = natural_align(want);
    size_t keep = old < want ? old : want;
    size_t bad = pattern_check(q, 0, keep, o->tag);
    if (bad != SIZE_MAX)
        fail_record(w->who, "%s %zu -> %zu lost the prefix at offset %zu", fn, old,
                    want, bad);
    if ((uintptr_t)q % o->align != 0)
        fail_record(w->who, "%s(%zu) returned misaligned %p", fn, want, (void *)q);
    if (malloc_usable_size(q) < want)
        fail_record(w->who, "%s(%zu): usable size %zu too small", fn, want,
                    malloc_usable_size(q));
    pattern_fill(q, keep, want, o->tag);
    w->live_bytes += obj_cost(o);
    w->reallocs++;
}

/* malloc_usable_size must cover the request, and its slack must be
 * writable without harming anything else (checked later by neighbours). */
static void worker_usable(worker_t *w, obj_t *o)
{
    if (!o->p || !obj_verify(w->who, o, "usable-size check"))
        return;
    size_t usable = malloc_usable_size(o->p);
    if (usable < o->size) {
        fail_record(w->who, "malloc_usable_size(%p) = %zu < %zu", (void *)o->p,
                    usable, o->size);
        return;
    }
#if !STRESS_SANITIZER   /* sanitizers treat the slack as out of bounds */
    size_t end = usable - o->size > 64 * KiB ? o->size + 64 * KiB : usable;
    memset(o->p + o->size, 0xa5, end - o->size);
#endif
}

/* ------------------------------------------------------------------ */
/* fork() from a busy multi-threaded process. */

/* In a child only: stderr by write(2), no locks, no stdio. */
static void child_say(const char *msg)
{
    ssize_t rc = write(2, msg, strlen(msg));
    (void)rc;
}

/* The child's work: check and free part of what this thread had before the
 * fork, then allocate, verify and free `rounds` x 512 varied objects.
 * Returns an exit status (0 ok). */
static int child_work(obj_t *inherited, size_t n_inherited, uint64_t seed, int rounds)
{
    for (size_t i = 0; i < n_inherited; i += 2) {
        obj_t *o = &inherited[i];
        if (!o->used)
            continue;
        if (pattern_check(o->p, 0, o->size, o->tag) != SIZE_MAX) {
            child_say("stress child: inherited block corrupted after fork\n");
            return 2;
        }
        free(o->p);
    }
    rng_t r = { seed };
    enum { N = 512 };
    static obj_t objs[N];   /* static: the child's stack is the worker's */
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < N; i++) {
            objs[i].size = pick_size(&r) % (256 * KiB);
            objs[i].p = (i & 3) ? malloc(objs[i].size) : calloc(1, objs[i].size);
            if (!objs[i].p) {
                child_say("stress child: allocation failed after fork\n");
                return 3;
            }
            objs[i].tag = make_tag(objs[i].p, objs[i].size, seed);
            pattern_fill(objs[i].p, 0, objs[i].size, objs[i].tag);
        }
        for (int i = 0; i < N; i++) {
            if (pattern_check(objs[i].p, 0, objs[i].size, objs[i].tag) != SIZE_MAX) {
                child_say("stress child: block corrupted after fork\n");
                return 4;
            }
            free(objs[i].p);
        }
    }
    return 0;
}

/* Waits for `pid` at most CHILD_TIMEOUT_S seconds; kills it after that.
 * Returns its wait status, or -1 when it hung (killed) or waitpid failed. */
static int wait_child(pid_t pid)
{
    double until = now_s() + CHILD_TIMEOUT_S;
    int status;
    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return status;
        if (got < 0 && errno != EINTR)
            return -1;
        if (now_s() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        sleep_ms(1);
    }
}

/* Forks a child that runs child_work on `inherited`; records a failure
 * when the child does not exit 0.  `who` names the caller in messages. */
static void fork_and_check(const char *who, obj_t *inherited, size_t n, uint64_t seed)
{
    pid_t pid = fork();
    if (pid < 0) {
        fail_record(who, "fork failed: %s", strerror(errno));
        return;
    }
    if (pid == 0)
        _exit(child_work(inherited, n, seed, 6));
    int status = wait_child(pid);
    if (status == -1)
        fail_record(who, "forked child %d hung for %d s (deadlock after fork?)",
                    (int)pid, CHILD_TIMEOUT_S);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_record(who, "forked child %d: %s %d", (int)pid,
                    WIFSIGNALED(status) ? "killed by signal" : "exit status",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* Forks when the schedule says one is due; at most one worker claims it. */
static void worker_maybe_fork(worker_t *w)
{
    bool mine = false;
    double t = now_s();
    pthread_mutex_lock(&g_sup.lock);
    if (g_sup.forks_left > 0 && t >= g_sup.next_fork) {
        g_sup.forks_left--;
        g_sup.next_fork = t + g_sup.fork_every;
        mine = true;
    }
    pthread_mutex_unlock(&g_sup.lock);
    if (mine) {
        fork_and_check(w->who, w->slot, NSLOTS, w->seed ^ 0xf0f0);
        w->forks++;
    }
}

/* Whether the allocator lets a thread turn its cache off and on. */
static bool tcache_toggles(void)
{
    bool on;
    size_t len = sizeof on;
    return mallctl && mallctl("thread.tcache.enabled", &on, &len, NULL, 0) == 0;
}

/* One time in four: the worker's thread cache off if it is on, on if it
 * is off, and read back.  What a cache held goes back as it turns off, and
 * the other threads go on freeing its objects: an uncached thread's frees,
 * and frees into the cache of one that is turning off or on, next to
 * everything else. */
static void worker_maybe_toggle_tcache(worker_t *w)
{
    if (!mallctl || rng_below(&w->rng, 4) != 0)
        return;
    bool on, want, now;
    size_t len = sizeof on;
    if (mallctl("thread.tcache.enabled", &on, &len, NULL, 0) != 0)
        return; /* not this allocator's */
    want = !on;
    if (mallctl("thread.tcache.enabled", NULL, NULL, &want, sizeof want) != 0 ||
        mallctl("thread.tcache.enabled", &now, &len, NULL, 0) != 0 || now != want) {
        fail_record(w->who, "thread.tcache.enabled: writing %d failed or did not stick", want);
        return;
    }
    w->toggles++;
}

/* ------------------------------------------------------------------ */
/* The worker loop. */

static void worker_step(worker_t *w)
{
    rng_t *r = &w->rng;
    obj_t *o = &w->slot[rng_below(r, NSLOTS)];
    if (!o->used) {
        worker_alloc(w, o);
        return;
    }
    uint64_t c = rng_below(r, 100);
    if (c < 35) {
        worker_forget(w, o);
        w->frees++;
        obj_release(w->who, o, "before free");
    } else if (c < 55) {
        worker_hand_over(w, o);
    } else if (c < 80) {
        worker_realloc(w, o);
    } else if (c < 88) {
        worker_usable(w, o);
    } else {
        obj_t other;
        if (exchange_take(r, &other))
            worker_free_foreign(w, &other, "taken from exchange");
    }
}

/* On exit a worker frees part of its objects and leaves the rest in the
 * exchange for other threads. */
static void worker_leave(worker_t *w)
{
    for (size_t i = 0; i < NSLOTS; i++) {
        obj_t *o = &w->slot[i];
        if (!o->used)
            continue;
        if (rng_below(&w->rng, 2)) {
            worker_hand_over(w, o);
        } else {
            worker_forget(w, o);
            w->frees++;
            obj_release(w->who, o, "at thread exit");
        }
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    while (w->ops < w->ops_goal) {
        worker_step(w);
        w->ops++;
        if ((w->ops & 255) == 0) {
            if (failed() || now_s() >= w->deadline)
                break;
            worker_maybe_toggle_tcache(w);
            if ((w->ops & 1023) == 0)
                worker_maybe_fork(w);
        }
    }
    worker_leave(w);
    pthread_mutex_lock(&g_sup.lock);
    w->done = true;
    g_sup.finished++;
    pthread_cond_signal(&g_sup.cond);
    pthread_mutex_unlock(&g_sup.lock);
    return NULL;
}

typedef struct {
    long created, ops, allocs, frees, cross_frees, handed, reallocs, forks, toggles;
} totals_t;

static worker_t *worker_start(int serial, double deadline)
{
    worker_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->serial = serial;
    w->seed = thread_seed(1, (uint64_t)serial);
    w->rng.s = w->seed;
    w->ops_goal = 500 + (long)rng_below(&w->rng, 6000);
    w->deadline = deadline;
    snprintf(w->who, sizeof w->who, "worker #%d seed 0x%016" PRIx64, serial, w->seed);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

static void worker_finish(worker_t *w, totals_t *t)
{
    pthread_join(w->thread, NULL);
    t->ops += w->ops;
    t->allocs += w->allocs;
    t->frees += w->frees;
    t->cross_frees += w->cross_frees;
    t->handed += w->handed;
    t->reallocs += w->reallocs;
    t->forks += w->forks;
    t->toggles += w->toggles;
    free(w);
}

/* Replaces every worker that has exited (while time is left). */
static void supervise_round(worker_t **ws, totals_t *t, double deadline)
{
    for (int i = 0; i < NWORKERS; i++) {
        pthread_mutex_lock(&g_sup.lock);
        bool done = ws[i] && ws[i]->done;
        pthread_mutex_unlock(&g_sup.lock);
        if (!done)
            continue;
        worker_finish(ws[i], t);
        ws[i] = NULL;
        if (now_s() < deadline && !failed()) {
            ws[i] = worker_start((int)t->created, deadline);
            if (ws[i])
                t->created++;
            else
                fail_record("main", "pthread_create failed");
        }
    }
}

/* Sleeps until a worker finishes, or 50 ms pass. */
static void supervise_wait(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50 * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&g_sup.lock);
    if (g_sup.finished == 0)
        pthread_cond_timedwait(&g_sup.cond, &g_sup.lock, &until);
    g_sup.finished = 0;
    pthread_mutex_unlock(&g_sup.lock);
}

static void test_stress_random_ops_many_threads(void **state)
{
    (void)state;
    failures_reset();
    double secs = stress_seconds();
    double start = now_s(), deadline = start + secs;
    g_sup.finished = 0;
    g_sup.forks_left = 5;
    g_sup.fork_every = secs / 6;
    g_sup.next_fork = start + secs / 6;
    totals_t t = { 0 };
    worker_t *ws[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        ws[i] = worker_start((int)t.created++, deadline);
        assert_non_null(ws[i]);
    }
    bool any;
    do {
        supervise_wait();
        supervise_round(ws, &t, deadline);
        any = false;
        for (int i = 0; i < NWORKERS; i++)
            any |= ws[i] != NULL;
    } while (any);
    size_t drained = exchange_drain();
    fprintf(stderr, "random ops: %.1f s, %ld threads, %ld ops, %ld allocs, %ld frees "
            "(%ld cross-thread), %ld handed over, %ld reallocs, %ld forks, %ld thread cache "
            "toggles, %zu drained\n",
            now_s() - start, t.created, t.ops, t.allocs, t.frees, t.cross_frees,
            t.handed, t.reallocs, t.forks, t.toggles, drained);
    failures_assert_none("random ops");
    assert_true(t.cross_frees > 0);
    if (tcache_toggles())
        assert_true(t.toggles > 0);
}

/* ------------------------------------------------------------------ */
/* Thread-exit storm: many short-lived threads, joined or detached, each
 * allocating and freeing; a quarter of their objects outlive them in the
 * exchange and are freed by later threads or by main. */

#define STORM_THREADS 600
#define STORM_WAVE    12
#define STORM_OBJS    96

static atomic_int g_storm_running;

static void *storm_main(void *arg)
{
    uint64_t serial = (uint64_t)(uintptr_t)arg;
    char who[64];
    rng_t r = { thread_seed(2, serial) };
    snprintf(who, sizeof who, "storm thread #%" PRIu64 " seed 0x%016" PRIx64,
             serial, r.s);
    obj_t objs[STORM_OBJS];
    for (int i = 0; i < STORM_OBJS; i++) {
        obj_t *o = &objs[i];
        o->size = pick_size(&r) % (256 * KiB);
        o->align = natural_align(o->size);
        o->owner = (int)serial;
        o->p = malloc(o->size);
        o->used = o->p != NULL;
        if (!o->p) {
            fail_record(who, "malloc(%zu) returned NULL", o->size);
            continue;
        }
        o->tag = make_tag(o->p, o->size, r.s);
        pattern_fill(o->p, 0, o->size, o->tag);
    }
    for (int i = 0; i < STORM_OBJS; i++) {
        obj_t *o = &objs[i], evicted, other;
        if (!o->used)
            continue;
        if (i % 4 == 0 && obj_verify(who, o, "storm hand-over") &&
            exchange_put(o, &r, &evicted)) {
            if (evicted.used)
                obj_release(who, &evicted, "storm eviction");
        } else {
            obj_release(who, o, "storm free");
        }
        if (i % 8 == 0 && exchange_take(&r, &other))
            obj_release(who, &other, "storm take");
    }
    atomic_fetch_sub(&g_storm_running, 1);
    return NULL;
}

static bool storm_spawn(uint64_t serial, pthread_t *t, bool detach)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (detach)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&g_storm_running, 1);
    int rc = pthread_create(t, &attr, storm_main, (void *)(uintptr_t)serial);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        atomic_fetch_sub(&g_storm_running, 1);
        fail_record("main", "pthread_create: %s", strerror(rc));
    }
    return rc == 0;
}

static void test_stress_thread_exit_storm(void **state)
{
    (void)state;
    failures_reset();
    double start = now_s();
    for (int base = 0; base < STORM_THREADS && !failed(); base += STORM_WAVE) {
        pthread_t t[STORM_WAVE];
        bool joinable[STORM_WAVE];
        for (int i = 0; i < STORM_WAVE; i++) {
            bool detach = (i & 1) != 0;
            joinable[i] = storm_spawn((uint64_t)(base + i), &t[i], detach) && !detach;
        }
        for (int i = 0; i < STORM_WAVE; i++)
            if (joinable[i])
                pthread_join(t[i], NULL);
    }
    while (atomic_load(&g_storm_running) > 0)   /* the detached ones */
        sleep_ms(1);
    size_t drained = exchange_drain();
    fprintf(stderr, "thread-exit storm: %d threads in %.2f s, %zu objects outlived "
            "their thread until the end\n", STORM_THREADS, now_s() - start, drained);
    failures_assert_none("thread-exit storm");
}

/* ------------------------------------------------------------------ */
/* Producer/consumer: one thread allocates 1M objects, another verifies and
 * frees them; pointers travel in batches through a bounded queue. */

#define PC_OBJECTS 1000000L
#define PC_BATCH   128
#define PC_QUEUE   64

typedef struct {
    unsigned char *p[PC_BATCH];
    size_t size[PC_BATCH];
    uint64_t tag[PC_BATCH];
    int n;       /* 0: end of stream */
} pc_batch_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    pc_batch_t *q[PC_QUEUE];
    int head, count;
    double deadline;
    long consumed;
    uint64_t seed;
} g_pc = { .lock = PTHREAD_MUTEX_INITIALIZER,
           .not_empty = PTHREAD_COND_INITIALIZER,
           .not_full = PTHREAD_COND_INITIALIZER };

static void pc_push(pc_batch_t *b)
{
    pthread_mutex_lock(&g_pc.lock);
    while (g_pc.count == PC_QUEUE)
        pthread_cond_wait(&g_pc.not_full, &g_pc.lock);
    g_pc.q[(g_pc.head + g_pc.count++) % PC_QUEUE] = b;
    pthread_cond_signal(&g_pc.not_empty);
    pthread_mutex_unlock(&g_pc.lock);
}

static pc_batch_t *pc_pop(void)
{
    pthread_mutex_lock(&g_pc.lock);
    while (g_pc.count == 0)
        pthread_cond_wait(&g_pc.not_empty, &g_pc.lock);
    pc_batch_t *b = g_pc.q[g_pc.head];
    g_pc.head = (g_pc.head + 1) % PC_QUEUE;
    g_pc.count--;
    pthread_cond_signal(&g_pc.not_full);
    pthread_mutex_unlock(&g_pc.lock);
    return b;
}

/* Sizes: mostly tiny, some up to 4 KiB, rare up to 64 KiB. */
static size_t pc_size(rng_t *r)
{
    uint64_t c = rng_below(r, 1000);
    if (c < 900)
        return (size_t)rng_below(r, 257);
    if (c < 995)
        return (size_t)rng_below(r, 4 * KiB);
    return (size_t)rng_below(r, 64 * KiB);
}

static void *pc_producer(void *arg)
{
    (void)arg;
    char who[64];
    rng_t r = { g_pc.seed };
    snprintf(who, sizeof who, "producer seed 0x%016" PRIx64, g_pc.seed);
    for (long made = 0; made < PC_OBJECTS && !failed();) {
        pc_batch_t *b = malloc(sizeof *b);
        if (!b) {
            fail_record(who, "malloc(batch) returned NULL");
            break;
        }
        for (b->n = 0; b->n < PC_BATCH && made < PC_OBJECTS; b->n++, made++) {
            size_t size = pc_size(&r);
            unsigned char *p = malloc(size);
            if (!p && size) {
                fail_record(who, "malloc(%zu) returned NULL", size);
                break;
            }
            b->p[b->n] = p;
            b->size[b->n] = size;
            b->tag[b->n] = (uint64_t)made;
            pattern_fill(p, 0, size, (uint64_t)made);
        }
        pc_push(b);
        if ((made & 0xffff) < PC_BATCH && now_s() > g_pc.deadline)
            break;
    }
    pc_batch_t *end = calloc(1, sizeof *end);   /* n == 0 */
    if (!end)
        abort();   /* cannot even say stop: the consumer would wait forever */
    pc_push(end);
    return NULL;
}

/* Verifies and frees a batch's objects, then the batch; returns how many
 * objects it held (0: the end of the stream). */
static int pc_release_batch(pc_batch_t *b, const char *who)
{
    int n = b->n;
    for (int i = 0; i < n; i++) {
        obj_t o = { .p = b->p[i], .size = b->size[i], .tag = b->tag[i],
                    .align = 1, .owner = -2, .used = true };
        obj_release(who, &o, "consumer free");
    }
    free(b);
    return n;
}

static void *pc_consumer(void *arg)
{
    (void)arg;
    for (;;) {
        int n = pc_release_batch(pc_pop(), "consumer");
        g_pc.consumed += n;   /* only this thread writes it */
        if (n == 0)
            return NULL;
    }
}

static void test_stress_producer_consumer(void **state)
{
    (void)state;
    failures_reset();
    double start = now_s();
    g_pc.head = g_pc.count = 0;
    g_pc.consumed = 0;
    g_pc.seed = thread_seed(3, 0);
    g_pc.deadline = start + 3 * stress_seconds() + 5;  /* slow tools: stop early */
    pthread_t prod, cons;
    assert_int_equal(pthread_create(&cons, NULL, pc_consumer, NULL), 0);
    assert_int_equal(pthread_create(&prod, NULL, pc_producer, NULL), 0);
    pthread_join(prod, NULL);
    pthread_join(cons, NULL);
    fprintf(stderr, "producer/consumer: %ld objects in %.2f s%s\n", g_pc.consumed,
            now_s() - start, g_pc.consumed < PC_OBJECTS ? " (stopped at deadline)" : "");
    failures_assert_none("producer/consumer");
    assert_true(g_pc.consumed > 0);
}

/* ------------------------------------------------------------------ */
/* Bursts of big blocks: each round every thread allocates a burst of one
 * size above 1 KiB (50..300 blocks of 1.1..64 KiB), frees half of it
 * itself and leaves the other half to the next thread, which checks and
 * frees it after a barrier.  So thread caches grown for bursts, and spans
 * waiting unmerged in the page heap, meet cross-thread frees of the same
 * classes, with each thread's next burst of another size in between. */

#define BB_THREADS 4
#define BB_ROUNDS  40
#define BB_MAX     300

static struct {
    pthread_barrier_t barrier;
    obj_t left[BB_THREADS][BB_MAX]; /* thread i's blocks for thread i+1 */
} g_bb;

static void *bb_main(void *arg)
{
    static const size_t sizes[] = {1100, 4096, 8192, 16384, 40000, 65536};
    int id = (int)(uintptr_t)arg;
    char who[32];
    snprintf(who, sizeof who, "burst thread #%d", id);
    rng_t r = { thread_seed(7, (uint64_t)id) };
    obj_t mine[BB_MAX];
    for (int round = 0; round < BB_ROUNDS; round++) {
        size_t size = sizes[rng_below(&r, sizeof sizes / sizeof sizes[0])];
        size_t n = 50 + (size_t)rng_below(&r, BB_MAX - 50);
        for (size_t i = 0; i < n; i++) {
            obj_t *o = &mine[i];
            o->size = size;
            o->align = 16;
            o->owner = id;
            o->p = malloc(size);
            o->used = o->p != NULL;
            if (!o->p) {
                fail_record(who, "malloc(%zu) returned NULL", size);
                continue;
            }
            o->tag = make_tag(o->p, size, r.s);
            pattern_fill(o->p, 0, size, o->tag);
        }
        for (size_t i = 0; i < n; i++) {
            if (i & 1)
                g_bb.left[id][i / 2] = mine[i];
            else if (mine[i].used)
                obj_release(who, &mine[i], "in its own burst");
        }
        pthread_barrier_wait(&g_bb.barrier);
        obj_t *theirs = g_bb.left[(id + BB_THREADS - 1) % BB_THREADS];
        for (size_t i = 0; i < BB_MAX; i++)
            if (theirs[i].used)
                obj_release(who, &theirs[i], "left by the previous thread");
        pthread_barrier_wait(&g_bb.barrier);
    }
    return NULL;
}

static void test_stress_big_block_bursts(void **state)
{
    (void)state;
    failures_reset();
    double start = now_s();
    memset(g_bb.left, 0, sizeof g_bb.left);
    assert_int_equal(pthread_barrier_init(&g_bb.barrier, NULL, BB_THREADS), 0);
    pthread_t t[BB_THREADS];
    for (int i = 0; i < BB_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, bb_main, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < BB_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&g_bb.barrier);
    fprintf(stderr, "big-block bursts: %d threads x %d rounds in %.2f s\n", BB_THREADS,
            BB_ROUNDS, now_s() - start);
    failures_assert_none("big-block bursts");
}

/* ------------------------------------------------------------------ */
/* Hand-offs to exiting owners: waves of short-lived producers allocate
 * small objects (from spans of their own) and hand them to two long-lived
 * consumers, which verify and free them while their producers exit.  So
 * remote frees race their owners' exits (owner inboxes, tcache.h), pushes
 * land in records whose thread has just gone, and the next wave's threads
 * reuse those records and take what was left in their inboxes. */

#define HX_WAVES     40
#define HX_PRODUCERS 6
#define HX_OBJECTS   4096   /* per producer */

static void *hx_producer(void *arg)
{
    uint64_t serial = (uint64_t)(uintptr_t)arg;
    char who[64];
    rng_t r = { thread_seed(5, serial) };
    snprintf(who, sizeof who, "hand-off producer #%" PRIu64, serial);
    for (long made = 0; made < HX_OBJECTS && !failed();) {
        pc_batch_t *b = malloc(sizeof *b);
        if (!b) {
            fail_record(who, "malloc(batch) returned NULL");
            break;
        }
        for (b->n = 0; b->n < PC_BATCH && made < HX_OBJECTS; b->n++, made++) {
            size_t size = 1 + (size_t)rng_below(&r, 256);
            unsigned char *p = malloc(size);
            if (!p) {
                fail_record(who, "malloc(%zu) returned NULL", size);
                break;
            }
            b->p[b->n] = p;
            b->size[b->n] = size;
            b->tag[b->n] = serial << 32 | (uint64_t)made;
            pattern_fill(p, 0, size, b->tag[b->n]);
        }
        if (b->n == 0) {
            free(b); /* n == 0 would tell a consumer to stop */
            break;
        }
        pc_push(b);
    }
    return NULL;
}

static void *hx_consumer(void *arg)
{
    (void)arg;
    while (pc_release_batch(pc_pop(), "hand-off consumer") != 0)
        ;
    return NULL;
}

/* salloc's, when it is preloaded (the test runs under other allocators too). */
int mallctl(const char *, void *, size_t *, void *, size_t) __attribute__((weak));

/* stats.allocated after malloc_trim(0), which gives back every thread's
 * cache and inbox: the bytes the program holds, to within this thread's
 * cache. */
static size_t trimmed_allocated(void)
{
    uint64_t epoch = 1;
    size_t v = 0, len = sizeof v;
    malloc_trim(0);
    if (mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) != 0 ||
        mallctl("stats.allocated", &v, &len, NULL, 0) != 0)
        fail_record("main", "mallctl(stats.allocated) failed");
    return v;
}

/* What stats.allocated may differ by after the hand-offs: sampled blocks
 * come and go, and the queue's batches. */
#define HX_ALLOCATED_SLACK (64 * KiB)

static void test_stress_handoff_to_exiting_owners(void **state)
{
    (void)state;
    failures_reset();
    double start = now_s();
    size_t before = mallctl ? trimmed_allocated() : 0;
    g_pc.head = g_pc.count = 0;
    pthread_t cons[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&cons[i], NULL, hx_consumer, NULL), 0);
    for (int wave = 0; wave < HX_WAVES && !failed(); wave++) {
        pthread_t prod[HX_PRODUCERS];
        for (int i = 0; i < HX_PRODUCERS; i++) {
            uintptr_t serial = (uintptr_t)(wave * HX_PRODUCERS + i);
            assert_int_equal(pthread_create(&prod[i], NULL, hx_producer, (void *)serial), 0);
        }
        for (int i = 0; i < HX_PRODUCERS; i++)
            pthread_join(prod[i], NULL);
    }
    for (int i = 0; i < 2; i++) {
        pc_batch_t *end = calloc(1, sizeof *end); /* n == 0 */
        assert_non_null(end);
        pc_push(end);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(cons[i], NULL);
    /* Every object handed off came back: none was lost in an inbox. */
    size_t after = mallctl ? trimmed_allocated() : 0;
    if (after > before + HX_ALLOCATED_SLACK)
        fail_record("main", "stats.allocated %zu bytes after the hand-offs, %zu before", after,
                    before);
    fprintf(stderr, "hand-off to exiting owners: %d threads in %.2f s, stats.allocated %zd "
            "bytes from where it started\n", HX_WAVES * HX_PRODUCERS, now_s() - start,
            (ssize_t)(after - before));
    failures_assert_none("hand-off to exiting owners");
}

/* ------------------------------------------------------------------ */
/* fork() in a loop while background threads allocate and free. */

#define FORK_LOOPS     50
#define FORK_BG        2
#define FORK_BG_OBJS   64

static int fork_loops(void)
{
    const char *s = getenv("STRESS_FORKS");
    int v = s ? atoi(s) : 0;
    return v > 0 ? v : FORK_LOOPS;
}

static atomic_int g_fork_stop;

static void *fork_bg_main(void *arg)
{
    uint64_t serial = (uint64_t)(uintptr_t)arg;
    char who[64];
    rng_t r = { thread_seed(4, serial) };
    snprintf(who, sizeof who, "fork-loop thread #%" PRIu64 " seed 0x%016" PRIx64,
             serial, r.s);
    obj_t objs[FORK_BG_OBJS] = { { 0 } };
    for (long op = 0; !atomic_load_explicit(&g_fork_stop, memory_order_relaxed) &&
                      !failed(); op++) {
        if ((op & 255) == 0)
            sleep_ms(1);   /* busy, but leave the children some CPU */
        obj_t *o = &objs[rng_below(&r, FORK_BG_OBJS)];
        if (o->used) {
            obj_release(who, o, "fork-loop free");
            continue;
        }
        o->size = pick_size(&r) % (512 * KiB);
        o->p = malloc(o->size);
        if (!o->p) {
            fail_record(who, "malloc(%zu) returned NULL", o->size);
            break;
        }
        o->tag = make_tag(o->p, o->size, r.s);
        pattern_fill(o->p, 0, o->size, o->tag);
        o->used = true;
    }
    for (int i = 0; i < FORK_BG_OBJS; i++)
        if (objs[i].used)
            obj_release(who, &objs[i], "fork-loop exit");
    return NULL;
}

#if !STRESS_TSAN
/* A thread started inside the child: the allocator must work for threads
 * born after the fork too.  (TSan does not allow threads after fork.) */
static void *fork_child_thread(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    return (void *)(intptr_t)child_work(NULL, 0, seed, 1);
}
#endif

/* One iteration: the child checks/frees inherited objects, allocates, and
 * (without TSan) runs a thread that allocates too. */
static void fork_once(obj_t *mine, size_t n, int iter)
{
    pid_t pid = fork();
    if (pid < 0) {
        fail_record("main", "fork failed: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        int rc = child_work(mine, n, thread_seed(5, (uint64_t)iter), 2);
#if !STRESS_TSAN
        pthread_t t;
        void *trc = NULL;
        if (rc == 0 && pthread_create(&t, NULL, fork_child_thread,
                                      (void *)(uintptr_t)(iter + 1)) == 0) {
            pthread_join(t, &trc);
            rc = (int)(intptr_t)trc;
        }
#endif
        _exit(rc);
    }
    int status = wait_child(pid);
    if (status == -1)
        fail_record("main", "fork loop %d: child hung (deadlock after fork?)", iter);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_record("main", "fork loop %d: child status 0x%x", iter, status);
}

static void test_stress_fork_loop(void **state)
{
    (void)state;
    failures_reset();
    atomic_store(&g_fork_stop, 0);
    double start = now_s();
    pthread_t bg[FORK_BG];
    for (int i = 0; i < FORK_BG; i++)
        assert_int_equal(pthread_create(&bg[i], NULL, fork_bg_main,
                                        (void *)(uintptr_t)i), 0);
    obj_t mine[32];
    rng_t r = { thread_seed(6, 0) };
    int iter;
    for (iter = 0; iter < fork_loops() && !failed(); iter++) {
        for (int i = 0; i < 32; i++) {
            mine[i].size = pick_size(&r) % (256 * KiB);
            mine[i].p = malloc(mine[i].size);
            mine[i].used = mine[i].p != NULL;
            mine[i].tag = make_tag(mine[i].p, mine[i].size, r.s);
            if (mine[i].p)
                pattern_fill(mine[i].p, 0, mine[i].size, mine[i].tag);
        }
        fork_once(mine, 32, iter);
        for (int i = 0; i < 32; i++)
            if (mine[i].used)
                obj_release("main", &mine[i], "after fork (parent)");
    }
    atomic_store(&g_fork_stop, 1);
    for (int i = 0; i < FORK_BG; i++)
        pthread_join(bg[i], NULL);
    fprintf(stderr, "fork loop: %d forks in %.2f s\n", iter, now_s() - start);
    failures_assert_none("fork loop");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_random_ops_many_threads),
        cmocka_unit_test(test_stress_thread_exit_storm),
        cmocka_unit_test(test_stress_producer_consumer),
        cmocka_unit_test(test_stress_big_block_bursts),
        cmocka_unit_test(test_stress_handoff_to_exiting_owners),
        cmocka_unit_test(test_stress_fork_loop),
    };
    fprintf(stderr, "stress: STRESS_SECONDS=%.1f STRESS_SEED=0x%" PRIx64 "\n",
            stress_seconds(), base_seed());
    return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}
