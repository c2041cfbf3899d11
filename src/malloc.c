/*
 * malloc.c: every public allocation function, built on fastpath.h, and the
 * two slow functions the fast paths call.
 *
 * Semantics follow glibc where programs depend on it, C and POSIX elsewhere
 * (man/salloc.3, "STANDARDS AND CHOICES", lists each choice):
 *   - malloc(0) returns a unique pointer (usable size 8), as glibc does.
 *   - realloc(p, 0) with p != NULL frees p and returns NULL, as glibc does;
 *     realloc(NULL, n) is malloc(n).
 *   - Failure: NULL with errno ENOMEM, also for sizes whose arithmetic
 *     overflows (calloc, reallocarray, pvalloc).
 *   - aligned_alloc and memalign reject an alignment that is not a power of
 *     two with EINVAL (glibc's memalign would round it up); posix_memalign
 *     returns EINVAL also for one smaller than sizeof(void *), and leaves
 *     errno alone.
 *   - free() of a pointer salloc did not return, when it can tell (not in
 *     any span, or not the start of a large allocation), prints
 *     "salloc: free(): invalid pointer 0x..." and aborts.
 *
 * Never takes a lock itself; everything below the fast path does.
 */
#include <errno.h>
#include <string.h>

#include "../include/salloc.h"
#include "central.h"
#include "fastpath.h"
#include "init.h"
#include "log.h"
#include "os.h"
#include "dump.h"
#include "pageheap.h"
#include "sampled_pages.h"
#include "sampler.h"

/* ---- slow paths ---- */

SA_SLOW_PATH SA_NORETURN static void invalid_pointer(const char *fn, const void *p)
{
    sa_fatal("%s(): invalid pointer %p", fn, p);
}

/* An object of class `cls`, sampling already decided: from this thread's
 * list (refilled if empty), or straight from the central list when the
 * thread must go uncached. */
static void *alloc_small(struct tcache *tc, unsigned cls)
{
    void *obj, *tail;
    if (tc) {
        struct tcache_bin *bin = &tc->bins[cls];
        return (obj = bin->head) ? tcache_bin_pop(bin, obj) : tcache_refill(tc, cls);
    }
    return central_alloc_batch(cls, 1, &obj, &tail) ? obj : NULL;
}

/* A large allocation of `pages` pages: its own span.  *zeroed says whether
 * its memory is known to be zero (fresh or purged pages). */
static void *alloc_large(size_t pages, size_t align, bool *zeroed)
{
    size_t align_pages = align > SA_PAGE_SIZE ? align >> SA_PAGE_SHIFT : 1;
    struct span *s = pageheap_alloc(pages, align_pages, 0, zeroed);
    return s ? (void *)s->start : NULL;
}

/* Gives a proxy object back.  Like its allocation (alloc_sampled), this is
 * not the user's doing: it must not show in thread.deallocated, so its push
 * is balanced in dealloc_adjust (tcache.h). */
static void release_proxy(void *proxy)
{
    unsigned cls = pagemap_class(proxy);
    struct tcache *tc = init_current_cache();
    if (!tc) {
        central_free_batch(cls, proxy, 1);
        return;
    }
    tc->dealloc_adjust -= sizeclass_size(cls);
    if (tc->bins[cls].room)
        tcache_bin_push(&tc->bins[cls], proxy);
    else
        tcache_overflow(tc, cls, proxy);
}

/* A sampled allocation: its own pages, plus a proxy object for a small one
 * (popped from the thread's list, but not for the user: balanced in
 * dealloc_adjust). */
static void *alloc_sampled(struct tcache *tc, unsigned cls, size_t usable, size_t align,
                           uint64_t rate, bool *zeroed)
{
    void *proxy = NULL;
    if (cls && !(proxy = alloc_small(tc, cls)))
        return NULL;
    if (proxy)
        tc->dealloc_adjust += sizeclass_size(cls);
    void *p = prof_alloc_sampled(tc, usable, align, rate, proxy, zeroed);
    if (!p && proxy)
        release_proxy(proxy);
    return p;
}

/* Every allocation the fast path did not serve: `size` bytes aligned to
 * `align` (a power of two; up to 16 every class will do).  Counts it for
 * the sampler, samples it if due, else allocates it normally.  *zeroed (if
 * not NULL) says whether the memory is known to be zero. */
static void *alloc_slow(size_t size, size_t align, bool *zeroed)
{
    unsigned cls = 0;
    if (size <= SA_MAX_SMALL)
        cls = align <= 16 ? sizeclass_of(size) : sizeclass_aligned(size, align);
    size_t pages = sa_pages_for(size ? size : 1);
    if (!cls && pages > PAGEHEAP_MAX_PAGES) {
        errno = ENOMEM;
        return NULL;
    }
    size_t usable = cls ? sizeclass_size(cls) : pages << SA_PAGE_SHIFT;
    struct tcache *tc = init_thread_cache();
    void *p = NULL;
    bool fresh = false;
    if (zeroed)
        *zeroed = false;
    if (tc) {
        uint64_t rate = sampler_account(tc, usable);
        if (unlikely(rate) && (p = alloc_sampled(tc, cls, usable, align, rate, &fresh))) {
            tc->dealloc_adjust -= usable; /* in thread.allocated, not from a list */
            if (zeroed)
                *zeroed = fresh;
            return p;
        }
    }
    p = cls ? alloc_small(tc, cls) : alloc_large(pages, align, zeroed);
    if (tc && (!cls || !p))
        tc->dealloc_adjust -= usable; /* in thread.allocated, not from a list */
    if (!p)
        errno = ENOMEM;
    prof_maybe_gdump();
    return p;
}

SA_SLOW_PATH void *malloc_slow(size_t size)
{
    return alloc_slow(size, 1, NULL);
}

/* Frees what is not a small object: a sampled allocation, a large one, or
 * a pointer salloc did not return. */
static void free_not_small(void *p, const char *fn)
{
    struct span *s = pageheap_sampled_span(p);
    size_t usable;
    if (s) {
        void *proxy;
        usable = prof_free_sampled(s, &proxy);
        if (proxy)
            release_proxy(proxy);
    } else if (!(usable = pageheap_free_large(p))) {
        invalid_pointer(fn, p);
    }
    struct tcache *tc = init_current_cache();
    if (tc)
        tc->dealloc_adjust += usable; /* a user free that no list saw */
}

SA_SLOW_PATH void free_slow(void *p, unsigned cls)
{
    if (cls == 0) {
        if (p)
            free_not_small(p, "free");
        return;
    }
    struct tcache *tc = init_thread_cache();
    if (!tc) {
        central_free_batch(cls, p, 1);
        return;
    }
    struct tcache_bin *bin = &tc->bins[cls];
    if (bin->room) /* a cache just created for this thread */
        tcache_bin_push(bin, p);
    else
        tcache_overflow(tc, cls, p);
}

/* ---- helpers shared by the entry points ---- */

/* `size` bytes aligned to `align` (a power of two). */
static void *alloc_aligned(size_t align, size_t size)
{
    if (align <= 16) /* every class from 16 up is 16-aligned; 8 is 8-aligned */
        return fast_malloc(align == 16 && size < 16 ? 16 : size);
    if (size <= SA_MAX_SMALL && align <= SA_PAGE_SIZE) {
        /* Usually the class of max(size, align) is a multiple of align
         * already (every class up to 128, and any power of two); only
         * otherwise scan on. */
        unsigned cls = sizeclass_of(size > align ? size : align);
        if (unlikely(sizeclass_size(cls) & (align - 1)))
            cls = sizeclass_aligned(size, align);
        void *p = tcache_alloc_fast(cls);
        if (likely(p != NULL))
            return p;
    }
    return alloc_slow(size, align, NULL);
}

/* Usable size of a live allocation; aborts naming `fn` on a foreign one. */
static size_t usable_size(const void *p, const char *fn)
{
    unsigned cls = pagemap_class(p);
    if (cls)
        return sizeclass_size(cls);
    struct span *s = pageheap_sampled_span(p);
    if (s)
        return prof_sampled_usable(s);
    if (!(s = pageheap_large_span(p)))
        invalid_pointer(fn, p);
    return s->npages << SA_PAGE_SHIFT;
}

/* Tries to resize the allocation at `p` (usable size `old`) to `n` bytes
 * without moving it. */
static bool resize_in_place(void *p, size_t old, size_t n)
{
    if (n <= SA_MAX_SMALL)
        /* Keep a small object unless a smaller class would save over half. */
        return old <= SA_MAX_SMALL && n <= old &&
               (n > old / 2 || sizeclass_size(sizeclass_of(n)) == old);
    struct span *s = old > SA_MAX_SMALL ? pageheap_large_span(p) : NULL;
    if (!s) /* small, or a sampled allocation: move it */
        return false;
    size_t pages = sa_pages_for(n);
    if (pages == s->npages)
        return true;
    if (pages < s->npages) {
        pageheap_shrink(s, pages);
        return true;
    }
    return pageheap_grow_in_place(s, pages);
}

/* ---- the public functions ---- */

SA_EXPORT void *malloc(size_t size)
{
    return fast_malloc(size);
}

SA_EXPORT void free(void *p)
{
    fast_free(p);
}

SA_EXPORT void *calloc(size_t nmemb, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    /* A cached object is never known to be zero; the slow path says. */
    bool zeroed = false;
    void *p = bytes <= SA_MAX_SMALL ? tcache_alloc_fast(sizeclass_of(bytes)) : NULL;
    if (!p)
        p = alloc_slow(bytes, 1, &zeroed);
    if (p && !zeroed)
        memset(p, 0, bytes);
    return p;
}

SA_EXPORT void *realloc(void *p, size_t n)
{
    if (!p)
        return fast_malloc(n);
    if (n == 0) {
        fast_free(p);
        return NULL;
    }
    size_t old = usable_size(p, "realloc");
    if (resize_in_place(p, old, n))
        return p;
    void *q = fast_malloc(n);
    if (!q)
        return NULL; /* errno is ENOMEM; p is untouched */
    memcpy(q, p, old < n ? old : n);
    fast_free(p);
    return q;
}

SA_EXPORT void *reallocarray(void *p, size_t nmemb, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, bytes);
}

SA_EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (!sa_is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(align, size);
}

SA_EXPORT void *memalign(size_t align, size_t size)
{
    return aligned_alloc(align, size);
}

SA_EXPORT int posix_memalign(void **memptr, size_t align, size_t size)
{
    if (!sa_is_pow2(align) || align < sizeof(void *))
        return EINVAL;
    int saved = errno;
    void *p = alloc_aligned(align, size);
    errno = saved;
    if (!p)
        return ENOMEM;
    *memptr = p;
    return 0;
}

SA_EXPORT void *valloc(size_t size)
{
    return alloc_aligned(os_page_size(), size);
}

SA_EXPORT void *pvalloc(size_t size)
{
    size_t page = os_page_size();
    if (size > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return alloc_aligned(page, sa_align_up(size ? size : 1, page));
}

SA_EXPORT size_t malloc_usable_size(void *p)
{
    return p ? usable_size(p, "malloc_usable_size") : 0;
}

SA_EXPORT void free_sized(void *p, size_t size)
{
    (void)size; /* the pagemap lookup is as cheap as checking the size */
    fast_free(p);
}

SA_EXPORT void free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    fast_free(p);
}

SA_EXPORT int malloc_trim(size_t pad)
{
    (void)pad; /* salloc has no top-of-heap to keep padding at */
    struct tcache *tc = init_current_cache();
    if (tc)
        tcache_flush_all(tc);
    central_release_empty();
    size_t purged = pageheap_purge();
    purged += sampled_pages_purge();
    return purged > 0;
}
