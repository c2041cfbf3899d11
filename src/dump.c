/*
 * dump.c: the jemalloc heap_v2 writer (spec/heap-dump-formats.md, sections
 * 1 and 2).  Samples are snapshotted (prof_snapshot, one shard lock at a
 * time), grouped by (stack, usable size Z, rate R), and written so that
 * jeprof's own per-stack rescaling returns the unbiased sums exactly:
 *
 *   a group taken at the header's rate R:  n = N, s = N * Z   (jeprof
 *     divides by p(Z) = 1 - e^(-Z/R): exactly this group's unbiased sums);
 *   a group taken at another rate R':      C = N / p_R'(Z), S = C * Z, then
 *     the change of variables x = S/C, n = C p_R(x), s = S p_R(x).
 *
 * Several records may repeat a stack; jeprof and pprof add them up.
 *
 * A path ending in .pb or .pb.gz gets profile.proto instead (pprof.c), with
 * the same groups and the values already unbiased.
 *
 * Never calls malloc: buffers come from os_map, numbers from sa_format.
 * The file is written as <path>.tmp.<pid> (or, when that name would be too
 * long for the directory, <dir>/.salloc-dump.<pid>.tmp) and renamed over
 * <path> only when complete, so a failure leaves nothing behind and never
 * damages an older dump at <path>.
 */
#define _GNU_SOURCE
#include "dump.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "central.h"
#include "fmath.h"
#include "log.h"
#include "os.h"
#include "pprof.h"
#include "procmaps.h"
#include "residency.h"
#include "stack.h"

#define OUT_BUF 65536

SA_BSS_APART static char out_buf[OUT_BUF]; /* under the dump lock */
/* A dump's other buffers, under the dump lock too: an interval or gdump
 * dump runs inside malloc() on whatever thread took the sample, whose
 * stack may be as small as PTHREAD_STACK_MIN (16 KiB, thread descriptor
 * and TLS included).  On the stack they took 13 KB of it. */
SA_BSS_APART static struct {
    char tmp[4200];         /* dump_write's temporary file name */
    char line[4096 + 128];  /* a line of /proc/self/maps */
    struct residency_reader reader;
} scratch;

/* ---- the numbers ---- */

static double p_sampled(double z, double rate) { return sa_one_minus_exp_neg(z / rate); }

static unsigned long long to_count(double x)
{
    return x <= 0 ? 0 : x >= 1.8e19 ? ~0ull : (unsigned long long)(x + 0.5);
}

/* Unbiased sums (C objects, S bytes) -> the (n, s) to write, for rate R. */
static void transform(double c, double s, double rate, unsigned long long *n,
                      unsigned long long *bytes)
{
    if (c <= 0 || s <= 0) {
        *n = *bytes = 0;
        return;
    }
    double p = p_sampled(s / c, rate);
    *n = to_count(c * p);
    *bytes = to_count(s * p);
}

/* ---- sorting the snapshot without malloc: heapsort by (stack, Z, R) ---- */

static int entry_cmp(const struct dump_entry *a, const struct dump_entry *b)
{
    if (a->stack != b->stack)
        return (uintptr_t)a->stack < (uintptr_t)b->stack ? -1 : 1;
    if (a->usable != b->usable)
        return a->usable < b->usable ? -1 : 1;
    if (a->rate != b->rate)
        return a->rate < b->rate ? -1 : 1;
    return strcmp(a->thread, b->thread);
}

static int address_cmp(const struct dump_entry *a, const struct dump_entry *b)
{
    return (uintptr_t)a->ptr < (uintptr_t)b->ptr ? -1 : (uintptr_t)a->ptr > (uintptr_t)b->ptr;
}

typedef int (*entry_cmp_fn)(const struct dump_entry *, const struct dump_entry *);

static void sift_down(struct dump_entry *e, size_t root, size_t n, entry_cmp_fn cmp)
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && cmp(&e[child], &e[child + 1]) < 0)
            child++;
        if (cmp(&e[root], &e[child]) >= 0)
            return;
        struct dump_entry t = e[root];
        e[root] = e[child];
        e[child] = t;
    }
}

static void sort_entries(struct dump_entry *e, size_t n, entry_cmp_fn cmp)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(e, i, n, cmp);
    for (size_t end = n; end-- > 1;) {
        struct dump_entry t = e[0];
        e[0] = e[end];
        e[end] = t;
        sift_down(e, 0, end, cmp);
    }
}

/* ---- what only sampled-on-own-pages allocation can know ---- */

bool dump_residency_available(void)
{
    struct residency_reader r;
    bool ok = residency_open(&r);
    residency_close(&r);
    return ok;
}

/* Fills each live entry's resident and swapped bytes (of the object itself,
 * on its own pages) and
 * the free bytes of its proxy's span in proportion to its share of the
 * span's live objects.  Entries are visited in address order so nearby
 * samples share pagemap reads.  Returns whether pagemap could be read. */
static bool measure(struct dump_entry *e, size_t n, struct residency_reader *r)
{
    bool residency = residency_open(r);
    sort_entries(e, n, address_cmp);
    for (size_t i = 0; i < n; i++) {
        if (!e[i].live)
            continue;
        size_t present, swapped, free_bytes;
        unsigned out;
        if (residency && residency_query(r, (uintptr_t)e[i].ptr, e[i].usable, &present, &swapped)) {
            e[i].resident = (double)present;
            e[i].swapped = (double)swapped;
        }
        if (e[i].proxy && central_span_usage(e[i].proxy, &free_bytes, &out) && out)
            e[i].frag = (double)free_bytes / out;
    }
    residency_close(r);
    return residency;
}

/* ---- snapshot with the accumulated groups appended ---- */

struct accum_fill {
    struct dump_entry *e;
    size_t n, cap;
};

static int add_accum(const struct stack_accum *g, struct prof_stack *st, void *arg)
{
    struct accum_fill *f = arg;
    if (f->n == f->cap)
        return 0;
    f->e[f->n++] = (struct dump_entry){.stack = st, .usable = g->usable, .rate = g->rate,
                                       .accum = g->count};
    return 1;
}

static int count_accum(const struct stack_accum *g, struct prof_stack *st, void *arg)
{
    (void)g, (void)st;
    ++*(size_t *)arg;
    return 1;
}

/* ---- writing ---- */

/* Unbiased sums: live objects and bytes (c, s), accumulated (ac, as), and
 * the live samples' resident, swapped and fragmentation bytes. */
struct sums {
    double c, s, ac, as, resident, swapped, frag;
};

static void add_unbiased(struct sums *t, const struct dump_entry *g, uint64_t live,
                         uint64_t accum)
{
    double z = (double)g->usable, p = p_sampled(z, (double)g->rate);
    t->c += live / p;
    t->s += live * z / p;
    t->ac += accum / p;
    t->as += accum * z / p;
    t->resident += g->resident / p;
    t->swapped += g->swapped / p;
    t->frag += g->frag / p;
}

/* Writes one record per (stack, Z, R) group of the sorted snapshot.  A
 * DUMP_LIVE record is followed by a comment line (readers skip it) with the
 * group's unbiased resident, swapped and fragmentation bytes; a
 * DUMP_FRAGMENTATION record carries the fragmentation bytes as its bytes. */
static void write_records(struct outbuf *o, const struct dump_entry *e, size_t n, uint64_t rate,
                          enum dump_kind kind, bool residency)
{
    for (size_t i = 0; i < n;) {
        struct sums u = {0, 0, 0, 0, 0, 0, 0};
        size_t j = i;
        uint64_t live = 0, accum = 0;
        for (; j < n && !entry_cmp(&e[i], &e[j]); j++) {
            live += e[j].live;
            accum += e[j].accum;
            add_unbiased(&u, &e[j], e[j].live, e[j].accum);
        }
        const struct dump_entry *g = &e[i];
        i = j;
        unsigned long long n1, s1, n2 = 0, s2 = 0;
        if (kind == DUMP_FRAGMENTATION) {
            transform(u.c, u.frag, (double)rate, &n1, &s1);
        } else if (g->rate == rate) {
            n1 = live, s1 = live * g->usable, n2 = accum, s2 = accum * g->usable;
        } else {
            transform(u.c, u.s, (double)rate, &n1, &s1);
            transform(u.ac, u.as, (double)rate, &n2, &s2);
        }
        if (!n1 && !n2)
            continue;
        outbuf_bytes(o, "@", 1);
        for (uint32_t k = 0; k < g->stack->depth; k++)
            outbuf_fmt(o, " %p", g->stack->frames[k]);
        outbuf_fmt(o, "\n  t*: %llu: %llu [%llu: %llu]\n", n1, s1, n2, s2);
        if (kind == DUMP_LIVE && live && residency)
            outbuf_fmt(o, "# salloc: resident %llu swapped %llu fragmentation %llu\n",
                    to_count(u.resident), to_count(u.swapped), to_count(u.frag));
    }
}

struct maps_out {
    struct outbuf *o;
    bool started; /* the section's heading is out */
};

static void write_maps_line(const char *line, size_t len, uintptr_t start, uintptr_t end,
                            void *arg)
{
    (void)start, (void)end;
    struct maps_out *m = arg;
    if (!m->started) {
        outbuf_bytes(m->o, "\nMAPPED_LIBRARIES:\n", 19);
        m->started = true;
    }
    outbuf_bytes(m->o, line, len);
    outbuf_bytes(m->o, "\n", 1);
}

/* /proc/self/maps, sorted and without overlaps (procmaps.h); if it cannot
 * be read, no section at all, its blank line included (the format's rule:
 * an empty one would say the process had no mappings). */
static void write_maps(struct outbuf *o)
{
    struct maps_out m = {o, false};
    procmaps_foreach(scratch.line, sizeof(scratch.line), write_maps_line, &m);
}

/* The body: header, totals, records, maps; into `o`. */
static void write_profile(struct outbuf *o, struct dump_entry *e, size_t n, uint64_t rate,
                          enum dump_kind kind, bool residency)
{
    sort_entries(e, n, entry_cmp);
    outbuf_fmt(o, "heap_v2/%llu\n", (unsigned long long)rate);
    /* The totals line (for humans; readers skip it) comes before the
     * records, so the sums take a first pass over the snapshot. */
    struct sums t = {0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++)
        add_unbiased(&t, &e[i], e[i].live, e[i].accum);
    unsigned long long n1, s1, n2 = 0, s2 = 0;
    if (kind == DUMP_FRAGMENTATION) {
        transform(t.c, t.frag, (double)rate, &n1, &s1);
    } else {
        transform(t.c, t.s, (double)rate, &n1, &s1);
        transform(t.ac, t.as, (double)rate, &n2, &s2);
    }
    outbuf_fmt(o, "  t*: %llu: %llu [%llu: %llu]\n", n1, s1, n2, s2);
    if (kind == DUMP_FRAGMENTATION)
        outbuf_fmt(o, "# salloc: fragmentation profile: bytes are the free span space each stack keeps alive\n");
    if (kind == DUMP_PEAK)
        outbuf_fmt(o, "# salloc: peak profile: the live samples at the last heap peak\n");
    if (kind != DUMP_PEAK && !residency)
        outbuf_fmt(o, "# salloc: residency unavailable (/proc/self/pagemap cannot be read)\n");
    write_records(o, e, n, rate, kind, residency);
    write_maps(o);
}

/* ---- profile.proto ---- */

static const struct pprof_value_type pprof_types[] = {
    {"alloc_objects", "count"}, {"alloc_space", "bytes"},     {"inuse_objects", "count"},
    {"inuse_space", "bytes"},   {"resident_space", "bytes"}, {"swapped_space", "bytes"},
    {"fragmentation_space", "bytes"},
};

static int64_t rounded(double x) { return x <= 0 ? 0 : x >= 9.2e18 ? INT64_MAX : (int64_t)(x + 0.5); }

/* One pprof Sample per (stack, Z, R) group of the sorted snapshot, values
 * unbiased (pprof never rescales).  A DUMP_FRAGMENTATION or DUMP_PEAK dump
 * has the same shape; its inuse values are what the kind shows. */
static size_t pprof_records(const struct dump_entry *e, size_t n, struct pprof_record *out)
{
    size_t nrec = 0;
    for (size_t i = 0; i < n;) {
        struct sums u = {0, 0, 0, 0, 0, 0, 0};
        size_t j = i;
        for (; j < n && !entry_cmp(&e[i], &e[j]); j++)
            add_unbiased(&u, &e[j], e[j].live, e[j].accum);
        const struct dump_entry *g = &e[i];
        i = j;
        if (u.c <= 0 && u.ac <= 0)
            continue;
        struct pprof_record *r = &out[nrec++];
        *r = (struct pprof_record){.frames = g->stack->frames, .depth = g->stack->depth,
                                   .usable = g->usable, .thread = g->thread};
        int64_t v[] = {rounded(u.ac), rounded(u.as), rounded(u.c), rounded(u.s),
                       rounded(u.resident), rounded(u.swapped), rounded(u.frag)};
        memcpy(r->values, v, sizeof(v));
    }
    return nrec;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Writes the snapshot as profile.proto to fd; false on failure. */
static bool write_pprof(int fd, struct dump_entry *e, size_t n, uint64_t rate, enum dump_kind kind,
                        bool residency, bool gzip)
{
    sort_entries(e, n, entry_cmp);
    enum { MAX_MAPPINGS = 512, MAP_TEXT = 128 << 10 };
    size_t rec_bytes = sa_align_up(n * sizeof(struct pprof_record) + 1, os_page_size());
    size_t map_bytes = sa_align_up(MAX_MAPPINGS * sizeof(struct pprof_mapping) + MAP_TEXT,
                                   os_page_size());
    struct pprof_record *recs = os_map(rec_bytes, os_page_size());
    struct pprof_mapping *maps = os_map(map_bytes, os_page_size());
    bool ok = recs && maps;
    if (ok) {
        size_t nmaps = pprof_read_mappings(maps, MAX_MAPPINGS, (char *)(maps + MAX_MAPPINGS),
                                           MAP_TEXT);
        const char *comments[2];
        size_t ncomments = 0;
        if (kind == DUMP_FRAGMENTATION)
            comments[ncomments++] = "salloc: fragmentation profile: inuse_space is the free span space each stack keeps alive";
        if (kind == DUMP_PEAK)
            comments[ncomments++] = "salloc: peak profile: the live samples at the last heap peak";
        if (kind == DUMP_LIVE && !residency)
            comments[ncomments++] = "salloc: residency unavailable (/proc/self/pagemap cannot be read)";
        if (kind == DUMP_FRAGMENTATION)
            for (size_t i = 0; i < n; i++)
                e[i].resident = e[i].swapped = 0;
        size_t nrec = pprof_records(e, n, recs);
        if (kind == DUMP_FRAGMENTATION)
            for (size_t i = 0; i < nrec; i++) {
                recs[i].values[3] = recs[i].values[6]; /* inuse_space = fragmentation */
                recs[i].values[0] = recs[i].values[1] = 0;
            }
        struct pprof_profile p = {
            .types = pprof_types, .ntypes = sizeof(pprof_types) / sizeof(pprof_types[0]),
            .default_type = "inuse_space", .records = recs, .nrecords = nrec,
            .mappings = maps, .nmappings = nmaps, .period = rate,
            .time_nanos = (int64_t)os_wall_ns(), .comments = comments, .ncomments = ncomments};
        ok = pprof_write(fd, &p, gzip) == 0;
    }
    if (recs)
        os_unmap(recs, rec_bytes);
    if (maps)
        os_unmap(maps, map_bytes);
    return ok;
}

/* The samples a dump of `kind` shows, in a buffer from os_map (*bytes long);
 * NULL if no buffer could be had. */
static struct dump_entry *collect(enum dump_kind kind, size_t *count, size_t *bytes)
{
    /* The buffer is sized from counts taken before the copy, with room for
     * `slack` more samples taken meanwhile (threads go on sampling while it
     * is mapped and faulted in).  A copy that fills it may have left some
     * out: it is taken again in a bigger one. */
    for (size_t slack = 1024;; slack *= 8) {
        size_t accum_groups = 0;
        if (kind == DUMP_LIVE)
            stack_accum_foreach(count_accum, &accum_groups);
        size_t cap = (kind == DUMP_PEAK ? prof_peak_count() : prof_live_upper_bound()) +
                     accum_groups + slack;
        *bytes = sa_align_up(cap * sizeof(struct dump_entry), os_page_size());
        struct dump_entry *e = os_map(*bytes, os_page_size());
        if (!e)
            return NULL;
        /* Fault the buffer in now, not page by page during the copy: other
         * threads wait for the shard lock the copy holds, and a page fault
         * there can wait in turn for the kernel's mmap lock (a concurrent
         * munmap).  With 23,000 samples this made the copy 40-65 ms. */
        for (size_t off = 0; off < *bytes; off += os_page_size())
            ((volatile char *)e)[off] = 0;
        size_t n = kind == DUMP_PEAK ? prof_peak_snapshot(e, cap) : prof_snapshot(e, cap);
        if (kind == DUMP_LIVE) {
            struct accum_fill fill = {e, n, cap};
            stack_accum_foreach(add_accum, &fill);
            n = fill.n;
        }
        if (n < cap) {
            *count = n;
            return e;
        }
        os_unmap(e, *bytes);
    }
}

/* The live totals of snapshot `e` (sorted here, by stack first). */
static void live_totals(struct dump_entry *e, size_t n, struct dump_totals *t)
{
    sort_entries(e, n, entry_cmp);
    *t = (struct dump_totals){.taken = true};
    const struct prof_stack *last = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!e[i].live)
            continue; /* an accumulated count alone */
        double z = (double)e[i].usable, p = p_sampled(z, (double)e[i].rate);
        t->objects += (double)e[i].live / p;
        t->bytes += (double)e[i].live * z / p;
        if (e[i].stack != last) { /* a stack's entries are next to each other */
            t->stacks++;
            last = e[i].stack;
        }
    }
}

/* The temporary file for a dump to `path`, in the same directory (so the
 * rename is atomic): <path>.tmp.<pid>, or a short name when the file
 * name would grow past NAME_MAX.  False if `path` is empty or too long. */
static bool temp_name(const char *path, char *tmp, size_t size)
{
    size_t plen = strlen(path);
    if (plen == 0 || plen + 32 >= size)
        return false;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    size_t n = sa_format(tmp, size, "%s.tmp.%d", path, (int)getpid());
    if (n - dir_len > NAME_MAX) /* path's directory part is already in tmp */
        sa_format(tmp + dir_len, size - dir_len, ".salloc-dump.%d.tmp", (int)getpid());
    return true;
}

int dump_write(const char *path, uint64_t rate, enum dump_kind kind, struct dump_totals *totals)
{
    if (totals)
        totals->taken = false;
    char *tmp = scratch.tmp;
    bool named = path && temp_name(path, tmp, sizeof(scratch.tmp));
    if (!named && !totals)
        return -1;
    size_t n, bytes;
    struct dump_entry *e = collect(kind, &n, &bytes);
    if (!e)
        return -1;
    if (totals)
        live_totals(e, n, totals);
    if (!named) {
        os_unmap(e, bytes);
        return -1;
    }
    bool residency = kind != DUMP_PEAK && measure(e, n, &scratch.reader);

    /* A new file of our own: never through a link someone planted at the
     * temporary name (a program that writes dumps where others can write,
     * or a stale one of ours, removed first), so a dump cannot write over
     * a file it was not asked to. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool failed = fd < 0;
    if (!failed) {
        if (ends_with(path, ".pb") || ends_with(path, ".pb.gz")) {
            failed = !write_pprof(fd, e, n, rate, kind, residency, ends_with(path, ".gz"));
        } else {
            struct outbuf o;
            outbuf_init(&o, out_buf, sizeof(out_buf), outbuf_fd_sink, &fd);
            write_profile(&o, e, n, rate, kind, residency);
            failed = !outbuf_flush(&o);
        }
        if (close(fd) != 0)
            failed = true;
        if (failed || rename(tmp, path) != 0) {
            unlink(tmp);
            failed = true;
        }
    }
    os_unmap(e, bytes);
    return failed ? -1 : 0;
}
