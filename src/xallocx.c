/*
 * xallocx.c: jemalloc's own allocation functions, mallocx(), rallocx(),
 * xallocx(), sallocx(), dallocx(), sdallocx() and nallocx(), with their
 * MALLOCX_* flags (include/salloc.h, man/salloc.3).
 *
 * Why salloc has them: a program written for jemalloc calls them, and one
 * linked with -ljemalloc but run with salloc preloaded would otherwise get
 * jemalloc's, next to salloc's malloc and free: a block from one heap freed
 * into the other (salloc aborts on a pointer it did not return).  With
 * these, every call lands in salloc's heap.
 *
 * Flags, in jemalloc's encoding:
 *   bits 0-5    MALLOCX_LG_ALIGN(la), MALLOCX_ALIGN(a): aligned to 2^la
 *               (0: no more than malloc's);
 *   bit 6       MALLOCX_ZERO: new bytes zero (mallocx: the whole block;
 *               rallocx, xallocx: those past the old usable size);
 *   bits 8-19   MALLOCX_TCACHE(tc), MALLOCX_TCACHE_NONE: which thread cache.
 *               salloc has each thread's own alone (no tcache.create), so
 *               the field is a hint, and the thread's cache serves;
 *   bits 20-31  MALLOCX_ARENA(a): salloc has arena 0 alone.  Any other
 *               fails the call as an arena that does not exist does in
 *               jemalloc: mallocx and rallocx return NULL (ENOMEM; the
 *               block stays), xallocx resizes nothing; nallocx, sallocx
 *               and the frees do not look at it.
 * What jemalloc leaves undefined, salloc answers as the C functions would:
 * a size of 0 is 1 byte's request, rallocx(NULL, ...) allocates, and
 * dallocx(NULL, ...) does nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../include/salloc.h"
#include "conf.h"
#include "fastpath.h"
#include "malloc_steps.h"
#include "unwind.h"
#include "util.h"

#define FLAG_LG_ALIGN_MASK 0x3f
#define FLAG_ZERO 0x40
#define FLAG_ARENA_SHIFT 20

/* The alignment the flags ask for: 1 for none. */
static size_t flag_align(int flags) { return (size_t)1 << ((unsigned)flags & FLAG_LG_ALIGN_MASK); }

/* No arena named, or arena 0 (MALLOCX_ARENA(0) is 1 in the field). */
static bool flag_arena_ok(int flags) { return ((unsigned)flags >> FLAG_ARENA_SHIFT) <= 1; }

static bool flag_zero(int flags) { return (flags & FLAG_ZERO) != 0; }

SA_EXPORT void *mallocx(size_t size, int flags)
{
    if (likely(flags == 0))
        return fast_malloc(size);
    if (!flag_arena_ok(flags)) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc_step_alloc(size, flag_align(flags), flag_zero(flags));
}

/* rallocx with an alignment above what every class gives (16): kept where
 * it is if it is aligned and realloc would keep it, else moved to a block
 * aligned so; NULL (ENOMEM) with `p` untouched if there is none. */
static void *realloc_aligned(void *p, size_t n, size_t align, const struct unwind_from *from)
{
    if ((uintptr_t)p % align == 0 && malloc_step_resize(p, n, "rallocx", from))
        return p;
    size_t old = malloc_step_usable(p, "rallocx");
    void *q = malloc_step_alloc(n, align, false);
    if (q) {
        memcpy(q, p, old < n ? old : n);
        fast_free(p);
    }
    return q;
}

SA_EXPORT void *rallocx(void *p, size_t size, int flags)
{
    if (!p)
        return mallocx(size, flags);
    if (!flag_arena_ok(flags)) {
        errno = ENOMEM;
        return NULL;
    }
    const struct unwind_from from = UNWIND_FROM_HERE(); /* if a sample is taken */
    size_t align = flag_align(flags), n = size ? size : 1;
    size_t old = flag_zero(flags) ? malloc_step_usable(p, "rallocx") : 0;
    void *q;
    if (align <= 16) /* every class from 16 bytes up is 16-aligned */
        q = malloc_step_realloc(p, align == 16 && n < 16 ? 16 : n);
    else
        q = realloc_aligned(p, n, align, &from);
    if (q && flag_zero(flags)) {
        size_t now = malloc_step_usable(q, "rallocx");
        if (now > old)
            memset((char *)q + old, 0, now - old);
    }
    return q;
}

SA_EXPORT size_t xallocx(void *p, size_t size, size_t extra, int flags)
{
    size_t old = malloc_step_usable(p, "xallocx");
    if (!flag_arena_ok(flags))
        return old;
    const struct unwind_from from = UNWIND_FROM_HERE();
    size_t now = malloc_step_resize_large(p, size, extra, &from);
    if (flag_zero(flags) && now > old)
        memset((char *)p + old, 0, now - old);
    return now;
}

SA_EXPORT size_t sallocx(const void *p, int flags)
{
    (void)flags;
    return malloc_step_usable(p, "sallocx");
}

SA_EXPORT void dallocx(void *p, int flags)
{
    (void)flags;
    fast_free(p);
}

SA_EXPORT void sdallocx(void *p, size_t size, int flags)
{
    if (unlikely(opt_check))
        free_checking_size(p, size, flag_align(flags), "sdallocx");
    else
        fast_free(p);
}

SA_EXPORT size_t nallocx(size_t size, int flags)
{
    return malloc_step_request_usable(size ? size : 1, flag_align(flags));
}
