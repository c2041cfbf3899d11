/*
 * ctl.c: mallctl(), mallctlnametomib(), mallctlbymib() (see ctl.h,
 * spec/mallctl.md).
 *
 * Owns: the table of names (one flat array, sorted by full dotted name, one
 * row per name, `<i>`/`<j>` for integer components), the epoch and the
 * statistics snapshot.  Reads the other layers only through their headers.
 *
 * Each call goes: split the name (ENOENT on an empty component), find the
 * row (ENOENT: unknown, inner node, past a leaf, rejected index), the
 * profiling gate (ENOENT when !opt_prof), the access mode (EPERM), the sizes
 * (EINVAL, *oldlenp checked before anything is written, so bad input loses
 * nothing), then the row's handler, then the copy-out.
 *
 * Must never: call malloc, use stdio, set errno, return ENOMEM, hold a lock
 * of its own while calling another layer.
 */
#include "ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "../include/salloc.h"
#include "background.h"
#include "central.h"
#include "conf.h"
#include "dump.h"
#include "fastpath.h" /* malloc_zero_reallocs */
#include "init.h"
#include "lock.h"
#include "log.h"
#include "meta.h"
#include "os.h"
#include "pageheap.h"
#include "pagemap.h"
#include "prof.h"
#include "prof_recent.h"
#include "sampled_pages.h"
#include "sizeclass.h"
#include "stack.h"
#include "tcache.h"
#include "thread_peak.h"
#include "util.h"

/* ---- values ---- */

/* T_FN: a function pointer (experimental.hooks.*).  T_WRITER: a write
 * callback and its argument (experimental.prof_recent.alloc_dump; log.h's
 * struct outbuf_writer). */
enum ctl_type { T_VOID, T_BOOL, T_UNSIGNED, T_UINT32, T_SIZE, T_SSIZE, T_UINT64, T_STR, T_FN,
                T_WRITER };
static const size_t type_size[] = {
    [T_VOID] = 0, [T_BOOL] = sizeof(bool), [T_UNSIGNED] = sizeof(unsigned),
    [T_UINT32] = sizeof(uint32_t), [T_SIZE] = sizeof(size_t),
    [T_SSIZE] = sizeof(ssize_t), [T_UINT64] = sizeof(uint64_t),
    [T_STR] = sizeof(const char *), [T_FN] = sizeof(void (*)(void)),
    [T_WRITER] = sizeof(struct outbuf_writer),
};

union ctl_val {
    struct outbuf_writer w;
    bool b;
    unsigned u;
    uint32_t u32;
    size_t z;
    ssize_t zd;
    uint64_t u64;
    const char *s;
    void (*fn)(void); /* cast to and from the hook's own type */
};

/* Access: r- read only, rw, -w write only, -- action, rx read xor write
 * (thread.prof.name). */
enum ctl_access { A_R, A_RW, A_W, A_NONE, A_RX };

/* Profiling gates (spec 1.2): ENOENT for any use, or for writes only, when
 * opt_prof is false.  Reads of gated switches return false/0 (handlers). */
enum { G_PROF_ALL = 1, G_PROF_WRITE = 2 };

struct ctl_row;
struct ctl_ctx {
    const struct ctl_row *row;
    size_t idx[2];               /* the name's integer components, in order */
};

/* Handlers: `old` non-NULL asks for the value before any write, `new`
 * non-NULL carries the value to write (its size already checked).  Return
 * 0, ENOENT, EINVAL or EFAULT; nothing is copied out on error. */
typedef int ctl_fn(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new);

struct ctl_row {
    const char *name;
    enum ctl_type type;
    enum ctl_access access;
    ctl_fn *fn;
    const void *arg;             /* ctl_var: the variable; ctl_const: a string */
    uint64_t k;                  /* ctl_const: a number; snapshot rows: offset */
    unsigned gate;
};

/* ---- the statistics snapshot (stats.*), taken when epoch is written ----
 *
 * Formulas (spec 2.5), all in bytes:
 *   small objects  = sum over classes of (objects out of the central lists
 *                    x class size); thread caches' objects are among them
 *   small.allocated = small objects - bytes cached by all threads
 *   large.allocated = live large spans + sampled allocations' own mappings
 *                    (whole pages: this overstates a sampled allocation by
 *                    its page rounding, and a sampled small one by its proxy
 *                    object too; prof.h has no figure for sampled bytes)
 *   allocated = small.allocated + large.allocated
 *   active    = small spans + large spans + sampled mappings (whole pages)
 *   metadata  = meta_mapped_bytes() + the pagemap leaves' resident pages
 *               (/proc/self/pagemap: a leaf maps 2.5 MiB, of which the
 *               heap touches little) + the peak snapshot's buffer
 *   resident  = active + free dirty pages + metadata + freed sampled
 *               mappings kept unpurged (an upper bound)
 *   mapped    = active + metadata: the extents in use; free pages, dirty or
 *               not, are excluded, as jemalloc's inactive extents are
 *   retained  = free clean (purged) pages: still mapped, nothing resident;
 *               the sampled pages' regions' free runs too
 * Layers are read one after another, not atomically, so under concurrent
 * churn allocated is clamped to active to keep the documented order.
 *
 * snap_lock (LOCK_RANK_CTL, the first lock in the order) guards the
 * snapshot; taking it calls into every lower layer.  Every field is a size_t
 * so that a reader copies one word by offset. */
struct snapshot {
    size_t allocated, active, metadata, resident, mapped, retained;
    size_t pactive, pdirty, small_allocated, large_allocated, tcache_bytes;
    size_t curregs[SA_NUM_CLASSES], curslabs[SA_NUM_CLASSES];
    /* Since start-up (central.h, pageheap.h), summed over the classes for
     * small.*. */
    size_t nmalloc[SA_NUM_CLASSES], ndalloc[SA_NUM_CLASSES], nslabs[SA_NUM_CLASSES];
    size_t nfills[SA_NUM_CLASSES], nflushes[SA_NUM_CLASSES], nonfull[SA_NUM_CLASSES];
    size_t small_nmalloc, small_ndalloc, large_nmalloc, large_ndalloc;
    size_t small_nfills, small_nflushes;
    size_t nthreads, uptime_ns, dirty_purged, dirty_nmadvise; /* the arena's */
    size_t bg_threads, bg_runs, bg_run_interval; /* background.h */
    size_t zero_reallocs;                        /* malloc.c */
};
SA_BSS_APART static struct snapshot snap;
static bool snap_taken;
static sa_lock_t snap_lock = SA_LOCK_INITIALIZER(LOCK_RANK_CTL);
static uint64_t epoch = 1;

static void snap_take(void)
{
    struct snapshot s = {0};
    size_t small_objects = 0;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        struct central_stats cs;
        central_get_stats(cls, &cs);
        s.curregs[cls] = cs.allocated;
        s.curslabs[cls] = cs.spans;
        s.nmalloc[cls] = cs.nmalloc;
        s.ndalloc[cls] = cs.ndalloc;
        s.nslabs[cls] = cs.nslabs;
        s.nfills[cls] = cs.nfills;
        s.nflushes[cls] = cs.nflushes;
        s.nonfull[cls] = cs.nonfull;
        s.small_nmalloc += cs.nmalloc;
        s.small_ndalloc += cs.ndalloc;
        s.small_nfills += cs.nfills;
        s.small_nflushes += cs.nflushes;
        small_objects += cs.allocated * sizeclass_size(cls);
    }
    s.tcache_bytes = tcache_all_cached_bytes();
    struct pageheap_stats ph;
    pageheap_get_stats(&ph);
    s.small_allocated = small_objects > s.tcache_bytes ? small_objects - s.tcache_bytes : 0;
    /* Sampled allocations' own mappings, counted by the profiler's shards
     * under the locks it takes anyway (prof.h). */
    size_t sampled = prof_own_mapping_bytes();
    s.large_allocated = ph.large + sampled;
    s.large_nmalloc = ph.nmalloc_large;
    s.large_ndalloc = ph.ndalloc_large;
    s.dirty_purged = ph.purged >> SA_PAGE_SHIFT;
    s.dirty_nmadvise = ph.nmadvise;
    s.nthreads = tcache_live_count();
    s.uptime_ns = os_now_ns() - init_started_ns();
    s.active = ph.small + ph.large + sampled;
    s.allocated = s.small_allocated + s.large_allocated;
    if (s.allocated > s.active)
        s.allocated = s.active;
    s.metadata = meta_mapped_bytes() + pagemap_resident_bytes() + prof_peak_buffer_bytes();
    /* Freed sampled mappings kept unpurged: in the cache and as spares. */
    size_t sampled_dirty = sampled_pages_dirty() + prof_spare_bytes();
    s.resident = s.active + ph.free_dirty + s.metadata + sampled_dirty;
    s.mapped = s.active + s.metadata;
    s.retained = ph.free_clean + sampled_pages_retained();
    s.pactive = s.active >> SA_PAGE_SHIFT;
    s.pdirty = (ph.free_dirty + sampled_dirty) >> SA_PAGE_SHIFT;
    struct background_stats bg;
    background_get_stats(&bg);
    s.bg_threads = bg.num_threads;
    s.bg_runs = bg.num_runs;
    s.bg_run_interval = bg.run_interval_ns;
    s.zero_reallocs = (size_t)malloc_zero_reallocs();

    sa_lock(&snap_lock);
    snap = s;
    snap_taken = true;
    sa_unlock(&snap_lock);
}

/* One word of the snapshot, by byte offset; takes the first snapshot if
 * none was taken yet. */
static size_t snap_read(size_t offset)
{
    sa_lock(&snap_lock);
    bool taken = snap_taken;
    sa_unlock(&snap_lock);
    if (!taken)
        snap_take();
    sa_lock(&snap_lock);
    size_t v = *(const size_t *)((const char *)&snap + offset);
    sa_unlock(&snap_lock);
    return v;
}

void ctl_prefork(void) { sa_lock(&snap_lock); }
void ctl_postfork_parent(void) { sa_unlock(&snap_lock); }
void ctl_postfork_child(void) { sa_lock_reinit(&snap_lock); }

/* ---- handlers ---- */

/* Reads a variable of the row's type (strings: a char array). */
static int ctl_var(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    const void *p = cx->row->arg;
    switch (cx->row->type) {
    case T_BOOL: old->b = *(const bool *)p; break;
    case T_UNSIGNED: old->u = *(const unsigned *)p; break;
    case T_SIZE: old->z = *(const size_t *)p; break;
    case T_SSIZE: old->zd = *(const ssize_t *)p; break;
    default: old->s = p; break;
    }
    return 0;
}

/* A constant: row->arg for strings, row->k for numbers. */
static int ctl_const(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    const struct ctl_row *r = cx->row;
    switch (r->type) {
    case T_BOOL: old->b = r->k != 0; break;
    case T_UNSIGNED: old->u = (unsigned)r->k; break;
    case T_SIZE: old->z = (size_t)r->k; break;
    case T_SSIZE: old->zd = (ssize_t)r->k; break;
    default: old->s = r->arg; break;
    }
    return 0;
}

static int ctl_stat(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    size_t v = snap_read((size_t)cx->row->k);
    if (cx->row->type == T_UINT64)
        old->u64 = v;
    else if (cx->row->type == T_UNSIGNED)
        old->u = (unsigned)v;
    else
        old->z = v;
    return 0;
}

/* stats.arenas.<i>.dirty_decay_ms: the live value, as arenas.dirty_decay_ms. */
static int ctl_arena_decay_ms(const struct ctl_ctx *cx, union ctl_val *old,
                              const union ctl_val *new)
{
    (void)cx, (void)new;
    old->zd = pageheap_decay_ms();
    return 0;
}

/* stats.arenas.<i>.bins.<j>.*: row->k is the offset of the class-0 slot. */
static int ctl_bin_stat(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    size_t v = snap_read((size_t)cx->row->k + (cx->idx[1] + 1) * sizeof(size_t));
    if (cx->row->type == T_UINT64)
        old->u64 = v;
    else
        old->z = v;
    return 0;
}

static int ctl_epoch(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->u64 = __atomic_load_n(&epoch, __ATOMIC_RELAXED);
    if (new) {
        snap_take();
        __atomic_add_fetch(&epoch, 1, __ATOMIC_RELAXED);
    }
    return 0;
}

/* arenas.bin.<i>.*: jemalloc's bin i is salloc's class i + 1. */
static int ctl_bin_size(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    old->z = sizeclass_size((unsigned)cx->idx[0] + 1);
    return 0;
}

static int ctl_bin_nregs(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    old->u32 = sizeclass_objects((unsigned)cx->idx[0] + 1);
    return 0;
}

static int ctl_bin_slab_size(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)new;
    old->z = sizeclass_pages((unsigned)cx->idx[0] + 1) << SA_PAGE_SHIFT;
    return 0;
}

/* arena.<i>.purge: exactly what malloc_trim() does (malloc.c). */
static int ctl_purge(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old, (void)new;
    malloc_trim(0);
    return 0;
}

/* arena.<i>.decay: a decay pass now; the transfer caches' objects go back
 * to their spans first, so that the spans they empty are among what it
 * finds. */
static int ctl_decay(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old, (void)new;
    central_release_xfer();
    pageheap_decay_now();
    return 0;
}

/* Same bounds as the dirty_decay_ms option (conf.c): -1..LONG_MAX/1e6 ms.
 * Out of range is EFAULT, as jemalloc's failed decay set. */
static int ctl_decay_ms(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (new && (new->zd < -1 || new->zd > LONG_MAX / 1000000))
        return EFAULT;
    if (old)
        old->zd = pageheap_decay_ms();
    if (new) {
        pageheap_set_decay_ms(new->zd);
        /* 0 keeps nothing dirty: what the sampled mappings' caches kept
         * under the old time goes now (their decay passes skip a time of
         * 0, under which nothing is kept). */
        if (new->zd == 0) {
            prof_purge_spares(); /* given back purged: before the cache's purge */
            sampled_pages_purge();
        }
        background_decay_changed();
    }
    return 0;
}

static int ctl_prof_active(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (new && new->b && !opt_prof)
        return ENOENT; /* writing false with profiling off succeeds, changes nothing */
    if (old)
        old->b = opt_prof && prof_active_get();
    if (new && opt_prof)
        prof_active_set(new->b);
    return 0;
}

static int ctl_prof_thread_active_init(const struct ctl_ctx *cx, union ctl_val *old,
                                       const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->b = opt_prof && prof_thread_active_init_get();
    if (new)
        prof_thread_active_init_set(new->b);
    return 0;
}

static int ctl_prof_gdump(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->b = opt_prof && prof_gdump_get();
    if (new)
        prof_gdump_set(new->b);
    return 0;
}

static int ctl_prof_dump(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old;
    return prof_dump(new ? new->s : NULL);
}

static int ctl_prof_dump_fragmentation(const struct ctl_ctx *cx, union ctl_val *old,
                                       const union ctl_val *new)
{
    (void)cx, (void)old;
    return prof_dump_fragmentation(new ? new->s : NULL);
}

static int ctl_prof_dump_peak(const struct ctl_ctx *cx, union ctl_val *old,
                              const union ctl_val *new)
{
    (void)cx, (void)old;
    return prof_dump_peak(new ? new->s : NULL);
}

static int ctl_prof_residency(const struct ctl_ctx *cx, union ctl_val *old,
                              const union ctl_val *new)
{
    (void)cx, (void)new;
    old->b = opt_prof && prof_residency();
    return 0;
}

static int ctl_prof_prefix(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old;
    if (!new)
        return EINVAL; /* an action that needs a value and got none */
    if (!new->s)
        return EFAULT;
    return prof_prefix_set(new->s);
}

/* Largest lg the sampler takes (prof.h: 0..62). */
#define CTL_MAX_LG_SAMPLE 62

static int ctl_prof_reset(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old;
    prof_reset(new ? new->z : prof_lg_sample_get());
    return 0;
}

static int ctl_prof_lg_sample(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->z = opt_prof ? prof_lg_sample_get() : 0;
    if (new)
        prof_lg_sample_set(new->z > CTL_MAX_LG_SAMPLE ? CTL_MAX_LG_SAMPLE : new->z);
    return 0;
}

static int ctl_prof_interval(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)new;
    old->u64 = opt_prof ? prof_interval_get() : 0;
    return 0;
}

static int ctl_prof_sample_count(const struct ctl_ctx *cx, union ctl_val *old,
                                 const union ctl_val *new)
{
    (void)cx, (void)new;
    old->z = opt_prof ? prof_sample_count() : 0;
    return 0;
}

static int ctl_prof_samples_failed(const struct ctl_ctx *cx, union ctl_val *old,
                                   const union ctl_val *new)
{
    (void)cx, (void)new;
    old->u64 = prof_samples_failed();
    return 0;
}

static int ctl_prof_unwind_truncated(const struct ctl_ctx *cx, union ctl_val *old,
                                     const union ctl_val *new)
{
    (void)cx, (void)new;
    old->u64 = stack_unwind_truncated();
    return 0;
}

static int ctl_prof_unwind_mismatches(const struct ctl_ctx *cx, union ctl_val *old,
                                      const union ctl_val *new)
{
    (void)cx, (void)new;
    old->u64 = stack_unwind_mismatches();
    return 0;
}

static int ctl_thread_allocated(const struct ctl_ctx *cx, union ctl_val *old,
                                const union ctl_val *new)
{
    (void)cx, (void)new;
    old->u64 = prof_thread_allocated();
    return 0;
}

static int ctl_thread_deallocated(const struct ctl_ctx *cx, union ctl_val *old,
                                  const union ctl_val *new)
{
    (void)cx, (void)new;
    old->u64 = prof_thread_deallocated();
    return 0;
}

/* thread.peak.read and .reset (thread_peak.h); a thread that can have no
 * cache (at exit, or ENOMEM) allocates nothing: 0, and nothing to reset. */
static int ctl_thread_peak_read(const struct ctl_ctx *cx, union ctl_val *old,
                                const union ctl_val *new)
{
    (void)cx, (void)new;
    struct tcache *tc = init_current_cache();
    old->u64 = tc ? thread_peak_read(tc) : 0;
    return 0;
}

static int ctl_thread_peak_reset(const struct ctl_ctx *cx, union ctl_val *old,
                                 const union ctl_val *new)
{
    (void)cx, (void)old, (void)new;
    struct tcache *tc = init_current_cache();
    if (tc)
        thread_peak_reset(tc);
    return 0;
}

static int ctl_thread_arena(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (new && new->u != 0)
        return EFAULT; /* salloc has one arena */
    if (old)
        old->u = 0;
    return 0;
}

static int ctl_thread_prof_active(const struct ctl_ctx *cx, union ctl_val *old,
                                  const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->b = opt_prof && prof_thread_active_get();
    if (new)
        prof_thread_active_set(new->b);
    return 0;
}

static int ctl_thread_prof_name(const struct ctl_ctx *cx, union ctl_val *old,
                                const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->s = prof_thread_name_get();
    return new ? prof_thread_name_set(new->s) : 0;
}

/* experimental.hooks.prof_backtrace and .prof_dump, as jemalloc's: EINVAL
 * with neither an old nor a new value; the backtrace hook cannot be NULL
 * (EINVAL: write back what was read to restore salloc's walker), the dump
 * hook can (none). */
static int ctl_hook_prof_backtrace(const struct ctl_ctx *cx, union ctl_val *old,
                                   const union ctl_val *new)
{
    (void)cx;
    if (!old && !new)
        return EINVAL;
    if (old)
        old->fn = (void (*)(void))prof_backtrace_hook_get();
    return new ? prof_backtrace_hook_set((prof_backtrace_hook_t) new->fn) : 0;
}

static int ctl_hook_prof_dump(const struct ctl_ctx *cx, union ctl_val *old,
                              const union ctl_val *new)
{
    (void)cx;
    if (!old && !new)
        return EINVAL;
    if (old)
        old->fn = (void (*)(void))prof_dump_hook_get();
    if (new)
        prof_dump_hook_set((prof_dump_hook_t) new->fn);
    return 0;
}

/* Whether the calling thread had a cache when mallctl() was entered (the
 * entry point may give it one while initialising). */
static __thread bool had_cache;

static int ctl_tcache_flush(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old, (void)new;
    struct tcache *tc = init_current_cache();
    if (!had_cache || !tc || !tcache_is_cached(tc))
        return EFAULT; /* spec/mallctl.md: caching disabled for the thread */
    tcache_flush_all(tc);
    return 0;
}

/* thread.tcache.enabled: the calling thread's cache on or off (tcache.h,
 * Uncached threads).  A thread that can have no cache (at exit, or
 * ENOMEM) reads false and cannot turn one on. */
static int ctl_tcache_enabled(const struct ctl_ctx *cx, union ctl_val *old,
                              const union ctl_val *new)
{
    (void)cx;
    struct tcache *tc = init_current_cache();
    if (old)
        old->b = tc && tcache_is_cached(tc);
    if (new && !tc)
        return new->b ? EFAULT : 0;
    if (new)
        tcache_set_cached(tc, new->b);
    return 0;
}

/* experimental.prof_recent.alloc_max: how many recent samples are kept
 * whole (prof_recent.h); EINVAL below -1. */
static int ctl_recent_max(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx;
    if (new && new->zd < -1)
        return EINVAL;
    if (old)
        old->zd = prof_recent_max();
    if (new)
        prof_recent_set_max(new->zd);
    return 0;
}

/* experimental.prof_recent.alloc_dump: the records as JSON through the
 * given callback (standard error if it is NULL); EFAULT if no memory could
 * be mapped for their copy. */
static int ctl_recent_dump(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    (void)cx, (void)old;
    if (!new)
        return EINVAL;
    return prof_recent_dump(new->w.write_cb, new->w.cbopaque) ? 0 : EFAULT;
}

/* thread.idle: the thread will be idle for a while: its cache goes back,
 * and then a decay pass (arena.<i>.decay) lets go of what is due.  A
 * thread with no cache has nothing of its own to give back: still 0. */
static int ctl_thread_idle(const struct ctl_ctx *cx, union ctl_val *old, const union ctl_val *new)
{
    struct tcache *tc = init_current_cache();
    if (had_cache && tc)
        tcache_flush_all(tc);
    return ctl_decay(cx, old, new);
}

/* background_thread: 0, or EFAULT if the thread could not be created
 * (spec/mallctl.md: a start or stop that failed). */
static int ctl_background_thread(const struct ctl_ctx *cx, union ctl_val *old,
                                 const union ctl_val *new)
{
    (void)cx;
    if (old)
        old->b = background_get();
    return new && background_set(new->b) != 0 ? EFAULT : 0;
}

/* max_background_threads: salloc runs its one background thread or none
 * (background_thread), so 1 is the only value; more is EINVAL, as jemalloc
 * answers a value above opt.max_background_threads, and so is 0, which
 * the option refuses too (the thread is turned off with background_thread). */
static int ctl_max_background_threads(const struct ctl_ctx *cx, union ctl_val *old,
                                      const union ctl_val *new)
{
    (void)cx;
    if (new && new->z != 1)
        return EINVAL;
    if (old)
        old->z = 1;
    return 0;
}

/* ---- the table: sorted by name (ctl_table_ok), one row per name ---- */

#define VAR(n, t, v) {n, t, A_R, ctl_var, &(v), 0, 0}
#define CONST(n, t, x) {n, t, A_R, ctl_const, NULL, (x), 0}
#define STR(n, s) {n, T_STR, A_R, ctl_const, (s), 0, 0}
#define STAT(n, f) {n, T_SIZE, A_R, ctl_stat, NULL, offsetof(struct snapshot, f), 0}
#define STAT64(n, f) {n, T_UINT64, A_R, ctl_stat, NULL, offsetof(struct snapshot, f), 0}
#define STATU(n, f) {n, T_UNSIGNED, A_R, ctl_stat, NULL, offsetof(struct snapshot, f), 0}
#define BINSTAT(n, f) {n, T_SIZE, A_R, ctl_bin_stat, NULL, offsetof(struct snapshot, f), 0}
#define BINSTAT64(n, f) {n, T_UINT64, A_R, ctl_bin_stat, NULL, offsetof(struct snapshot, f), 0}
#define FN(n, t, a, f, g) {n, t, a, f, NULL, 0, g}

static const struct ctl_row table[] = {
    FN("arena.<i>.decay", T_VOID, A_NONE, ctl_decay, 0),
    FN("arena.<i>.dirty_decay_ms", T_SSIZE, A_RW, ctl_decay_ms, 0),
    FN("arena.<i>.purge", T_VOID, A_NONE, ctl_purge, 0),
    FN("arenas.bin.<i>.nregs", T_UINT32, A_R, ctl_bin_nregs, 0),
    FN("arenas.bin.<i>.size", T_SIZE, A_R, ctl_bin_size, 0),
    FN("arenas.bin.<i>.slab_size", T_SIZE, A_R, ctl_bin_slab_size, 0),
    FN("arenas.dirty_decay_ms", T_SSIZE, A_RW, ctl_decay_ms, 0),
    CONST("arenas.narenas", T_UNSIGNED, 1),
    CONST("arenas.nbins", T_UNSIGNED, SA_NUM_CLASSES - 1),
    VAR("arenas.nhbins", T_UNSIGNED, tcache_cached_classes),
    CONST("arenas.page", T_SIZE, SA_PAGE_SIZE),
    CONST("arenas.quantum", T_SIZE, 16),
    VAR("arenas.tcache_max", T_SIZE, tcache_max_cached_size),
    FN("background_thread", T_BOOL, A_RW, ctl_background_thread, 0),
    CONST("config.cache_oblivious", T_BOOL, 0),
    CONST("config.debug", T_BOOL, SA_DEBUG_BUILD),
    CONST("config.fill", T_BOOL, 1),             /* junk and zero */
    CONST("config.lazy_lock", T_BOOL, 0),
    STR("config.malloc_conf", ""),
    CONST("config.opt_safety_checks", T_BOOL, 1), /* free() always checks its pointer */
    CONST("config.prof", T_BOOL, 1),
    CONST("config.prof_libgcc", T_BOOL, 1),       /* stacks via glibc backtrace() */
    CONST("config.prof_libunwind", T_BOOL, 0),
    CONST("config.stats", T_BOOL, 1),
    CONST("config.utrace", T_BOOL, 0),
    CONST("config.xmalloc", T_BOOL, 0),
    FN("epoch", T_UINT64, A_RW, ctl_epoch, 0),
    FN("experimental.hooks.prof_backtrace", T_FN, A_RW, ctl_hook_prof_backtrace, G_PROF_WRITE),
    FN("experimental.hooks.prof_dump", T_FN, A_RW, ctl_hook_prof_dump, G_PROF_WRITE),
    FN("experimental.prof_recent.alloc_dump", T_WRITER, A_W, ctl_recent_dump, G_PROF_ALL),
    FN("experimental.prof_recent.alloc_max", T_SSIZE, A_RW, ctl_recent_max, G_PROF_ALL),
    FN("max_background_threads", T_SIZE, A_RW, ctl_max_background_threads, 0),
    VAR("opt.abort", T_BOOL, opt_abort),
    VAR("opt.abort_conf", T_BOOL, opt_abort_conf),
    VAR("opt.background_thread", T_BOOL, opt_background_thread),
    VAR("opt.check", T_BOOL, opt_check),
    VAR("opt.confirm_conf", T_BOOL, opt_confirm_conf),
    VAR("opt.dirty_decay_ms", T_SSIZE, opt_dirty_decay_ms),
    VAR("opt.junk", T_STR, opt_junk),
    VAR("opt.lg_prof_guard_every", T_SSIZE, opt_lg_prof_guard_every),
    VAR("opt.lg_prof_interval", T_SSIZE, opt_lg_prof_interval),
    VAR("opt.lg_prof_sample", T_SIZE, opt_lg_prof_sample),
    VAR("opt.lg_tcache_max", T_SIZE, opt_lg_tcache_max),
    CONST("opt.max_background_threads", T_SIZE, 1),
    STR("opt.metadata_thp", "disabled"),   /* metadata is never advised huge */
    CONST("opt.muzzy_decay_ms", T_SSIZE, 0),
    CONST("opt.narenas", T_UNSIGNED, 1),
    CONST("opt.oversize_threshold", T_SIZE, 0), /* jemalloc's 0: no oversize arena */
    STR("opt.percpu_arena", "disabled"),    /* one arena, none per CPU */
    VAR("opt.prof", T_BOOL, opt_prof),
    VAR("opt.prof_accum", T_BOOL, opt_prof_accum),
    VAR("opt.prof_active", T_BOOL, opt_prof_active),
    VAR("opt.prof_final", T_BOOL, opt_prof_final),
    VAR("opt.prof_final_peak", T_BOOL, opt_prof_final_peak),
    VAR("opt.prof_format", T_STR, opt_prof_format),
    VAR("opt.prof_gdump", T_BOOL, opt_prof_gdump),
    VAR("opt.prof_guard", T_BOOL, opt_prof_guard),
    VAR("opt.prof_leak", T_BOOL, opt_prof_leak),
    VAR("opt.prof_leak_error", T_BOOL, opt_prof_leak_error),
    VAR("opt.prof_peak_pct", T_SIZE, opt_prof_peak_pct),
    VAR("opt.prof_prefix", T_STR, opt_prof_prefix),
    VAR("opt.prof_recent_alloc_max", T_SSIZE, opt_prof_recent_alloc_max),
    VAR("opt.prof_sys_thread_name", T_BOOL, opt_prof_sys_thread_name),
    VAR("opt.prof_thread_active_init", T_BOOL, opt_prof_thread_active_init),
    VAR("opt.prof_unwind", T_STR, opt_prof_unwind),
    CONST("opt.retain", T_BOOL, 1),
    VAR("opt.stats_print", T_BOOL, opt_stats_print),
    VAR("opt.stats_print_opts", T_STR, opt_stats_print_opts),
    VAR("opt.tcache", T_BOOL, opt_tcache),
    VAR("opt.tcache_max", T_SIZE, opt_tcache_max),
    VAR("opt.thp", T_STR, opt_thp),
    VAR("opt.zero", T_BOOL, opt_zero),
    VAR("opt.zero_realloc", T_STR, opt_zero_realloc),
    FN("prof.active", T_BOOL, A_RW, ctl_prof_active, 0),
    FN("prof.dump", T_STR, A_W, ctl_prof_dump, G_PROF_ALL),
    FN("prof.dump_fragmentation", T_STR, A_W, ctl_prof_dump_fragmentation, G_PROF_ALL),
    FN("prof.dump_peak", T_STR, A_W, ctl_prof_dump_peak, G_PROF_ALL),
    FN("prof.gdump", T_BOOL, A_RW, ctl_prof_gdump, G_PROF_WRITE),
    FN("prof.interval", T_UINT64, A_R, ctl_prof_interval, 0),
    FN("prof.lg_sample", T_SIZE, A_RW, ctl_prof_lg_sample, G_PROF_WRITE),
    FN("prof.prefix", T_STR, A_W, ctl_prof_prefix, G_PROF_ALL),
    FN("prof.reset", T_SIZE, A_W, ctl_prof_reset, G_PROF_ALL),
    FN("prof.residency", T_BOOL, A_R, ctl_prof_residency, 0),
    FN("prof.sample_count", T_SIZE, A_R, ctl_prof_sample_count, 0),
    FN("prof.samples_failed", T_UINT64, A_R, ctl_prof_samples_failed, 0),
    FN("prof.thread_active_init", T_BOOL, A_RW, ctl_prof_thread_active_init, G_PROF_WRITE),
    FN("prof.unwind_mismatches", T_UINT64, A_R, ctl_prof_unwind_mismatches, 0),
    FN("prof.unwind_truncated", T_UINT64, A_R, ctl_prof_unwind_truncated, 0),
    STAT("stats.active", active),
    STAT("stats.allocated", allocated),
    STAT("stats.arenas.<i>.base", metadata),
    BINSTAT("stats.arenas.<i>.bins.<j>.curregs", curregs),
    BINSTAT("stats.arenas.<i>.bins.<j>.curslabs", curslabs),
    BINSTAT64("stats.arenas.<i>.bins.<j>.ndalloc", ndalloc),
    BINSTAT64("stats.arenas.<i>.bins.<j>.nfills", nfills),
    BINSTAT64("stats.arenas.<i>.bins.<j>.nflushes", nflushes),
    BINSTAT64("stats.arenas.<i>.bins.<j>.nmalloc", nmalloc),
    BINSTAT("stats.arenas.<i>.bins.<j>.nonfull_slabs", nonfull),
    BINSTAT64("stats.arenas.<i>.bins.<j>.nslabs", nslabs),
    FN("stats.arenas.<i>.dirty_decay_ms", T_SSIZE, A_R, ctl_arena_decay_ms, 0),
    STAT64("stats.arenas.<i>.dirty_nmadvise", dirty_nmadvise),
    STAT64("stats.arenas.<i>.dirty_purged", dirty_purged),
    STAT("stats.arenas.<i>.large.allocated", large_allocated),
    STAT64("stats.arenas.<i>.large.ndalloc", large_ndalloc),
    STAT64("stats.arenas.<i>.large.nmalloc", large_nmalloc),
    STAT("stats.arenas.<i>.mapped", mapped),
    CONST("stats.arenas.<i>.muzzy_decay_ms", T_SSIZE, 0),
    STATU("stats.arenas.<i>.nthreads", nthreads),
    STAT("stats.arenas.<i>.pactive", pactive),
    STAT("stats.arenas.<i>.pdirty", pdirty),
    CONST("stats.arenas.<i>.pmuzzy", T_SIZE, 0),
    STAT("stats.arenas.<i>.resident", resident),
    STAT("stats.arenas.<i>.retained", retained),
    STAT("stats.arenas.<i>.small.allocated", small_allocated),
    STAT64("stats.arenas.<i>.small.ndalloc", small_ndalloc),
    STAT64("stats.arenas.<i>.small.nfills", small_nfills),
    STAT64("stats.arenas.<i>.small.nflushes", small_nflushes),
    STAT64("stats.arenas.<i>.small.nmalloc", small_nmalloc),
    STAT("stats.arenas.<i>.tcache_bytes", tcache_bytes),
    STAT64("stats.arenas.<i>.uptime", uptime_ns),
    STAT64("stats.background_thread.num_runs", bg_runs),
    STAT("stats.background_thread.num_threads", bg_threads),
    STAT64("stats.background_thread.run_interval", bg_run_interval),
    STAT("stats.mapped", mapped),
    STAT("stats.metadata", metadata),
    STAT("stats.resident", resident),
    STAT("stats.retained", retained),
    STAT("stats.zero_reallocs", zero_reallocs),
    FN("thread.allocated", T_UINT64, A_R, ctl_thread_allocated, 0),
    FN("thread.arena", T_UNSIGNED, A_RW, ctl_thread_arena, 0),
    FN("thread.deallocated", T_UINT64, A_R, ctl_thread_deallocated, 0),
    FN("thread.idle", T_VOID, A_NONE, ctl_thread_idle, 0),
    FN("thread.peak.read", T_UINT64, A_R, ctl_thread_peak_read, 0),
    FN("thread.peak.reset", T_VOID, A_NONE, ctl_thread_peak_reset, 0),
    FN("thread.prof.active", T_BOOL, A_RW, ctl_thread_prof_active, G_PROF_WRITE),
    FN("thread.prof.name", T_STR, A_RX, ctl_thread_prof_name, G_PROF_ALL),
    FN("thread.tcache.enabled", T_BOOL, A_RW, ctl_tcache_enabled, 0),
    FN("thread.tcache.flush", T_VOID, A_NONE, ctl_tcache_flush, 0),
    STR("version", "salloc " SALLOC_VERSION),
};
#define NROWS (sizeof(table) / sizeof(table[0]))

/* ---- names ---- */

/* A name split into components; `s`/`len` point into the caller's string. */
struct comp {
    const char *s;
    size_t len;
    bool is_int;
    size_t value;
};

/* Component k of a pattern: its start and length; false if there is none. */
static bool pattern_comp(const char *pat, unsigned k, const char **s, size_t *len)
{
    for (; k; k--) {
        pat = strchr(pat, '.');
        if (!pat)
            return false;
        pat++;
    }
    const char *dot = strchr(pat, '.');
    *s = pat;
    *len = dot ? (size_t)(dot - pat) : strlen(pat);
    return true;
}

/* Splits `name` into at most CTL_MAX_DEPTH components; all-digit ones are
 * integers (base 10).  -1 (ENOENT) for an empty or overlong component. */
static int split(const char *name, struct comp *c)
{
    int n = 0;
    for (const char *p = name;; n++) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0 || n == CTL_MAX_DEPTH)
            return -1;
        c[n] = (struct comp){p, len, true, 0};
        for (size_t i = 0; i < len; i++) {
            if (p[i] < '0' || p[i] > '9') {
                c[n].is_int = false;
                break;
            }
            if (c[n].value > (SIZE_MAX - 9) / 10)
                return -1; /* an index no node accepts */
            c[n].value = c[n].value * 10 + (size_t)(p[i] - '0');
        }
        if (!dot)
            return n + 1;
        p = dot + 1;
    }
}

/* Does integer component `c` fit the node named by the component before it? */
static bool index_ok(const struct comp *prev, size_t value)
{
    if ((prev->len == 5 && !memcmp(prev->s, "arena", 5)) ||
        (prev->len == 6 && !memcmp(prev->s, "arenas", 6)))
        return value == 0 || value == MALLCTL_ARENAS_ALL;
    return value < SA_NUM_CLASSES - 1; /* bin / bins: jemalloc's bin index */
}

/* Finds the row `c[0..n)` names.  Returns the leaf's row index, or -1 with
 * *inner set to the first row under an inner node the name stops at, or -1
 * with *inner = -1 when nothing matches (ENOENT either way for mallctl). */
static int find(const struct comp *c, int n, int *inner)
{
    *inner = -1;
    for (int i = 1; i < n; i++)
        if (c[i].is_int && !index_ok(&c[i - 1], c[i].value))
            return -1;
    for (unsigned r = 0; r < NROWS; r++) {
        int k;
        const char *s;
        size_t len;
        for (k = 0; k < n && pattern_comp(table[r].name, (unsigned)k, &s, &len); k++) {
            bool placeholder = s[0] == '<';
            if (placeholder ? !c[k].is_int
                            : c[k].is_int || len != c[k].len || memcmp(s, c[k].s, len))
                break;
        }
        if (k < n)
            continue;
        if (!pattern_comp(table[r].name, (unsigned)n, &s, &len))
            return (int)r;
        if (*inner < 0)
            *inner = (int)r;
    }
    return -1;
}

/* ---- calling a row ---- */

static int call(int r, const struct comp *c, int n, void *oldp, size_t *oldlenp,
                void *newp, size_t newlen)
{
    const struct ctl_row *row = &table[r];
    struct ctl_ctx cx = {row, {0, 0}};
    for (int i = 0, j = 0; i < n; i++)
        if (c[i].is_int && j < 2)
            cx.idx[j++] = c[i].value;

    if ((row->gate & G_PROF_ALL) && !opt_prof)
        return ENOENT;
    bool rd = oldp || oldlenp, wr = newp || newlen;
    switch (row->access) {
    case A_R: if (wr) return EPERM; break;
    case A_W: if (rd) return EPERM; break;
    case A_NONE: if (rd || wr) return EPERM; break;
    case A_RX: if (rd && wr) return EPERM; break;
    case A_RW: break;
    }
    if ((row->gate & G_PROF_WRITE) && newp && !opt_prof)
        return ENOENT;

    size_t size = type_size[row->type];
    if (newp && newlen != size)
        return EINVAL;
    union ctl_val old = {0}, new = {0};
    bool want_old = oldp && oldlenp; /* one without the other: no read (spec 1.2) */
    if (want_old && *oldlenp != size) {
        /* Wrong size: the partial copy jemalloc makes, and no write. */
        int err = row->fn(&cx, &old, NULL);
        if (err)
            return err;
        size_t n_copy = *oldlenp < size ? *oldlenp : size;
        memcpy(oldp, &old, n_copy);
        *oldlenp = n_copy;
        return EINVAL;
    }
    if (row->access == A_R && !want_old)
        return 0; /* r- handlers always fill *old */
    if (newp)
        memcpy(&new, newp, size);
    int err = row->fn(&cx, want_old ? &old : NULL, newp ? &new : NULL);
    if (err)
        return err;
    if (want_old)
        memcpy(oldp, &old, size);
    return 0;
}

/* Initialises salloc (options above all) the first time it is needed, and
 * notes whether the calling thread had a cache before (thread.tcache.flush). */
static void ctl_enter(void)
{
    had_cache = init_current_cache() != NULL;
    if (!had_cache)
        init_thread_cache();
}

SA_EXPORT int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
{
    int saved = errno;
    ctl_enter();
    struct comp c[CTL_MAX_DEPTH];
    int n = name ? split(name, c) : -1, inner, r;
    int err = n < 0 || (r = find(c, n, &inner)) < 0
                  ? ENOENT
                  : call(r, c, n, oldp, oldlenp, newp, newlen);
    errno = saved;
    return err;
}

SA_EXPORT int mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp)
{
    int saved = errno;
    ctl_enter();
    struct comp c[CTL_MAX_DEPTH];
    int n = name ? split(name, c) : -1, inner = -1, r = -1, err = 0;
    if (!mibp || !miblenp)
        err = EINVAL;
    else if (n < 0 || ((r = find(c, n, &inner)) < 0 && inner < 0))
        err = ENOENT;
    else {
        /* Named components: (row, position) of the matched row's pattern. */
        size_t row = (size_t)(r >= 0 ? r : inner);
        size_t cap = *miblenp < (size_t)n ? *miblenp : (size_t)n;
        for (size_t k = 0; k < cap; k++)
            mibp[k] = c[k].is_int ? c[k].value : CTL_MIB_NAMED | row << 8 | k;
        *miblenp = cap;
    }
    errno = saved;
    return err;
}

SA_EXPORT int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp,
                           void *newp, size_t newlen)
{
    int saved = errno, err = ENOENT;
    ctl_enter();
    /* Rebuild the dotted name, then look it up like mallctl() does. */
    char name[CTL_MAX_DEPTH * 24];
    size_t len = 0;
    if (!mib || miblen == 0 || miblen > CTL_MAX_DEPTH)
        goto out;
    for (size_t k = 0; k < miblen; k++) {
        char part[24];
        const char *s = part;
        size_t plen = 0;
        if (mib[k] & CTL_MIB_NAMED) {
            size_t row = (mib[k] & ~CTL_MIB_NAMED) >> 8, pos = mib[k] & 0xff;
            if (row >= NROWS || !pattern_comp(table[row].name, (unsigned)pos, &s, &plen) ||
                s[0] == '<')
                goto out;
        } else {
            char digits[24];
            size_t v = mib[k];
            do {
                digits[plen++] = (char)('0' + v % 10);
                v /= 10;
            } while (v);
            for (size_t i = 0; i < plen; i++)
                part[i] = digits[plen - 1 - i];
        }
        if (len + plen + 2 > sizeof(name))
            goto out;
        if (k)
            name[len++] = '.';
        memcpy(name + len, s, plen);
        len += plen;
    }
    name[len] = '\0';
    struct comp c[CTL_MAX_DEPTH];
    int n = split(name, c), inner, r;
    if (n > 0 && (r = find(c, n, &inner)) >= 0)
        err = call(r, c, n, oldp, oldlenp, newp, newlen);
out:
    errno = saved;
    return err;
}

bool ctl_table_ok(void)
{
    for (unsigned r = 0; r < NROWS; r++) {
        struct comp c[CTL_MAX_DEPTH];
        if (split(table[r].name, c) < 0)
            return false;
        if (r && strcmp(table[r - 1].name, table[r].name) >= 0)
            return false;
    }
    return true;
}
