/*
 * tcache.c: thread cache slow paths (see tcache.h).
 *
 * Limits.  Each stack's max starts small and grows each time it runs
 * dry (the thread wants more than it holds): doubling up to the class's
 * batch, then a batch at a time, up to a per-class cap (tcache_class_cap:
 * 256 KiB worth of objects, 64 KiB above 1 KiB objects).  When a stack
 * overflows repeatedly, max shrinks again: a thread that only frees (a
 * consumer) keeps a short stack.  Every TCACHE_BUDGET_CHECK slow events the
 * whole cache is weighed; above TCACHE_BUDGET bytes, every stack gives half of
 * its objects back, so no thread hoards memory others could use.
 *
 * Bursts.  A class above 1 KiB refilled twice in a row, with no other
 * refill or overflow of the cache in between, is being taken in bulk (200
 * blocks of 4 KiB allocated, then freed): its max goes on growing past the
 * cap, a batch a refill, within TCACHE_BURST_BYTES for all such classes of
 * the cache together, so that the stack holds the whole burst when it
 * comes back and the next burst takes it without a lock.  In a program
 * that takes big objects among others (bench's sizemix), other classes'
 * slow events come between any two refills of a big class, and its cap
 * stands.  While a stack grown so overflows (a burst bigger than it), its
 * max stays.  It goes back to its cap, its objects beyond to the central
 * list, at the first budget check that finds the class neither refilled
 * nor overflowing for TCACHE_BUDGET_CHECK slow events (the program has
 * moved on); the budget itself counts what bursts grew on top.  200
 * blocks of 4 KiB allocated and freed took 38 instructions an operation,
 * against 193 with the cap; sizemix's cached bytes and peak resident
 * memory did not move.
 *
 * Idle stacks keep what they hold.  A stack that neither ran dry nor
 * overflowed for TCACHE_BUDGET_CHECK slow events is not trimmed (but for a
 * burst's growth).  Giving back half of every such stack at each budget
 * check, as jemalloc's cache GC gives back part of what went unused, made
 * peak resident memory worse, not better: sizemix's loop alone (10,000
 * live objects, 4,000,000 replacements, one thread) peaked at 9.2-9.4 MiB
 * as it is, 10.1-10.2 with every class trimmed so, 9.7-9.9 with classes
 * above 1 KiB alone (three runs each).  What a stack holds is memory the
 * program wrote and will be handed again, top first; what goes back to the
 * spans' bits comes out again lowest address first, among objects no one
 * ever wrote, and the next refills write fresh pages.  (At that peak the
 * stacks hold about 2.9 MiB, as much as the program's live objects:
 * 1.9 MiB of it in the classes of 8 KiB and more, two to four objects
 * each.)
 *
 * Many threads.  Only its own thread touches a cache, so what a thread
 * keeps when it stops allocating stays kept until it allocates again or
 * exits: with many threads, that is much memory no other thread can use.
 * Each stack is emptied by its thread alone, when it overflows or at a
 * budget check, and a thread whose bursts all fit its stacks never meets
 * either.  So with more than TCACHE_FEW_THREADS caches alive, what a
 * cache's stacks may hold is bounded instead: what their limits grew by
 * beyond their first ones (capacity_bytes: the sum of (max - first max) x
 * size) stays within TCACHE_ALL_BUDGET shared out among the caches, and
 * never under TCACHE_LEAST_CAPACITY.  A refill grows a stack only within
 * what is left (grow_for_refill), and a budget check that finds the limits
 * over it, as when more threads have started since, halves every stack as
 * the whole-cache budget does, so idle classes give their room back to
 * busy ones.  bench's idle_pool (64
 * threads in turn allocating and freeing 4,000 small objects, three times,
 * then waiting): peak resident 103 MB with each stack free to grow, 41 MB
 * bounded (jemalloc 37, tcmalloc 43, mimalloc 100, glibc 26).  A share of
 * 32 MiB left 75 MB, 16 MiB 54 MB, 4 MiB 35 MB; 8 MiB still leaves a
 * thread of 9 almost 1 MiB to grow by, and one of 64 a batch or two of a
 * few classes.  With few threads nothing changes.
 *
 * Lock: registry_lock (LOCK_RANK_TCACHES) guards the registry and the list of
 * records to reuse.  A cache's stacks are touched only by their thread.
 *
 * Slots.  Each class's stack starts in TCACHE_SMALL_SLOTS slots of the
 * record itself (tier 0; 6.1 KiB for all classes: enough for a stack's
 * first two refills).  When a stack's max must grow past them (refill),
 * the stack moves to slots of its own: TCACHE_MID_SLOTS of them (tier 1,
 * 512 bytes), then, if it grows past those too, its class's cap (tier 2,
 * up to 16 KiB).  Own slots come from a pool per class and tier, or are
 * mapped; the slots a stack leaves for a bigger tier, and all of them
 * when the thread exits, go back to their pool for the next stack that
 * grows into them.  Only the slots a stack reaches are ever touched.  So
 * a thread that caches a few objects of each class (bench's churn; most of
 * test_storms' thousands of threads) holds no more than its record and a
 * few hundred bytes a class, the slots mapped are the most that threads
 * held at once, and a program whose busy threads come and go (bench's
 * larson) maps them once.  Unmapping slots at each thread's exit instead
 * (a mapping, its page faults and an unmap per busy thread) made
 * larson/threads=2, whose threads come and go with each run, 1.12 times
 * the linked lists' time, against 0.80 reused (paired medians of 5 rounds
 * on the 2-core VM).  Keeping them with the record, all classes' in one
 * 304 KiB mapping, made test_storms' stats.metadata grow by 304 KiB each
 * time one more record had a thread outgrow its small slots; going
 * straight to the cap, 16 KiB for the smallest classes, mapped 1.9 MiB of
 * slots for its storm of short threads (0.75 MiB of growth after its
 * warm-up, with SA_DEBUG); and the record's own slots are few because its
 * size is paid once for each of the most threads alive at once.
 */
#include "tcache.h"

#include <stddef.h>
#include <string.h>

#include "central.h"
#include "conf.h"
#include "lock.h"
#include "log.h"
#include "meta.h"
#include "os.h"
#include "pageheap.h"
#include "pagemap.h"
#include "span.h"

/* Per-class cap on cached bytes: small classes are capped by count (whose
 * slots must span less than 64 KiB: tcache.h).  Classes above
 * TCACHE_BIG_CLASS keep at most TCACHE_BIG_CLASS_BYTES, a batch's worth: a
 * program allocates few of them between two frees, and each stack held up
 * to 256 KiB of them idle, which the central list could not give to
 * anyone.  In bench's sizemix/live=100000 (15% of objects between 1 and 64
 * KiB) the smaller cap left 1.05 MiB less resident after 4.5M operations. */
#define TCACHE_CLASS_BYTES ((size_t)256 << 10)
#define TCACHE_CLASS_MAX_OBJECTS 2048u
#define TCACHE_BIG_CLASS 1024u
#define TCACHE_BIG_CLASS_BYTES ((size_t)64 << 10)
_Static_assert(TCACHE_CLASS_MAX_OBJECTS * sizeof(void *) < 65536,
               "a class's slots span less than 64 KiB (tcache.h)");
_Static_assert(SA_NUM_CLASSES <= 256, "tc->last_refill holds a class");
/* Whole-cache budget and how often it is checked (in slow-path events). */
#define TCACHE_BUDGET ((size_t)4 << 20)
#define TCACHE_BUDGET_CHECK 64u
/* Many threads (above): up to TCACHE_FEW_THREADS caches, no bound. */
#define TCACHE_FEW_THREADS 8u
#define TCACHE_ALL_BUDGET ((size_t)8 << 20)
#define TCACHE_LEAST_CAPACITY ((size_t)64 << 10)
/* A new stack's max, and so its first refill: doubles on each refill up to
 * the class's batch, then grows a batch at a time. */
#define TCACHE_INITIAL_MAX 4u
/* Overflows tolerated before a stack's max shrinks by one batch. */
#define TCACHE_MAX_OVERFLOWS 3
/* What an owner's inbox of a class holds at most (tcache.h): up to
 * INBOX_MAX_BATCHES batches, so that a producer's refill finds its
 * consumer's last few batches there rather than in the central list
 * (prodcons/64: 2 batches were 10% slower than going through the central
 * list, 8 to 32 about 10% faster), within INBOX_BYTES, which bounds what a
 * thread that stops allocating a class leaves stranded there (until it
 * exits, or malloc_trim).  More go to the central list. */
#define INBOX_MAX_BATCHES 8u
#define INBOX_BYTES ((size_t)32 << 10)

SA_BSS_APART struct tcache tcache_empty;

/* The last class cached (tcache_set_max_size): classes above it are
 * uncached in every thread (tcache.h). */
static unsigned last_cached_class = SA_NUM_CLASSES - 1;
size_t tcache_max_cached_size = SA_MAX_SMALL;
unsigned tcache_cached_classes = SA_NUM_CLASSES - 1;

void tcache_set_max_size(size_t bytes)
{
    unsigned last = 0;
    while (last + 1 < SA_NUM_CLASSES && sizeclass_size(last + 1) <= bytes)
        last++;
    __atomic_store_n(&last_cached_class, last, __ATOMIC_RELAXED);
    tcache_max_cached_size = sizeclass_size(last); /* class 0's size is 0 */
    tcache_cached_classes = last;
}

/* Whether `tc` caches objects of `cls`: its thread's cache is on and the
 * class is not above tcache_max. */
static bool caches_class(const struct tcache *tc, unsigned cls)
{
    return !tc->uncached && cls <= __atomic_load_n(&last_cached_class, __ATOMIC_RELAXED);
}

static sa_lock_t registry_lock = SA_LOCK_INITIALIZER(LOCK_RANK_TCACHES);
static struct tcache *registry; /* live caches */
static struct tcache *spare;    /* records of exited threads, linked by next */
static uint32_t records_made;   /* numbers records for their owner tags */
static uint32_t live_caches;    /* in the registry; written under its lock, read racily */

unsigned tcache_live_count(void) { return __atomic_load_n(&live_caches, __ATOMIC_RELAXED); }

size_t tcache_capacity_bound(void)
{
    uint32_t n = __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
    if (n <= TCACHE_FEW_THREADS)
        return SIZE_MAX;
    size_t share = TCACHE_ALL_BUDGET / n;
    return share > TCACHE_LEAST_CAPACITY ? share : TCACHE_LEAST_CAPACITY;
}

/* The n-th byte with exactly four bits set, n taken modulo their number,
 * 70: no such byte is a subset of another, which free()'s one-test owner
 * check relies on (tcache.h).  Live threads have distinct tags up to 70
 * records (records are reused); beyond that a shared tag only lets two
 * threads reuse each other's objects, as every thread could without tags. */
static unsigned next_owner_tag(void)
{
    uint32_t n = __atomic_fetch_add(&records_made, 1, __ATOMIC_RELAXED) % 70;
    for (unsigned tag = 0;; tag++)
        if (__builtin_popcount(tag) == 4 && n-- == 0)
            return tag;
}

uint32_t tcache_class_cap(unsigned cls)
{
    size_t size = sizeclass_size(cls);
    size_t cap = (size > TCACHE_BIG_CLASS ? TCACHE_BIG_CLASS_BYTES : TCACHE_CLASS_BYTES) / size;
    if (cap > TCACHE_CLASS_MAX_OBJECTS)
        cap = TCACHE_CLASS_MAX_OBJECTS;
    if (cap < sizeclass_batch(cls))
        cap = sizeclass_batch(cls);
    return (uint32_t)cap;
}

static bool big_class(unsigned cls) { return sizeclass_size(cls) > TCACHE_BIG_CLASS; }

/* A new stack's max (TCACHE_INITIAL_MAX, at most a batch). */
static uint32_t first_max(unsigned cls)
{
    uint32_t batch = sizeclass_batch(cls);
    return TCACHE_INITIAL_MAX < batch ? TCACHE_INITIAL_MAX : batch;
}

/* The max a stack of `cls` starts with in `tc` (or starts again with, as
 * its cache goes on): first_max, or 0 for a class it does not cache. */
static uint32_t start_max(const struct tcache *tc, unsigned cls)
{
    return caches_class(tc, cls) ? first_max(cls) : 0;
}

/* The first class above TCACHE_BIG_CLASS. */
static unsigned first_big_class(void) { return sizeclass_of(TCACHE_BIG_CLASS + 1); }

/* The most a stack of `cls` ever holds: its cap, or for a big class what
 * a burst may grow it to. */
static uint32_t burst_cap(unsigned cls)
{
    uint32_t cap = tcache_class_cap(cls);
    if (!big_class(cls))
        return cap;
    size_t burst = cap + TCACHE_BURST_BYTES / sizeclass_size(cls);
    return (uint32_t)(burst < TCACHE_CLASS_MAX_OBJECTS ? burst : TCACHE_CLASS_MAX_OBJECTS);
}

/* What the stack of `cls` may hold beyond its cap, in bytes: a burst's
 * growth (see Bursts, above). */
static size_t extra_bytes(const struct tcache_bin *bin, unsigned cls)
{
    if (!big_class(cls))
        return 0;
    uint32_t max = tcache_bin_max(bin), cap = tcache_class_cap(cls);
    return max > cap ? (size_t)(max - cap) * bin->size : 0;
}

/* What a limit of `max` on the stack of `cls` adds to the cache's
 * capacity_bytes: the bytes it grew by beyond the stack's first limit
 * (every class starts with one; most are never used). */
static size_t grown_bytes(unsigned cls, uint32_t max)
{
    uint32_t first = first_max(cls);
    return max > first ? (size_t)(max - first) * sizeclass_size(cls) : 0;
}

/* tcache_bin_set_max, keeping tc->burst_bytes and tc->capacity_bytes. */
static void set_max(struct tcache *tc, unsigned cls, uint32_t max)
{
    struct tcache_bin *bin = &tc->bins[cls];
    size_t before = extra_bytes(bin, cls), grown = grown_bytes(cls, tcache_bin_max(bin));
    tcache_bin_set_max(bin, max);
    tc->burst_bytes = tc->burst_bytes - before + extra_bytes(bin, cls);
    tc->capacity_bytes = tc->capacity_bytes - grown + grown_bytes(cls, tcache_bin_max(bin));
}

/* How many slots a stack of `cls` has in each tier (see Slots, above). */
static uint32_t tier_slots(unsigned cls, unsigned tier)
{
    uint32_t cap = burst_cap(cls);
    uint32_t n = tier == 0 ? TCACHE_SMALL_SLOTS : tier == 1 ? TCACHE_MID_SLOTS : cap;
    return n < cap ? n : cap;
}

/* Slots of tiers 1 and 2 that no thread holds, per class, linked through
 * their first slot (under registry_lock): an exited thread's, or those a
 * stack left for a bigger tier, for the next stack that grows into them. */
static void **class_slots_pool[SA_NUM_CLASSES][2];

/* Slots of `tier` (1 or 2) for a stack of `cls`: from the pool, else newly
 * mapped; NULL with ENOMEM. */
static void **class_slots_take(unsigned cls, unsigned tier)
{
    sa_lock(&registry_lock);
    void **slots = class_slots_pool[cls][tier - 1];
    if (slots)
        class_slots_pool[cls][tier - 1] = slots[0];
    sa_unlock(&registry_lock);
    return slots ? slots : meta_alloc(tier_slots(cls, tier) * sizeof(void *), SA_CACHELINE);
}

/* Under registry_lock: slots of `tier` (1 or 2) that no stack uses any more,
 * back to their pool. */
static void class_slots_give_locked(unsigned cls, unsigned tier, void **slots)
{
    slots[0] = class_slots_pool[cls][tier - 1];
    class_slots_pool[cls][tier - 1] = slots;
}

/* Points the empty stack of `cls` at `base`, with limit `max`. */
static void bin_place(struct tcache_bin *bin, void **base, uint32_t max)
{
    bin->top = base;
    bin->empty_bits = (uint16_t)(uintptr_t)base;
    tcache_bin_set_max(bin, max);
}

/* The most objects the stack of `cls` has slots for where it is now. */
static uint32_t bin_slots(const struct tcache *tc, unsigned cls)
{
    return tier_slots(cls, tc->slots_tier[cls]);
}

/* Gives the stack of `cls` slots for `max` objects (at most the class's
 * cap): moves it, with what it holds, to the first tier with room for
 * them if its slots are too few, and gives the slots it leaves, if its
 * own, back to their pool.  Returns how many it has slots for, fewer than
 * `max` only if mapping them failed. */
static uint32_t bin_make_room(struct tcache *tc, unsigned cls, uint32_t max)
{
    uint32_t have = bin_slots(tc, cls);
    if (max <= have)
        return max;
    unsigned from = tc->slots_tier[cls], to = from;
    do
        to++;
    while (to < 2 && tier_slots(cls, to) < max);
    void **base = class_slots_take(cls, to);
    if (!base)
        return have;
    struct tcache_bin *bin = &tc->bins[cls];
    void **old = tcache_bin_base(bin);
    uint32_t n = tcache_bin_count(bin);
    memcpy(base, old, n * sizeof(void *));
    bin_place(bin, base, tcache_bin_max(bin));
    bin->top = base + n;
    tc->slots_tier[cls] = (uint8_t)to;
    if (from > 0) {
        sa_lock(&registry_lock);
        class_slots_give_locked(cls, from, old);
        sa_unlock(&registry_lock);
    }
    return max;
}

struct tcache *tcache_create(void)
{
    sa_lock(&registry_lock);
    struct tcache *tc = spare;
    if (tc)
        spare = tc->next;
    sa_unlock(&registry_lock);
    unsigned tag;
    if (tc) {
        tag = tc->owner_tag; /* the record keeps its tag */
    } else {
        if (!(tc = meta_alloc(sizeof(*tc), SA_CACHELINE)))
            return NULL;
        tag = next_owner_tag();
    }
    memset(tc, 0, offsetof(struct tcache, incarnation)); /* 0 in a fresh record */
    tc->owner_tag = (uint8_t)tag;
    tc->foreign_owners = (uint8_t)~tag;
    tc->uncached = !opt_tcache;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        struct tcache_bin *bin = &tc->bins[cls];
        bin->size = (uint32_t)sizeclass_size(cls);
        bin_place(bin, tc->small_slots[cls], start_max(tc, cls));
    }

    sa_lock(&registry_lock);
    tc->next = registry;
    if (registry)
        registry->prev = tc;
    registry = tc;
    __atomic_store_n(&live_caches, live_caches + 1, __ATOMIC_RELAXED);
    sa_unlock(&registry_lock);
    return tc;
}

/* Gives the top `n` objects of the stack of `cls` (the last freed) to the
 * central list, as they lie: no object read or written.  `giver`: the
 * cache's generation word while it goes on taking (central_free_batch),
 * NULL when it is emptied for good (thread exit, malloc_trim, a flush the
 * program asked for): its objects are then for other threads. */
static void flush_bin(struct tcache *tc, unsigned cls, uint32_t n, const uint32_t *giver)
{
    struct tcache_bin *bin = &tc->bins[cls];
    if (n == 0)
        return;
    bin->top -= n;
    tc->dealloc_adjust += (uint64_t)n * sizeclass_size(cls); /* left the stack, not popped */
    central_free_batch(cls, bin->top, n, giver);
}

/* The live cache that owns the span of `obj` (a small object out of its
 * span), or NULL if it has none or its thread is gone.  The span's owner
 * fields are written under its class's lock by whoever takes objects from
 * it; read here without it, they may be a moment old, or from two
 * different takers.  Either way they name a cache record, and records are
 * never freed: at worst the chain goes to a thread that is not the span's
 * owner now, which costs affinity, not correctness (any cache may hold any
 * free object of the class), or to one that has just exited, whose inbox
 * its record's next thread or malloc_trim takes. */
static struct tcache *span_owner(const void *obj)
{
    const struct span *s = pagemap_span(obj);
    const uint32_t *gen = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
    uint32_t value = __atomic_load_n(&s->owner_gen, __ATOMIC_RELAXED);
    if (!gen || __atomic_load_n(gen, __ATOMIC_RELAXED) != value)
        return NULL;
    return (struct tcache *)((const char *)gen - offsetof(struct tcache, incarnation));
}

/* Objects an inbox of class `cls` holds at most: they must fit in the
 * stack the owner's refill puts them on. */
static uint32_t inbox_cap(unsigned cls)
{
    uint32_t batch = sizeclass_batch(cls), n = INBOX_MAX_BATCHES * batch;
    uint32_t fit = (uint32_t)(INBOX_BYTES / sizeclass_size(cls)), cap = tcache_class_cap(cls);
    if (n > fit)
        n = fit > batch ? fit : batch;
    return n < cap ? n : cap;
}

/* Pushes `n` objects of class `cls`, chained from head to tail, onto the
 * inbox of `owner` (one compare-and-swap, the release that publishes their
 * links); false, and nothing changed, if that would put more than
 * inbox_cap() objects there. */
static bool inbox_push(struct tcache *owner, unsigned cls, void *head, void *tail, uint32_t n)
{
    uint64_t *box = &owner->inbox[cls], old = __atomic_load_n(box, __ATOMIC_RELAXED), word;
    do {
        uint32_t count = tcache_inbox_count(old) + n;
        if (count > inbox_cap(cls))
            return false;
        *(void **)tail = tcache_inbox_head(old);
        word = (uint64_t)count << SA_ADDRESS_BITS | (uintptr_t)head;
    } while (!__atomic_compare_exchange_n(box, &old, word, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
    return true;
}

/* Takes everything in the inbox of `cls` of `tc` (any thread may): how many
 * objects, chained from *head and ending in NULL. */
static uint32_t inbox_take(struct tcache *tc, unsigned cls, void **head)
{
    uint64_t *box = &tc->inbox[cls];
    if (__atomic_load_n(box, __ATOMIC_RELAXED) == 0) /* no write to a line others push to */
        return 0;
    uint64_t word = __atomic_exchange_n(box, 0, __ATOMIC_ACQUIRE);
    *head = tcache_inbox_head(word);
    return tcache_inbox_count(word);
}

/* Gives the inbox of `cls` of `tc` to the central list. */
static void inbox_drain(struct tcache *tc, unsigned cls)
{
    void *head;
    uint32_t n = inbox_take(tc, cls, &head);
    if (n)
        central_free_chain(cls, head, n);
}

/* Gives the remote chain of `cls` to its owner's inbox, or else to the
 * central list. */
static void flush_remote(struct tcache *tc, unsigned cls)
{
    struct tcache_remote *r = &tc->remote[cls];
    if (r->count == 0)
        return;
    tc->dealloc_adjust += (uint64_t)r->count * sizeclass_size(cls); /* as flush_bin */
    struct tcache *owner = span_owner(r->head);
    if (!owner || !inbox_push(owner, cls, r->head, r->tail, r->count))
        central_free_chain(cls, r->head, r->count);
    r->head = NULL;
    __atomic_store_n(&r->count, 0, __ATOMIC_RELAXED); /* stats read it racily */
}

void tcache_remote_free(struct tcache *tc, unsigned cls, void *obj, unsigned tag)
{
    struct tcache_remote *r = &tc->remote[cls];
    if (r->count && r->tag != tag)
        flush_remote(tc, cls); /* one owner a chain */
    if (r->count == 0) {
        r->tail = obj;
        r->tag = (uint8_t)tag;
    }
    *(void **)obj = r->head;
    r->head = obj;
    __atomic_store_n(&r->count, r->count + 1, __ATOMIC_RELAXED); /* stats read it racily */
    if (r->count >= sizeclass_batch(cls))
        flush_remote(tc, cls);
}

static void put_uncached(struct tcache *tc, unsigned cls, void *obj);

void tcache_put(struct tcache *tc, unsigned cls, void *obj)
{
    if (unlikely(!caches_class(tc, cls))) {
        put_uncached(tc, cls, obj);
        return;
    }
    unsigned tag = pagemap_owner_of(obj);
    if (tag & tc->foreign_owners)
        tcache_remote_free(tc, cls, obj, tag); /* another live thread's */
    else if (!tcache_bin_full(&tc->bins[cls]))
        tcache_bin_push(&tc->bins[cls], obj);
    else
        tcache_overflow(tc, cls, obj);
}

void tcache_flush_all(struct tcache *tc)
{
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        flush_bin(tc, cls, tcache_bin_count(&tc->bins[cls]), NULL);
        flush_remote(tc, cls);
        inbox_drain(tc, cls);
    }
}

void tcache_drain_all_inboxes(void)
{
    sa_lock(&registry_lock); /* ranks before the central locks */
    struct tcache *lists[] = {registry, spare};
    for (unsigned i = 0; i < 2; i++)
        for (struct tcache *tc = lists[i]; tc; tc = tc->next)
            for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
                inbox_drain(tc, cls);
    sa_unlock(&registry_lock);
}

/* The record's thread is gone: spans it owned become anyone's. */
static void end_incarnation(struct tcache *tc)
{
    __atomic_store_n(&tc->incarnation, tc->incarnation + 1, __ATOMIC_RELAXED);
}

void tcache_destroy(struct tcache *tc)
{
    tcache_flush_all(tc);
    end_incarnation(tc);
    /* What was pushed before the end.  A push that found the owner alive
     * just before it may still land later: the record's next thread, or
     * malloc_trim, takes that. */
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
        inbox_drain(tc, cls);
    sa_lock(&registry_lock);
    if (tc->prev)
        tc->prev->next = tc->next;
    else
        registry = tc->next;
    __atomic_store_n(&live_caches, live_caches - 1, __ATOMIC_RELAXED);
    if (tc->next)
        tc->next->prev = tc->prev;
    tc->next = spare;
    spare = tc;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
        if (tc->slots_tier[cls] > 0) /* its stack is empty */
            class_slots_give_locked(cls, tc->slots_tier[cls], tcache_bin_base(&tc->bins[cls]));
    sa_unlock(&registry_lock);
}

void tcache_set_cached(struct tcache *tc, bool cached)
{
    if (cached == !tc->uncached)
        return;
    if (!cached) {
        tcache_flush_all(tc);
        end_incarnation(tc); /* its spans become anyone's */
    }
    tc->uncached = !cached;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
        set_max(tc, cls, start_max(tc, cls)); /* off: burst_bytes back to 0 */
}

size_t tcache_cached_bytes(const struct tcache *tc)
{
    size_t bytes = 0;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
        bytes += (tcache_bin_count(&tc->bins[cls]) + tc->remote[cls].count) * sizeclass_size(cls);
    return bytes;
}

/* Modulo 2^64, as the counts: deallocated = allocated + cached bytes +
 * the adjustment (tcache.h). */
int64_t tcache_live_difference(const struct tcache *tc)
{
    return (int64_t)(0 - (tcache_cached_bytes(tc) + tc->dealloc_adjust));
}

uint64_t tcache_deallocated(const struct tcache *tc, uint64_t allocated)
{
    return allocated - (uint64_t)tcache_live_difference(tc);
}

/* The cache's event count as a class's stamp, and the events since one
 * (16 bits: struct tcache). */
static uint16_t stamp(const struct tcache *tc) { return (uint16_t)tc->events; }
static uint16_t events_since(const struct tcache *tc, uint16_t at)
{
    return (uint16_t)(stamp(tc) - at);
}

/* A big class's stack grown past its cap by a burst, neither refilled nor
 * overflowing for TCACHE_BUDGET_CHECK slow events, goes back to its cap. */
static void trim_bursts(struct tcache *tc)
{
    if (!tc->burst_bytes) /* no stack grown: the usual case */
        return;
    for (unsigned cls = first_big_class(); cls < SA_NUM_CLASSES; cls++) {
        struct tcache_bin *bin = &tc->bins[cls];
        uint32_t cap = tcache_class_cap(cls), count = tcache_bin_count(bin);
        if (tcache_bin_max(bin) <= cap || events_since(tc, tc->active_event[cls]) <= TCACHE_BUDGET_CHECK)
            continue;
        if (count > cap)
            flush_bin(tc, cls, count - cap, &tc->incarnation);
        set_max(tc, cls, cap);
    }
}

/* Every TCACHE_BUDGET_CHECK slow events: bursts over, trimmed; over
 * budget, or limits over the capacity bound (Many threads), every stack
 * halved. */
static void enforce_budget(struct tcache *tc)
{
    if (++tc->events % TCACHE_BUDGET_CHECK)
        return;
    /* The central lists' decay rides on the same count: a clock read
     * every TCACHE_BUDGET_CHECK slow events, no lock held. */
    if (!pageheap_decay_in_background())
        central_decay(os_now_ns());
    trim_bursts(tc);
    if (tcache_cached_bytes(tc) <= TCACHE_BUDGET + tc->burst_bytes &&
        tc->capacity_bytes <= tcache_capacity_bound())
        return;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        struct tcache_bin *bin = &tc->bins[cls];
        flush_bin(tc, cls, (tcache_bin_count(bin) + 1) / 2, &tc->incarnation);
        uint32_t batch = sizeclass_batch(cls);
        uint32_t max = tcache_bin_max(bin), half = max / 2; /* but not below a batch */
        set_max(tc, cls, half > batch ? half : max < batch ? max : batch);
    }
}

/* Debug builds: every stack of the cache, every 16th refill or overflow. */
static void debug_check(const struct tcache *tc)
{
    static unsigned visits;
    if (sa_debug_due(&visits, 16))
        tcache_check(tc);
}

/* Of `n` objects chained from `head`, gives those after the first `keep`
 * to the central list; returns how many it gave. */
static uint32_t give_back_after(unsigned cls, void *head, uint32_t keep, uint32_t n)
{
    void *last = head;
    for (uint32_t i = 1; i < keep; i++)
        last = *(void **)last;
    central_free_chain(cls, *(void **)last, n - keep);
    return n - keep;
}

/* The most the stack of big class `cls` may grow to at this refill: its
 * cap, or in a burst (see Bursts, above) what TCACHE_BURST_BYTES leaves
 * room for; never less than it has now (a burst's growth stays until a
 * budget check trims it). */
static uint32_t big_class_limit(struct tcache *tc, unsigned cls)
{
    uint32_t max = tcache_bin_max(&tc->bins[cls]), cap = tcache_class_cap(cls);
    bool burst = tc->last_refill == cls;
    tc->active_event[cls] = stamp(tc);
    uint32_t limit = max > cap ? max : cap;
    if (burst) {
        size_t used = tc->burst_bytes, size = sizeclass_size(cls);
        size_t room = used < TCACHE_BURST_BYTES ? (TCACHE_BURST_BYTES - used) / size : 0;
        uint32_t most = burst_cap(cls);
        limit = room < most - limit ? limit + (uint32_t)room : most;
    }
    return limit;
}

/* How far the stack of `cls`, now limited to `now`, may grow with many
 * threads (see Many threads): to `grown` if the cache's capacity bound has
 * room for it, else as far as it has. */
static uint32_t within_capacity(const struct tcache *tc, unsigned cls, uint32_t now,
                                uint32_t grown)
{
    size_t bound = tcache_capacity_bound();
    if (bound == SIZE_MAX || grown <= now)
        return grown;
    size_t room = bound > tc->capacity_bytes ? (bound - tc->capacity_bytes) / sizeclass_size(cls) : 0;
    return grown - now <= room ? grown : now + (uint32_t)room;
}

/* The stack's next limit after a refill that brought `n` objects: grown
 * (slow start: doubled while under a batch, then a batch more), within the
 * class's cap (or a big class's limit in a burst) and the cache's capacity
 * bound, at least n - 1; and slots for it (fewer if there is no memory to
 * map them). */
static uint32_t grow_for_refill(struct tcache *tc, unsigned cls, uint32_t n)
{
    uint32_t now = tcache_bin_max(&tc->bins[cls]), max = now, batch = sizeclass_batch(cls);
    uint32_t cap = big_class(cls) ? big_class_limit(tc, cls) : tcache_class_cap(cls);
    if (n - 1 > max)
        max = n - 1;
    uint32_t grown = max < batch ? max * 2 : max + batch;
    grown = within_capacity(tc, cls, now, grown < cap ? grown : cap);
    return bin_make_room(tc, cls, grown > max ? grown : max); /* an inbox's n - 1 fit */
}

/* Refills the empty stack of `cls` from its inbox (objects of this
 * thread's own spans that other threads freed, whole): how many objects,
 * the first returned in *obj, the others on the stack (0: none there). */
static uint32_t refill_from_inbox(struct tcache *tc, unsigned cls, void **obj)
{
    struct tcache_bin *bin = &tc->bins[cls];
    void *head;
    uint32_t n = inbox_take(tc, cls, &head);
    if (n == 0)
        return 0;
    uint32_t max = grow_for_refill(tc, cls, n);
    if (n - 1 > max) /* no slots for them all (no memory to map them) */
        n -= give_back_after(cls, head, max + 1, n);
    /* The first object is the caller's, the second on top of the stack,
     * so that they are handed out in the chain's order. */
    void **base = bin->top, **slot = base + (n - 1);
    for (void *o = head; slot > base;)
        *--slot = o = *(void **)o;
    bin->top = base + (n - 1);
    set_max(tc, cls, max);
    *obj = head;
    return n;
}

/* tcache_refill of an uncached thread: one object, from the central list
 * straight to the caller, taken as an anonymous owner (tcache.h). */
static void *refill_uncached(struct tcache *tc, unsigned cls)
{
    inbox_drain(tc, cls); /* what a remote free pushed as the cache went off */
    void *obj;
    if (!central_alloc_batch(cls, 1, (struct central_owner){NULL, 0, 0}, &obj))
        return NULL;
    tc->dealloc_adjust -= sizeclass_size(cls); /* as a refill's */
    enforce_budget(tc);                        /* the decay clock */
    return obj;
}

/* tcache_put of an uncached thread: the object straight back to the
 * central list, whoever's span it is in. */
static void put_uncached(struct tcache *tc, unsigned cls, void *obj)
{
    tc->dealloc_adjust += sizeclass_size(cls); /* freed, and on no stack: as flush_bin */
    central_free_one(cls, obj);
    enforce_budget(tc);
}

void *tcache_refill(struct tcache *tc, unsigned cls)
{
    struct tcache_bin *bin = &tc->bins[cls];
    if (unlikely(!caches_class(tc, cls)))
        return refill_uncached(tc, cls);
    void *obj;
    uint32_t n = refill_from_inbox(tc, cls, &obj);
    if (n == 0) {
        /* Slow start: fetch max objects (it starts small), so a short-lived
         * thread that wants one object does not take a whole batch out of
         * everyone's reach.  They land on the stack as they come (stack
         * order, central.h), the top one the caller's (a user malloc, in
         * thread.allocated, or a proxy, which says so). */
        struct central_owner me = {&tc->incarnation, tc->incarnation, tc->owner_tag};
        uint32_t batch = sizeclass_batch(cls), want = tcache_bin_max(bin);
        if (want > batch)
            want = batch;
        uint32_t max = grow_for_refill(tc, cls, 1); /* slots for want: max >= want */
        n = central_alloc_batch(cls, want, me, bin->top);
        if (n == 0)
            return NULL;
        bin->top += n - 1;
        obj = *bin->top;
        set_max(tc, cls, max);
    }
    tc->dealloc_adjust -= (uint64_t)n * sizeclass_size(cls);
    tc->last_refill = (uint8_t)cls;
    enforce_budget(tc);
    debug_check(tc);
    return obj;
}

void tcache_overflow(struct tcache *tc, unsigned cls, void *obj)
{
    struct tcache_bin *bin = &tc->bins[cls];
    uint32_t batch = sizeclass_batch(cls), count = tcache_bin_count(bin);
    flush_bin(tc, cls, count < batch ? count : batch, &tc->incarnation);
    tcache_bin_push(bin, obj); /* the flush made room */
    tc->last_refill = 0;
    uint32_t max = tcache_bin_max(bin);
    if (tc->burst_bytes && big_class(cls) && max > tcache_class_cap(cls)) {
        /* A burst bigger than the stack: what it holds, it keeps until the
         * burst is over (trim_bursts). */
        tc->active_event[cls] = stamp(tc);
    } else if (++tc->overflows[cls] >= TCACHE_MAX_OVERFLOWS) {
        tc->overflows[cls] = 0;
        if (max > batch)
            set_max(tc, cls, max - batch);
    }
    enforce_budget(tc);
    debug_check(tc);
}

size_t tcache_all_cached_bytes(void)
{
    size_t bytes = 0;
    sa_lock(&registry_lock);
    /* Racy reads of other threads' counts: a statistic, not a decision. */
    for (struct tcache *tc = registry; tc; tc = tc->next)
        for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
            /* top and empty_bits of a stack caught moving to its own slots
             * belong to two places: the cap bounds that moment's error. */
            struct tcache_bin bin = {
                __atomic_load_n(&tc->bins[cls].top, __ATOMIC_RELAXED),
                __atomic_load_n(&tc->bins[cls].empty_bits, __ATOMIC_RELAXED), 0, 0};
            uint32_t n = tcache_bin_count(&bin), cap = burst_cap(cls);
            uint32_t remote = __atomic_load_n(&tc->remote[cls].count, __ATOMIC_RELAXED);
            bytes += ((n < cap ? n : cap) + remote) * sizeclass_size(cls);
        }
    struct tcache *lists[] = {registry, spare}; /* an exited thread's inbox may hold some */
    for (unsigned i = 0; i < 2; i++)
        for (struct tcache *tc = lists[i]; tc; tc = tc->next)
            for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
                bytes += tcache_inbox_count(__atomic_load_n(&tc->inbox[cls], __ATOMIC_RELAXED)) *
                         sizeclass_size(cls);
    sa_unlock(&registry_lock);
    return bytes;
}

void tcache_check(const struct tcache *tc)
{
    for (unsigned cls = 0; cls < SA_NUM_CLASSES; cls++) {
        const struct tcache_bin *bin = &tc->bins[cls];
        uint32_t count = tcache_bin_count(bin), max = tcache_bin_max(bin);
        const void *base = tcache_bin_base(bin);
        /* Tiers 1 and 2: in class_slots_take()'s, which no record names. */
        bool placed = tc->slots_tier[cls] == 0
                          ? base == tc->small_slots[cls]
                          : base != tc->small_slots[cls] && (uintptr_t)base % SA_CACHELINE == 0;
        if (bin->size != sizeclass_size(cls) ||
            (cls == 0 ? bin->top || bin->empty_bits || bin->full_bits
                      : !placed || (uint16_t)(uintptr_t)base != bin->empty_bits ||
                            count > max || max > bin_slots(tc, cls)))
            sa_fatal("tcache: stack of class %u holds %u objects, max %u, top %p", cls, count,
                     max, (void *)bin->top);
        for (uint32_t i = 0; i < count; i++)
            if (pagemap_class_of(bin->top[-1 - (int)i]) != cls)
                sa_fatal("tcache: stack of class %u holds %p, not an object of its class", cls,
                         bin->top[-1 - (int)i]);
        const struct tcache_remote *r = &tc->remote[cls];
        uint32_t n = 0;
        for (void *o = r->head; o; o = *(void **)o)
            if (++n > r->count)
                break;
        if (n != r->count || (cls != 0 && r->count >= sizeclass_batch(cls)))
            sa_fatal("tcache: remote chain of class %u holds %u objects, count %u", cls, n,
                     r->count);
    }
    size_t extra = 0, capacity = 0;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        extra += extra_bytes(&tc->bins[cls], cls);
        capacity += grown_bytes(cls, tcache_bin_max(&tc->bins[cls]));
    }
    if (extra != tc->burst_bytes || extra > TCACHE_BURST_BYTES)
        sa_fatal("tcache: bursts grew the stacks by %zu bytes, counted %zu", extra,
                 tc->burst_bytes);
    if (capacity != tc->capacity_bytes)
        sa_fatal("tcache: the stacks' limits hold %zu bytes, counted %zu", capacity,
                 tc->capacity_bytes);
}

void tcache_prefork(void) { sa_lock(&registry_lock); }
void tcache_postfork_parent(void) { sa_unlock(&registry_lock); }

void tcache_postfork_child(struct tcache *self)
{
    sa_lock_reinit(&registry_lock);
    for (struct tcache *tc = registry; tc; tc = tc->next)
        if (tc != self) /* that thread did not come along */
            end_incarnation(tc);
    registry = NULL;
    live_caches = 0;
    if (self) {
        self->next = self->prev = NULL;
        registry = self;
        live_caches = 1;
    }
}
