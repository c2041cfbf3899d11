/*
 * guard.c: guarded sampling's mappings, quarantine and SIGSEGV handler (see
 * guard.h).
 */
#define _GNU_SOURCE
#include "guard.h"

#include <signal.h>
#include <string.h>
#include <ucontext.h>

#include "dump.h"
#include "lock.h"
#include "os.h"
#include "pageheap.h"
#include "span.h"

/* ---- mappings ---- */

SA_TEST_MUTABLE size_t guard_max_live = GUARD_MAX_LIVE;
static size_t live; /* guarded mappings now mapped, quarantined and pooled ones too; atomic */

bool guard_room(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED) < guard_max_live; }
size_t guard_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }

/* Unmaps a guarded mapping that is out of the pagemap. */
static void unmap_counted(void *start, size_t len)
{
    os_unmap(start, len);
    __atomic_fetch_sub(&live, 1, __ATOMIC_RELAXED);
}

/* ---- recycled mappings ----
 *
 * A mapping that leaves the quarantine is inaccessible and empty already
 * (purged when it went in).  Up to GUARD_POOL of them wait, out of the
 * pagemap, for the next guarded sample of their length, which then costs
 * one mprotect (its block's pages accessible again; the kernel's zero
 * pages at their first touch).  A new mapping costs four or five system
 * calls (an mmap over-mapped by a page for the alignment and trimmed at
 * both ends, a madvise, an mprotect) and its unmap one more.  Oldest out:
 * a pool full of lengths nobody asks for again gives way to new ones.
 * Pooled mappings are still the kernel's mappings, so they count in
 * `live`.  Under the quarantine's lock; `start` 0: an empty entry. */
static struct pooled {
    uintptr_t start;
    size_t npages;
    uint64_t age; /* pool_clock when it came in */
} pool[GUARD_POOL];
static uint64_t pool_clock;

static sa_lock_t lock = SA_LOCK_INITIALIZER(LOCK_RANK_QUARANTINE);

/* The newest pooled mapping of `npages` salloc pages, out of the pool;
 * 0 if there is none. */
static uintptr_t pool_take(size_t npages)
{
    struct pooled *found = NULL;
    sa_lock(&lock);
    for (unsigned i = 0; i < GUARD_POOL; i++)
        if (pool[i].start && pool[i].npages == npages && (!found || pool[i].age > found->age))
            found = &pool[i];
    uintptr_t start = found ? found->start : 0;
    if (found)
        found->start = 0;
    sa_unlock(&lock);
    return start;
}

/* Pools an inaccessible, empty mapping; returns the one it pushed out
 * (start 0: none), for the caller to unmap. */
static struct pooled pool_put(uintptr_t start, size_t npages)
{
    sa_lock(&lock);
    struct pooled *slot = &pool[0];
    for (unsigned i = 0; i < GUARD_POOL && slot->start; i++)
        if (!pool[i].start || pool[i].age < slot->age)
            slot = &pool[i];
    struct pooled out = *slot;
    *slot = (struct pooled){.start = start, .npages = npages, .age = ++pool_clock};
    sa_unlock(&lock);
    return out;
}

size_t guard_pooled(void)
{
    size_t n = 0;
    sa_lock(&lock);
    for (unsigned i = 0; i < GUARD_POOL; i++)
        n += pool[i].start != 0;
    sa_unlock(&lock);
    return n;
}

/* A mapping of `len` bytes, counted in `live`, whose first `data` bytes
 * are accessible and zero and whose last page is inaccessible: a pooled
 * one of that length, or a new one; NULL with ENOMEM. */
static void *map_guarded(size_t len, size_t data)
{
    void *p = (void *)pool_take(len >> SA_PAGE_SHIFT);
    if (p) {
        if (os_protect(p, data, true))
            return p;
        unmap_counted(p, len);
    }
    if (!(p = os_map(len, SA_PAGE_SIZE)))
        return NULL;
    os_nohugepage(p, len);
    if (!os_protect((char *)p + data, SA_PAGE_SIZE, false)) {
        os_unmap(p, len);
        return NULL;
    }
    __atomic_fetch_add(&live, 1, __ATOMIC_RELAXED);
    return p;
}

struct span *guard_map(size_t usable, size_t align, uintptr_t *object, size_t *data_len)
{
    size_t data = sa_align_up(usable, SA_PAGE_SIZE), len = data + SA_PAGE_SIZE;
    void *p = map_guarded(len, data);
    if (!p)
        return NULL;
    struct span *s = pageheap_register_mapping(p, len >> SA_PAGE_SHIFT);
    if (!s) {
        unmap_counted(p, len);
        return NULL;
    }
    /* The alignment a block of this size has in a slab: its size's lowest
     * set bit, up to 16 (an 8-byte block is 8-aligned), or more if asked. */
    size_t natural = usable & -usable;
    size_t a = align > 16 ? align : natural < 16 ? natural : 16;
    if (a < align)
        a = align;
    *object = (uintptr_t)p + data - sa_align_up(usable, a);
    *data_len = data;
    return s;
}

void guard_unmap(struct span *s)
{
    void *start = (void *)s->start;
    size_t len = s->npages << SA_PAGE_SHIFT;
    pageheap_unregister_mapping(s);
    unmap_counted(start, len);
}

void guard_retire(struct span *s)
{
    uintptr_t start = s->start;
    size_t npages = s->npages;
    bool emptied = !s->dirty;
    pageheap_unregister_mapping(s);
    struct pooled out = {.start = start, .npages = npages};
    if (emptied)
        out = pool_put(start, npages);
    if (out.start)
        unmap_counted((void *)out.start, out.npages << SA_PAGE_SHIFT);
}

/* ---- quarantine ---- */

SA_BSS_APART static struct span *fifo[GUARD_QUARANTINE]; /* under lock */
static unsigned head, count;                /* under lock */

struct span *guard_quarantine(struct span *s)
{
    /* The guard page is inaccessible already; the block's pages join it,
     * emptied (no memory kept for them).  A purge the kernel refused
     * keeps the mapping out of the pool: its pages are not zero. */
    size_t data = (s->npages - 1) << SA_PAGE_SHIFT;
    s->dirty = !os_purge((void *)s->start, data);
    os_protect((void *)s->start, data, false);
    struct span *out = NULL;
    sa_lock(&lock);
    if (count == GUARD_QUARANTINE) {
        out = fifo[head];
        head = (head + 1) % GUARD_QUARANTINE;
        count--;
    }
    fifo[(head + count++) % GUARD_QUARANTINE] = s;
    sa_unlock(&lock);
    return out;
}

/* ---- the SIGSEGV handler ---- */

static struct sigaction previous;

/* 1 for a write, 0 for a read, -1 where the machine does not say (x86-64:
 * bit 1 of the page fault's error code). */
static int fault_was_write(const void *context)
{
#if defined(__x86_64__)
    const ucontext_t *uc = context;
    return uc ? (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0 : -1;
#else
    (void)context;
    return -1;
#endif
}

static void on_segv(int sig, siginfo_t *info, void *context)
{
    /* A SIGSEGV sent (kill, raise, sigqueue: si_code <= 0) is no access:
     * nothing happens again on return, and its si_addr is no address. */
    bool sent = !info || info->si_code <= 0;
    if (!sent && prof_report_fault(info->si_addr, fault_was_write(context))) {
        /* Reported: the access happens again on return, and the default
         * action ends the process with SIGSEGV. */
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler == SIG_IGN && sent) {
        return; /* ignored, as it would have been without salloc */
    } else if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        signal(SIGSEGV, SIG_DFL); /* a fault cannot be ignored: the default */
        if (sent) /* not sent again by a returning access: the default now */
            raise(SIGSEGV);
    } else {
        previous.sa_handler(sig);
    }
}

void guard_install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous);
}

void guard_prefork(void) { sa_lock(&lock); }
void guard_postfork_parent(void) { sa_unlock(&lock); }
void guard_postfork_child(void) { sa_lock_reinit(&lock); }
