/*
 * central.h: per size class, the spans that still have free objects, and
 * batches of objects moved to and from thread caches.
 *
 * One lock per class (LOCK_RANK_CENTRAL); a thread never holds two.  Under
 * it this layer may call the page heap (a new span, or an empty one given
 * back).  A batch costs one lock round trip whatever its length.
 *
 * Batches travel as arrays of pointers in stack order: objs[n - 1] is the
 * top, the most recently freed and the first handed out again, so that a
 * thread cache's stack gives and takes them as they lie.
 */
#ifndef SA_CENTRAL_H
#define SA_CENTRAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Who takes a batch, for span affinity (central.c): a word the owner
 * changes when it goes away (a thread cache's generation, bumped at thread
 * exit), its value now, and the owner tag its spans' pages get (pagemap.h;
 * tcache.h).  An owner with a NULL word is anonymous (tag 0). */
struct central_owner {
    const uint32_t *gen;
    uint32_t value;
    unsigned tag;
};

/* Takes up to `want` (>= 1) objects of class `cls` for `owner` into
 * out[0, n), stack order (above: out[n - 1] to be handed out first), and
 * returns n.  Returns 0 only when the page heap is out of memory (errno
 * ENOMEM). */
unsigned central_alloc_batch(unsigned cls, unsigned want, struct central_owner owner,
                             void **out);

/* Gives back objs[0, n) of class `cls`, stack order (objs[n - 1] the most
 * recently freed): a thread cache's flush.  `giver`: the giving cache's
 * generation word (its central_owner.gen when it takes), or NULL when the
 * cache is emptied for good. */
void central_free_batch(unsigned cls, void *const *objs, unsigned n, const uint32_t *giver);
/* Gives back one object of class `cls` freed where no cache takes it (an
 * uncached thread, or one with no cache): not a flush. */
void central_free_one(unsigned cls, void *obj);

/* Gives back `n` objects of class `cls` chained from `head` through word 0
 * (remote frees and owner inboxes, tcache.c), to their spans. */
void central_free_chain(unsigned cls, void *head, unsigned n);

/* opt.check: what the central list knows of `obj`, a pointer into a small
 * span of class `cls`: handed out (in a thread cache or in use), free in
 * its span, never handed out yet, or not at an object's start (then *start is
 * the object it is inside). */
enum central_object { OBJECT_OUT, OBJECT_FREE, OBJECT_NEVER, OBJECT_INSIDE };
enum central_object central_object_state(unsigned cls, const void *obj, const void **start);

/* How many objects the transfer cache of class `cls` holds at most
 * (central.c): free objects given back, handed out again as they are.  0
 * for the classes that keep to their owners' spans. */
unsigned central_xfer_capacity(unsigned cls);

/* The slots all classes' transfer caches share (tests: the capacities'
 * sum must fit). */
unsigned central_xfer_store_slots(void);

/* Gives every class's transfer cache back to its spans (malloc_trim);
 * the spans that empties go to the page heap. */
void central_release_xfer(void);

/* At most once a decay step (pageheap_decay_step_ns), whoever calls it:
 * gives back to their spans the objects each class's transfer cache held
 * through the decay time (dirty_decay_ms).  `now`: os_now_ns().  Takes the
 * class locks in turn: call it holding none. */
void central_decay(uint64_t now);

/* For the small object `obj`: the bytes of its span not holding a live
 * object (free objects, the transfer cache's and those never handed out
 * included, the tail) and how many objects are out.  False if `obj` is not in a
 * small span.  Takes the class lock. */
bool central_span_usage(const void *obj, size_t *free_bytes, unsigned *allocated);

struct central_stats {
    size_t spans;     /* small spans owned by the class */
    size_t allocated; /* objects out of the central list (caches + user) */
    /* Since start-up (jemalloc's bins.<j>.nmalloc, .ndalloc, .nslabs):
     * objects handed out of the central list and given back to it, a
     * thread cache's batches object by object; spans taken from the page
     * heap. */
    uint64_t nmalloc, ndalloc, nslabs;
    /* Batches taken by thread caches and given back by them (flushes,
     * remote chains); spans on the partial list now (not full). */
    uint64_t nfills, nflushes;
    size_t nonfull;
};
void central_get_stats(unsigned cls, struct central_stats *st);

/* Checks every span of the class (tests, SA_DEBUG): counts against the
 * free bits, list membership, the transfer cache.  Aborts on the first
 * broken one. */
void central_check(unsigned cls);

/* fork.c: all class locks in class order, and back. */
void central_prefork(void);
void central_postfork_parent(void);
void central_postfork_child(void);

#endif
