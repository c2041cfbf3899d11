/*
 * lock.h: salloc's mutex and the one place that states the lock order.
 * The mutex is a futex word, taken with one compare-and-swap inline; a
 * lock another thread holds is watched for a while before the thread
 * sleeps in the kernel (lock.c).
 *
 * Every lock has a rank; a thread may only take a lock of a higher rank than
 * any it already holds.  Debug builds check this on every acquire (a
 * per-thread bitmask of held ranks), so an inversion fails loudly in tests
 * instead of deadlocking in production.
 *
 * Order (take top first):
 *   LOCK_RANK_CTL       mallctl's statistics snapshot (ctl.c); taken
 *                       before reading every layer below
 *   LOCK_RANK_INIT      bootstrap (init.c)
 *   LOCK_RANK_TCACHES   the list of all thread caches (tcache.c)
 *   LOCK_RANK_DUMP      one dump at a time (prof.c); held while the dump
 *                       takes the sample and stack shards one by one
 *   LOCK_RANK_PEAK      the peak snapshot (prof.c); held while it copies
 *                       the sample shards one by one
 *   LOCK_RANK_RECENT    the recent samples' records (prof_recent.c); takes
 *                       only meta.c's under it
 *   LOCK_RANK_SAMPLES   one per shard of the live-sample lists (prof.c)
 *   LOCK_RANK_STACKS    one per shard of the stack table (stack.c)
 *   LOCK_RANK_SAMPLED_PAGES  the cache of sampled mappings (sampled_pages.c)
 *   LOCK_RANK_QUARANTINE  freed guarded samples waiting to be unmapped
 *                       (guard.c)
 *   LOCK_RANK_CENTRAL   one per size class (central.c); never two at once
 *   LOCK_RANK_PAGEHEAP  the page heap and pagemap writers (pageheap.c)
 *   LOCK_RANK_META      salloc's metadata chunks (meta.c)
 *
 * The lock never allocates, parks waiters in the kernel instead of spinning
 * for long on a 2-core machine, and fork.c can reset it in a child.  It is
 * not glibc's pthread mutex because a sample takes two locks and a refill
 * or flush one: glibc's trylock and unlock are calls of about 55
 * instructions together, through the mutex's type and elision checks,
 * where a lock word needs one locked instruction each way.
 */
#ifndef SA_LOCK_H
#define SA_LOCK_H

#include "util.h"

enum lock_rank {
    LOCK_RANK_CTL = 1,
    LOCK_RANK_INIT,
    LOCK_RANK_TCACHES,
    LOCK_RANK_DUMP,
    LOCK_RANK_PEAK,
    LOCK_RANK_RECENT,
    LOCK_RANK_SAMPLES,
    LOCK_RANK_STACKS,
    LOCK_RANK_SAMPLED_PAGES,
    LOCK_RANK_QUARANTINE,
    LOCK_RANK_CENTRAL,
    LOCK_RANK_PAGEHEAP,
    LOCK_RANK_META,
};

/* The word: a futex (int), as in Drepper's "Futexes Are Tricky", mutex 2. */
enum { LOCK_FREE, LOCK_HELD, LOCK_HELD_WAITERS /* someone may sleep on it */ };

typedef struct sa_lock {
    int word;
    enum lock_rank rank;
} sa_lock_t;

#define SA_LOCK_INITIALIZER(r) { LOCK_FREE, (r) }

/* True on a thread that is forking, from the end of salloc's prepare
 * handler to the start of its parent or child handler (fork.c), while the
 * thread holds every lock.  Other programs' and libraries' atfork handlers
 * run then, in an order salloc does not choose (it registers its handlers
 * at its first allocation, after any registered before), and one that
 * allocates would wait for a lock its own thread holds.  So that thread's
 * locks and unlocks pass through: what they guard is its alone, and no
 * other thread changes it until salloc's handlers release the locks. */
extern __thread bool sa_in_fork __attribute__((tls_model("initial-exec")));

/* Debug-only bookkeeping of the ranks this thread holds (lock.c). */
void lock_rank_acquire(enum lock_rank rank);
void lock_rank_release(enum lock_rank rank);

/* A lock taken by another thread: spin a while, then sleep (lock.c). */
void sa_lock_contended(sa_lock_t *l);
/* Wakes one thread sleeping on `l` (lock.c). */
void sa_lock_wake(sa_lock_t *l);

/* Takes `l` if it is free: one compare-and-swap. */
static inline bool sa_lock_try(sa_lock_t *l)
{
    int expected = LOCK_FREE;
    return __atomic_compare_exchange_n(&l->word, &expected, LOCK_HELD, false, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

/* Takes `l` without rank bookkeeping: for the prefork handlers, which take
 * every lock of one rank at once (see the order above). */
static inline void sa_lock_unranked(sa_lock_t *l)
{
    if (unlikely(!sa_lock_try(l)))
        sa_lock_contended(l);
}

static inline void sa_unlock_unranked(sa_lock_t *l)
{
    if (unlikely(sa_in_fork)) /* taken by the prepare handler: kept */
        return;
    if (unlikely(__atomic_exchange_n(&l->word, LOCK_FREE, __ATOMIC_RELEASE) == LOCK_HELD_WAITERS))
        sa_lock_wake(l);
}

static inline void sa_lock(sa_lock_t *l)
{
    if (SA_DEBUG)
        lock_rank_acquire(l->rank);
    sa_lock_unranked(l);
}

static inline void sa_unlock(sa_lock_t *l)
{
    sa_unlock_unranked(l);
    if (SA_DEBUG)
        lock_rank_release(l->rank);
}

/* Takes `l` if it is free (released with sa_unlock); false if not. */
static inline bool sa_trylock(sa_lock_t *l)
{
    if (!sa_lock_try(l))
        return false;
    if (SA_DEBUG)
        lock_rank_acquire(l->rank);
    return true;
}

/* After fork(), in the child: the lock was held by the forking thread (in
 * fork.c's prepare handler), and no other thread exists to wake: free it. */
static inline void sa_lock_reset_unranked(sa_lock_t *l)
{
    __atomic_store_n(&l->word, LOCK_FREE, __ATOMIC_RELAXED);
}

static inline void sa_lock_reinit(sa_lock_t *l)
{
    sa_lock_reset_unranked(l);
    if (SA_DEBUG)
        lock_rank_release(l->rank);
}

/* ---- the polled lock ----
 *
 * The same word and ranks, but its unlock is a plain store: a thread that
 * cannot take it by spinning yields, then naps and looks again, so no
 * waiter ever needs waking and the unlock need not read the word.  The
 * exchange it saves is a full barrier, and it waits for every store of the
 * critical section to drain first: a sample holds a shard's lock twice,
 * and the two exchanges cost it about 10 ns of 88 (20M 64 KiB pairs).
 *
 * The price is latency when the lock is held for long: a napping waiter
 * gets it up to a nap (at most POLL_NAP_MAX_NS, lock.c) after it is free.
 * So only for locks rarely waited for and held briefly, unless by a rare
 * reader (a heap dump copying a shard): the sample shards. */
typedef struct sa_polled_lock {
    sa_lock_t lock;
} sa_polled_lock_t;

#define SA_POLLED_LOCK_INITIALIZER(r) { SA_LOCK_INITIALIZER(r) }

/* The polled lock taken by another thread: spin, yield, then nap (lock.c). */
void sa_polled_lock_contended(sa_polled_lock_t *p);

static inline void sa_polled_lock_unranked(sa_polled_lock_t *p)
{
    if (unlikely(!sa_lock_try(&p->lock)))
        sa_polled_lock_contended(p);
}

static inline void sa_polled_unlock_unranked(sa_polled_lock_t *p)
{
    if (unlikely(sa_in_fork))
        return;
    __atomic_store_n(&p->lock.word, LOCK_FREE, __ATOMIC_RELEASE);
}

/* After fork(), in the child: as sa_lock_reset_unranked. */
static inline void sa_polled_lock_reset_unranked(sa_polled_lock_t *p)
{
    sa_lock_reset_unranked(&p->lock);
}

static inline void sa_polled_lock(sa_polled_lock_t *p)
{
    if (SA_DEBUG)
        lock_rank_acquire(p->lock.rank);
    sa_polled_lock_unranked(p);
}

static inline void sa_polled_unlock(sa_polled_lock_t *p)
{
    sa_polled_unlock_unranked(p);
    if (SA_DEBUG)
        lock_rank_release(p->lock.rank);
}

#endif
