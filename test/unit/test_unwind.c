/*
 * test_unwind.c: the cached stack walker (src/unwind.h) must return exactly
 * what libgcc's backtrace() returns, or give up so that backtrace() is used.
 *
 *   - frames of every common shape: rsp-based (plain recursion), rbp-based
 *     (variable-length arrays), libc code without frame pointers calling
 *     back (qsort, bsearch), threads, stacks deeper than the buffer;
 *   - the same stacks again once the rule cache is warm, and from several
 *     threads at once (the cache is shared and lock-free);
 *   - a signal handler's stack, through the kernel's signal frame, is
 *     backtrace()'s too;
 *   - a frame larger than UNWIND_MAX_FRAME stops the walk: the frames
 *     before it are kept and stack_capture() counts it truncated;
 *   - a library unloaded and another loaded in its place: rules cached for
 *     the first must not be used for the second (dlpi_subs flush), and an
 *     object met before is not described again, unless it is another;
 *   - every capture again from a frame taken with UNWIND_FROM_HERE, as the
 *     allocator's slow paths take it: the same stack, less that frame;
 *   - the rules themselves at known addresses: a function's entry, _start;
 *   - the rule cache starts at a few pages and grows once it evicts;
 *   - start-up reads no unwind tables: a process that never samples never
 *     maps them in;
 *   - rules read from the objects' files are the rules read where they are
 *     mapped, for every function of libc, this program and a library, and
 *     leave the tables' pages unmapped; a library replaced on disk since it
 *     was loaded, or whose file is gone, is read in memory, and errno is
 *     left as it was.
 *
 * Both captures are taken in one function (capture_both), so their first
 * entries are two different return addresses in it; every other entry must
 * be equal.
 */
#define _GNU_SOURCE /* dlinfo */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <link.h>
#include <execinfo.h>
#include <stdbool.h>
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <sys/wait.h>
#include <unistd.h>

#include "os.h"
#include "prof.h"
#include "stack.h"
#include "unit.h"
#include "unwind.h"
#include "unwind_file.h"

#define MAXF 256

struct both {
    void *walk[MAXF], *ref[MAXF], *from[MAXF], *memo[2][MAXF];
    int nwalk, nref, nfrom, nmemo[2];
    bool complete, from_complete, memo_complete[2];
};

/* The thread's memo (unwind.h), kept from one capture_both to the next, as
 * a thread's is from one sample to the next: a capture from another stack
 * must not replay it. */
static __thread struct unwind_memo memo;

/* Set by a test: capture_both first gives the memo's first object the
 * entry of another, as a dlclose() and another load there would make it
 * wrong. */
enum { MISLABEL_SECOND = 1, MISLABEL_LAST = 2 };
static int mislabel_with;

/* noipa: a real call with its own frame, never merged into its caller.
 * The third capture starts at this frame's caller, as a sample's walk
 * starts at the caller of the allocator's slow path. */
__attribute__((noipa)) static void capture_both(struct both *b)
{
    b->nwalk = (int)unwind_capture(b->walk, MAXF, &b->complete);
    b->nref = backtrace(b->ref, MAXF);
    struct unwind_from here = UNWIND_FROM_HERE();
    b->nfrom = (int)unwind_capture_from(&here, b->from, MAXF, &b->from_complete);
    /* Twice through the memo: the last capture_both's walk, then this one's. */
    if (mislabel_with && memo.pc && memo.nobjects > 2) {
        /* The second is cmocka's library, the last libc: both loaded with
         * the program, so never unloaded and checked by address alone
         * (unwind.c's still_known), which still tells the entries apart.
         * A dlopen()ed library's is looked up again at each check
         * (test_unwind_forgets_rules_of_unloaded_code goes through one). */
        unsigned other = mislabel_with == MISLABEL_SECOND ? 1 : memo.nobjects - 1;
        memo.objects[0].entry = memo.objects[other].entry;
        mislabel_with = 0;
    }
    here.memo = &memo;
    for (int i = 0; i < 2; i++)
        b->nmemo[i] = (int)unwind_capture_from(&here, b->memo[i], MAXF, &b->memo_complete[i]);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

/* 0 if the walker's stack is backtrace()'s, and the walk from the caller's
 * frame is the same less its first entry; else the first differing index
 * (or -1 when the walker did not finish). */
static int compare(const struct both *b)
{
    if (!b->complete || !b->from_complete)
        return -1;
    if (b->nwalk != b->nref)
        return b->nwalk < b->nref ? b->nwalk : b->nref;
    for (int i = 1; i < b->nwalk; i++)
        if (b->walk[i] != b->ref[i])
            return i;
    /* A stack deeper than the buffer fills it from either start. */
    if (b->nfrom != (b->nwalk == MAXF ? MAXF : b->nwalk - 1))
        return b->nfrom + 1;
    for (int i = 0; i < b->nwalk - 1; i++)
        if (b->from[i] != b->walk[i + 1])
            return i + 1;
    /* Through the memo, replayed or not: the same as from the frame. */
    for (int k = 0; k < 2; k++) {
        if (!b->memo_complete[k] || b->nmemo[k] != b->nfrom)
            return MAXF + 1 + k;
        if (memcmp(b->memo[k], b->from, b->nfrom * sizeof(void *)))
            return MAXF + 1 + k;
    }
    return 0;
}

static void assert_same_stack(const struct both *b, const char *what)
{
    int at = compare(b);
    if (at != 0)
        fail_msg("%s: walker (%d frames) and backtrace (%d frames) differ at %d: %p vs %p", what,
                 b->nwalk, b->nref, at, at > 0 && at < b->nwalk ? b->walk[at] : NULL,
                 at > 0 && at < b->nref ? b->ref[at] : NULL);
    assert_true(b->nwalk > 2);
}

/* ---- frame shapes ---- */

/* An opaque use of a result, so GCC cannot turn the recursion into a loop. */
static inline int opaque(int x)
{
    __asm__ volatile("" : "+r"(x));
    return x;
}

/* rsp-based frames: plain recursion (the compiler keeps no frame pointer). */
__attribute__((noipa)) static int recurse_plain(int depth, struct both *b)
{
    if (depth == 0) {
        capture_both(b);
        return 1;
    }
    return opaque(recurse_plain(depth - 1, b)) + 1;
}

/* rbp-based frames: a variable-length array makes the compiler keep one. */
__attribute__((noipa)) static int recurse_vla(int depth, struct both *b)
{
    volatile char buf[depth * 24 + 8];
    buf[0] = (char)depth;
    if (depth == 0) {
        capture_both(b);
        return buf[0];
    }
    return opaque(recurse_vla(depth - 1, b)) + buf[0];
}

/* Alternating shapes, so rbp must survive rsp-based frames in between. */
__attribute__((noipa)) static int recurse_mixed(int depth, struct both *b);
__attribute__((noipa)) static int mixed_vla(int depth, struct both *b)
{
    volatile char buf[depth * 8 + 16];
    buf[1] = 1;
    return opaque(recurse_mixed(depth - 1, b)) + buf[1];
}

__attribute__((noipa)) static int recurse_mixed(int depth, struct both *b)
{
    if (depth <= 0) {
        capture_both(b);
        return 0;
    }
    return depth % 2 ? opaque(mixed_vla(depth, b)) + 1 : opaque(recurse_mixed(depth - 1, b)) + 2;
}

static void test_unwind_matches_backtrace_for_every_frame_shape(void **state)
{
    (void)state;
    struct both b;
    for (int round = 0; round < 2; round++) { /* cold cache, then warm */
        for (int depth = 0; depth < 40; depth += 3) {
            recurse_plain(depth, &b);
            assert_same_stack(&b, "plain recursion");
            recurse_vla(depth, &b);
            assert_same_stack(&b, "VLA recursion");
            recurse_mixed(depth, &b);
            assert_same_stack(&b, "mixed frames");
        }
    }
}

/* libc's own frames (built without frame pointers) between ours. */
static struct both in_callback;
static bool captured;

static int compare_ints(const void *a, const void *b)
{
    if (!captured) {
        capture_both(&in_callback);
        captured = true;
    }
    return *(const int *)a - *(const int *)b;
}

static void test_unwind_matches_backtrace_through_libc_callbacks(void **state)
{
    (void)state;
    int v[100];
    for (int i = 0; i < 100; i++)
        v[i] = (i * 37) % 101;
    captured = false;
    qsort(v, 100, sizeof(int), compare_ints);
    assert_same_stack(&in_callback, "qsort callback");
    captured = false;
    int key = 50;
    bsearch(&key, v, 100, sizeof(int), compare_ints);
    assert_same_stack(&in_callback, "bsearch callback");
}

/* A stack deeper than the buffer: both stop at MAXF entries. */
static void test_unwind_truncates_deep_stacks_like_backtrace(void **state)
{
    (void)state;
    struct both b;
    recurse_plain(MAXF + 50, &b);
    assert_int_equal(b.nwalk, MAXF);
    assert_same_stack(&b, "deep stack");
}

/* ---- threads ---- */

#define THREADS 4
#define ROUNDS 300

static void *thread_walks(void *arg)
{
    long *bad = arg;
    struct both b;
    for (int i = 0; i < ROUNDS; i++) {
        int depth = (i * 7) % 30;
        if (i % 2)
            recurse_vla(depth, &b);
        else
            recurse_mixed(depth, &b);
        if (compare(&b) != 0) /* never assert off the main thread */
            (*bad)++;
    }
    return NULL;
}

static void test_unwind_threads_share_the_cache(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    long bad[THREADS] = {0};
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thread_walks, &bad[i]), 0);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(bad[i], 0);
    }
}

/* ---- signal frames and frames too big to trust ---- */

static struct both in_handler;

static uintptr_t handler_stack_top; /* unwind_stack_top where on_signal ran */

static void on_signal(int sig)
{
    (void)sig;
    int here;
    handler_stack_top = unwind_stack_top((uintptr_t)&here);
    capture_both(&in_handler);
}

/* Deep enough that the signal lands in a frame of ours, not in raise(). */
__attribute__((noipa)) static int raise_from(int depth)
{
    if (depth == 0)
        return raise(SIGUSR1);
    return opaque(raise_from(depth - 1)) + 1;
}

static void test_unwind_walks_through_signal_frames(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_handler = on_signal}, old;
    sigaction(SIGUSR1, &sa, &old);
    raise_from(5);
    sigaction(SIGUSR1, &old, NULL);
    /* The handler, the trampoline, the interrupted code in libc's raise,
     * raise_from's frames and this test: all as backtrace() has them. */
    assert_same_stack(&in_handler, "through a signal frame");
    void *self = (void *)test_unwind_walks_through_signal_frames;
    bool found = false;
    for (int i = 0; i < in_handler.nwalk; i++)
        found |= (char *)in_handler.walk[i] > (char *)self &&
                 (char *)in_handler.walk[i] < (char *)self + 256;
    assert_true(found);
}

/* A stack of the program's own, for a signal handler or a coroutine. */
static char *map_stack(size_t size)
{
    char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    return m;
}

/* The same from a handler on a signal stack of its own (sigaltstack),
 * whose top the walker cannot tell (it asks the kernel about the pages it
 * reads there): the walk leaves that stack through the signal frame for
 * the interrupted code's, whose top it takes from there
 * (unwind_stack_top). */
static void test_unwind_walks_from_a_signal_stack(void **state)
{
    (void)state;
    size_t size = 256 << 10;
    char *alt = map_stack(size);
    stack_t ss = {.ss_sp = alt, .ss_size = size}, old_ss;
    assert_int_equal(sigaltstack(&ss, &old_ss), 0);
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_ONSTACK}, old;
    sigaction(SIGUSR1, &sa, &old);
    raise_from(5);
    sigaction(SIGUSR1, &old, NULL);
    sigaltstack(&old_ss, NULL);
    assert_int_equal(handler_stack_top, UINTPTR_MAX);
    assert_true((char *)in_handler.walk[0] != NULL);
    assert_same_stack(&in_handler, "from a signal stack");
    munmap(alt, size);
}

static unsigned probes;     /* the kernel asked whether a page is readable */
static bool refuse_probes; /* as a seccomp filter's errno might */
static long (*real_futex)(uint32_t *, int, uint32_t, const struct timespec *, uint32_t *, uint32_t);

static long counted_futex(uint32_t *word, int op, uint32_t val, const struct timespec *timeout,
                          uint32_t *word2, uint32_t val3)
{
    probes++;
    if (refuse_probes)
        return errno = EPERM, -1;
    return real_futex(word, op, val, timeout, word2, val3);
}

/* Counts the walker's questions from here to count_probes(false). */
static void count_probes(bool on)
{
    if (!real_futex)
        real_futex = os_syscalls.futex;
    probes = 0;
    os_syscalls.futex = on ? counted_futex : real_futex;
}

/* A coroutine (makecontext) on a stack of the program's own: no thread's,
 * so no top the walker can tell.  It asks the kernel
 * about the pages it reads, and walks the whole stack as backtrace() does,
 * down to glibc's __start_context, which ends it. */
static ucontext_t coroutine, coroutine_caller;
static struct both in_coroutine;
static unsigned coroutine_probes;
static bool coroutine_memo_kept;

static void coroutine_body(void)
{
    volatile char pages[3 * 4096]; /* a walk from below spans pages */
    pages[0] = 1;
    count_probes(true);
    recurse_plain(4, &in_coroutine);
    pages[sizeof(pages) - 1] = pages[0];
    coroutine_probes = probes;
    count_probes(false);
    coroutine_memo_kept = memo.pc != 0;
}

static void test_unwind_walks_a_coroutine_stack(void **state)
{
    (void)state;
    size_t size = 256 << 10;
    char *stack = map_stack(size);
    assert_int_equal(unwind_stack_top((uintptr_t)stack + size / 2), UINTPTR_MAX);
    assert_int_equal(getcontext(&coroutine), 0);
    coroutine.uc_stack.ss_sp = stack;
    coroutine.uc_stack.ss_size = size;
    coroutine.uc_link = &coroutine_caller;
    makecontext(&coroutine, coroutine_body, 0);
    assert_int_equal(swapcontext(&coroutine_caller, &coroutine), 0);
    assert_same_stack(&in_coroutine, "on a coroutine's stack");
    /* Above the captures' start, the pages past coroutine_body's frame,
     * asked about in each of the 4 walks: one that asked is not replayed
     * (the stack may be another by then), so the memo did not keep it. */
    fprintf(stderr, "# %u questions to the kernel in 4 walks\n", coroutine_probes);
    assert_true(coroutine_probes >= 4);
    assert_false(coroutine_memo_kept);
    munmap(stack, size);
}

static unsigned huge_depth;

__attribute__((noipa)) static void huge_frame(struct both *b)
{
    volatile char big[2 * UNWIND_MAX_FRAME];
    big[0] = 1;
    capture_both(b);
    void *frames[STACK_WALK_SLOTS];
    huge_depth = stack_capture(frames);
    big[sizeof(big) - 1] = big[0];
}

static void *run_huge_frame(void *arg)
{
    huge_frame(arg);
    return NULL;
}

static void test_unwind_stops_at_huge_frames(void **state)
{
    (void)state;
    struct both b;
    uint64_t truncated = stack_unwind_truncated();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16u << 20);
    pthread_t t;
    assert_int_equal(pthread_create(&t, &attr, run_huge_frame, &b), 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    /* Into capture_both, into huge_frame, then the 2 MiB frame: stop. */
    assert_false(b.complete);
    assert_int_equal(b.nwalk, 2);
    assert_ptr_equal(b.walk[1], b.ref[1]);
    assert_true(b.nref > 2);
    /* stack_capture keeps what the walker found, counted as truncated. */
    assert_int_equal(huge_depth, 1);
    assert_int_equal(stack_unwind_truncated(), truncated + 1);
}

/* ---- unloading ---- */

typedef void (*lib_call_fn)(void (*fn)(void *), void *arg);

static void capture_cb(void *arg) { capture_both(arg); }

/* Loads test library `name` from TEST_BIN_DIR (test/bin by default). */
static void *load_test_library(const char *name)
{
    const char *dir = getenv("TEST_BIN_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir ? dir : "test/bin", name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fail_msg("dlopen %s: %s", path, dlerror());
    return h;
}

/* Loads `name` from TEST_BIN_DIR and captures through its function. */
static void *through_library(const char *name, struct both *b, uintptr_t *at)
{
    void *h = load_test_library(name);
    lib_call_fn call = (lib_call_fn)dlsym(h, "unwind_lib_call");
    assert_non_null(call);
    *at = (uintptr_t)call;
    call(capture_cb, b);
    return h;
}

/* Library b, loaded where a was, has other frame sizes at the same code
 * addresses: a's cached rules must not be used for it.  Both ways of
 * naming code (_dl_find_object's objects, the unload count). */
static void forgets_rules_of_unloaded_code(bool find_object)
{
    unwind_use_find_object = find_object;
    struct both b;
    uintptr_t at_a, at_b;
    struct unwind_stats before, after;
    int same_address = 0;
    for (int i = 0; i < 3; i++) {
        void *h = through_library("libunwind_a.so", &b, &at_a);
        assert_same_stack(&b, "through library a");
        unwind_get_stats(&before);
        void *again = through_library("libunwind_a.so", &b, &at_a); /* cached rules */
        assert_same_stack(&b, "through library a, cached");
        unwind_get_stats(&after);
        if (find_object) /* every object of this stack was met before */
            assert_int_equal(after.objects, before.objects);
        dlclose(again);
        dlclose(h);
        unwind_get_stats(&before);
        /* Often mapped where a was: a's cached rules would be wrong here. */
        h = through_library("libunwind_b.so", &b, &at_b);
        unwind_get_stats(&after);
        assert_same_stack(&b, "through library b after a was unloaded");
        if (at_a == at_b) { /* a's rules were met, and refused */
            assert_true(after.stale > before.stale);
            /* b is not taken for a, met before (from the second round on,
             * b was met before itself: the same build at the same place) */
            if (find_object && i == 0)
                assert_true(after.objects > before.objects);
            same_address++;
        }
        fprintf(stderr, "# %s, round %d: b loaded %s a's address\n",
                find_object ? "_dl_find_object" : "dl_iterate_phdr", i,
                at_a == at_b ? "at" : "away from");
        dlclose(h);
    }
    assert_true(same_address > 0); /* else this test proved nothing */
}

static void test_unwind_forgets_rules_of_unloaded_code(void **state)
{
    (void)state;
    bool saved = unwind_use_find_object;
    assert_true(saved); /* glibc 2.35 and later: the lock-free lookup */
    forgets_rules_of_unloaded_code(true);
    forgets_rules_of_unloaded_code(false);
    unwind_use_find_object = saved;
}

/* Without _dl_find_object (dl_iterate_phdr, glibc before 2.35) a rule is
 * named by the unload count, which a dlopen() into free space leaves
 * alone: the end of stack that a PC no object holds gives must not be
 * kept, or a library loaded there later is walked as if its code ended
 * every stack (silently short walks).  It once was: the rule read END
 * with the library back in place. */
static void test_unwind_no_object_rule_not_kept(void **state)
{
    (void)state;
    bool saved = unwind_use_find_object;
    unwind_use_find_object = false;
    struct both b;
    uintptr_t fn;
    void *h = through_library("libunwind_a.so", &b, &fn);
    uintptr_t pc = fn + 8, page = pc & ~(uintptr_t)4095; /* past its prologue */
    dlclose(h); /* the unload count moves on, once */
    /* Code of no object there (a JIT's, say): a walk through it ends. */
    void *m = mmap((void *)page, 4096, PROT_READ | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != (void *)page) {
        unwind_use_find_object = saved;
        fprintf(stderr, "# could not map where the library was: nothing to check\n");
        skip();
    }
    assert_int_equal(unwind_rule_cached_for_test(pc) & 7, 2); /* RULE_END */
    munmap(m, 4096);
    uintptr_t back;
    h = through_library("libunwind_a.so", &b, &back); /* unloads nothing */
    assert_same_stack(&b, "through library a, back in its place");
    if (back == fn) {
        bool outermost, cfa_rbp;
        uint32_t off, slot;
        assert_true(unwind_rule_for_test(pc, &outermost, &cfa_rbp, &off, &slot));
        assert_false(outermost);
        assert_int_not_equal(unwind_rule_cached_for_test(pc) & 7, 2);
    } else {
        fprintf(stderr, "# library a loaded elsewhere the second time: END not met\n");
    }
    dlclose(h);
    unwind_use_find_object = saved;
}

/* A memo's check looks up again only objects that may be unloaded: the
 * program (this test, salloc linked in), libc and every other library
 * loaded with the program (cmocka) cannot be, a library from dlopen() can. */
static void test_unwind_trusts_only_objects_never_unloaded(void **state)
{
    (void)state;
    struct both b;
    uintptr_t at;
    assert_int_equal(unwind_object_permanent_for_test((const void *)capture_both), 1);
    assert_int_equal(unwind_object_permanent_for_test((const void *)qsort), 1);
    assert_int_equal(unwind_object_permanent_for_test((const void *)_cmocka_run_group_tests), 1);
    void *h = through_library("libunwind_a.so", &b, &at);
    assert_int_equal(unwind_object_permanent_for_test((const void *)at), 0);
    dlclose(h);
}

/* What tells a library loaded with the program from one dlopen() loaded:
 * the loader allocates only the second's link map with salloc's malloc. */
static void test_unwind_link_maps_tell_how_objects_were_loaded(void **state)
{
    (void)state;
    static const char *const with_program[] = {"linux-vdso", "libcmocka", "libc.so", "ld-linux"};
    struct link_map *lm = NULL;
    void *own = dlopen(NULL, RTLD_NOW); /* the program, first in the list */
    assert_int_equal(dlinfo(own, RTLD_DI_LINKMAP, &lm), 0);
    assert_false(sa_link_map_may_unload(lm));
    unsigned found = 0;
    for (; lm; lm = lm->l_next) /* not libgcc_s, which backtrace() dlopen()ed */
        for (size_t i = 0; i < sizeof(with_program) / sizeof(with_program[0]); i++)
            if (strstr(lm->l_name, with_program[i])) {
                assert_false(sa_link_map_may_unload(lm));
                found++;
            }
    assert_int_equal(found, 4);
    struct both b;
    uintptr_t at;
    void *h = through_library("libunwind_a.so", &b, &at);
    assert_int_equal(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
    assert_true(sa_link_map_may_unload(lm));
    dlclose(h);
    dlclose(own);
}

/* ---- the memo ---- */

/* One start (this frame's caller, at one stack depth), reached through two
 * callers: replay_site's memo walk from the same pc, rsp and rbp meets a
 * different word where the caller's return address is. */
__attribute__((noipa)) static void replay_site(struct both *b)
{
    capture_both(b);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

__attribute__((noipa)) static void via_first(struct both *b)
{
    replay_site(b);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) static void via_second(struct both *b)
{
    replay_site(b);
    __asm__ volatile("" ::: "memory");
}

static void test_unwind_memo_replays_only_the_same_stack(void **state)
{
    (void)state;
    struct both b1, b2;
    struct unwind_stats before, after;
    /* One call site, four times (the loop body the same each time, so the
     * compiler keeps one call site): the second time both captures replay;
     * before the third and the fourth the memo is mislabelled, so its first
     * capture walks again and only the second replays. */
    uint64_t replayed[4];
    for (int i = 0; i < opaque(4); i++) {
        mislabel_with = i == 2 ? MISLABEL_SECOND : i == 3 ? MISLABEL_LAST : 0;
        unwind_get_stats(&before);
        via_first(&b1);
        unwind_get_stats(&after);
        replayed[i] = after.replays - before.replays;
        assert_int_equal(mislabel_with, 0); /* it happened */
    }
    assert_same_stack(&b1, "via the first caller");
    assert_int_equal(replayed[1], 2);
    assert_int_equal(replayed[2], 1);
    assert_int_equal(replayed[3], 1);
    via_second(&b2); /* same start, another caller: walked, then replayed */
    unwind_get_stats(&before);
    assert_same_stack(&b2, "via the second caller after the first");
    assert_int_equal(before.replays, after.replays + 1);
    /* The test means something only if the start was the same. */
    assert_ptr_equal(b1.from[0], b2.from[0]);
    assert_ptr_not_equal(b1.from[2], b2.from[2]);
}

/* Saved rbp words that nothing uses are not checked.  call_saving_rbp
 * saves its caller's rbp (and calls fn with the slot's address);
 * rbp_restored_above saves and restores rbp itself, so the walk never uses
 * the value below it; rbp_framed_above computes its CFA from rbp, so the
 * walk does. */
typedef void (*slot_fn)(void *arg, uintptr_t *slot);
void call_saving_rbp(slot_fn fn, void *arg);
void rbp_restored_above(slot_fn fn, void *arg);
void rbp_framed_above(slot_fn fn, void *arg);
__asm__(".text\n"
        "call_saving_rbp:\n"
        "    .cfi_startproc\n"
        "    push %rbp\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset %rbp, -16\n"
        "    mov %rdi, %rax\n"
        "    mov %rsi, %rdi\n"
        "    mov %rsp, %rsi\n"
        "    call *%rax\n"
        "    pop %rbp\n"
        "    .cfi_def_cfa_offset 8\n"
        "    ret\n"
        "    .cfi_endproc\n"
        "rbp_restored_above:\n"
        "    .cfi_startproc\n"
        "    push %rbp\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset %rbp, -16\n"
        "    mov $0x5a11, %ebp\n" /* rbp as an ordinary register */
        "    call call_saving_rbp\n"
        "    pop %rbp\n"
        "    .cfi_def_cfa_offset 8\n"
        "    ret\n"
        "    .cfi_endproc\n"
        "rbp_framed_above:\n"
        "    .cfi_startproc\n"
        "    push %rbp\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset %rbp, -16\n"
        "    mov %rsp, %rbp\n"
        "    .cfi_def_cfa_register %rbp\n"
        "    call call_saving_rbp\n"
        "    pop %rbp\n"
        "    .cfi_def_cfa %rsp, 8\n"
        "    ret\n"
        "    .cfi_endproc\n");

struct rbp_probe {
    void *frames[2][MAXF];
    unsigned n[2];
    uint64_t replays; /* of the second capture */
};

/* Captures through the memo, then again with the saved rbp changed (to
 * another word of the stack: a walk that uses it reads only stack). */
__attribute__((noipa)) static void capture_around_saved_rbp(void *arg, uintptr_t *slot)
{
    struct rbp_probe *p = arg;
    struct unwind_from here = UNWIND_FROM_HERE();
    here.memo = &memo;
    bool complete;
    struct unwind_stats before, after;
    p->n[0] = unwind_capture_from(&here, p->frames[0], MAXF, &complete);
    uintptr_t saved = *slot;
    *slot = saved + 8;
    unwind_get_stats(&before);
    p->n[1] = unwind_capture_from(&here, p->frames[1], MAXF, &complete);
    unwind_get_stats(&after);
    *slot = saved;
    p->replays = after.replays - before.replays;
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

static void test_unwind_memo_ignores_saved_rbp_nothing_uses(void **state)
{
    (void)state;
    struct rbp_probe p;
    rbp_restored_above(capture_around_saved_rbp, &p);
    assert_int_equal(p.replays, 1);
    assert_true(p.n[0] > 3);
    assert_int_equal(p.n[1], p.n[0]);
    assert_memory_equal(p.frames[1], p.frames[0], p.n[0] * sizeof(void *));
    /* The second frame is rbp_restored_above's, past call_saving_rbp. */
    assert_true((uintptr_t)p.frames[0][1] > (uintptr_t)rbp_restored_above);
    assert_true((uintptr_t)p.frames[0][1] < (uintptr_t)rbp_framed_above);
    rbp_framed_above(capture_around_saved_rbp, &p);
    assert_int_equal(p.replays, 0); /* the changed word is its frame pointer */
    assert_true((uintptr_t)p.frames[0][1] > (uintptr_t)rbp_framed_above);
}

/* ---- rules ---- */

extern char _start[];

static void test_unwind_rules_at_known_addresses(void **state)
{
    (void)state;
    bool outermost, cfa_rbp;
    uint32_t cfa_off, rbp_slot;
    /* At any function's first instruction: CFA = rsp + 8, rbp untouched. */
    assert_true(unwind_rule_for_test((uintptr_t)recurse_plain, &outermost, &cfa_rbp, &cfa_off,
                                     &rbp_slot));
    assert_false(outermost);
    assert_false(cfa_rbp);
    assert_int_equal(cfa_off, 8);
    assert_int_equal(rbp_slot, 0);
    /* _start marks the outermost frame (its return address is undefined). */
    assert_true(unwind_rule_for_test((uintptr_t)_start + 4, &outermost, &cfa_rbp, &cfa_off,
                                     &rbp_slot));
    assert_true(outermost);
    /* Code without unwind information ends the stack too. */
    static const unsigned char not_code[16];
    assert_true(unwind_rule_for_test((uintptr_t)not_code, &outermost, &cfa_rbp, &cfa_off,
                                     &rbp_slot));
    assert_true(outermost);
}

/* ---- the top of the stack ---- */

extern void *__libc_stack_end;

/* How far below its descriptor a thread's stack may reach: glibc's
 * default stack size. */
static uintptr_t default_thread_stack(void)
{
    pthread_attr_t attr;
    size_t size = 0;
    assert_int_equal(pthread_getattr_default_np(&attr), 0);
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
    return size;
}

static void *stack_top_of_thread(void *arg)
{
    int here;
    uintptr_t sp = (uintptr_t)&here, self = (uintptr_t)pthread_self();
    *(uintptr_t *)arg = unwind_stack_top(sp) == self && sp < self;
    return NULL;
}

/* Whether sp addresses down to the default stack size below the
 * descriptor are taken for the thread's stack, and none further down (a
 * coroutine's stack mapped below the thread's). */
static void *thread_stack_reach(void *arg)
{
    uintptr_t self = (uintptr_t)pthread_self(), reach = default_thread_stack();
    *(uintptr_t *)arg = unwind_stack_top(self - reach + 64) == self &&
                        unwind_stack_top(self - reach - 4096) == UINTPTR_MAX;
    return NULL;
}

/* A walk reads nothing at or above the top of the stack it is on: for the
 * main thread the page above __libc_stack_end, for a thread glibc started
 * its descriptor, above its stack and TLS (a stack of the program's own
 * too); elsewhere it cannot tell. */
static void test_unwind_stack_top_is_the_threads(void **state)
{
    (void)state;
    int here;
    uintptr_t sp = (uintptr_t)&here, top = unwind_stack_top(sp);
    assert_int_equal(top, ((uintptr_t)__libc_stack_end | 4095) + 1);
    assert_true(sp < top);
    /* The main thread's reaches down RLIMIT_STACK (or 1 GiB, if larger or
     * unlimited). */
    struct rlimit limit;
    assert_int_equal(getrlimit(RLIMIT_STACK, &limit), 0);
    uintptr_t reach = limit.rlim_cur < ((rlim_t)1 << 30) ? limit.rlim_cur : (uintptr_t)1 << 30;
    uintptr_t start = (uintptr_t)__libc_stack_end;
    assert_int_equal(unwind_stack_top(start - reach + 64), top);
    assert_int_equal(unwind_stack_top(start - reach - 4096), UINTPTR_MAX);

    pthread_t t;
    uintptr_t ok = 0;
    assert_int_equal(pthread_create(&t, NULL, stack_top_of_thread, &ok), 0);
    pthread_join(t, NULL);
    assert_true(ok);
    ok = 0;
    assert_int_equal(pthread_create(&t, NULL, thread_stack_reach, &ok), 0);
    pthread_join(t, NULL);
    assert_true(ok);

    size_t size = 1 << 20;
    char *own = map_stack(size);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, own, size);
    ok = 0;
    assert_int_equal(pthread_create(&t, &attr, stack_top_of_thread, &ok), 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    assert_true(ok);

    munmap(own, size);

    /* Far below any stack, or above them all: no top it can tell.  (A
     * buffer near a thread's descriptor may be taken for its stack: a
     * walk there reads no further than without the top, and a right one
     * never gets near it.) */
    assert_int_equal(unwind_stack_top(4096), UINTPTR_MAX);
    assert_int_equal(unwind_stack_top(UINTPTR_MAX - 4095), UINTPTR_MAX);
}

/* The walker's question to the kernel: readable pages (touched or not,
 * read-only, or whose first word is the value the futex wait expects, on
 * which it times out at once) say yes, inaccessible and unmapped ones no,
 * and errno is left as it was. */
static void test_unwind_asks_the_kernel_what_is_readable(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *m = map_stack(5 * page);
    *(uint32_t *)(m + page) = OS_PROBE_VALUE;
    assert_int_equal(mprotect(m + 2 * page, page, PROT_READ), 0);
    assert_int_equal(mprotect(m + 3 * page, page, PROT_NONE), 0);
    assert_int_equal(munmap(m + 4 * page, page), 0);
    errno = 1234;
    assert_int_equal(os_readable(m), 1);
    assert_int_equal(os_readable(m + page), 1);
    assert_int_equal(os_readable(m + 2 * page), 1);
    assert_int_equal(os_readable(m + 3 * page), 0);
    assert_int_equal(os_readable(m + 4 * page), 0);
    assert_int_equal(errno, 1234);
    int here;
    assert_int_equal(os_readable((void *)((uintptr_t)&here & -(uintptr_t)4)), 1);
    munmap(m, 4 * page);
}

/* A made-up stack whose every word is the return address R = f + 1 of a
 * function f's first instruction (CFA = rsp + 8, return address at the
 * CFA - 8): a walk from it takes frame after frame 8 bytes up, R each
 * time, as a walk that went wrong might, and runs into whatever lies
 * above: here an inaccessible page. */
static unsigned walk_made_up_stack(char *page, size_t size, unsigned words_below_top, void **frames,
                                   bool *complete)
{
    uintptr_t r = (uintptr_t)recurse_plain + 1;
    for (size_t i = 0; i < size / sizeof(uintptr_t); i++)
        ((uintptr_t *)page)[i] = r;
    struct unwind_from from = {.pc = r, .sp = (uintptr_t)page + size - 8 * words_below_top};
    return unwind_capture_from(&from, frames, 64, complete);
}

/* Walks the made-up stack from `words_below_top` words below the end of
 * `size` bytes at `m` with the kernel's answers counted; *nprobes the
 * questions asked. */
static unsigned walk_counting_probes(char *m, size_t size, unsigned words_below_top,
                                     void **frames, bool *complete, unsigned *nprobes)
{
    count_probes(true);
    unsigned n = walk_made_up_stack(m, size, words_below_top, frames, complete);
    *nprobes = probes;
    count_probes(false);
    return n;
}

static void test_unwind_stops_at_the_stack_top(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* Two readable pages, then an inaccessible one. */
    char *m = map_stack(3 * page);
    assert_int_equal(mprotect(m + 2 * page, page, PROT_NONE), 0);
    void *frames[64];
    bool complete = true;
    unsigned nprobes;
    unwind_stack_top_for_test = (uintptr_t)m + 2 * page;
    unsigned n = walk_counting_probes(m, 2 * page, 10, frames, &complete, &nprobes);
    unwind_stack_top_for_test = 0;
    /* The start, then one frame for each of the 10 words below the top;
     * a stack whose top is known needs no question. */
    assert_int_equal(n, 1 + 10);
    assert_false(complete);
    assert_int_equal(nprobes, 0);
    for (unsigned i = 0; i < n; i++)
        assert_ptr_equal(frames[i], (void *)((uintptr_t)recurse_plain + 1));

    /* Without a top (a stack it cannot tell: no thread's), the walk asks
     * the kernel about each page before it reads it and stops at the same
     * place: one question, about the page that is not readable. */
    complete = true;
    assert_int_equal(walk_counting_probes(m, 2 * page, 10, frames, &complete, &nprobes), 1 + 10);
    assert_false(complete);
    assert_int_equal(nprobes, 1);
    /* One question a page, not one a read: from 20 words below the second
     * page, 63 frames (the most asked for) read 43 words of it. */
    n = walk_counting_probes(m, 2 * page, page / 8 + 20, frames, &complete, &nprobes);
    assert_int_equal(n, 64);
    assert_true(complete);
    assert_int_equal(nprobes, 1);

    /* Where the kernel will not say (a seccomp filter refusing the call
     * with an errno), it reads unchecked and faults: what the check is
     * there for. */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        refuse_probes = true;
        walk_counting_probes(m, 2 * page, 10, frames, &complete, &nprobes);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    munmap(m, 3 * page);
}

/* ---- the rule cache's size ---- */

/* Misses while looking up `n` code addresses from `base`, 16 bytes apart
 * (each its own rule), through the rule cache. */
static uint64_t look_up(uintptr_t base, int n)
{
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    for (int i = 0; i < n; i++)
        unwind_rule_cached_for_test(base + 16 * (uintptr_t)i);
    unwind_get_stats(&after);
    return after.misses - before.misses;
}

/* The rule cache starts as a few pages, so a small program's few dozen
 * rules do not spread over all of it, and takes the whole table once it
 * evicts: a program meeting much code is not left thrashing. */
static void test_unwind_rule_cache_grows_when_it_evicts(void **state)
{
    (void)state;
    extern char etext; /* the linker's: the end of this program's code */
    uintptr_t base = (uintptr_t)unwind_capture; /* salloc's code, linked in */
    if (base + 16 * 4000 > (uintptr_t)&etext)
        base = (uintptr_t)&etext - 16 * 4000;
    struct unwind_stats st;
    unwind_get_stats(&st);
    assert_int_equal(st.cache_entries, 128);
    /* A small working set: it fits, stays small, and hits. */
    look_up(base, 12);
    /* Addresses that share an entry miss at every pass: at most 6 of
     * these 12 for any base (tried on 100,000), 48 evictions in 8 passes,
     * under the 64 that grow the table. */
    for (int pass = 0; pass < 8; pass++)
        assert_true(look_up(base, 12) <= 6);
    unwind_get_stats(&st);
    assert_int_equal(st.cache_entries, 128);
    /* Much more code than 128 entries hold: evictions, then the whole table. */
    look_up(base, 4000);
    unwind_get_stats(&st);
    assert_int_equal(st.cache_entries, 4096);
    /* It holds what the small table could not: a second pass mostly hits. */
    look_up(base + 8, 1500);
    assert_true(look_up(base + 8, 1500) < 1500 / 4);
}

/* stack_warm_up(), as prof's start-up calls it, computes no rule and
 * describes no object: with the default walker there is nothing to load,
 * and a walk would read the unwind tables of whatever code made the first
 * allocation, which the kernel maps in 64 KiB windows (150 KiB in a C++
 * program whose first allocation was libstdc++'s).  First, while these
 * frames' rules are not cached yet, so a walk would miss. */
static void test_unwind_warm_up_walks_no_stack(void **state)
{
    (void)state;
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    stack_warm_up();
    unwind_get_stats(&after);
    assert_int_equal(after.misses, before.misses);
    assert_int_equal(after.objects, before.objects);
}


/* ---- tables read from files (unwind_file.h) ---- */

/* An object's .eh_frame_hdr, found for a code address in it. */
struct eh_hdr {
    uintptr_t code, hdr, hdr_len;
    uintptr_t seg_end; /* end of the read-only segment holding it */
};

static int find_hdr(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct eh_hdr *h = arg;
    bool holds = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && h->code >= start && h->code - start < ph->p_memsz)
            holds = true;
    }
    if (!holds)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) {
            h->hdr = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            h->hdr_len = info->dlpi_phdr[i].p_memsz;
        }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && h->hdr >= start && h->hdr - start < ph->p_memsz)
            h->seg_end = start + ph->p_memsz;
    }
    return 1;
}

static struct eh_hdr hdr_of(const void *code)
{
    struct eh_hdr h = {.code = (uintptr_t)code};
    assert_int_equal(dl_iterate_phdr(find_hdr, &h), 1);
    assert_true(h.hdr != 0 && h.seg_end > h.hdr);
    /* What every x86-64 GNU linker writes: version 1, .eh_frame's address
     * pc-relative sdata4, the count udata4, the table datarel sdata4. */
    const uint8_t *p = (const uint8_t *)h.hdr;
    assert_true(p[0] == 1 && p[1] == 0x1b && p[2] == 0x03 && p[3] == 0x3b);
    return h;
}

/* The start of function i of the object's table, and how many there are. */
static uintptr_t function_start(const struct eh_hdr *h, uint32_t i, uint32_t *n)
{
    memcpy(n, (const void *)(h->hdr + 8), 4);
    int32_t start;
    memcpy(&start, (const void *)(h->hdr + 12 + 8 * (uintptr_t)i), 4);
    return h->hdr + (intptr_t)start;
}

struct rule {
    bool ok, outermost, cfa_rbp;
    uint32_t cfa_off, rbp_slot;
};

static struct rule rule_at(uintptr_t pc, bool from_file)
{
    bool saved = unwind_file_enabled;
    unwind_file_enabled = from_file;
    struct rule r;
    r.ok = unwind_rule_for_test(pc, &r.outermost, &r.cfa_rbp, &r.cfa_off, &r.rbp_slot);
    unwind_file_enabled = saved;
    return r;
}

static bool same_rule(struct rule a, struct rule b)
{
    return a.ok == b.ok && a.outermost == b.outermost && a.cfa_rbp == b.cfa_rbp &&
           a.cfa_off == b.cfa_off && a.rbp_slot == b.rbp_slot;
}

/* Every function of the object holding `code`, at its entry, one byte in
 * and halfway through: the same rule from the file as from memory, and
 * the file was read; with `indexed`, every search of its table from the
 * file but the first few (unwind.c builds an index at the
 * UNWIND_INDEX_AFTER_SEARCHES-th) started from the table's index, else
 * none did.  So the index's blocks are checked at each of their edges: the
 * first function of every block, the last of the one before. */
static void file_rules_match(const void *code, const char *what, bool indexed)
{
    struct eh_hdr h = hdr_of(code);
    uint32_t n = 0;
    function_start(&h, 0, &n);
    assert_true(n > 0);
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    unsigned compared = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t unused;
        uintptr_t start = function_start(&h, i, &n);
        uintptr_t next = i + 1 < n ? function_start(&h, i + 1, &unused) : start + 2;
        uintptr_t at[3] = {start, start + 1, start + (next - start) / 2};
        for (int k = 0; k < 3; k++) {
            struct rule m = rule_at(at[k], false), f = rule_at(at[k], true);
            if (!same_rule(m, f))
                fail_msg("%s: function %u of %u, pc %#lx: the file's rule differs", what, i, n,
                         (unsigned long)at[k]);
            compared++;
        }
    }
    unwind_get_stats(&after);
    uint64_t from_files = after.from_files - before.from_files;
    fprintf(stderr, "# %s: %u rules, %lu read from the file, %lu through an index\n", what,
            compared, (unsigned long)from_files, (unsigned long)(after.indexed - before.indexed));
    /* every second computation was with files on; a few PCs of an
     * object can lie in no loaded segment (none then is read) */
    assert_true(from_files >= compared * 9 / 10);
    if (indexed)
        assert_true(after.indexed - before.indexed + UNWIND_INDEX_AFTER_SEARCHES >= from_files);
    else
        assert_int_equal(after.indexed, before.indexed);
}

/* A table of 1,024 entries or more gets an index once searched often
 * enough; a smaller one does not (this program's, about 600), nor does a
 * big one before that, nor once the keys run out: then its rules,
 * searched as before, are still right. */
static void test_unwind_rules_from_files_match_memory(void **state)
{
    (void)state;
    file_rules_match((const void *)qsort, "libc", true);
    file_rules_match((const void *)capture_both, "this program", false);
    struct both b;
    uintptr_t at;
    void *h = through_library("libunwind_a.so", &b, &at);
    file_rules_match((const void *)at, "libunwind_a.so", false);
    dlclose(h);

    /* test/bin's second build of unwind_big.c (1,202 entries), which no
     * other test searches */
    void *big = load_test_library("libunwind_big_b.so");
    void *code = dlsym(big, "unwind_big_1000");
    assert_non_null(code);
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    /* searched a few times: none yet (a small program's few dozen rules
     * pay no buffer and keys for it) */
    uintptr_t pcs[UNWIND_INDEX_AFTER_SEARCHES - 1];
    uint32_t rules[UNWIND_INDEX_AFTER_SEARCHES - 1];
    for (unsigned i = 0; i < UNWIND_INDEX_AFTER_SEARCHES - 1; i++)
        pcs[i] = (uintptr_t)code + 1;
    unwind_rules_for_test(pcs, UNWIND_INDEX_AFTER_SEARCHES - 1, rules);
    unwind_get_stats(&after);
    assert_true(after.from_files - before.from_files == UNWIND_INDEX_AFTER_SEARCHES - 1);
    assert_int_equal(after.indexes, before.indexes);
    assert_int_equal(after.indexed, before.indexed);
    uint32_t saved = unwind_index_keys_max;
    unwind_index_keys_max = 0;
    file_rules_match(code, "libunwind_big_b.so, no room for its index", false);
    unwind_index_keys_max = saved;
    unwind_get_stats(&after);
    assert_int_equal(after.indexes, before.indexes);
    dlclose(big);
}


/* libc's functions one after the other, as one walk: with its file read
 * once and the walk's copy of the last CIE read (libc has three), the
 * same rules as in memory. */
static void test_unwind_rules_of_one_walk_match_memory(void **state)
{
    (void)state;
    struct eh_hdr h = hdr_of((const void *)qsort);
    uint32_t n = 0;
    function_start(&h, 0, &n);
    assert_true(n > 1000);
    uintptr_t *pcs = malloc(2 * n * sizeof(*pcs));
    uint32_t *from_file = malloc(2 * n * sizeof(*from_file));
    uint32_t *in_memory = malloc(2 * n * sizeof(*in_memory));
    assert_true(pcs && from_file && in_memory);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t unused;
        uintptr_t start = function_start(&h, i, &unused);
        uintptr_t next = i + 1 < n ? function_start(&h, i + 1, &unused) : start + 2;
        pcs[2 * i] = start + 1;
        pcs[2 * i + 1] = start + (next - start) / 2;
    }
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    unwind_rules_for_test(pcs, 2 * n, from_file);
    unwind_get_stats(&after);
    assert_true(after.from_files - before.from_files >= 2 * n * 9 / 10);
    bool saved = unwind_file_enabled;
    unwind_file_enabled = false;
    unwind_rules_for_test(pcs, 2 * n, in_memory);
    unwind_file_enabled = saved;
    for (uint32_t i = 0; i < 2 * n; i++)
        if (from_file[i] != in_memory[i])
            fail_msg("pc %#lx (function %u of %u): rule %#x from the walk's file, %#x in memory",
                     (unsigned long)pcs[i], i / 2, n, from_file[i], in_memory[i]);
    free(pcs);
    free(from_file);
    free(in_memory);
}

struct searcher {
    const uintptr_t *pcs;
    unsigned n;
    uint32_t *rules;
};

static void *search_all(void *arg)
{
    struct searcher *s = arg;
    unwind_rules_for_test(s->pcs, s->n, s->rules);
    return NULL;
}

/* THREADS (4) threads search one big table from its file at once, each every
 * function of it: one builds the table's index at the 16th search (the
 * others, meeting its try-lock, search as before meanwhile), and every
 * thread's rules match memory's. */
static void test_unwind_index_built_while_threads_search(void **state)
{
    (void)state;
    void *h = load_test_library("libunwind_big_a.so");
    void *code = dlsym(h, "unwind_big_1000");
    assert_non_null(code);
    struct eh_hdr hdr = hdr_of(code);
    uint32_t n = 0;
    function_start(&hdr, 0, &n);
    assert_true(n >= 1024);
    uintptr_t *pcs = malloc(n * sizeof(*pcs));
    uint32_t *in_memory = malloc(n * sizeof(*in_memory));
    uint32_t *from_file = malloc(THREADS * n * sizeof(*from_file));
    assert_true(pcs && in_memory && from_file);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t unused;
        pcs[i] = function_start(&hdr, i, &unused) + 1;
    }
    bool saved = unwind_file_enabled;
    unwind_file_enabled = false;
    unwind_rules_for_test(pcs, n, in_memory);
    unwind_file_enabled = saved;

    struct unwind_stats before, after;
    unwind_get_stats(&before);
    pthread_t tid[THREADS];
    struct searcher s[THREADS];
    for (int t = 0; t < THREADS; t++) {
        s[t] = (struct searcher){pcs, n, from_file + (size_t)t * n};
        assert_int_equal(pthread_create(&tid[t], NULL, search_all, &s[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(tid[t], NULL), 0);
    unwind_get_stats(&after);
    for (int t = 0; t < THREADS; t++)
        for (uint32_t i = 0; i < n; i++)
            if (from_file[(size_t)t * n + i] != in_memory[i])
                fail_msg("thread %d, function %u of %u: rule %#x from the file, %#x in memory", t,
                         i, n, from_file[(size_t)t * n + i], in_memory[i]);
    fprintf(stderr, "# %u searches by %d threads, %lu through the index\n", THREADS * n, THREADS,
            (unsigned long)(after.indexed - before.indexed));
    assert_int_equal(after.indexes - before.indexes, 1);
    /* all but the searches before it was ready: a thread's own 15 at most
     * before the 16th, the others' while it was being read */
    assert_true(after.indexed - before.indexed >= (uint64_t)(THREADS - 1) * n);
    free(pcs);
    free(in_memory);
    free(from_file);
    dlclose(h);
}

/* Present pages of [lo, hi), page-aligned, from /proc/self/pagemap. */
static unsigned present_pages(uintptr_t lo, uintptr_t hi)
{
    int fd = open("/proc/self/pagemap", O_RDONLY);
    assert_true(fd >= 0);
    unsigned n = 0;
    for (uintptr_t p = lo; p < hi; p += 4096) {
        uint64_t e = 0;
        assert_int_equal(pread(fd, &e, 8, (off_t)(p / 4096 * 8)), 8);
        n += (unsigned)(e >> 63);
    }
    close(fd);
    return n;
}

/* A rule computed for libc code leaves libc's unwind tables unmapped when
 * read from its file; read in memory (the control), it maps them. */
static void test_unwind_reads_tables_without_mapping_them(void **state)
{
    (void)state;
    struct eh_hdr h = hdr_of((const void *)qsort);
    /* From the table to the end of its segment: .eh_frame too.  Clean
     * pages of the file: dropping them loses nothing (a read maps them
     * again). */
    uintptr_t lo = h.hdr / 4096 * 4096, hi = (h.seg_end + 4095) / 4096 * 4096;
    uint32_t n;
    uintptr_t pc = function_start(&h, 0, &n);
    pc = function_start(&h, n / 2, &n) + 1;
    unsigned mapped[2];
    for (int from_file = 1; from_file >= 0; from_file--) {
        assert_int_equal(madvise((void *)lo, hi - lo, MADV_DONTNEED), 0);
        assert_int_equal(present_pages(lo, hi), 0);
        struct rule r = rule_at(pc, from_file);
        assert_true(r.ok);
        mapped[from_file] = present_pages(lo, hi);
    }
    fprintf(stderr, "# libc's tables: %u of %lu pages mapped from memory, %u from the file\n",
            mapped[0], (unsigned long)((hi - lo) / 4096), mapped[1]);
    assert_true(mapped[0] > 0); /* else this test proved nothing */
    assert_int_equal(mapped[1], 0);
}

/* Copies file `from` to `to` (a new file). */
static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0700);
    assert_true(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t k;
    while ((k = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)k), k);
    assert_int_equal(k, 0);
    close(in);
    close(out);
}

/* A library replaced on disk after it was loaded (renamed over, as
 * package managers do): its file is another build (library b, other frame
 * sizes), so its rules are read in memory; reading that file would give
 * b's frame sizes for a's code. */
static void test_unwind_reads_memory_when_the_file_changed(void **state)
{
    (void)state;
    const char *dir = getenv("TEST_BIN_DIR");
    char a[4096], b[4096], tmp[] = "/tmp/salloc-unwind-XXXXXX", path[4200], next[4200];
    snprintf(a, sizeof(a), "%s/libunwind_a.so", dir ? dir : "test/bin");
    snprintf(b, sizeof(b), "%s/libunwind_b.so", dir ? dir : "test/bin");
    assert_non_null(mkdtemp(tmp));
    snprintf(path, sizeof(path), "%s/lib.so", tmp);
    snprintf(next, sizeof(next), "%s/next.so", tmp);
    copy_file(a, path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    lib_call_fn call = (lib_call_fn)dlsym(h, "unwind_lib_call");
    assert_non_null(call);
    struct eh_hdr eh = hdr_of((const void *)call);
    uint32_t n;
    function_start(&eh, 0, &n);
    struct unwind_stats before, after;
    for (int replaced = 0; replaced <= 1; replaced++) {
        if (replaced) {
            copy_file(b, next);
            assert_int_equal(rename(next, path), 0);
        }
        unwind_get_stats(&before);
        for (uint32_t i = 0; i < n; i++) {
            uintptr_t pc = function_start(&eh, i, &n) + 8;
            assert_true(same_rule(rule_at(pc, true), rule_at(pc, false)));
        }
        unwind_get_stats(&after);
        if (replaced)
            assert_int_equal(after.from_files, before.from_files);
        else
            assert_true(after.from_files > before.from_files); /* the file was read */
    }
    /* And walks through it are still backtrace()'s. */
    struct both both;
    call(capture_cb, &both);
    assert_same_stack(&both, "through a library replaced on disk");
    /* Its file gone: read in memory, and errno, which the refused open
     * set, as the program left it (a sample must not change it). */
    assert_int_equal(unlink(path), 0);
    for (uint32_t i = 0; i < n; i++) {
        uintptr_t pc = function_start(&eh, i, &n) + 8;
        errno = EILSEQ;
        struct rule r = rule_at(pc, true);
        assert_int_equal(errno, EILSEQ);
        assert_true(same_rule(r, rule_at(pc, false)));
    }
    dlclose(h);
    rmdir(tmp);
}

/* The walker reads rules from object files inside malloc (a sample's
 * walk afresh).  open, fstat, pread and close are cancellation points in
 * the C library: a thread whose cancellation is pending would be cancelled
 * there, half way through a sample, and exit without its cache given back
 * (bench's cancel storm saw 15 MiB stay allocated).  The reads must not
 * act on it; the thread's next cancellation point does. */
struct cancel_probe {
    bool from_file;  /* the rule came from the file */
    bool after_rule; /* the thread ran past the walker's reads */
};

static void *rule_with_cancel_pending(void *arg)
{
    struct cancel_probe *probe = arg;
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    pthread_cancel(pthread_self()); /* pending from here on */
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    bool outermost, cfa_rbp;
    uint32_t cfa_off, rbp_slot;
    unwind_rule_for_test((uintptr_t)qsort + 1, &outermost, &cfa_rbp, &cfa_off, &rbp_slot);
    unwind_get_stats(&after);
    probe->from_file = after.from_files > before.from_files;
    probe->after_rule = true;
    pthread_testcancel();
    return NULL;
}

static void test_unwind_file_reads_are_no_cancellation_points(void **state)
{
    (void)state;
    assert_true(unwind_file_enabled);
    struct cancel_probe probe = {0};
    pthread_t t;
    void *res = NULL;
    assert_int_equal(pthread_create(&t, NULL, rule_with_cancel_pending, &probe), 0);
    assert_int_equal(pthread_join(t, &res), 0);
    assert_ptr_equal(res, PTHREAD_CANCELED);
    assert_true(probe.after_rule);
    assert_true(probe.from_file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unwind_warm_up_walks_no_stack), /* first: nothing cached */
        cmocka_unit_test(test_unwind_rule_cache_grows_when_it_evicts), /* the cache is new */
        cmocka_unit_test(test_unwind_matches_backtrace_for_every_frame_shape),
        cmocka_unit_test(test_unwind_matches_backtrace_through_libc_callbacks),
        cmocka_unit_test(test_unwind_truncates_deep_stacks_like_backtrace),
        cmocka_unit_test(test_unwind_threads_share_the_cache),
        cmocka_unit_test(test_unwind_walks_through_signal_frames),
        cmocka_unit_test(test_unwind_walks_from_a_signal_stack),
        cmocka_unit_test(test_unwind_walks_a_coroutine_stack),
        cmocka_unit_test(test_unwind_stack_top_is_the_threads),
        cmocka_unit_test(test_unwind_asks_the_kernel_what_is_readable),
        cmocka_unit_test(test_unwind_stops_at_the_stack_top),
        cmocka_unit_test(test_unwind_stops_at_huge_frames),
        cmocka_unit_test(test_unwind_forgets_rules_of_unloaded_code),
        cmocka_unit_test(test_unwind_no_object_rule_not_kept),
        cmocka_unit_test(test_unwind_trusts_only_objects_never_unloaded),
        cmocka_unit_test(test_unwind_link_maps_tell_how_objects_were_loaded),
        cmocka_unit_test(test_unwind_memo_replays_only_the_same_stack),
        cmocka_unit_test(test_unwind_memo_ignores_saved_rbp_nothing_uses),
        cmocka_unit_test(test_unwind_rules_at_known_addresses),
        cmocka_unit_test(test_unwind_rules_from_files_match_memory),
        cmocka_unit_test(test_unwind_rules_of_one_walk_match_memory),
        cmocka_unit_test(test_unwind_index_built_while_threads_search),
        cmocka_unit_test(test_unwind_reads_tables_without_mapping_them),
        cmocka_unit_test(test_unwind_reads_memory_when_the_file_changed),
        cmocka_unit_test(test_unwind_file_reads_are_no_cancellation_points),
    };
    return cmocka_run_group_tests_name("unwind", tests, NULL, NULL);
}
