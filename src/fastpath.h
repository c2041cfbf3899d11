/*
 * fastpath.h: the common case of malloc and free, and nothing else.
 *
 * malloc: class = one table load; pop the thread cache's list; subtract
 *         the object's size from the sampling counter (sampler.h).
 * free:   class = one pagemap lookup; push onto the list unless it is full;
 *         add the size to thread.deallocated.
 *
 * Each has one branch out, to one out-of-line slow function (malloc.c):
 *   - malloc: the size is not small, the list is empty (including the
 *     thread that has no cache yet: it points at tcache_empty, see tcache.h),
 *     or the allocation is due for sampling (the counter would go negative);
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

/* Pops an object of class `cls` if the list has one and the allocation is
 * not due for sampling; NULL (and no change) otherwise. */
SA_FAST_PATH void *tcache_alloc_fast(unsigned cls)
{
    struct tcache *tc = tcache_get();
    struct tcache_bin *bin = &tc->bins[cls];
    void *obj = bin->head;
    int64_t left = tc->bytes_until_sample - (int64_t)sizeclass_size(cls);
    if (likely(obj != NULL && left >= 0)) {
        tc->bytes_until_sample = left;
        return tcache_bin_pop(bin, obj);
    }
    return NULL;
}

SA_FAST_PATH void *fast_malloc(size_t size)
{
    if (likely(size <= SA_MAX_SMALL)) {
        void *obj = tcache_alloc_fast(sizeclass_of(size));
        if (likely(obj != NULL))
            return obj;
    }
    return malloc_slow(size);
}

SA_FAST_PATH void fast_free(void *p)
{
    unsigned cls = pagemap_class(p);
    struct tcache *tc = tcache_get();
    struct tcache_bin *bin = &tc->bins[cls];
    if (likely(bin->count < bin->max)) {
        tc->bytes_freed += sizeclass_size(cls);
        tcache_bin_push(bin, p);
        return;
    }
    free_slow(p, cls);
}

#endif
