/*
 * unwind.h: the stack walker behind every sample: the return addresses of
 * the calling thread's frames, read with the programs' own DWARF call-frame
 * information (.eh_frame), one cached rule per return address.
 *
 * Why not just backtrace(): libgcc's unwinder finds the FDE, parses its CIE
 * and runs its CFA program again for every frame of every capture (about
 * 90 ns a frame here; 85% of a sample's cost).  A given return address
 * always unwinds the same way, so this walker reduces each one, once, to a
 * rule of three numbers and caches it:
 *
 *     CFA = (rsp or rbp) + offset        caller's rsp = CFA
 *     return address at CFA - 8          caller's rip
 *     rbp unchanged, or saved at CFA - 8k
 *
 * which covers what compilers emit for ordinary functions on x86-64, with
 * or without frame pointers, and signal frames (the kernel's saved
 * registers, read at the trampoline).  A frame that needs more (a CFA
 * expression, a CFA in another register, a realigned stack) stops the walk
 * there: the frames before it are right, and the caller knows the stack
 * is incomplete (stack.c decides what then).  opt.prof_unwind:check
 * compares every capture with libgcc's backtrace() (prof.unwind_mismatches
 * counts disagreements); in the programs make test runs, python3 among
 * them, the walker never stops early.
 *
 * The cache is global and lock-free: 4096 direct-mapped entries, each
 * guarded by its own sequence number, so threads share what any of them
 * learned and a torn entry is never used.  Rules are only valid while the
 * code they describe stays loaded: each carries a tag naming the loading of
 * the object it came from (its build ID, link map, mapped range and
 * .eh_frame_hdr, from glibc's lock-free _dl_find_object, once per object
 * per capture; an object met before is recognised by its build ID's bytes
 * without reading its headers again: unwind.c), so after a dlclose() a rule
 * no longer matches other code loaded at the same address.  A 17-frame
 * capture takes about 1,860 instructions (2,270 before objects were
 * remembered); a replay of the thread's last walk (unwind_memo, below),
 * about 700 for a sample in bench_core's pair/65536.  On a glibc without _dl_find_object (before 2.35) the
 * tag is the loader's unload count (dl_iterate_phdr's dlpi_subs) read once
 * per capture.  A return address of code that has no FDE ends the stack,
 * as it does for libgcc.
 *
 * Safety: the walker reads only stack memory its rules point at; a rule
 * must move the CFA up, to an 8-aligned address, by at least the return
 * address and at most UNWIND_MAX_FRAME bytes, and not past the top of the
 * stack where the walker can tell it (unwind_stack_top), else the capture
 * gives up; on a stack whose top it cannot tell, it reads a page only once
 * the kernel has said it is readable (os_readable).
 * It never allocates, takes no lock (with _dl_find_object; else the
 * loader's, through dl_iterate_phdr: then a fork() taken while another
 * thread holds it can leave a child's sampled malloc waiting for good, a
 * glibc limitation), and is called with no allocator lock held (stack.h).
 */
#ifndef SA_UNWIND_H
#define SA_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

/* A frame larger than this is taken for a broken rule (and libgcc asked). */
#define UNWIND_MAX_FRAME ((uintptr_t)1 << 20)

/* The return addresses of the caller's frames, innermost first (and, past
 * a signal frame, the interrupted instruction's address, as backtrace()
 * gives it): the first is a return address into the function that called
 * unwind_capture().  Returns how many (at most `max`); *complete is false
 * if the walk stopped at a frame no rule could unwind. */
unsigned unwind_capture(void **frames, unsigned max, bool *complete);

/* Where a walk can start instead of at unwind_capture's caller: the frame
 * of a function still on the stack, taken inside it by UNWIND_FROM_HERE()
 * (which gives that function a frame pointer: use it in slow paths only).
 * The allocator takes it at its slow paths' entry, so that a sample's
 * walk does not step through the profiler's own frames under them. */
struct unwind_memo;
struct unwind_from {
    uintptr_t pc;  /* the return address into the function's caller */
    uintptr_t sp;  /* the caller's rsp after the return: the CFA */
    uintptr_t rbp; /* the caller's rbp, saved by the function's prologue */
    struct unwind_memo *memo; /* the calling thread's, or NULL (below) */
};
#define UNWIND_FROM_HERE()                                                                   \
    ((struct unwind_from){(uintptr_t)__builtin_return_address(0),                           \
                          (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(void *),        \
                          *(const uintptr_t *)__builtin_frame_address(0), NULL})
/* The return addresses from from->pc on (its caller's, and up). */
unsigned unwind_capture_from(const struct unwind_from *from, void **frames, unsigned max,
                             bool *complete);

/* A thread's last walk from a unwind_from, replayed when the next starts
 * at the same pc, rsp and rbp: a program samples the same few call sites
 * again and again, and a replay checks the stack in a few instructions a
 * frame instead of finding each frame's object and rule.
 *
 * A walk is a function of its start (rbp only if a frame's CFA is computed
 * from it before a frame restores it: code without frame pointers keeps
 * anything there), the code at the return addresses it meets (their
 * rules) and the stack words it reads, saved rbp values only where a
 * frame's CFA is computed from them.  The memo keeps the
 * objects the walk met (their entries in the table of objects met before,
 * which the rule cache's tags come from: after a dlclose() another load at
 * the same address no longer matches its entry) and every such
 * word read, address and value.  A replay checks the words in the walk's
 * order: each address was computed from words already found equal, so it
 * reads only what the walk itself would read, and stops at the first that
 * differs (a walk from there on); then the objects, so the code is the
 * same (the words first: their loads overlap the objects' checks).
 * Walks through a signal frame, past code of no object or of more
 * objects than a walk keeps, deeper than UNWIND_MEMO_FRAMES, or beyond
 * their first page on a stack without a known top are not kept.  Per
 * thread: stack addresses mean nothing in another thread. */
#define UNWIND_MEMO_FRAMES 32
#define UNWIND_MEMO_OBJECTS 6
struct unwind_memo {
    uintptr_t pc, sp, rbp; /* where the walk started; pc 0: none kept */
    bool rbp_matters;      /* a frame's CFA came from the starting rbp */
    /* What the last capture through the memo made of it, for a caller
     * that derives something from a walk's frames (the profiler: their
     * interned stack) and may reuse it when the same frames come again. */
    enum {
        UNWIND_MEMO_UNUSED,   /* neither below (a caller that may capture
                               * without the memo sets this first) */
        UNWIND_MEMO_KEPT,     /* the frames are the walk now kept */
        UNWIND_MEMO_REPLAYED, /* the frames are the kept walk's, again */
    } last;
    uint64_t unloads;      /* without _dl_find_object: the walk's tag */
    unsigned nobjects, nreads, nframes;
    struct {
        uintptr_t at; /* an address in the object (its first byte) */
        int entry;    /* its entry in unwind.c's table of objects met, whose
                       * tag names the loading of its code */
    } objects[UNWIND_MEMO_OBJECTS];
    struct {
        uintptr_t addr, value;
    } reads[2 * UNWIND_MEMO_FRAMES];
    void *frames[UNWIND_MEMO_FRAMES];
};

/* Whether a capture from `from` (with its memo) and `max` would replay the
 * memo's walk: the same check, counted as a replay (memo->last says so),
 * for a caller that needs only what it made of the memo's frames before
 * (the profiler: their interned stack) and not the frames again. */
bool unwind_memo_replays(const struct unwind_from *from, unsigned max);

/* Supplied by the allocator (malloc.c): false if the object whose glibc
 * link map is at `link_map` is surely never unloaded because it was
 * loaded with the program.  The loader allocates those link maps itself,
 * before it switches to the process's malloc, and that of every object
 * dlopen() loads with the process's malloc.  So when that malloc is
 * salloc's, a link map outside salloc's memory is one loaded with the
 * program; when it is not (salloc dlopen()ed), any object may unload. */
bool sa_link_map_may_unload(const void *link_map);

/* Whether objects are looked up with glibc's _dl_find_object (true when
 * this glibc has it); tests may switch to dl_iterate_phdr. */
#ifdef SA_TESTING
#define SA_UNWIND_MUTABLE
#else
#define SA_UNWIND_MUTABLE const
#endif
extern SA_UNWIND_MUTABLE bool unwind_use_find_object;
/* An object read from its file gets an index of its search table at this
 * search of it (unwind.c), if the table is big enough. */
#define UNWIND_INDEX_AFTER_SEARCHES 16
/* How many keys the search tables' indexes may hold in all (unwind.c);
 * tests lower it to have objects go without. */
extern SA_UNWIND_MUTABLE uint32_t unwind_index_keys_max;
/* In a fork() child: another thread's build of an index did not come
 * along; others may build again. */
void unwind_postfork_child(void);

/* The top of the stack that `sp` is on, as far as a walk may read: the
 * thread's descriptor for a thread glibc started, the page above
 * __libc_stack_end for the main thread; UINTPTR_MAX where `sp` is on
 * neither (unwind.c says why).  Tests may set unwind_stack_top_for_test
 * (0: none) to have every walk take it instead. */
uintptr_t unwind_stack_top(uintptr_t sp);
#ifdef SA_TESTING
extern uintptr_t unwind_stack_top_for_test;
#endif

/* Counters for tests and statistics. */
struct unwind_stats {
    uint64_t incomplete; /* captures stopped at a frame the walker could not unwind */
    uint64_t misses;    /* rules computed from .eh_frame (cache misses) */
    uint64_t from_files; /* of those, read from the object's file (unwind_file.h) */
    uint64_t stale;     /* cached rules found stale: their code was unloaded */
    uint64_t objects;   /* objects described the long way, not met before */
    uint64_t indexes;   /* objects whose search table got an index (unwind.c) */
    uint64_t indexed;   /* rules whose table search started from an index */
    uint64_t replays;   /* walks replayed from a thread's memo */
    uint64_t cache_entries; /* entries the rule cache indexes now (grows once) */
};
void unwind_get_stats(struct unwind_stats *st);

/* The rule computed for one code address (`pc` itself, not a return
 * address), for tests: false if there is none.  *outermost: the frame ends
 * the stack; *cfa_rbp, *cfa_off, *rbp_slot (0: rbp unchanged) describe it. */
bool unwind_rule_for_test(uintptr_t pc, bool *outermost, bool *cfa_rbp, uint32_t *cfa_off,
                          uint32_t *rbp_slot);

/* For tests: the rules for code addresses pcs[0, n) into rules[], as one
 * walk computes them (one file open, its copy of the last CIE read); the
 * rule cache is neither read nor written. */
void unwind_rules_for_test(const uintptr_t *pcs, unsigned n, uint32_t *rules);

/* For tests: the rule for code address `pc` through the rule cache, as a
 * walk finds it (computed and kept on a miss). */
uint32_t unwind_rule_cached_for_test(uintptr_t pc);

/* For tests: 1 if the object holding `pc` is one a memo's check trusts to
 * stay loaded (unwind.c's permanent_object), 0 if it is looked up again
 * at each check, -1 if it is not in the table of objects met. */
int unwind_object_permanent_for_test(const void *pc);

#endif
