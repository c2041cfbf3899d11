/*
 * callgrind_pair.c: the program bench/callgrind.sh runs under callgrind to
 * count the instructions of one 16-byte malloc+free pair.
 *
 *   callgrind_pair N    warm-up pairs, then N pairs, all in pair_loop()
 *
 * Built like the benchmark bodies (-fno-builtin-malloc -fno-builtin-free,
 * pointers escape through an empty asm) so every pair really calls the
 * process's malloc and free; it links no allocator, callgrind.sh preloads one.
 */
#include <stdio.h>
#include <stdlib.h>

#define WARMUP_PAIRS 1000

/* noipa: never inlined, cloned, merged or specialised, so callgrind sees
 * exactly one pair_loop holding every pair (warm-up included). */
#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

NOIPA void pair_loop(unsigned long n);

void pair_loop(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++) {
        char *p = malloc(16);
        if (p == NULL)
            abort();
        p[0] = 1;
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
}

int main(int argc, char **argv)
{
    char *end;
    unsigned long n = argc == 2 ? strtoul(argv[1], &end, 10) : 0;
    if (argc != 2 || *end != '\0' || n == 0) {
        fprintf(stderr, "usage: %s N   (N > 0 malloc(16)+free pairs)\n", argv[0]);
        return 2;
    }
    pair_loop(WARMUP_PAIRS);
    pair_loop(n);
    return 0;
}
