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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "central.h"
#include "os.h"
#include "pageheap.h"
#include "pagemap.h"
#include "sizeclass.h"
#include "tcache.h"

/* A block's bytes filled with a pattern of `seed`, and checked for it
 * (a realloc or rallocx must keep them). */
static inline void unit_fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed);
}

static inline void unit_check(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31 + seed))
            fail_msg("byte %zu of %p lost", i, (const void *)p);
}

/* Runs `fn(arg)` in a child; returns its stderr (in a buffer the next
 * call reuses) and sets *sig to the signal that killed it (0 if it
 * exited). */
static inline char *unit_run_in_child(void (*fn)(void *), void *arg, int *sig)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        signal(SIGABRT, SIG_DFL);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    static char buf[4096];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    *sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return buf;
}

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

/* The process's kernel mappings: lines of /proc/self/maps. */
static inline size_t unit_mapping_count(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    size_t n = 0;
    for (int c; (c = fgetc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

/* Whether the kernel's VmFlags for the mapping holding `a` include `flag`
 * (two letters: "hg" for MADV_HUGEPAGE, "nh" for MADV_NOHUGEPAGE). */
static inline bool unit_vm_flag(uintptr_t a, const char *flag)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    bool inside = false, found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = lo <= a && a < hi;
        else if (inside && !strncmp(line, "VmFlags:", 8)) {
            for (char *t = strtok(line + 8, " \n"); t; t = strtok(NULL, " \n"))
                found |= !strcmp(t, flag);
            break;
        }
    }
    fclose(f);
    return found;
}

#endif
