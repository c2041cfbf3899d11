/*
 * init.c: the one-time set-up, the thread-local cache pointer and thread
 * exit (see init.h).
 *
 * TLS: one pointer (tcache_tls) and one state byte, initial-exec, so the fast
 * path reaches the cache with a single %fs-relative load.  Initial-exec TLS
 * means salloc must be preloaded or linked, not dlopen'ed late (see README).
 *
 * The set-up is a compare-and-swap state machine rather than pthread_once:
 * pthread_atfork and pthread_setspecific may themselves call malloc, and a
 * recursive call must not wait for itself.  It gets served uncached.
 */
#include "init.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "background.h"
#include "conf.h"
#include "ctl.h"
#include "dump.h"
#include "fastpath.h"
#include "fork.h"
#include "log.h"
#include "os.h"
#include "pagemap.h"
#include "sampler.h"
#include "tcache.h"

enum thread_state { THREAD_NEW = 0, THREAD_CACHED, THREAD_EXITED };
enum init_state { INIT_NONE = 0, INIT_RUNNING, INIT_DONE };

#define SA_TLS __thread __attribute__((tls_model("initial-exec")))

SA_TLS struct tcache *tcache_tls = &tcache_empty;
static SA_TLS unsigned char thread_state;
static SA_TLS bool in_set_up;

static int init_state;
static pthread_key_t exit_key;
static uint64_t started_ns; /* written by the set-up, before INIT_DONE is published */

uint64_t init_started_ns(void) { return started_ns; }

/* pthread key destructor: the thread is exiting; give its cache back.  Any
 * allocation after this (a later destructor) is served uncached. */
static void thread_exit(void *arg)
{
    tcache_tls = &tcache_empty;
    thread_state = THREAD_EXITED;
    prof_thread_exit(arg);
    tcache_destroy(arg);
}

static bool global_init(void)
{
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == INIT_DONE)
        return true;
    if (in_set_up)
        return false;
    int expected = INIT_NONE;
    if (__atomic_compare_exchange_n(&init_state, &expected, INIT_RUNNING, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        in_set_up = true;
        started_ns = os_now_ns();
        conf_init();
        malloc_boot_modes();
        if (malloc_every_call_slow) { /* before anything allocates: no leaf, no cache yet */
            pagemap_check_every_free();
            sampler_check_every_allocation();
        }
        prof_boot();
        /* Only the function's address: its cold page stays unmapped. */
        if (opt_stats_print && atexit(stats_print_at_exit) != 0)
            sa_warn("stats_print: atexit() failed: no report at exit");
        pthread_key_create(&exit_key, thread_exit);
        fork_init();
        background_boot(); /* the thread itself only after set-up */
        in_set_up = false;
        __atomic_store_n(&init_state, INIT_DONE, __ATOMIC_RELEASE);
        return true;
    }
    while (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
        sched_yield();
    return true;
}

struct tcache *init_thread_cache(void)
{
    if (thread_state == THREAD_CACHED)
        return tcache_tls;
    if (thread_state == THREAD_EXITED || !global_init())
        return NULL;
    struct tcache *tc = tcache_create();
    if (!tc)
        return NULL;
    prof_thread_init(tc);
    /* Cache in place before pthread_setspecific, which may call calloc. */
    tcache_tls = tc;
    thread_state = THREAD_CACHED;
    pthread_setspecific(exit_key, tc);
    /* opt.background_thread: started by the first cache made after set-up
     * (normally the process's first malloc or mallctl), now that this one
     * is in place for pthread_create's own allocations. */
    background_poll();
    return tc;
}

struct tcache *init_current_cache(void)
{
    return thread_state == THREAD_CACHED ? tcache_tls : NULL;
}
