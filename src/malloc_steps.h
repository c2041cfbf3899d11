/*
 * malloc_steps.h: the steps of malloc.c's entry points that the entry points
 * in other files take too: jemalloc's *allocx functions (xallocx.c), whose
 * flags combine what malloc.c's functions do one at a time (an alignment,
 * zeroing, resizing in place).  Hidden, like everything but the API.
 */
#ifndef SA_MALLOC_STEPS_H
#define SA_MALLOC_STEPS_H

#include <stdbool.h>
#include <stddef.h>

struct unwind_from;

/* `size` bytes aligned to `align` (a power of two; 1 for none), all of
 * its usable size zero if `zero`; NULL with errno ENOMEM. */
void *malloc_step_alloc(size_t size, size_t align, bool zero);

/* realloc itself, by an address no wrapper preloaded before salloc takes
 * over (an alias, as malloc.c's sa_own_malloc). */
void *malloc_step_realloc(void *p, size_t n);

/* The usable size of live block `p`; aborts naming `fn` if salloc did not
 * return it. */
size_t malloc_step_usable(const void *p, const char *fn);

/* The usable size malloc_step_alloc(size, align, ...) gives, 0 if no block
 * can hold that many bytes. */
size_t malloc_step_request_usable(size_t size, size_t align);

/* realloc's in-place step: live block `p` kept where it is for `n` bytes,
 * or its large span resized in place, and counted as realloc counts (a
 * sample's walk starting at `from`, the caller's frame); its usable size
 * now, or 0 if realloc would move it.  `fn` names the caller in messages. */
size_t malloc_step_resize(void *p, size_t n, const char *fn, const struct unwind_from *from);

/* xallocx's: the large span of live block `p` resized in place to hold
 * `size + extra` bytes if it can, else `size`; its usable size now.  A
 * small block, and a sampled one on pages of its own, keep theirs (their
 * class's). */
size_t malloc_step_resize_large(void *p, size_t size, size_t extra,
                                const struct unwind_from *from);

#endif
