/*
 * sizeclass.c: the lookups that are not on the fast path.
 */
#include "sizeclass.h"

unsigned sizeclass_aligned(size_t size, size_t align)
{
    if (size > SA_MAX_SMALL || align > SA_PAGE_SIZE)
        return 0;
    for (unsigned cls = sizeclass_of(size); cls < SA_NUM_CLASSES; cls++)
        if (sizeclass_size(cls) % align == 0)
            return cls;
    return 0;
}
