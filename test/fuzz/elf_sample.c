/*
 * elf_sample.c: a small program with a few allocation sites, for the dump
 * readers' fuzz target (fuzz_dump_readers.c).  Built beside the target as
 * build/fuzz/elf_sample; the target copies it into its temporary directory
 * under the base names the seed dumps' MAPPED_LIBRARIES lines use, so that
 * symbolize() finds a real ELF file, looks its symbols up and asks
 * "addr2line" (the target's stand-in) about them.
 *
 * Run under salloc it makes seed dumps (test/fuzz/make_corpus.py):
 *   SALLOC_CONF=prof_final:true,lg_prof_sample:12,prof_prefix:x \
 *       LD_PRELOAD=lib/libsalloc.so build/fuzz/elf_sample [N [PREFIX]]
 * With PREFIX it also writes PREFIX.frag.heap and PREFIX.peak.heap through
 * mallctl (prof.dump_fragmentation, prof.dump_peak), looked up at run time
 * so that the program runs without salloc too.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int mallctl_fn(const char *, void *, size_t *, void *, size_t);

static void *keep[4096];
static unsigned nkeep;

__attribute__((noinline)) static void *site_small(size_t n)
{
    char *p = malloc(n);
    if (p)
        memset(p, 1, n);
    return p;
}

__attribute__((noinline)) static void *site_large(size_t n) { return calloc(1, n); }

__attribute__((noinline)) static void leaf_inner(unsigned i)
{
    if (nkeep < sizeof(keep) / sizeof(keep[0]))
        keep[nkeep++] = i % 7 ? site_small(16 + i % 512) : site_large(65536 + i);
}

__attribute__((noinline)) static void outer(unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        leaf_inner(i);
}

static void dump(mallctl_fn *ctl, const char *what, const char *prefix, const char *kind)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s.%s.heap", prefix, kind);
    const char *p = path;
    if (ctl(what, NULL, NULL, &p, sizeof(p)))
        fprintf(stderr, "elf_sample: %s failed\n", what);
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 2000;
    outer(n);
    for (unsigned i = 0; i < nkeep; i += 3) { /* holes: fragmentation */
        free(keep[i]);
        keep[i] = NULL;
    }
    mallctl_fn *ctl = (mallctl_fn *)dlsym(RTLD_DEFAULT, "mallctl");
    if (argc > 2 && ctl) {
        dump(ctl, "prof.dump_fragmentation", argv[2], "frag");
        dump(ctl, "prof.dump_peak", argv[2], "peak");
    }
    size_t total = 0;
    for (unsigned i = 0; i < nkeep; i++)
        total += keep[i] != NULL;
    printf("%zu blocks live\n", total);
    return 0;
}
