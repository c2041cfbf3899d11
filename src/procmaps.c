/*
 * procmaps.c: /proc/self/maps read line by line, sorted and without
 * overlaps (procmaps.h says why that needs care).
 */
#define _GNU_SOURCE
#include "procmaps.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

uint64_t procmaps_hex(const char **s)
{
    uint64_t v = 0;
    for (;; (*s)++) {
        char c = **s;
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
        if (d == 16)
            return v;
        v = v << 4 | d;
    }
}

bool procmaps_foreach(char *buf, size_t bufsize, procmaps_fn *fn, void *arg)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t have = 0;
    bool skipping = false, eof = false;
    uintptr_t last_end = 0;
    while (!eof || have) {
        char *nl = memchr(buf, '\n', have);
        if (!nl && !eof && have < bufsize - 1) {
            ssize_t k = read(fd, buf + have, bufsize - 1 - have);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                eof = true;
            else
                have += (size_t)k;
            continue;
        }
        size_t len = nl ? (size_t)(nl - buf) : have;
        buf[len] = '\0';
        if (!skipping && (nl || eof)) {
            const char *s = buf;
            uintptr_t start = procmaps_hex(&s), end = 0;
            if (*s == '-') {
                s++;
                end = procmaps_hex(&s);
            }
            if (*s == ' ' && start < end && start >= last_end) {
                last_end = end;
                fn(buf, len, start, end, arg);
            }
        }
        skipping = !nl && !eof; /* a too-long line: drop up to its newline */
        size_t drop = nl ? len + 1 : have;
        memmove(buf, buf + drop, have - drop);
        have -= drop;
    }
    close(fd);
    return true;
}
