/*
 * residency.h: which OS pages of a range are in RAM or in swap, from
 * /proc/self/pagemap (spec/pagemap.md): one 64-bit entry per OS page, bit 63
 * present, bit 62 swapped.  Used at dump time on the pages of sampled
 * allocations, which hold nothing else by design.
 *
 * Reads go through a window of WINDOW_PAGES entries filled by one pread, so
 * nearby samples share a system call and no query costs one read per page.
 * Never calls malloc; the reader lives on the caller's stack.
 */
#ifndef SA_RESIDENCY_H
#define SA_RESIDENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h"

#define RESIDENCY_WINDOW_PAGES 512

/* The file read: writable in test builds, to test an unreadable pagemap. */
extern const char *SA_TEST_MUTABLE residency_pagemap_path;

struct residency_reader {
    int fd;               /* -1: pagemap unavailable */
    uintptr_t win_first;  /* first OS page number in the window */
    size_t win_len;       /* entries in the window */
    uint64_t win[RESIDENCY_WINDOW_PAGES];
};

/* Opens /proc/self/pagemap; false (and fd -1) if it cannot be read. */
bool residency_open(struct residency_reader *r);
void residency_close(struct residency_reader *r);

/* The bytes of [addr, addr + len) that lie on OS pages present in RAM, and
 * on pages in swap: an object's own bytes, not its whole pages (a 32-byte
 * sample alone on a 4 KiB page has 32 resident bytes).  False on a read
 * error (both then 0). */
bool residency_query(struct residency_reader *r, uintptr_t addr, size_t len, size_t *present,
                     size_t *swapped);

#endif
