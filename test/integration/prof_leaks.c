/*
 * prof_leaks.c: a program that leaks from two known sites, run with salloc
 * preloaded by test_prof.c to check prof_leak's summary at exit.
 *
 *   prof_leaks leak   keeps, until exit:
 *                       site_leak_small  20000 x 1000 B (usable 1 KiB)
 *                       site_leak_large    200 x 100000 B
 *   prof_leaks none   allocates the same and frees all of it
 *   prof_leaks leak noprefix   leaks, and empties prof.prefix before exit:
 *                     no final dump can be named
 *   prof_leaks leak holdstdout  leaks, and exits while another thread
 *                     holds stdout's lock (blocked for good)
 *
 * Prints (to stdout, fully buffered in a static buffer: nothing of stdio
 * stays allocated, and the line is still in the buffer at exit, where
 * prof_leak_error's exit must not lose it)
 *   "truth <bytes> <objects> leak <opt.prof_leak> <opt.prof_leak_error>"
 * with the usable bytes and objects it leaves live.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static void *(*volatile do_malloc)(size_t) = malloc;

__attribute__((noinline)) void *site_leak_small(void) { void *p = do_malloc(1000); KEEP(p); return p; }
__attribute__((noinline)) void *site_leak_large(void) { void *p = do_malloc(100000); KEEP(p); return p; }

static sem_t held;

/* Takes stdout's lock and never gives it back. */
static void *hold_stdout(void *arg)
{
    (void)arg;
    flockfile(stdout);
    sem_post(&held);
    for (;;)
        pause();
    return NULL;
}

static bool opt(mallctl_fn mallctl, const char *name)
{
    bool v = false;
    size_t len = sizeof(v);
    return mallctl && mallctl(name, &v, &len, NULL, 0) == 0 && v;
}

int main(int argc, char **argv)
{
    static char out[4096];
    setvbuf(stdout, out, _IOFBF, sizeof(out));
    bool leak = argc > 1 && !strcmp(argv[1], "leak");
    static void *small[20000], *large[200];
    size_t bytes = 0, objects = 0;
    for (int i = 0; i < 20000; i++) {
        small[i] = site_leak_small();
        bytes += malloc_usable_size(small[i]);
    }
    for (int i = 0; i < 200; i++) {
        large[i] = site_leak_large();
        bytes += malloc_usable_size(large[i]);
    }
    objects = 20200;
    if (!leak) {
        for (int i = 0; i < 20000; i++)
            free(small[i]);
        for (int i = 0; i < 200; i++)
            free(large[i]);
        bytes = objects = 0;
    }
    mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    if (argc > 2 && !strcmp(argv[2], "noprefix") && mallctl) {
        const char *empty = "";
        mallctl("prof.prefix", NULL, NULL, &empty, sizeof(empty));
    }
    printf("truth %zu %zu leak %d %d\n", bytes, objects, opt(mallctl, "opt.prof_leak"),
           opt(mallctl, "opt.prof_leak_error"));
    if (argc > 2 && !strcmp(argv[2], "holdstdout")) {
        pthread_t t;
        sem_init(&held, 0, 0);
        if (pthread_create(&t, NULL, hold_stdout, NULL) != 0)
            return 3;
        sem_wait(&held); /* exit now, with stdout held by that thread */
    }
    return 0; /* the line is still in `out`: exit() flushes it */
}
