/*
 * sizeclass.h: request size -> size class, and each class's size, span
 * length and batch size.  The table itself is generated (size_classes/,
 * `make size-classes`); this header gives it names and the inline lookup
 * used on the fast path.
 *
 * Lookup: one table load.  Sizes up to SA_BYTE_LOOKUP_MAX (1024) index a
 * table with one entry per byte, so the common case needs no arithmetic at
 * all; larger ones a table of 128-byte granules (size_classes.h).
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

/* The smallest class whose size is >= `size`, for a size above
 * SA_BYTE_LOOKUP_MAX and at most SA_MAX_SMALL. */
static inline unsigned sizeclass_of_medium(size_t size)
{
    return sa_class_by_granule[(size + (1u << SA_GRANULE_SHIFT) - 1) >> SA_GRANULE_SHIFT];
}

/* The smallest class whose size is >= `size`; `size` must be <= SA_MAX_SMALL.
 * Size 0 maps to the smallest class. */
static inline unsigned sizeclass_of(size_t size)
{
    return size <= SA_BYTE_LOOKUP_MAX ? sa_class_by_byte[size] : sizeclass_of_medium(size);
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
 * no class does.  A class whose size is a multiple of `align` is at least
 * `align`: the scan starts there, and usually ends there too (every class
 * up to 128, and any power of two).  Inline, so that aligned_alloc's
 * cached case makes no call (a call would have it keep align and size in
 * saved registers on every call). */
static inline unsigned sizeclass_aligned(size_t size, size_t align)
{
    if (size > SA_MAX_SMALL || align > SA_PAGE_SIZE)
        return 0;
    unsigned cls = sizeclass_of(size > align ? size : align);
    while (unlikely(sizeclass_size(cls) & (align - 1)))
        if (++cls == SA_NUM_CLASSES)
            return 0;
    return cls;
}

#endif
