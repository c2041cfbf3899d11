/*
 * small_stack_coroutine.c: a makecontext coroutine on a small stack (bytes
 * from argv[1]) with an inaccessible page below it, allocating and freeing
 * at a few call depths; run by test_real_programs with every allocation
 * sampled, so each malloc walks the stack and records a sample on that
 * stack.  Prints how many blocks it allocated.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

static ucontext_t main_ctx, co_ctx;
static int blocks;

__attribute__((noinline)) static void allocate_at_depth(int depth)
{
    char *p = malloc(16 + (size_t)depth * 100);
    if (p) {
        p[0] = 1;
        blocks++;
    }
    free(p);
    if (depth)
        allocate_at_depth(depth - 1);
}

static void coroutine(void)
{
    for (int i = 0; i < 100; i++)
        allocate_at_depth(i % 4);
}

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 16384;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, page + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) /* an overflow faults */
        return 2;
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = m + page;
    co_ctx.uc_stack.ss_size = size;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, coroutine, 0);
    if (swapcontext(&main_ctx, &co_ctx) != 0)
        return 3;
    printf("%d blocks on a %zu-byte stack\n", blocks, size);
    return 0;
}
