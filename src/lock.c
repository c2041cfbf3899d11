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

void lock_rank_release(enum lock_rank rank)
{
    held_ranks &= ~(1u << rank);
}
