/*
 * static_sampling.c: a fully static executable (-static, lib/libsalloc.a),
 * run by test_real_programs with every allocation due for sampling
 * (lg_prof_sample:0).  glibc's own start-up allocates before its object
 * lookup is ready; salloc's stacks wait for its constructor, so those
 * samples fail (counted) instead of crashing the program.  Prints the live
 * samples and the failed ones after allocating BLOCKS blocks in main.
 * Calls mallinfo2() too: a static link with glibc's would fail.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCKS 100

int mallctl(const char *, void *, size_t *, void *, size_t);

int main(void)
{
    static void *kept[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        kept[i] = malloc(1000);
    size_t live = 0, len = sizeof(live);
    unsigned long long failed = 0;
    size_t flen = sizeof(failed);
    if (mallctl("prof.sample_count", &live, &len, NULL, 0) != 0 ||
        mallctl("prof.samples_failed", &failed, &flen, NULL, 0) != 0)
        return 2;
    /* Links at all: glibc's malloc.o, which would define malloc again, is
     * not pulled in for <malloc.h>'s functions (salloc has them). */
    struct mallinfo2 mi = mallinfo2();
    if (mi.uordblks < BLOCKS * 1000)
        return 3;
    printf("live %zu failed %llu\n", live, failed);
    for (int i = 0; i < BLOCKS; i++)
        free(kept[i]);
    return live >= BLOCKS ? 0 : 1;
}
