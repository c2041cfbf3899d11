/*
 * guard.h: guarded sampling, the sampled pages' second job: catching memory
 * errors in production (opt.prof_guard, opt.lg_prof_guard_every).
 *
 * A guarded sample lives on a mapping of its own, small or large:
 *
 *     start                        data end                      end
 *     | (unused) |  block of Z bytes |  inaccessible (PROT_NONE)  |
 *                ^object              ^ an overflow faults here
 *
 * the block pushed against an inaccessible page (at most its alignment's
 * slack before it, 0 bytes for an ordinary malloc).  When it is freed its
 * pages are purged and made inaccessible too, and the mapping waits in a
 * quarantine (a FIFO of GUARD_QUARANTINE mappings), so a use after free
 * faults as well; then it leaves the pagemap and waits, still
 * inaccessible, in a pool of GUARD_POOL for the next guarded sample of its
 * length (or is unmapped).  Every page is in the pagemap, the
 * span pointing at the sample's record (kept through the quarantine, with
 * the stack that freed it), so salloc's SIGSEGV handler, installed at
 * start-up when guarding is on and chained to any handler installed
 * before it, can tell such a fault from any other: it prints what happened
 * (prof_report_fault) and lets the default action (or the previous
 * handler) take the process.
 *
 * Costs three system calls per guarded sample when the pool has a mapping
 * of its length (protect; at free purge and protect), seven when it has
 * not (map and trim, advise, protect; purge, protect; unmap), no resident
 * memory for the guard, quarantined and pooled pages.  One lock
 * (LOCK_RANK_QUARANTINE) for the quarantine's FIFO, never across a system
 * call.  Calls os.c and the page heap.
 */
#ifndef SA_GUARD_H
#define SA_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h" /* SA_TEST_MUTABLE */

struct span;

/* Freed guarded mappings kept inaccessible and registered (a fault in one
 * is reported as a use after free). */
#define GUARD_QUARANTINE 256

/* Mappings out of the quarantine kept for reuse (guard.c). */
#define GUARD_POOL 64

/* A guarded sample costs the process two kernel mappings (its pages and
 * the inaccessible one), and the kernel allows vm.max_map_count (65,530
 * by default) in all: past GUARD_MAX_LIVE guarded mappings (quarantined
 * ones included), samples are placed unguarded instead, rather than the
 * heap's next mmap failing.  guard_max_live is GUARD_MAX_LIVE; tests
 * lower it.  guard_room(): whether one more may be made (a relaxed read:
 * threads racing for the last room may pass it by a few). */
#define GUARD_MAX_LIVE 8192
extern SA_TEST_MUTABLE size_t guard_max_live;
bool guard_room(void);
size_t guard_live(void);

/* A mapping for a guarded block of `usable` bytes aligned to `align` (at
 * most a salloc page): its parked span record, *object the block's
 * address, *data_len the bytes before the guard; NULL with ENOMEM. */
struct span *guard_map(size_t usable, size_t align, uintptr_t *object, size_t *data_len);

/* Makes a freed guarded mapping inaccessible and puts it in quarantine
 * (its span must already be SPAN_QUARANTINED); returns the mapping it
 * pushes out, if any, for the caller to release its record and then
 * guard_retire() it. */
struct span *guard_quarantine(struct span *s);

/* Takes a mapping that left the quarantine out of the pagemap, into the
 * pool (or unmaps it). */
void guard_retire(struct span *s);

/* Takes a guarded mapping out of the pagemap and unmaps it. */
void guard_unmap(struct span *s);

/* Mappings in the pool now (tests). */
size_t guard_pooled(void);

/* Installs the SIGSEGV handler (start-up, when guarding is on). */
void guard_install_handler(void);

void guard_prefork(void);
void guard_postfork_parent(void);
void guard_postfork_child(void);

#endif
