/*
 * background.h: opt.background_thread (jemalloc's name): one thread of
 * salloc's own that runs decay on a timer.
 *
 * Without it, freed memory is handed back to the kernel only when the
 * allocator is used again (the page heap, sampled_pages.c and the sample
 * spares each check their decay as they are used): a program that frees a
 * large heap and then waits keeps it resident until its next allocation.
 * With it, that decay runs every decay step (pageheap_decay_step_ns, at
 * least BACKGROUND_MIN_INTERVAL_NS), and the allocating threads no longer
 * run it at all (pageheap_decay_in_background), so their malloc and free
 * never stop for a purge's madvise.
 *
 * The thread never allocates and holds no allocator lock while it sleeps.
 * It is started
 *   - by a write of true to mallctl "background_thread", or
 *   - under opt.background_thread, once the first thread cache is made
 *     (background_poll, from init_thread_cache: the process's first malloc
 *     or mallctl), not during set-up itself, which pthread_create (it
 *     allocates) would re-enter;
 * and stopped (and joined) by a write of false.  A child of fork() starts
 * without it, as jemalloc's does: "background_thread" reads false there
 * until written again.
 */
#ifndef SA_BACKGROUND_H
#define SA_BACKGROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* The shortest sleep between two runs: a decay time of a few milliseconds
 * must not have the thread spin. */
#define BACKGROUND_MIN_INTERVAL_NS ((uint64_t)10 * 1000 * 1000)
/* The sleep when nothing decays on a timer (dirty_decay_ms 0 or -1); a new
 * decay time wakes the thread sooner (background_decay_changed). */
#define BACKGROUND_IDLE_INTERVAL_NS ((uint64_t)1000 * 1000 * 1000)

/* Set-up is done: under opt.background_thread, the next background_poll()
 * starts the thread. */
void background_boot(void);

extern bool background_start_pending; /* atomic */
void background_start_deferred(void);

/* When a thread cache has just been made, with no allocator lock held. */
static inline void background_poll(void)
{
    if (unlikely(__atomic_load_n(&background_start_pending, __ATOMIC_RELAXED)))
        background_start_deferred();
}

/* mallctl "background_thread": starts or stops (and joins) the thread.
 * 0, or EAGAIN if the thread could not be created. */
int background_set(bool on);
bool background_get(void);

/* The decay time changed (mallctl): a sleeping thread wakes and sleeps
 * again for the new step, so that a shorter decay time holds at once
 * instead of after the old step (up to 1 s). */
void background_decay_changed(void);

struct background_stats {
    size_t num_threads; /* 0 or 1 */
    uint64_t num_runs;  /* decay passes since the thread last started */
    uint64_t run_interval_ns; /* mean time between two passes, 0 before two */
};
void background_get_stats(struct background_stats *st);

/* The decay interval the thread sleeps for a decay time of `decay_ms`. */
uint64_t background_interval_ns(long decay_ms);

void background_prefork(void);
void background_postfork_parent(void);
void background_postfork_child(void);

#endif
