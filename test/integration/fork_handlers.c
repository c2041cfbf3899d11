/*
 * fork_handlers.c: fork handlers that allocate, registered before the
 * process's first malloc (first thing in main), run by test_real_programs
 * with salloc preloaded.  salloc registers its own handlers at its first
 * allocation, after these: its prepare handler, which takes every lock,
 * runs before this one, and its parent and child handlers, which release
 * them, after these.  Each fork's handlers allocate small and large
 * blocks and, where the process's malloc has mallctl (salloc's), read the
 * statistics and write the decay time; another thread allocates meanwhile.
 * Prints how many forks went through.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FORKS 20

static void *volatile kept;
static atomic_bool stop;

typedef int mallctl_fn(const char *, void *, size_t *, void *, size_t);
static mallctl_fn *mallctl_of_process; /* NULL without salloc */

/* What a handler that logs the heap before a fork does: a new snapshot of
 * the statistics, read; and the decay time written as it is. */
static void use_mallctl(void)
{
    if (!mallctl_of_process)
        return;
    uint64_t epoch = 1;
    size_t allocated, len = sizeof(allocated);
    ssize_t decay;
    size_t dlen = sizeof(decay);
    if (mallctl_of_process("epoch", NULL, NULL, &epoch, sizeof(epoch)) != 0 ||
        mallctl_of_process("stats.allocated", &allocated, &len, NULL, 0) != 0 ||
        mallctl_of_process("arenas.dirty_decay_ms", &decay, &dlen, NULL, 0) != 0 ||
        mallctl_of_process("arenas.dirty_decay_ms", NULL, NULL, &decay, sizeof(decay)) != 0)
        abort();
}

/* A small and a large block: a thread cache's and the page heap's. */
static void allocate_some(void)
{
    char *small = malloc(100), *large = malloc((size_t)3 << 20);
    if (!small || !large)
        abort();
    memset(small, 1, 100);
    large[0] = large[((size_t)3 << 20) - 1] = 1;
    free(small);
    free(large);
}

static void prepare(void)
{
    free(kept);
    kept = malloc((size_t)1 << 20);
    use_mallctl();
}

static void after_fork(void)
{
    allocate_some();
    use_mallctl();
}

static void *allocate_meanwhile(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop))
        allocate_some();
    return NULL;
}

int main(void)
{
    pthread_atfork(prepare, after_fork, after_fork);
    /* After the handlers' registration: dlsym may allocate. */
    mallctl_of_process = (mallctl_fn *)dlsym(RTLD_DEFAULT, "mallctl");
    pthread_t t;
    if (pthread_create(&t, NULL, allocate_meanwhile, NULL) != 0)
        return 2;
    int ok = 0;
    for (int i = 0; i < FORKS; i++) {
        pid_t c = fork();
        if (c < 0)
            return 3;
        if (c == 0) {
            allocate_some();
            _exit(0);
        }
        int status;
        ok += waitpid(c, &status, 0) == c && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    free(kept);
    printf("forks: %d of %d\n", ok, FORKS);
    return ok == FORKS ? 0 : 1;
}
