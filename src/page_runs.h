/*
 * page_runs.h: runs of pages in a bitmap, one bit a page (sampled_pages.c's
 * regions: 1 = free).  First fit, at a multiple of an alignment.  No
 * locking and no allocation: the caller's lock guards the map.
 */
#ifndef SA_PAGE_RUNS_H
#define SA_PAGE_RUNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bits of word `at / 64` that [at, at + n) covers, and how many. */
static inline uint64_t page_runs_mask(size_t at, size_t n, size_t *covered)
{
    size_t bit = at % 64, m = 64 - bit < n ? 64 - bit : n;
    *covered = m;
    return (m == 64 ? ~(uint64_t)0 : ((uint64_t)1 << m) - 1) << bit;
}

/* Whether every bit of [at, at + n) is 1 (`want_set`) or every one 0. */
static inline bool page_runs_all(const uint64_t *map, size_t at, size_t n, bool want_set)
{
    for (size_t m; n; at += m, n -= m) {
        uint64_t mask = page_runs_mask(at, n, &m);
        if ((map[at / 64] & mask) != (want_set ? mask : 0))
            return false;
    }
    return true;
}

/* Sets the bits of [at, at + n) to `value`. */
static inline void page_runs_set(uint64_t *map, size_t at, size_t n, bool value)
{
    for (size_t m; n; at += m, n -= m) {
        uint64_t mask = page_runs_mask(at, n, &m);
        map[at / 64] = value ? map[at / 64] | mask : map[at / 64] & ~mask;
    }
}

/* How many bits of [at, at + n) are 1. */
static inline size_t page_runs_count(const uint64_t *map, size_t at, size_t n)
{
    size_t set = 0;
    for (size_t m; n; at += m, n -= m)
        set += (size_t)__builtin_popcountll(map[at / 64] & page_runs_mask(at, n, &m));
    return set;
}

/* The first run of 1s at or after bit `from` of the `len`-bit map: its
 * start (`len` if there is none) and, in *n, its length. */
static inline size_t page_runs_next(const uint64_t *map, size_t len, size_t from, size_t *n)
{
    size_t at = from;
    while (at < len) {
        uint64_t w = map[at / 64] >> (at % 64);
        if (w) {
            at += (size_t)__builtin_ctzll(w);
            break;
        }
        at = (at / 64 + 1) * 64;
    }
    if (at >= len) {
        *n = 0;
        return len;
    }
    size_t end = at;
    while (end < len) {
        uint64_t w = ~map[end / 64] >> (end % 64); /* 1s where the map has 0s */
        if (w) {
            end += (size_t)__builtin_ctzll(w);
            break;
        }
        end = (end / 64 + 1) * 64;
    }
    if (end > len)
        end = len;
    *n = end - at;
    return at;
}

/* The lowest multiple of `align` (a power of two) at which `n` bits of
 * the `len`-bit map (a multiple of 64) are all 1; `len` if there is none.
 * Words with no 1 from the position on are skipped whole. */
static inline size_t page_runs_find(const uint64_t *map, size_t len, size_t n, size_t align)
{
    size_t i = 0;
    while (i + n <= len) {
        uint64_t w = map[i / 64] >> (i % 64);
        if (!w) { /* nothing set from i to the end of its word */
            i = (i / 64 + 1) * 64;
            i = (i + align - 1) & ~(align - 1);
            continue;
        }
        size_t first = i + (size_t)__builtin_ctzll(w);
        size_t at = (first + align - 1) & ~(align - 1);
        if (at == first && at + n <= len && page_runs_all(map, at, n, true))
            return at;
        i = at == first ? at + align : at;
    }
    return len;
}

#endif
