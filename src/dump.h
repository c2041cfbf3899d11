/*
 * dump.h: writing heap profiles.  The profile layer's internal interface
 * between prof.c (which owns the samples and decides when to dump) and
 * dump.c (which writes files); also what the allocator's slow paths call to
 * take and release samples.
 */
#ifndef SA_DUMP_H
#define SA_DUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct prof_stack;
struct span;
struct tcache;

/* One line of a snapshot: `live` live samples, or `accum` samples ever
 * taken, of one (stack, usable size, rate, thread name).  For one live sample also where
 * it lives (ptr, map_len) and its proxy, from which dump.c measures its
 * resident and swapped bytes and the free space it keeps alive (raw, for
 * this one sample; unbiased when summed). */
struct dump_entry {
    struct prof_stack *stack;
    size_t usable;
    uint64_t rate;
    uint64_t live;
    uint64_t accum;
    const void *ptr, *proxy;
    size_t map_len;
    double resident, swapped, frag;
    char thread[32]; /* thread.prof.name of the allocating thread, "" if unset */
};

/* What a dump shows (prof.dump, prof.dump_fragmentation, prof.dump_peak). */
enum dump_kind { DUMP_LIVE, DUMP_FRAGMENTATION, DUMP_PEAK };

/* Copies up to `cap` live samples of the current prof.reset epoch into
 * `out`, one shard lock at a time; returns how many. */
size_t prof_snapshot(struct dump_entry *out, size_t cap);
/* An upper bound for the live samples (sizing a snapshot buffer). */
size_t prof_live_upper_bound(void);

/* Copies the peak snapshot (prof_peak_*) into `out`; returns how many. */
size_t prof_peak_snapshot(struct dump_entry *out, size_t cap);
size_t prof_peak_count(void);

/* What a dump's snapshot held live: unbiased objects and bytes, and the
 * stacks they were allocated from (prof_leak's summary at exit). */
struct dump_totals {
    bool taken; /* false: no snapshot could be taken (no memory for it) */
    double objects, bytes;
    size_t stacks;
};

/* Writes a heap profile of kind `kind` to `path` with header rate `rate`:
 * jemalloc heap_v2, or profile.proto if `path` ends in .pb (.pb.gz:
 * gzipped).  Through `path`.tmp.<pid> and rename(): 0, or -1 with no file
 * left behind.  `totals`, if not NULL, gets the snapshot's live totals,
 * the file written or not; a NULL `path` writes none and only fills them
 * (returning -1).  Caller holds the dump lock. */
int dump_write(const char *path, uint64_t rate, enum dump_kind kind, struct dump_totals *totals);

/* Whether /proc/self/pagemap can be read (prof.residency). */
bool dump_residency_available(void);

/* ---- allocator hooks (malloc.c, init.c) ---- */
void prof_boot(void);
void prof_thread_init(struct tcache *tc);
/* The thread of cache `tc` is exiting (init.c): its shard has one fewer. */
void prof_thread_exit(const struct tcache *tc);
/* Sampled small allocations live on mappings of their own (sampled_pages.h)
 * and hold a proxy object of their class (`proxy`); so do guarded samples
 * of any size (`guarded`: guard.h; a large one has no proxy).  Places one
 * of `usable` bytes, aligned to `align` (at most a salloc page when
 * guarded), taken at rate `rate`: its address, or NULL if it could not be
 * recorded (the caller then allocates normally; a large guarded one is
 * then sampled as an ordinary large span, not counted failed).  *zeroed
 * says whether its memory reads as zero.  The pagemap marks the mapping as
 * a SPAN_SAMPLED span.  Both functions here that take a sample walk the
 * stack from `from` (unwind.h: the allocator's slow path that decided). */
struct unwind_from;
void *prof_alloc_sampled(struct tcache *tc, size_t usable, size_t align, uint64_t rate,
                         void *proxy, bool guarded, bool *zeroed, const struct unwind_from *from);
/* Releases a sampled allocation on its own mapping (small, or guarded);
 * returns its usable size and proxy (NULL for a large one). */
size_t prof_free_sampled(struct span *span, void **proxy);
/* Purges the freed mappings the sample shards keep (malloc_trim); returns
 * the bytes purged. */
size_t prof_purge_spares(void);
size_t prof_sampled_usable(const struct span *span);

/* Sampled large allocations are ordinary large spans of the page heap (their
 * own pages already) with a record in span->sample, so they are reused,
 * resized in place and decayed like any other.  prof_sample_span attaches a
 * record of `usable` bytes at rate `rate` to live large span `span` (false,
 * leaving it unsampled, if it could not be recorded); prof_unsample_span
 * detaches it (before the span is freed, or when realloc decides the
 * resized block is not sampled). */
bool prof_sample_span(struct tcache *tc, struct span *span, size_t usable, uint64_t rate,
                      const struct unwind_from *from);
void prof_unsample_span(struct span *span);
/* Sampled large span `span`, grown in place, is now `usable` bytes: its
 * record, weight and the live estimate follow (realloc_slow in malloc.c
 * says why that is unbiased). */
void prof_resize_span_sample(struct span *span, size_t usable);
/* Whether `p` is a live sampled allocation of either kind. */
bool prof_is_sampled(const void *p);
/* For a message about an invalid pointer `p` (malloc.c): if it lies in a
 * sampled block, live or freed, says so on stderr with the stack that
 * allocated it.  Never allocates; nothing when `p` is no sample's. */
void prof_describe(const void *p);
/* Guarded sampling (guard.h).  prof_should_guard: whether the sample being
 * taken is to be guarded (opt.prof_guard, opt.lg_prof_guard_every).
 * prof_report_fault: from the SIGSEGV handler; if `addr` is a guarded
 * sample's inaccessible page, prints what happened (overflow or use after
 * free; a write if `is_write` is 1, a read if 0, either if -1) with the
 * stacks it knows and returns true.  Never allocates. */
bool prof_should_guard(struct tcache *tc);
bool prof_report_fault(const void *addr, int is_write);
/* Slow-path checks for automatic dumps (no lock may be held). */
void prof_after_sample(struct tcache *tc);
void prof_maybe_gdump(void);
uint64_t prof_samples_failed(void);

void prof_prefork(void);
void prof_postfork_parent(void);
void prof_postfork_child(void);

#endif
