/*
 * test_fill.c: opt.junk and opt.zero (man/salloc.3), with salloc
 * preloaded.  Each scenario runs in a fresh process (this program run again
 * with the scenario's name and its own SALLOC_CONF: the fills are set up
 * before the first allocation) and reads the bytes salloc handed out or
 * took back; it prints "fine", or names the first wrong byte on stderr and
 * exits 1.
 *
 *   - junk:alloc (and true): every usable byte of a new block is 0xa5, for
 *     small, large, aligned, reused and sampled blocks (guarded ones
 *     included: the fill stays inside the block), and the bytes a realloc
 *     adds; calloc and MALLOCX_ZERO still give zeros;
 *   - junk:free (and true): a freed block's bytes are 0x5a (past the first
 *     16 of a small one, which the cache may use), and so is the tail a
 *     realloc cuts off a large block in place;
 *   - zero:true: new blocks, reused ones included, and a realloc's new
 *     bytes are zero; it wins over junk:alloc, as in jemalloc;
 *   - with check:true, a double free is still caught though the freed
 *     block was filled;
 *   - opt.junk and opt.zero read what was set.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "child_run.h"

/* salloc's mallctl and mallocx, found at run time (salloc is preloaded). */
static void *salloc_fn(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f)
        exit(4);
    return f;
}

/* ---- the scenarios (run in the child) ---- */

/* The sizes each scenario allocates: small classes across their range, a
 * block of two pages' class, large blocks (one of several MiB). */
static const size_t sizes[] = {1, 24, 100, 1000, 4096, 40000, 300000, (size_t)3 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Exits 1, naming the first of bytes [from, to) of `p` that is not `v`. */
static void expect_bytes(const void *p, size_t from, size_t to, int v, const char *what,
                         size_t size)
{
    const unsigned char *b = p;
    for (size_t i = from; i < to; i++)
        if (b[i] != (unsigned char)v) {
            fprintf(stderr, "%s of %zu bytes: byte %zu of %zu is %#x, not %#x\n", what, size, i,
                    to, b[i], v);
            exit(1);
        }
}

/* A block's address, to read its bytes after free() on purpose: it is
 * still in salloc's cache or span (large ones: dirty_decay_ms:-1 keeps
 * their pages).  As a number, through calls the compiler does not follow. */
__attribute__((noinline)) static uintptr_t address(const void *p) { return (uintptr_t)p; }
__attribute__((noinline)) static const void *at(uintptr_t a) { return (const void *)a; }

/* New blocks are filled with `v` (0xa5 for junk, 0 for zero), fresh and
 * reused ones; the bytes a realloc adds too, the ones it keeps unchanged. */
static void check_new_blocks(int v)
{
    for (int round = 0; round < 2; round++) /* the second reuses the first's */
        for (size_t i = 0; i < NSIZES; i++) {
            unsigned char *p = malloc(sizes[i]);
            size_t usable = malloc_usable_size(p);
            expect_bytes(p, 0, usable, v, "malloc", sizes[i]);
            memset(p, 0x11, usable);
            free(p);
        }
    void *a = aligned_alloc(64, 192), *b = NULL;
    expect_bytes(a, 0, malloc_usable_size(a), v, "aligned_alloc", 192);
    if (posix_memalign(&b, 4096, 5000) != 0)
        exit(3);
    expect_bytes(b, 0, malloc_usable_size(b), v, "posix_memalign", 5000);
    free(a);
    free(b);
    /* Grown by realloc: small to small (moved), small to large, large in
     * place or moved. */
    const size_t grow[][2] = {{24, 200}, {1000, 100000}, {300000, 600000}};
    for (size_t i = 0; i < 3; i++) {
        unsigned char *p = malloc(grow[i][0]);
        size_t old = malloc_usable_size(p);
        memset(p, 0x11, old);
        p = realloc(p, grow[i][1]);
        expect_bytes(p, 0, old, 0x11, "realloc's kept bytes", grow[i][1]);
        expect_bytes(p, old, malloc_usable_size(p), v, "realloc's new bytes", grow[i][1]);
        free(p);
    }
    /* Zeroing allocations stay zero. */
    unsigned char *c = calloc(10, 100);
    expect_bytes(c, 0, 1000, 0, "calloc", 1000);
    free(c);
    void *(*mallocx)(size_t, int) = (void *(*)(size_t, int))salloc_fn("mallocx");
    unsigned char *x = mallocx(100, 0x40 /* MALLOCX_ZERO */);
    expect_bytes(x, 0, malloc_usable_size(x), 0, "mallocx(MALLOCX_ZERO)", 100);
    free(x);
}

static void run_junk_alloc(void) { check_new_blocks(0xa5); }
static void run_zero(void) { check_new_blocks(0); }

/* Freed blocks are filled with 0x5a: small ones past their first 16 bytes,
 * large ones whole; a large block's tail that realloc cuts off in place. */
static void run_junk_free(void)
{
    for (size_t i = 0; i < NSIZES; i++) {
        unsigned char *p = malloc(sizes[i]);
        size_t usable = malloc_usable_size(p);
        memset(p, 0x11, usable);
        uintptr_t a = address(p);
        free(p);
        size_t from = usable > (256u << 10) ? 0 : 16; /* large: whole */
        if (usable > 16)
            expect_bytes(at(a), from, usable, 0x5a, "freed block", sizes[i]);
    }
    unsigned char *p = malloc(600000);
    size_t old = malloc_usable_size(p);
    memset(p, 0x11, old);
    unsigned char *q = realloc(p, 300000);
    if (q != p)
        exit(5); /* a shrink in place was expected */
    size_t now = malloc_usable_size(q);
    expect_bytes(q, 0, now, 0x11, "shrunk block", 300000);
    expect_bytes(at(address(q)), now, old, 0x5a, "shrunk block's tail", 600000);
    free(q);
}

/* Sampled blocks, guarded or not: filled, and freed without a fault. */
static void run_sampled(void)
{
    for (size_t i = 0; i < NSIZES; i++) {
        unsigned char *p = malloc(sizes[i]);
        expect_bytes(p, 0, malloc_usable_size(p), 0xa5, "sampled block", sizes[i]);
        free(p);
    }
}

/* They make this mistake on purpose. */
static void run_double_free(void)
{
    void *volatile p = malloc(32);
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    free(p);
}

static void run_opts(void)
{
    int (*mallctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))salloc_fn("mallctl");
    const char *junk = NULL;
    bool zero = false;
    size_t len = sizeof(junk);
    if (mallctl("opt.junk", &junk, &len, NULL, 0) != 0)
        exit(6);
    len = sizeof(zero);
    if (mallctl("opt.zero", &zero, &len, NULL, 0) != 0)
        exit(6);
    printf("junk:%s zero:%d\n", junk, zero);
}

static const struct {
    const char *name;
    void (*run)(void);
} scenarios[] = {
    {"junk_alloc", run_junk_alloc}, {"zero", run_zero},
    {"junk_free", run_junk_free},   {"sampled", run_sampled},
    {"double_free", run_double_free}, {"opts", run_opts},
};

/* ---- the parent ---- */

/* The scenario exits 0 having printed `want`. */
static void expect_fine(const char *scenario, const char *conf, const char *want)
{
    struct child_outcome o;
    child_run("test_fill", scenario, conf, false, &o);
    if (o.signal || o.status != 0 || !strstr(o.out, want))
        fail_msg("%s (%s): signal %d status %d, stdout: %s stderr: %s", scenario, conf, o.signal,
                 o.status, o.out, o.err);
}

static void test_fill_junk_alloc(void **state)
{
    (void)state;
    expect_fine("junk_alloc", "junk:alloc", "fine");
    expect_fine("junk_alloc", "junk:true", "fine");
    expect_fine("junk_alloc", "junk:alloc,tcache:false", "fine");
}

static void test_fill_junk_free(void **state)
{
    (void)state;
    expect_fine("junk_free", "junk:free,dirty_decay_ms:-1", "fine");
    expect_fine("junk_free", "junk:true,dirty_decay_ms:-1", "fine");
    expect_fine("junk_free", "junk:true,dirty_decay_ms:-1,check:true", "fine");
}

static void test_fill_zero(void **state)
{
    (void)state;
    expect_fine("zero", "zero:true", "fine");
    expect_fine("zero", "zero:true,junk:true", "fine"); /* zero wins */
}

static void test_fill_sampled(void **state)
{
    (void)state;
    expect_fine("sampled", "junk:true,lg_prof_sample:0", "fine");
    expect_fine("sampled", "junk:true,lg_prof_sample:0,lg_prof_guard_every:0", "fine");
}

static void test_fill_keeps_double_free_check(void **state)
{
    (void)state;
    struct child_outcome o;
    child_run("test_fill", "double_free", "junk:true,check:true,prof_active:false", false, &o);
    void *p = NULL;
    sscanf(o.out, "%p", &p);
    char want[128];
    snprintf(want, sizeof(want), "salloc: free(): double free of the 32-byte block at %p", p);
    if (o.signal != SIGABRT || !strstr(o.err, want))
        fail_msg("expected abort with \"%s\", got signal %d status %d: %s", want, o.signal,
                 o.status, o.err);
}

static void test_fill_options_read(void **state)
{
    (void)state;
    expect_fine("opts", "", "junk:false zero:0");
    expect_fine("opts", "junk:alloc,zero:true", "junk:alloc zero:1");
    expect_fine("opts", "junk:free", "junk:free zero:0");
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
            if (!strcmp(argv[1], scenarios[i].name)) {
                scenarios[i].run();
                printf("fine\n");
                return 0;
            }
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_junk_alloc),
        cmocka_unit_test(test_fill_junk_free),
        cmocka_unit_test(test_fill_zero),
        cmocka_unit_test(test_fill_sampled),
        cmocka_unit_test(test_fill_keeps_double_free_check),
        cmocka_unit_test(test_fill_options_read),
    };
    return cmocka_run_group_tests_name("junk and zero fills", tests, NULL, NULL);
}
