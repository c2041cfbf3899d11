/*
 * salloc.c: the salloc command: dispatch to a subcommand, usage, and the
 * few helpers every subcommand uses.
 *
 *   salloc run   [options] -- PROGRAM ARGS...   run.c
 *   salloc top   [options] DUMP                 top.c
 *   salloc flame DUMP -o FILE.svg               flame.c
 *   salloc diff  OLD NEW                        diff.c
 *
 * An ordinary program: it is not preloaded into anything and may use stdio
 * and malloc freely.  Exit status: the subcommand's (run: the program's),
 * 2 for a usage error, 1 for any other failure.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "usage: salloc run [-r RATE] [-o PREFIX] [--interval BYTES] [--peak] [--leaks | --leak-check]\n"
    "                  -- PROGRAM [ARGS...]\n"
    "       salloc top [-n N] [--space|--objects|--resident|--fragmentation] [--inuse|--alloc] DUMP\n"
    "       salloc flame DUMP -o FILE.svg\n"
    "       salloc diff [-n N] OLD NEW\n"
    "\n"
    "  run    run PROGRAM with the salloc heap profiler preloaded; list the dumps it wrote\n"
    "  top    the allocation sites holding the most memory in a heap_v2 dump\n"
    "  flame  an SVG flame graph of the live bytes in a dump\n"
    "  diff   live bytes per function in two dumps, largest growth first\n"
    "\n"
    "'salloc COMMAND --help' describes a command's options; man salloc has the details.\n";

static void usage(FILE *to)
{
    fputs(usage_text, to);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "salloc: out of memory\n");
        exit(1);
    }
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "salloc: out of memory\n");
        exit(1);
    }
    return p;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

const char *human_bytes(double b, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double x = b < 0 ? -b : b;
    while (x >= 1024 && u < 4) {
        x /= 1024;
        u++;
    }
    snprintf(buf, size, u ? "%s%.1f %s" : "%s%.0f %s", b < 0 ? "-" : "", x, units[u]);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "top"))
        return cmd_top(argc - 1, argv + 1);
    if (!strcmp(cmd, "flame"))
        return cmd_flame(argc - 1, argv + 1);
    if (!strcmp(cmd, "diff"))
        return cmd_diff(argc - 1, argv + 1);
    fprintf(stderr, "salloc: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
