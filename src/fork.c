/*
 * fork.c: pthread_atfork handlers (see fork.h).
 */
#include "fork.h"

#include <pthread.h>

#include "background.h"
#include "central.h"
#include "ctl.h"
#include "dump.h"
#include "guard.h"
#include "init.h"
#include "lock.h"
#include "meta.h"
#include "pageheap.h"
#include "tcache.h"
#include "unwind.h"

static void prefork(void)
{
    background_prefork(); /* first: its control lock is held across allocations */
    ctl_prefork();
    tcache_prefork();
    prof_prefork();
    guard_prefork();
    central_prefork();
    pageheap_prefork();
    meta_prefork();
    /* Every lock held: the atfork handlers run after this one may allocate
     * (lock.h). */
    sa_in_fork = true;
}

static void postfork_parent(void)
{
    sa_in_fork = false;
    meta_postfork_parent();
    pageheap_postfork_parent();
    central_postfork_parent();
    guard_postfork_parent();
    prof_postfork_parent();
    tcache_postfork_parent();
    ctl_postfork_parent();
    background_postfork_parent();
}

static void postfork_child(void)
{
    sa_in_fork = false;
    meta_postfork_child();
    pageheap_postfork_child();
    central_postfork_child();
    tcache_postfork_child(init_current_cache());
    guard_postfork_child();
    prof_postfork_child();
    unwind_postfork_child();
    ctl_postfork_child();
    background_postfork_child();
}

void fork_init(void)
{
    pthread_atfork(prefork, postfork_parent, postfork_child);
}
