/*
 * conf.h: run-time options, in jemalloc's syntax: "key:value,key:value".
 * Read once at set-up from, in order (later wins): the `malloc_conf` string
 * the program may define, the MALLOC_CONF environment variable, and the
 * SALLOC_CONF environment variable.
 *
 * A malformed or unknown pair prints one line to stderr naming it and the
 * source, is ignored, and the program runs on.  Never calls malloc.
 *
 * Options so far (man/salloc.3 documents each):
 *   dirty_decay_ms   ms before free pages go back to the kernel (default
 *                    10000; 0 = at once; -1 = only on malloc_trim)
 */
#ifndef SA_CONF_H
#define SA_CONF_H

#include <stdbool.h>

void conf_init(void);

/* Applies an option string; `source` names it in warnings.  Returns the
 * number of pairs rejected. */
int conf_apply(const char *opts, const char *source);

#endif
