/*
 * prof_recent.h: the most recent sampled allocations, kept whole
 * (jemalloc's experimental.prof_recent.*): each one's size, time, thread and
 * stack, and, once it is freed, when, by which thread and from which stack.
 * A heap profile sums what is live by stack; this answers "what did the
 * last N samples look like, and which of them are gone", for a leak or a
 * spike seen just now.
 *
 * Off unless opt.prof_recent_alloc_max (or
 * experimental.prof_recent.alloc_max) says how many to keep: -1 for all,
 * 0 (the default) for none.  The oldest record goes first when the limit is
 * reached or lowered.  Records come from meta.c and are reused, never
 * returned; stacks are the stack table's, which live forever.
 *
 * A sample and its record point at each other (sample->recent, the
 * record's owner) under recent_lock only: the free of a sampled block
 * marks its record released, an eviction clears the sample's pointer, and
 * neither can then touch the other after it is gone.  Callers hold no
 * allocator lock; nothing here calls malloc.
 */
#ifndef SA_PROF_RECENT_H
#define SA_PROF_RECENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct prof_recent;
struct prof_stack;

/* How many records to keep (-1: all); read without the lock by the
 * sampling path to skip everything when it is 0. */
ssize_t prof_recent_max(void);
/* Sets it (opt.prof_recent_alloc_max at start-up, or the mallctl);
 * evicts the oldest records beyond it.  false (EINVAL) below -1. */
bool prof_recent_set_max(ssize_t max);

/* A new sample of `usable` bytes from `stack`, taken by the thread named
 * `thread` (may be ""): recorded, and *owner pointed at its record, if
 * records are kept.  *owner must be NULL. */
void prof_recent_alloc(struct prof_recent **owner, size_t usable, struct prof_stack *stack,
                       const char *thread);
/* Whether the sample whose record pointer is *owner has a record (a hint
 * without the lock: only an eviction clears it, and then the free just
 * finds nothing). */
bool prof_recent_has(struct prof_recent *const *owner);
/* The sample's block is being freed, from `free_stack` (NULL if none could
 * be taken): its record, if it still has one, says so; *owner is cleared. */
void prof_recent_release(struct prof_recent **owner, struct prof_stack *free_stack);

/* experimental.prof_recent.alloc_dump: the records, oldest first, as
 * jemalloc's JSON, through write_cb (standard error if NULL).  Copies them
 * under the lock, writes them without it (write_cb may allocate).  false
 * if no memory could be mapped for the copy. */
bool prof_recent_dump(void (*write_cb)(void *, const char *), void *cbopaque);

/* fork.c, through prof.c. */
void prof_recent_prefork(void);
void prof_recent_postfork_parent(void);
void prof_recent_postfork_child(void);

#endif
