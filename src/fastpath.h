/*
 * fastpath.h: the common case of malloc and free, and nothing else.
 *
 * malloc: class = one table load; pop the thread cache's list.
 * free:   class = one pagemap lookup; push onto the list unless it is full.
 *
 * Each has one branch out, to one out-of-line slow function (malloc.c):
 *   - malloc: the size is not small, or the list is empty (including the
 *     thread that has no cache yet: it points at tcache_empty, see tcache.h);
 *   - free: the list is at its limit, which also covers class 0 (large,
 *     NULL, invalid or foreign pointers: bins[0].max is always 0) and the
 *     thread with no cache.
 * No lock, no atomic read-modify-write, no division.
 */
#ifndef SA_FASTPATH_H
#define SA_FASTPATH_H

#include "pagemap.h"
#include "sizeclass.h"
#include "tcache.h"

void *malloc_slow(size_t size);
void free_slow(void *p, unsigned cls);

SA_FAST_PATH void *fast_malloc(size_t size)
{
    if (likely(size <= SA_MAX_SMALL)) {
        struct tcache_bin *bin = &tcache_get()->bins[sizeclass_of(size)];
        void *obj = bin->head;
        if (likely(obj != NULL))
            return tcache_bin_pop(bin, obj);
    }
    return malloc_slow(size);
}

SA_FAST_PATH void fast_free(void *p)
{
    unsigned cls = pagemap_class(p);
    struct tcache_bin *bin = &tcache_get()->bins[cls];
    if (likely(bin->count < bin->max)) {
        tcache_bin_push(bin, p);
        return;
    }
    free_slow(p, cls);
}

#endif
