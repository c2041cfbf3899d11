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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* A small span's free objects are a bitmap in its record (its free bits,
 * span_free_bits): up to 16 words, the 1,024 objects of the 8-byte class
 * in one page, the most of any class (test_central checks the table).
 *
 * Records come in three lengths (enum span_record_kind), by the words of
 * free bits they have room for.  A short one (64 bytes, one cache line)
 * holds one word: enough for every class of 128 bytes and more (64 objects
 * a span at most), and for any span that is not small.  A medium one (128
 * bytes) holds 9 words, for the classes of 16 to 112 bytes; a long one (192
 * bytes) all 16, for the 8-byte class.  The page heap gives a span the
 * record its class needs when it cuts the span for it (pageheap_alloc).
 * All records were long before (184 bytes, rounded by meta_alloc): bench's
 * phase (256 MiB of 16..512-byte objects) kept 7.00 MiB of them, 2.7% of
 * its heap. */
#define SPAN_FREE_WORDS 16
enum span_record_kind {
    SPAN_RECORD_SHORT = 0,
    SPAN_RECORD_MEDIUM = 1,
    SPAN_RECORD_LONG = 2,
    SPAN_RECORD_KINDS = 3,
};

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
    uint8_t small_pages; /* large: a sample asked its pages to stay small
                          * (MADV_NOHUGEPAGE, prof.c); freeing it gives them
                          * back their chunk's advice (pageheap.c) */
    uint8_t record_kind; /* enum span_record_kind: the record's length, set
                          * when it is made, kept while it is reused */
    /* What only spans in some states use shares the rest of the first line:
     * these fields mean nothing in another state.  Whoever reads a record
     * it may not own through the pagemap checks its state first
     * (span_state), or reads the small fields for a live object, whose span
     * stays small while it is out (tcache.c's span_owner, opt.check's
     * read of carved). */
    union {
        struct {
            uint16_t allocated; /* small: objects out of the span (thread
                                 * caches, transfer cache, the program) */
            uint16_t carved;    /* small: 1 + the highest object index ever
                                 * handed out (0: none yet); opt.check reads
                                 * it unlocked.  (16 bits: at most
                                 * 64 * SPAN_FREE_WORDS objects) */
            uint32_t owner_gen; /* small: see owner */
            const uint32_t *owner; /* small: generation word of the thread
                                 * cache that last took objects from it
                                 * (NULL: none), and owner_gen its value then:
                                 * the owner is gone once it differs.  Both
                                 * stored atomically: remote frees read them
                                 * without the lock (tcache.c, span_owner) */
            /* small: the first word of its free bits (span_free_bits):
             * bit i of word w set while object 64 w + i is free in the span
             * (central.c); a long record's other words follow the struct. */
            uint64_t free_bits0;
        };
        struct {
            uintptr_t object; /* sampled: the block's address: start, or
                               * further in for a guarded sample (pushed
                               * against the inaccessible page that ends
                               * its mapping) */
            void *sample;     /* sampled: its record; large: its record if
                               * the allocation is sampled, else NULL;
                               * parked: the stack of the sample it last
                               * held (prof.c) */
        };
        struct {
            uint64_t freed_at; /* free, dirty: os_now_ns() when it last
                                * became dirty */
            struct span *lru_next, *lru_prev; /* free, dirty: oldest first
                                               * (decay) */
        };
    };
};

_Static_assert(sizeof(struct span) == SA_CACHELINE, "a short span record is one cache line");
_Static_assert(offsetof(struct span, free_bits0) + sizeof(uint64_t) == sizeof(struct span),
               "a short record's one word of free bits ends it");

/* Words of free bits a record of `kind` has room for. */
static inline unsigned span_record_words(unsigned kind)
{
    return kind == SPAN_RECORD_SHORT ? 1 : kind == SPAN_RECORD_MEDIUM ? 9 : SPAN_FREE_WORDS;
}

/* The bytes meta_alloc gives a record of `kind`: 64, 128 or 192. */
static inline size_t span_record_bytes(unsigned kind)
{
    size_t end = offsetof(struct span, free_bits0) + span_record_words(kind) * sizeof(uint64_t);
    return (end + SA_CACHELINE - 1) / SA_CACHELINE * SA_CACHELINE;
}

/* Words of free bits a span of `nobjs` objects needs. */
static inline unsigned span_free_words(unsigned nobjs) { return (nobjs + 63) / 64; }

/* The shortest record a small span of `nobjs` objects fits in. */
static inline unsigned span_record_kind_for(unsigned nobjs)
{
    unsigned words = span_free_words(nobjs);
    return words <= span_record_words(SPAN_RECORD_SHORT)    ? SPAN_RECORD_SHORT
           : words <= span_record_words(SPAN_RECORD_MEDIUM) ? SPAN_RECORD_MEDIUM
                                                            : SPAN_RECORD_LONG;
}

/* A small span's free bits: free_bits0 and, in a long record, the words
 * after it.  Reached through the record's address, not the member (an
 * array of one word indexed past its end). */
static inline uint64_t *span_free_bits(struct span *s)
{
    return (uint64_t *)(void *)((char *)s + offsetof(struct span, free_bits0));
}

static inline const uint64_t *span_free_bits_const(const struct span *s)
{
    return (const uint64_t *)(const void *)((const char *)s + offsetof(struct span, free_bits0));
}

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
