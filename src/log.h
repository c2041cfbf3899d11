/*
 * log.h: formatting and messages without malloc.  Everything here writes to
 * a caller's buffer or straight to fd 2 with write(2), so it is safe inside
 * the allocator, with locks held, in a fork child or before initialisation.
 *
 * Formats understood: %s %c %d %ld %lld %u %lu %llu %zu %zd %x %lx %zx %p %%.
 * No widths or flags: salloc's messages do not need them.
 */
#ifndef SA_LOG_H
#define SA_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "util.h"

/* Like vsnprintf: always NUL-terminates when size > 0; returns the length
 * written (truncated output is cut silently). */
size_t sa_vformat(char *buf, size_t size, const char *fmt, va_list ap);
size_t sa_format(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One line to stderr, prefixed "salloc: " and ended with a newline. */
void sa_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* opt.abort: a warning (sa_warn) ends the process with abort(), as in
 * jemalloc; false by default.  Set by conf.c. */
extern bool opt_abort;

/* A warning: sa_message, then abort() under opt.abort.  For what salloc
 * can carry on without but the program should hear of (a background
 * thread or an exit-time report it could not set up). */
void sa_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line to stderr, prefixed "<salloc>: " as salloc's option warnings
 * are: for messages jemalloc prints in words that people and tools match
 * (prof_leak's summary), which salloc prints in the same words.  Long
 * enough for a dump's name. */
void sa_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* sa_message, then abort(): for heap corruption and misuse that salloc
 * must not survive (an invalid free, a broken invariant). */
SA_NORETURN void sa_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A buffered writer that never allocates: bytes and formatted text collect
 * in the caller's buffer and go to `sink` in chunks (NUL-terminated, for
 * sinks that want C strings).  Used by dumps (to a file) and by
 * malloc_stats_print (to its callback). */
struct outbuf {
    char *buf;
    size_t cap, len; /* cap counts the NUL's byte */
    bool failed;     /* a sink call failed: the rest is dropped */
    bool (*sink)(void *ctx, const char *data, size_t len);
    void *ctx;
};

void outbuf_init(struct outbuf *o, char *buf, size_t cap,
                 bool (*sink)(void *ctx, const char *data, size_t len), void *ctx);
void outbuf_bytes(struct outbuf *o, const char *s, size_t n);
void outbuf_str(struct outbuf *o, const char *s);
void outbuf_fmt(struct outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sends what is buffered; false if any sink call failed. */
bool outbuf_flush(struct outbuf *o);
/* A sink writing everything to the file descriptor *(int *)ctx. */
bool outbuf_fd_sink(void *ctx, const char *data, size_t len);
/* A sink for jemalloc's write callbacks (malloc_stats_print,
 * experimental.prof_recent.alloc_dump): ctx is a struct outbuf_writer; each
 * chunk goes to write_cb (NUL-terminated, as outbuf hands it), or to
 * standard error when write_cb is NULL. */
struct outbuf_writer {
    void (*write_cb)(void *, const char *);
    void *cbopaque;
};
bool outbuf_writer_sink(void *ctx, const char *data, size_t len);

/* Checked only when it is cheap or in SA_DEBUG builds; names the file/line. */
#define SA_ASSERT(cond)                                                        \
    do {                                                                       \
        if (SA_DEBUG && unlikely(!(cond)))                                     \
            sa_fatal("assertion failed: %s (%s:%d)", #cond, __FILE__, __LINE__); \
    } while (0)

#endif
