/*
 * tcache.h: the per-thread cache: for each size class a stack of free
 * objects, an array of pointers, popped by malloc and pushed by free with no
 * lock and no atomic read-modify-write (fastpath.h).  Everything else,
 * refilling from and flushing to the central lists, the adaptive limits and
 * thread exit, is here and in tcache.c, on slow paths.
 *
 *   bins[cls]:  top -> the slot above the last object pushed; the class's
 *                      slots run from its base upwards (tcache.c: a few in
 *                      the record, then slots of its own as it grows)
 *               empty_bits = the low 16 bits of top when the stack is empty
 *               full_bits  = those when it holds `max`, the stack's limit
 *               size  = the class's object size (0 in bins[0])
 *
 * A class's slots span less than 64 KiB, so the low 16 bits of top tell
 * its places apart: malloc's test is one compare of them with empty_bits,
 * free's one with full_bits, and the limit moves by rewriting full_bits.
 * Why an array, not a list linked through the objects (which salloc had
 * first): free() then writes only the slot, not the object, and malloc
 * reads only the slot.  A program that frees objects at random over a
 * large heap wrote a cold line per free, and the flush of a full list read
 * those links back one after the other, a cache miss each, waiting on the
 * one before (bench's phase: 16-19% of its time on that walk); the slots
 * are one line per eight objects, read in order.
 *
 * bins[0] belongs to class 0 ("not a small object"): its top is NULL and
 * both its bits 0, so it is at once empty and full, and free()'s single
 * fast-path test also routes large and foreign pointers to the slow path.
 * A thread that has no cache yet (or whose cache was returned at exit)
 * points at `tcache_empty`, all of whose bins are like that: both fast
 * paths fall through to the slow path, which sets the thread up.  So the
 * fast path never tests for "no cache", and it never writes tcache_empty
 * (malloc charges the sampling counter only after it found an object, free
 * only pushes when there is room).
 *
 * thread.deallocated is not counted on the fast path; it is derived
 * (tcache_deallocated): every object a user free pushed is, in the stack's
 * bytes, either still there or was popped by a user malloc (in
 * thread.allocated); `dealloc_adjust` balances everything else the slow
 * paths do (refills, flushes, proxies, large and sampled blocks):
 *
 *     thread.deallocated = thread.allocated + bytes on the stacks + dealloc_adjust
 *
 * Remote frees.  Each cache has an owner tag, a byte with four of its eight
 * bits set, and the spans it owns carry it in the pagemap (pagemap.h,
 * central.c).  free() pushes an object onto the stack only if its page's
 * tag is 0 (no owner) or the cache's own: another thread's object would
 * otherwise be handed out again here, next to that thread's live objects
 * in one cache line (false sharing).  Since no such byte is a subset of
 * another, one test tells the cases apart: page tag & ~own tag is zero
 * exactly for 0 and the own tag (`foreign_owners` holds ~own tag).
 * Another thread's object goes to the slow path instead, onto the class's
 * `remote` chain, which goes back to the central list a batch at a time.
 * Remote objects count as cached bytes: the derivation below holds with
 * "stacks" meaning both.
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
 * Uncached threads (tcache:false, thread.tcache.enabled).  A thread may run
 * with its cache off, as jemalloc's can: every stack's max is 0, so that
 * malloc's stack is always empty and free's always full, and both fast
 * paths go to the slow path as they do for tcache_empty, with no new test
 * on them.  There tcache_refill takes one object from the central list and
 * tcache_put gives one back, both as an anonymous owner (tag 0): the
 * thread owns no spans, so no object of its is pushed to its inbox.  The
 * record itself stays: it holds the sampling counter, thread.allocated and
 * the profiler's state, which do not depend on caching.  Turning the cache
 * off gives back what it holds and ends the record's incarnation, as a
 * thread's exit does, so that the spans it owned become anyone's.
 *
 * Classes above tcache_max (jemalloc's option) are uncached in every
 * thread the same way: their stacks' max stays 0, and tcache_refill and
 * tcache_put take and give one object at a time.  Only which classes that
 * is changes, at option time, before any cache exists.
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
    void **top;          /* the slot the next push fills; the stack lies below it */
    uint16_t empty_bits; /* (uint16_t)top when the stack is empty: its base */
    uint16_t full_bits;  /* (uint16_t)top when it holds max objects */
    uint32_t size;       /* the class's object size, here so malloc loads it with top */
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
    /* While a prof_backtrace hook runs for a sample: where salloc's own
     * walk would start (prof_default_backtrace); NULL otherwise. */
    const struct unwind_from *hook_from;
    /* thread.peak (thread_peak.h): the sampler's window for this thread
     * (0: the global one, peak not tracked), the difference at the last
     * reset, and the highest seen since, less that base (at least 0). */
    int64_t peak_window;
    int64_t peak_base, peak_max;
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

/* Slots each class's stack has in the record itself, and in its first
 * slots of its own (tcache.c). */
#define TCACHE_SMALL_SLOTS 8
#define TCACHE_MID_SLOTS 64

/* What the stacks of classes above 1 KiB may hold beyond their caps in
 * bursts (tcache.c), all of a cache's together: tc->burst_bytes. */
#define TCACHE_BURST_BYTES ((size_t)4 << 20)

struct tcache {
    struct tcache_bin bins[SA_NUM_CLASSES];
    /* Bytes the thread may still allocate before the next sample is due.
     * malloc's fast path subtracts each object's usable size and goes to
     * the slow path instead of letting it drop below zero (sampler.h). */
    int64_t bytes_until_sample;
    /* ~owner_tag (8 bits): free() caches an object only if its page's owner
     * tag has none of these bits (remote frees, above).  0 in tcache_empty,
     * whose stacks are full anyway. */
    uint8_t foreign_owners;
    uint8_t owner_tag;
    /* Balances thread.deallocated's derivation (above); slow paths only.
     * Modulo 2^64, like the counts it balances. */
    uint64_t dealloc_adjust;
    struct tcache_prof prof;
    /* Slow-path bookkeeping. */
    uint32_t events;                      /* refills + overflows, for budget checks */
    /* The class of the cache's last slow event if it was a refill, 0 if
     * an overflow: a big class refilled again right after its own refill
     * is taken in bulk (bursts, tcache.c). */
    uint8_t last_refill;
    /* The thread's cache is off (Uncached threads, above): every max 0. */
    bool uncached;

    uint8_t overflows[SA_NUM_CLASSES];    /* overflows since max last shrank */
    /* `events` at each class's last refill or overflow, for the trim of
     * big classes' bursts (tcache.c).  Its low 16 bits, compared as
     * differences modulo 2^16 (196 bytes fewer than whole stamps): a class
     * idle for a multiple of 65536 events looks busy for one budget check,
     * which only puts off its trim by one. */
    uint16_t active_event[SA_NUM_CLASSES];
    size_t burst_bytes; /* what bursts grew the stacks by, in bytes beyond their caps */
    /* What the stacks' limits grew by beyond their first ones, in bytes
     * (tcache.c: Many threads). */
    size_t capacity_bytes;
    uint8_t slots_tier[SA_NUM_CLASSES];   /* where each stack's slots are (tcache.c) */
    struct tcache_remote remote[SA_NUM_CLASSES];
    struct tcache *next, *prev;           /* registry, under its lock */
    /* Bumped when the record's thread goes away (exit, or absent from a fork
     * child): spans it owned become anyone's (central.h, span affinity).
     * Read by other threads at any time, so it is last and a new cache's
     * clearing stops before it: it survives the record's reuse. */
    uint32_t incarnation;
    /* Each class's stack starts in its few slots here and moves to slots
     * of its own when it outgrows them (tcache.c). */
    void *small_slots[SA_NUM_CLASSES][TCACHE_SMALL_SLOTS];
    /* Owner inboxes (above), one word per class, written by other threads
     * at any time: on lines of their own, apart from the stacks free()
     * pushes onto.  Not cleared on the record's reuse either: what a late
     * push left there is the new thread's to take. */
    uint64_t inbox[SA_NUM_CLASSES] SA_ALIGNED(SA_CACHELINE);
};

/* The calling thread's cache (init.c owns the TLS; initial-exec, one pointer). */
extern __thread struct tcache *tcache_tls __attribute__((tls_model("initial-exec")));
extern struct tcache tcache_empty;

static inline struct tcache *tcache_get(void) { return tcache_tls; }

/* The stack operations themselves; callers check emptiness and room. */
static inline bool tcache_bin_empty(const struct tcache_bin *bin)
{
    return (uint16_t)(uintptr_t)bin->top == bin->empty_bits;
}

static inline bool tcache_bin_full(const struct tcache_bin *bin)
{
    return (uint16_t)(uintptr_t)bin->top == bin->full_bits;
}

static inline void *tcache_bin_pop(struct tcache_bin *bin)
{
    return *--bin->top;
}

static inline void tcache_bin_push(struct tcache_bin *bin, void *obj)
{
    *bin->top++ = obj;
}

/* Objects on the stack, and its limit (16-bit differences: a class's slots
 * span less than 64 KiB). */
static inline uint32_t tcache_bin_count(const struct tcache_bin *bin)
{
    return (uint16_t)((uint16_t)(uintptr_t)bin->top - bin->empty_bits) / sizeof(void *);
}

static inline uint32_t tcache_bin_max(const struct tcache_bin *bin)
{
    return (uint16_t)(bin->full_bits - bin->empty_bits) / sizeof(void *);
}

/* The stack's first slot (NULL for bins[0] and tcache_empty's bins: in
 * integers, as C has no arithmetic on a null pointer). */
static inline void **tcache_bin_base(const struct tcache_bin *bin)
{
    return (void **)((uintptr_t)bin->top - tcache_bin_count(bin) * sizeof(void *));
}

/* Sets the stack's limit, never below the objects it holds (and, by its
 * callers, never above the class's slots). */
static inline void tcache_bin_set_max(struct tcache_bin *bin, uint32_t max)
{
    uint32_t n = tcache_bin_count(bin);
    if (max < n)
        max = n;
    bin->full_bits = (uint16_t)(bin->empty_bits + max * sizeof(void *));
}

/* A new, registered cache with empty stacks; NULL with ENOMEM. */
struct tcache *tcache_create(void);
/* Flushes every stack and unregisters `tc`; its record is reused later. */
void tcache_destroy(struct tcache *tc);

/* Slow path of malloc: the stack of `cls` is empty.  Refills it with a batch
 * and returns one object, or NULL (ENOMEM). */
void *tcache_refill(struct tcache *tc, unsigned cls);
/* Slow path of free: the stack of `cls` is at its limit.  Takes `obj` and
 * gives a batch back to the central list. */
void tcache_overflow(struct tcache *tc, unsigned cls, void *obj);
/* Slow path of free: `obj`, of class `cls`, is in a span another thread
 * owns, whose pages carry owner tag `tag`.  Chains it for that thread's
 * inbox or the central list (remote frees, above). */
void tcache_remote_free(struct tcache *tc, unsigned cls, void *obj, unsigned tag);
/* An object of class `cls` back into `tc` on a slow path: onto the remote
 * chain if another thread owns its span, else onto the stack, overflowing
 * if it is full (what the free fast path does, plus its exits). */
void tcache_put(struct tcache *tc, unsigned cls, void *obj);
/* Turns the calling thread's cache off or on (Uncached threads, above):
 * off gives back every object it holds, as tcache_flush_all, and ends its
 * incarnation; on lets its stacks grow again from their first limits.  A
 * new cache starts as opt.tcache says. */
void tcache_set_cached(struct tcache *tc, bool cached);
static inline bool tcache_is_cached(const struct tcache *tc) { return !tc->uncached; }
/* Gives every cached object back, the inboxes' included (thread.tcache.flush,
 * malloc_trim). */
void tcache_flush_all(struct tcache *tc);
/* Gives what every thread's inboxes hold back to the central lists, the
 * records of exited threads included (malloc_trim). */
void tcache_drain_all_inboxes(void);

/* Caches only the classes of at most `bytes` (opt.tcache_max; conf.c
 * calls it as it reads the option, before any cache exists).  Every small
 * class is cached by default. */
void tcache_set_max_size(size_t bytes);
/* The largest class size cached, 0 for none (arenas.tcache_max), and how
 * many classes are cached (arenas.nhbins). */
extern size_t tcache_max_cached_size;
extern unsigned tcache_cached_classes;

/* The most objects a stack of class `cls` may hold (tcache.c's limits):
 * 256 KiB worth up to 1 KiB objects, 64 KiB worth above, never less than
 * a batch. */
uint32_t tcache_class_cap(unsigned cls);

/* The most a cache's stacks may be limited to together, in bytes, with
 * the threads there are now (tcache.c: Many threads); SIZE_MAX for few. */
size_t tcache_capacity_bound(void);

/* Threads with a cache now (stats.arenas.<i>.nthreads). */
unsigned tcache_live_count(void);

/* Bytes of free objects in `tc`. */
size_t tcache_cached_bytes(const struct tcache *tc);
/* thread.allocated minus thread.deallocated of `tc`'s thread: what it
 * allocated and has not freed (negative if it freed others' blocks). */
int64_t tcache_live_difference(const struct tcache *tc);
/* thread.deallocated of `tc`'s thread, given its thread.allocated. */
uint64_t tcache_deallocated(const struct tcache *tc, uint64_t allocated);
/* Bytes cached by all threads, their inboxes' included (stats). */
size_t tcache_all_cached_bytes(void);

/* Checks a cache's stacks: bounds, and each object of its class (tests,
 * SA_DEBUG). */
void tcache_check(const struct tcache *tc);

/* fork.c.  In the child only the forking thread exists: the other threads'
 * caches are dropped from the registry (their objects stay lost: they may
 * have been mid-update when fork() copied them). */
void tcache_prefork(void);
void tcache_postfork_parent(void);
void tcache_postfork_child(struct tcache *self);

#endif
