/*
 * fastpath.h: the common case of malloc and free, and nothing else.
 *
 * malloc: class = one table load (sizes up to 1 KiB index it directly);
 *         pop the thread cache's stack; charge the object's size to the
 *         sampling counter (sampler.h).
 * free:   class and owner tag = one pagemap lookup; push onto the stack if
 *         it has room and the object is not another thread's (tcache.h,
 *         remote frees).  Neither touches the object itself.
 *         thread.deallocated costs nothing here: it is derived (tcache.h).
 *
 * Each leaves for out-of-line slow functions (malloc.c):
 *   - malloc: to malloc_slow if the size is not small or the stack is empty
 *     (including the thread that has no cache yet: it points at
 *     tcache_empty, see tcache.h); to malloc_sample_due if the allocation
 *     is due for sampling (the counter would go negative; it is left
 *     uncharged for the slow path to account), which takes the sample's
 *     proxy from the stack without looking anything up again;
 *   - free: the stack is full, which also covers class 0 (large, NULL,
 *     invalid or foreign pointers: bins[0] is always full) and the thread
 *     with no cache; or the page's owner tag is another thread's.
 * No lock, no atomic read-modify-write, no division.  The instruction counts
 * are guarded by bench/fastpath.golden (make bench-callgrind-check).
 */
#ifndef SA_FASTPATH_H
#define SA_FASTPATH_H

#include "pagemap.h"
#include "sizeclass.h"
#include "tcache.h"

void *malloc_slow(size_t size);
/* malloc's stack of the class of `size` (small) holds an object, but the
 * allocation is due for the sampler (the counter, not charged, would go
 * negative): the sampler's accounting, then a sample whose proxy is the
 * stack's top object, or that object itself if it is not sampled (a
 * check-in) or cannot be recorded.  Tail-called, so that a sample's stack
 * starts at malloc's caller; the class is looked up again there, so that
 * malloc's common case keeps no register for it. */
void *malloc_sample_due(size_t size);
void free_slow(void *p, unsigned cls);
/* A sized free under opt.check (conf.h): its size (and alignment, 0 if
 * none) must be what the block at `p` was asked for, else it aborts naming
 * `fn`; then frees it.  Tail-called, so a sized free's common case keeps
 * no frame for it. */
void free_checking_size(void *p, size_t size, size_t align, const char *fn);
/* Not a fast path's: malloc.c's count of realloc(p, 0) calls, p not NULL
 * (stats.zero_reallocs). */
uint64_t malloc_zero_reallocs(void);
/* Not a fast path's either: set up the fills of opt.junk and opt.zero once
 * the options are read, before anything allocates (init.c).  Then
 * malloc_every_call_slow says whether every malloc and free must reach a
 * slow path (opt.check, or a fill): init.c arranges it. */
void malloc_boot_modes(void);
extern bool malloc_every_call_slow;

/* Pops an object of class `cls` if the stack has one, its objects are
 * aligned to `align` (a power of two: its size is a multiple of it; spans
 * start on a page, and alignments above a page have no class) and the
 * allocation is not due for sampling; NULL (and nothing changed)
 * otherwise.  The counter is charged only with the pop: tcache_empty is
 * never written.  The alignment test reads the size the sampler's charge
 * loads anyway (a look-up of the class table before the pop delayed it by
 * a dependent load); with `align` 1, as tcache_alloc_fast passes it, the
 * compiler drops it. */
SA_FAST_PATH void *tcache_alloc_fast_aligned(unsigned cls, size_t align)
{
    struct tcache *tc = tcache_get();
    struct tcache_bin *bin = &tc->bins[cls];
    void **top = bin->top;
    if (unlikely((uint16_t)(uintptr_t)top == bin->empty_bits))
        return NULL;
    if (unlikely(bin->size & (align - 1)))
        return NULL;
    int64_t left = tc->bytes_until_sample - (int64_t)bin->size;
    if (unlikely(left < 0))
        return NULL; /* due for sampling: the slow path samples it */
    tc->bytes_until_sample = left;
    bin->top = top - 1;
    void *obj = top[-1];
    if (obj == NULL) /* never: a stack holds objects (tcache_check) */
        __builtin_unreachable(); /* so operator new and calloc test no result */
    return obj;
}

/* tcache_alloc_fast_aligned of any object of the class. */
SA_FAST_PATH void *tcache_alloc_fast(unsigned cls) { return tcache_alloc_fast_aligned(cls, 1); }

/* The class of a small request, 0 for a larger one: one table load up to
 * 1 KiB. */
SA_FAST_PATH unsigned small_class_of(size_t size)
{
    if (likely(size <= SA_BYTE_LOOKUP_MAX))
        return sa_class_by_byte[size];
    if (likely(size <= SA_MAX_SMALL))
        return sizeclass_of_medium(size);
    return 0;
}

/* fast_malloc without its ways out: NULL (nothing changed) where
 * fast_malloc would call malloc_slow or malloc_sample_due.  For callers
 * that do more than return their result (operator new), so that their
 * common case makes no call and saves no register. */
SA_FAST_PATH void *fast_malloc_cached(size_t size)
{
    return tcache_alloc_fast(small_class_of(size)); /* class 0's stack is always empty */
}

/* Where fast_malloc would have gone when fast_malloc_cached gave NULL: the
 * stack of the size's class holds an object only if the allocation was due
 * for sampling.  For callers that are not tail calls from the entry point
 * (operator new checks the result): their samples' walks start inside
 * salloc, whose frames the stack leaves out anyway. */
SA_FAST_PATH void *malloc_not_cached(size_t size)
{
    if (!tcache_bin_empty(&tcache_get()->bins[small_class_of(size)]))
        return malloc_sample_due(size);
    return malloc_slow(size);
}

/* tcache_alloc_fast with its two ways out apart: an empty stack (or no
 * small class, or no cache) to malloc_slow, an allocation due for the
 * sampler to malloc_sample_due, which knows the class and finds the
 * sample's proxy on the stack: none of the slow path's lookups again. */
SA_FAST_PATH void *fast_malloc(size_t size)
{
    unsigned cls = small_class_of(size);
    struct tcache *tc = tcache_get();
    struct tcache_bin *bin = &tc->bins[cls];
    void **top = bin->top; /* class 0's stack is always empty */
    if (unlikely((uint16_t)(uintptr_t)top == bin->empty_bits))
        return malloc_slow(size);
    int64_t left = tc->bytes_until_sample - (int64_t)bin->size;
    if (unlikely(left < 0))
        return malloc_sample_due(size);
    tc->bytes_until_sample = left;
    bin->top = top - 1;
    return top[-1];
}

/* fast_free without its way out: true if `p` went onto its stack; else
 * false (nothing changed), and *slow_cls is the class free_slow takes.
 * For the sized deletes, whose way out checks the size under opt.check. */
SA_FAST_PATH bool free_cached(void *p, unsigned *slow_cls)
{
    unsigned owner, cls = pagemap_class_owner(p, &owner);
    struct tcache *tc = tcache_get();
    struct tcache_bin *bin = &tc->bins[cls];
    if (likely((owner & tc->foreign_owners) == 0)) {
        void **top = bin->top;
        if (likely((uint16_t)(uintptr_t)top != bin->full_bits)) {
            *top = p;
            bin->top = top + 1;
            return true;
        }
    }
    *slow_cls = cls;
    return false;
}

SA_FAST_PATH void fast_free(void *p)
{
    unsigned cls;
    if (unlikely(!free_cached(p, &cls)))
        free_slow(p, cls);
}

#endif
