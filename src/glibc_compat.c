/*
 * glibc_compat.c: the rest of glibc's allocator interface, <malloc.h>'s
 * mallinfo2(), mallinfo(), malloc_stats(), malloc_info() and mallopt(),
 * answered by salloc.
 *
 * Why salloc defines them at all:
 *   - preloaded, a program that asks glibc's own (a server logging its heap
 *     with mallinfo2) would read glibc's arena, which salloc leaves empty:
 *     zeros;
 *   - linked statically (lib/libsalloc.a), a program that calls any of them
 *     pulls in glibc's malloc.o, which defines malloc and free again: the
 *     link fails with "multiple definition of `malloc'".
 *
 * The figures are mallctl's (read through it, as malloc_stats_print reads
 * them, after a write of epoch), mapped onto glibc's fields as man/salloc.3
 * says.  mallopt changes nothing: salloc has none of glibc's tunables, and
 * says so by returning 0, as glibc does for a parameter it does not know.
 * Cold code, after the rest (the Makefile's COLD_SRCS).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>

#include "../include/salloc.h"
#include "util.h"

/* salloc's totals, in bytes, as of now. */
struct heap_totals {
    size_t allocated, active, dirty, cached, metadata, mapped, retained;
};

static size_t stat_of(const char *name)
{
    size_t v = 0, len = sizeof(v);
    return mallctl(name, &v, &len, NULL, 0) == 0 ? v : 0;
}

static void heap_totals(struct heap_totals *t)
{
    uint64_t epoch = 1;
    mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)); /* a fresh snapshot */
    t->allocated = stat_of("stats.allocated");
    t->active = stat_of("stats.active");
    t->dirty = stat_of("stats.arenas.0.pdirty") * stat_of("arenas.page");
    t->cached = stat_of("stats.arenas.0.tcache_bytes");
    t->metadata = stat_of("stats.metadata");
    t->mapped = stat_of("stats.mapped");
    t->retained = stat_of("stats.retained");
}

/* arena: the heap's pages from the kernel that may be resident (in use, or
 * free and not yet given back); uordblks: what the program holds;
 * fordblks: the rest of arena; fsmblks: of which free blocks in thread
 * caches; keepcost: what malloc_trim would give back now; hblkhd: salloc's
 * own metadata.  The counts of chunks (ordblks, smblks, hblks) and the
 * obsolete usmblks have no meaning here: 0. */
SA_EXPORT struct mallinfo2 mallinfo2(void)
{
    int saved = errno;
    struct heap_totals t;
    heap_totals(&t);
    struct mallinfo2 m = {0};
    m.arena = t.active + t.dirty;
    m.uordblks = t.allocated;
    m.fordblks = m.arena - t.allocated;
    m.fsmblks = t.cached;
    m.keepcost = t.dirty;
    m.hblkhd = t.metadata;
    errno = saved;
    return m;
}

/* int fields: glibc's mallinfo wraps past 2 GiB; these stop at INT_MAX. */
static int clamped(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

SA_EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo m = {0};
    m.arena = clamped(m2.arena);
    m.uordblks = clamped(m2.uordblks);
    m.fordblks = clamped(m2.fordblks);
    m.fsmblks = clamped(m2.fsmblks);
    m.keepcost = clamped(m2.keepcost);
    m.hblkhd = clamped(m2.hblkhd);
    return m;
}

/* glibc prints its arenas' totals to standard error: salloc's summary. */
SA_EXPORT void malloc_stats(void) { malloc_stats_print(NULL, NULL, "gab"); }

/* glibc's XML shape (a <malloc> element of <total> and <system> lines),
 * with salloc's totals; options must be 0, as in glibc. */
SA_EXPORT int malloc_info(int options, FILE *fp)
{
    if (options != 0) {
        errno = EINVAL;
        return -1;
    }
    struct heap_totals t;
    heap_totals(&t);
    int n = fprintf(fp,
                    "<malloc version=\"salloc-1\">\n"
                    "<total type=\"allocated\" size=\"%zu\"/>\n"
                    "<total type=\"active\" size=\"%zu\"/>\n"
                    "<total type=\"dirty\" size=\"%zu\"/>\n"
                    "<total type=\"cached\" size=\"%zu\"/>\n"
                    "<total type=\"metadata\" size=\"%zu\"/>\n"
                    "<system type=\"current\" size=\"%zu\"/>\n"
                    "<system type=\"retained\" size=\"%zu\"/>\n"
                    "</malloc>\n",
                    t.allocated, t.active, t.dirty, t.cached, t.metadata, t.mapped + t.dirty,
                    t.retained);
    return n < 0 ? -1 : 0;
}

SA_EXPORT int mallopt(int param, int value)
{
    (void)param, (void)value;
    return 0; /* not applied: none of glibc's parameters is salloc's */
}
