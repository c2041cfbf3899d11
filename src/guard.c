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
static size_t live; /* guarded mappings now mapped, quarantined ones too; atomic */

bool guard_room(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED) < guard_max_live; }
size_t guard_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }

struct span *guard_map(size_t usable, size_t align, uintptr_t *object, size_t *data_len)
{
    size_t data = sa_align_up(usable, SA_PAGE_SIZE), len = data + SA_PAGE_SIZE;
    void *p = os_map(len, SA_PAGE_SIZE);
    if (!p)
        return NULL;
    os_nohugepage(p, len);
    struct span *s = NULL;
    if (os_protect((char *)p + data, SA_PAGE_SIZE, false))
        s = pageheap_register_mapping(p, len >> SA_PAGE_SHIFT);
    if (!s) {
        os_unmap(p, len);
        return NULL;
    }
    __atomic_fetch_add(&live, 1, __ATOMIC_RELAXED);
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
    os_unmap(start, len);
    __atomic_fetch_sub(&live, 1, __ATOMIC_RELAXED);
}

/* ---- quarantine ---- */

static sa_lock_t lock = SA_LOCK_INITIALIZER(LOCK_RANK_QUARANTINE);
SA_BSS_APART static struct span *fifo[GUARD_QUARANTINE]; /* under lock */
static unsigned head, count;                /* under lock */

struct span *guard_quarantine(struct span *s)
{
    /* The guard page is inaccessible already; the block's pages join it,
     * emptied (no memory kept for them). */
    size_t data = (s->npages - 1) << SA_PAGE_SHIFT;
    os_purge((void *)s->start, data);
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
