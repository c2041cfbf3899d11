/*
 * sizeclass.h: request size -> size class, and each class's size, span
 * length and batch size.  The table itself is generated (size_classes/,
 * `make size-classes`); this header gives it names and the inline lookup
 * used on the fast path.
 *
 * Lookup: one table load.  Sizes up to 1024 use 8-byte granules, larger ones
 * 128-byte granules; both ranges share one byte array (size_classes.h), so
 * the only arithmetic is choosing the granule.
 */
#ifndef SA_SIZECLASS_H
#define SA_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct sa_class_info {
    uint32_t size;   /* object size in bytes; a multiple of 16 from 16 up */
    uint16_t pages;  /* pages in each span of this class */
    uint16_t batch;  /* objects moved between thread cache and central list */
};

#include "../size_classes/size_classes.h"

/* Index into sa_class_index for a size <= SA_MAX_SMALL. */
static inline size_t sizeclass_index(size_t size)
{
    return size <= 1024 ? (size + 7) >> 3 : (size + 127 + (120 << 7)) >> 7;
}

/* The smallest class whose size is >= `size`; `size` must be <= SA_MAX_SMALL.
 * Size 0 maps to the smallest class. */
static inline unsigned sizeclass_of(size_t size)
{
    return sa_class_index[sizeclass_index(size)];
}

static inline size_t sizeclass_size(unsigned cls) { return sa_class_info[cls].size; }
static inline size_t sizeclass_pages(unsigned cls) { return sa_class_info[cls].pages; }
static inline unsigned sizeclass_batch(unsigned cls) { return sa_class_info[cls].batch; }

/* Objects in one span of the class. */
static inline unsigned sizeclass_objects(unsigned cls)
{
    return (unsigned)((sizeclass_pages(cls) << SA_PAGE_SHIFT) / sizeclass_size(cls));
}

/* The smallest class of at least `size` bytes whose objects are all aligned
 * to `align` (objects start at span start + k * size, and spans are page
 * aligned, so a class works iff its size is a multiple of `align`), or 0 if
 * no class does.  Slow path: a short scan. */
unsigned sizeclass_aligned(size_t size, size_t align);

#endif
