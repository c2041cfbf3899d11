/*
 * prof.h: the heap profiler's controls: options, run-time switches, dumps
 * and per-thread figures.  This is the interface ctl.c (mallctl) and conf.c
 * (option strings) use; sampler.h holds the allocation-side hooks.
 *
 * Options (opt_*) are written only by conf.c during the one-time set-up,
 * before any thread samples; after that they are read-only mirrors of the
 * option string, as jemalloc's opt.* are.  The run-time switches below may
 * be flipped by any thread at any time.
 *
 * Never calls malloc; dumps write through their own buffer (dump.c).
 */
#ifndef SA_PROF_H
#define SA_PROF_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROF_PREFIX_MAX 1024

/* ---- options: opt.<name> ---- */
extern bool opt_prof;                    /* sampling at all; default true */
extern bool opt_prof_active;             /* initial prof.active; default true */
extern bool opt_prof_thread_active_init; /* initial prof.thread_active_init; true */
extern size_t opt_lg_prof_sample;        /* log2 of R; default 19 (512 KiB); 0..62 */
extern char opt_prof_prefix[PROF_PREFIX_MAX]; /* automatic dump names; "salloc" */
#define PROF_CHOICE_MAX 8
extern char opt_prof_format[PROF_CHOICE_MAX]; /* automatic dumps: heap, pb or pb.gz */
extern char opt_prof_unwind[PROF_CHOICE_MAX]; /* stack walker: fast, libgcc or check */
extern bool opt_prof_final;              /* dump at exit; default false */
extern bool opt_prof_leak;               /* with prof_final: a leak summary at exit */
extern bool opt_prof_leak_error;         /* ... and _exit(1) if it found any (sets prof_leak) */
extern bool opt_prof_sys_thread_name;    /* thread names from the kernel, at each sample */
extern bool opt_prof_accum;              /* keep allocated-ever counts; default false */
extern ssize_t opt_lg_prof_interval;     /* dump every 2^N bytes; -1 = off (default) */
extern bool opt_prof_gdump;              /* initial prof.gdump; default false */
extern size_t opt_prof_peak_pct;         /* peak snapshot on growth above this %; 10 */
extern ssize_t opt_prof_recent_alloc_max; /* recent samples kept whole (prof_recent.h); 0 */
extern bool opt_prof_final_peak;         /* also dump the peak profile at exit */
extern bool opt_prof_guard;              /* guard every sample (guard.h); false */
extern ssize_t opt_lg_prof_guard_every;  /* guard 1 sample in 2^N; -1 = none */

/* ---- process-wide switches ---- */
bool prof_active_get(void);
void prof_active_set(bool on);            /* no effect when !opt_prof */
bool prof_thread_active_init_get(void);
void prof_thread_active_init_set(bool on);
bool prof_gdump_get(void);
void prof_gdump_set(bool on);

/* Current log2 sampling interval (prof.lg_sample); 0 when !opt_prof. */
size_t prof_lg_sample_get(void);
/* Changes the rate for samples taken from now on; live samples keep theirs. */
void prof_lg_sample_set(size_t lg);
/* prof.reset: forgets every sample (live ones included) and every count,
 * and sets the rate to 2^lg (lg clipped to 62). */
void prof_reset(size_t lg);
#ifdef SA_TESTING
/* Called after a sample is published, before its accumulated count. */
extern void (*prof_test_before_accum)(void);
/* Called as a sampled free has read whether the heap decays, before it
 * keeps the mapping as a spare. */
extern void (*prof_test_before_spare_keep)(void);
#endif
/* Bytes between interval dumps (prof.interval), 0 if off. */
uint64_t prof_interval_get(void);

/* Writes a heap_v2 dump to `path`, or to the next automatic name
 * (<prefix>.<pid>.<seq>.m<mseq>.heap) when `path` is NULL.  Written to a
 * temporary file in the same directory and renamed into place, so a
 * failure leaves no partial file.  0, or EFAULT (cannot write, or NULL path
 * with an empty prefix); ENOENT when !opt_prof. */
int prof_dump(const char *path);
/* prof.dump_fragmentation: like prof_dump, but each stack's bytes are the
 * free space its small samples keep alive in their spans (unbiased). */
int prof_dump_fragmentation(const char *path);
/* prof.dump_peak: the live samples at the last heap peak (a snapshot taken
 * whenever the estimated live heap grew by opt_prof_peak_pct). */
int prof_dump_peak(const char *path);
/* prof.residency: whether dumps can read /proc/self/pagemap. */
bool prof_residency(void);
/* experimental.hooks.prof_backtrace (man/salloc.3): a function that fills
 * vec[0, *len) with at most `max` return addresses, innermost first, and
 * walks the stacks of samples instead of salloc's walker; NULL is refused
 * (EINVAL).  prof_default_backtrace is salloc's walker in that form (what
 * the hook reads before any is set, and how a hook restores it): inside a
 * hook, the sample's stack above salloc; elsewhere, its caller's. */
typedef void (*prof_backtrace_hook_t)(void **vec, unsigned *len, unsigned max);
void prof_default_backtrace(void **vec, unsigned *len, unsigned max);
prof_backtrace_hook_t prof_backtrace_hook_get(void);
int prof_backtrace_hook_set(prof_backtrace_hook_t hook);
/* experimental.hooks.prof_dump: called with each dump's file name once the
 * file is in place (not for a dump that failed), on the thread that
 * dumped, holding no salloc lock; NULL for none. */
typedef void (*prof_dump_hook_t)(const char *filename);
prof_dump_hook_t prof_dump_hook_get(void);
void prof_dump_hook_set(prof_dump_hook_t hook);
/* prof.prefix: copies the prefix for automatic names; EFAULT if too long. */
int prof_prefix_set(const char *prefix);
const char *prof_prefix_get(void);

/* Live sampled allocations (prof.sample_count). */
size_t prof_sample_count(void);

/* Bytes of the mappings of their own that live sampled allocations occupy,
 * guard pages included (stats.allocated and stats.active count them). */
size_t prof_own_mapping_bytes(void);

/* Bytes mapped for the peak snapshot's buffer (prof.dump of the peak), 0
 * until the first snapshot: metadata, for stats.metadata. */
size_t prof_peak_buffer_bytes(void);

/* Live samples sit in PROF_SAMPLE_SHARDS shards, each under its own lock;
 * a thread takes its samples in its own (prof.c). */
#define PROF_SAMPLE_SHARDS 16

/* Bytes of freed sampled mappings the sample shards keep for their next
 * samples (dirty: statistics count them with sampled_pages_dirty()).  A
 * shard keeps at most PROF_SHARD_SPARES of them, PROF_SHARD_SPARE_BYTES in
 * all: a mapping freed when they are full pushes out the ones freed longest
 * ago. */
#define PROF_SHARD_SPARES 4
#define PROF_SHARD_SPARE_BYTES ((size_t)64 << 10)
size_t prof_spare_bytes(void);
/* Purges the spares idle for a decay time, if a decay step has passed
 * since the last such pass; `now` is os_now_ns().  Each sampled free runs
 * it unless the background thread does (background.h). */
void prof_decay_spares(uint64_t now);

/* ---- the calling thread ---- */
bool prof_thread_active_get(void);
void prof_thread_active_set(bool on);
/* The thread's name in dumps; "" if unset.  Set copies it (up to 63 bytes);
 * EFAULT for NULL or a character that is neither isgraph nor isblank. */
const char *prof_thread_name_get(void);
int prof_thread_name_set(const char *name);
/* Bytes this thread ever allocated / freed, at usable size. */
uint64_t prof_thread_allocated(void);
uint64_t prof_thread_deallocated(void);

#endif
