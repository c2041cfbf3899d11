/*
 * heapv2.c: the reader for jemalloc's heap_v2 text dumps (salloc writes the
 * same grammar; shared/spec/heap-dump-formats.md section 1).
 *
 * Stricter than jeprof, which ignores lines it does not understand: a
 * truncated or damaged file must be reported, not half-read.  Accepted:
 *
 *   heap_v2/R
 *     t*: n: s [n: s]                    (mandatory total line)
 *     tU: n: s [n: s] [name]             (per-thread summaries)
 *   @ 0x... 0x...                        (record: stack, leaf first)
 *     t*: n: s [n: s]                    (mandatory, right after "@")
 *     tU: n: s [n: s]
 *   # salloc: resident R swapped S fragmentation F   (salloc; unbiased)
 *   # any other comment
 *   <blank line>
 *   MAPPED_LIBRARIES:
 *   /proc/pid/maps text
 *
 * Each record's counts are unbiased here, pair by pair, exactly as jeprof
 * does (section 2.4): scale = 1 / (1 - exp(-(s/n)/R)); writers chose the
 * numbers so that this per-record scaling gives the unbiased sums.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct cursor {
    const char *p, *end;
    size_t line;
};

/* The next line (without '\n') in [*s, *e); false at end of input. */
static bool next_line(struct cursor *c, const char **s, const char **e)
{
    if (c->p >= c->end)
        return false;
    const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    *s = c->p;
    *e = nl ? nl : c->end;
    c->p = nl ? nl + 1 : c->end;
    c->line++;
    return true;
}

static bool parse_u64(const char **s, const char *e, uint64_t *v)
{
    const char *p = *s;
    if (p >= e || *p < '0' || *p > '9')
        return false;
    uint64_t x = 0;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *v = x;
    *s = p;
    return true;
}

static bool expect(const char **s, const char *e, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(e - *s) < n || memcmp(*s, lit, n))
        return false;
    *s += n;
    return true;
}

static void skip_spaces(const char **s, const char *e)
{
    while (*s < e && (**s == ' ' || **s == '\t'))
        (*s)++;
}

/* "  tX: n: s [n: s]" -> counts; *star says whether X was '*'.  Anything
 * after ']' is allowed only when allow_name (header thread names). */
static bool parse_counts(const char *s, const char *e, bool allow_name, bool *star, uint64_t c[4])
{
    skip_spaces(&s, e);
    if (!expect(&s, e, "t"))
        return false;
    uint64_t uid;
    if (s < e && *s == '*') {
        *star = true;
        s++;
    } else if (parse_u64(&s, e, &uid)) {
        *star = false;
    } else {
        return false;
    }
    if (!expect(&s, e, ":"))
        return false;
    skip_spaces(&s, e);
    if (!parse_u64(&s, e, &c[0]) || !expect(&s, e, ":"))
        return false;
    skip_spaces(&s, e);
    if (!parse_u64(&s, e, &c[1]))
        return false;
    skip_spaces(&s, e);
    if (!expect(&s, e, "["))
        return false;
    skip_spaces(&s, e);
    if (!parse_u64(&s, e, &c[2]) || !expect(&s, e, ":"))
        return false;
    skip_spaces(&s, e);
    if (!parse_u64(&s, e, &c[3]))
        return false;
    skip_spaces(&s, e);
    if (!expect(&s, e, "]"))
        return false;
    if (s < e && !allow_name) {
        skip_spaces(&s, e);
        return s == e;
    }
    return true;
}

static bool parse_stack(const char *s, const char *e, struct record *r)
{
    size_t cap = 16;
    r->pcs = xmalloc(cap * sizeof(*r->pcs));
    r->depth = 0;
    s++; /* '@' */
    for (;;) {
        skip_spaces(&s, e);
        if (s == e)
            break;
        if (!expect(&s, e, "0x") && !expect(&s, e, "0X"))
            return false;
        uint64_t x = 0;
        int digits = 0;
        for (; s < e && *s != ' ' && *s != '\t'; s++, digits++) {
            int d;
            if (*s >= '0' && *s <= '9')
                d = *s - '0';
            else if (*s >= 'a' && *s <= 'f')
                d = *s - 'a' + 10;
            else if (*s >= 'A' && *s <= 'F')
                d = *s - 'A' + 10;
            else
                return false;
            if (digits >= 16)
                return false;
            x = x << 4 | (uint64_t)d;
        }
        if (!digits)
            return false;
        if (r->depth == cap)
            r->pcs = xrealloc(r->pcs, (cap *= 2) * sizeof(*r->pcs));
        r->pcs[r->depth++] = x;
    }
    return r->depth > 0;
}

static void parse_maps(struct cursor *c, struct profile *p)
{
    size_t cap = 64;
    p->maps = xmalloc(cap * sizeof(*p->maps));
    const char *s, *e;
    while (next_line(c, &s, &e)) {
        char line[4352];
        size_t n = (size_t)(e - s);
        if (n >= sizeof(line))
            continue;
        memcpy(line, s, n);
        line[n] = '\0';
        unsigned long long start, end, off, inode;
        char perms[8];
        int at = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %llu %n", &start, &end, perms, &off, &inode, &at) < 5)
            continue; /* jeprof ignores such lines too */
        if (p->nmaps == cap)
            p->maps = xrealloc(p->maps, (cap *= 2) * sizeof(*p->maps));
        struct mapping *m = &p->maps[p->nmaps++];
        m->start = start;
        m->end = end;
        m->offset = off;
        m->exec = strchr(perms, 'x') != NULL;
        m->path = (at > 0 && line[at] == '/') ? xstrdup(line + at) : NULL;
    }
}

/* One line "salloc: <file>: line N: <what>"; always -1. */
static int bad(const struct profile *p, size_t line, const char *what)
{
    if (line)
        fprintf(stderr, "salloc: %s: line %zu: %s\n", p->path, line, what);
    else
        fprintf(stderr, "salloc: %s: %s\n", p->path, what);
    return -1;
}

static void unbias_into(double *objs, double *bytes, uint64_t n, uint64_t s, double rate)
{
    double k = unbias_scale((double)n, (double)s, rate);
    *objs += (double)n * k;
    *bytes += (double)s * k;
}

int heapv2_parse(const char *buf, size_t len, struct profile *p)
{
    p->format = "heap_v2";
    if (len == 0)
        return bad(p, 0, "empty file (not a heap profile)");
    if (len < 8 || memcmp(buf, "heap_v2/", 8))
        return bad(p, 0, "not a heap_v2 dump (first line must be heap_v2/<rate>)");
    if (buf[len - 1] != '\n')
        return bad(p, 0, "truncated: the last line is incomplete (no final newline)");
    if (memchr(buf, '\0', len))
        return bad(p, 0, "malformed: contains NUL bytes (binary data in a text dump)");

    struct cursor c = {buf, buf + len, 0};
    const char *s = buf, *e = buf;
    next_line(&c, &s, &e);
    s += 8;
    uint64_t rate;
    if (!parse_u64(&s, e, &rate) || s != e)
        return bad(p, 1, "malformed header: expected heap_v2/<rate>");
    p->rate = (double)rate;
    p->has[V_INUSE_OBJECTS] = p->has[V_INUSE_SPACE] = true;
    p->has[V_ALLOC_OBJECTS] = p->has[V_ALLOC_SPACE] = true;

    size_t cap = 64;
    p->recs = xmalloc(cap * sizeof(*p->recs));
    bool seen_total = false;
    struct record *cur = NULL; /* the record whose t* line is due or read */
    bool cur_counted = false;
    bool any_accum = false;
    while (next_line(&c, &s, &e)) {
        if (s == e) { /* blank: only before MAPPED_LIBRARIES or at the end */
            const char *s2, *e2;
            struct cursor save = c;
            if (!next_line(&c, &s2, &e2)) {
                c = save;
                break;
            }
            if ((size_t)(e2 - s2) == 17 && !memcmp(s2, "MAPPED_LIBRARIES:", 17)) {
                if (cur && !cur_counted)
                    return bad(p, c.line, "truncated: record without a t* count line");
                p->has_maps = true;
                parse_maps(&c, p);
                break;
            }
            return bad(p, save.line, "malformed: unexpected blank line");
        }
        if ((size_t)(e - s) >= 17 && !memcmp(s, "MAPPED_LIBRARIES:", 17)) {
            if (cur && !cur_counted)
                return bad(p, c.line, "truncated: record without a t* count line");
            p->has_maps = true;
            parse_maps(&c, p);
            break;
        }
        if (*s == '#') {
            unsigned long long res, swp, frag;
            char tmp[256];
            size_t n = (size_t)(e - s) < sizeof(tmp) - 1 ? (size_t)(e - s) : sizeof(tmp) - 1;
            memcpy(tmp, s, n);
            tmp[n] = '\0';
            if (sscanf(tmp, "# salloc: resident %llu swapped %llu fragmentation %llu", &res, &swp,
                       &frag) == 3) {
                if (!cur || !cur_counted)
                    return bad(p, c.line, "malformed: residency line outside a record");
                cur->v[V_RESIDENT] += (double)res;
                cur->v[V_SWAPPED] += (double)swp;
                cur->v[V_FRAGMENTATION] += (double)frag;
                p->has[V_RESIDENT] = p->has[V_SWAPPED] = p->has[V_FRAGMENTATION] = true;
            } else if (strstr(tmp, "fragmentation profile")) {
                p->fragmentation_dump = true;
            } else if (strstr(tmp, "peak profile")) {
                p->peak_dump = true;
            }
            continue;
        }
        if (*s == '@') {
            if (!seen_total)
                return bad(p, c.line, "malformed: record before the t* total line");
            if (cur && !cur_counted)
                return bad(p, c.line, "malformed: record without a t* count line");
            if (p->nrecs == cap)
                p->recs = xrealloc(p->recs, (cap *= 2) * sizeof(*p->recs));
            cur = &p->recs[p->nrecs++];
            memset(cur, 0, sizeof(*cur));
            cur_counted = false;
            if (!parse_stack(s, e, cur))
                return bad(p, c.line, "malformed stack line (expected @ 0x... addresses)");
            continue;
        }
        bool star;
        uint64_t cnt[4];
        if (!parse_counts(s, e, !cur, &star, cnt))
            return bad(p, c.line, "malformed count line (expected tN: n: bytes [n: bytes])");
        if (!cur) {
            if (star)
                seen_total = true;
            else if (!seen_total)
                return bad(p, c.line, "malformed: thread line before the t* total line");
            continue;
        }
        if (star) {
            if (cur_counted)
                return bad(p, c.line, "malformed: two t* lines in one record");
            cur_counted = true;
            unbias_into(&cur->v[V_INUSE_OBJECTS], &cur->v[V_INUSE_SPACE], cnt[0], cnt[1], p->rate);
            unbias_into(&cur->v[V_ALLOC_OBJECTS], &cur->v[V_ALLOC_SPACE], cnt[2], cnt[3], p->rate);
            any_accum |= cnt[2] || cnt[3];
        } else if (!cur_counted) {
            return bad(p, c.line, "malformed: thread line before the record's t* line");
        }
    }
    if (!seen_total)
        return bad(p, 0, "truncated: no t* total line after the header");
    if (cur && !cur_counted)
        return bad(p, 0, "truncated: the last record has no t* count line");
    p->has[V_ALLOC_OBJECTS] = p->has[V_ALLOC_SPACE] = any_accum;
    return 0;
}
