/*
 * central.c: the central free lists (see central.h).
 *
 * Each class keeps a doubly linked "partial" list of its spans that have at
 * least one free object.  A span's free objects are a bitmap in its record
 * (span_free_bits, a bit per object, set while it is free), as jemalloc's
 * slabs keep them, not a list linked through the objects: taking a batch
 * or giving one back reads and writes no object, only the record.  Linked
 * through the objects, a batch taken walked the list one dependent load
 * at a time, each a cache miss on an object freed long ago (3.9% of
 * cxx_workload's profile, 95% of it on that load), and a batch given back
 * wrote a link into each object.  A batch takes a span's free objects
 * lowest address first: a fresh span's go out in ascending order, as
 * consecutive allocations then lie, and a span's holes are filled before
 * its tail; a fresh span costs resident memory only as the program uses
 * its objects.  A bit found set when its object comes back is a double
 * free: reported and aborted, not a list silently corrupted.
 *
 * Full spans are on no list; the pagemap finds them when an object comes
 * back.  A span whose objects have all come back goes to the page heap at
 * once, dirty, where the next span of its length is taken from.  (One
 * empty span a class used to be kept here, so that a program hovering at
 * a span boundary did not hand it back and take it again on every batch;
 * the thread caches' burst stacks (tcache.h) now absorb that program, and
 * the kept spans cost bench's sizemix/live=100000 0.4 MiB of its 37 MiB
 * peak and 0.9 MiB of its active pages, for 0.07% fewer instructions and
 * no time that paired runs could tell from noise.)
 *
 * Decay (central_decay).  What a transfer cache keeps that nobody uses
 * goes back, as the page heap's free pages do: each class's time is cut
 * into windows of at least the decay time (closed by the first look after
 * that), and the objects that no batch taken reached in a whole window
 * (the fewest the cache held, its oldest) go back to their spans: between
 * one and two decay times after their last use.  Without decay a program
 * that once used a class kept its transfer cache until malloc_trim: up to
 * 128 KiB a class.
 *
 * Span affinity.  Objects of one cache line handed to two threads make
 * both threads' writes fight over the line (false sharing): it happens
 * when one thread's freed objects (a cross-thread free, or a cache flushed
 * at thread exit) go back to their spans and the central list hands them
 * to another thread.  So each small span remembers the thread cache that
 * last took objects from it (`owner`, a generation word of that cache and
 * its value), and a batch is taken from the first of the first
 * AFFINITY_SCAN partial spans that is this thread's, nobody's, or whose
 * owner has gone (exited: its generation moved on); failing that from the
 * new span, and only when the heap has no memory left
 * from anyone's.  A thread then keeps to spans of its own, as mimalloc's
 * thread-owned pages do, at the price of a partly used span per class and
 * thread.
 *
 * The pages of such a span carry its owner's tag (pagemap.h), so that
 * free() sends another live thread's objects back to their owner (tcache.h,
 * remote frees and owner inboxes), or here when the owner is gone or its
 * inbox full, instead of letting the freeing thread reuse them.
 *
 * Transfer caches.  A batch given back goes to the spans one object at a
 * time: a pagemap lookup, a bit set in its span's record, and for a class of
 * a few objects per span often a span emptied and given to the page heap,
 * which the next batch taken maps again.  So a class above
 * AFFINITY_MAX_SIZE (whose spans have no owner) keeps up to
 * central_xfer_capacity() objects given back, as a stack of pointers, and
 * hands them out again as they are, as tcmalloc's transfer cache does: a
 * thread that frees what another allocates (larson, producer and consumer)
 * moves a batch with one lock hold, two copies of its pointers and no
 * object read or written.  (Kept as chains linked through the objects, the
 * taker's walk of a chain that the giver had written on another core was a
 * cache miss per object: prodcons/1024, whose 1 KiB objects have no owner
 * inboxes, takes 0.75 of the chains' time with arrays.)  The kept objects
 * are free but still out of their spans (span->allocated counts them), so
 * their spans stay; malloc_trim gives them back to their spans
 * (central_release_xfer), and the cap is XFER_BYTES a class (one batch,
 * 64 KiB, above 1 KiB objects).  A batch from the cache that took the
 * class's last batch goes to the spans instead: nothing crosses threads
 * there, its own cache keeps what it will take again, and a transfer
 * cache would hold up to 128 KiB more of the class idle.  In bench's
 * sizemix/live=100000 (one thread; 15% of its objects above 256 bytes)
 * that was 0.9 MiB of a 39.6 MiB peak, for 1.6% more instructions (the
 * batches' pagemap lookups and bits).
 *
 * Batches travel as arrays in stack order (central.h): objs[n - 1] is the
 * most recently freed, and the first handed out again.
 */
#include "central.h"

#include <stddef.h>
#include <string.h>

#include "lock.h"
#include "log.h"
#include "pageheap.h"
#include "pagemap.h"
#include "sizeclass.h"

/* The transfer caches' bytes a class may hold: XFER_BYTES, or
 * XFER_BIG_CLASS_BYTES (one batch) for classes above XFER_BIG_CLASS, in
 * whole batches, at most XFER_MAX_BATCHES.  They serve threads that free
 * what others allocate (larson, producer and consumer: objects up to 1 KiB
 * in bench); of bigger classes a program moves few, and two batches of
 * each class kept idle left 0.65 MiB more resident in bench's
 * sizemix/live=100000 after 4.5M operations, where nothing crosses
 * threads. */
#define XFER_MAX_BATCHES 8
#define XFER_BYTES ((size_t)128 << 10)
#define XFER_BIG_CLASS 1024u
#define XFER_BIG_CLASS_BYTES ((size_t)64 << 10)

/* Slots of all classes' transfer caches together: the sum of
 * central_xfer_capacity() over the classes (4,289 with the table of 98
 * classes; test_central checks the sum fits). */
#define XFER_STORE_SLOTS 4608

struct central {
    sa_lock_t lock;
    struct span *partial; /* spans with free objects, most recently used first */
    size_t spans;         /* small spans owned by the class */
    size_t allocated;     /* objects handed out (not those in its transfer cache) */
    void **xfer;          /* its transfer cache's slots (xfer_store); NULL until used */
    unsigned xfer_cap;    /* how many */
    unsigned nxfer;       /* objects in it: xfer[0, nxfer), the last the most recent */
    const uint32_t *last_taker; /* central_owner.gen of the last batch taken */
    uint64_t nmalloc, ndalloc, nslabs, nfills, nflushes; /* since start-up: central_stats */
    size_t npartial;      /* spans on the partial list */
    /* Decay (above): a window of at least a decay time, from the last
     * look that closed one, in which... */
    uint64_t window_since;
    unsigned xfer_low;    /* ...the transfer cache held xfer[0, xfer_low) throughout */
} SA_ALIGNED(SA_CACHELINE);

/* Statically initialised (a GNU range initialiser) so that the very first
 * malloc, whoever makes it, needs no set-up step. */
static struct central centrals[SA_NUM_CLASSES] = {
    [0 ... SA_NUM_CLASSES - 1] = {.lock = SA_LOCK_INITIALIZER(LOCK_RANK_CENTRAL)},
};

/* The transfer caches' slots, each class's after the ones of the classes
 * below it.  Apart from centrals (initialised, so .data) so that they are
 * zero-fill, placed after the small variables (SA_BSS_APART): a page of it
 * costs memory only once a class uses it. */
SA_BSS_APART static void *xfer_store[XFER_STORE_SLOTS];

static struct central *central_of(unsigned cls) { return &centrals[cls]; }

static void partial_push(struct central *c, struct span *s)
{
    s->prev = NULL;
    s->next = c->partial;
    if (c->partial)
        c->partial->prev = s;
    c->partial = s;
    s->on_list = 1;
    c->npartial++;
}

static void partial_remove(struct central *c, struct span *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        c->partial = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->on_list = 0;
    c->npartial--;
}

/* Partial spans looked at for one of the taker's own before a new span. */
#define AFFINITY_SCAN 16

/* A new span's bits: all `nobjs` objects free, none beyond. */
static void set_all_free(struct span *s, unsigned nobjs)
{
    uint64_t *bits = span_free_bits(s);
    unsigned w = 0;
    for (; w < nobjs / 64; w++)
        bits[w] = ~(uint64_t)0;
    if (nobjs % 64)
        bits[w] = ((uint64_t)1 << (nobjs % 64)) - 1;
}

/* A new span to take objects from, on the partial list. */
static struct span *span_for_alloc(struct central *c, unsigned cls)
{
    struct span *s = pageheap_alloc(sizeclass_pages(cls), 1, cls, NULL);
    if (!s)
        return NULL;
    set_all_free(s, sizeclass_objects(cls));
    c->spans++;
    c->nslabs++;
    partial_push(c, s);
    return s;
}

/* Classes up to this size keep to their threads' own spans: several of
 * their objects share a cache line.  Larger ones are left unowned: an
 * object of 256 bytes or more shares at most its first and last lines, and
 * a span of its own per thread would cost each thread pages. */
#define AFFINITY_MAX_SIZE 256

/* Whether `owner` may take objects from `s` without sharing its lines with
 * another live thread. */
static bool may_take(const struct span *s, struct central_owner owner)
{
    return !owner.gen || !s->owner || s->owner == owner.gen ||
           __atomic_load_n(s->owner, __ATOMIC_RELAXED) != s->owner_gen;
}

/* The span the next objects of a batch come from (span affinity, above). */
static struct span *span_for(struct central *c, unsigned cls, struct central_owner owner)
{
    struct span *s = c->partial;
    for (unsigned k = 0; s && k < AFFINITY_SCAN; s = s->next, k++)
        if (may_take(s, owner))
            return s;
    if ((s = span_for_alloc(c, cls)))
        return s;
    return c->partial; /* out of memory: anyone's will do */
}

/* Objects a class's transfer cache (above) may hold: as many whole
 * batches as fit in XFER_BYTES, or one in XFER_BIG_CLASS_BYTES for the
 * classes above XFER_BIG_CLASS (none for the largest, where a batch of two
 * objects is more than that and moving it costs little next to using it),
 * and none for classes that keep to their owners' spans (the cache mixes
 * anyone's objects). */
unsigned central_xfer_capacity(unsigned cls)
{
    size_t size = sizeclass_size(cls), batch = sizeclass_batch(cls);
    if (size <= AFFINITY_MAX_SIZE)
        return 0;
    size_t cap = size > XFER_BIG_CLASS ? XFER_BIG_CLASS_BYTES : XFER_BYTES;
    size_t n = cap / (size * batch);
    return (unsigned)((n > XFER_MAX_BATCHES ? XFER_MAX_BATCHES : n) * batch);
}

unsigned central_xfer_store_slots(void) { return XFER_STORE_SLOTS; }

/* Under the lock: the class's transfer cache's slots, placed in xfer_store
 * on first use (from the table alone, so every class finds the same place
 * whenever it asks). */
static void **xfer_slots(struct central *c, unsigned cls)
{
    if (c->xfer)
        return c->xfer;
    unsigned below = 0, cap = central_xfer_capacity(cls);
    for (unsigned k = 1; k < cls; k++)
        below += central_xfer_capacity(k);
    if (below + cap > XFER_STORE_SLOTS)
        sa_fatal("central: transfer caches need more than %u slots", XFER_STORE_SLOTS);
    c->xfer_cap = cap;
    return c->xfer = xfer_store + below;
}

/* Debug builds: the class's spans and lists, every 16th batch of the
 * class (no lock held: central_check takes the class's). */
static void debug_check(unsigned cls)
{
    static unsigned batches[SA_NUM_CLASSES];
    if (sa_debug_due(&batches[cls], 16))
        central_check(cls);
}

/* A span on the partial list whose bits hold no free object: its count
 * of objects out is wrong (heap corruption, or a bug here); going on
 * would hand out objects still in use. */
static void __attribute__((noreturn, cold)) no_free_object(const struct span *s, unsigned nobjs)
{
    sa_fatal("central: span %p counts %u of its %u objects out but has none free",
             (void *)s->start, s->allocated, nobjs);
}

/* Under the lock: up to `pos` free objects of span `s` (of `nobjs`
 * objects of `size` bytes), lowest address first, into out[pos - 1]
 * downwards (stack order: the lowest goes out first); returns the new
 * pos.  The span must have a free object. */
static unsigned take_from_span(struct span *s, size_t size, unsigned nobjs, void **out,
                               unsigned pos)
{
    unsigned words = span_free_words(nobjs), start = pos;
    uint64_t *span_bits = span_free_bits(s);
    for (unsigned w = 0; w < words && pos > 0; w++) {
        uint64_t bits = span_bits[w];
        if (!bits)
            continue;
        uintptr_t base = s->start + (uintptr_t)w * 64 * size;
        void **slot = out + pos;
        if ((bits & (bits + (bits & -bits))) == 0) {
            /* One run of free objects side by side, as in a span carved
             * for the first time: their addresses by addition, not a bit
             * scan an object (perl building a 300,000-key hash: this
             * function's 12.3 M instructions down to 7.3 M). */
            unsigned first = (unsigned)__builtin_ctzll(bits);
            unsigned n = 64 - (unsigned)__builtin_clzll(bits) - first;
            if (n > pos)
                n = pos;
            uintptr_t at = base + first * size;
            for (unsigned i = 0; i < n; i++, at += size)
                *--slot = (void *)at;
            bits = first + n == 64 ? 0 : bits & (~(uint64_t)0 << (first + n));
        } else {
            do {
                *--slot = (void *)(base + (uintptr_t)__builtin_ctzll(bits) * size);
                bits &= bits - 1;
            } while (bits && slot != out);
        }
        pos = (unsigned)(slot - out);
        span_bits[w] = bits;
    }
    if (pos == start)
        no_free_object(s, nobjs);
    s->allocated = (uint16_t)(s->allocated + (start - pos));
    /* The last taken is the highest: carved is its index + 1 at least. */
    unsigned top = (unsigned)(((uintptr_t)out[pos] - s->start) / size) + 1;
    if (top > s->carved)
        __atomic_store_n(&s->carved, (uint16_t)top, __ATOMIC_RELAXED);
    return pos;
}

unsigned central_alloc_batch(unsigned cls, unsigned want, struct central_owner owner,
                             void **out)
{
    struct central *c = central_of(cls);
    size_t size = sizeclass_size(cls);
    unsigned nobjs = sizeclass_objects(cls), pos = want; /* out[pos, want) is filled */

    sa_lock(&c->lock);
    c->last_taker = owner.gen;
    if (c->nxfer) {
        unsigned k = c->nxfer < want ? c->nxfer : want;
        c->nxfer -= k;
        memcpy(out + want - k, c->xfer + c->nxfer, k * sizeof(void *));
        if (c->nxfer < c->xfer_low)
            c->xfer_low = c->nxfer;
        pos -= k;
    }
    while (pos > 0) {
        struct span *s = span_for(c, cls, owner);
        if (!s)
            break;
        if (size <= AFFINITY_MAX_SIZE) {
            /* Stored atomically: a remote free reads them without the
             * lock, to find the owner's inbox (tcache.c). */
            __atomic_store_n(&s->owner, owner.gen, __ATOMIC_RELAXED);
            __atomic_store_n(&s->owner_gen, owner.value, __ATOMIC_RELAXED);
            unsigned tag = owner.gen ? owner.tag : 0;
            if (s->owner_tag != tag) {
                s->owner_tag = (uint8_t)tag;
                pagemap_set_owner_range(span_page(s), s->npages, tag);
            }
        }
        /* Ascending address order, as consecutive allocations then lie
         * (the program's own walks over them, and the prefetchers, like
         * that: cxx_workload about 1.5% faster than the other way). */
        pos = take_from_span(s, size, nobjs, out, pos);
        if (s->allocated == nobjs)
            partial_remove(c, s);
    }
    unsigned got = want - pos;
    c->allocated += got;
    c->nmalloc += got;
    c->nfills += owner.gen != NULL; /* a cache's refill, not one object for none */
    sa_unlock(&c->lock);
    if (pos) /* out of memory: what there is, to the bottom */
        memmove(out, out + pos, got * sizeof(void *));
    debug_check(cls);
    return got;
}

/* Called with the lock held when the last object of `s` came back. */
static void span_emptied(struct central *c, struct span *s)
{
    if (s->on_list) /* not if it was full until this object */
        partial_remove(c, s);
    c->spans--;
    pageheap_free(s);
}

/* An object given back whose bit is set already: freed twice (or a
 * pointer into the span that was never handed out). */
static void __attribute__((noreturn, cold)) freed_twice(const void *obj, unsigned cls)
{
    sa_fatal("free(): double free of the %zu-byte block at %p (already free in its span)",
             sizeclass_size(cls), obj);
}

/* An object given back whose span record is no longer a small span of its
 * class: the span emptied and went to the page heap while another copy of
 * the object sat in a cache (freed twice, the copies given back in two
 * groups).  Its bits would have been written into a free span's fields. */
static void __attribute__((noreturn, cold)) span_gone(const void *obj, unsigned cls)
{
    sa_fatal("free(): double free of the %zu-byte block at %p (its span is empty and given back)",
             sizeclass_size(cls), obj);
}

/* A record's state and class bytes as one value: return_group compares
 * both in one instruction. */
static inline uint16_t state_and_class_of(const struct span *s)
{
    uint16_t both;
    memcpy(&both, &s->state, sizeof(both));
    return both;
}

/* What state_and_class_of reads in a record of `state` and `cls`. */
static uint16_t state_and_class(unsigned state, unsigned cls)
{
    return state_and_class_of(&(struct span){.state = (uint8_t)state, .cls = (uint8_t)cls});
}

_Static_assert(offsetof(struct span, cls) == offsetof(struct span, state) + 1,
               "a record's class byte follows its state byte");

/* What putting objects of one class back into their spans needs.  Worked
 * out once a batch, not once a group of RETURN_GROUP objects: the objects
 * per span take a 64-bit division, whose latency fell on every group's
 * first look-up. */
struct returning {
    struct central *c;
    unsigned cls;
    /* ceil(2^32 / size): (off * mul) >> 32 is off / size for any multiple
     * off of size below 2^32 (the error, off * (size * mul - 2^32) / size
     * / 2^32, stays below 1). */
    uint64_t mul;
    /* The record's lines up to the end of its bits, which a group
     * prefetches: the first line only, but for classes below 128 bytes
     * (over 64 objects a span); never more than RECORD_BITS_LINES. */
    unsigned lines;
    uint16_t live; /* state_and_class(SPAN_SMALL, cls) */
};

static struct returning returning_start(struct central *c, unsigned cls)
{
    size_t size = sizeclass_size(cls);
    return (struct returning){
        .c = c,
        .cls = cls,
        .mul = (((uint64_t)1 << 32) + size - 1) / size,
        .lines = (unsigned)((offsetof(struct span, free_bits0) +
                             span_free_words(sizeclass_objects(cls)) * sizeof(uint64_t) +
                             SA_CACHELINE - 1) / SA_CACHELINE),
        .live = state_and_class(SPAN_SMALL, cls),
    };
}

/* A record's free bits end within its first three lines, so that
 * span_prefetched needs no loop. */
#define RECORD_BITS_LINES 3
_Static_assert(offsetof(struct span, free_bits0) + SPAN_FREE_WORDS * sizeof(uint64_t) <=
                   RECORD_BITS_LINES * SA_CACHELINE,
               "a span record's free bits reach past its third line");

/* The span record of `obj`, its first LINES lines (1 to RECORD_BITS_LINES)
 * prefetched for writing.  LINES is a constant in each of return_group's
 * three copies of its first pass: tested there, it cost 4 instructions an
 * object. */
static inline __attribute__((always_inline)) struct span *
span_prefetched(const void *obj, unsigned LINES)
{
    struct span *s = pagemap_span_of_small(obj);
    __builtin_prefetch(s, 1);
    if (LINES > 1)
        __builtin_prefetch((char *)s + SA_CACHELINE, 1);
    if (LINES > 2)
        __builtin_prefetch((char *)s + 2 * SA_CACHELINE, 1);
    return s;
}

/* spans[i] = span_prefetched(objs[i]), i < k; an object in the page of
 * the one before it takes that one's record without the look-up. */
static inline __attribute__((always_inline)) void
spans_prefetched(void *const *objs, unsigned k, struct span **spans, unsigned LINES)
{
    spans[0] = span_prefetched(objs[0], LINES);
    for (unsigned i = 1; i < k; i++)
        spans[i] = ((uintptr_t)objs[i] ^ (uintptr_t)objs[i - 1]) >> SA_PAGE_SHIFT == 0
                       ? spans[i - 1]
                       : span_prefetched(objs[i], LINES);
}

/* Under the lock: `k` (1 <= k <= RETURN_GROUP) objects of a batch back
 * into their spans' bits.
 *
 * A first pass looks up each object's span record and prefetches it; a
 * second sets the bits.  Done object after object, the loop's branch
 * waited on each record: after a program frees at random across a large
 * heap the records are cold, and that wait was 10.7% of phase's profile
 * (perf, 300,000 objects a build), 5.3% grouped.
 *
 * Each object is counted out of its span as its bit is set.  Counted once
 * for a run of a span's objects side by side in the batch, they cost 14
 * instructions an object more where runs are one object long, as they
 * nearly all are after random frees (bench's phase: 576 k runs for 599 k
 * objects; perl freeing a 300,000-key hash: 580 k for 600 k).  A long run
 * (prodcons/64: 45 objects) pays one instruction an object more.
 *
 * A span emptied goes to the page heap once the group is done: a block
 * freed twice in the group then finds its bit set in the span's record,
 * not in a record the page heap has had back.  A copy in a later group or
 * batch finds the record no longer a small span of its class (2
 * instructions an object). */
#define RETURN_GROUP 32

static void return_group(const struct returning *rt, void *const *objs, unsigned k)
{
    struct span *spans[RETURN_GROUP];
    if (rt->lines == 1)
        spans_prefetched(objs, k, spans, 1);
    else if (rt->lines == 2)
        spans_prefetched(objs, k, spans, 2);
    else
        spans_prefetched(objs, k, spans, RECORD_BITS_LINES);
    struct central *c = rt->c;
    uint64_t mul = rt->mul;
    uint16_t live = rt->live;
    struct span *emptied[RETURN_GROUP];
    unsigned nemptied = 0;
    for (unsigned i = 0; i < k; i++) {
        struct span *s = spans[i];
        if (unlikely(state_and_class_of(s) != live))
            span_gone(objs[i], rt->cls);
        uintptr_t off = (uintptr_t)objs[i] - s->start;
        SA_ASSERT(off % sizeclass_size(rt->cls) == 0);
        unsigned idx = (unsigned)((off * mul) >> 32);
        uint64_t bit = (uint64_t)1 << (idx % 64), *word = &span_free_bits(s)[idx / 64];
        if (*word & bit)
            freed_twice(objs[i], rt->cls);
        *word |= bit;
        if (--s->allocated == 0)
            emptied[nemptied++] = s;
        else if (!s->on_list)
            partial_push(c, s);
    }
    for (unsigned i = 0; i < nemptied; i++)
        span_emptied(c, emptied[i]);
}

/* Under the lock: objs[0, n) back into their spans. */
static void return_to_spans(struct central *c, unsigned cls, void *const *objs, unsigned n)
{
    if (n == 0)
        return;
    struct returning rt = returning_start(c, cls);
    for (unsigned i = 0; i < n; i += RETURN_GROUP)
        return_group(&rt, objs + i, n - i < RETURN_GROUP ? n - i : RETURN_GROUP);
}

/* central_free_batch and central_free_one: a cache's flush (counted as
 * one) or an object given back directly. */
static void give_back(unsigned cls, void *const *objs, unsigned n, const uint32_t *giver,
                      bool flush)
{
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    c->nflushes += flush;
    /* What fits in the transfer cache, the most recent first; the rest
     * to the spans.  Nothing from the class's last taker: it would take
     * its own objects back, which its cache did for it already. */
    void **xfer = xfer_slots(c, cls);
    unsigned keep = giver && giver == c->last_taker ? 0 : c->xfer_cap - c->nxfer;
    if (keep > n)
        keep = n;
    memcpy(xfer + c->nxfer, objs + n - keep, keep * sizeof(void *));
    c->nxfer += keep;
    return_to_spans(c, cls, objs, n - keep);
    c->allocated -= n; /* in the transfer cache or back in the spans: not out */
    c->ndalloc += n;
    sa_unlock(&c->lock);
    debug_check(cls);
}

void central_free_batch(unsigned cls, void *const *objs, unsigned n, const uint32_t *giver)
{
    give_back(cls, objs, n, giver, true);
}

void central_free_one(unsigned cls, void *obj) { give_back(cls, &obj, 1, NULL, false); }

void central_free_chain(unsigned cls, void *head, unsigned n)
{
    struct central *c = central_of(cls);
    void *group[RETURN_GROUP];
    struct returning rt = returning_start(c, cls);
    sa_lock(&c->lock);
    c->allocated -= n;
    c->ndalloc += n;
    c->nflushes++;
    while (n) {
        unsigned k = n < RETURN_GROUP ? n : RETURN_GROUP;
        n -= k;
        for (unsigned i = 0; i < k; i++) {
            group[i] = head;
            head = *(void **)head;
        }
        return_group(&rt, group, k);
    }
    sa_unlock(&c->lock);
    debug_check(cls);
}

/* Under the lock: the transfer cache's objects back into their spans. */
static void xfer_drain(struct central *c, unsigned cls)
{
    return_to_spans(c, cls, c->xfer, c->nxfer);
    c->nxfer = c->xfer_low = 0;
}

/* Under the lock: once a window of `decay_ns` or more has passed, gives
 * back what the class kept unused all through it (Decay, above), and
 * starts the next. */
static void decay_class(struct central *c, unsigned cls, uint64_t now, uint64_t decay_ns)
{
    /* An earlier `now` than the window's start: a caller that read the
     * clock before another's look; nothing is due for it. */
    if (now < c->window_since || now - c->window_since < decay_ns)
        return;
    /* xfer[0, low) stayed through the window: the oldest. */
    unsigned low = c->xfer_low < c->nxfer ? c->xfer_low : c->nxfer;
    if (low) {
        return_to_spans(c, cls, c->xfer, low);
        c->nxfer -= low;
        memmove(c->xfer, c->xfer + low, c->nxfer * sizeof(void *));
    }
    c->xfer_low = c->nxfer;
    c->window_since = now;
}

static uint64_t next_decay_check; /* atomic */

void central_decay(uint64_t now)
{
    long decay_ms = pageheap_decay_ms();
    if (decay_ms < 0) /* purged only on request (malloc_trim, arena.<i>.purge) */
        return;
    uint64_t decay_ns = (uint64_t)decay_ms * 1000000u;
    if (!pageheap_decay_look_due(&next_decay_check, now, pageheap_decay_step_ns(decay_ns)))
        return;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        /* Each lock once a step (a second at most): a few microseconds. */
        struct central *c = central_of(cls);
        sa_lock(&c->lock);
        decay_class(c, cls, now, decay_ns);
        sa_unlock(&c->lock);
        debug_check(cls);
    }
}

void central_release_xfer(void)
{
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        struct central *c = central_of(cls);
        sa_lock(&c->lock);
        xfer_drain(c, cls);
        sa_unlock(&c->lock);
    }
}

/* Whether object `idx` of small span `s` is free in the span. */
static bool bit_is_free(const struct span *s, unsigned idx)
{
    return span_free_bits_const(s)[idx / 64] >> (idx % 64) & 1;
}

/* Under the lock: whether `obj` is in the class's transfer cache. */
static bool xfer_holds(const struct central *c, const void *obj)
{
    for (unsigned i = 0; i < c->nxfer; i++)
        if (c->xfer[i] == obj)
            return true;
    return false;
}

enum central_object central_object_state(unsigned cls, const void *obj, const void **start)
{
    struct central *c = central_of(cls);
    size_t size = sizeclass_size(cls);
    enum central_object state = OBJECT_OUT;
    sa_lock(&c->lock);
    struct span *s = pagemap_span(obj);
    uintptr_t off = (uintptr_t)obj - s->start;
    *start = (const char *)obj - off % size;
    if (off % size)
        state = OBJECT_INSIDE;
    else if (off / size >= s->carved)
        state = OBJECT_NEVER;
    else if (bit_is_free(s, (unsigned)(off / size)) || xfer_holds(c, obj))
        state = OBJECT_FREE;
    sa_unlock(&c->lock);
    return state;
}

/* Under the lock: how many objects of the class's transfer cache are in
 * span `s` (out of it, but free). */
static unsigned xfer_objects_in(const struct central *c, const struct span *s)
{
    unsigned n = 0;
    uintptr_t end = span_end(s);
    for (unsigned i = 0; i < c->nxfer; i++)
        n += (uintptr_t)c->xfer[i] >= s->start && (uintptr_t)c->xfer[i] < end;
    return n;
}

bool central_span_usage(const void *obj, size_t *free_bytes, unsigned *allocated)
{
    unsigned cls = pagemap_class_of(obj);
    if (!cls)
        return false;
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    struct span *s = pagemap_span(obj);
    bool ok = s && s->state == SPAN_SMALL && s->cls == cls;
    if (ok) {
        *allocated = s->allocated - xfer_objects_in(c, s);
        *free_bytes = (s->npages << SA_PAGE_SHIFT) - *allocated * sizeclass_size(cls);
    }
    sa_unlock(&c->lock);
    return ok;
}

void central_get_stats(unsigned cls, struct central_stats *st)
{
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    st->spans = c->spans;
    st->allocated = c->allocated;
    st->nmalloc = c->nmalloc;
    st->ndalloc = c->ndalloc;
    st->nslabs = c->nslabs;
    st->nfills = c->nfills;
    st->nflushes = c->nflushes;
    st->nonfull = c->npartial;
    sa_unlock(&c->lock);
}

/* A span's record against its class and its bits: the free objects are
 * those its counts say, none beyond the class's objects, and all never
 * handed out (from `carved` on) are free.  Returns its objects out. */
static size_t check_span(const struct span *s, unsigned cls)
{
    unsigned nobjs = sizeclass_objects(cls), nfree = 0;
    if (s->state != SPAN_SMALL || s->cls != cls || s->carved > nobjs || s->allocated > nobjs)
        sa_fatal("central: span %p of class %u is corrupt", (void *)s->start, cls);
    if (s->record_kind < span_record_kind_for(nobjs))
        sa_fatal("central: span %p of class %u has too short a record for its %u objects' bits",
                 (void *)s->start, cls, nobjs);
    unsigned words = span_free_words(nobjs);
    for (unsigned w = 0; w < words; w++) {
        uint64_t bits = span_free_bits_const(s)[w];
        if (w == words - 1 && nobjs % 64 && bits >> (nobjs % 64))
            sa_fatal("central: span %p has free bits past its %u objects", (void *)s->start,
                     nobjs);
        nfree += (unsigned)__builtin_popcountll(bits);
    }
    for (unsigned i = s->carved; i < nobjs; i++)
        if (!bit_is_free(s, i))
            sa_fatal("central: span %p's object %u was never handed out but is not free",
                     (void *)s->start, i);
    if (s->allocated + nfree != nobjs)
        sa_fatal("central: span %p counts %u out + %u free != %u objects", (void *)s->start,
                 s->allocated, nfree, nobjs);
    for (size_t p = 0; p < s->npages; p++)
        if (pagemap_class_of((void *)(s->start + (p << SA_PAGE_SHIFT))) != cls)
            sa_fatal("central: span %p page %zu has the wrong class", (void *)s->start, p);
    return s->allocated;
}

/* The transfer cache: objects of the class, out of their spans, each
 * once. */
static void check_xfer(const struct central *c, unsigned cls)
{
    if (c->nxfer > c->xfer_cap || c->xfer_cap != central_xfer_capacity(cls))
        sa_fatal("central: class %u keeps %u objects in a transfer cache of %u", cls, c->nxfer,
                 c->xfer_cap);
    for (unsigned i = 0; i < c->nxfer; i++) {
        const void *o = c->xfer[i];
        const struct span *s = o ? pagemap_span(o) : NULL;
        if (!s || s->state != SPAN_SMALL || s->cls != cls ||
            ((uintptr_t)o - s->start) % sizeclass_size(cls) || s->allocated == 0)
            sa_fatal("central: bad object %p in the transfer cache of class %u", o, cls);
        for (unsigned j = 0; j < i; j++)
            if (c->xfer[j] == o)
                sa_fatal("central: object %p twice in the transfer cache of class %u", o, cls);
    }
}

void central_check(unsigned cls)
{
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    size_t npartial = 0;
    for (struct span *s = c->partial; s; s = s->next, npartial++) {
        if (!s->on_list || s->allocated == sizeclass_objects(cls))
            sa_fatal("central: span %p on the partial list has no free object",
                     (void *)s->start);
        /* An emptied span goes to the page heap at once (span_emptied). */
        if (check_span(s, cls) == 0)
            sa_fatal("central: span %p on the partial list has no object out",
                     (void *)s->start);
    }
    if (npartial != c->npartial)
        sa_fatal("central: class %u has %zu spans on its partial list, counted %zu", cls,
                 npartial, c->npartial);
    if (c->xfer)
        check_xfer(c, cls);
    sa_unlock(&c->lock);
}

void central_prefork(void)
{
    for (unsigned c = 1; c < SA_NUM_CLASSES; c++)
        sa_lock_unranked(&centrals[c].lock); /* same rank: see lock.h */
}

void central_postfork_parent(void)
{
    for (unsigned c = 1; c < SA_NUM_CLASSES; c++)
        sa_unlock_unranked(&centrals[c].lock);
}

void central_postfork_child(void)
{
    for (unsigned c = 1; c < SA_NUM_CLASSES; c++)
        sa_lock_reset_unranked(&centrals[c].lock);
}
