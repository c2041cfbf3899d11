/*
 * pagemap.h: page number -> span and size class, for every page salloc owns.
 *
 * A two-level radix tree over the 48-bit address space: the root (static,
 * in .bss, untouched entries cost nothing) has 2^17 entries of 2 GiB each;
 * a leaf, mapped on first use, holds for each of its 2^18 pages the span
 * record, the size-class byte and the owner tag.
 *
 * Readers are lock-free (relaxed atomic loads: leaves are never freed, and
 * an entry is published before any pointer into its page leaves the page
 * heap).  Writers hold the page heap lock.
 *
 * What is recorded (invariants the page heap keeps):
 *   - class byte: nonzero iff the page is in an in-use small span, then that
 *     span's class.  free() trusts it: class 0 sends a pointer to the slow
 *     path (large, invalid, or not ours).
 *   - owner tag: for a small span of a class that keeps to its threads
 *     (central.c, span affinity), the tag of the thread cache that owns it
 *     (tcache.h), else 0.  free() caches an object only if the tag is 0 or
 *     its own; another live thread's object goes back towards its span
 *     instead, so no thread reuses memory that shares cache lines with
 *     another thread's live objects.  A hint: written by the class's central
 *     list under its lock, reset to 0 with the class byte, and a stale tag
 *     costs a detour, never correctness.
 *   - span pointer: every page of a small span; the first and last page of a
 *     free or large span.  Other entries may be stale, pointing at a record
 *     that now describes other pages, so readers check span->start (or the
 *     span's bounds) before trusting the answer.
 *
 * The class lookup avoids a NULL test on the leaf: `pm_classes` keeps for
 * each root entry the offset of that leaf's class array from an all-zero
 * array as long as a leaf's, its own second member: a missing leaf has
 * offset 0 and so reads class 0.  One base address serves both loads, and
 * all of it is zero-initialised .bss (untouched, it costs no memory).  An address above
 * the 48-bit space has a root index past the end: class 0, by a compare.
 */
#ifndef SA_PAGEMAP_H
#define SA_PAGEMAP_H

#include <stdbool.h>
#include <stdint.h>

#include "span.h"
#include "util.h"

#define PM_LEAF_BITS 18
#define PM_ROOT_BITS (SA_ADDRESS_BITS - SA_PAGE_SHIFT - PM_LEAF_BITS)
#define PM_LEAF_LEN ((size_t)1 << PM_LEAF_BITS)
#define PM_ROOT_LEN ((size_t)1 << PM_ROOT_BITS)

struct pm_leaf {
    struct span *span[PM_LEAF_LEN];
    uint8_t cls[PM_LEAF_LEN];
    uint8_t owner[PM_LEAF_LEN]; /* right after cls: one base serves both */
};

extern struct pm_leaf *pm_root[PM_ROOT_LEN];

struct pm_classes {
    uintptr_t offset[PM_ROOT_LEN];   /* leaf->cls - zero, or 0 */
    uint8_t zero[2 * PM_LEAF_LEN];   /* what a missing leaf reads: class 0, owner 0 */
};
extern struct pm_classes pm_classes;

static inline size_t pm_root_index(uintptr_t addr)
{
    return (addr >> (SA_PAGE_SHIFT + PM_LEAF_BITS)) & (PM_ROOT_LEN - 1);
}

/* pm_root_index without the mask: PM_ROOT_LEN or more above 48 bits. */
static inline uintptr_t pm_root_index_unmasked(uintptr_t addr)
{
    return addr >> (SA_PAGE_SHIFT + PM_LEAF_BITS);
}

static inline size_t pm_leaf_index(uintptr_t addr)
{
    return (addr >> SA_PAGE_SHIFT) & (PM_LEAF_LEN - 1);
}

/* The size class of the small object containing `p`, or 0 if `p` is not in a
 * small span (large, free, not ours, or above the 48-bit space): the fast
 * paths' lookup.  Under opt.check it answers 0 for every address
 * (pagemap_check_every_free), so that every free goes to the slow path,
 * which checks it: slow paths that need the real class use
 * pagemap_class_of(). */
/* The class byte of `p`'s page in the fast table: the owner tag lies
 * PM_LEAF_LEN bytes further.  Points into `zero` for a page with no leaf.
 * The caller has checked that `p` is inside the 48-bit space. */
static inline const uint8_t *pagemap_fast_entry(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uintptr_t off = __atomic_load_n(&pm_classes.offset[pm_root_index_unmasked(a)], __ATOMIC_RELAXED);
    /* In integers: the sum points into another object (the leaf's class
     * array), which pointer arithmetic from `zero` may not reach in C. */
    return (const uint8_t *)((uintptr_t)pm_classes.zero + off + pm_leaf_index(a));
}

static inline unsigned pagemap_class(const void *p)
{
    if (unlikely(pm_root_index_unmasked((uintptr_t)p) >= PM_ROOT_LEN))
        return 0;
    return __atomic_load_n(pagemap_fast_entry(p), __ATOMIC_RELAXED);
}

/* pagemap_class(), and the page's owner tag in *owner: free()'s lookup. */
static inline unsigned pagemap_class_owner(const void *p, unsigned *owner)
{
    if (unlikely(pm_root_index_unmasked((uintptr_t)p) >= PM_ROOT_LEN)) {
        *owner = 0;
        return 0;
    }
    const uint8_t *e = pagemap_fast_entry(p);
    *owner = __atomic_load_n(e + PM_LEAF_LEN, __ATOMIC_RELAXED);
    return __atomic_load_n(e, __ATOMIC_RELAXED);
}

/* The leaf holding `p`'s page, NULL if there is none (slow paths). */
static inline struct pm_leaf *pagemap_leaf_of(const void *p)
{
    uintptr_t root = pm_root_index_unmasked((uintptr_t)p);
    return root < PM_ROOT_LEN ? __atomic_load_n(&pm_root[root], __ATOMIC_ACQUIRE) : NULL;
}

/* What pagemap_class() answers outside opt.check, for slow paths: through
 * the leaf pointer. */
static inline unsigned pagemap_class_of(const void *p)
{
    struct pm_leaf *leaf = pagemap_leaf_of(p);
    return leaf ? __atomic_load_n(&leaf->cls[pm_leaf_index((uintptr_t)p)], __ATOMIC_RELAXED) : 0;
}

/* The owner tag of `p`'s page through the leaf pointer (slow paths; 0 if
 * there is no leaf). */
static inline unsigned pagemap_owner_of(const void *p)
{
    struct pm_leaf *leaf = pagemap_leaf_of(p);
    return leaf ? __atomic_load_n(&leaf->owner[pm_leaf_index((uintptr_t)p)], __ATOMIC_RELAXED) : 0;
}

/* opt.check: from now on pagemap_class() answers 0 everywhere.  Called
 * once, before the first leaf is made (the fast table stays all zero). */
void pagemap_check_every_free(void);

/* The span record of the page containing `p`, possibly stale (see above), or
 * NULL if salloc never mapped a leaf for it. */
static inline struct span *pagemap_span(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a >> SA_ADDRESS_BITS)
        return NULL;
    struct pm_leaf *leaf = __atomic_load_n(&pm_root[pm_root_index(a)], __ATOMIC_ACQUIRE);
    if (!leaf)
        return NULL;
    return __atomic_load_n(&leaf->span[pm_leaf_index(a)], __ATOMIC_RELAXED);
}

/* pagemap_span() of an object that a thread cache or central list holds:
 * free() found its page's class, so the page is inside the 48-bit space
 * and has a leaf, and neither is tested again.  (Were it not so, the NULL
 * span pagemap_span() answered would fault at its first use anyway.)
 * central.c's give-back looks up every object it puts back this way. */
static inline struct span *pagemap_span_of_small(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    struct pm_leaf *leaf = __atomic_load_n(&pm_root[pm_root_index(a)], __ATOMIC_ACQUIRE);
    return __atomic_load_n(&leaf->span[pm_leaf_index(a)], __ATOMIC_RELAXED);
}

/* Writers (page heap lock held).  Page numbers are address >> SA_PAGE_SHIFT. */

/* Makes sure leaves exist for pages [page, page + npages); false on ENOMEM. */
bool pagemap_ensure(uintptr_t page, size_t npages);
/* Records `s` for one page / for every page of [page, page + npages). */
void pagemap_set_span(uintptr_t page, struct span *s);
void pagemap_set_span_range(uintptr_t page, size_t npages, struct span *s);
/* Sets the class byte of every page of [page, page + npages), and its owner
 * tag to 0. */
void pagemap_set_class_range(uintptr_t page, size_t npages, unsigned cls);
/* Sets the owner tag of every page of [page, page + npages): the class's
 * central lock is held instead (the span is its). */
void pagemap_set_owner_range(uintptr_t page, size_t npages, unsigned owner);

/* The resident bytes of all leaves, from /proc/self/pagemap (residency.h;
 * 0 if it cannot be read): a leaf is 2.5 MiB of address space, of which
 * only the pages for the heap's pages ever touched cost memory.
 * Lock-free; scans the root between the lowest and highest leaf (a few
 * entries for a heap in one part of the address space).  For
 * stats.metadata. */
size_t pagemap_resident_bytes(void);

#endif
