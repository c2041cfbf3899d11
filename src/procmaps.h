/*
 * procmaps.h: this process's /proc/self/maps, line by line, for the two
 * dump formats that list the mappings (dump.c's MAPPED_LIBRARIES, pprof.c's
 * Mapping messages).
 *
 * The kernel hands the file out a page per read() and finds the next line
 * afresh each time, so while other threads map and unmap (regions merge
 * and split) a later read can start below a region already read.  The
 * reader keeps only lines that start at or after the end of the last one
 * kept: what it hands on is sorted and never overlaps, as jeprof and pprof
 * expect.
 *
 * Never calls malloc: the caller lends the line buffer.
 */
#ifndef SA_PROCMAPS_H
#define SA_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A line with its newline replaced by NUL, and its start-end range. */
typedef void procmaps_fn(const char *line, size_t len, uintptr_t start, uintptr_t end,
                         void *arg);

/* Calls fn for each line, in address order, using `buf` (bufsize bytes)
 * for one line at a time; a longer line is skipped.  False if the file
 * cannot be opened. */
bool procmaps_foreach(char *buf, size_t bufsize, procmaps_fn *fn, void *arg);

/* The hex number at *s (lower case, as the kernel writes it); *s is left
 * at the first character that is not a hex digit. */
uint64_t procmaps_hex(const char **s);

#endif
