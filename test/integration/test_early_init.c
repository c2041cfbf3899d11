/*
 * test_early_init.c: salloc works from the very first call, whoever makes
 * it.  Run with LD_PRELOAD=lib/libsalloc.so (make test does): a constructor
 * allocates before main, the dynamic loader allocates for dlsym/dlerror and
 * dlopen, new threads allocate first thing, a forked child allocates.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static void *before_main[64];

__attribute__((constructor(101))) static void allocate_before_main(void)
{
    for (int i = 0; i < 64; i++) {
        before_main[i] = malloc((size_t)i * 100 + 1);
        memset(before_main[i], i, (size_t)i * 100 + 1);
    }
}

/* The malloc this process uses is salloc's. */
static void test_early_init_salloc_is_the_allocator(void **state)
{
    (void)state;
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    assert_non_null(sym);
    assert_true(dladdr(sym, &info) != 0);
    if (!strstr(info.dli_fname, "libsalloc"))
        fail_msg("malloc comes from %s: run with LD_PRELOAD=lib/libsalloc.so", info.dli_fname);
}

static void test_early_init_constructor_allocations_survive(void **state)
{
    (void)state;
    for (int i = 0; i < 64; i++) {
        unsigned char *p = before_main[i];
        assert_true(malloc_usable_size(p) >= (size_t)i * 100 + 1);
        for (int k = 0; k < i * 100 + 1; k++)
            assert_int_equal(p[k], (unsigned char)i);
        free(p);
    }
}

/* dlerror() keeps its message in memory from malloc; dlopen allocates too. */
static void test_early_init_dynamic_loader_allocations(void **state)
{
    (void)state;
    for (int i = 0; i < 100; i++) {
        assert_null(dlsym(RTLD_NEXT, "no_such_symbol_anywhere"));
        assert_non_null(dlerror());
    }
    void *h = dlopen("libresolv.so.2", RTLD_NOW);
    if (h)
        assert_int_equal(dlclose(h), 0);
}

static void *first_call_in_thread(void *arg)
{
    (void)arg;
    char *p = malloc(40);
    snprintf(p, 40, "thread %lu", (unsigned long)pthread_self() % 1000);
    char *q = strdup(p);
    free(p);
    return q;
}

static void test_early_init_new_threads(void **state)
{
    (void)state;
    for (int round = 0; round < 50; round++) {
        pthread_t t[8];
        for (int i = 0; i < 8; i++)
            assert_int_equal(pthread_create(&t[i], NULL, first_call_in_thread, NULL), 0);
        for (int i = 0; i < 8; i++) {
            void *r;
            pthread_join(t[i], &r);
            assert_non_null(r);
            free(r); /* freed by another thread than the one that allocated */
        }
    }
}

static void test_early_init_fork_child_allocates(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        void *p[1000];
        for (int i = 0; i < 1000; i++)
            p[i] = malloc((size_t)i * 37 + 1);
        for (int i = 0; i < 1000; i++)
            free(p[i]);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_init_salloc_is_the_allocator),
        cmocka_unit_test(test_early_init_constructor_allocations_survive),
        cmocka_unit_test(test_early_init_dynamic_loader_allocations),
        cmocka_unit_test(test_early_init_new_threads),
        cmocka_unit_test(test_early_init_fork_child_allocates),
    };
    return cmocka_run_group_tests_name("early_init", tests, NULL, NULL);
}
