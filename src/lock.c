/*
 * lock.c: debug-build lock-order checking (see lock.h for the order).
 * A per-thread bitmask of held ranks; taking a rank not above every held
 * rank is a lock-order violation and aborts.
 */
#include "lock.h"

#include "log.h"
#include "os.h"

static __thread unsigned held_ranks __attribute__((tls_model("initial-exec")));

void lock_rank_acquire(enum lock_rank rank)
{
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

void sa_lock_contended(sa_lock_t *l)
{
    for (unsigned i = 0; i < LOCK_SPINS; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (__atomic_load_n(&l->word, __ATOMIC_RELAXED) == LOCK_FREE && sa_lock_try(l))
            return;
    }
    /* Sleep, marking the word so the holder's unlock wakes someone.  A
     * thread that gets the lock this way leaves the mark: another may
     * still sleep, and a wake-up too many costs only a system call. */
    while (__atomic_exchange_n(&l->word, LOCK_HELD_WAITERS, __ATOMIC_ACQUIRE) != LOCK_FREE)
        os_futex_wait(&l->word, LOCK_HELD_WAITERS);
}

void sa_lock_wake(sa_lock_t *l)
{
    os_futex_wake_one(&l->word);
}

void lock_rank_release(enum lock_rank rank)
{
    held_ranks &= ~(1u << rank);
}
