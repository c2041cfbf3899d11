/*
 * tsan_init.c: linked into each unit test of make test-tsan, and only
 * there.  That build gives salloc other names (sa_tsan_malloc, ...: see the
 * Makefile), so ThreadSanitizer's malloc serves libc and cmocka and nothing
 * calls salloc before the test itself does.  As the process's malloc,
 * salloc is set up by the first allocation of the loader or libc, long
 * before main, and some of their blocks stay live (stdio's buffers); the
 * tests count on both (a sampling rate a test sets would otherwise be reset
 * by a set-up that runs inside its loop).  This constructor does the same:
 * one allocation, kept.
 */
#include <stdlib.h>

void *tsan_unit_kept;

__attribute__((constructor)) static void tsan_unit_init(void)
{
    tsan_unit_kept = malloc(64);
}
