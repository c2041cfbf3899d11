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
 * free() sends another live thread's objects back here (tcache.h, remote
 * frees) instead of letting the freeing thread reuse them.
 */
#include "central.h"

#include "lock.h"
#include "log.h"
#include "pageheap.h"
#include "pagemap.h"
#include "sizeclass.h"

struct central {
    sa_lock_t lock;
    struct span *partial; /* spans with free objects, most recently used first */
    struct span *empty;   /* one span with no object out, kept for reuse */
    size_t spans;         /* small spans owned by the class, empty one included */
    size_t allocated;     /* objects handed out */
} SA_ALIGNED(SA_CACHELINE);

/* Statically initialised (a GNU range initialiser) so that the very first
 * malloc, whoever makes it, needs no set-up step. */
static struct central centrals[SA_NUM_CLASSES] = {
    [0 ... SA_NUM_CLASSES - 1] = {.lock = SA_LOCK_INITIALIZER(LOCK_RANK_CENTRAL)},
};

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

/* Debug builds: the class's spans and lists, every 16th batch of the
 * class (no lock held: central_check takes the class's). */
static void debug_check(unsigned cls)
{
    static unsigned batches[SA_NUM_CLASSES];
    if (sa_debug_due(&batches[cls], 16))
        central_check(cls);
}

unsigned central_alloc_batch(unsigned cls, unsigned want, struct central_owner owner,
                             void **head, void **tail)
{
    struct central *c = central_of(cls);
    size_t size = sizeclass_size(cls);
    unsigned nobjs = sizeclass_objects(cls), got = 0;
    void *first = NULL, *last = NULL;

    sa_lock(&c->lock);
    while (got < want) {
        struct span *s = span_for(c, cls, owner);
        if (!s)
            break;
        if (size <= AFFINITY_MAX_SIZE) {
            s->owner = owner.gen;
            s->owner_gen = owner.value;
            unsigned tag = owner.gen ? owner.tag : 0;
            if (s->owner_tag != tag) {
                s->owner_tag = (uint8_t)tag;
                pagemap_set_owner_range(span_page(s), s->npages, tag);
            }
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

void central_free_batch(unsigned cls, void *head, unsigned n)
{
    struct central *c = central_of(cls);
    sa_lock(&c->lock);
    for (unsigned i = 0; i < n; i++) {
        void *obj = head;
        head = *(void **)obj;
        struct span *s = pagemap_span(obj);
        SA_ASSERT(s && s->state == SPAN_SMALL && s->cls == cls);
        *(void **)obj = s->freelist;
        s->freelist = obj;
        s->allocated--;
        if (!s->on_list)
            partial_push(c, s);
        if (s->allocated == 0)
            span_emptied(c, s);
    }
    c->allocated -= n;
    sa_unlock(&c->lock);
    debug_check(cls);
}

void central_release_empty(void)
{
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        struct central *c = central_of(cls);
        sa_lock(&c->lock);
        struct span *s = c->empty;
        c->empty = NULL;
        if (s) {
            c->spans--;
            pageheap_free(s);
        }
        sa_unlock(&c->lock);
    }
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
    else
        for (void *o = s->freelist; o; o = *(void **)o)
            if (o == obj) {
                state = OBJECT_FREE;
                break;
            }
    sa_unlock(&c->lock);
    return state;
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
        *allocated = s->allocated;
        *free_bytes = (s->npages << SA_PAGE_SHIFT) - s->allocated * sizeclass_size(cls);
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
    }
    if (s->allocated + nfree != s->carved)
        sa_fatal("central: span %p counts %u out + %u free != %u carved",
                 (void *)s->start, s->allocated, nfree, s->carved);
    for (size_t p = 0; p < s->npages; p++)
        if (pagemap_class_of((void *)(s->start + (p << SA_PAGE_SHIFT))) != cls)
            sa_fatal("central: span %p page %zu has the wrong class", (void *)s->start, p);
    return s->allocated;
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
