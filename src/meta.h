/*
 * meta.h: memory for salloc's own records (spans, thread caches, later the
 * profiler's samples and stacks), carved from mmapped chunks.  Never malloc:
 * metadata must exist before the heap does and must not recurse into it.
 *
 * Records are never returned to the kernel; each owner keeps its own free list
 * of records to reuse (span.h, tcache.c).  One lock (LOCK_RANK_META), taken
 * only when a chunk runs out of room, which is rare.
 */
#ifndef SA_META_H
#define SA_META_H

#include <stddef.h>

/* `size` bytes of zeroed memory aligned to `align` (a power of two up to 4096),
 * or NULL with errno ENOMEM. */
void *meta_alloc(size_t size, size_t align);

/* Bytes of address space mapped for metadata (stats.metadata). */
size_t meta_mapped_bytes(void);

/* fork.c: hold the lock across fork(); reinitialise it in the child. */
void meta_prefork(void);
void meta_postfork_parent(void);
void meta_postfork_child(void);

#endif
