/*
 * sampled_pages.c: mappings for sampled allocations, with a cache of purged
 * ones (see sampled_pages.h).  The cache is an array of slots per length,
 * not a list linked through the mappings: a link written into a purged
 * mapping would make its first page resident again.  Bit 0 of a slot marks
 * a mapping cached without a purge (mappings are page aligned).
 */
#include "sampled_pages.h"

#include <errno.h>

#include "lock.h"
#include "os.h"
#include "util.h"

/* Per length (in salloc pages, 1..SAMPLED_CACHE_MAX_PAGES): up to SLOTS
 * purged mappings.  At most CACHE_BYTES in all, so a program that once had
 * many samples does not keep their address space forever. */
#define SLOTS 16
#define CACHE_BYTES ((size_t)8 << 20)

static sa_lock_t lock = SA_LOCK_INITIALIZER(LOCK_RANK_SAMPLED_PAGES);
static void *slots[SAMPLED_CACHE_MAX_PAGES + 1][SLOTS]; /* under lock */
static unsigned nslots[SAMPLED_CACHE_MAX_PAGES + 1];   /* under lock */
static size_t cached;                                  /* under lock; atomic reads */

void *sampled_pages_get(size_t len, size_t align, bool *zeroed)
{
    size_t pages = len >> SA_PAGE_SHIFT;
    if (pages <= SAMPLED_CACHE_MAX_PAGES && align <= SA_PAGE_SIZE) {
        sa_lock(&lock);
        uintptr_t slot = nslots[pages] ? (uintptr_t)slots[pages][--nslots[pages]] : 0;
        if (slot)
            __atomic_store_n(&cached, cached - len, __ATOMIC_RELAXED);
        sa_unlock(&lock);
        if (slot) {
            *zeroed = !(slot & 1);
            return (void *)(slot & ~(uintptr_t)1);
        }
    }
    void *p = os_map(len, align > SA_PAGE_SIZE ? align : SA_PAGE_SIZE);
    if (p)
        os_nohugepage(p, len);
    *zeroed = true;
    return p;
}

void sampled_pages_put(void *p, size_t len, size_t used)
{
    size_t pages = len >> SA_PAGE_SHIFT;
    bool unpurged = pages == 1 && used <= os_page_size();
    if (pages <= SAMPLED_CACHE_MAX_PAGES && (unpurged || os_purge(p, len))) {
        sa_lock(&lock);
        bool kept = nslots[pages] < SLOTS && cached + len <= CACHE_BYTES;
        if (kept) {
            slots[pages][nslots[pages]++] = (void *)((uintptr_t)p | unpurged);
            __atomic_store_n(&cached, cached + len, __ATOMIC_RELAXED);
        }
        sa_unlock(&lock);
        if (kept)
            return;
    }
    os_unmap(p, len);
}

size_t sampled_pages_cached(void) { return __atomic_load_n(&cached, __ATOMIC_RELAXED); }

void sampled_pages_prefork(void) { sa_lock(&lock); }
void sampled_pages_postfork_parent(void) { sa_unlock(&lock); }
void sampled_pages_postfork_child(void) { sa_lock_reinit(&lock); }
