/*
 * flame.c: "salloc flame DUMP -o FILE.svg": a flame graph of live bytes.
 *
 * Stacks are merged by function name from the root (outermost frame) to
 * the leaf (the caller of malloc); a frame's width is its unbiased live
 * bytes.  The SVG is self-contained (no script, no external font): one
 * <g> per frame with a <title> tooltip, a <rect> and a <text> label cut to
 * fit.  Rects carry data-depth (0 is the root, "all") for tools and tests.
 *
 * Geometry: x positions are computed from cumulative byte offsets, rounded
 * to 0.01 px, and clamped to the parent's span, so a child never extends
 * past its parent and siblings never overlap, whatever the rounding.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

struct node {
    const char *name;      /* owned by the profile's frame table */
    double value;          /* unbiased bytes: own + children's */
    struct node **kids;
    size_t nkids, cap;
};

static struct node *node_new(const char *name)
{
    struct node *n = xmalloc(sizeof(*n));
    *n = (struct node){name, 0, NULL, 0, 0};
    return n;
}

static struct node *child(struct node *parent, const char *name)
{
    for (size_t i = 0; i < parent->nkids; i++)
        if (!strcmp(parent->kids[i]->name, name))
            return parent->kids[i];
    if (parent->nkids == parent->cap)
        parent->kids = xrealloc(parent->kids, (parent->cap = parent->cap * 2 + 4) * sizeof(*parent->kids));
    return parent->kids[parent->nkids++] = node_new(name);
}

static void node_free(struct node *n)
{
    for (size_t i = 0; i < n->nkids; i++)
        node_free(n->kids[i]);
    free(n->kids);
    free(n);
}

static int kid_cmp(const void *a, const void *b)
{
    return strcmp((*(struct node *const *)a)->name, (*(struct node *const *)b)->name);
}

static size_t depth_of(const struct node *n)
{
    size_t d = 0;
    for (size_t i = 0; i < n->nkids; i++) {
        size_t k = depth_of(n->kids[i]);
        if (k > d)
            d = k;
    }
    return d + (n->nkids ? 1 : 0);
}

static void xml_escape(FILE *f, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* Control characters are not allowed in XML 1.0; bytes >= 0x80
             * might not be valid UTF-8: replace both. */
            fputc(c < 0x20 || c >= 0x7f ? '?' : c, f);
        }
    }
}

enum {
    WIDTH = 1200,     /* px */
    MARGIN = 10,
    FRAME_H = 16,
    TOP = 44,         /* title and subtitle */
    BOTTOM = 10,
    FONT = 11,
};
#define CHAR_W (FONT * 0.61) /* monospace advance */

struct layout {
    FILE *f;
    double scale;     /* px per byte */
    double total;
    size_t height;    /* of the image */
};

static double snap(double x)
{
    return round(x * 100) / 100;
}

/* Colour from the name's hash, in the usual warm flame palette. */
static void colour(const char *name, int *r, int *g, int *b)
{
    unsigned h = 2166136261u;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    *r = 205 + (int)(h % 50);
    *g = (int)((h >> 8) % 200);
    *b = (int)((h >> 16) % 55);
    if (!strncmp(name, "0x", 2) || strchr(name, '+')) /* unnamed: grey */
        *r = *g = *b = 180;
}

static void draw(struct layout *L, const struct node *n, size_t depth, double start, double lo, double hi)
{
    double x0 = snap(MARGIN + start * L->scale);
    double x1 = snap(MARGIN + (start + n->value) * L->scale);
    if (x0 < lo)
        x0 = lo;
    if (x1 > hi)
        x1 = hi;
    double w = snap(x1 - x0);
    if (w <= 0)
        return;
    double y = (double)L->height - BOTTOM - (double)(depth + 1) * FRAME_H;
    int r, g, b;
    colour(n->name, &r, &g, &b);
    if (depth == 0)
        r = 230, g = 160, b = 60;
    FILE *f = L->f;
    fputs("<g><title>", f);
    xml_escape(f, n->name, 4096);
    fprintf(f, " (%.0f bytes, %.2f%%)</title>", n->value, L->total > 0 ? 100 * n->value / L->total : 0.0);
    fprintf(f, "<rect data-depth=\"%zu\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" "
               "fill=\"rgb(%d,%d,%d)\" rx=\"2\" ry=\"2\"/>",
            depth, x0, y, w, FRAME_H - 1, r, g, b);
    size_t fit = w > 6 ? (size_t)((w - 6) / CHAR_W) : 0;
    size_t len = strlen(n->name);
    if (fit >= 3) {
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\">", x0 + 3, y + FRAME_H - 4.5);
        if (len <= fit) {
            xml_escape(f, n->name, len);
        } else {
            xml_escape(f, n->name, fit - 2);
            fputs("..", f);
        }
        fputs("</text>", f);
    }
    fputs("</g>\n", f);
    double s = start;
    for (size_t i = 0; i < n->nkids; i++) {
        draw(L, n->kids[i], depth + 1, s, x0, x1);
        s += n->kids[i]->value;
    }
}

static int write_svg(FILE *f, const struct profile *p, struct node *root)
{
    size_t depth = depth_of(root) + 1;
    struct layout L = {f, root->value > 0 ? (WIDTH - 2 * MARGIN) / root->value : 0, root->value,
                       TOP + depth * FRAME_H + BOTTOM};
    char h[32];
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%zu\" "
               "viewBox=\"0 0 %d %zu\">\n",
            WIDTH, L.height, WIDTH, L.height);
    fprintf(f, "<style>text { font-family: monospace; font-size: %dpx; fill: #000; } "
               "rect:hover { stroke: #000; stroke-width: 0.5; }</style>\n", FONT);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%zu\" fill=\"#f8f8f0\"/>\n", WIDTH, L.height);
    /* What the bytes are: a fragmentation dump's are free span space. */
    const char *what = p->fragmentation_dump ? "fragmentation (free space in spans kept by live objects)"
                       : p->peak_dump        ? "heap at its peak"
                                             : "live heap";
    const char *bytes = p->fragmentation_dump ? "free in spans" : "live";
    fprintf(f, "<text x=\"600\" y=\"18\" text-anchor=\"middle\" style=\"font-size:15px\">salloc: %s, ", what);
    xml_escape(f, p->path, 200);
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"600\" y=\"34\" text-anchor=\"middle\">%.0f bytes (%s) %s, unbiased; "
               "sampling 1 in %.0f bytes; width = bytes, root at the bottom, caller of malloc on top</text>\n",
            root->value, human_bytes(root->value, h, sizeof(h)), bytes, p->rate);
    draw(&L, root, 0, 0, MARGIN, WIDTH - MARGIN);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

static void sort_tree(struct node *n)
{
    if (n->nkids > 1)
        qsort(n->kids, n->nkids, sizeof(*n->kids), kid_cmp);
    for (size_t i = 0; i < n->nkids; i++)
        sort_tree(n->kids[i]);
}

static const char flame_usage[] =
    "usage: salloc flame DUMP -o FILE.svg\n"
    "  an SVG flame graph of the live bytes in DUMP (-o - or no -o: standard output)\n";

int cmd_flame(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *out = "-";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        if (c == 'o') {
            out = optarg;
        } else if (c == 'h') {
            fputs(flame_usage, stdout);
            return 0;
        } else {
            fputs(flame_usage, stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fputs(flame_usage, stderr);
        return 2;
    }
    struct profile p;
    if (profile_load(argv[optind], &p))
        return 1;
    symbolize(&p, false);
    struct node *root = node_new("all");
    for (size_t i = 0; i < p.nrecs; i++) {
        const struct record *r = &p.recs[i];
        double v = r->v[V_INUSE_SPACE];
        if (!(v > 0))
            continue;
        root->value += v;
        struct node *n = root;
        for (size_t k = r->depth; k-- > r->first;) {
            /* Inlined functions are frames too: outermost first. */
            const struct frame *f = profile_frame(&p, r->pcs[k]);
            for (size_t j = f->nouter; j-- > 0;) {
                n = child(n, f->outer[j]);
                n->value += v;
            }
            n = child(n, f->func);
            n->value += v;
        }
    }
    sort_tree(root);
    int rc = 0;
    if (!strcmp(out, "-")) {
        rc = write_svg(stdout, &p, root) || fflush(stdout) ? 1 : 0;
    } else {
        /* A new or regular file is replaced whole (written beside it, then
         * renamed); anything else (/dev/null, a FIFO, a link to
         * /dev/stdout) is written in place: renamed over, a device or a
         * link would become a plain file. */
        struct stat st;
        bool in_place = lstat(out, &st) == 0 && !S_ISREG(st.st_mode);
        char *tmp = xmalloc(strlen(out) + 8);
        sprintf(tmp, in_place ? "%s" : "%s.tmp", out);
        FILE *f = fopen(tmp, "w");
        if (!f) {
            fprintf(stderr, "salloc flame: cannot create %s: %s\n", tmp, strerror(errno));
            rc = 1;
        } else {
            int w = write_svg(f, &p, root);
            if (fclose(f) || w || (!in_place && rename(tmp, out))) {
                fprintf(stderr, "salloc flame: cannot write %s: %s\n", out, strerror(errno));
                if (!in_place)
                    remove(tmp);
                rc = 1;
            } else {
                fprintf(stderr, "salloc flame: wrote %s (%zu stacks, %.0f bytes)\n", out, p.nrecs, root->value);
            }
        }
        free(tmp);
    }
    node_free(root);
    profile_free(&p);
    return rc;
}
