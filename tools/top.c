/*
 * top.c: "salloc top": the allocation sites holding the most memory.
 *
 * A site is the first frame of a record past the allocator's own frames
 * (the caller of malloc), named by function and source line; records with
 * the same site are summed after each was unbiased on its own (heapv2.c).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct site {
    const char *func, *loc;
    double value, objects;
};

static int site_key_cmp(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    int c = strcmp(x->func, y->func);
    if (c)
        return c;
    return strcmp(x->loc ? x->loc : "", y->loc ? y->loc : "");
}

static int site_value_cmp(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? 1 : -1;
    return strcmp(x->func, y->func);
}

static const char top_usage[] =
    "usage: salloc top [-n N] [--space|--objects|--resident|--fragmentation] [--inuse|--alloc] DUMP\n"
    "  -n N             show the N largest sites (default 10; 0 for all)\n"
    "  --space          rank by bytes (default)\n"
    "  --objects        rank by number of objects\n"
    "  --resident       rank by resident bytes (salloc dumps with residency lines)\n"
    "  --fragmentation  rank by free span space kept alive (salloc dumps)\n"
    "  --inuse          live at the time of the dump (default)\n"
    "  --alloc          allocated since start (dumps written with prof_accum:true)\n";

enum metric { M_SPACE, M_OBJECTS, M_RESIDENT, M_FRAGMENTATION };

/* Which value of the records to rank by; -1 after explaining why the dump
 * cannot answer. */
static int pick_value(const struct profile *p, enum metric m, bool alloc)
{
    if (m == M_RESIDENT || m == M_FRAGMENTATION) {
        const char *what = m == M_RESIDENT ? "resident" : "fragmentation";
        if (alloc) {
            fprintf(stderr, "salloc: --%s describes live memory; it cannot be combined with --alloc\n", what);
            return -1;
        }
        if (m == M_FRAGMENTATION && p->fragmentation_dump)
            return V_INUSE_SPACE;
        if (!p->has[m == M_RESIDENT ? V_RESIDENT : V_FRAGMENTATION] && p->peak_dump) {
            fprintf(stderr, "salloc: %s: a peak dump carries no %s bytes (the samples it lists "
                            "may be gone; their pages were not read)\n", p->path, what);
            return -1;
        }
        if (!p->has[m == M_RESIDENT ? V_RESIDENT : V_FRAGMENTATION]) {
            fprintf(stderr,
                    "salloc: %s: this %s dump carries no %s bytes: it has no '# salloc: resident' "
                    "lines (a jemalloc dump, or salloc could not read /proc/self/pagemap)%s\n",
                    p->path, p->format, what,
                    m == M_FRAGMENTATION
                        ? "; a fragmentation dump (mallctl prof.dump_fragmentation) can be read "
                          "with --fragmentation or --space"
                        : "");
            return -1;
        }
        return m == M_RESIDENT ? V_RESIDENT : V_FRAGMENTATION;
    }
    int v = alloc ? (m == M_OBJECTS ? V_ALLOC_OBJECTS : V_ALLOC_SPACE)
                  : (m == M_OBJECTS ? V_INUSE_OBJECTS : V_INUSE_SPACE);
    if (!p->has[v]) {
        fprintf(stderr, "salloc: %s: the dump has no accumulated counts (all [0: 0]); "
                        "write it with SALLOC_CONF=prof_accum:true to use --alloc\n", p->path);
        return -1;
    }
    return v;
}

int cmd_top(int argc, char **argv)
{
    static const struct option opts[] = {
        {"space", no_argument, NULL, 's'},     {"objects", no_argument, NULL, 'O'},
        {"resident", no_argument, NULL, 'R'},  {"fragmentation", no_argument, NULL, 'F'},
        {"inuse", no_argument, NULL, 'i'},     {"alloc", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
    };
    long limit = 10;
    enum metric m = M_SPACE;
    bool alloc = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            char *end;
            limit = strtol(optarg, &end, 10);
            if (*end || limit < 0) {
                fprintf(stderr, "salloc top: -n wants a number >= 0, not '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 's': m = M_SPACE; break;
        case 'O': m = M_OBJECTS; break;
        case 'R': m = M_RESIDENT; break;
        case 'F': m = M_FRAGMENTATION; break;
        case 'i': alloc = false; break;
        case 'a': alloc = true; break;
        case 'h': fputs(top_usage, stdout); return 0;
        default: fputs(top_usage, stderr); return 2;
        }
    }
    if (argc - optind != 1) {
        fputs(top_usage, stderr);
        return 2;
    }
    struct profile p;
    if (profile_load(argv[optind], &p))
        return 1;
    int v = pick_value(&p, m, alloc);
    if (v < 0) {
        profile_free(&p);
        return 1;
    }
    int vobj = alloc ? V_ALLOC_OBJECTS : V_INUSE_OBJECTS;
    symbolize(&p, true);

    struct site *s = xmalloc((p.nrecs + 1) * sizeof(*s));
    size_t n = 0;
    double total = 0, total_objs = 0;
    for (size_t i = 0; i < p.nrecs; i++) {
        const struct record *r = &p.recs[i];
        const struct frame *f = profile_frame(&p, r->pcs[r->first]);
        s[n++] = (struct site){f->func, f->loc, r->v[v], r->v[vobj]};
        total += r->v[v];
        total_objs += r->v[vobj];
    }
    qsort(s, n, sizeof(*s), site_key_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && !site_key_cmp(&s[u - 1], &s[i])) {
            s[u - 1].value += s[i].value;
            s[u - 1].objects += s[i].objects;
        } else {
            /* A site with nothing of the value ranked is no site (as in
             * jeprof): prof_accum keeps the records of freed stacks. */
            if (u && !(s[u - 1].value > 0))
                u--;
            s[u++] = s[i];
        }
    }
    if (u && !(s[u - 1].value > 0))
        u--;
    qsort(s, u, sizeof(*s), site_value_cmp);

    static const char *const vnames[] = {"inuse objects", "inuse space", "alloc objects",
                                         "alloc space", "resident space", "swapped space",
                                         "fragmentation space"};
    /* A fragmentation dump's "inuse" bytes are free span space, whichever
     * option ranked them. */
    const char *vname = v == V_INUSE_SPACE && (m == M_FRAGMENTATION || p.fragmentation_dump)
                            ? "fragmentation space" : vnames[v];
    bool objects = v == V_INUSE_OBJECTS || v == V_ALLOC_OBJECTS;
    char h1[32];
    printf("%s: %s dump, sampling 1 in %.0f bytes, %zu stacks\n", p.path, p.format, p.rate, p.nrecs);
    if (!p.has_maps)
        printf("warning: no MAPPED_LIBRARIES section (truncated?): addresses cannot be named\n");
    if (objects)
        printf("Total %s: %.0f objects\n", vname, total);
    else
        printf("Total %s: %.0f bytes (%s) in %.0f objects\n", vname, total,
               human_bytes(total, h1, sizeof(h1)), total_objs);
    size_t show = (limit == 0 || (size_t)limit > u) ? u : (size_t)limit;
    printf("Top %zu of %zu sites by %s:\n", show, u, vname);
    int fw = 8;
    for (size_t i = 0; i < show; i++) {
        int l = (int)strlen(s[i].func);
        if (l > fw)
            fw = l > 48 ? 48 : l;
    }
    printf("%14s %7s %7s  %-*s  %s\n", objects ? "objects" : "bytes", "%", "cum%", fw, "function",
           "location");
    double cum = 0;
    for (size_t i = 0; i < show; i++) {
        cum += s[i].value;
        printf("%14.0f %6.1f%% %6.1f%%  %-*s  %s\n", s[i].value,
               total > 0 ? 100 * s[i].value / total : 0.0, total > 0 ? 100 * cum / total : 0.0, fw,
               s[i].func, s[i].loc ? s[i].loc : "?");
    }
    free(s);
    profile_free(&p);
    return 0;
}
