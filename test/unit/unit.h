/*
 * unit.h: what every unit test includes: cmocka and salloc's internal
 * headers.  Unit tests link build/libsalloc_test.a (SA_TESTING, SA_DEBUG on),
 * so salloc is the test's own malloc and its internals are reachable.
 */
#ifndef SA_TEST_UNIT_H
#define SA_TEST_UNIT_H

#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "central.h"
#include "os.h"
#include "pageheap.h"
#include "pagemap.h"
#include "sizeclass.h"
#include "tcache.h"

/* Resident set size of this process in bytes, from /proc/self/statm. */
static inline size_t unit_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (size_t)os_page_size();
}

#endif
