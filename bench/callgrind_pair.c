/*
 * callgrind_pair.c: the program bench/callgrind.sh runs under callgrind to
 * count the instructions of malloc and free on their fast paths.
 *
 *   callgrind_pair N [SIZE]   warm-up pairs, then N pairs of
 *                             p = malloc(SIZE); p[0] = 1; free(p);
 *                             (SIZE defaults to 16), all in pair_loop()
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

NOIPA void pair_loop(unsigned long n, size_t size);

void pair_loop(unsigned long n, size_t size)
{
    for (unsigned long i = 0; i < n; i++) {
        char *p = malloc(size);
        if (p == NULL)
            abort();
        p[0] = 1;
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
}

static unsigned long parse(const char *s)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    return *end == '\0' ? v : 0;
}

int main(int argc, char **argv)
{
    unsigned long n = argc >= 2 ? parse(argv[1]) : 0, size = argc == 3 ? parse(argv[2]) : 16;
    if (argc < 2 || argc > 3 || n == 0 || size == 0) {
        fprintf(stderr, "usage: %s N [SIZE]   (N > 0 malloc(SIZE)+free pairs, SIZE default 16)\n",
                argv[0]);
        return 2;
    }
    pair_loop(WARMUP_PAIRS, size);
    pair_loop(n, size);
    return 0;
}
