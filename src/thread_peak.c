/*
 * thread_peak.c: a thread's high-water mark of allocated minus deallocated
 * bytes (see thread_peak.h): tcache_live_difference() at each look.
 * Runs on the thread itself, in malloc's slow path or in mallctl: no
 * lock, no allocation.
 */
#include "thread_peak.h"

#include "sampler.h"
#include "tcache.h"

void thread_peak_observe(struct tcache *tc, size_t gain)
{
    /* With the stacks' bytes left out of tcache_live_difference (they
     * are never negative) the difference can only be larger: a look that
     * could not raise the mark even so skips the sum over every class.  A
     * thread past its peak, hovering below it, looks for a few
     * instructions. */
    int64_t bound = (int64_t)(0 - tc->dealloc_adjust) + (int64_t)gain - tc->prof.peak_base;
    if (bound <= tc->prof.peak_max)
        return;
    int64_t seen = tcache_live_difference(tc) + (int64_t)gain - tc->prof.peak_base;
    if (seen > tc->prof.peak_max)
        tc->prof.peak_max = seen;
}

/* From now on the thread looks every THREAD_PEAK_WINDOW bytes. */
static void start_tracking(struct tcache *tc)
{
    if (!tc->prof.peak_window)
        sampler_set_window(tc, THREAD_PEAK_WINDOW);
}

uint64_t thread_peak_read(struct tcache *tc)
{
    start_tracking(tc);
    thread_peak_observe(tc, 0);
    return (uint64_t)tc->prof.peak_max;
}

void thread_peak_reset(struct tcache *tc)
{
    start_tracking(tc);
    tc->prof.peak_base = tcache_live_difference(tc);
    tc->prof.peak_max = 0;
}
