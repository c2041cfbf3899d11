/*
 * test_background.c: opt.background_thread and mallctl "background_thread"
 * (src/background.h), run with LD_PRELOAD=libsalloc.so.
 *
 * Each scenario runs in a child of its own (child_run.h), under the
 * options it names, so that whether a background thread exists is the
 * scenario's doing alone:
 *   idle     32 MiB of large blocks freed, then no allocation at all for a
 *            while: the thread hands their pages back; without it they
 *            stay (the control that shows the scenario measures something)
 *   idle_small  the same with blocks of four small classes whose spans
 *            hold two: what the central lists' transfer caches keep goes
 *            back too
 *   busy_small  idle_small's blocks, then other allocations now and then:
 *            with no thread, the allocating thread gives back what the
 *            classes keep (their span counts fall to 0)
 *   toggle   mallctl starts and stops the thread; its statistics follow
 *   fork     a child of fork() runs without the thread, can start its own,
 *            and the parent's keeps running
 *   signals  the thread blocks every signal the program could handle
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_run.h"

typedef int mallctl_fn(const char *, void *, size_t *, void *, size_t);

static mallctl_fn *ctl(void)
{
    mallctl_fn *f = (mallctl_fn *)dlsym(RTLD_DEFAULT, "mallctl");
    if (!f) {
        printf("no mallctl: not run under salloc\n");
        exit(2);
    }
    return f;
}

/* Exits the scenario with a message when `ok` is false. */
static void check(bool ok, const char *what)
{
    if (!ok) {
        printf("failed: %s\n", what);
        exit(1);
    }
}

static bool read_bool(const char *name)
{
    bool v = false;
    size_t len = sizeof v;
    check(ctl()(name, &v, &len, NULL, 0) == 0, name);
    return v;
}

static uint64_t read_stat(const char *name, size_t size)
{
    uint64_t e = 1, v = 0;
    size_t len = size;
    check(ctl()("epoch", NULL, NULL, &e, sizeof e) == 0, "epoch");
    check(ctl()(name, &v, &len, NULL, 0) == 0, name);
    return v;
}

static int write_bool(const char *name, bool v) { return ctl()(name, NULL, NULL, &v, sizeof v); }

static int threads_named(const char *comm, pid_t *tid);

/* No thread named `comm` within a second: a joined thread's /proc entry
 * can outlive the join for a moment (the kernel reaps it just after). */
static bool gone_soon(const char *comm)
{
    for (int i = 0; i < 100; i++) {
        if (threads_named(comm, NULL) == 0)
            return true;
        usleep(10 * 1000);
    }
    return false;
}

/* The threads of this process named `comm`, and the id of the last. */
static int threads_named(const char *comm, pid_t *tid)
{
    DIR *d = opendir("/proc/self/task");
    check(d != NULL, "opendir /proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], name[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(name, sizeof name, f) && !strncmp(name, comm, strlen(comm)) &&
            name[strlen(comm)] == '\n') {
            n++;
            if (tid)
                *tid = (pid_t)atoi(e->d_name);
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

#define BLOCKS 32
#define BLOCK ((size_t)1 << 20)

static size_t resident_pages(void *const *blocks)
{
    size_t n = 0;
    static unsigned char v[BLOCK / 4096];
    for (int i = 0; i < BLOCKS; i++) {
        check(mincore(blocks[i], BLOCK, v) == 0, "mincore");
        for (size_t k = 0; k < BLOCK / 4096; k++)
            n += v[k] & 1;
    }
    return n;
}

/* Waits, allocating nothing, for freed pages to leave: with a background
 * thread running (`thread`, read before the frees), until at most a
 * twentieth of the `pages` the blocks held are resident, polling for up
 * to 10 s (on a loaded machine the thread can be starved for a while; it
 * takes 0.1 to 0.45 s here); without one 1 s, enough for the control to
 * show that nothing would leave. */
static void wait_idle(bool thread, size_t (*resident)(void *const *), void *const *blocks,
                      size_t pages)
{
    if (!thread) {
        usleep(1000 * 1000);
        return;
    }
    for (int i = 0; i < 200 && resident(blocks) > pages / 20; i++)
        usleep(50 * 1000);
}

/* Prints "resident <pages freed but still resident> of <pages>". */
static int scenario_idle(void)
{
    void *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        check(blocks[i] != NULL, "malloc");
        memset(blocks[i], 1, BLOCK);
    }
    size_t before = resident_pages(blocks);
    check(before == BLOCKS * BLOCK / 4096, "the blocks are resident once written");
    bool thread = read_bool("background_thread");
    for (int i = 0; i < BLOCKS; i++)
        free(blocks[i]);
    /* No allocation from here on: only a background thread can purge. */
    wait_idle(thread, resident_pages, blocks, before);
    printf("resident %zu of %zu\n", resident_pages(blocks), before);
    return 0;
}

/* Small blocks of four classes of two-object spans (20 to 36 KiB), eight
 * of each: each class's transfer cache keeps some once they are freed,
 * and their spans with them. */
#define SMALL_BLOCKS 32

static size_t small_size(int i) { return (size_t)20000 + (size_t)(i % 4) * 5000; }

/* The 4 KiB pages the blocks touch that are resident (a page two blocks
 * share counts twice). */
static size_t resident_small(void *const *blocks)
{
    size_t n = 0;
    static unsigned char v[16];
    for (int i = 0; i < SMALL_BLOCKS; i++) {
        uintptr_t lo = (uintptr_t)blocks[i] & ~(uintptr_t)4095;
        uintptr_t hi = ((uintptr_t)blocks[i] + small_size(i) + 4095) & ~(uintptr_t)4095;
        check(mincore((void *)lo, hi - lo, v) == 0, "mincore");
        for (size_t k = 0; k < (hi - lo) / 4096; k++)
            n += v[k] & 1;
    }
    return n;
}

static void write_small_blocks(void **blocks)
{
    for (int i = 0; i < SMALL_BLOCKS; i++) {
        blocks[i] = malloc(small_size(i));
        check(blocks[i] != NULL, "malloc");
        memset(blocks[i], 1, small_size(i));
    }
}

/* Frees them, and flushes them from the thread's cache to the central
 * lists: each class keeps a batch's worth in its transfer cache, the
 * rest go back to their spans, and the spans that empty to the page
 * heap. */
static void free_small_blocks(void *const *blocks)
{
    for (int i = 0; i < SMALL_BLOCKS; i++)
        free(blocks[i]);
    check(ctl()("thread.tcache.flush", NULL, NULL, NULL, 0) == 0, "thread.tcache.flush");
}

static int scenario_idle_small(void)
{
    void *blocks[SMALL_BLOCKS];
    write_small_blocks(blocks);
    size_t before = resident_small(blocks);
    bool thread = read_bool("background_thread");
    free_small_blocks(blocks);
    wait_idle(thread, resident_small, blocks, before);
    printf("resident %zu of %zu\n", resident_small(blocks), before);
    return 0;
}

/* Rounds of `n` 1 KiB blocks allocated and freed: more than the thread's
 * cache keeps of the class, so they are slow events of the cache
 * (refills, overflows), where decay runs without a background thread. */
static void busy_round(unsigned n)
{
    static void *busy[1024];
    for (unsigned i = 0; i < n; i++) {
        busy[i] = malloc(1024);
        check(busy[i] != NULL, "malloc");
    }
    for (unsigned i = 0; i < n; i++)
        free(busy[i]);
}

/* The spans of the classes of the small blocks (stats.arenas.0.bins). */
static size_t small_block_spans(void)
{
    unsigned nbins = 0;
    size_t len = sizeof nbins, spans = 0;
    check(ctl()("arenas.nbins", &nbins, &len, NULL, 0) == 0, "arenas.nbins");
    uint64_t e = 1;
    check(ctl()("epoch", NULL, NULL, &e, sizeof e) == 0, "epoch");
    for (unsigned j = 0; j < nbins; j++) {
        char name[64];
        size_t size = 0, n = 0;
        snprintf(name, sizeof name, "arenas.bin.%u.size", j);
        len = sizeof size;
        check(ctl()(name, &size, &len, NULL, 0) == 0, name);
        bool ours = false;
        for (int i = 0; i < 4; i++)
            ours |= size >= small_size(i) && size < small_size(i) + 2048;
        if (!ours)
            continue;
        snprintf(name, sizeof name, "stats.arenas.0.bins.%u.curslabs", j);
        len = sizeof n;
        check(ctl()(name, &n, &len, NULL, 0) == 0, name);
        spans += n;
    }
    return spans;
}

static int scenario_busy_small(void)
{
    void *blocks[SMALL_BLOCKS];
    write_small_blocks(blocks);
    free_small_blocks(blocks);
    size_t kept = small_block_spans();
    /* A decay look closes a window, a later one gives back what that
     * window did not use. */
    for (int round = 0; round < 8; round++) {
        usleep(100 * 1000);
        busy_round(1024);
    }
    printf("spans %zu of %zu\n", small_block_spans(), kept);
    return 0;
}

static int scenario_toggle(void)
{
    mallctl_fn *m = ctl();
    check(!read_bool("opt.background_thread"), "opt.background_thread is false by default");
    check(!read_bool("background_thread"), "no thread by default");
    check(read_stat("stats.background_thread.num_threads", sizeof(size_t)) == 0, "0 threads");
    check(threads_named("salloc_bg", NULL) == 0, "no salloc_bg thread");

    check(write_bool("background_thread", true) == 0, "start");
    check(read_bool("background_thread"), "reads true once started");
    check(read_stat("stats.background_thread.num_threads", sizeof(size_t)) == 1, "1 thread");
    check(threads_named("salloc_bg", NULL) == 1, "one salloc_bg thread");
    check(write_bool("background_thread", true) == 0, "a second start changes nothing");
    check(threads_named("salloc_bg", NULL) == 1, "still one thread");

    /* max_background_threads: 1, the one thread salloc runs; any other
     * value is refused and changes nothing. */
    size_t max = 0, len = sizeof max, one = 1, other[] = {0, 2, 64};
    check(m("max_background_threads", &max, &len, NULL, 0) == 0 && max == 1, "max reads 1");
    check(m("max_background_threads", NULL, NULL, &one, sizeof one) == 0, "max: 1 accepted");
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        check(m("max_background_threads", NULL, NULL, &other[i], sizeof other[i]) == EINVAL,
              "max: other values refused");
    check(read_bool("background_thread") && threads_named("salloc_bg", NULL) == 1,
          "still one thread after max_background_threads");

    /* It runs every decay step (10 ms at least): 80 ms decay -> 10 ms.
     * Set while it sleeps out the default's 1 s step: the change wakes it,
     * so 5 runs come within 700 ms, polled (50 ms when not starved), long
     * before the old step would have ended. */
    usleep(50 * 1000);
    ssize_t decay = 80;
    check(m("arenas.dirty_decay_ms", NULL, NULL, &decay, sizeof decay) == 0, "decay");
    uint64_t runs = 0;
    for (int i = 0; i < 14 && runs < 5; i++) {
        usleep(50 * 1000);
        runs = read_stat("stats.background_thread.num_runs", sizeof(uint64_t));
    }
    uint64_t interval = read_stat("stats.background_thread.run_interval", sizeof(uint64_t));
    check(runs >= 5, "several runs within 700 ms");
    check(interval >= 5 * 1000 * 1000 && interval <= 200 * 1000 * 1000,
          "the run interval is about the decay step");

    /* A bool written with the wrong size is refused and changes nothing. */
    int wrong = 0;
    check(m("background_thread", NULL, NULL, &wrong, sizeof wrong) == EINVAL, "EINVAL");
    check(read_bool("background_thread"), "still running after EINVAL");

    check(write_bool("background_thread", false) == 0, "stop");
    check(!read_bool("background_thread"), "reads false once stopped");
    check(read_stat("stats.background_thread.num_threads", sizeof(size_t)) == 0, "0 after stop");
    check(gone_soon("salloc_bg"), "the thread is gone (joined)");
    printf("ok\n");
    return 0;
}

static int scenario_fork(void)
{
    check(read_bool("background_thread"), "started by opt.background_thread");
    check(threads_named("salloc_bg", NULL) == 1, "the parent has its thread");
    fflush(NULL);
    pid_t pid = fork();
    check(pid >= 0, "fork");
    if (pid == 0) {
        bool ok = !read_bool("background_thread") && threads_named("salloc_bg", NULL) == 0 &&
                  read_stat("stats.background_thread.num_threads", sizeof(size_t)) == 0;
        void *volatile p = malloc(BLOCK);
        ok = ok && p;
        free(p);
        ok = ok && write_bool("background_thread", true) == 0 &&
             threads_named("salloc_bg", NULL) == 1 && write_bool("background_thread", false) == 0 &&
             gone_soon("salloc_bg");
        _exit(ok ? 0 : 1);
    }
    int status;
    check(waitpid(pid, &status, 0) == pid, "waitpid");
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child had no thread, could start and stop its own");
    check(read_bool("background_thread") && threads_named("salloc_bg", NULL) == 1,
          "the parent's thread still runs");
    printf("ok\n");
    return 0;
}

static int scenario_signals(void)
{
    check(write_bool("background_thread", true) == 0, "start");
    /* Until its first pass the thread may still be in pthread_create's
     * start-up, which blocks everything for a moment whatever the mask. */
    for (int i = 0; i < 200 && read_stat("stats.background_thread.num_runs", 8) == 0; i++)
        usleep(10 * 1000);
    check(read_stat("stats.background_thread.num_runs", 8) > 0, "a first pass");
    pid_t tid = 0;
    check(threads_named("salloc_bg", &tid) == 1, "one thread");
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    check(f != NULL, "status");
    unsigned long long blocked = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "SigBlk: %llx", &blocked) == 1)
            break;
    fclose(f);
    int sigs[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        check(blocked & (1ull << (sigs[i] - 1)), "a signal the thread does not block");
    printf("ok\n");
    return 0;
}

/* ---- the tests: each scenario in a child under its options ---- */

static void run(const char *scenario, const char *conf, struct child_outcome *o)
{
    child_run("test_background", scenario, conf, false, o);
    if (o->status != 0)
        fprintf(stderr, "# %s under %s: status %d signal %d\n# out: %s# err: %s\n", scenario,
                conf, o->status, o->signal, o->out, o->err);
    assert_int_equal(o->signal, 0);
    assert_int_equal(o->status, 0);
}

static void idle_resident_of(const char *scenario, const char *conf, size_t *resident,
                             size_t *pages)
{
    struct child_outcome o;
    run(scenario, conf, &o);
    assert_int_equal(sscanf(o.out, "resident %zu of %zu", resident, pages), 2);
    fprintf(stderr, "# %s %s: %zu of %zu freed pages resident after idling\n", scenario, conf,
            *resident, *pages);
}

static void idle_resident(const char *conf, size_t *resident, size_t *pages)
{
    idle_resident_of("idle", conf, resident, pages);
}

/* Small blocks the central lists' transfer caches kept go back to their
 * spans after the decay time, the spans to the page heap, and from there
 * to the kernel: with a batch kept in each of the four classes, a few of
 * the 32 blocks would stay. */
static void test_background_thread_purges_central_lists_while_idle(void **state)
{
    (void)state;
    size_t resident, pages;
    idle_resident_of("idle_small", "dirty_decay_ms:100,background_thread:true", &resident,
                     &pages);
    assert_true(resident <= pages / 20);
    idle_resident_of("idle_small", "prof:false,dirty_decay_ms:100,background_thread:true",
                     &resident, &pages);
    assert_true(resident <= pages / 20);
    idle_resident_of("idle_small", "prof:false,dirty_decay_ms:100", &resident, &pages);
    assert_true(resident >= pages * 19 / 20);
}

static void test_background_thread_purges_while_idle(void **state)
{
    (void)state;
    size_t resident, pages;
    idle_resident("dirty_decay_ms:100,background_thread:true", &resident, &pages);
    assert_true(resident <= pages / 20);
    /* Sampling off too: the blocks' pages are then the heap's own spans. */
    idle_resident("prof:false,dirty_decay_ms:100,background_thread:true", &resident, &pages);
    assert_true(resident <= pages / 20);
}

static void test_without_thread_idle_memory_stays(void **state)
{
    (void)state;
    size_t resident, pages;
    idle_resident("dirty_decay_ms:100", &resident, &pages);
    assert_true(resident >= pages * 19 / 20);
    idle_resident("dirty_decay_ms:100,background_thread:false", &resident, &pages);
    assert_true(resident >= pages * 19 / 20);
}

/* Without the thread, the central lists' decay runs as the program
 * allocates (every few dozen of its cache's refills and overflows): the
 * transfer caches' blocks go back to their spans, the spans to the page
 * heap. */
static void test_without_thread_central_lists_decay_as_the_program_allocates(void **state)
{
    (void)state;
    struct child_outcome o;
    run("busy_small", "prof:false,dirty_decay_ms:100", &o);
    size_t spans, kept;
    assert_int_equal(sscanf(o.out, "spans %zu of %zu", &spans, &kept), 2);
    fprintf(stderr, "# busy_small: %zu of the %zu kept spans left\n", spans, kept);
    assert_true(kept >= 4); /* a kept span a class at least */
    assert_int_equal(spans, 0);
}

static void test_mallctl_starts_and_stops_thread(void **state)
{
    (void)state;
    struct child_outcome o;
    run("toggle", "", &o);
    assert_string_equal(o.out, "ok\n");
}

static void test_fork_child_runs_without_thread(void **state)
{
    (void)state;
    struct child_outcome o;
    run("fork", "background_thread:true", &o);
    assert_string_equal(o.out, "ok\n");
}

static void test_thread_blocks_signals(void **state)
{
    (void)state;
    struct child_outcome o;
    run("signals", "", &o);
    assert_string_equal(o.out, "ok\n");
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        if (!strcmp(argv[1], "idle"))
            return scenario_idle();
        if (!strcmp(argv[1], "idle_small"))
            return scenario_idle_small();
        if (!strcmp(argv[1], "busy_small"))
            return scenario_busy_small();
        if (!strcmp(argv[1], "toggle"))
            return scenario_toggle();
        if (!strcmp(argv[1], "fork"))
            return scenario_fork();
        if (!strcmp(argv[1], "signals"))
            return scenario_signals();
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_background_thread_purges_while_idle),
        cmocka_unit_test(test_background_thread_purges_central_lists_while_idle),
        cmocka_unit_test(test_without_thread_idle_memory_stays),
        cmocka_unit_test(test_without_thread_central_lists_decay_as_the_program_allocates),
        cmocka_unit_test(test_mallctl_starts_and_stops_thread),
        cmocka_unit_test(test_fork_child_runs_without_thread),
        cmocka_unit_test(test_thread_blocks_signals),
    };
    return cmocka_run_group_tests_name("background", tests, NULL, NULL);
}
