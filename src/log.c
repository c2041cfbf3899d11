/*
 * log.c: no-malloc formatting to a buffer and to fd 2 (see log.h).
 * Never calls malloc, stdio or anything that may take a lock of libc's.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct out {
    char *buf;
    size_t size, len;
};

static void put_char(struct out *o, char c)
{
    if (o->len + 1 < o->size)
        o->buf[o->len++] = c;
}

static void put_str(struct out *o, const char *s)
{
    if (!s)
        s = "(null)";
    while (*s)
        put_char(o, *s++);
}

static void put_unsigned(struct out *o, unsigned long long v, unsigned base)
{
    char digits[24];
    int n = 0;
    do {
        digits[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    while (n)
        put_char(o, digits[--n]);
}

static void put_signed(struct out *o, long long v)
{
    if (v < 0) {
        put_char(o, '-');
        put_unsigned(o, 0ull - (unsigned long long)v, 10);
    } else {
        put_unsigned(o, (unsigned long long)v, 10);
    }
}

/* Reads the length modifier (l, ll, z) and returns how many longs it means:
 * 0 = int, 1 = long/size_t, 2 = long long. */
static int read_length(const char **fmt)
{
    if (**fmt == 'z') {
        (*fmt)++;
        return 1;
    }
    int l = 0;
    while (**fmt == 'l' && l < 2) {
        (*fmt)++;
        l++;
    }
    return l;
}

size_t sa_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
    struct out o = {buf, size, 0};
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            put_char(&o, *fmt);
            continue;
        }
        fmt++;
        int len = read_length(&fmt);
        switch (*fmt) {
        case 's': put_str(&o, va_arg(ap, const char *)); break;
        case 'c': put_char(&o, (char)va_arg(ap, int)); break;
        case 'p':
            put_str(&o, "0x");
            put_unsigned(&o, (uintptr_t)va_arg(ap, void *), 16);
            break;
        case 'd':
            put_signed(&o, len == 0 ? va_arg(ap, int)
                           : len == 1 ? va_arg(ap, long) : va_arg(ap, long long));
            break;
        case 'u':
        case 'x':
            put_unsigned(&o, len == 0 ? va_arg(ap, unsigned)
                             : len == 1 ? va_arg(ap, unsigned long)
                                        : va_arg(ap, unsigned long long),
                         *fmt == 'x' ? 16 : 10);
            break;
        case '%': put_char(&o, '%'); break;
        case '\0': fmt--; break; /* lone % at the end */
        default: put_char(&o, '%'); put_char(&o, *fmt); break;
        }
    }
    if (size)
        buf[o.len] = '\0';
    return o.len;
}

size_t sa_format(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = sa_vformat(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

void outbuf_init(struct outbuf *o, char *buf, size_t cap,
                 bool (*sink)(void *ctx, const char *data, size_t len), void *ctx)
{
    *o = (struct outbuf){.buf = buf, .cap = cap, .sink = sink, .ctx = ctx};
}

bool outbuf_flush(struct outbuf *o)
{
    if (o->len && !o->failed) {
        o->buf[o->len] = '\0';
        o->failed = !o->sink(o->ctx, o->buf, o->len);
    }
    o->len = 0;
    return !o->failed;
}

void outbuf_bytes(struct outbuf *o, const char *s, size_t n)
{
    while (n) {
        size_t room = o->cap - 1 - o->len, take = n < room ? n : room;
        memcpy(o->buf + o->len, s, take);
        o->len += take, s += take, n -= take;
        if (o->len == o->cap - 1)
            outbuf_flush(o);
    }
}

void outbuf_str(struct outbuf *o, const char *s) { outbuf_bytes(o, s, strlen(s)); }

void outbuf_fmt(struct outbuf *o, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    size_t n = sa_vformat(line, sizeof(line), fmt, ap);
    va_end(ap);
    outbuf_bytes(o, line, n);
}

bool outbuf_fd_sink(void *ctx, const char *data, size_t len)
{
    int fd = *(int *)ctx;
    while (len) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR) /* a signal before anything was written */
            continue;
        if (w <= 0)
            return false;
        data += w;
        len -= (size_t)w;
    }
    return true;
}

bool outbuf_writer_sink(void *ctx, const char *data, size_t len)
{
    const struct outbuf_writer *w = ctx;
    if (!w->write_cb) {
        int fd = 2;
        return outbuf_fd_sink(&fd, data, len);
    }
    w->write_cb(w->cbopaque, data);
    return true;
}

static void write_all(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(2, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* `prefix`, the formatted text and a newline, as one write into `line`. */
static void vline(char *line, size_t size, const char *prefix, const char *fmt, va_list ap)
{
    size_t n = sa_format(line, size, "%s", prefix);
    n += sa_vformat(line + n, size - n - 1, fmt, ap);
    line[n++] = '\n';
    write_all(line, n);
}

static void vmessage(const char *fmt, va_list ap)
{
    char line[512];
    vline(line, sizeof(line), "salloc: ", fmt, ap);
}

bool opt_abort = false;

void sa_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap);
    va_end(ap);
    if (opt_abort)
        abort();
}

void sa_report(const char *fmt, ...)
{
    char line[1600]; /* room for a dump's name (prof.h: up to 1,120 bytes) and more */
    va_list ap;
    va_start(ap, fmt);
    vline(line, sizeof(line), "<salloc>: ", fmt, ap);
    va_end(ap);
}

void sa_message(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap);
    va_end(ap);
}

void sa_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(fmt, ap);
    va_end(ap);
    abort();
}
