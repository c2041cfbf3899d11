/*
 * central.h: per size class, the spans that still have free objects, and
 * batches of objects moved to and from thread caches.
 *
 * One lock per class (LOCK_RANK_CENTRAL); a thread never holds two.  Under
 * it this layer may call the page heap (a new span, or an empty one given
 * back).  Objects travel as chains linked through their first word, so a
 * batch costs one lock round trip whatever its length.
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

/* Takes up to `want` (>= 1) objects of class `cls` for `owner`: returns how
 * many, chained from *head through word 0 with *tail the last (its word 0
 * is undefined).  Returns 0 only when the page heap is out of memory (errno
 * ENOMEM). */
unsigned central_alloc_batch(unsigned cls, unsigned want, struct central_owner owner,
                             void **head, void **tail);

/* Gives back `n` objects of class `cls` chained from `head` through word 0
 * to `tail` (whose link is ignored). */
void central_free_batch(unsigned cls, void *head, void *tail, unsigned n);

/* opt.check: what the central list knows of `obj`, a pointer into a small
 * span of class `cls`: handed out (in a thread cache or in use), free in
 * its span, never carved yet, or not at an object's start (then *start is
 * the object it is inside). */
enum central_object { OBJECT_OUT, OBJECT_FREE, OBJECT_NEVER, OBJECT_INSIDE };
enum central_object central_object_state(unsigned cls, const void *obj, const void **start);

/* How many transfer chains class `cls` keeps at most (central.c): batches
 * given back whole, handed out again as they are.  0 for the classes that
 * keep to their owners' spans. */
unsigned central_xfer_slots(unsigned cls);

/* Gives every class's transfer chains back to their spans and its kept
 * empty span back to the page heap (malloc_trim). */
void central_release_empty(void);

/* For the small object `obj`: the bytes of its span not holding a live
 * object (free objects, transfer chains' included, never-carved room, the
 * tail) and how many objects are out.  False if `obj` is not in a small span.  Takes the class lock. */
bool central_span_usage(const void *obj, size_t *free_bytes, unsigned *allocated);

struct central_stats {
    size_t spans;     /* small spans owned by the class */
    size_t allocated; /* objects out of the central list (caches + user) */
};
void central_get_stats(unsigned cls, struct central_stats *st);

/* Checks every span of the class (tests, SA_DEBUG): counts, free lists
 * inside the span, list membership.  Aborts on the first broken one. */
void central_check(unsigned cls);

/* fork.c: all class locks in class order, and back. */
void central_prefork(void);
void central_postfork_parent(void);
void central_postfork_child(void);

#endif
