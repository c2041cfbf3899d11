/*
 * test_guard.c: guarded sampling (src/guard.h): where a guarded block sits,
 * the quarantine, the fault reports and the handler's chaining.  What a
 * real fault does to a process (the message, then death by SIGSEGV) is
 * test/integration/test_guard.c's.
 *
 *   - every allocation function's guarded block ends where its mapping's
 *     inaccessible page starts (small and large, aligned, calloc'd zero,
 *     realloc'd with its contents), and the first byte past it faults;
 *     an alignment above a salloc page is served unguarded;
 *   - a freed guarded block faults at once, stays registered (quarantined)
 *     for GUARD_QUARANTINE frees, then is unmapped and its record reused:
 *     the mappings and records stay bounded however many are freed;
 *   - mappings out of the quarantine are reused from a pool, with fewer
 *     system calls, zero again, never two threads' at once;
 *   - prof_report_fault recognises a guarded block's overflow and use after
 *     free, names the block and both stacks, and nothing else;
 *   - opt.lg_prof_guard_every guards about one sample in 2^N;
 *   - mprotect refused: the sample is taken unguarded, nothing lost;
 *   - the SIGSEGV handler passes faults it does not own to the handler
 *     installed before it.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "dump.h"
#include "guard.h"
#include "prof.h"
#include "unit.h"

/* The tests use blocks after freeing them on purpose. */
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/* ---- probing an address: does touching it fault? ---- */

static sigjmp_buf probe_jump;
static volatile sig_atomic_t probing;

static void probe_handler(int sig, siginfo_t *info, void *context)
{
    (void)sig, (void)info, (void)context;
    if (probing)
        siglongjmp(probe_jump, 1);
    abort();
}

/* Installs the probe's handler and returns the one it replaced. */
static struct sigaction install_probe(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = probe_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old);
    return old;
}

/* Whether reading the byte at `p` faults (our handler, not salloc's). */
static bool faults(const volatile char *p)
{
    struct sigaction old = install_probe();
    volatile bool faulted = true;
    probing = 1;
    if (!sigsetjmp(probe_jump, 1)) {
        (void)*p;
        faulted = false;
    }
    probing = 0;
    sigaction(SIGSEGV, &old, NULL);
    return faulted;
}

/* ---- set-up: every allocation sampled and guarded ---- */

static size_t saved_lg;

/* The compiler may drop a malloc whose block is only freed: not these. */
static void *volatile sink;

static void alloc_and_free(size_t n)
{
    sink = malloc(n);
    free(sink);
}

static int guard_all(void **state)
{
    (void)state;
    saved_lg = prof_lg_sample_get();
    prof_lg_sample_set(0);
    opt_prof_guard = true;
    alloc_and_free(SA_MAX_SMALL + 1); /* the slow path: the new rate now */
    return 0;
}

static int guard_none(void **state)
{
    (void)state;
    opt_prof_guard = false;
    opt_lg_prof_guard_every = -1;
    prof_lg_sample_set(saved_lg);
    return 0;
}

/* Under guard_all (R = 1 byte) a block of u usable bytes is sampled with
 * probability 1 - e^-u, the sampler's statistics: an 8-byte block is
 * missed one time in 3000 (a make test-tsan run in CI drew it), a 16-byte
 * one one time in 9 million.  `expr` (an allocation) is evaluated again
 * until its block is sampled, at most 8 times (an 8-byte block missed 8
 * times: e^-64); the result is checked by the caller. */
#define ALLOC_SAMPLED(expr)                                          \
    ({                                                               \
        void *sampled_ = NULL;                                       \
        for (int try_ = 0; try_ < 8; try_++) {                       \
            if (!(sampled_ = (expr)) || prof_is_sampled(sampled_))   \
                break;                                               \
            free(sampled_);                                          \
        }                                                            \
        sampled_;                                                    \
    })

static bool is_guarded(const void *p)
{
    struct span *s = pageheap_sampled_span(p);
    return s && ((uintptr_t)p + malloc_usable_size((void *)p)) % SA_PAGE_SIZE == 0 &&
           (uintptr_t)p + malloc_usable_size((void *)p) == span_end(s) - SA_PAGE_SIZE;
}

/* ---- layout ---- */

static void check_block(char *p, size_t want_size, size_t align)
{
    assert_non_null(p);
    size_t usable = malloc_usable_size(p);
    assert_true(usable >= want_size);
    assert_true(is_guarded(p));
    /* At least what it asked for, and what a slab would give a block of
     * its size: its size's lowest set bit, up to 16. */
    size_t natural = usable & -usable;
    assert_int_equal((uintptr_t)p % (align > 16 ? align : natural < 16 ? natural : 16), 0);
    memset(p, 0x5a, usable); /* every usable byte is writable */
    assert_false(faults(p + usable - 1));
    assert_true(faults(p + usable)); /* the first byte past it */
    assert_true(faults(p + usable + SA_PAGE_SIZE - 1));
}

static void test_guard_blocks_end_at_the_guard_page(void **state)
{
    (void)state;
    size_t sizes[] = {1, 8, 24, 64, 100, 4096, 9000, SA_MAX_SMALL, SA_MAX_SMALL + 1, 1 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *p = ALLOC_SAMPLED(malloc(sizes[i]));
        check_block(p, sizes[i], 16);
        free(p);
    }
    size_t aligns[] = {32, 64, 256, 4096, SA_PAGE_SIZE};
    for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
        char *p = aligned_alloc(aligns[i], 100);
        check_block(p, 100, aligns[i]);
        free(p);
        assert_int_equal(posix_memalign((void **)&p, aligns[i], 3 * SA_PAGE_SIZE), 0);
        check_block(p, 3 * SA_PAGE_SIZE, aligns[i]);
        free(p);
    }
    /* Above a salloc page the guard cannot keep the alignment: unguarded. */
    char *big = aligned_alloc(4 * SA_PAGE_SIZE, 100);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big % (4 * SA_PAGE_SIZE), 0);
    assert_false(is_guarded(big));
    assert_true(prof_is_sampled(big));
    free(big);
}

static void test_guard_calloc_and_realloc(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 2 * SA_MAX_SMALL; n = n * 3 + 1) {
        unsigned char *p = ALLOC_SAMPLED(calloc(1, n));
        check_block((char *)p, n, 16);
        free(p);
        /* Again (the quarantine never hands out old pages), then grown:
         * a block realloc moves to another class is a fresh draw (9 bytes,
         * a 16-byte block, is missed with e^-16), so the whole step is
         * taken again until it is sampled, as ALLOC_SAMPLED does. */
        unsigned char *q = NULL;
        for (int try_ = 0; try_ < 8 && !(q && prof_is_sampled(q)); try_++) {
            free(q);
            p = ALLOC_SAMPLED(calloc(1, n));
            for (size_t i = 0; i < n; i++)
                assert_int_equal(p[i], 0);
            memset(p, 0x77, n);
            q = realloc(p, 2 * n + 1);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(q[i], 0x77);
        }
        check_block((char *)q, 2 * n + 1, 16);
        free(q);
    }
}

/* A guarded large sample (its own mapping) realloc'd to no more than its
 * usable size in as many pages stays where it is, sampled, guarded: it
 * once moved (and was drawn again) every time, to the same size too. */
static void test_guard_large_realloc_in_place(void **state)
{
    (void)state;
    size_t n = SA_MAX_SMALL + 4096 * 3 + 100;
    char *p = ALLOC_SAMPLED(malloc(n));
    size_t usable = malloc_usable_size(p);
    memset(p, 0x5a, usable);
    assert_ptr_equal(realloc(p, usable), p);
    assert_ptr_equal(realloc(p, n - 50), p);
    assert_true(prof_is_sampled(p));
    check_block(p, usable, 16);
    char *q = realloc(p, usable + 1); /* past its pages: it moves */
    assert_ptr_not_equal(q, p);
    assert_true(q[0] == 0x5a && q[usable - 1] == 0x5a);
    free(q);
}

/* ---- quarantine ---- */

static void test_guard_quarantine(void **state)
{
    (void)state;
    char *first = malloc(64);
    assert_true(is_guarded(first));
    free(first);
    struct span *s = pagemap_span(first);
    assert_non_null(s);
    assert_int_equal(s->state, SPAN_QUARANTINED);
    assert_null(pageheap_sampled_span(first)); /* free() would not take it */
    assert_true(faults(first));                /* a use after free faults */
    /* GUARD_QUARANTINE - 1 more frees keep it; the next pushes it out. */
    for (int i = 0; i < GUARD_QUARANTINE - 1; i++)
        alloc_and_free(64);
    assert_ptr_equal(pagemap_span(first), s);
    alloc_and_free(64);
    struct span *t = pagemap_span(first); /* a stale entry, or the record reused */
    assert_true(!t || t->state != SPAN_QUARANTINED || (uintptr_t)first < t->start ||
                (uintptr_t)first >= span_end(t));

    /* However many: mappings, records and live samples stay bounded (the
     * pool of mappings out of the quarantine may fill meanwhile). */
    size_t maps0 = unit_mapping_count(), live0 = prof_live_upper_bound();
    size_t mapped0 = pageheap_mapped_bytes();
    for (int i = 0; i < 20 * GUARD_QUARANTINE; i++)
        alloc_and_free((size_t)(i % 300) * 64 + 1);
    assert_true(unit_mapping_count() <= maps0 + GUARD_POOL + 8);
    assert_int_equal(prof_live_upper_bound(), live0);
    assert_true(pageheap_mapped_bytes() <= mapped0 + ((size_t)4 << 20));
}

/* ---- the pool of mappings out of the quarantine ---- */

/* volatile: gcc moves loads and stores of plain statics across free() */
static volatile unsigned n_mmap, n_munmap, n_madvise, n_mprotect;
static volatile bool refuse_purge;

static void *counting_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    n_mmap++;
    return mmap(addr, len, prot, flags, fd, off);
}

static int counting_munmap(void *addr, size_t len)
{
    n_munmap++;
    return munmap(addr, len);
}

static int counting_madvise(void *addr, size_t len, int advice)
{
    n_madvise++;
    if (refuse_purge && advice == MADV_DONTNEED)
        return errno = EAGAIN, -1;
    return madvise(addr, len, advice);
}

static int counting_mprotect(void *addr, size_t len, int prot)
{
    n_mprotect++;
    return mprotect(addr, len, prot);
}

static void count_syscalls(bool on)
{
    n_mmap = n_munmap = n_madvise = n_mprotect = 0;
    os_syscalls.mmap = on ? counting_mmap : mmap;
    os_syscalls.munmap = on ? counting_munmap : munmap;
    os_syscalls.madvise = on ? counting_madvise : madvise;
    os_syscalls.mprotect = on ? counting_mprotect : mprotect;
}

static bool all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* Whether any OS page of [p, p + len) is mapped. */
static bool mapped(const void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec;
    for (size_t off = 0; off < len; off += page)
        if (mincore((char *)p + off, page, &vec) == 0)
            return true;
    return false;
}

/* A mapping that leaves the quarantine waits in the pool, and the next
 * guarded sample of its length takes it with one mprotect: no mmap, no
 * munmap, and nothing else but the purge and protect of its own free.
 * Its block is zero again (a calloc relies on it), its end still faults,
 * and a mapping whose purge the kernel refused is unmapped, not reused. */
static void test_guard_pool_reuses_mappings(void **state)
{
    (void)state;
    enum { SIZE = 200 };
    /* Fill the quarantine and the pool with mappings of this length. */
    for (int i = 0; i < GUARD_QUARANTINE + GUARD_POOL; i++) {
        char *p = ALLOC_SAMPLED(malloc(SIZE));
        assert_true(is_guarded(p));
        memset(p, 0xa5, SIZE); /* what a reused mapping must not show */
        free(p);
    }
    assert_int_equal(guard_pooled(), GUARD_POOL);

    enum { ROUNDS = 200 };
    size_t maps0 = unit_mapping_count();
    count_syscalls(true);
    unsigned guarded = 0;
    for (int i = 0; i < ROUNDS; i++) {
        char *p = malloc(SIZE);
        if (!is_guarded(p)) { /* not sampled (e^-200): served by a slab */
            free(p);
            continue;
        }
        guarded++;
        bool zero = all_zero(p, SIZE); /* what the last user wrote */
        memset(p, 0xa5, SIZE);
        free(p);
        assert_true(zero);
    }
    unsigned mmaps = n_mmap, munmaps = n_munmap, madvises = n_madvise, mprotects = n_mprotect;
    count_syscalls(false);
    fprintf(stderr,
            "# %u guarded samples from the pool: %u mmap, %u munmap, %u madvise, %u mprotect\n",
            guarded, mmaps, munmaps, madvises, mprotects);
    assert_true(guarded > ROUNDS / 2);
    assert_int_equal(mmaps, 0);
    assert_int_equal(munmaps, 0);
    assert_true(madvises <= guarded);       /* the purge at free */
    assert_true(mprotects <= 2 * guarded); /* accessible at malloc, not at free */
    assert_true(unit_mapping_count() <= maps0 + 8);

    /* Reused, its end faults as a new one's does. */
    char *p = ALLOC_SAMPLED(malloc(SIZE));
    assert_true(is_guarded(p));
    assert_true(faults(p + malloc_usable_size(p)));
    free(p);

    /* A purge refused: the mapping is not pooled but unmapped when it
     * leaves the quarantine. */
    char *dirty = ALLOC_SAMPLED(malloc(SIZE));
    assert_true(is_guarded(dirty));
    struct span *s = pageheap_sampled_span(dirty);
    void *start = (void *)s->start;
    size_t len = s->npages << SA_PAGE_SHIFT;
    memset(dirty, 0xa5, SIZE);
    count_syscalls(true);
    refuse_purge = true;
    free(dirty);
    refuse_purge = false;
    count_syscalls(false);
    for (int i = 0; i < GUARD_QUARANTINE; i++)
        alloc_and_free(SIZE);
    assert_false(mapped(start, len));
}

/* Threads sharing the pool: each takes and frees guarded blocks of three
 * lengths (the pool and the quarantine are shared, and every take races
 * another thread's put), keeps a few alive with its own pattern in them
 * and checks it before the free: a mapping handed to two threads at once,
 * or handed out while still in the quarantine, shows a foreign pattern or
 * faults.  Every block from the pool reads zero at first, calloc'd or not.
 * When all are freed the mappings left are the quarantine's and the
 * pool's, however the threads interleaved. */
enum { POOL_THREADS = 4, POOL_ROUNDS = 1500, POOL_KEPT = 6 };

static void *pool_worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    static const size_t lengths[] = {200, 5000, 3 * SA_PAGE_SIZE + 17};
    char *kept[POOL_KEPT] = {0};
    size_t kept_size[POOL_KEPT] = {0};
    uintptr_t bad = 0;
    unsigned seed = id * 2654435761u + 1;
    for (unsigned i = 0; i < POOL_ROUNDS && !bad; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned slot = (seed >> 8) % POOL_KEPT;
        if (kept[slot]) { /* still this thread's: its pattern, every byte */
            for (size_t b = 0; b < kept_size[slot]; b++)
                if (kept[slot][b] != (char)(0x10 + id))
                    bad = (uintptr_t)kept[slot];
            free(kept[slot]);
            kept[slot] = NULL;
        }
        size_t size = lengths[(seed >> 16) % 3];
        char *p = (seed >> 20) & 1 ? calloc(1, size) : malloc(size);
        if (!p)
            return (void *)1;
        if (is_guarded(p) && !all_zero(p, size))
            bad = (uintptr_t)p;
        memset(p, 0x10 + id, size);
        kept[slot] = p;
        kept_size[slot] = size;
    }
    for (unsigned k = 0; k < POOL_KEPT; k++)
        free(kept[k]);
    return (void *)bad;
}

static void test_guard_pool_shared_by_threads(void **state)
{
    (void)state;
    /* glibc keeps an exited thread's stack for the next thread, with the
     * TLS vector it calloc'd (sampled and guarded here): threads started
     * and joined first leave those in place for the workers to reuse. */
    pthread_t t[POOL_THREADS];
    for (unsigned i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pool_worker, (void *)(uintptr_t)i), 0);
    for (unsigned i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    /* The quarantine is full already (the tests before this one freed more
     * than it holds), so what is not pooled is the quarantine and blocks
     * still allocated. */
    size_t held0 = guard_live() - guard_pooled();
    for (unsigned i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pool_worker, (void *)(uintptr_t)i), 0);
    for (unsigned i = 0; i < POOL_THREADS; i++) {
        void *bad;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_ptr_equal(bad, NULL);
    }
    size_t pooled = guard_pooled(), held = guard_live() - pooled;
    fprintf(stderr, "# %u threads: %zu guarded mappings held before, %zu after, %zu pooled\n",
            POOL_THREADS, held0, held, pooled);
    assert_true(pooled <= GUARD_POOL);
    assert_true(held <= held0);
}

/* ---- the reports ---- */

/* Runs prof_report_fault with stderr captured into `out`. */
static bool report(const void *addr, int is_write, char *out, size_t size)
{
    char path[] = "/tmp/salloc_guard_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int saved = dup(2);
    dup2(fd, 2);
    bool known = prof_report_fault(addr, is_write);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, out, size - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    return known;
}

__attribute__((noinline)) static char *allocated_here(size_t n)
{
    char *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void freed_here(char *p)
{
    free(p);
    __asm__ volatile("" ::: "memory");
}

static void test_guard_reports(void **state)
{
    (void)state;
    char out[8192], want[256];
    char *p = allocated_here(64);
    assert_true(is_guarded(p));
    assert_true(report(p + 64, 1, out, sizeof(out)));
    snprintf(want, sizeof(want),
             "heap-buffer-overflow: write of %p, 0 bytes past the end of the 64-byte block at %p",
             (void *)(p + 64), (void *)p);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "allocated at:"));
    assert_true(report(p + 64 + 100, 0, out, sizeof(out)));
    snprintf(want, sizeof(want), "read of %p, 100 bytes past the end", (void *)(p + 164));
    assert_non_null(strstr(out, want));
    /* Inside the live block, or any address not a guarded block's: no. */
    assert_false(report(p, 0, out, sizeof(out)));
    assert_string_equal(out, "");
    opt_prof_guard = false; /* an ordinary sample */
    char *unguarded = malloc(64);
    opt_prof_guard = true;
    assert_false(is_guarded(unguarded));
    assert_false(report(unguarded + 64, 1, out, sizeof(out)));
    assert_false(report(&out[0], 1, out, sizeof(out)));
    assert_false(report(NULL, 1, out, sizeof(out)));
    free(unguarded);

    freed_here(p);
    assert_true(report(p + 16, 1, out, sizeof(out)));
    snprintf(want, sizeof(want), "heap-use-after-free: write of %p", (void *)(p + 16));
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want), "%p is 16 bytes into the 64-byte block at %p, freed already, at:",
             (void *)(p + 16), (void *)p);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "and allocated at:"));
    /* The two stacks differ: the free's first frame is freed_here's. */
    const char *freed_at = strstr(out, "freed already, at:"), *alloc_at = strstr(out, "and allocated");
    assert_true(freed_at && alloc_at && freed_at < alloc_at);
    void *free_pc = NULL, *alloc_pc = NULL;
    sscanf(strstr(freed_at, "#0 "), "#0 %p", &free_pc);
    sscanf(strstr(alloc_at, "#0 "), "#0 %p", &alloc_pc);
    assert_true((char *)free_pc > (char *)freed_here && (char *)free_pc < (char *)freed_here + 64);
    assert_true((char *)alloc_pc > (char *)allocated_here &&
                (char *)alloc_pc < (char *)allocated_here + 64);
}

/* ---- a fraction of samples ---- */

static void test_guard_every(void **state)
{
    (void)state;
    opt_prof_guard = false;
    opt_lg_prof_guard_every = 2; /* one in 4 */
    enum { N = 4000 };
    static char *p[N];
    size_t guarded = 0;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(64);
        guarded += is_guarded(p[i]);
    }
    for (int i = 0; i < N; i++)
        free(p[i]);
    fprintf(stderr, "# lg_prof_guard_every:2: %zu of %d samples guarded\n", guarded, N);
    /* Binomial(4000, 1/4): mean 1000, sd 27; 6 sd either side. */
    assert_true(guarded > 1000 - 165 && guarded < 1000 + 165);
    opt_lg_prof_guard_every = 0; /* every one */
    char *q = malloc(64);
    assert_true(is_guarded(q));
    free(q);
    opt_lg_prof_guard_every = -1;
    opt_prof_guard = true;
}

/* ---- mprotect refused ---- */

static int refusing_mprotect(void *addr, size_t len, int prot)
{
    (void)addr, (void)len, (void)prot;
    errno = ENOMEM;
    return -1;
}

static uint64_t samples_failed(void)
{
    uint64_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl("prof.samples_failed", &v, &len, NULL, 0), 0);
    return v;
}

/* The mappings salloc makes while mprotect is refused, to see which of
 * them are still there at the end (counting /proc/self/maps would also
 * count what a sanitizer's runtime maps meanwhile). */
#define RECORDED_MAX 16
static struct {
    char *addr;
    size_t len;
} recorded[RECORDED_MAX];
static size_t nrecorded;

static void *recording_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = mmap(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && nrecorded < RECORDED_MAX)
        recorded[nrecorded++] = (typeof(recorded[0])){p, len};
    return p;
}

/* Recorded mappings of which any page is still mapped. */
static size_t recorded_still_mapped(void)
{
    size_t n = 0;
    for (size_t i = 0; i < nrecorded; i++)
        n += mapped(recorded[i].addr, recorded[i].len);
    return n;
}

static void test_guard_refused_is_sampled_unguarded(void **state)
{
    (void)state;
    uint64_t failed0 = samples_failed();
    nrecorded = 0;
    os_syscalls.mmap = recording_mmap;
    os_syscalls.mprotect = refusing_mprotect;
    char *small = malloc(100), *large = malloc(1 << 20);
    os_syscalls.mprotect = mprotect;
    os_syscalls.mmap = mmap;
    assert_non_null(small);
    assert_non_null(large);
    assert_false(is_guarded(small));
    assert_false(is_guarded(large));
    assert_true(prof_is_sampled(small)); /* a sample all the same */
    assert_true(prof_is_sampled(large));
    assert_int_equal(samples_failed(), failed0);
    memset(small, 1, 100);
    memset(large, 1, 1 << 20);
    free(small);
    free(large);
    /* The guard's mappings went back; what stays is at most the small
     * sample's unguarded mapping (cached for reuse) and heap growth. */
    assert_true(nrecorded <= RECORDED_MAX);
    assert_true(recorded_still_mapped() <= 2);
    assert_true(recorded_still_mapped() < nrecorded);
}

/* Past guard_max_live guarded mappings (two kernel mappings each, out of
 * vm.max_map_count), samples are placed unguarded: before the cap, jq
 * under prof_guard:true,lg_prof_sample:6 ran out of mappings and its
 * malloc returned NULL. */
static void test_guard_cap_places_samples_unguarded(void **state)
{
    (void)state;
    /* Pooled mappings of this length would be reused without a new one:
     * take them all out of the pool first. */
    char *held[GUARD_POOL];
    for (int i = 0; i < GUARD_POOL; i++)
        assert_true(is_guarded(held[i] = ALLOC_SAMPLED(malloc(100))));
    size_t saved = guard_max_live;
    guard_max_live = guard_live() + 3;
    enum { N = 10 };
    char *p[N];
    unsigned guarded = 0;
    for (int i = 0; i < N; i++) {
        p[i] = ALLOC_SAMPLED(malloc(100));
        assert_non_null(p[i]);
        assert_true(prof_is_sampled(p[i])); /* every one still a sample */
        guarded += is_guarded(p[i]);
        assert_true(guard_live() <= guard_max_live);
    }
    assert_int_equal(guarded, 3);
    for (int i = 0; i < N; i++)
        free(p[i]);
    guard_max_live = saved;
    for (int i = 0; i < GUARD_POOL; i++)
        free(held[i]);
    char *q = ALLOC_SAMPLED(malloc(100));
    assert_true(is_guarded(q)); /* room again */
    free(q);
}

/* ---- chaining ---- */

static volatile sig_atomic_t previous_ran;
static sigjmp_buf chain_jump;

static void previous_handler(int sig, siginfo_t *info, void *context)
{
    (void)sig, (void)info, (void)context;
    previous_ran = 1;
    siglongjmp(chain_jump, 1);
}

static void test_guard_handler_chains(void **state)
{
    (void)state;
    struct sigaction sa, original;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = previous_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &original);
    guard_install_handler(); /* salloc's, in front of previous_handler */
    char *foreign = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(foreign != MAP_FAILED);
    previous_ran = 0;
    if (!sigsetjmp(chain_jump, 1))
        (void)*(volatile char *)foreign;
    assert_true(previous_ran); /* not salloc's fault: passed on */
    munmap(foreign, 4096);
    sigaction(SIGSEGV, &original, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_blocks_end_at_the_guard_page),
        cmocka_unit_test(test_guard_calloc_and_realloc),
        cmocka_unit_test(test_guard_large_realloc_in_place),
        cmocka_unit_test(test_guard_quarantine),
        cmocka_unit_test(test_guard_pool_reuses_mappings),
        cmocka_unit_test(test_guard_pool_shared_by_threads),
        cmocka_unit_test(test_guard_reports),
        cmocka_unit_test(test_guard_every),
        cmocka_unit_test(test_guard_refused_is_sampled_unguarded),
        cmocka_unit_test(test_guard_cap_places_samples_unguarded),
        cmocka_unit_test(test_guard_handler_chains),
    };
    return cmocka_run_group_tests_name("guarded sampling", tests, guard_all, guard_none);
}
