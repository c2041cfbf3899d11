/*
 * sampled_pages.c: mappings for sampled allocations, with a cache of freed
 * ones (see sampled_pages.h).  A mapping is registered with the page heap
 * once, when it is made, and keeps its span record, parked, while it waits
 * in the cache: a sample reuses both, with no page heap lock.  The cache
 * is an array of slots per length, not a list linked through the
 * mappings: a link written into a purged mapping would make its first page
 * resident again.
 *
 * The common case, one thread sampling one small length again and again,
 * does not get here: its sample shard keeps the mapping its last sample
 * freed (prof.c, "spare mappings").  The next most common takes no lock:
 * each length up to HOT_MAX_PAGES has one hot slot, filled
 * by a put with a compare-and-swap from empty and emptied by a get with an
 * exchange, so whoever empties it owns the mapping alone.  A lock round
 * trip costs two locked instructions and glibc's bookkeeping; a slot, one
 * instruction.  Hot mappings are always dirty (a put that purges keeps its
 * mapping under the lock, clean).
 *
 * Kept mappings are dirty (as freed) or clean (purged by a decay pass, or
 * under a decay time of 0).  At most DIRTY_SLOTS of a length are dirty, hot
 * slot included; a put beyond that gives its run back to its region,
 * dirty.  (Before regions, unmapping there cost a threaded process the mmap
 * lock for writing and a TLB shootdown, and the next sample an mmap: where
 * samples come and go in bursts, as in larson/threads=4, the old bound of
 * 16 kept per length cost the benchmark 20-30%.)  A sample takes a dirty
 * mapping first.
 *
 * Decay: at most every eighth of the decay time (and at most once a second,
 * as the page heap does), a put looks for kept mappings idle longer than
 * the decay time, hot or not, and purges them, then for regions with
 * pages dirty that long and purges their dirty runs, one madvise a run of
 * neighbours.  A mapping or run being purged is out of the cache or its
 * region, so no sample can get it half purged.  Purging each run as it was
 * freed cost one madvise a freed sample past the cache: node's worker
 * threads freeing samples in bursts at lg_prof_sample:10 made 48,901
 * madvise calls, each waiting on the mmap lock the other threads' page
 * faults held.
 *
 * Regions: a sample's pages are not an mmap of their own but a run carved
 * out of a region, one 16 MiB NOHUGEPAGE mapping shared by many samples.
 * The kernel allows a process vm.max_map_count mappings (65,530 by
 * default), and a mapping per sample spent one of them on each live small
 * sample: at lg_prof_sample:10 jq parsing a 9 MB file reached the limit,
 * the heap's next mmap failed, and malloc returned NULL with gigabytes
 * free; at the default rate a heap of about 30 GiB of small objects would
 * do the same.  A run the cache does not keep goes back to its region,
 * dirty (purged later with MADV_DONTNEED, which splits no mapping), for any
 * later sample's length; a sample carves a dirty run if a region has one.
 * Regions are kept once made, as the heap retains its address space
 * (opt.retain): their free pages cost no memory.  Runs longer than a small
 * sample's (tests) or aligned beyond a region's alignment get mappings of
 * their own, as before.
 */
#include "sampled_pages.h"

#include <errno.h>

#include "lock.h"
#include "meta.h"
#include "os.h"
#include "page_runs.h"
#include "pageheap.h"
#include "util.h"

/* Per length (in salloc pages, 1..SAMPLED_CACHE_MAX_PAGES): up to SLOTS
 * kept mappings, of which up to DIRTY_SLOTS dirty (see above).  At most
 * CACHE_BYTES in all, so a program that once had many samples does not
 * keep their address space and records forever. */
#define SLOTS 64
#define DIRTY_SLOTS 32
#define CACHE_BYTES ((size_t)8 << 20)
#define NLENGTHS (SAMPLED_CACHE_MAX_PAGES + 1)
/* Hot slots for lengths up to 64 KiB: at most 36 pages in them all, which
 * the locked slots leave room for (one slot fewer per length, and the
 * bytes under CACHE_BYTES). */
#define HOT_MAX_PAGES 8
#define HOT_BYTES ((size_t)(HOT_MAX_PAGES * (HOT_MAX_PAGES + 1) / 2) << SA_PAGE_SHIFT)

struct kept {
    struct span *span; /* the mapping's parked span record */
    bool dirty;        /* not purged since its last sample */
    uint64_t freed_at; /* os_now_ns() when it was put back */
};

static sa_lock_t lock = SA_LOCK_INITIALIZER(LOCK_RANK_SAMPLED_PAGES);
SA_BSS_APART static struct kept slots[NLENGTHS][SLOTS]; /* under lock */
static unsigned nslots[NLENGTHS];          /* under lock */
static unsigned ndirty[NLENGTHS];          /* of those, dirty; under lock */
static size_t cached, dirty;               /* under lock; atomic reads */
static uint64_t next_decay_check;          /* written under lock; atomic reads */
static struct span *hot[HOT_MAX_PAGES + 1]; /* atomics, see above */
static uint64_t hot_freed_at[HOT_MAX_PAGES + 1]; /* its put's os_now_ns(); relaxed */

static bool has_hot_slot(size_t pages) { return pages >= 1 && pages <= HOT_MAX_PAGES; }

/* Bytes in the hot slots, for the statistics (all dirty). */
static size_t hot_bytes(void)
{
    size_t bytes = 0;
    for (size_t pages = 1; pages <= HOT_MAX_PAGES; pages++)
        if (__atomic_load_n(&hot[pages], __ATOMIC_RELAXED))
            bytes += pages << SA_PAGE_SHIFT;
    return bytes;
}

/* Empties the hot slot of `pages` if its mapping was put back at or before
 * `idle_since`: the mapping, now the caller's, or NULL. */
static struct span *take_hot(size_t pages, uint64_t idle_since)
{
    if (!__atomic_load_n(&hot[pages], __ATOMIC_RELAXED) ||
        __atomic_load_n(&hot_freed_at[pages], __ATOMIC_RELAXED) > idle_since)
        return NULL;
    return __atomic_exchange_n(&hot[pages], NULL, __ATOMIC_ACQUIRE);
}

static size_t len_of(size_t pages) { return pages << SA_PAGE_SHIFT; }

/* Under lock: a kept mapping of `len` bytes in (sign 1) or out (-1). */
static void count(size_t len, bool is_dirty, long sign)
{
    size_t delta = sign > 0 ? len : -len;
    __atomic_store_n(&cached, cached + delta, __ATOMIC_RELAXED);
    if (is_dirty) {
        __atomic_store_n(&dirty, dirty + delta, __ATOMIC_RELAXED);
        ndirty[len >> SA_PAGE_SHIFT] += sign > 0 ? 1 : -1;
    }
}

/* ---- regions (see the top of the file) ---- */

#define REGION_PAGES 2048 /* 16 MiB */
#define REGION_ALIGN ((size_t)2 << 20)
#define REGION_MAX_RUN SAMPLED_CACHE_MAX_PAGES /* a small sample's longest */

SA_TEST_MUTABLE size_t sampled_pages_region_pages = REGION_PAGES;

struct region {
    struct region *next;
    uintptr_t start;
    size_t npages; /* sampled_pages_region_pages when it was made */
    size_t free_pages;
    size_t dirty_pages;    /* of the free ones, those not purged */
    uint64_t dirty_since;  /* os_now_ns() when dirty_pages last rose from 0 */
    uint64_t free[REGION_PAGES / 64];  /* 1: free */
    uint64_t dirty[REGION_PAGES / 64]; /* 1: free, not purged (a subset of free) */
};

static struct region *regions; /* under lock; only ever prepended to */
static size_t region_free_bytes, region_dirty_bytes; /* under lock; atomic reads */

/* Under lock: `pages` free pages of r became dirty (sign 1) or stopped
 * being dirty (-1). */
static void region_dirty_count(struct region *r, size_t pages, long sign, uint64_t now)
{
    if (!pages)
        return;
    if (sign > 0 && !r->dirty_pages)
        r->dirty_since = now;
    r->dirty_pages += sign > 0 ? pages : -pages;
    size_t bytes = pages << SA_PAGE_SHIFT;
    __atomic_store_n(&region_dirty_bytes, region_dirty_bytes + (sign > 0 ? bytes : -bytes),
                     __ATOMIC_RELAXED);
}

static bool in_regions(size_t pages, size_t align)
{
    return pages >= 1 && pages <= REGION_MAX_RUN && align <= REGION_ALIGN;
}

/* Under lock: takes [at, at + pages) of r, free, out of its free runs. */
static void take_run_locked(struct region *r, size_t at, size_t pages)
{
    region_dirty_count(r, page_runs_count(r->dirty, at, pages), -1, 0);
    page_runs_set(r->free, at, pages, false);
    page_runs_set(r->dirty, at, pages, false);
    r->free_pages -= pages;
    __atomic_store_n(&region_free_bytes, region_free_bytes - len_of(pages), __ATOMIC_RELAXED);
}

/* Under lock: gives [at, at + pages) of r back to its free runs, dirty or
 * purged. */
static void give_run_locked(struct region *r, size_t at, size_t pages, bool is_dirty, uint64_t now)
{
    page_runs_set(r->free, at, pages, true);
    page_runs_set(r->dirty, at, pages, is_dirty);
    if (is_dirty)
        region_dirty_count(r, pages, 1, now);
    r->free_pages += pages;
    __atomic_store_n(&region_free_bytes, region_free_bytes + len_of(pages), __ATOMIC_RELAXED);
}

/* Under lock: a run of `pages` at a multiple of `align_pages` out of the
 * first region that has one, or 0: all dirty if a region has such a run
 * (its pages are resident: no page faults), else any.  *zeroed: no page of
 * it is dirty. */
static uintptr_t carve_locked(size_t pages, size_t align_pages, bool *zeroed)
{
    for (struct region *r = regions; r; r = r->next) {
        if (r->free_pages < pages)
            continue;
        size_t at = REGION_PAGES;
        if (r->dirty_pages >= pages) /* dirty is a subset of free */
            at = page_runs_find(r->dirty, REGION_PAGES, pages, align_pages);
        if (at == REGION_PAGES)
            at = page_runs_find(r->free, REGION_PAGES, pages, align_pages);
        if (at == REGION_PAGES)
            continue;
        *zeroed = page_runs_all(r->dirty, at, pages, false);
        take_run_locked(r, at, pages);
        return r->start + len_of(at);
    }
    return 0;
}

/* A fresh region, not yet in the list; NULL on ENOMEM. */
static struct region *region_new(void)
{
    size_t npages = sampled_pages_region_pages;
    void *p = os_map(len_of(npages), REGION_ALIGN);
    if (!p)
        return NULL;
    struct region *r = meta_alloc(sizeof(*r), 64);
    if (!r) {
        os_unmap(p, len_of(npages));
        return NULL;
    }
    os_nohugepage(p, len_of(npages));
    r->start = (uintptr_t)p;
    r->npages = r->free_pages = npages;
    r->dirty_pages = 0;
    page_runs_set(r->free, 0, npages, true);
    return r;
}

/* A run of `len` bytes aligned to `align` from a region, making one if none
 * has room; 0 on ENOMEM. */
static uintptr_t region_get(size_t len, size_t align, bool *zeroed)
{
    size_t pages = len >> SA_PAGE_SHIFT;
    size_t align_pages = align > SA_PAGE_SIZE ? align >> SA_PAGE_SHIFT : 1;
    sa_lock(&lock);
    uintptr_t p = carve_locked(pages, align_pages, zeroed);
    sa_unlock(&lock);
    if (p)
        return p;
    struct region *r = region_new(); /* outside the lock: system calls */
    if (!r)
        return 0;
    sa_lock(&lock);
    r->next = regions;
    __atomic_store_n(&regions, r, __ATOMIC_RELEASE);
    __atomic_store_n(&region_free_bytes, region_free_bytes + len_of(r->npages), __ATOMIC_RELAXED);
    p = carve_locked(pages, align_pages, zeroed); /* the new one is first */
    sa_unlock(&lock);
    return p;
}

/* The region holding `start`, or NULL (a mapping of its own).  Lock-free:
 * regions are only prepended, with release, and never removed. */
static struct region *region_of(uintptr_t start)
{
    for (struct region *r = __atomic_load_n(&regions, __ATOMIC_ACQUIRE); r; r = r->next)
        if (start >= r->start && start < r->start + len_of(r->npages))
            return r;
    return NULL;
}

/* Pages no sample uses any more: back to their region, or unmapped if
 * they are a mapping of their own.  Dirty while the heap decays (the decay
 * passes purge a region's dirty runs together, one madvise a run of
 * neighbours); purged at once under a decay time of 0. */
static void release_pages(uintptr_t start, size_t pages)
{
    size_t len = len_of(pages);
    struct region *r = region_of(start);
    if (!r) {
        os_unmap((void *)start, len);
        return;
    }
    bool purged = pageheap_decay_ms() == 0 && os_purge((void *)start, len);
    uint64_t now = purged ? 0 : os_now_ns();
    sa_lock(&lock);
    give_run_locked(r, (start - r->start) >> SA_PAGE_SHIFT, pages, !purged, now);
    sa_unlock(&lock);
}

/* Purges the regions' dirty runs of regions dirty since `idle_since` or
 * before, a batch of runs at a time: each taken out of its region's free
 * runs under the lock (no sample can get it half purged), purged outside
 * it, and given back, purged or, if the kernel refused, dirty.  Bounded:
 * a refused run comes back dirty.  Returns the bytes purged. */
static size_t regions_purge(uint64_t idle_since)
{
    enum { BATCH = 64 };
    struct {
        struct region *r;
        size_t at, pages;
    } runs[BATCH];
    size_t purged = 0;
    for (unsigned round = 0; round < 64; round++) {
        size_t n = 0;
        sa_lock(&lock);
        for (struct region *r = regions; r && n < BATCH; r = r->next) {
            if (!r->dirty_pages || r->dirty_since > idle_since)
                continue;
            size_t at = 0, pages;
            while (n < BATCH && (at = page_runs_next(r->dirty, REGION_PAGES, at, &pages)) <
                                    REGION_PAGES) {
                take_run_locked(r, at, pages);
                runs[n].r = r, runs[n].at = at, runs[n].pages = pages, n++;
                at += pages;
            }
        }
        sa_unlock(&lock);
        if (!n)
            break;
        uint64_t now = os_now_ns();
        for (size_t i = 0; i < n; i++) {
            size_t len = len_of(runs[i].pages);
            bool ok = os_purge((void *)(runs[i].r->start + len_of(runs[i].at)), len);
            purged += ok ? len : 0;
            sa_lock(&lock);
            give_run_locked(runs[i].r, runs[i].at, runs[i].pages, !ok, now);
            sa_unlock(&lock);
        }
        if (n < BATCH)
            break;
    }
    return purged;
}

/* Unregisters a mapping the cache does not keep and releases its pages. */
static void discard(struct span *s)
{
    uintptr_t start = s->start;
    size_t pages = s->npages;
    pageheap_unregister_mapping(s);
    release_pages(start, pages);
}

/* Under lock: whether a mapping of `pages` would be kept, clean. */
static bool has_room_locked(size_t pages)
{
    return pages < NLENGTHS && nslots[pages] < SLOTS - (unsigned)has_hot_slot(pages) &&
           cached + len_of(pages) <= CACHE_BYTES - HOT_BYTES;
}

/* Under lock: keeps a mapping if there is room (for a dirty one, also
 * under DIRTY_SLOTS); false if there is none. */
static bool keep_locked(struct span *s, bool is_dirty, uint64_t now)
{
    size_t pages = s->npages;
    if (!has_room_locked(pages) ||
        (is_dirty && ndirty[pages] >= DIRTY_SLOTS - (unsigned)has_hot_slot(pages)))
        return false;
    slots[pages][nslots[pages]++] = (struct kept){s, is_dirty, now};
    count(len_of(pages), is_dirty, 1);
    return true;
}

/* Under lock: takes out up to `max` dirty mappings idle since before
 * `idle_since` into out[]; returns how many. */
static size_t take_dirty_locked(uint64_t idle_since, struct span **out, size_t max)
{
    size_t n = 0;
    for (size_t pages = 1; pages <= HOT_MAX_PAGES && n < max; pages++)
        if ((out[n] = take_hot(pages, idle_since)))
            n++;
    for (size_t len = 1; len < NLENGTHS; len++)
        for (unsigned i = 0; i < nslots[len] && n < max;) {
            struct kept *k = &slots[len][i];
            if (!k->dirty || k->freed_at > idle_since) {
                i++;
                continue;
            }
            out[n++] = k->span;
            count(len_of(len), true, -1);
            *k = slots[len][--nslots[len]];
        }
    return n;
}

/* Purges mappings taken out of the cache and keeps them again, clean. */
static size_t purge_and_keep(struct span *const *spans, size_t n)
{
    size_t purged = 0;
    uint64_t now = os_now_ns();
    for (size_t i = 0; i < n; i++) {
        size_t len = spans[i]->npages << SA_PAGE_SHIFT;
        bool ok = os_purge((void *)spans[i]->start, len);
        if (ok)
            purged += len;
        sa_lock(&lock);
        bool kept = keep_locked(spans[i], !ok, now);
        sa_unlock(&lock);
        if (!kept)
            discard(spans[i]);
    }
    return purged;
}

/* Purges the kept mappings idle for a decay time, at most once a decay
 * step.  `now`: os_now_ns(). */
void sampled_pages_decay(uint64_t now)
{
    long decay_ms = pageheap_decay_ms();
    if (decay_ms <= 0) /* 0: purged on put; negative: only on purge */
        return;
    struct span *spans[SLOTS];
    size_t n = 0;
    uint64_t decay_ns = (uint64_t)decay_ms * 1000000u;
    uint64_t step = pageheap_decay_step_ns(decay_ns);
    /* Most puts are not due: seen without the lock (checked again under it). */
    uint64_t next = __atomic_load_n(&next_decay_check, __ATOMIC_RELAXED);
    if (now < next && next - now <= step)
        return;
    bool due = false;
    sa_lock(&lock);
    /* A check scheduled further out than one step was scheduled under a
     * longer decay time (dirty_decay_ms changed): do it now. */
    if (now >= next_decay_check || next_decay_check - now > step) {
        __atomic_store_n(&next_decay_check, now + step, __ATOMIC_RELAXED);
        due = now > decay_ns;
        if (due)
            n = take_dirty_locked(now - decay_ns, spans, SLOTS);
    }
    sa_unlock(&lock);
    purge_and_keep(spans, n);
    if (due)
        regions_purge(now - decay_ns);
}

struct span *sampled_pages_get(size_t len, size_t align, bool *zeroed)
{
    size_t pages = len >> SA_PAGE_SHIFT;
    struct span *hot_one =
        has_hot_slot(pages) && align <= SA_PAGE_SIZE ? take_hot(pages, UINT64_MAX) : NULL;
    if (hot_one) {
        *zeroed = false; /* hot mappings are dirty */
        return hot_one;
    }
    if (pages < NLENGTHS && align <= SA_PAGE_SIZE) {
        struct kept k = {NULL, false, 0};
        sa_lock(&lock);
        unsigned n = nslots[pages];
        if (n) {
            /* A dirty one if any (no page faults), from the top down. */
            unsigned i = n - 1;
            while (ndirty[pages] && !slots[pages][i].dirty)
                i--;
            k = slots[pages][i];
            slots[pages][i] = slots[pages][n - 1];
            nslots[pages] = n - 1;
            count(len, k.dirty, -1);
        }
        sa_unlock(&lock);
        if (k.span) {
            *zeroed = !k.dirty;
            return k.span;
        }
    }
    bool fresh_zeroed = true;
    void *p = in_regions(pages, align) ? (void *)region_get(len, align, &fresh_zeroed)
                                       : os_map(len, align > SA_PAGE_SIZE ? align : SA_PAGE_SIZE);
    if (!p)
        return NULL;
    if (!in_regions(pages, align))
        os_nohugepage(p, len);
    struct span *s = pageheap_register_mapping(p, pages);
    if (!s) {
        release_pages((uintptr_t)p, pages);
        return NULL;
    }
    *zeroed = fresh_zeroed;
    return s;
}

#ifdef SA_TESTING
void (*sampled_pages_test_before_keep)(void);
#endif

void sampled_pages_put(struct span *s)
{
    size_t pages = s->npages;
    bool kept = false, kept_dirty = false;
    uint64_t now = os_now_ns();
    struct span *empty = NULL;
    bool decays = pageheap_decay_ms() != 0;
#ifdef SA_TESTING
    if (sampled_pages_test_before_keep) /* dirty_decay_ms set to 0 here, say */
        sampled_pages_test_before_keep();
#endif
    if (has_hot_slot(pages) && decays && !__atomic_load_n(&hot[pages], __ATOMIC_RELAXED) &&
        __atomic_compare_exchange_n(&hot[pages], &empty, s, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED)) {
        /* Written after the mapping is in: a decay pass that reads an
         * older time may purge a mapping put back just now, which costs
         * its next sample a refault, nothing more. */
        __atomic_store_n(&hot_freed_at[pages], now, __ATOMIC_RELAXED);
        kept = kept_dirty = true;
    } else if (pages < NLENGTHS) {
        /* Dirty if the heap decays and there is dirty room, else back to
         * its region, dirty (purged with its neighbours by a decay pass).
         * Under a decay time of 0: purged (not under the lock) and kept
         * clean if there is room. */
        bool room;
        sa_lock(&lock);
        kept = kept_dirty = decays && keep_locked(s, true, now);
        room = !decays && has_room_locked(pages);
        sa_unlock(&lock);
        if (room) {
            bool purged = os_purge((void *)s->start, pages << SA_PAGE_SHIFT);
            sa_lock(&lock);
            kept = keep_locked(s, !purged, now);
            sa_unlock(&lock);
        }
    }
    /* Set to 0 since `decays` was read: the setting's purge (ctl.c) may
     * have passed the cache before this mapping was in, and under 0
     * nothing waits dirty. */
    if (kept_dirty && pageheap_decay_ms() == 0)
        sampled_pages_purge();
    if (!kept)
        discard(s);
    if (!pageheap_decay_in_background()) /* else the background thread's job */
        sampled_pages_decay(now);
}

size_t sampled_pages_put_purged(struct span *s) { return purge_and_keep(&s, 1); }

size_t sampled_pages_purge(void)
{
    struct span *spans[SLOTS];
    size_t n, purged = 0;
    /* Bounded: a mapping the kernel refused to purge comes back dirty. */
    for (size_t round = 0; round < NLENGTHS; round++) {
        sa_lock(&lock);
        n = take_dirty_locked(UINT64_MAX, spans, SLOTS);
        sa_unlock(&lock);
        purged += purge_and_keep(spans, n);
        if (n < SLOTS)
            break;
    }
    /* After the cache: a mapping it could not keep clean went back to its
     * region, dirty. */
    return purged + regions_purge(UINT64_MAX);
}

size_t sampled_pages_cached(void) { return __atomic_load_n(&cached, __ATOMIC_RELAXED) + hot_bytes(); }
size_t sampled_pages_retained(void)
{
    size_t free_bytes = __atomic_load_n(&region_free_bytes, __ATOMIC_RELAXED);
    size_t dirty_bytes = __atomic_load_n(&region_dirty_bytes, __ATOMIC_RELAXED);
    return free_bytes > dirty_bytes ? free_bytes - dirty_bytes : 0; /* read apart */
}

size_t sampled_pages_dirty(void)
{
    return __atomic_load_n(&dirty, __ATOMIC_RELAXED) + hot_bytes() +
           __atomic_load_n(&region_dirty_bytes, __ATOMIC_RELAXED);
}

void sampled_pages_prefork(void) { sa_lock(&lock); }
void sampled_pages_postfork_parent(void) { sa_unlock(&lock); }
void sampled_pages_postfork_child(void) { sa_lock_reinit(&lock); }
