/*
 * lock.c: the slow paths of both locks (lock.h): the futex lock's spin and
 * sleep, the polled lock's spin, yield and nap.  And debug-build
 * lock-order checking (see lock.h for the order): a per-thread bitmask of
 * held ranks; taking a rank not above every held rank is a lock-order
 * violation and aborts.
 */
#include "lock.h"

#include "log.h"
#include "os.h"

__thread bool sa_in_fork __attribute__((tls_model("initial-exec")));

static __thread unsigned held_ranks __attribute__((tls_model("initial-exec")));

void lock_rank_acquire(enum lock_rank rank)
{
    if (sa_in_fork) /* every rank held, by the prepare handler */
        return;
    if (held_ranks >> rank)
        sa_fatal("lock order violation: taking rank %d while holding mask 0x%x",
                 (int)rank, held_ranks);
    held_ranks |= 1u << rank;
}

/* salloc's critical sections are short (a batch moved, a span split):
 * the holder is usually done within a few hundred cycles, far less than
 * a futex sleep and wake-up cost both threads.  So watch the lock word
 * (read without writing it, so the holder's line is not pulled away) for
 * a while, and sleep only after that. */
#define LOCK_SPINS 200

/* True if `l` was taken within LOCK_SPINS looks. */
static bool spin_for(sa_lock_t *l)
{
    for (unsigned i = 0; i < LOCK_SPINS; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (__atomic_load_n(&l->word, __ATOMIC_RELAXED) == LOCK_FREE && sa_lock_try(l))
            return true;
    }
    return false;
}

void sa_lock_contended(sa_lock_t *l)
{
    if (sa_in_fork) /* this thread's prepare handler holds it (lock.h) */
        return;
    if (spin_for(l))
        return;
    /* Sleep, marking the word so the holder's unlock wakes someone.  A
     * thread that gets the lock this way leaves the mark: another may
     * still sleep, and a wake-up too many costs only a system call. */
    while (__atomic_exchange_n(&l->word, LOCK_HELD_WAITERS, __ATOMIC_ACQUIRE) != LOCK_FREE)
        os_futex_wait(&l->word, LOCK_HELD_WAITERS);
}

/* A polled lock's waiter is never woken, so after spinning it yields (the
 * holder may be waiting for this CPU), then naps, each nap twice the last
 * up to POLL_NAP_MAX_NS: a dump holding a shard for milliseconds is not
 * polled thousands of times, and a waiter is late by at most one nap. */
#define POLL_YIELDS 8
#define POLL_NAP_MIN_NS 20000u
#define POLL_NAP_MAX_NS 1000000u

void sa_polled_lock_contended(sa_polled_lock_t *p)
{
    if (sa_in_fork)
        return;
    sa_lock_t *l = &p->lock;
    uint64_t nap = POLL_NAP_MIN_NS;
    for (unsigned round = 0; !spin_for(l); round++) {
        if (round < POLL_YIELDS) {
            os_yield();
        } else {
            os_nap_ns(nap);
            nap = nap * 2 < POLL_NAP_MAX_NS ? nap * 2 : POLL_NAP_MAX_NS;
        }
    }
}

void sa_lock_wake(sa_lock_t *l)
{
    os_futex_wake_one(&l->word);
}

void lock_rank_release(enum lock_rank rank)
{
    if (sa_in_fork)
        return;
    held_ranks &= ~(1u << rank);
}
