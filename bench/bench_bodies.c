/*
 * bench_bodies.c: allocation workloads measured by bench/bin/bench_core.
 * Plain C, calling the process's malloc/free (whatever allocator is
 * preloaded).  Each object is touched (one byte written) so the allocation
 * is real, the same way for every allocator.
 *
 * Honesty: gcc deletes free(malloc(n)) when it knows the builtins.  These
 * bodies are built with -fno-builtin-malloc -fno-builtin-free, AND each
 * pointer goes through escape(), an empty asm the compiler cannot see
 * through, so the pairs survive even if the flags are dropped.
 */
#include <stdlib.h>

#include "bench_bodies.h"

/* Make p (and the memory it points to) visible to "unknown code". */
static inline void escape(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

static inline void *alloc_touch(size_t size)
{
    char *p = malloc(size);
    if (p == NULL)
        abort();
    p[0] = (char)size;   /* one write: the first page is really used */
    escape(p);
    return p;
}

void bench_pairs(size_t size, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(alloc_touch(size));
}

static void *slots[BENCH_BATCH_MAX];

void bench_batch_lifo(size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++)
        slots[i] = alloc_touch(size);
    for (size_t i = count; i-- > 0;)
        free(slots[i]);
}

void bench_batch_fifo(size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++)
        slots[i] = alloc_touch(size);
    for (size_t i = 0; i < count; i++)
        free(slots[i]);
}
