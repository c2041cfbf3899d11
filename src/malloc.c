/*
 * malloc.c: every public allocation function, built on fastpath.h, and the
 * two slow functions the fast paths call.
 *
 * Semantics follow glibc where programs depend on it, C and POSIX elsewhere
 * (man/salloc.3, "STANDARDS AND CHOICES", lists each choice):
 *   - malloc(0) returns a unique pointer (usable size 8), as glibc does.
 *   - realloc(p, 0) with p != NULL frees p and returns NULL, as glibc does
 *     (opt.zero_realloc can make it allocate or abort instead);
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
#include <stdlib.h>
#include <string.h>

#include "../include/salloc.h"
#include "central.h"
#include "conf.h"
#include "fastpath.h"
#include "malloc_steps.h"
#include "init.h"
#include "log.h"
#include "os.h"
#include "dump.h"
#include "pageheap.h"
#include "prof.h"
#include "sampled_pages.h"
#include "sampler.h"
#include "unwind.h"

/* ---- filling (opt.junk, opt.zero) ---- */

/* What a new block's bytes are set to (0xa5 for junk:alloc, 0 for
 * zero:true, which wins as in jemalloc) and what a freed block's are
 * (0x5a for junk:free); NO_FILL for none.  Set by malloc_boot_modes before
 * anything allocates.  Filling needs every call on a slow path, as
 * opt.check does: malloc_every_call_slow. */
#define NO_FILL (-1)
#define JUNK_ALLOC 0xa5
#define JUNK_FREE 0x5a
static int alloc_fill = NO_FILL, free_fill = NO_FILL;
bool malloc_every_call_slow;

/* libc's memset and memcpy, under names the compiler does not take for
 * its builtins.  In cold functions (optimised for size, as GCC also makes
 * a function that only unlikely branches call) it inlined the builtins as
 * `rep stosb` and `rep movsb`, which libc's, tuned to the processor, use
 * only where they pay:
 *   - a 1 KiB malloc+free under junk:true took 57 ns (21 without the
 *     fills; jemalloc's, filling too, 22);
 *   - realloc's moves and calloc's zeroing in their slow paths were such
 *     loops, counted a byte an instruction by callgrind (perl building a
 *     300,000-key hash: 8.4 M of its 740 M instructions, 4.4 M through
 *     libc's memcpy). */
extern void *fill_bytes(void *to, int byte, size_t n) __asm__("memset");
extern void *copy_bytes(void *to, const void *from, size_t n) __asm__("memcpy");

void malloc_boot_modes(void)
{
    bool junk = !strcmp(opt_junk, "true");
    if (opt_zero)
        alloc_fill = 0;
    else if (junk || !strcmp(opt_junk, "alloc"))
        alloc_fill = JUNK_ALLOC;
    if (junk || !strcmp(opt_junk, "free"))
        free_fill = JUNK_FREE;
    malloc_every_call_slow = opt_check || alloc_fill != NO_FILL || free_fill != NO_FILL;
}

/* A new block of `usable` bytes filled as alloc_fill says, unless it is to
 * be zero and already is (`zero`: fresh or purged pages); whether it is
 * all zero now. */
static bool fill_new(void *p, size_t usable, bool zero)
{
    if (alloc_fill != 0 || !zero)
        fill_bytes(p, alloc_fill, usable);
    return alloc_fill == 0;
}

/* A freed small block of class `cls` filled with JUNK_FREE, but for the
 * word opt.check tags it with (check_small_free), which must stay. */
static void fill_freed_small(void *p, unsigned cls)
{
    size_t size = sizeclass_size(cls);
    bool tagged = opt_check && size >= 2 * sizeof(uintptr_t);
    uintptr_t tag = tagged ? ((uintptr_t *)p)[1] : 0;
    fill_bytes(p, JUNK_FREE, size);
    if (tagged)
        ((uintptr_t *)p)[1] = tag;
}

/* ---- slow paths ---- */

SA_SLOW_PATH SA_NORETURN static void invalid_pointer(const char *fn, const void *p)
{
    sa_message("%s(): invalid pointer %p", fn, p);
    prof_describe(p); /* inside or after a sampled block: which, and its stack */
    abort();
}

/* An object of class `cls`, sampling already decided: from this thread's
 * stack (refilled if empty), or straight from the central list when the
 * thread must go uncached. */
static void *alloc_small(struct tcache *tc, unsigned cls)
{
    void *obj;
    if (tc) {
        struct tcache_bin *bin = &tc->bins[cls];
        obj = tcache_bin_empty(bin) ? tcache_refill(tc, cls) : tcache_bin_pop(bin);
    } else if (!central_alloc_batch(cls, 1, (struct central_owner){NULL, 0, 0}, &obj)) {
        obj = NULL;
    }
    /* Under opt.check every allocation comes here: the block is out now,
     * so it must not look freed (check_small_free). */
    if (unlikely(opt_check) && obj && sizeclass_size(cls) >= 2 * sizeof(uintptr_t))
        ((uintptr_t *)obj)[1] = 0;
    return obj;
}

/* Puts a proxy object back on `tc`'s stack (or the central list when the
 * thread has no cache); returns its class.  Inlined: every sampled free
 * comes here, and as a call (malloc.c is cold code) it cost 9 instructions
 * a sample. */
static inline __attribute__((always_inline)) unsigned put_proxy(struct tcache *tc, void *proxy)
{
    unsigned cls = pagemap_class_of(proxy);
    if (tc)
        tcache_put(tc, cls, proxy);
    else
        central_free_one(cls, proxy);
    return cls;
}

/* Gives back a proxy that served no sample.  Like its allocation
 * (alloc_sampled), this is not the user's doing: it must not show in
 * thread.deallocated, so its push is balanced in dealloc_adjust (tcache.h). */
static void release_proxy(void *proxy)
{
    struct tcache *tc = init_current_cache();
    unsigned cls = put_proxy(tc, proxy);
    if (tc)
        tc->dealloc_adjust -= sizeclass_size(cls);
}

/* A sampled allocation on its own pages (small, or guarded), plus a proxy
 * object for a small one (popped from the thread's stack, but not for the
 * user: balanced in dealloc_adjust). */
static void *alloc_sampled(struct tcache *tc, unsigned cls, size_t usable, size_t align,
                           uint64_t rate, bool guarded, bool *zeroed,
                           const struct unwind_from *from)
{
    void *proxy = NULL;
    if (cls && !(proxy = alloc_small(tc, cls)))
        return NULL;
    if (proxy)
        tc->dealloc_adjust += sizeclass_size(cls);
    void *p = prof_alloc_sampled(tc, usable, align, rate, proxy, guarded, zeroed, from);
    if (!p && proxy)
        release_proxy(proxy);
    return p;
}

/* What a request for `size` bytes aligned to `align` (a power of two; up
 * to 16 every class will do) gets: a class, or pages of a large span. */
struct request {
    unsigned cls; /* 0: large */
    size_t pages; /* large: the span's length */
    size_t usable;
};

/* False (ENOMEM) when no span could hold it. */
static bool request_for(size_t size, size_t align, struct request *r)
{
    r->cls = 0;
    if (size <= SA_MAX_SMALL)
        r->cls = align <= 16 ? sizeclass_of(size) : sizeclass_aligned(size, align);
    r->pages = sa_pages_for(size ? size : 1);
    if (!r->cls && r->pages > PAGEHEAP_MAX_PAGES)
        return false;
    r->usable = r->cls ? sizeclass_size(r->cls) : r->pages << SA_PAGE_SHIFT;
    return true;
}

/* A large allocation: a span of its own, which is all a sampled one needs
 * too (prof_sample_span; one that cannot be recorded stays unsampled).
 * *zeroed says whether its memory is known to be zero (fresh or purged
 * pages). */
static void *alloc_large(struct tcache *tc, const struct request *r, size_t align,
                         uint64_t rate, bool *zeroed, const struct unwind_from *from)
{
    size_t align_pages = align > SA_PAGE_SIZE ? align >> SA_PAGE_SHIFT : 1;
    struct span *s = pageheap_alloc(r->pages, align_pages, 0, zeroed);
    if (!s)
        return NULL;
    if (unlikely(rate))
        prof_sample_span(tc, s, r->usable, rate, from);
    return (void *)s->start;
}

/* Allocates what `r` describes; the sampler has decided (`rate`, 0: not
 * sampled; if sampled, its stack is walked from `from`) and counted it in
 * thread.allocated.  *zeroed (if not NULL) says whether the memory is
 * known to be zero. */
static void *alloc_decided(struct tcache *tc, const struct request *r, size_t align,
                           uint64_t rate, bool *zeroed, const struct unwind_from *from)
{
    void *p = NULL;
    bool fresh = false;
    /* A sampled one is placed on pages of its own if it is small or
     * guarded (a large one is on its own pages anyway, in the heap). */
    bool guarded = unlikely(rate) && prof_should_guard(tc) && align <= SA_PAGE_SIZE;
    if (unlikely(rate) && (r->cls || guarded) &&
        (p = alloc_sampled(tc, r->cls, r->usable, align, rate, guarded, &fresh, from))) {
        tc->dealloc_adjust -= r->usable; /* in thread.allocated, not from a stack */
    } else {
        fresh = false;
        p = r->cls ? alloc_small(tc, r->cls) : alloc_large(tc, r, align, rate, &fresh, from);
        if (unlikely(!p)) {
            /* Charged to the sampler (its draw stands), but nothing was
             * allocated: out of thread.allocated again. */
            if (tc)
                tc->prof.alloc_base -= r->usable;
            errno = ENOMEM;
        } else if (tc && !r->cls) {
            tc->dealloc_adjust -= r->usable; /* in thread.allocated, not from a stack */
        }
        prof_maybe_gdump();
    }
    if (unlikely(alloc_fill != NO_FILL) && p)
        fresh = fill_new(p, r->usable, fresh);
    if (zeroed)
        *zeroed = p && fresh;
    return p;
}

/* Every allocation the fast path did not serve: counted for the sampler,
 * sampled if due, else allocated normally.  Out of line, so that a sample's
 * stack walk can start at this frame's caller (UNWIND_FROM_HERE). */
SA_SLOW_PATH static void *alloc_slow(size_t size, size_t align, bool *zeroed)
{
    struct request r;
    if (!request_for(size, align, &r)) {
        errno = ENOMEM;
        return NULL;
    }
    struct tcache *tc = init_thread_cache();
    uint64_t rate = tc ? sampler_account(tc, r.usable, r.usable) : 0;
    /* Read only if sampled (rate): not zeroed first, which in this cold
     * (size-optimised) function was a `rep stos`, 30-odd cycles on every
     * refill and sample. */
    struct unwind_from from;
    if (unlikely(rate))
        from = UNWIND_FROM_HERE();
    return alloc_decided(tc, &r, align, rate, zeroed, &from);
}

SA_SLOW_PATH void *malloc_slow(size_t size)
{
    return alloc_slow(size, 1, NULL);
}

/* See fastpath.h.  Under opt.check the counter is always due (a window of 0
 * bytes): alloc_slow then does what opt.check asks of every allocation.
 * With guarded samples possible, alloc_decided makes the guard's draw, once,
 * and places the sample.  Otherwise the proxy is the stack's top object
 * (the stack is not empty): its pop and the user's allocation, both of the
 * class's size, leave thread.deallocated's adjustment where it was. */
SA_SLOW_PATH void *malloc_sample_due(size_t size)
{
    if (unlikely(malloc_every_call_slow))
        return alloc_slow(size, 1, NULL);
    struct tcache *tc = tcache_get();
    struct tcache_bin *bin = &tc->bins[small_class_of(size)];
    uint64_t rate = sampler_account(tc, bin->size, bin->size);
    if (likely(rate == 0)) /* a check-in, or a chunk of a long interval */
        return tcache_bin_pop(bin);
    struct unwind_from from = UNWIND_FROM_HERE();
    if (unlikely(opt_prof_guard || opt_lg_prof_guard_every >= 0)) {
        struct request r;
        request_for(size, 1, &r); /* a small size: cannot fail */
        return alloc_decided(tc, &r, 1, rate, NULL, &from);
    }
    void *proxy = tcache_bin_pop(bin);
    bool zeroed;
    void *p = prof_alloc_sampled(tc, bin->size, 1, rate, proxy, false, &zeroed, &from);
    return p ? p : proxy; /* not recorded: served unsampled, by the proxy */
}

/* Frees what is not a small object: a sampled allocation, a large one, or
 * a pointer salloc did not return. */
static void free_not_small(void *p, const char *fn)
{
    struct tcache *tc = init_current_cache();
    struct span *s = pageheap_sampled_span(p);
    size_t usable;
    if (s) {
        if (unlikely(free_fill != NO_FILL))
            fill_bytes(p, free_fill, prof_sampled_usable(s));
        void *proxy;
        usable = prof_free_sampled(s, &proxy);
        if (proxy) {
            /* The proxy is of the block's own class (alloc_sampled,
             * malloc_sample_due): its push counts this free in
             * thread.deallocated as a stack push counts any free, with no
             * adjustment either way. */
            put_proxy(tc, proxy);
            return;
        }
    } else {
        struct span *large = pageheap_large_span(p);
        if (unlikely(free_fill != NO_FILL) && large)
            fill_bytes(p, free_fill, large->npages << SA_PAGE_SHIFT);
        if (large && large->sample)
            prof_unsample_span(large);
        if (!(usable = pageheap_free_large(p)))
            invalid_pointer(fn, p);
    }
    if (tc)
        tc->dealloc_adjust += usable; /* a user free that no stack saw */
}

/* Usable size of a live allocation; aborts naming `fn` on a foreign one. */
static size_t usable_size(const void *p, const char *fn)
{
    unsigned cls = pagemap_class_of(p);
    if (cls)
        return sizeclass_size(cls);
    struct span *s = pageheap_sampled_span(p);
    if (s)
        return prof_sampled_usable(s);
    if (!(s = pageheap_large_span(p)))
        invalid_pointer(fn, p);
    return s->npages << SA_PAGE_SHIFT;
}

/* A small object keeps its place in realloc when the new size still fits
 * and would not fit a class of half its size or less. */
static bool keeps_small(size_t old, size_t n)
{
    return n <= old && (n > old / 2 || sizeclass_size(sizeclass_of(n)) == old);
}

/* The size an allocation aligned to `align` up to 16 asks its class for:
 * every class from 16 bytes up is 16-aligned, the 8-byte one only
 * 8-aligned.  free_checking_size works the block out again with it. */
static size_t size_for_align(size_t align, size_t size)
{
    return align == 16 && size < 16 ? 16 : size;
}

/* The request of an allocation of `size` bytes aligned to `align` (a power
 * of two; 1 for none), as the aligned allocators make it: what a sized
 * free checks against, and what mallocx and nallocx ask. */
static bool request_aligned(size_t size, size_t align, struct request *r)
{
    return request_for(size_for_align(align, size), align > 16 ? align : 1, r);
}

/* ---- opt.check ---- */

/* What a checked free writes into a small block's second word (the first
 * is its link when it travels in a chain of remote frees): its address,
 * scrambled.  Under opt.check every allocation clears it (alloc_small), so
 * a block that carries it is free: freed twice, barring a program that
 * stored this very value there, which the scan below rules out. */
#define FREED_TAG ((uintptr_t)0x5a11acfee1f5eed5ull)

/* The small block `p` of class `cls`, handed to free or realloc: it must
 * be the start of a block carved from its span, and must not be free (the
 * tag; for 8-byte blocks, which have no room for it, a scan of its span and
 * this thread's stack).  Returns the tag's place, NULL for 8-byte blocks. */
static uintptr_t *check_small_live(void *p, unsigned cls, const char *fn, const char *what)
{
    size_t size = sizeclass_size(cls);
    const struct span *s = pagemap_span(p);
    uintptr_t off = (uintptr_t)p - s->start;
    if (off % size)
        sa_fatal("%s(): invalid pointer %p: %zu bytes into the %zu-byte block at %p", fn, p,
                 (size_t)(off % size), size, (void *)((uintptr_t)p - off % size));
    if (off / size >= __atomic_load_n(&s->carved, __ATOMIC_RELAXED))
        sa_fatal("%s(): invalid pointer %p: a %zu-byte block never allocated", fn, p, size);
    uintptr_t *tag = size >= 2 * sizeof(uintptr_t) ? (uintptr_t *)p + 1 : NULL;
    if (tag && *tag != (FREED_TAG ^ (uintptr_t)p))
        return tag;
    const void *start;
    bool is_free = central_object_state(cls, p, &start) == OBJECT_FREE;
    struct tcache *tc = init_current_cache();
    if (tc && !is_free) {
        const struct tcache_bin *bin = &tc->bins[cls];
        for (void **slot = tcache_bin_base(bin); slot < bin->top; slot++)
            is_free |= *slot == p;
    }
    if (is_free)
        sa_fatal("%s(): %s of the %zu-byte block at %p", fn, what, size, p);
    return tag;
}

/* A free of the small block `p`: checked, then tagged free.  A few loads
 * and a store per free. */
static void check_small_free(void *p, unsigned cls, const char *fn)
{
    uintptr_t *tag = check_small_live(p, cls, fn, "double free");
    if (tag)
        *tag = FREED_TAG ^ (uintptr_t)p;
}

SA_SLOW_PATH void free_checking_size(void *p, size_t size, size_t align, const char *fn)
{
    if (p) {
        size_t usable = usable_size(p, fn);
        struct request r;
        /* What the request got, or a size its block kept its place for in
         * a realloc (keeps_small). */
        bool ok = request_aligned(size, align, &r) &&
                  (r.usable == usable || (usable <= SA_MAX_SMALL && keeps_small(usable, size)));
        if (!ok)
            sa_fatal("%s(): size %zu does not match the %zu-byte block at %p", fn, size, usable,
                     p);
    }
    fast_free(p);
}

/* free_slow past free(NULL): a function of its own, so that free(NULL)
 * returns before it saves a register. */
SA_SLOW_PATH static void free_slow_not_null(void *p, unsigned cls)
{
    if (cls == 0) {
        /* Under opt.check, junk or zero, every free comes here
         * (pagemap_class() is 0). */
        if (!malloc_every_call_slow || !(cls = pagemap_class_of(p))) {
            free_not_small(p, "free");
            return;
        }
        if (opt_check)
            check_small_free(p, cls, "free");
        if (free_fill != NO_FILL)
            fill_freed_small(p, cls);
    }
    struct tcache *tc = init_thread_cache();
    if (!tc) {
        central_free_one(cls, p);
        return;
    }
    tcache_put(tc, cls, p);
}

/* free(NULL) ends here, as programs' clean-up code and C++'s delete of a
 * null pointer make it often: 29 instructions in all, where the prologue
 * and epilogue of the whole slow path made it 43 (callgrind;
 * bench/fastpath.golden pins it). */
SA_SLOW_PATH void free_slow(void *p, unsigned cls)
{
    if (cls == 0 && !p)
        return;
    free_slow_not_null(p, cls);
}

/* ---- helpers shared by the entry points ---- */

/* A cached object of `size` bytes aligned to `align` (a power of two
 * above 16), from the class of the larger of the two if its objects are
 * so aligned, as they are in today's table whenever the size is a
 * multiple of `align` (aligned_alloc's sizes; checked for every
 * alignment up to a page); NULL if they are not, if no class fits (too
 * large, or aligned beyond a page), if the thread's stack has none, or if
 * the allocation is due for sampling. */
static inline void *alloc_aligned_cached(size_t align, size_t size)
{
    if (unlikely(size > SA_MAX_SMALL || align > SA_PAGE_SIZE))
        return NULL;
    size_t fit = size > align ? size : align;
    /* Each table's look-up written out, not sizeclass_of(fit): gcc then
     * picks the table and index with one short branch, where with
     * sizeclass_of it laid the medium look-up out of line, jumping to it
     * and back, and 4 KiB blocks aligned to 4 KiB took 1.16-1.27 times
     * as long (bench/ab.py, 15 and 21 rounds). */
    if (fit <= SA_BYTE_LOOKUP_MAX)
        return tcache_alloc_fast_aligned(sa_class_by_byte[fit], align);
    return tcache_alloc_fast_aligned(sizeclass_of_medium(fit), align);
}

/* alloc_aligned past its cached case: the first class whose objects are
 * aligned (the size's own may not be: posix_memalign(64, 80)), else the
 * slow path. */
SA_SLOW_PATH static void *alloc_aligned_uncached(size_t align, size_t size)
{
    unsigned cls = sizeclass_aligned(size, align);
    void *p = cls ? tcache_alloc_fast(cls) : NULL;
    return p ? p : alloc_slow(size, align, NULL);
}

/* `size` bytes aligned to `align` (a power of two). */
static void *alloc_aligned(size_t align, size_t size)
{
    if (align <= 16)
        return fast_malloc(size_for_align(align, size));
    void *p = alloc_aligned_cached(align, size);
    return likely(p != NULL) ? p : alloc_aligned_uncached(align, size);
}


/* Resizes live large span `s` to `pages` pages without moving it. */
static bool resize_large(struct span *s, size_t pages)
{
    if (pages == s->npages)
        return true;
    if (pages < s->npages)
        return pageheap_shrink(s, pages);
    return pageheap_grow_in_place(s, pages);
}

/* Counts `bytes` in thread.allocated without charging the sampler: what a
 * realloc that kept its block "allocated" beyond the bytes it charged
 * (thread.allocated counts a realloc's result as allocated and the old block
 * as freed, in place or not, as jemalloc does; thread.deallocated follows by
 * itself, tcache.h). */
static inline void count_unsampled(struct tcache *tc, size_t bytes)
{
    tc->prof.alloc_base += bytes;
}

/* A block that realloc grows to this size or more gets a span of its own
 * (page-granular, as a large block) instead of a size class: the next
 * growth can then take the free pages after it instead of moving, as
 * jemalloc's extents do from 16 KiB.  Copying 32 KiB costs more than the
 * page heap's lock. */
#define REALLOC_SPAN_MIN ((size_t)32 << 10)

/* realloc's request for a block grown to `size` bytes (no more than a
 * request_for() of at least that size has already allowed: cannot fail). */
static void growth_request(size_t size, struct request *r)
{
    request_for(size, 1, r);
    if (r->cls && size >= REALLOC_SPAN_MIN) {
        r->cls = 0;
        r->usable = r->pages << SA_PAGE_SHIFT;
    }
}

/* The size a block of `old` bytes that must move to grow to `n` asks for:
 * a quarter more at least, so a buffer grown by small appends moves (and
 * copies) about half as often as the classes (an eighth apart) would have
 * it.  Not for a block past the small sizes: it grows in place when it
 * can, and must not fail for the extra. */
static size_t moving_size(size_t old, size_t n)
{
    return n - old < old / 4 && old + old / 4 <= SA_MAX_SMALL ? old + old / 4 : n;
}

/* realloc for the sampler.  Each byte allocated is due with probability 1/R
 * (sampler.h), and a block kept where it is allocates only what it gains:
 *   - a block that keeps its usable size (a small one kept in its class,
 *     sampled or not; a large one with the same pages) charges nothing and
 *     keeps its sampled-or-not state, which was decided with the
 *     probability of that very size;
 *   - a large block grown in place charges its growth G: unsampled, it is
 *     sampled where it stands if due, so it is sampled with probability
 *     1 - e^(-U1/R) e^(-G/R) = p(U2), as a fresh block its size; sampled
 *     already, its record is resized to U2 (weight U2/p(U2));
 *   - a large block shrunk in place is decided afresh at its new size;
 *   - everything else moves: free(p) plus malloc(n), charged in full.
 * So every live block is sampled with the probability of its usable size
 * now, and a buffer grown by appends is not decided again at each append
 * (charging the whole block each time made an append loop sample, and move
 * to fresh pages, once every R / size appends). */
/* Large span `large`, of `old` usable bytes, resized in place to `pages`
 * pages and counted as realloc_slow says; false if the page heap could
 * not (a neighbour is in use).  A sample's walk starts at `from`. */
static bool resize_large_counted(struct tcache *tc, struct span *large, size_t old,
                                 size_t pages, const struct unwind_from *from)
{
    size_t usable = pages << SA_PAGE_SHIFT;
    if (unlikely(free_fill != NO_FILL) && usable < old) /* the tail, freed */
        fill_bytes((char *)large->start + usable, free_fill, old - usable);
    if (!resize_large(large, pages))
        return false;
    if (unlikely(alloc_fill != NO_FILL) && usable > old) /* the growth, new */
        fill_new((char *)large->start + old, usable - old, false);
    size_t charge = usable >= old ? usable - old : usable;
    uint64_t rate = tc && charge ? sampler_account(tc, charge, usable >= old ? charge : 0) : 0;
    if (usable < old && large->sample)
        prof_unsample_span(large); /* decided afresh below */
    if (usable > old && large->sample)
        prof_resize_span_sample(large, usable);
    else if (rate)
        prof_sample_span(tc, large, usable, rate, from);
    if (tc) {
        count_unsampled(tc, usable - charge);
        tc->dealloc_adjust += old - usable; /* no stack saw either block */
    }
    return true;
}

/* realloc_slow's in-place cases: block `p`, of usable size `old` and class
 * `cls` (0: not a small object), kept for `n` bytes, whose request (grown,
 * if n > old) is `r`, and counted as a realloc.  Its usable size now, or
 * 0 if it must move. */
static size_t realloc_in_place(struct tcache *tc, void *p, size_t old, unsigned cls, size_t n,
                               const struct request *r, const struct unwind_from *from)
{
    /* Small (ordinary or sampled), or large with a small usable size (an
     * aligned block): the usable size stays. */
    /* Or a guarded large sample (its own mapping, no large span) that
     * needs as many pages: it once moved, and was decided afresh, at every
     * realloc, to the same size too. */
    if (old <= SA_MAX_SMALL ? keeps_small(old, n)
                            : n <= old && sa_pages_for(n) == sa_pages_for(old) && !cls &&
                                  pageheap_sampled_span(p)) {
        if (tc)
            count_unsampled(tc, old);
        return old;
    }
    struct span *large = cls ? NULL : pageheap_large_span(p);
    if (large && !r->cls && resize_large_counted(tc, large, old, r->pages, from))
        return r->usable;
    return 0;
}

SA_SLOW_PATH static void *realloc_slow(void *p, size_t n, unsigned cls)
{
    size_t old = usable_size(p, "realloc");
    cls = pagemap_class_of(p); /* the fast path's lookup is 0 under opt.check */
    if (unlikely(opt_check) && cls) /* kept in place, it would meet no free's check */
        check_small_live(p, cls, "realloc", "use after free");
    struct request r;
    if (!request_for(n, 1, &r)) {
        errno = ENOMEM;
        return NULL;
    }
    struct tcache *tc = init_thread_cache();
    const struct unwind_from from = UNWIND_FROM_HERE(); /* if a sample is taken */
    if (n > old)
        growth_request(n, &r);
    if (realloc_in_place(tc, p, old, cls, n, &r, &from))
        return p;
    if (n > old) {
        size_t want = moving_size(old, n);
        if (want > n)
            growth_request(want, &r);
    }
    uint64_t rate = tc ? sampler_account(tc, r.usable, r.usable) : 0;
    void *q = alloc_decided(tc, &r, 1, rate, NULL, &from);
    if (!q)
        return NULL; /* errno is ENOMEM; p is untouched */
    copy_bytes(q, p, old < n ? old : n);
    fast_free(p);
    return q;
}

/* ---- the public functions ---- */

SA_EXPORT_FAST void *malloc(size_t size)
{
    return fast_malloc(size);
}

/* This file's malloc, by an address no other object's can take over
 * (named through the macro: a fuzzing build renames malloc). */
#define SA_NAME_OF(f) SA_NAME_OF_(f)
#define SA_NAME_OF_(f) #f
#if defined(__clang__)
#define SA_COPY_MALLOC_ATTRIBUTES
#else
#define SA_COPY_MALLOC_ATTRIBUTES copy(malloc), /* else GCC warns that the alias lacks them */
#endif
extern __typeof(malloc) sa_own_malloc
    __attribute__((alias(SA_NAME_OF(malloc)), SA_COPY_MALLOC_ATTRIBUTES visibility("hidden")));

/* The symbol `malloc` as the loader resolved it for this object: the
 * process's malloc (an asm name, which no build's renaming touches). */
extern void *sa_process_malloc(size_t) __asm__("malloc");

bool sa_link_map_may_unload(const void *link_map)
{
    /* A load from the GOT: malloc may be interposed. */
    void *(*volatile process_malloc)(size_t) = sa_process_malloc;
    return process_malloc != sa_own_malloc || pagemap_span(link_map) != NULL;
}

SA_EXPORT_FAST void free(void *p)
{
    fast_free(p);
}

/* calloc past its cached case, in a function of its own so that the
 * cached case saves no register: memory the slow path may know is zero. */
__attribute__((noinline)) static void *calloc_slow(size_t bytes)
{
    bool zeroed = false;
    void *p = alloc_slow(bytes, 1, &zeroed);
    if (p && !zeroed)
        fill_bytes(p, 0, bytes);
    return p;
}

SA_EXPORT_FAST void *calloc(size_t nmemb, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = bytes <= SA_MAX_SMALL ? tcache_alloc_fast(sizeclass_of(bytes)) : NULL;
    if (unlikely(p == NULL))
        return calloc_slow(bytes);
    return memset(p, 0, bytes); /* a cached object is never known to be zero */
}

/* realloc_slow's move of a small block grown to another class, for the
 * common case: the new class's stack has an object and the sampler is not
 * due (tcache_alloc_fast, which charges it as malloc would).  The same
 * size as realloc_slow asks for (moving_size; below REALLOC_SPAN_MIN,
 * else a span of its own, left to it); NULL if this is
 * not that case.  realloc_slow's set-up (its lookups, the sampler's
 * accounting call, the stack's starting frame) cost 13 ns a move, more
 * than the move itself; a buffer grown by appends moves every few dozen
 * appends. */
static inline void *move_small_cached(void *p, size_t old, size_t n)
{
    if (n <= old)
        return NULL;
    size_t want = moving_size(old, n);
    if (want >= REALLOC_SPAN_MIN)
        return NULL;
    void *q = tcache_alloc_fast(sizeclass_of(want));
    if (q) {
        memcpy(q, p, old);
        fast_free(p);
    }
    return q;
}

/* Whether large span `s` keeps its place for `n` bytes, as realloc_slow
 * would keep it: no larger than a small block, it keeps as one would (a
 * buffer grown a quarter past 28 KiB into a 40 KiB span then takes 80
 * appends to need 5 pages); else while its pages are still the right
 * number.  (Its pages alone kept a one-page aligned block for any size up
 * to a page, where realloc_slow moves one of half a page or less to its
 * class, and a checked free_sized of that size then aborted.) */
static inline bool large_keeps(const struct span *s, size_t n)
{
    size_t old = s->npages << SA_PAGE_SHIFT;
    return old <= SA_MAX_SMALL ? keeps_small(old, n) : sa_pages_for(n) == s->npages;
}

/* realloc's move of a small block to another class (move_small_cached),
 * else realloc_slow (a tail call, so that a sample's stack still starts at
 * realloc's caller).  Out of line, so that realloc's in-place cases save
 * no registers for these calls. */
__attribute__((noinline)) static void *realloc_moving(void *p, size_t n, unsigned cls)
{
    if (cls) {
        void *q = move_small_cached(p, sizeclass_size(cls), n);
        if (q)
            return q;
    }
    return realloc_slow(p, n, cls);
}

/* realloc(p, 0) with p not NULL: what opt.zero_realloc says, counted
 * (stats.zero_reallocs: C23 leaves the call undefined, so a program may
 * want to know it makes one). */
static uint64_t zero_reallocs; /* atomic */

uint64_t malloc_zero_reallocs(void) { return __atomic_load_n(&zero_reallocs, __ATOMIC_RELAXED); }

SA_SLOW_PATH static void *realloc_to_zero(void *p)
{
    __atomic_fetch_add(&zero_reallocs, 1, __ATOMIC_RELAXED);
    if (opt_zero_realloc[0] == 'f') { /* free */
        fast_free(p);
        return NULL;
    }
    if (opt_zero_realloc[1] == 'b') /* abort */
        sa_fatal("realloc(%p, 0): a zero size, refused under zero_realloc:abort", p);
    void *q = fast_malloc(0); /* alloc: a new smallest block; p stays if there is none */
    if (q)
        fast_free(p);
    return q;
}

SA_EXPORT_FAST void *realloc(void *p, size_t n)
{
    if (!p)
        return fast_malloc(n);
    if (n == 0)
        return realloc_to_zero(p);
    /* The common cases, which charge the sampler nothing (see
     * realloc_slow): a small block that keeps its class; a large one that
     * keeps its place, as realloc_slow would keep it but without its
     * set-up (a buffer grown by appends past REALLOC_SPAN_MIN comes here
     * on most appends).  A thread with no cache yet (tcache_empty, never
     * written) takes the slow path. */
    unsigned cls = pagemap_class(p);
    struct tcache *tc = tcache_get();
    if (likely(tc != &tcache_empty)) {
        if (cls) {
            size_t old = sizeclass_size(cls);
            if (likely(keeps_small(old, n))) {
                count_unsampled(tc, old);
                return p;
            }
        } else {
            struct span *s = pageheap_large_span(p);
            if (s && large_keeps(s, n)) {
                count_unsampled(tc, s->npages << SA_PAGE_SHIFT);
                return p;
            }
        }
    }
    return realloc_moving(p, n, cls);
}

SA_EXPORT_FAST void *reallocarray(void *p, size_t nmemb, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, bytes);
}

SA_EXPORT_FAST void *aligned_alloc(size_t align, size_t size)
{
    if (!sa_is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(align, size);
}

SA_EXPORT_FAST void *memalign(size_t align, size_t size)
{
    return aligned_alloc(align, size);
}

/* posix_memalign past its cached case, in a function of its own so that
 * the cached case saves no register (memptr would live across the call).
 * errno must come out as it went in; only a slow path can touch it. */
__attribute__((noinline)) static int posix_memalign_slow(void **memptr, size_t align, size_t size)
{
    int saved = errno;
    void *p = alloc_aligned(align, size);
    errno = saved;
    if (!p)
        return ENOMEM;
    *memptr = p;
    return 0;
}

SA_EXPORT_FAST int posix_memalign(void **memptr, size_t align, size_t size)
{
    if (!sa_is_pow2(align) || align < sizeof(void *))
        return EINVAL;
    void *p = align > 16 ? alloc_aligned_cached(align, size) : NULL;
    if (unlikely(p == NULL))
        return posix_memalign_slow(memptr, align, size);
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

SA_EXPORT_FAST size_t malloc_usable_size(void *p)
{
    return p ? usable_size(p, "malloc_usable_size") : 0;
}

SA_EXPORT_FAST void free_sized(void *p, size_t size)
{
    /* The pagemap lookup is as cheap as using the size; opt.check checks it. */
    if (unlikely(opt_check))
        free_checking_size(p, size, 0, "free_sized");
    else
        fast_free(p);
}

SA_EXPORT_FAST void free_aligned_sized(void *p, size_t align, size_t size)
{
    if (unlikely(opt_check))
        free_checking_size(p, size, align, "free_aligned_sized");
    else
        fast_free(p);
}

SA_EXPORT int malloc_trim(size_t pad)
{
    (void)pad; /* salloc has no top-of-heap to keep padding at */
    struct tcache *tc = init_current_cache();
    if (tc)
        tcache_flush_all(tc);
    tcache_drain_all_inboxes();
    central_release_xfer();
    size_t purged = pageheap_purge();
    purged += prof_purge_spares(); /* given back purged: before the cache's purge */
    purged += sampled_pages_purge();
    return purged > 0;
}

/* ---- steps for the entry points elsewhere (malloc_steps.h) ---- */

void *malloc_step_alloc(size_t size, size_t align, bool zero)
{
    if (!zero)
        return alloc_aligned(align, size);
    struct request r;
    if (!request_aligned(size, align, &r)) {
        errno = ENOMEM;
        return NULL;
    }
    if (r.cls) { /* a cached object is never known to be zero */
        void *p = alloc_aligned(align, size);
        return p ? memset(p, 0, usable_size(p, "mallocx")) : NULL;
    }
    bool zeroed = false; /* fresh or purged pages are (calloc_slow) */
    void *p = alloc_slow(size_for_align(align, size), align > 16 ? align : 1, &zeroed);
    if (p && !zeroed)
        memset(p, 0, usable_size(p, "mallocx"));
    return p;
}

#if defined(__clang__)
#define SA_COPY_REALLOC_ATTRIBUTES
#else
#define SA_COPY_REALLOC_ATTRIBUTES copy(realloc),
#endif
extern __typeof(realloc) malloc_step_realloc
    __attribute__((alias(SA_NAME_OF(realloc)), SA_COPY_REALLOC_ATTRIBUTES visibility("hidden")));

size_t malloc_step_usable(const void *p, const char *fn) { return usable_size(p, fn); }

size_t malloc_step_request_usable(size_t size, size_t align)
{
    struct request r;
    return request_aligned(size, align, &r) ? r.usable : 0;
}

size_t malloc_step_resize(void *p, size_t n, const char *fn, const struct unwind_from *from)
{
    size_t old = usable_size(p, fn);
    unsigned cls = pagemap_class_of(p);
    if (unlikely(opt_check) && cls) /* as realloc_slow */
        check_small_live(p, cls, fn, "use after free");
    struct request r;
    if (!request_for(n, 1, &r))
        return 0;
    if (n > old)
        growth_request(n, &r);
    return realloc_in_place(init_thread_cache(), p, old, cls, n, &r, from);
}

size_t malloc_step_resize_large(void *p, size_t size, size_t extra,
                                const struct unwind_from *from)
{
    size_t old = usable_size(p, "xallocx");
    if (size == 0) /* jemalloc leaves it undefined: the least there is */
        size = 1;
    struct span *large = pagemap_class_of(p) ? NULL : pageheap_large_span(p);
    size_t most = PAGEHEAP_MAX_PAGES << SA_PAGE_SHIFT;
    if (!large || size > most)
        return old;
    size_t want = extra > most - size ? most : size + extra;
    struct tcache *tc = init_thread_cache();
    /* The most it may hold, else the least; neither if it has that already. */
    size_t tries[2] = {sa_pages_for(want), sa_pages_for(size)};
    for (unsigned i = 0; i < 2; i++) {
        if (tries[i] == large->npages)
            return old;
        if (resize_large_counted(tc, large, old, tries[i], from))
            return tries[i] << SA_PAGE_SHIFT;
    }
    return old;
}
