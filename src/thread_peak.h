/*
 * thread_peak.h: thread.peak.read and thread.peak.reset, jemalloc's
 * high-water mark of one thread's allocated minus deallocated bytes.
 *
 * The difference needs no counter of its own: thread.deallocated is
 * derived from the thread's cache (tcache.h), and allocated minus
 * deallocated comes out as minus (bytes on the cache's stacks + the
 * cache's adjustment), exact whenever the thread itself looks.  The peak
 * is the largest value seen at the looks.  A thread looks at its
 * sampler's window ends (sampler.h), which the fast path already has; a
 * thread that has asked for its peak gets a window of THREAD_PEAK_WINDOW
 * bytes, so that no more than that is allocated between two looks, and
 * the mark is never more than THREAD_PEAK_WINDOW below the true peak, and
 * never above it (jemalloc's is updated every 64 KiB too).
 *
 * Tracking starts at a thread's first read or reset: the other threads
 * keep their windows, and their fast paths are unchanged.  What happened
 * before it is not known; a first read without a reset reports the
 * difference at that moment (at least 0), as the peak since the thread
 * began.
 */
#ifndef SA_THREAD_PEAK_H
#define SA_THREAD_PEAK_H

#include <stddef.h>
#include <stdint.h>

struct tcache;

#define THREAD_PEAK_WINDOW ((int64_t)64 << 10)

/* A window ended in the middle of an allocation that will add `gain` bytes
 * to the difference once done (sampler.c). */
void thread_peak_observe(struct tcache *tc, size_t gain);

/* thread.peak.read: the peak since the last reset (or the start of
 * tracking); starts tracking. */
uint64_t thread_peak_read(struct tcache *tc);

/* thread.peak.reset: the peak starts again from the difference now. */
void thread_peak_reset(struct tcache *tc);

#endif
