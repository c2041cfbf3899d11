/*
 * util.h: compiler attributes, branch hints and small bit helpers used by every
 * layer.  Includes nothing of salloc's; safe to include from anywhere.
 *
 * Vocabulary, fixed here for the whole code base (tests, man page and mallctl
 * names use the same words):
 *   OS page      the kernel's page (4 KiB on x86-64); the unit of madvise.
 *   page         salloc's page, SA_PAGE_SIZE (8 KiB); the unit of the page heap.
 *   span         a run of contiguous pages with one owner: free, one size class
 *                (a "small span" cut into objects), or one large allocation.
 *   class        a size class; class 0 means "not a small object".
 *   object       one allocation of a size class, inside a small span.
 *   usable size  the bytes an allocation really owns: its class size, or its
 *                span's length for a large allocation (malloc_usable_size).
 */
#ifndef SA_UTIL_H
#define SA_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SA_PAGE_SHIFT 13
#define SA_PAGE_SIZE ((size_t)1 << SA_PAGE_SHIFT)
#define SA_PAGE_MASK (SA_PAGE_SIZE - 1)

/* User-space addresses on x86-64 (4-level paging) fit in 47 bits; the pagemap
 * covers 48 so that any address mmap can return is covered. */
#define SA_ADDRESS_BITS 48

#define SA_CACHELINE 64

/* Public entry points: the only symbols the shared library exports. */
#define SA_EXPORT __attribute__((visibility("default")))
/* Those that hold a fast path (malloc, free, operator new and delete, ...):
 * each starts on a cache line, so its common case always lies in the same
 * 32- and 64-byte fetch blocks, whatever the code before it.  Where they
 * fell at an odd 32 bytes, pair/16 took 5.1-5.4 ns with sampling on and
 * 4.8 with it off, the same instructions (a difference that moved with
 * unrelated code); aligned, 4.8 either way (bench_core, 11 shuffled rounds;
 * also pair/1024 -6%, batch_fifo -10%, aligned/64x64 -7%).
 * test/check_layout.sh holds the library to it. */
#define SA_EXPORT_FAST __attribute__((visibility("default"), aligned(SA_CACHELINE)))
/* The common case, inlined into every public entry point. */
#define SA_FAST_PATH static inline __attribute__((always_inline))
/* Rare work, kept out of the callers' instruction stream. */
#define SA_SLOW_PATH __attribute__((noinline, cold))
#define SA_NORETURN __attribute__((noreturn))
#define SA_ALIGNED(n) __attribute__((aligned(n)))
/* Zero-initialised tables that are big and touched sparsely (the pagemap,
 * hash tables) or used rarely (the dump buffer, mallctl's snapshot): placed
 * in .lbss, which the linker puts after .bss, so that the library's small
 * variables share a few pages instead of each landing on the edge of a
 * different table and making that page resident (test/check_layout.sh).
 * GCC alone marks .lbss as zero-fill (clang 14 would store the zeros in the
 * file), so other compilers keep the tables in .bss. */
#if defined(__GNUC__) && !defined(__clang__)
#define SA_BSS_APART __attribute__((section(".lbss")))
#else
#define SA_BSS_APART
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Debug builds (make SA_DEBUG=1) check heap invariants on slow paths.  A
 * constant, not an #ifdef, so both branches always compile. */
#ifndef SA_DEBUG_BUILD
#define SA_DEBUG_BUILD 0
#endif
static const bool SA_DEBUG = SA_DEBUG_BUILD;

/* Debug builds: true on every `every`th call sharing `counter`, for the
 * deep checks a slow path runs (central_check, pageheap_check,
 * tcache_check): often enough that a broken invariant is caught within a
 * few operations, not so often that stress tests crawl.  Racy increments
 * are fine.  Always false, and compiled away, otherwise. */
static inline bool sa_debug_due(unsigned *counter, unsigned every)
{
    return SA_DEBUG && __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED) % every == 0;
}

static inline bool sa_is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

static inline size_t sa_align_up(size_t x, size_t align) /* align: power of 2 */
{
    return (x + align - 1) & ~(align - 1);
}

/* Number of pages that hold `bytes`, or SIZE_MAX >> SA_PAGE_SHIFT + 1 (more
 * than any address space) when the rounding would overflow. */
static inline size_t sa_pages_for(size_t bytes)
{
    if (bytes > SIZE_MAX - SA_PAGE_MASK)
        return (SIZE_MAX >> SA_PAGE_SHIFT) + 1;
    return (bytes + SA_PAGE_MASK) >> SA_PAGE_SHIFT;
}

#endif
