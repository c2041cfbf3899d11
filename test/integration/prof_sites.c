/*
 * prof_sites.c: a small program with known allocation sites, run with salloc
 * preloaded by test_prof.c.  Keeps live:
 *   site_small   200000 x 16 B      (3.2 MB)
 *   site_medium    2000 x 3000 B    (usable 3072: 6.1 MB)
 *   site_large       16 x 1 MiB     (16 MiB)
 * then writes a heap profile with mallctl("prof.dump") to argv[1] and prints
 * the true live bytes per site (usable sizes) as "truth <site> <bytes>".
 *
 * Built PIE and non-PIE; mallctl is looked up with dlsym, so the program
 * also runs without salloc (it then reports that and exits 2).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Found at run time: a weak reference would be bound to NULL at link time
 * in a non-PIE build, where the preloaded library could not supply it. */
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static void *(*volatile do_malloc)(size_t) = malloc;

__attribute__((noinline)) void *site_small(void) { void *p = do_malloc(16); KEEP(p); return p; }
__attribute__((noinline)) void *site_medium(void) { void *p = do_malloc(3000); KEEP(p); return p; }
__attribute__((noinline)) void *site_large(void) { void *p = do_malloc(1 << 20); KEEP(p); return p; }

int main(int argc, char **argv)
{
    mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    if (argc < 2 || !mallctl) {
        fprintf(stderr, "usage: LD_PRELOAD=libsalloc.so prof_sites DUMP\n");
        return 2;
    }
    static void *small[200000], *medium[2000], *large[16];
    size_t t_small = 0, t_medium = 0, t_large = 0;
    for (int i = 0; i < 200000; i++)
        t_small += malloc_usable_size(small[i] = site_small());
    for (int i = 0; i < 2000; i++)
        t_medium += malloc_usable_size(medium[i] = site_medium());
    for (int i = 0; i < 16; i++)
        t_large += malloc_usable_size(large[i] = site_large());
    const char *path = argv[1];
    int rc = mallctl("prof.dump", NULL, NULL, &path, sizeof(path));
    if (rc) {
        fprintf(stderr, "prof.dump failed: %d\n", rc);
        return 1;
    }
    printf("truth site_small %zu\ntruth site_medium %zu\ntruth site_large %zu\n", t_small,
           t_medium, t_large);
    return 0;
}
