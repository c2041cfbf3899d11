/*
 * sampled_pages.c: mappings for sampled allocations, with a cache of freed
 * ones (see sampled_pages.h).  The cache is an array of slots per length,
 * not a list linked through the mappings: a link written into a purged
 * mapping would make its first page resident again.  Bit 0 of a slot's
 * address marks a mapping that was not purged (mappings are page aligned).
 *
 * Decay: at most every eighth of the decay time (and at most once a second,
 * as the page heap does), a put looks for kept mappings idle longer than
 * the decay time and purges them.  A mapping being purged is out of the
 * cache, so no sample can get it half purged.
 */
#include "sampled_pages.h"

#include <errno.h>

#include "lock.h"
#include "os.h"
#include "pageheap.h"
#include "util.h"

/* Per length (in salloc pages, 1..SAMPLED_CACHE_MAX_PAGES): up to SLOTS
 * kept mappings.  At most CACHE_BYTES in all, so a program that once had
 * many samples does not keep their memory forever. */
#define SLOTS 16
#define CACHE_BYTES ((size_t)8 << 20)
#define DIRTY_BIT ((uintptr_t)1)
#define NLENGTHS (SAMPLED_CACHE_MAX_PAGES + 1)

struct kept {
    uintptr_t addr;    /* mapping start | DIRTY_BIT if not purged */
    uint64_t freed_at; /* os_now_ns() when it was put back */
};

static sa_lock_t lock = SA_LOCK_INITIALIZER(LOCK_RANK_SAMPLED_PAGES);
static struct kept slots[NLENGTHS][SLOTS]; /* under lock */
static unsigned nslots[NLENGTHS];          /* under lock */
static size_t cached, dirty;               /* under lock; atomic reads */
static uint64_t next_decay_check;          /* under lock */

static size_t len_of(size_t pages) { return pages << SA_PAGE_SHIFT; }

static void count(size_t len, bool is_dirty, long sign)
{
    size_t delta = sign > 0 ? len : -len;
    __atomic_store_n(&cached, cached + delta, __ATOMIC_RELAXED);
    if (is_dirty)
        __atomic_store_n(&dirty, dirty + delta, __ATOMIC_RELAXED);
}

/* Under lock: keeps a mapping if there is room; false if there is none. */
static bool keep_locked(uintptr_t addr, size_t pages, bool is_dirty, uint64_t now)
{
    if (nslots[pages] == SLOTS || cached + len_of(pages) > CACHE_BYTES)
        return false;
    slots[pages][nslots[pages]++] = (struct kept){addr | (is_dirty ? DIRTY_BIT : 0), now};
    count(len_of(pages), is_dirty, 1);
    return true;
}

/* Under lock: takes out up to `max` dirty mappings idle since before
 * `idle_since` into out[] (addresses, pages); returns how many. */
static size_t take_dirty_locked(uint64_t idle_since, uintptr_t *out, size_t *pages, size_t max)
{
    size_t n = 0;
    for (size_t len = 1; len < NLENGTHS; len++)
        for (unsigned i = 0; i < nslots[len] && n < max;) {
            struct kept *k = &slots[len][i];
            if (!(k->addr & DIRTY_BIT) || k->freed_at > idle_since) {
                i++;
                continue;
            }
            out[n] = k->addr & ~DIRTY_BIT;
            pages[n++] = len;
            count(len_of(len), true, -1);
            *k = slots[len][--nslots[len]];
        }
    return n;
}

/* Purges mappings taken out of the cache and keeps them again, clean. */
static size_t purge_and_keep(const uintptr_t *addr, const size_t *pages, size_t n)
{
    size_t purged = 0;
    uint64_t now = os_now_ns();
    for (size_t i = 0; i < n; i++) {
        bool ok = os_purge((void *)addr[i], len_of(pages[i]));
        if (ok)
            purged += len_of(pages[i]);
        sa_lock(&lock);
        bool kept = keep_locked(addr[i], pages[i], !ok, now);
        sa_unlock(&lock);
        if (!kept)
            os_unmap((void *)addr[i], len_of(pages[i]));
    }
    return purged;
}

static void maybe_decay(void)
{
    long decay_ms = pageheap_decay_ms();
    if (decay_ms <= 0) /* 0: purged on put; negative: only on purge */
        return;
    uintptr_t addr[SLOTS];
    size_t pages[SLOTS], n = 0;
    uint64_t now = os_now_ns(), decay_ns = (uint64_t)decay_ms * 1000000u;
    uint64_t step = decay_ns / 8 < 1000000000u ? decay_ns / 8 : 1000000000u;
    sa_lock(&lock);
    /* A check scheduled further out than one step was scheduled under a
     * longer decay time (dirty_decay_ms changed): do it now. */
    if ((now >= next_decay_check || next_decay_check - now > step) && dirty) {
        next_decay_check = now + step;
        if (now > decay_ns)
            n = take_dirty_locked(now - decay_ns, addr, pages, SLOTS);
    }
    sa_unlock(&lock);
    purge_and_keep(addr, pages, n);
}

void *sampled_pages_get(size_t len, size_t align, bool *zeroed)
{
    size_t pages = len >> SA_PAGE_SHIFT;
    if (pages < NLENGTHS && align <= SA_PAGE_SIZE) {
        uintptr_t addr = 0;
        sa_lock(&lock);
        if (nslots[pages]) {
            addr = slots[pages][--nslots[pages]].addr;
            count(len, addr & DIRTY_BIT, -1);
        }
        sa_unlock(&lock);
        if (addr) {
            *zeroed = !(addr & DIRTY_BIT);
            return (void *)(addr & ~DIRTY_BIT);
        }
    }
    void *p = os_map(len, align > SA_PAGE_SIZE ? align : SA_PAGE_SIZE);
    if (p)
        os_nohugepage(p, len);
    *zeroed = true;
    return p;
}

void sampled_pages_put(void *p, size_t len)
{
    size_t pages = len >> SA_PAGE_SHIFT;
    bool kept = false;
    if (pages < NLENGTHS) {
        bool is_dirty = pageheap_decay_ms() != 0 || !os_purge(p, len);
        sa_lock(&lock);
        kept = keep_locked((uintptr_t)p, pages, is_dirty, os_now_ns());
        sa_unlock(&lock);
    }
    if (!kept)
        os_unmap(p, len);
    maybe_decay();
}

size_t sampled_pages_purge(void)
{
    uintptr_t addr[SLOTS];
    size_t pages[SLOTS], n, purged = 0;
    /* Bounded: a mapping the kernel refused to purge comes back dirty. */
    for (size_t round = 0; round < NLENGTHS; round++) {
        sa_lock(&lock);
        n = take_dirty_locked(UINT64_MAX, addr, pages, SLOTS);
        sa_unlock(&lock);
        purged += purge_and_keep(addr, pages, n);
        if (n < SLOTS)
            break;
    }
    return purged;
}

size_t sampled_pages_cached(void) { return __atomic_load_n(&cached, __ATOMIC_RELAXED); }
size_t sampled_pages_dirty(void) { return __atomic_load_n(&dirty, __ATOMIC_RELAXED); }

void sampled_pages_prefork(void) { sa_lock(&lock); }
void sampled_pages_postfork_parent(void) { sa_unlock(&lock); }
void sampled_pages_postfork_child(void) { sa_lock_reinit(&lock); }
