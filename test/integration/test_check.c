/*
 * test_check.c: bad frees, with salloc preloaded.  Each scenario runs in a
 * fresh process (this program run again with the scenario's name and its
 * own SALLOC_CONF: opt.check must be set before the first allocation), and
 * the test checks how it ended and what it printed on stderr.
 *
 * Under opt.check (SALLOC_CONF=check:true):
 *   - a pointer into the middle of a small block, a block never allocated,
 *     a double free (caught in the thread's cache and in its span), a sized
 *     free (C23's, or C++'s sized delete) of the wrong size: "salloc:
 *     free(): ..." (or the function's name) naming the address,
 *     then abort; a realloc of a freed block that would keep its place:
 *     "salloc: realloc(): use after free ...";
 *   - the sizes a block may be freed with: its request, a realloc that kept
 *     it in place (a one-page aligned block too), an aligned request with
 *     free_aligned_sized (aligned to 16 under 16 bytes too), C++'s sized
 *     and aligned sized deletes: no abort.
 * Always (no option), for sampled blocks (lg_prof_sample:0: every block is
 * sampled): a pointer into one and a double free say so and print the stack
 * that allocated it, with this program's function names (built -rdynamic).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "child_run.h"

int malloc_trim(size_t pad);

/* C23's sized frees: salloc's (glibc 2.36 has none), found at run time. */
static void free_sized(void *p, size_t size)
{
    void (*f)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    if (!f)
        _exit(4);
    f(p, size);
}

static void free_aligned_sized(void *p, size_t align, size_t size)
{
    void (*f)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    if (!f)
        _exit(4);
    f(p, align, size);
}

/* C++'s operator new and sized deletes, salloc's, by their Itanium-ABI
 * names (this program is C). */
static void *cxx_symbol(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f)
        _exit(4);
    return f;
}

static void *cxx_new(size_t size)
{
    return ((void *(*)(size_t))cxx_symbol("_Znwm"))(size);
}

static void *cxx_new_aligned(size_t size, size_t align)
{
    return ((void *(*)(size_t, size_t))cxx_symbol("_ZnwmSt11align_val_t"))(size, align);
}

static void cxx_delete_sized(void *p, size_t size)
{
    ((void (*)(void *, size_t))cxx_symbol("_ZdlPvm"))(p, size);
}

static void cxx_delete_sized_aligned(void *p, size_t size, size_t align)
{
    ((void (*)(void *, size_t, size_t))cxx_symbol("_ZdlPvmSt11align_val_t"))(p, size, align);
}

/* ---- the scenarios (run in the child) ---- */

/* They make these mistakes on purpose. */
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

static void *volatile sink;

/* Global (not static): -rdynamic exports them, so salloc's messages can
 * name them (dladdr reads the dynamic symbol table). */
void interior_free(void), double_free_in_cache(void), double_free_in_span(void);
void never_allocated(void), wrong_size(void), wrong_size_delete(void), right_sizes(void);
void into_sampled_block(void), double_free_sampled(void), realloc_after_free(void);
void into_sampled_large_block(void);

/* Prints the block's address for the parent to match in the message. */
static void *announce(void *p)
{
    printf("%p\n", p);
    fflush(stdout);
    sink = p;
    return p;
}

__attribute__((noinline)) void interior_free(void)
{
    char *p = announce(malloc(64));
    free(p + 16);
}

/* A realloc that would keep the freed block in place (64 bytes still fits
 * its class): it met no check, as no free followed. */
__attribute__((noinline)) void realloc_after_free(void)
{
    void *p = announce(malloc(64));
    free(p);
    sink = realloc(p, 60);
}

__attribute__((noinline)) void double_free_in_cache(void)
{
    void *p = announce(malloc(32));
    free(p);
    free(p);
}

__attribute__((noinline)) void double_free_in_span(void)
{
    static void *live[200]; /* its neighbours stay live: its span stays */
    for (int i = 0; i < 200; i++)
        live[i] = malloc(32);
    void *p = announce(live[100]);
    free(p);
    malloc_trim(0); /* the thread's cache goes back to the central lists */
    free(p);
}

__attribute__((noinline)) void never_allocated(void)
{
    char *p = announce(malloc(48)); /* 170 blocks a span; a refill carves a few */
    free(p + 48 * 100);
}

__attribute__((noinline)) void wrong_size(void)
{
    void *p = announce(malloc(100));
    free_sized(p, 200);
}

__attribute__((noinline)) void wrong_size_delete(void)
{
    void *p = announce(cxx_new(100));
    cxx_delete_sized(p, 200);
}

__attribute__((noinline)) void right_sizes(void)
{
    void *p = malloc(100);
    free_sized(p, 100);
    p = malloc(1000);
    p = realloc(p, 900); /* kept in place: 900 is a size it may be freed with */
    free_sized(p, 900);
    p = aligned_alloc(64, 100);
    free_aligned_sized(p, 64, 100);
    p = aligned_alloc(16, 8); /* a 16-byte block: the 8-byte class is only 8-aligned */
    free_aligned_sized(p, 16, 8);
    p = aligned_alloc(16384, 100); /* a page of its own, aligned beyond it */
    p = realloc(p, 539);           /* moved to its class, or kept for 539 */
    free_sized(p, 539);
    p = malloc((size_t)1 << 20);
    free_sized(p, (size_t)1 << 20);
    p = cxx_new(100); /* C++'s sized deletes check as free_sized does */
    cxx_delete_sized(p, 100);
    p = cxx_new_aligned(100, 64);
    cxx_delete_sized_aligned(p, 100, 64);
    for (int i = 0; i < 100000; i++) { /* and ordinary traffic is undisturbed */
        void *q = malloc((size_t)(i % 500) + 1);
        free(q);
    }
    printf("fine\n");
}

__attribute__((noinline)) void into_sampled_block(void)
{
    char *p = announce(malloc(100));
    free(p + 8);
}

/* Past the pages the pagemap records of a large span (its first and last). */
__attribute__((noinline)) void into_sampled_large_block(void)
{
    char *p = announce(malloc((size_t)1 << 20));
    free(p + (512 << 10));
}

__attribute__((noinline)) void double_free_sampled(void)
{
    void *p = announce(malloc(100));
    free(p);
    free(p);
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"interior_free", interior_free},     {"double_free_in_cache", double_free_in_cache},
    {"double_free_in_span", double_free_in_span}, {"never_allocated", never_allocated},
    {"wrong_size", wrong_size},           {"right_sizes", right_sizes},
    {"wrong_size_delete", wrong_size_delete},
    {"into_sampled_block", into_sampled_block}, {"double_free_sampled", double_free_sampled},
    {"realloc_after_free", realloc_after_free},
    {"into_sampled_large_block", into_sampled_large_block},
};

/* ---- the parent ---- */

static void run(const char *scenario, const char *conf, struct child_outcome *o)
{
    child_run("test_check", scenario, conf, false, o);
}

/* The scenario aborts, and stderr holds `want` with "%p" the address the
 * child announced plus `delta` bytes; `also` (if not NULL) appears too. */
static void expect_abort(const char *scenario, const char *conf, const char *want, long delta,
                         const char *also)
{
    struct child_outcome o;
    run(scenario, conf, &o);
    void *p = NULL;
    sscanf(o.out, "%p", &p);
    char line[256];
    snprintf(line, sizeof(line), want, (void *)((char *)p + delta), p);
    fprintf(stderr, "# %s (%s):\n%s", scenario, conf, o.err);
    if (o.signal != SIGABRT || !strstr(o.err, line))
        fail_msg("%s: expected abort with \"%s\", got signal %d status %d", scenario, line,
                 o.signal, o.status);
    if (also && !strstr(o.err, also))
        fail_msg("%s: stderr lacks \"%s\"", scenario, also);
}

/* opt.check with sampling left on would sample the block a scenario
 * breaks now and then (a 64-byte one one time in 8000): its message is a
 * sampled block's (test_check_sampled_blocks_name_their_stack), not the one
 * expected. */
#define CHECK_UNSAMPLED "check:true,prof_active:false"

static void test_check_interior_pointer(void **state)
{
    (void)state;
    expect_abort("interior_free", CHECK_UNSAMPLED,
                 "salloc: free(): invalid pointer %p: 16 bytes into the 64-byte block at %p", 16,
                 NULL);
}

static void test_check_double_frees(void **state)
{
    (void)state;
    expect_abort("double_free_in_cache", CHECK_UNSAMPLED,
                 "salloc: free(): double free of the 32-byte block at %p", 0, NULL);
    expect_abort("double_free_in_span", CHECK_UNSAMPLED,
                 "salloc: free(): double free of the 32-byte block at %p", 0, NULL);
    expect_abort("realloc_after_free", CHECK_UNSAMPLED,
                 "salloc: realloc(): use after free of the 64-byte block at %p", 0, NULL);
}

static void test_check_never_allocated(void **state)
{
    (void)state;
    expect_abort("never_allocated", CHECK_UNSAMPLED,
                 "salloc: free(): invalid pointer %p: a 48-byte block never allocated", 4800, NULL);
}

static void test_check_sized_frees(void **state)
{
    (void)state;
    expect_abort("wrong_size", "check:true",
                 "salloc: free_sized(): size 200 does not match the 112-byte block at %p", 0, NULL);
    expect_abort("wrong_size_delete", "check:true",
                 "salloc: operator delete(): size 200 does not match the 112-byte block at %p", 0,
                 NULL);
    struct child_outcome o;
    run("right_sizes", "check:true", &o);
    if (o.signal || o.status != 0 || !strstr(o.out, "fine"))
        fail_msg("right_sizes: signal %d status %d, stderr: %s", o.signal, o.status, o.err);
}

static void test_check_sampled_blocks_name_their_stack(void **state)
{
    (void)state;
    expect_abort("into_sampled_block", "lg_prof_sample:0",
                 "  %p is 8 bytes into the sampled 112-byte block at %p, allocated at:", 8,
                 "into_sampled_block");
    expect_abort("into_sampled_large_block", "lg_prof_sample:0",
                 "  %p is 524288 bytes into the sampled 1048576-byte block at %p, allocated at:",
                 512 << 10, "into_sampled_large_block");
    expect_abort("double_free_sampled", "lg_prof_sample:0",
                 "salloc: free(): invalid pointer %p", 0, "double_free_sampled");
    struct child_outcome o;
    run("double_free_sampled", "lg_prof_sample:0", &o);
    assert_non_null(strstr(o.err, "freed already"));
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
            if (!strcmp(argv[1], scenarios[i].name)) {
                scenarios[i].run();
                return 0;
            }
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_interior_pointer),
        cmocka_unit_test(test_check_double_frees),
        cmocka_unit_test(test_check_never_allocated),
        cmocka_unit_test(test_check_sized_frees),
        cmocka_unit_test(test_check_sampled_blocks_name_their_stack),
    };
    return cmocka_run_group_tests_name("bad frees", tests, NULL, NULL);
}
