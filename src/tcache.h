/*
 * tcache.h: the per-thread cache: for each size class a singly linked list
 * of free objects, popped by malloc and pushed by free with no lock and no
 * atomic read-modify-write (fastpath.h).  Everything else, refilling from and
 * flushing to the central lists, the adaptive limits and thread exit, is here
 * and in tcache.c, on slow paths.
 *
 *   bins[cls]:  head -> obj -> obj -> NULL      (links in each object's word 0)
 *               max   = the list's limit
 *               room  = max - (objects on the list): free() pushes while
 *                       room > 0, so its test is one compare with zero
 *               size  = the class's object size (0 in bins[0])
 *
 * bins[0] belongs to class 0 ("not a small object") and always has room 0,
 * so free()'s single fast-path test also routes large and foreign pointers
 * to the slow path.  A thread that has no cache yet (or whose cache was
 * returned at exit) points at `tcache_empty`, whose every list is empty and
 * every room is 0: both fast paths fall through to the slow path, which sets
 * the thread up.  So the fast path never tests for "no cache", and it never
 * writes tcache_empty (malloc charges the sampling counter only after it
 * found an object, free only pushes when there is room).
 *
 * thread.deallocated is not counted on the fast path; it is derived
 * (tcache_deallocated): every object a user free pushed is, in the list's
 * bytes, either still there or was popped by a user malloc (in
 * thread.allocated); `dealloc_adjust` balances everything else the slow
 * paths do (refills, flushes, proxies, large and sampled blocks):
 *
 *     thread.deallocated = thread.allocated + bytes on the lists + dealloc_adjust
 *
 * Remote frees.  Each cache has an owner tag, a byte with four of its eight
 * bits set, and the spans it owns carry it in the pagemap (pagemap.h,
 * central.c).  free() pushes an object onto the list only if its page's
 * tag is 0 (no owner) or the cache's own: another thread's object would
 * otherwise be handed out again here, next to that thread's live objects
 * in one cache line (false sharing).  Since no such byte is a subset of
 * another, one test tells the cases apart: page tag & ~own tag is zero
 * exactly for 0 and the own tag (`foreign_owners` holds ~own tag).
 * Another thread's object goes to the slow path instead, onto the class's
 * `remote` chain, which goes back to the central list a batch at a time.
 * Remote objects count as cached bytes: the derivation below holds with
 * "lists" meaning both.
 *
 * Owner inboxes.  A remote chain holds objects of one owner tag (a new tag
 * flushes it first).  When it is flushed, it goes whole to the inbox of the
 * cache that owns its first object's span, if that cache's thread is still
 * there (span->owner, its incarnation), with one compare-and-swap and no
 * lock; the owner's next refill of the class takes the whole inbox with one
 * exchange, before it asks the central list.  So a producer and its
 * consumer pass objects back and forth without a lock, and the objects stay
 * out of their spans (span->allocated counts them) as they do in a cache.
 * The central list takes the chain instead when the owner is gone or its
 * inbox is full (tcache.c: at most 8 batches and 32 KiB a class), so an
 * owner that stops allocating a class strands little.  Inbox objects belong to
 * nobody's derivation below: the freeing thread's chain gave them up, and
 * the owner's refill takes them in as it does a central batch.
 *
 * Only the owning thread touches its cache, except: the registry links
 * (under the registry lock), the inboxes (atomically, by any thread), and
 * fork.c's child handler.
 */
#ifndef SA_TCACHE_H
#define SA_TCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sizeclass.h"
#include "unwind.h"
#include "util.h"

struct prof_stack;

struct tcache_bin {
    void *head;
    uint16_t room; /* max - objects on the list (wraps only inside an overflow) */
    uint16_t max;  /* at most TCACHE_CLASS_MAX_OBJECTS (tcache.c) */
    uint32_t size; /* the class's object size, here so malloc loads it with the list */
};

/* The profiler's per-thread state, kept here so the fast path reaches the
 * counter with the same pointer.  Written only by the owning thread, only
 * by sampler.c and prof.c (slow paths). */
struct tcache_prof {
    uint64_t prng;       /* xorshift state, seeded per thread */
    double next_unit;    /* the next interval's exponential variate, of mean 1 */
    uint64_t rate;       /* R the current interval was drawn with; 0: not sampling */
    int64_t carry;       /* rest of the interval beyond bytes_until_sample */
    uint64_t alloc_base; /* thread.allocated = alloc_base - (bytes_until_sample + carry) */
    uint64_t reported;   /* thread.allocated already added to prof's total */
    uint32_t gen;        /* sampler generation last applied (rate/activity) */
    bool active;         /* thread.prof.active */
    uint8_t shard;       /* the sample shard its samples go to (prof.c) */
    bool in_prof;        /* reentrancy guard: inside sampling or stack capture */
    /* The weight of this thread's last sample, and the usable size and rate
     * it was for: samples of one size in a row skip its arithmetic. */
    uint64_t weight_usable, weight_rate;
    int64_t weight;
    char name[64];       /* thread.prof.name, "" if unset */
    struct unwind_memo memo; /* this thread's last walk (unwind.h) */
    /* The interned stack of memo's walk (NULL: not interned yet): a replay
     * gives the same frames, so the same record (records live forever). */
    struct prof_stack *memo_stack;
};

/* Objects freed by this thread that belong to another thread's spans, on
 * their way back to their owner's inbox or the central list. */
struct tcache_remote {
    void *head;     /* linked through word 0 */
    void *tail;     /* the first pushed: the last of the chain */
    uint32_t count;
    uint8_t tag;    /* the owner tag of the chain's pages (while count > 0) */
};

/* An inbox word (owner inboxes, above): the first object of a chain linked
 * through word 0 and ending in NULL, in the low SA_ADDRESS_BITS bits, and
 * how many objects it holds in the bits above; 0 when empty.  Objects lie
 * below 2^SA_ADDRESS_BITS (the pagemap covers no more). */
#define TCACHE_INBOX_PTR_MASK (((uint64_t)1 << SA_ADDRESS_BITS) - 1)
static inline void *tcache_inbox_head(uint64_t word)
{
    return (void *)(uintptr_t)(word & TCACHE_INBOX_PTR_MASK);
}
static inline uint32_t tcache_inbox_count(uint64_t word)
{
    return (uint32_t)(word >> SA_ADDRESS_BITS);
}

struct tcache {
    struct tcache_bin bins[SA_NUM_CLASSES];
    /* Bytes the thread may still allocate before the next sample is due.
     * malloc's fast path subtracts each object's usable size and goes to
     * the slow path instead of letting it drop below zero (sampler.h). */
    int64_t bytes_until_sample;
    /* ~owner_tag (8 bits): free() caches an object only if its page's owner
     * tag has none of these bits (remote frees, above).  0 in tcache_empty,
     * whose rooms are 0 anyway. */
    uint8_t foreign_owners;
    uint8_t owner_tag;
    /* Balances thread.deallocated's derivation (above); slow paths only.
     * Modulo 2^64, like the counts it balances. */
    uint64_t dealloc_adjust;
    struct tcache_prof prof;
    /* Slow-path bookkeeping. */
    uint32_t events;                      /* refills + overflows, for budget checks */

    uint8_t overflows[SA_NUM_CLASSES];    /* overflows since max last shrank */
    struct tcache_remote remote[SA_NUM_CLASSES];
    struct tcache *next, *prev;           /* registry, under its lock */
    /* Bumped when the record's thread goes away (exit, or absent from a fork
     * child): spans it owned become anyone's (central.h, span affinity).
     * Read by other threads at any time, so it is last and a new cache's
     * clearing stops before it: it survives the record's reuse. */
    uint32_t incarnation;
    /* Owner inboxes (above), one word per class, written by other threads
     * at any time: on lines of their own, apart from the lists free()
     * pushes onto.  Not cleared on the record's reuse either: what a late
     * push left there is the new thread's to take. */
    uint64_t inbox[SA_NUM_CLASSES] SA_ALIGNED(SA_CACHELINE);
};

/* The calling thread's cache (init.c owns the TLS; initial-exec, one pointer). */
extern __thread struct tcache *tcache_tls __attribute__((tls_model("initial-exec")));
extern struct tcache tcache_empty;

static inline struct tcache *tcache_get(void) { return tcache_tls; }

/* The list operations themselves; callers check emptiness and room. */
static inline void *tcache_bin_pop(struct tcache_bin *bin, void *obj)
{
    bin->head = *(void **)obj;
    bin->room++;
    return obj;
}

static inline void tcache_bin_push(struct tcache_bin *bin, void *obj)
{
    *(void **)obj = bin->head;
    bin->head = obj;
    bin->room--;
}

/* Objects on the list. */
static inline uint32_t tcache_bin_count(const struct tcache_bin *bin)
{
    return (uint16_t)(bin->max - bin->room);
}

/* Sets the list's limit, never below the objects it holds. */
static inline void tcache_bin_set_max(struct tcache_bin *bin, uint32_t max)
{
    uint32_t n = tcache_bin_count(bin);
    if (max < n)
        max = n;
    bin->room = (uint16_t)(max - n);
    bin->max = (uint16_t)max;
}

/* A new, registered cache with empty lists; NULL with ENOMEM. */
struct tcache *tcache_create(void);
/* Flushes every list and unregisters `tc`; its record is reused later. */
void tcache_destroy(struct tcache *tc);

/* Slow path of malloc: the list of `cls` is empty.  Refills it with a batch
 * and returns one object, or NULL (ENOMEM). */
void *tcache_refill(struct tcache *tc, unsigned cls);
/* Slow path of free: the list of `cls` is at its limit.  Takes `obj` and
 * gives a batch back to the central list. */
void tcache_overflow(struct tcache *tc, unsigned cls, void *obj);
/* Slow path of free: `obj`, of class `cls`, is in a span another thread
 * owns, whose pages carry owner tag `tag`.  Chains it for that thread's
 * inbox or the central list (remote frees, above). */
void tcache_remote_free(struct tcache *tc, unsigned cls, void *obj, unsigned tag);
/* An object of class `cls` back into `tc` on a slow path: onto the remote
 * chain if another thread owns its span, else onto the list, overflowing
 * if it is full (what the free fast path does, plus its exits). */
void tcache_put(struct tcache *tc, unsigned cls, void *obj);
/* Gives every cached object back, the inboxes' included (thread.tcache.flush,
 * malloc_trim). */
void tcache_flush_all(struct tcache *tc);
/* Gives what every thread's inboxes hold back to the central lists, the
 * records of exited threads included (malloc_trim). */
void tcache_drain_all_inboxes(void);

/* The most objects a list of class `cls` may hold (tcache.c's limits):
 * 256 KiB worth up to 1 KiB objects, 64 KiB worth above, never less than
 * a batch. */
uint32_t tcache_class_cap(unsigned cls);

/* Bytes of free objects in `tc`. */
size_t tcache_cached_bytes(const struct tcache *tc);
/* thread.deallocated of `tc`'s thread, given its thread.allocated. */
uint64_t tcache_deallocated(const struct tcache *tc, uint64_t allocated);
/* Bytes cached by all threads, their inboxes' included (stats). */
size_t tcache_all_cached_bytes(void);

/* Checks a cache's lists against their counts (tests, SA_DEBUG). */
void tcache_check(const struct tcache *tc);

/* fork.c.  In the child only the forking thread exists: the other threads'
 * caches are dropped from the registry (their objects stay lost: they may
 * have been mid-update when fork() copied them). */
void tcache_prefork(void);
void tcache_postfork_parent(void);
void tcache_postfork_child(struct tcache *self);

#endif
