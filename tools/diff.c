/*
 * diff.c: "salloc diff OLD NEW": live bytes per allocating function (the
 * caller of malloc) in two dumps, largest growth first.  A function that
 * keeps growing between dumps of one process is where to look for a leak.
 * Functions are matched by name, so the dumps may come from two runs.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct row {
    char *func;
    double old, new;
};

static int row_name_cmp(const void *a, const void *b)
{
    return strcmp(((const struct row *)a)->func, ((const struct row *)b)->func);
}

static int row_growth_cmp(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    double dx = x->new - x->old, dy = y->new - y->old;
    if (dx != dy)
        return dx < dy ? 1 : -1;
    return strcmp(x->func, y->func);
}

/* Appends one row per record of p (value into old or new); returns the total. */
static double add_rows(const struct profile *p, bool is_new, struct row **rows, size_t *n, size_t *cap)
{
    double total = 0;
    for (size_t i = 0; i < p->nrecs; i++) {
        const struct record *r = &p->recs[i];
        if (*n == *cap)
            *rows = xrealloc(*rows, (*cap = *cap * 2 + 16) * sizeof(**rows));
        double v = r->v[V_INUSE_SPACE];
        (*rows)[(*n)++] = (struct row){xstrdup(record_func(p, r, r->first)), is_new ? 0 : v, is_new ? v : 0};
        total += v;
    }
    return total;
}

static const char diff_usage[] =
    "usage: salloc diff [-n N] OLD NEW\n"
    "  live bytes per allocating function in the dumps OLD and NEW, largest growth first\n"
    "  -n N   show N functions (default 20; 0 for all)\n";

int cmd_diff(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    long limit = 20;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        if (c == 'n') {
            char *end;
            limit = strtol(optarg, &end, 10);
            if (*end || limit < 0) {
                fprintf(stderr, "salloc diff: -n wants a number >= 0, not '%s'\n", optarg);
                return 2;
            }
        } else if (c == 'h') {
            fputs(diff_usage, stdout);
            return 0;
        } else {
            fputs(diff_usage, stderr);
            return 2;
        }
    }
    if (argc - optind != 2) {
        fputs(diff_usage, stderr);
        return 2;
    }
    struct profile a, b;
    if (profile_load(argv[optind], &a))
        return 1;
    if (profile_load(argv[optind + 1], &b)) {
        profile_free(&a);
        return 1;
    }
    symbolize(&a, false);
    symbolize(&b, false);
    struct row *rows = NULL;
    size_t n = 0, cap = 0;
    double told = add_rows(&a, false, &rows, &n, &cap);
    double tnew = add_rows(&b, true, &rows, &n, &cap);
    if (n > 1) /* two dumps without records have no array at all */
        qsort(rows, n, sizeof(*rows), row_name_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && !strcmp(rows[u - 1].func, rows[i].func)) {
            rows[u - 1].old += rows[i].old;
            rows[u - 1].new += rows[i].new;
            free(rows[i].func);
        } else {
            /* A function with nothing live in either dump (prof_accum
             * keeps the records of freed stacks) is no row. */
            if (u && !(rows[u - 1].old > 0 || rows[u - 1].new > 0))
                free(rows[--u].func);
            rows[u++] = rows[i];
        }
    }
    if (u && !(rows[u - 1].old > 0 || rows[u - 1].new > 0))
        free(rows[--u].func);
    if (u > 1)
        qsort(rows, u, sizeof(*rows), row_growth_cmp);
    char h1[32], h2[32], h3[32];
    printf("old: %s: %.0f bytes live (%s)\n", a.path, told, human_bytes(told, h1, sizeof(h1)));
    printf("new: %s: %.0f bytes live (%s)\n", b.path, tnew, human_bytes(tnew, h2, sizeof(h2)));
    printf("change: %+.0f bytes (%s)\n", tnew - told, human_bytes(tnew - told, h3, sizeof(h3)));
    size_t show = (limit == 0 || (size_t)limit > u) ? u : (size_t)limit;
    printf("%14s %14s %14s %8s  %s\n", "old bytes", "new bytes", "change", "change%", "function");
    for (size_t i = 0; i < show; i++) {
        double d = rows[i].new - rows[i].old;
        char pct[16];
        if (rows[i].old > 0)
            snprintf(pct, sizeof(pct), "%+.0f%%", 100 * d / rows[i].old);
        else
            snprintf(pct, sizeof(pct), "new");
        printf("%14.0f %14.0f %+14.0f %8s  %s\n", rows[i].old, rows[i].new, d, pct, rows[i].func);
    }
    for (size_t i = 0; i < u; i++)
        free(rows[i].func);
    free(rows);
    profile_free(&a);
    profile_free(&b);
    return 0;
}
