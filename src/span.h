/*
 * span.h: the span record.  A span is a run of contiguous pages with one
 * owner (util.h has the vocabulary):
 *
 *   SPAN_FREE   in the page heap's free lists, dirty (its pages may hold old
 *               data and resident memory) or clean (purged: reads as zero);
 *   SPAN_SMALL  cut into objects of one size class, owned by that class's
 *               central list (central.c);
 *   SPAN_LARGE  one allocation bigger than the largest class, or aligned
 *               beyond what any class offers; a sampled one carries its
 *               record in `sample`;
 *   SPAN_SAMPLED a sampled small allocation on its own mapping (prof.c):
 *               not part of the heap's chunks, never free, never merged;
 *   SPAN_PARKED such a mapping between two samples (sampled_pages.c);
 *   SPAN_QUARANTINED a guarded sample's mapping after its free: no access
 *               until it leaves the quarantine (guard.h).
 *
 * Who writes what: the page heap (under its lock) writes start, npages,
 * state and the free-span fields, except a sampled mapping's state, which
 * its owner writes atomically (span_state); the class's central list
 * (under its lock) writes the object fields of a small span.  Records are reused through the
 * page heap's own free list, never returned to the kernel, so a stale
 * pagemap entry always points at a valid record (pagemap.h explains why that
 * is enough).
 */
#ifndef SA_SPAN_H
#define SA_SPAN_H

#include <stdint.h>

#include "util.h"

/* A small span's free objects are a bitmap in its record (free_bits): 16
 * words, the 1,024 objects of the 8-byte class in one page, the most of
 * any class (test_central checks the table).  The page heap's and the
 * samples' fields share its place: a small span has no use for them.  The
 * record grew from 128 bytes to 192 (184, rounded by meta_alloc): for a
 * heap of 256 MiB of 16..512-byte objects, metadata went from 4.75 to 7.00
 * MiB, 0.4% more resident memory. */
#define SPAN_FREE_WORDS 16

/* SPAN_UNUSED marks a record on the page heap's spare list: a stale pagemap
 * entry may still point at it, and it must never look like a live span. */
enum span_state {
    SPAN_FREE = 0,
    SPAN_SMALL = 1,
    SPAN_LARGE = 2,
    SPAN_UNUSED = 3,
    SPAN_SAMPLED = 4,
    SPAN_PARKED = 5,      /* a sampled allocation's mapping, kept between samples */
    SPAN_QUARANTINED = 6, /* a guarded sample's mapping, freed, inaccessible a while */
};

struct span {
    uintptr_t start;     /* address of the first page */
    size_t npages;       /* length in pages, >= 1 */
    struct span *next;   /* free: bucket list; small: central's partial list */
    struct span *prev;
    uint8_t state;       /* enum span_state */
    uint8_t cls;         /* small: its size class */
    uint8_t dirty;       /* free: pages may be resident (not purged);
                          * quarantined: the purge of its block failed */
    uint8_t on_list;     /* small: on its central list's partial list */
    uint8_t owner_tag;   /* small: the owner tag its pages carry (pagemap.h) */
    uint8_t recent;      /* free: in the page heap's cache of recent spans,
                          * not in its lists (pageheap.c) */
    uint16_t allocated;  /* small: objects out of the span (thread caches,
                          * transfer cache, the program) */
    uint16_t carved;     /* small: 1 + the highest object index ever handed
                          * out (0: none yet); opt.check reads it unlocked.
                          * (16 bits: at most 64 * SPAN_FREE_WORDS objects) */
    uint8_t small_pages; /* large: a sample asked its pages to stay small
                          * (MADV_NOHUGEPAGE, prof.c); freeing it gives them
                          * back their chunk's advice (pageheap.c) */
    uint32_t owner_gen;  /* small: see owner */
    const uint32_t *owner; /* small: generation word of the thread cache that
                          * last took objects from it (NULL: none), and
                          * owner_gen its value then: the owner is gone once
                          * it differs.  Both stored atomically: remote frees
                          * read them without the lock (tcache.c, span_owner) */
    union {
        struct {
            uintptr_t object; /* sampled: the block's address: start, or
                               * further in for a guarded sample (pushed
                               * against the inaccessible page that ends
                               * its mapping) */
            void *sample;     /* sampled: its record; large: its record if
                               * the allocation is sampled, else NULL;
                               * parked: the stack of the sample it last
                               * held (prof.c) */
            uint64_t freed_at; /* free, dirty: os_now_ns() when it last
                                * became dirty */
            struct span *lru_next, *lru_prev; /* free, dirty: oldest first
                                               * (decay) */
        };
        /* small: bit i of word w set while object 64 w + i is free in the
         * span (central.c).  Never read or written in any other state.
         * Word 0 shares the record's first cache line (64-byte aligned):
         * a class of at most 64 objects a span touches one line. */
        uint64_t free_bits[SPAN_FREE_WORDS];
    };
};

/* The state of a record reached through the pagemap, which may be another
 * thread's: a sampled mapping's owner writes its state without the page
 * heap's lock (pageheap_sampled_attach/detach), so a reader that can meet
 * one, a neighbour looked up under the lock included, loads it atomically.
 * Relaxed is enough: such a state is never SPAN_FREE or SPAN_LARGE, the
 * only ones those readers act on, and those are written under the lock. */
static inline unsigned span_state(const struct span *s)
{
    return __atomic_load_n(&s->state, __ATOMIC_RELAXED);
}

static inline uintptr_t span_end(const struct span *s)
{
    return s->start + (s->npages << SA_PAGE_SHIFT);
}

static inline uintptr_t span_page(const struct span *s)
{
    return s->start >> SA_PAGE_SHIFT;
}

#endif
