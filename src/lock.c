/*
 * lock.c: debug-build lock-order checking (see lock.h for the order).
 * A per-thread bitmask of held ranks; taking a rank not above every held
 * rank is a lock-order violation and aborts.
 */
#include "lock.h"

#include "log.h"

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
 * (glibc's, read without writing it, so the holder's line is not pulled
 * away) for a while, and sleep in pthread_mutex_lock only after that. */
#define LOCK_SPINS 200

void sa_lock_contended(sa_lock_t *l)
{
    for (unsigned i = 0; i < LOCK_SPINS; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (__atomic_load_n(&l->mutex.__data.__lock, __ATOMIC_RELAXED) == 0 &&
            pthread_mutex_trylock(&l->mutex) == 0)
            return;
    }
    pthread_mutex_lock(&l->mutex);
}

void lock_rank_release(enum lock_rank rank)
{
    held_ranks &= ~(1u << rank);
}
