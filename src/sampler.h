/*
 * sampler.h: when to sample.  Every byte allocated is sampled with
 * probability 1/R (a Poisson process over allocated bytes), so an allocation
 * of usable size Z is sampled with probability exactly p(Z) = 1 - e^(-Z/R)
 * (seeds/000, 001, 002; spec/heap-dump-formats.md).
 *
 * Mechanism: each thread's cache holds bytes_until_sample, an exponential
 * interval with mean R drawn from a per-thread PRNG.  Each allocation
 * subtracts its usable size; the allocation that would take it below zero
 * is sampled, and a fresh interval is drawn (the exponential is memoryless,
 * so nothing carries over).  Since the interval is floored to an integer,
 * "sampled" <=> interval < Z, whose probability is exactly p(Z): no size
 * shortcut, so every sample's weight 1/p(Z) is exact.
 *
 * The fast path (fastpath.h) does the subtraction for small objects; the
 * slow path calls sampler_account() for everything else.
 *
 * Prompt rate changes: the counter the fast path sees never exceeds
 * SAMPLER_CHECKIN; a longer interval is split into chunks (the rest waits
 * in `carry`), and each chunk boundary is a slow-path visit that checks the
 * global generation number, bumped by every rate or activity change.  So a
 * change reaches every thread within SAMPLER_CHECKIN bytes of its
 * allocation, whatever its interval, and a thread with sampling off still
 * checks in every SAMPLER_CHECKIN bytes, except under opt.prof false, where
 * no change can ever turn sampling on (prof.active and the rest answer
 * ENOENT) and the fast path never leaves for the sampler.  Splitting is
 * exact: sampled <=> the whole remaining interval < Z.  On a change the
 * interval is redrawn from scratch, which the memoryless property also
 * makes exact.
 *
 * thread.allocated comes for free: alloc_base - (bytes_until_sample + carry).
 */
#ifndef SA_SAMPLER_H
#define SA_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tcache;

/* Twice the default mean interval: at R = 512 KiB only e^-2 = 14% of
 * intervals are split at all, and every boundary is a slow-path visit
 * (at 256 KiB there were 1.1 per sample, 10% of a sample's cost). */
#define SAMPLER_CHECKIN ((int64_t)1 << 20)
#define SAMPLER_MAX_LG 62

/* opt.check: a window of 0 bytes, so that every allocation takes the slow
 * path (which clears the block's freed-tag; malloc.c).  Exact all the
 * same: intervals are split into chunks of the window anyway.  Called at
 * set-up, before any thread cache exists. */
void sampler_check_every_allocation(void);

/* opt.prof false: sampling can never start, so a thread need not check in
 * at all (its window is 2^62 bytes).  Called at set-up, before any thread
 * cache exists; opt.check's window of 0 still wins. */
void sampler_never_sample(void);

/* A window of `window` bytes for this thread alone, applied now (0: back
 * to the global one): its slow path is visited at least that often, and
 * thread_peak_observe() runs at each visit (thread_peak.h).  The window
 * only splits the interval, so sampling is unchanged. */
void sampler_set_window(struct tcache *tc, int64_t window);

/* A new cache: seed its PRNG and draw its first interval. */
void sampler_thread_init(struct tcache *tc);

/* Slow-path accounting of one allocation of `usable` bytes, which adds
 * `gain` bytes to the thread's allocated-minus-freed once done (usable;
 * for a large block resized in place, its growth, or 0 if it shrank).
 * Returns the rate R at which it must be sampled, or 0 if it is not
 * sampled. */
uint64_t sampler_account(struct tcache *tc, size_t usable, size_t gain);

/* Applies a pending rate or activity change to this thread, if any. */
void sampler_refresh(struct tcache *tc);

/* Global switches, set by prof.c: the rate 2^lg for new intervals, and
 * whether sampling is on at all (opt.prof && prof.active).  Each setter
 * changes its switch alone, even when the other is set at the same time,
 * and makes every thread redraw its interval at its next slow path. */
void sampler_set_lg(size_t lg);
void sampler_set_on(bool on);
size_t sampler_lg(void);
bool sampler_on(void);

/* A uniform double in (0, 1] and an exponential interval of mean `rate`
 * from the thread's PRNG (exposed for tests). */
double sampler_uniform(uint64_t *state);
int64_t sampler_draw(uint64_t *state, uint64_t rate);

uint64_t sampler_thread_allocated(const struct tcache *tc);

#endif
