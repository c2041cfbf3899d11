/*
 * init.h: bootstrap and per-thread set-up.  salloc needs no constructor: its
 * core structures are static, so the first malloc works whoever makes it
 * (before main, from the dynamic loader, from pthread_create); the first slow
 * path that wants a thread cache runs the one-time set-up (options, the
 * thread-exit key, fork handlers) and then gives the thread its cache.
 */
#ifndef SA_INIT_H
#define SA_INIT_H

#include <stdbool.h>
#include <stdint.h>

struct tcache;

/* The calling thread's cache, creating it on first use; NULL when the thread
 * must go uncached: during the one-time set-up (a recursive call from inside
 * it), after the thread's cache was returned at exit, or on ENOMEM.
 * Callers then use the central lists directly. */
struct tcache *init_thread_cache(void);

/* The calling thread's cache if it has one, else NULL; never creates one. */
struct tcache *init_current_cache(void);

/* os_now_ns() when the one-time set-up ran (stats.arenas.<i>.uptime). */
uint64_t init_started_ns(void);

#endif
