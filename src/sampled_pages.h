/*
 * sampled_pages.h: the memory sampled allocations live on.  Each sampled
 * allocation gets a mapping of its own (whole salloc pages, 8 KiB aligned so
 * that no pagemap page is shared, MADV_NOHUGEPAGE so residency is exact per
 * OS page).  Mapping and unmapping one per sample costs several system calls
 * (about 10 us here), so freed mappings of up to SAMPLED_CACHE_MAX_PAGES
 * pages are kept, purged with MADV_DONTNEED (their residency is then zero,
 * as a fresh mapping's, and what they held is gone), and handed out again.
 * The cache is bounded in entries per length and in bytes overall.
 *
 * One exception to the purge: a mapping of one salloc page whose sample was
 * at most one OS page long could only ever have touched that first OS page,
 * which the next small sample will use too; it is cached unpurged (no
 * system call, no page fault on reuse) and handed out as not known to be
 * zero.
 *
 * One lock (LOCK_RANK_SAMPLED_PAGES), held only for list operations, never
 * across a system call.  Calls only os.c.
 */
#ifndef SA_SAMPLED_PAGES_H
#define SA_SAMPLED_PAGES_H

#include <stdbool.h>
#include <stddef.h>

#define SAMPLED_CACHE_MAX_PAGES 32

/* `len` bytes (a multiple of the salloc page) of NOHUGEPAGE memory aligned
 * to `align` (a power of two); NULL with ENOMEM.  *zeroed says whether it
 * reads as zero. */
void *sampled_pages_get(size_t len, size_t align, bool *zeroed);

/* Gives a mapping from sampled_pages_get back; `used` is how many bytes of
 * it the allocation could have touched (its usable size). */
void sampled_pages_put(void *p, size_t len, size_t used);

/* Bytes held in the cache (statistics). */
size_t sampled_pages_cached(void);

void sampled_pages_prefork(void);
void sampled_pages_postfork_parent(void);
void sampled_pages_postfork_child(void);

#endif
