/*
 * pageheap.h: spans of pages.  Gets memory from the kernel in large aligned
 * chunks, hands out spans (small spans to the central lists, large spans to
 * malloc), splits and coalesces free spans, and gives free memory back to the
 * kernel: after a decay time, or at once on pageheap_purge().
 *
 * One lock (LOCK_RANK_PAGEHEAP) guards everything here and the pagemap's
 * writers.  Callers may hold a central list's lock; this layer calls only
 * pagemap, meta and os.  It never touches thread caches or objects.
 *
 * Free spans live in buckets by length (1..127 pages exactly, then one list of
 * longer spans searched best-fit), separately for dirty and clean spans, so
 * that reuse prefers memory that is already resident and a clean span can be
 * handed out as known-zero (calloc skips the memset).  Spans are merged only
 * with neighbours of the same kind, so the dirty byte count is exact.
 */
#ifndef SA_PAGEHEAP_H
#define SA_PAGEHEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h" /* SA_TEST_MUTABLE */
#include "pagemap.h"
#include "span.h"

/* The heap grows at least this much at once: one mmap and one pagemap
 * leaf check per 32 MiB, which untouched costs no resident memory at all.
 * (Tests tell the heap's mappings from others' by it.) */
#define PAGEHEAP_GROW_MIN ((size_t)32 << 20)

/* Largest span the heap will try to make: beyond this no request can be met
 * in a 47-bit address space, so refuse early instead of overflowing. */
#define PAGEHEAP_MAX_PAGES ((size_t)1 << (47 - SA_PAGE_SHIFT))

/* A span of `npages` pages whose start is aligned to `align_pages` pages (a
 * power of two), owned as a small span of class `cls`, or a large span when
 * cls is 0.  A small span has its pagemap class bytes set; its object fields
 * are zero.  *zeroed (if not NULL) says whether every byte is known to be
 * zero.  NULL with errno ENOMEM if the kernel has no memory for it. */
struct span *pageheap_alloc(size_t npages, size_t align_pages, unsigned cls, bool *zeroed);

/* Gives a span (small or large) back; it may merge with free neighbours. */
void pageheap_free(struct span *s);

/* Frees the large allocation that starts at `p` and returns its length in
 * bytes; returns 0, changing nothing, if `p` is not the start of a live
 * large span. */
size_t pageheap_free_large(void *p);

/* Whether `s` (a pagemap lookup's answer for `p`, possibly stale or NULL)
 * is the live large span that starts at `p`. */
static inline bool pageheap_is_large_start(const struct span *s, const void *p)
{
    return s && span_state(s) == SPAN_LARGE && s->start == (uintptr_t)p;
}

/* The live large span starting at `p`, or NULL if there is none.  No
 * lock: a live large span belongs to the caller, so nothing else changes
 * it; for a pointer that is not one, the answer is NULL.  Inline, for
 * realloc's check that a large block keeps its place. */
static inline struct span *pageheap_large_span(const void *p)
{
    struct span *s = pagemap_span(p);
    return pageheap_is_large_start(s, p) ? s : NULL;
}

/* Shrinks a large span in place to `npages` (< its length), freeing the
 * tail; false, nothing changed, when there is no record for the tail (out
 * of memory). */
bool pageheap_shrink(struct span *s, size_t npages);

/* Grows a large span in place to `npages` (> its length) by taking the start
 * of the free span right after it.  False, changing nothing, if it can't. */
bool pageheap_grow_in_place(struct span *s, size_t npages);

/* A sampled small allocation's own mapping [start, start + npages pages)
 * (sampled_pages.c), recorded in the pagemap once for as long as it is
 * mapped: parked (SPAN_PARKED: free() does not accept it) until
 * pageheap_sampled_attach() makes it the live sampled allocation of
 * `sample` (SPAN_SAMPLED), and again after pageheap_sampled_detach().
 * Every page of it is in the pagemap.
 * Attaching and detaching take no lock and count nothing (the profiler
 * counts these bytes: prof_own_mapping_bytes); registering takes the
 * heap's lock.
 * NULL on ENOMEM.  pageheap_unregister_mapping() forgets it (the caller
 * unmaps it). */
struct span *pageheap_register_mapping(void *start, size_t npages);
void pageheap_unregister_mapping(struct span *s);
/* `object`: the block's address, the mapping's start or, for a guarded
 * sample, further in.  Detaching leaves the span in `state`: SPAN_PARKED,
 * or SPAN_QUARANTINED for a guarded sample (its record kept). */
void pageheap_sampled_attach(struct span *s, void *sample, uintptr_t object);
void pageheap_sampled_detach(struct span *s, unsigned state);

/* The live sampled span starting at `p`, or NULL. */
struct span *pageheap_sampled_span(const void *p);

/* Bytes mapped for the heap so far (a lock-free read, for prof.gdump). */
size_t pageheap_mapped_bytes(void);

/* Whether part of the heap was advised to use transparent huge pages
 * (opt.thp): a sampled large span there then needs MADV_NOHUGEPAGE for
 * exact residency (prof.c). */
bool pageheap_hugepages_advised(void);

/* Large spans whose sample asked for small pages (prof.c): each such
 * madvise splits its chunk's kernel mapping in up to three, and the kernel
 * allows a process vm.max_map_count mappings (65,530 by default) in all.
 * pageheap_small_pages_mark() marks `s` (span->small_pages) and counts it
 * if fewer than pageheap_small_pages_max are marked, and says whether it
 * did; a span already marked stays so.  Unmarked and uncounted when freed.
 * Past the cap a sample may sit on huge pages: its residency then counts
 * every OS page of them. */
#define PAGEHEAP_SMALL_PAGES_MAX 8192
extern SA_TEST_MUTABLE size_t pageheap_small_pages_max;
bool pageheap_small_pages_mark(struct span *s);
size_t pageheap_small_pages_spans(void);

/* Returns every dirty free page to the kernel now; the number of bytes. */
size_t pageheap_purge(void);
/* Returns the pages free for a decay time or longer, if a decay step has
 * passed since the last such pass (the background thread's tick). */
void pageheap_decay(void);
/* The same pass at once, whenever the last one ran (arena.<i>.decay). */
void pageheap_decay_now(void);

/* Whether a background thread runs decay (background.h): set by it, read
 * by the page heap, sampled_pages.c and prof.c, whose inline decay checks
 * then return at once. */
extern bool pageheap_background_decay; /* atomic */
static inline bool pageheap_decay_in_background(void)
{
    return __atomic_load_n(&pageheap_background_decay, __ATOMIC_RELAXED);
}

/* Decay time in ms: free pages older than this are purged.  0 purges at
 * once, a negative value never (only pageheap_purge() does). */
void pageheap_set_decay_ms(long ms);
long pageheap_decay_ms(void);
/* How often decay looks for idle memory, for a decay time of `decay_ns`:
 * every eighth of it, at most once a second, so that memory lives between
 * 1 and 1.125 decay times once freed.  The page heap, sampled_pages.c and
 * the sample shards' spares (prof.c) all use it. */
static inline uint64_t pageheap_decay_step_ns(uint64_t decay_ns)
{
    return decay_ns / 8 < 1000000000u ? decay_ns / 8 : 1000000000u;
}
/* Whether a lock-free decay pass whose next look is due at *next_check
 * should look now (`now`: os_now_ns()); if so, schedules the next one a
 * `step` later.  One caller a step wins.  A look scheduled more than a
 * step ahead was scheduled under a longer decay time: due now.  The
 * central lists and the sample spares (prof.c) use it, the spares at every
 * sampled free: inline, so that the usual answer (not due) is a load and
 * two compares, not a call. */
static inline bool pageheap_decay_look_due(uint64_t *next_check, uint64_t now, uint64_t step)
{
    uint64_t next = __atomic_load_n(next_check, __ATOMIC_RELAXED);
    return !(now < next && next - now <= step) &&
           __atomic_compare_exchange_n(next_check, &next, now + step, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}

struct pageheap_stats {
    size_t mapped;     /* bytes obtained from the kernel for the heap */
    size_t free_dirty; /* bytes in free spans, possibly resident */
    size_t recent;     /* of those, bytes in recent spans, not yet merged */
    size_t free_clean; /* bytes in free spans, purged */
    size_t large;      /* bytes in live large spans */
    size_t small;      /* bytes in small spans */
    size_t purged;     /* bytes handed back with madvise, ever */
    uint64_t nmalloc_large, ndalloc_large; /* large spans allocated and freed, ever */
    uint64_t nmadvise; /* purges (madvise calls) that handed pages back, ever */
    size_t records[SPAN_RECORD_KINDS]; /* span records made, of each length
                                        * (span.h), ever: they are reused,
                                        * never given back */
};
void pageheap_get_stats(struct pageheap_stats *st);

/* Walks every free list and checks the heap's invariants (tests, SA_DEBUG);
 * aborts with a message on the first broken one. */
void pageheap_check(void);

/* fork.c */
void pageheap_prefork(void);
void pageheap_postfork_parent(void);
void pageheap_postfork_child(void);

#endif
