/*
 * pagemap.c: leaf creation and the writers (see pagemap.h).  Callers hold the
 * page heap lock; leaves come straight from os_map and are never freed.
 */
#include "pagemap.h"

#include "os.h"
#include "residency.h"

SA_BSS_APART struct pm_leaf *pm_root[PM_ROOT_LEN];
SA_BSS_APART struct pm_classes pm_classes;
static bool check_every_free;
/* The root indices that have leaves lie in [leaf_lo, leaf_hi]: the range
 * pagemap_resident_bytes() scans.  Written under the page heap lock, read
 * without it (relaxed: a leaf missed by a racing read is a statistic's
 * error, which the next read corrects). */
static size_t leaf_lo = PM_ROOT_LEN, leaf_hi;

void pagemap_check_every_free(void) { check_every_free = true; }

static struct pm_leaf *leaf_of_page(uintptr_t page)
{
    return pm_root[(page >> PM_LEAF_BITS) & (PM_ROOT_LEN - 1)];
}

bool pagemap_ensure(uintptr_t page, size_t npages)
{
    uintptr_t last = page + npages - 1;
    for (uintptr_t i = page >> PM_LEAF_BITS; i <= last >> PM_LEAF_BITS; i++) {
        if (i >= PM_ROOT_LEN)
            return false;
        if (pm_root[i])
            continue;
        struct pm_leaf *leaf = os_map(sa_align_up(sizeof(*leaf), os_page_size()), os_page_size());
        if (!leaf)
            return false;
        /* Publish the offset first: a reader that sees it finds zeros (the
         * fresh leaf), exactly what it read before.  Under opt.check the
         * fast table keeps reading the zero leaf. */
        if (!check_every_free)
            __atomic_store_n(&pm_classes.offset[i],
                             (uintptr_t)leaf->cls - (uintptr_t)pm_classes.zero, __ATOMIC_RELEASE);
        __atomic_store_n(&pm_root[i], leaf, __ATOMIC_RELEASE);
        if (i < leaf_lo)
            __atomic_store_n(&leaf_lo, i, __ATOMIC_RELAXED);
        if (i > leaf_hi)
            __atomic_store_n(&leaf_hi, i, __ATOMIC_RELAXED);
    }
    return true;
}

size_t pagemap_resident_bytes(void)
{
    struct residency_reader r;
    if (!residency_open(&r))
        return 0;
    size_t bytes = 0, hi = __atomic_load_n(&leaf_hi, __ATOMIC_RELAXED);
    size_t len = sa_align_up(sizeof(struct pm_leaf), os_page_size());
    for (size_t i = __atomic_load_n(&leaf_lo, __ATOMIC_RELAXED); i <= hi && i < PM_ROOT_LEN; i++) {
        struct pm_leaf *leaf = __atomic_load_n(&pm_root[i], __ATOMIC_ACQUIRE);
        size_t present, swapped;
        if (leaf && residency_query(&r, (uintptr_t)leaf, len, &present, &swapped))
            bytes += present;
    }
    residency_close(&r);
    return bytes;
}

void pagemap_set_span(uintptr_t page, struct span *s)
{
    __atomic_store_n(&leaf_of_page(page)->span[page & (PM_LEAF_LEN - 1)], s, __ATOMIC_RELEASE);
}

void pagemap_set_span_range(uintptr_t page, size_t npages, struct span *s)
{
    for (size_t k = 0; k < npages; k++)
        pagemap_set_span(page + k, s);
}

void pagemap_set_class_range(uintptr_t page, size_t npages, unsigned cls)
{
    for (size_t k = 0; k < npages; k++) {
        uintptr_t p = page + k;
        __atomic_store_n(&leaf_of_page(p)->cls[p & (PM_LEAF_LEN - 1)], (uint8_t)cls,
                         __ATOMIC_RELEASE);
        __atomic_store_n(&leaf_of_page(p)->owner[p & (PM_LEAF_LEN - 1)], 0, __ATOMIC_RELAXED);
    }
}

void pagemap_set_owner_range(uintptr_t page, size_t npages, unsigned owner)
{
    for (size_t k = 0; k < npages; k++) {
        uintptr_t p = page + k;
        __atomic_store_n(&leaf_of_page(p)->owner[p & (PM_LEAF_LEN - 1)], (uint8_t)owner,
                         __ATOMIC_RELAXED);
    }
}
