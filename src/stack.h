/*
 * stack.h: capturing the stack of a sampled allocation, and the table that
 * stores each distinct stack once.
 *
 * Capture uses salloc's cached DWARF walker (unwind.h).  With
 * opt.prof_unwind:libgcc (or check) it uses the C library's backtrace()
 * (libgcc's unwinder underneath) instead (or as well); libgcc is loaded on
 * first use, which stack_warm_up() then makes happen at start-up, outside
 * any allocator lock, so a later capture never loads anything.  Callers hold no allocator lock and set the
 * thread's reentrancy guard (tcache_prof.in_prof), so an allocation made by
 * the unwinder itself is served normally and never sampled.  salloc's own
 * frames are cut off: every salloc function lives in the salloc_text
 * section (the Makefile renames it), so the stack starts at the caller of
 * malloc/calloc/..., in the shared library and in a static link alike.
 *
 * The table: 64 shards, each a lock (LOCK_RANK_STACKS) and its hash
 * chains, in one page for a program's first 512 stacks and in the whole
 * 128 KiB table after (stack.c); records come from meta.c and live forever
 * (a dump or a sample may refer to them at any time), so samples on
 * different stacks rarely contend.
 */
#ifndef SA_STACK_H
#define SA_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STACK_MAX_DEPTH 128
/* The frames a walk takes: a whole stack's and salloc's own under it,
 * which stack_capture drops.  The caller's array holds them all, so that
 * a sample keeps one array on its stack, not two (it may run on a small
 * signal or coroutine stack). */
#define STACK_WALK_SLOTS (STACK_MAX_DEPTH + 16)

/* Allocated-ever counts of one (usable size, rate) group of a stack. */
struct stack_accum {
    struct stack_accum *next;
    size_t usable;
    uint64_t rate;
    uint64_t count;
};

struct prof_stack {
    struct prof_stack *next; /* hash chain, under the shard lock */
    uint64_t hash;
    struct stack_accum *accum; /* opt.prof_accum only; under the shard lock */
    uint32_t depth;
    void *frames[];            /* return addresses, leaf (innermost) first */
};

/* The calling thread's stack above salloc, up to STACK_MAX_DEPTH frames,
 * at the start of `frames` (STACK_WALK_SLOTS long): by the cached walker
 * (unwind.h), kept as far as it got if it cannot finish; by backtrace()
 * when opt.prof_unwind is "libgcc"; "check" runs both, compares them and
 * keeps backtrace()'s when the walker did not finish.  None (0) in a
 * static executable before salloc's constructor (stack.c). */
unsigned stack_capture(void **frames);
/* The same, the walker starting at `from` (unwind.h), a frame inside
 * salloc, rather than stepping through the profiler's frames under it.
 * "libgcc" and "check" ignore it (check compares whole walks). */
struct unwind_from;
unsigned stack_capture_from(const struct unwind_from *from, void **frames);
/* Whether stack_capture_from(from, ...) would replay from->memo's walk
 * (unwind_memo_replays): the frames would be those the memo gave last. */
bool stack_capture_would_replay(const struct unwind_from *from);
/* Captures the walker could not finish (prof.unwind_truncated), and those
 * on which it disagreed with backtrace() under prof_unwind:check
 * (prof.unwind_mismatches). */
uint64_t stack_unwind_truncated(void);
uint64_t stack_unwind_mismatches(void);

/* The one record for this stack, created on first sight; NULL on ENOMEM
 * or for no frames at all. */
struct prof_stack *stack_intern(void *const *frames, unsigned depth);

/* Counts one more sample of (usable, rate) on `st` for prof.accum, if the
 * sample's prof.reset epoch is still the current one (else a reset forgot
 * it between its publication and this call). */
void stack_accum_add(struct prof_stack *st, size_t usable, uint64_t rate, uint32_t epoch);

/* Calls fn(group, stack, arg) for every accumulated group, one shard lock at
 * a time; stops early if fn returns 0. */
void stack_accum_foreach(int (*fn)(const struct stack_accum *, struct prof_stack *, void *),
                         void *arg);
/* Forgets every accumulated count (prof.reset): counts go on only for
 * samples of epoch `epoch`.  Before the live samples move to it, so that a
 * sample published in it is counted.  An epoch no later than the counted
 * one (a reset overtaken by another) changes nothing. */
void stack_accum_reset(uint32_t epoch);

/* Loads the unwinder now (start-up), so samples never do it. */
void stack_warm_up(void);

/* Is `addr` inside salloc's code? */
int stack_in_salloc(const void *addr);

void stack_prefork(void);
void stack_postfork_parent(void);
void stack_postfork_child(void);

#endif
