/*
 * test_guard_faults.c: guarded sampling as a program meets it, with salloc
 * preloaded.  Each scenario runs in a fresh process (this program run again
 * with the scenario's name and its SALLOC_CONF), which makes a memory error
 * on purpose; the test checks that it died of SIGSEGV (the default action
 * after salloc's report) and what salloc printed:
 *
 *   - a write and a read past the end of a guarded small block, and past
 *     the end of a guarded large one: "heap-buffer-overflow", the address,
 *     how far past the end, the block, and the stack that allocated it
 *     (this program's function names: built -rdynamic);
 *   - a write and a read after free: "heap-use-after-free", where in the
 *     block, the stack that freed it and the one that allocated it;
 *   - opt.lg_prof_guard_every:0 guards every sample as prof_guard does;
 *     without either option the same overflow goes unnoticed (the test
 *     would fail if guarding were always on);
 *   - a fault that is not salloc's (a wild pointer) gets the default action
 *     and no report from salloc, also when the process started with
 *     SIGSEGV ignored;
 *   - a SIGSEGV sent to the process (kill, raise) is no fault: it ends
 *     the process as without salloc, or is ignored if SIGSEGV was;
 *   - a double free of a guarded block names both stacks and aborts.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "child_run.h"

/* ---- the scenarios (run in the child) ---- */

/* They make these mistakes on purpose. */
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"

static char *volatile sink;

/* Prints the block's address and usable size for the parent. */
static char *announce(char *p)
{
    printf("%p %zu\n", (void *)p, malloc_usable_size(p));
    fflush(stdout);
    sink = p;
    return p;
}

/* Global (not static): -rdynamic exports them, so salloc's reports can
 * name them. */
char *allocate_victim(size_t n);
void release_victim(char *p);
void overflow_write(void), overflow_read(void), overflow_large(void);
void use_after_free_write(void), use_after_free_read(void), double_free(void);
void wild_pointer(void);
void sent_segv(void);

__attribute__((noinline)) char *allocate_victim(size_t n) { return announce(malloc(n)); }
__attribute__((noinline)) void release_victim(char *p)
{
    free(p);
    __asm__ volatile("" ::: "memory"); /* a call, not a jump: its frame shows */
}

__attribute__((noinline)) void overflow_write(void)
{
    char *p = allocate_victim(64);
    volatile char *q = p;
    q[64 + 3] = 1;
}

__attribute__((noinline)) void overflow_read(void)
{
    char *p = allocate_victim(4096);
    volatile char *q = p;
    printf("%d\n", q[4096]);
}

__attribute__((noinline)) void overflow_large(void)
{
    char *p = allocate_victim((size_t)1 << 20);
    memset(p, 1, (size_t)1 << 20);
    volatile char *q = p;
    q[(1 << 20) + 100] = 1;
}

__attribute__((noinline)) void use_after_free_write(void)
{
    char *p = allocate_victim(100);
    release_victim(p);
    volatile char *q = p;
    q[8] = 1;
}

__attribute__((noinline)) void use_after_free_read(void)
{
    char *p = allocate_victim(300000);
    release_victim(p);
    volatile char *q = p;
    printf("%d\n", q[200000]);
}

__attribute__((noinline)) void double_free(void)
{
    char *p = allocate_victim(48);
    release_victim(p);
    free(p);
}

__attribute__((noinline)) void wild_pointer(void)
{
    printf("0 0\n");
    fflush(stdout);
    volatile char *q = (char *)(uintptr_t)4096;
    *q = 1;
}

__attribute__((noinline)) void sent_segv(void)
{
    free(allocate_victim(64)); /* salloc set up, its handler installed */
    raise(SIGSEGV);
    printf("raised\n");
    fflush(stdout);
    kill(getpid(), SIGSEGV); /* the handler is still salloc's */
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"overflow_write", overflow_write},
    {"overflow_read", overflow_read},
    {"overflow_large", overflow_large},
    {"use_after_free_write", use_after_free_write},
    {"use_after_free_read", use_after_free_read},
    {"double_free", double_free},
    {"wild_pointer", wild_pointer},
    {"sent_segv", sent_segv},
};

/* ---- the parent ---- */

#define GUARD_ALL "prof_guard:true,lg_prof_sample:0"

struct outcome {
    struct child_outcome c;
    void *block;   /* what the child announced (announce) */
    size_t usable;
};

static void run(const char *scenario, const char *conf, bool ignore_segv, struct outcome *o)
{
    child_run("test_guard_faults", scenario, conf, ignore_segv, &o->c);
    o->block = NULL;
    o->usable = 0;
    sscanf(o->c.out, "%p %zu", &o->block, &o->usable);
    fprintf(stderr, "# %s (%s): signal %d\n%s", scenario, conf, o->c.signal, o->c.err);
}

/* stderr holds the line `fmt` makes with the addresses given. */
static void expect_line(const struct outcome *o, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (!strstr(o->c.err, line))
        fail_msg("stderr lacks \"%s\"", line);
}

/* `name` appears in stderr after `from` (a frame of that function). */
static void expect_frame_after(const struct outcome *o, const char *from, const char *name)
{
    const char *at = strstr(o->c.err, from);
    if (!at || !strstr(at, name))
        fail_msg("no frame of %s after \"%s\"", name, from);
}

static void expect_segv(const struct outcome *o)
{
    if (o->c.signal != SIGSEGV)
        fail_msg("expected death by SIGSEGV, got signal %d status %d", o->c.signal, o->c.status);
}

static void test_guard_overflow(void **state)
{
    (void)state;
    struct outcome o;
    run("overflow_write", GUARD_ALL, false, &o);
    expect_segv(&o);
    assert_int_equal(o.usable, 64);
    expect_line(&o,
                "salloc: heap-buffer-overflow: write of %p, 3 bytes past the end of the 64-byte "
                "block at %p (a guarded sample), allocated at:",
                (void *)((char *)o.block + 67), o.block);
    expect_frame_after(&o, "allocated at:", "allocate_victim");
    expect_frame_after(&o, "allocated at:", "overflow_write");

    run("overflow_read", GUARD_ALL, false, &o);
    expect_segv(&o);
    expect_line(&o, "heap-buffer-overflow: read of %p, 0 bytes past the end of the 4096-byte block",
                (void *)((char *)o.block + 4096));
    expect_frame_after(&o, "allocated at:", "overflow_read");

    run("overflow_large", GUARD_ALL, false, &o);
    expect_segv(&o);
    assert_int_equal(o.usable, (size_t)1 << 20);
    expect_line(&o, "heap-buffer-overflow: write of %p, 100 bytes past the end of the 1048576-byte",
                (void *)((char *)o.block + (1 << 20) + 100));
    expect_frame_after(&o, "allocated at:", "overflow_large");
}

static void test_guard_use_after_free(void **state)
{
    (void)state;
    struct outcome o;
    run("use_after_free_write", GUARD_ALL, false, &o);
    expect_segv(&o);
    expect_line(&o, "salloc: heap-use-after-free: write of %p (a guarded sample):",
                (void *)((char *)o.block + 8));
    expect_line(&o, "%p is 8 bytes into the %zu-byte block at %p, freed already, at:",
                (void *)((char *)o.block + 8), o.usable, o.block);
    expect_frame_after(&o, "freed already, at:", "release_victim");
    expect_frame_after(&o, "and allocated at:", "allocate_victim");
    expect_frame_after(&o, "and allocated at:", "use_after_free_write");

    run("use_after_free_read", GUARD_ALL, false, &o);
    expect_segv(&o);
    expect_line(&o, "salloc: heap-use-after-free: read of %p", (void *)((char *)o.block + 200000));
    expect_frame_after(&o, "freed already, at:", "release_victim");
}

static void test_guard_every_and_off(void **state)
{
    (void)state;
    struct outcome o;
    run("overflow_write", "lg_prof_guard_every:0,lg_prof_sample:0", false, &o);
    expect_segv(&o);
    expect_line(&o, "heap-buffer-overflow: write of %p", (void *)((char *)o.block + 67));
    /* Not guarded: the same overflow lands in the sample's own page. */
    run("overflow_write", "lg_prof_sample:0", false, &o);
    assert_int_equal(o.c.signal, 0);
    assert_int_equal(o.c.status, 0);
    assert_null(strstr(o.c.err, "salloc:"));
}

static void test_guard_foreign_fault_keeps_default_action(void **state)
{
    (void)state;
    struct outcome o;
    run("wild_pointer", GUARD_ALL, false, &o);
    expect_segv(&o);
    assert_null(strstr(o.c.err, "salloc:"));
    run("wild_pointer", GUARD_ALL, true, &o);
    expect_segv(&o); /* a fault cannot be ignored */
    assert_null(strstr(o.c.err, "salloc:"));
}

/* Sent, not a fault: nothing happens again when the handler returns, so
 * salloc's handler once returned and the program ran on. */
static void test_guard_sent_segv_keeps_default_action(void **state)
{
    (void)state;
    struct outcome o;
    run("sent_segv", GUARD_ALL, false, &o);
    expect_segv(&o);
    assert_null(strstr(o.c.out, "raised"));
    assert_null(strstr(o.c.err, "salloc:"));
    run("sent_segv", GUARD_ALL, true, &o);
    assert_int_equal(o.c.signal, 0);
    assert_non_null(strstr(o.c.out, "survived"));
}

static void test_guard_double_free(void **state)
{
    (void)state;
    struct outcome o;
    run("double_free", GUARD_ALL, false, &o);
    if (o.c.signal != SIGABRT)
        fail_msg("expected abort, got signal %d", o.c.signal);
    expect_line(&o, "salloc: free(): invalid pointer %p", o.block);
    expect_line(&o, "%p is 0 bytes into the 48-byte block at %p, freed already, at:", o.block,
                o.block);
    expect_frame_after(&o, "freed already, at:", "release_victim");
    expect_frame_after(&o, "and allocated at:", "allocate_victim");
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
            if (!strcmp(argv[1], scenarios[i].name)) {
                scenarios[i].run();
                printf("survived\n");
                return 0;
            }
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_overflow),
        cmocka_unit_test(test_guard_use_after_free),
        cmocka_unit_test(test_guard_every_and_off),
        cmocka_unit_test(test_guard_foreign_fault_keeps_default_action),
        cmocka_unit_test(test_guard_sent_segv_keeps_default_action),
        cmocka_unit_test(test_guard_double_free),
    };
    return cmocka_run_group_tests_name("guarded sampling", tests, NULL, NULL);
}
