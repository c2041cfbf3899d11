/*
 * residency.c: /proc/self/pagemap reads (see residency.h).  The only file
 * besides os.c that reads /proc for memory facts.
 */
#include "residency.h"

#include <fcntl.h>
#include <unistd.h>

#define PM_SWAP ((uint64_t)1 << 62)
#define PM_PRESENT ((uint64_t)1 << 63)

const char *SA_TEST_MUTABLE residency_pagemap_path = "/proc/self/pagemap";

bool residency_open(struct residency_reader *r)
{
    r->fd = open(residency_pagemap_path, O_RDONLY | O_CLOEXEC);
    r->win_len = 0;
    return r->fd >= 0;
}

void residency_close(struct residency_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

/* Makes the window hold the entry of OS page `page`; false on error. */
static bool fill(struct residency_reader *r, uintptr_t page)
{
    if (r->win_len && page >= r->win_first && page < r->win_first + r->win_len)
        return true;
    ssize_t n = pread(r->fd, r->win, sizeof(r->win), (off_t)(page * sizeof(uint64_t)));
    if (n <= 0)
        return false;
    r->win_first = page;
    r->win_len = (size_t)n / sizeof(uint64_t);
    return true;
}

bool residency_query(struct residency_reader *r, uintptr_t addr, size_t len, size_t *present,
                     size_t *swapped)
{
    *present = *swapped = 0;
    if (r->fd < 0)
        return false;
    if (len == 0)
        return true;
    size_t os_page = os_page_size();
    uintptr_t end = addr + len, first = addr / os_page, last = (end - 1) / os_page;
    for (uintptr_t page = first; page <= last; page++) {
        if (!fill(r, page)) {
            *present = *swapped = 0;
            return false;
        }
        uint64_t e = r->win[page - r->win_first];
        uintptr_t lo = page * os_page > addr ? page * os_page : addr;
        uintptr_t hi = (page + 1) * os_page < end ? (page + 1) * os_page : end;
        if (e & PM_PRESENT)
            *present += hi - lo;
        else if (e & PM_SWAP)
            *swapped += hi - lo;
    }
    return true;
}
