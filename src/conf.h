/*
 * conf.h: run-time options, in jemalloc's syntax: "key:value,key:value".
 * Read once at set-up from, in order (later wins): the `malloc_conf` string
 * the program may define, the MALLOC_CONF environment variable, and the
 * SALLOC_CONF environment variable.
 *
 * A malformed or unknown pair prints one line to stderr in jemalloc's words
 * with "<salloc>:" in front (spec/mallctl.md 3.3), is ignored, and the
 * program runs on (unless abort_conf:true).  Never calls malloc or stdio.
 *
 * The table in conf.c lists every option; man/salloc.3 (TUNING) documents
 * each.  Profiling options write the opt_* variables of prof.h (defined in
 * prof.c); the others are defined in conf.c and declared here.
 */
#ifndef SA_CONF_H
#define SA_CONF_H

#include <stdbool.h>
#include <sys/types.h>

extern ssize_t opt_dirty_decay_ms; /* as given; the page heap holds the live value */
extern bool opt_abort_conf;        /* abort() after reporting any bad option */
extern bool opt_confirm_conf;      /* print each source and accepted pair */
/* Check every free of a small block (boundary, double free) and every sized
 * free's size, on the slow path (man/salloc.3, opt.check); off by default.
 * Fixed once set-up is done. */
extern bool opt_check;
/* Start the background decay thread once set-up is done (background.h,
 * man/salloc.3, opt.background_thread); off by default, as in jemalloc. */
extern bool opt_background_thread;
/* New threads start with a thread cache (man/salloc.3, opt.tcache; tcache.h,
 * Uncached threads); true by default.  thread.tcache.enabled turns one
 * thread's on or off. */
extern bool opt_tcache;
/* The largest size the thread caches hold (man/salloc.3, opt.tcache_max;
 * tcache.h): classes above it are taken from and given back to the central
 * lists one object at a time.  Every small class (256 KiB) by default;
 * lg_tcache_max sets it as a power of two. */
extern size_t opt_tcache_max;
/* log2(opt_tcache_max), rounded down (0 for 0): opt.lg_tcache_max. */
extern size_t opt_lg_tcache_max;
/* Transparent huge pages for the heap (man/salloc.3, opt.thp): "auto" (the
 * default: for what the heap maps beyond its first chunk), "always",
 * "never" (asked of the kernel with madvise) or "default" (left to the
 * system's setting).  Fixed once set-up is done. */
#define CONF_CHOICE_MAX 8
extern char opt_thp[CONF_CHOICE_MAX];
/* malloc_stats_print(NULL, NULL, opt_stats_print_opts) at exit (man/salloc.3,
 * opt.stats_print); the letters are malloc_stats_print's, each once. */
/* What realloc(p, 0) does, p not NULL (man/salloc.3, opt.zero_realloc):
 * "free" (the default: frees p, returns NULL, as glibc), "alloc" (the
 * smallest allocation, p freed) or "abort" (a message, then abort()). */
extern char opt_zero_realloc[CONF_CHOICE_MAX];
/* Filling, for debugging (man/salloc.3, opt.junk, opt.zero; malloc.c):
 * "alloc" sets a new block's bytes to 0xa5, "free" a freed block's to
 * 0x5a, "true" both, "false" (the default) neither; zero:true sets a new
 * block's to 0 instead.  Read once, at start-up. */
extern char opt_junk[CONF_CHOICE_MAX];
extern bool opt_zero;
#define CONF_FLAGS_MAX 16
extern bool opt_stats_print;
extern char opt_stats_print_opts[CONF_FLAGS_MAX];

void conf_init(void);

/* Applies an option string (NULL: nothing); `source` names it in
 * confirm_conf's output.  Returns the number of errors reported.  Never
 * aborts: conf_init() applies abort_conf once every source is read. */
int conf_apply(const char *opts, const char *source);

#endif
