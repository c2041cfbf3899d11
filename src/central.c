/*
 * central.c: the central free lists (see central.h).
 *
 * Each class keeps a doubly linked "partial" list of its spans that have at
 * least one free object: objects returned to the span (span->freelist) or
 * never yet carved (span->carved < objects per span: carving is lazy, so a
 * fresh span costs resident memory only as it is used).  Full spans are on
 * no list; the pagemap finds them when an object comes back.  A span whose
 * objects have all come back goes to the page heap, except that one such
 * empty span per class is kept, so a program hovering at a span boundary
 * does not map and unmap it on every batch.
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
 * kept empty span or a new one, and only when the heap has no memory left
 * from anyone's.  A thread then keeps to spans of its own, as mimalloc's
 * thread-owned pages do, at the price of a partly used span per class and
 * thread.
 *
 * The pages of such a span carry its owner's tag (pagemap.h), so that
 * free() sends another live thread's objects back to their owner (tcache.h,
 * remote frees and owner inboxes), or here when the owner is gone or its
 * inbox full, instead of letting the freeing thread reuse them.
 *
 * Transfer chains.  A batch given back whole goes to the spans one object
 * at a time: a pagemap lookup, a push onto its span's list, and for a
 * class of a few objects per span often a span emptied and given to the
 * page heap, which the next batch taken maps and carves again.  So a class
 * above AFFINITY_MAX_SIZE (whose spans have no owner) keeps up to
 * central_xfer_slots() chains given back as they came, at most a batch each, and
 * hands them out again as they are, as tcmalloc's transfer cache does: a
 * thread that frees what another allocates (larson, producer and consumer)
 * moves a batch with one lock hold and no object touched.  The objects of a
 * kept chain are free but still out of their spans (span->allocated counts
 * them), so their spans stay; malloc_trim gives them back to their spans
 * (central_release_empty), and the cap is XFER_BYTES a class (one batch,
 * 64 KiB, above 1 KiB objects).
 */
#include "central.h"

#include <limits.h>

#include "lock.h"
#include "log.h"
#include "pageheap.h"
#include "pagemap.h"
#include "sizeclass.h"

/* A chain of free objects given back whole, linked through word 0. */
struct xfer_chain {
    void *head, *tail;
    unsigned count;
};

/* Chains a class keeps at most, and the bytes they may hold together:
 * XFER_BYTES, or XFER_BIG_CLASS_BYTES (one batch) for classes above
 * XFER_BIG_CLASS.  Chains serve threads that free what others allocate
 * (larson, producer and consumer: objects up to 1 KiB in bench); of bigger
 * classes a program moves few, and two batches of each class kept idle
 * left 0.65 MiB more resident in bench's sizemix/live=100000 after 4.5M
 * operations, where nothing crosses threads. */
#define XFER_MAX_SLOTS 8
#define XFER_BYTES ((size_t)128 << 10)
#define XFER_BIG_CLASS 1024u
#define XFER_BIG_CLASS_BYTES ((size_t)64 << 10)

struct central {
    sa_lock_t lock;
    struct span *partial; /* spans with free objects, most recently used first */
    struct span *empty;   /* one span with no object out, kept for reuse */
    size_t spans;         /* small spans owned by the class, empty one included */
    size_t allocated;     /* objects handed out (not those in its chains) */
    unsigned nxfer;       /* transfer chains kept, in xfers[class] */
} SA_ALIGNED(SA_CACHELINE);

/* Statically initialised (a GNU range initialiser) so that the very first
 * malloc, whoever makes it, needs no set-up step. */
static struct central centrals[SA_NUM_CLASSES] = {
    [0 ... SA_NUM_CLASSES - 1] = {.lock = SA_LOCK_INITIALIZER(LOCK_RANK_CENTRAL)},
};

/* Each class's transfer chains, the last the most recent; under its lock.
 * Apart from centrals (initialised, so .data) so that they are zero-fill,
 * placed after the small variables (SA_BSS_APART). */
SA_BSS_APART static struct xfer_chain xfers[SA_NUM_CLASSES][XFER_MAX_SLOTS];

static struct central *central_of(unsigned cls) { return &centrals[cls]; }

static void partial_push(struct central *c, struct span *s)
{
    s->prev = NULL;
    s->next = c->partial;
    if (c->partial)
        c->partial->prev = s;
    c->partial = s;
    s->on_list = 1;
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
}

/* Partial spans looked at for one of the taker's own before a new span. */
#define AFFINITY_SCAN 16

/* A span to take objects from: the kept empty one, or a new one. */
static struct span *span_for_alloc(struct central *c, unsigned cls)
{
    struct span *s = c->empty;
    if (s) {
        c->empty = NULL;
    } else {
        s = pageheap_alloc(sizeclass_pages(cls), 1, cls, NULL);
        if (!s)
            return NULL;
        c->spans++;
    }
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

/* Transfer chains (above) a class may keep: as many batches as fit in
 * XFER_BYTES, or one in XFER_BIG_CLASS_BYTES for the classes above
 * XFER_BIG_CLASS (none for the largest, where a batch of two objects is
 * more than that and moving it costs little next to using it), and none
 * for classes that keep to their owners' spans (a chain mixes anyone's
 * objects). */
unsigned central_xfer_slots(unsigned cls)
{
    size_t size = sizeclass_size(cls);
    if (size <= AFFINITY_MAX_SIZE)
        return 0;
    size_t cap = size > XFER_BIG_CLASS ? XFER_BIG_CLASS_BYTES : XFER_BYTES;
    size_t n = cap / (size * sizeclass_batch(cls));
    return n > XFER_MAX_SLOTS ? XFER_MAX_SLOTS : (unsigned)n;
}

/* Under the lock: up to `want` objects from the most recent chain, chained
 * from *first to *last; how many. */
static unsigned xfer_take(struct central *c, unsigned cls, unsigned want, void **first,
                          void **last)
{
    struct xfer_chain *x = &xfers[cls][c->nxfer - 1];
    *first = x->head;
    if (x->count <= want) {
        *last = x->tail;
        c->nxfer--;
        return x->count;
    }
    void *end = x->head;
    for (unsigned i = 1; i < want; i++)
        end = *(void **)end;
    *last = end;
    x->head = *(void **)end;
    x->count -= want;
    return want;
}

/* Under the lock: keeps `n` objects chained from head to tail as a chain
 * if the class has a slot for it; false if not. */
static bool xfer_keep(struct central *c, unsigned cls, void *head, void *tail, unsigned n)
{
    if (n > sizeclass_batch(cls) || c->nxfer >= central_xfer_slots(cls))
        return false;
    xfers[cls][c->nxfer++] = (struct xfer_chain){head, tail, n};
    return true;
}

/* Debug builds: the class's spans and lists, every 16th batch of the
 * class (no lock held: central_check takes the class's). */
static void debug_check(unsigned cls)
{
    static unsigned batches[SA_NUM_CLASSES];
    if (sa_debug_due(&batches[cls], 16))
        central_check(cls);
}

/* Debug builds: a span's free list as long as its counts say, checked
 * before the list is handed out whole on their word (a miscount would
 * otherwise surface later, as a thread cache's refill reading past the
 * chain's end). */
static void check_listed(const struct span *s, unsigned listed)
{
    unsigned n = 0;
    for (const void *o = s->freelist; o && n <= listed; o = *(void *const *)o)
        n++;
    if (n != listed)
        sa_fatal("central: span %p's free list holds %s%u objects, its counts say %u",
                 (void *)s->start, n > listed ? "more than " : "", n > listed ? listed : n,
                 listed);
}

unsigned central_alloc_batch(unsigned cls, unsigned want, struct central_owner owner,
                             void **head, void **tail)
{
    struct central *c = central_of(cls);
    size_t size = sizeclass_size(cls);
    unsigned nobjs = sizeclass_objects(cls), got = 0;
    void *first = NULL, *last = NULL;

    sa_lock(&c->lock);
    if (c->nxfer)
        got = xfer_take(c, cls, want, &first, &last);
    while (got < want) {
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
        /* A span whose returned objects all fit in the batch gives its
         * whole list at once, without reading their links: each was written
         * by the thread that freed the object, often on another core, and
         * reading them one after the other was a cache miss each (larson:
         * half the time of this function). */
        unsigned listed = s->carved - s->allocated;
        if (s->freelist && listed <= want - got) {
            if (SA_DEBUG)
                check_listed(s, listed);
            if (got == 0)
                first = s->freelist;
            else
                *(void **)last = s->freelist;
            last = s->free_tail;
            got += listed;
            s->allocated += listed;
            s->freelist = NULL;
        }
        /* Chained in the order taken, so a fresh span's objects go out
         * in ascending address order, as consecutive allocations then lie
         * (the program's own walks over them, and the prefetchers, like
         * that: cxx_workload about 1.5% faster than chained the other way). */
        while (got < want) {
            void *obj = s->freelist;
            if (obj)
                s->freelist = *(void **)obj;
            else if (s->carved < nobjs)
                obj = (void *)(s->start + size * s->carved++);
            else
                break;
            if (got++ == 0)
                first = obj;
            else
                *(void **)last = obj;
            last = obj;
            s->allocated++;
        }
        if (!s->freelist && s->carved == nobjs)
            partial_remove(c, s);
    }
    c->allocated += got;
    sa_unlock(&c->lock);
    *head = first;
    *tail = last;
    debug_check(cls);
    return got;
}

/* Called with the lock held when the last object of `s` came back. */
static void span_emptied(struct central *c, struct span *s)
{
    partial_remove(c, s);
    struct span *old = c->empty;
    c->empty = s;
    if (old) {
        c->spans--;
        pageheap_free(old);
    }
}

/* Under the lock: a run of `len` objects of span `s`, chained from first
 * to last, onto the span's list whole (only last's link rewritten). */
static void return_run(struct central *c, struct span *s, void *first, void *last, unsigned len)
{
    if (!s->freelist)
        s->free_tail = last;
    *(void **)last = s->freelist;
    s->freelist = first;
    s->allocated -= len;
    if (!s->on_list)
        partial_push(c, s);
    if (s->allocated == 0)
        span_emptied(c, s);
}

/* Under the lock: `n` objects chained from `head` back into their spans.
 *
 * Objects of one span often lie next to each other in the chain (freed in
 * the order they were allocated; a consumer's remote frees of what a
 * producer took in one batch): such a run goes onto its span's list whole,
 * as it is chained.  (prodcons/64: 45 objects a run; cxx_workload and
 * sizemix 1.7-1.8.)
 *
 * The chain is read RETURN_GROUP objects at a time.  A first pass follows
 * the links and, for each object, looks up its span record and prefetches
 * it (an object in the page of the one before it skips the lookup): only
 * the links wait on each other, not the records.  A second pass pushes the
 * runs.  Done object after object, each record's load waited on the link
 * before it and the loop's branch on the record: after a program frees at
 * random across a large heap the records are cold, and that wait was 10.7%
 * of phase's profile (perf, 300,000 objects a build), 5.3% grouped.  A
 * run's span keeps its record while the run is open across groups: the
 * run's objects are still counted out of it. */
#define RETURN_GROUP 32

static void return_to_spans(struct central *c, unsigned cls, void *head, unsigned n)
{
    void *objs[RETURN_GROUP];
    struct span *spans[RETURN_GROUP];
    struct span *run = NULL;
    void *first = NULL, *last = NULL;
    unsigned len = 0;
    while (n) {
        unsigned k = n < RETURN_GROUP ? n : RETURN_GROUP;
        n -= k;
        for (unsigned i = 0; i < k; i++) {
            void *obj = head;
            head = *(void **)obj;
            objs[i] = obj;
            if (i && ((uintptr_t)obj ^ (uintptr_t)objs[i - 1]) >> SA_PAGE_SHIFT == 0) {
                spans[i] = spans[i - 1];
            } else {
                spans[i] = pagemap_span(obj);
                __builtin_prefetch(spans[i], 1);
            }
        }
        for (unsigned i = 0; i < k; i++) {
            if (spans[i] == run) {
                last = objs[i];
                len++;
                continue;
            }
            if (run)
                return_run(c, run, first, last, len);
            run = spans[i];
            SA_ASSERT(run && run->state == SPAN_SMALL && run->cls == cls);
            first = last = objs[i];
            len = 1;
        }
    }
    if (run)
        return_run(c, run, first, last, len);
}

void central_free_batch(unsigned cls, void *head, void *tail, unsigned n)
{
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    if (!xfer_keep(c, cls, head, tail, n))
        return_to_spans(c, cls, head, n);
    c->allocated -= n; /* kept in a chain or back in the spans: not out */
    sa_unlock(&c->lock);
    debug_check(cls);
}

/* Under the lock: every kept chain back into its spans. */
static void xfer_drain(struct central *c, unsigned cls)
{
    while (c->nxfer) {
        struct xfer_chain *x = &xfers[cls][--c->nxfer];
        return_to_spans(c, cls, x->head, x->count);
    }
}

void central_release_empty(void)
{
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        struct central *c = central_of(cls);
        sa_lock(&c->lock);
        xfer_drain(c, cls);
        struct span *s = c->empty;
        c->empty = NULL;
        if (s) {
            c->spans--;
            pageheap_free(s);
        }
        sa_unlock(&c->lock);
    }
}

/* Whether `obj` is among the first `n` objects of the chain from `head`. */
static bool chain_holds(const void *head, unsigned n, const void *obj)
{
    for (const void *o = head; o && n--; o = *(void *const *)o)
        if (o == obj)
            return true;
    return false;
}

/* Under the lock: whether `obj` is in one of the class's transfer chains. */
static bool xfer_holds(const struct central *c, unsigned cls, const void *obj)
{
    for (unsigned i = 0; i < c->nxfer; i++)
        if (chain_holds(xfers[cls][i].head, xfers[cls][i].count, obj))
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
    else if (chain_holds(s->freelist, UINT_MAX, obj) || xfer_holds(c, cls, obj))
        state = OBJECT_FREE;
    sa_unlock(&c->lock);
    return state;
}

/* Under the lock: how many objects of the class's transfer chains are in
 * span `s` (out of it, but free). */
static unsigned xfer_objects_in(const struct central *c, unsigned cls, const struct span *s)
{
    unsigned n = 0;
    uintptr_t end = span_end(s);
    for (unsigned i = 0; i < c->nxfer; i++) {
        const void *o = xfers[cls][i].head;
        for (unsigned k = 0; k < xfers[cls][i].count; k++, o = *(void *const *)o)
            n += (uintptr_t)o >= s->start && (uintptr_t)o < end;
    }
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
        *allocated = s->allocated - xfer_objects_in(c, cls, s);
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
    sa_unlock(&c->lock);
}

static size_t check_span(const struct span *s, unsigned cls)
{
    unsigned nobjs = sizeclass_objects(cls), nfree = 0;
    if (s->state != SPAN_SMALL || s->cls != cls || s->carved > nobjs)
        sa_fatal("central: span %p of class %u is corrupt", (void *)s->start, cls);
    for (void *o = s->freelist; o; o = *(void **)o) {
        uintptr_t off = (uintptr_t)o - s->start;
        if ((uintptr_t)o < s->start || off % sizeclass_size(cls) ||
            off / sizeclass_size(cls) >= s->carved || ++nfree > nobjs)
            sa_fatal("central: bad free object %p in span %p", o, (void *)s->start);
        if (!*(void **)o && o != s->free_tail)
            sa_fatal("central: span %p's free list ends at %p, not at its tail %p",
                     (void *)s->start, o, s->free_tail);
    }
    if (s->allocated + nfree != s->carved)
        sa_fatal("central: span %p counts %u out + %u free != %u carved",
                 (void *)s->start, s->allocated, nfree, s->carved);
    for (size_t p = 0; p < s->npages; p++)
        if (pagemap_class_of((void *)(s->start + (p << SA_PAGE_SHIFT))) != cls)
            sa_fatal("central: span %p page %zu has the wrong class", (void *)s->start, p);
    return s->allocated;
}

/* A transfer chain: count objects of the class, out of their spans, the
 * last its tail. */
static void check_chain(const struct xfer_chain *x, unsigned cls)
{
    const void *o = x->head;
    for (unsigned i = 0; i < x->count; i++) {
        const struct span *s = o ? pagemap_span(o) : NULL;
        if (!s || s->state != SPAN_SMALL || s->cls != cls ||
            ((uintptr_t)o - s->start) % sizeclass_size(cls) || s->allocated == 0)
            sa_fatal("central: bad object %p in a transfer chain of class %u", o, cls);
        if (i + 1 == x->count && o != x->tail)
            sa_fatal("central: transfer chain of class %u ends at %p, not its tail %p", cls,
                     o, x->tail);
        o = *(void *const *)o;
    }
}

void central_check(unsigned cls)
{
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    for (struct span *s = c->partial; s; s = s->next) {
        if (!s->on_list || (!s->freelist && s->carved == sizeclass_objects(cls)))
            sa_fatal("central: span %p on the partial list has no free object",
                     (void *)s->start);
        check_span(s, cls);
    }
    if (c->empty && (check_span(c->empty, cls) || c->empty->on_list))
        sa_fatal("central: kept empty span of class %u is not empty", cls);
    if (c->nxfer > central_xfer_slots(cls))
        sa_fatal("central: class %u keeps %u transfer chains", cls, c->nxfer);
    for (unsigned i = 0; i < c->nxfer; i++)
        check_chain(&xfers[cls][i], cls);
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
