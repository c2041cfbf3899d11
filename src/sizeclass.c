/*
 * sizeclass.c: the lookups that are not on the fast path.
 */
#include "sizeclass.h"

unsigned sizeclass_aligned(size_t size, size_t align)
{
    if (size > SA_MAX_SMALL || align > SA_PAGE_SIZE)
        return 0;
    /* A class whose size is a multiple of `align` is at least `align`:
     * start there (posix_memalign(4096, 100) looks at one class, not 40). */
    for (unsigned cls = sizeclass_of(size > align ? size : align); cls < SA_NUM_CLASSES; cls++)
        if ((sizeclass_size(cls) & (align - 1)) == 0)
            return cls;
    return 0;
}
