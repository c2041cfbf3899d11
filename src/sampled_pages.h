/*
 * sampled_pages.h: the memory sampled allocations live on.  Each sampled
 * allocation gets pages of its own (whole salloc pages, 8 KiB aligned so
 * that no pagemap page is shared, MADV_NOHUGEPAGE so residency is exact per
 * OS page): a run carved from a region, a 16 MiB mapping many samples
 * share, so that live samples do not use up the kernel's limit on a
 * process's mappings (vm.max_map_count).  Below, "a mapping" is such a run.
 *
 * Mapping a fresh one per sample, and purging a freed one, costs system
 * calls, TLB shootdowns and page faults (measured: 10 to 20 us a sample on
 * the bench machine, 60% of the time of pair/65536 with sampling on).  So
 * freed mappings of up to SAMPLED_CACHE_MAX_PAGES pages are kept as they
 * are, still resident, and handed to the next sample of the same length,
 * exactly as the ordinary heap reuses dirty pages: the next sample's
 * residency then counts those pages, as it would for an ordinary
 * allocation made on reused memory.  Kept mappings follow the heap's decay
 * policy (dirty_decay_ms): purged with MADV_DONTNEED once they have been
 * idle that long (0: at once; -1: only on sampled_pages_purge, which
 * malloc_trim calls).  The cache is bounded in dirty entries per length,
 * in entries per length and in bytes overall: beyond that a run goes back
 * to its region, dirty, and the regions' dirty runs follow the same decay
 * policy, purged a run of neighbours at a time.
 *
 * Each mapping is registered with the page heap (pageheap.h) when it is
 * made and keeps that record, parked between samples, until it goes back
 * to its region: a sample reuses both without the page heap's lock.
 *
 * One lock (LOCK_RANK_SAMPLED_PAGES), held only for list operations, never
 * across a system call; lengths up to 64 KiB also have one hot slot each,
 * taken and filled with single atomic instructions (sampled_pages.c).
 * Calls os.c and the page heap.
 */
#ifndef SA_SAMPLED_PAGES_H
#define SA_SAMPLED_PAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h" /* SA_TEST_MUTABLE */

#define SAMPLED_CACHE_MAX_PAGES 32

/* The pages of each new region (sampled_pages.c; 2048): tests make it
 * small, so that samples need new regions, and mmaps, often. */
extern SA_TEST_MUTABLE size_t sampled_pages_region_pages;

struct span;

/* `len` bytes (a multiple of the salloc page) of NOHUGEPAGE memory aligned
 * to `align` (a power of two): its parked span record (the mapping starts
 * at span->start); NULL with ENOMEM.  *zeroed says whether it reads as
 * zero (a kept mapping that was not purged does not). */
struct span *sampled_pages_get(size_t len, size_t align, bool *zeroed);

/* Gives a mapping from sampled_pages_get back, parked. */
void sampled_pages_put(struct span *s);
#ifdef SA_TESTING
/* Called as a put has read whether the heap decays, before it keeps the
 * mapping. */
extern void (*sampled_pages_test_before_keep)(void);
#endif

/* Gives back a mapping that was kept elsewhere past the decay time (a
 * sample shard's spare, prof.c), purged; returns the bytes purged. */
size_t sampled_pages_put_purged(struct span *s);

/* Purges the kept mappings idle for a decay time, and the dirty runs of
 * regions dirty that long, if a decay step has passed since the last such
 * pass; `now` is os_now_ns().  Each put runs it unless the background
 * thread does (background.h). */
void sampled_pages_decay(uint64_t now);

/* Purges every kept mapping and dirty region run now (malloc_trim);
 * returns the bytes purged. */
size_t sampled_pages_purge(void);

/* Bytes of kept mappings: all of them; and those not purged, with the
 * regions' dirty runs (statistics: they may be resident). */
size_t sampled_pages_cached(void);
size_t sampled_pages_dirty(void);
/* Bytes of the regions' purged free runs: mapped (stats.retained). */
size_t sampled_pages_retained(void);

void sampled_pages_prefork(void);
void sampled_pages_postfork_parent(void);
void sampled_pages_postfork_child(void);

#endif
