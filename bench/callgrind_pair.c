/*
 * callgrind_pair.c: the program bench/callgrind.sh runs under callgrind to
 * count the instructions of malloc and free on their fast paths.
 *
 *   callgrind_pair N [SIZE]   warm-up pairs, then N pairs of
 *                             p = malloc(SIZE); p[0] = 1; free(p);
 *                             (SIZE defaults to 16), all in pair_loop()
 *   callgrind_pair N null     the same with free(NULL) alone: what a
 *                             program's clean-up code and C++'s delete of a
 *                             null pointer cost
 *
 * Built like the benchmark bodies (-fno-builtin-malloc -fno-builtin-free,
 * pointers escape through an empty asm) so every pair really calls the
 * process's malloc and free; it links no allocator, callgrind.sh preloads one.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_PAIRS 1000

/* noipa: never inlined, cloned, merged or specialised, so callgrind sees
 * exactly one pair_loop holding every pair (warm-up included). */
#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

NOIPA void pair_loop(unsigned long n, size_t size);

/* size 0: free(NULL), n times. */
void pair_loop(unsigned long n, size_t size)
{
    if (size == 0) {
        for (unsigned long i = 0; i < n; i++) {
            void *null = NULL;
            __asm__ volatile("" : "+r"(null) : : "memory");
            free(null);
        }
        return;
    }
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
    bool null = argc == 3 && strcmp(argv[2], "null") == 0;
    unsigned long n = argc >= 2 ? parse(argv[1]) : 0, size = argc == 3 ? parse(argv[2]) : 16;
    if (argc < 2 || argc > 3 || n == 0 || (size == 0 && !null)) {
        fprintf(stderr,
                "usage: %s N [SIZE|null]   (N > 0 malloc(SIZE)+free pairs, SIZE default 16;\n"
                "       null: N calls of free(NULL))\n",
                argv[0]);
        return 2;
    }
    pair_loop(WARMUP_PAIRS, size);
    pair_loop(n, size);
    return 0;
}
