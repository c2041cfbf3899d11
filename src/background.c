/*
 * background.c: the background decay thread (see background.h).
 *
 * Two pthread mutexes, neither an allocator lock:
 *   - `control` serialises starting and stopping (mallctl writes, the
 *     deferred start, fork).  It is held across pthread_create and
 *     pthread_join, which allocate and free: so no allocator lock may be
 *     held when it is taken, and the thread itself never takes it.
 *   - `state_lock` guards the thread's state and statistics, with `wake`
 *     (CLOCK_MONOTONIC) to cut a sleep short when the thread must stop.
 *     The thread releases it while it runs decay, so decay's locks (page
 *     heap, sampled mappings, sample shards) are never taken under it.
 * Order: control, then state_lock, then (never while holding either, in the
 * thread) the allocator's locks.  prefork takes both, first of all.
 *
 * The forking thread holds both from its prepare handler to its parent or
 * child handler, and other atfork handlers that run in between may use
 * mallctl (lock.h, sa_in_fork): there the statistics are read without
 * them (that thread holds them), a new decay time wakes no thread (it
 * takes it at the end of its sleep, a decay step at most; in the child
 * it is gone), and the thread is neither started nor stopped.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "background.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "central.h"
#include "conf.h"
#include "lock.h"
#include "log.h"
#include "os.h"
#include "pageheap.h"
#include "prof.h"
#include "sampled_pages.h"

bool background_start_pending;

static pthread_mutex_t control = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;
static bool wake_ready; /* `wake` initialised (CLOCK_MONOTONIC); under control */

/* Under state_lock. */
static bool stopping;
static bool kicked; /* the decay time changed: the sleep ends early */
static pthread_t thread;
static uint64_t runs, first_run_ns, last_run_ns;

uint64_t background_interval_ns(long decay_ms)
{
    if (decay_ms <= 0)
        return BACKGROUND_IDLE_INTERVAL_NS;
    uint64_t step = pageheap_decay_step_ns((uint64_t)decay_ms * 1000000u);
    return step < BACKGROUND_MIN_INTERVAL_NS ? BACKGROUND_MIN_INTERVAL_NS : step;
}

/* One pass of everything that decays on a timer. */
static void decay_pass(void)
{
    uint64_t now = os_now_ns();
    central_decay(now); /* first: spans it gives back decay with the page heap's */
    pageheap_decay();
    sampled_pages_decay(now);
    prof_decay_spares(now);
}

static struct timespec monotonic_after(uint64_t ns)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t nsec = (uint64_t)t.tv_nsec + ns % 1000000000u;
    t.tv_sec += (time_t)(ns / 1000000000u + nsec / 1000000000u);
    t.tv_nsec = (long)(nsec % 1000000000u);
    return t;
}

static void *thread_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&state_lock);
    while (!stopping) {
        pthread_mutex_unlock(&state_lock);
        decay_pass();
        uint64_t now = os_now_ns();
        pthread_mutex_lock(&state_lock);
        if (runs++ == 0)
            first_run_ns = now;
        last_run_ns = now;
        struct timespec until = monotonic_after(background_interval_ns(pageheap_decay_ms()));
        while (!stopping && !kicked &&
               pthread_cond_timedwait(&wake, &state_lock, &until) != ETIMEDOUT)
            ;
        kicked = false;
    }
    pthread_mutex_unlock(&state_lock);
    return NULL;
}

/* Under control: the thread runs once this returns 0. */
static int start_locked(void)
{
    if (pageheap_decay_in_background())
        return 0;
    if (!wake_ready) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&wake, &ca);
        pthread_condattr_destroy(&ca);
        wake_ready = true;
    }
    pthread_mutex_lock(&state_lock);
    stopping = kicked = false;
    runs = first_run_ns = last_run_ns = 0;
    pthread_mutex_unlock(&state_lock);
    /* Every signal blocked in the thread (it inherits the mask): a
     * program's handlers must not run on a thread it did not make. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    int err = pthread_create(&thread, &attr, thread_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return EAGAIN;
    /* Named here, not by the thread: it has its name once the start
     * returns (a program listing its threads then sees it). */
    pthread_setname_np(thread, "salloc_bg");
    __atomic_store_n(&pageheap_background_decay, true, __ATOMIC_RELAXED);
    return 0;
}

/* Under control. */
static void stop_locked(void)
{
    if (!pageheap_decay_in_background())
        return;
    pthread_mutex_lock(&state_lock);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&state_lock);
    pthread_join(thread, NULL);
    /* Decay is the allocating threads' again from here on. */
    __atomic_store_n(&pageheap_background_decay, false, __ATOMIC_RELAXED);
}

void background_boot(void)
{
    if (opt_background_thread)
        __atomic_store_n(&background_start_pending, true, __ATOMIC_RELAXED);
}

void background_start_deferred(void)
{
    /* One caller wins; the allocations pthread_create makes see it clear. */
    if (!__atomic_exchange_n(&background_start_pending, false, __ATOMIC_RELAXED))
        return;
    int saved = errno; /* the allocation's, for its caller */
    pthread_mutex_lock(&control);
    if (start_locked() != 0)
        sa_warn("background_thread: could not create the thread; decay stays inline");
    pthread_mutex_unlock(&control);
    errno = saved;
}

int background_set(bool on)
{
    if (sa_in_fork) /* an atfork handler's (above) */
        return EAGAIN;
    pthread_mutex_lock(&control);
    __atomic_store_n(&background_start_pending, false, __ATOMIC_RELAXED);
    int err = 0;
    if (on)
        err = start_locked();
    else
        stop_locked();
    pthread_mutex_unlock(&control);
    return err;
}

void background_decay_changed(void)
{
    if (sa_in_fork) /* an atfork handler's (above) */
        return;
    pthread_mutex_lock(&control); /* the thread, if any, stays while kicked */
    if (pageheap_decay_in_background()) {
        pthread_mutex_lock(&state_lock);
        kicked = true;
        pthread_cond_signal(&wake);
        pthread_mutex_unlock(&state_lock);
    }
    pthread_mutex_unlock(&control);
}

bool background_get(void) { return pageheap_decay_in_background(); }

void background_get_stats(struct background_stats *st)
{
    bool lock = !sa_in_fork; /* else this thread holds it (above) */
    if (lock)
        pthread_mutex_lock(&state_lock);
    st->num_threads = background_get() ? 1 : 0;
    st->num_runs = runs;
    st->run_interval_ns = runs > 1 ? (last_run_ns - first_run_ns) / (runs - 1) : 0;
    if (lock)
        pthread_mutex_unlock(&state_lock);
}

void background_prefork(void)
{
    pthread_mutex_lock(&control);
    pthread_mutex_lock(&state_lock);
}

void background_postfork_parent(void)
{
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_unlock(&control);
}

/* The thread did not come along: the child decays inline, and starts one
 * only if asked (mallctl), as under jemalloc. */
void background_postfork_child(void)
{
    pthread_mutex_init(&control, NULL);
    pthread_mutex_init(&state_lock, NULL);
    wake_ready = false; /* a condition variable is not copied in use */
    stopping = kicked = false;
    runs = first_run_ns = last_run_ns = 0;
    __atomic_store_n(&pageheap_background_decay, false, __ATOMIC_RELAXED);
    __atomic_store_n(&background_start_pending, false, __ATOMIC_RELAXED);
}
