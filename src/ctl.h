/*
 * ctl.h: mallctl(), salloc's jemalloc-compatible control and statistics
 * namespace (spec/mallctl.md; man/salloc.3, MALLCTL NAMESPACE).
 *
 * The public calls (mallctl, mallctlnametomib, mallctlbymib) are declared in
 * include/salloc.h; this header holds what the rest of salloc and the unit
 * tests need besides them.  Every name lives in one flat table in ctl.c,
 * sorted by full dotted name, one row per name.
 *
 * Contract of the whole layer: never calls malloc (the allocator may be in
 * any state, a lock of its own included), never uses stdio, never sets
 * errno, never returns ENOMEM.  Statistics come from a snapshot taken when
 * `epoch` is written, as jemalloc's do.
 */
#ifndef SA_CTL_H
#define SA_CTL_H

#include <stdbool.h>
#include <stddef.h>

/* jemalloc's special arena indices: every arena at once, destroyed arenas. */
#define MALLCTL_ARENAS_ALL 4096
#define MALLCTL_ARENAS_DESTROYED 4097

/* Most components a name may have (stats.arenas.<i>.bins.<j>.curregs: 6). */
#define CTL_MAX_DEPTH 8

/* The bit that marks a named component in a MIB; integer components are
 * stored as themselves (callers overwrite them, jemalloc style). */
#define CTL_MIB_NAMED ((size_t)1 << 62)

/* True if the table is sorted by name with no duplicates and every pattern
 * is well formed (a test checks it; the lookup relies on neither, but
 * readers grepping for a name do). */
bool ctl_table_ok(void);

/* opt.stats_print: malloc_stats_print(NULL, NULL, opt.stats_print_opts),
 * which init.c registers with atexit() at set-up (stats.c). */
void stats_print_at_exit(void);

/* fork.c: the statistics snapshot's lock. */
void ctl_prefork(void);
void ctl_postfork_parent(void);
void ctl_postfork_child(void);

#endif
