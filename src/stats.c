/*
 * stats.c: malloc_stats_print(), the human-readable and JSON statistics
 * report (spec/mallctl.md section 4).
 *
 * Reads everything through mallctl(), never through salloc's internals, so
 * the report shows exactly what a program can ask for.  Text and JSON come
 * from one walk: each item is emitted once and the emitter formats it for
 * the chosen mode.  Output goes through a fixed buffer on the stack to the
 * caller's write_cb (NUL-terminated chunks) or to fd 2.
 *
 * Must never: call malloc, use stdio, set errno.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "../include/salloc.h"
#include "conf.h"
#include "ctl.h"
#include "log.h"
#include "util.h"

/* ---- the emitter ---- */

struct emitter {
    bool json;
    struct outbuf_writer writer; /* the caller's write_cb, or fd 2 */
    int depth;            /* JSON nesting, for indentation */
    bool first;           /* JSON: no comma before the next member */
    struct outbuf out;    /* chunks to write_cb, or to fd 2 */
    char buf[4096];
};


static void out(struct emitter *e, const char *s, size_t n) { outbuf_bytes(&e->out, s, n); }
static void outs(struct emitter *e, const char *s) { outbuf_str(&e->out, s); }
#define outf(e, ...) outbuf_fmt(&(e)->out, __VA_ARGS__)
static void flush(struct emitter *e) { outbuf_flush(&e->out); }

static void indent(struct emitter *e)
{
    for (int i = 0; i < e->depth; i++)
        outs(e, "  ");
}

/* JSON: the comma and newline before a member, and its key. */
static void json_key(struct emitter *e, const char *key)
{
    outs(e, e->first ? "\n" : ",\n");
    e->first = false;
    indent(e);
    if (key)
        outf(e, "\"%s\": ", key);
}

/* JSON string with the characters JSON needs escaped. */
static void json_str(struct emitter *e, const char *s)
{
    outs(e, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            outf(e, "\\%c", c);
        else if (c < 0x20)
            outf(e, "\\u00%c%c", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
        else
            out(e, (const char *)&c, 1);
    }
    outs(e, "\"");
}

/* An object: "key": { in JSON, a heading line in text (NULL: none). */
static void obj_begin(struct emitter *e, const char *key, const char *heading)
{
    if (e->json) {
        json_key(e, key);
        outs(e, "{");
        e->depth++;
        e->first = true;
    } else if (heading) {
        outf(e, "%s\n", heading);
    }
}

static void obj_end(struct emitter *e)
{
    if (!e->json)
        return;
    e->depth--;
    outs(e, "\n");
    indent(e);
    outs(e, "}");
    e->first = false;
}

static void arr_begin(struct emitter *e, const char *key)
{
    if (e->json) {
        json_key(e, key);
        outs(e, "[");
        e->depth++;
        e->first = true;
    }
}

static void arr_end(struct emitter *e)
{
    if (!e->json)
        return;
    e->depth--;
    outs(e, "\n");
    indent(e);
    outs(e, "]");
    e->first = false;
}

/* ---- items, each read with mallctl ---- */

enum vtype { V_BOOL, V_UNSIGNED, V_SIZE, V_SSIZE, V_UINT64, V_STR };

/* A value read with mallctl; false if the name is not there. */
struct value {
    enum vtype t;
    union {
        bool b;
        unsigned u;
        size_t z;
        ssize_t zd;
        uint64_t u64;
        const char *s;
    } v;
};

static bool read_value(const char *name, enum vtype t, struct value *val)
{
    static const size_t sizes[] = {sizeof(bool), sizeof(unsigned), sizeof(size_t),
                                   sizeof(ssize_t), sizeof(uint64_t), sizeof(const char *)};
    size_t len = sizes[t];
    val->t = t;
    memset(&val->v, 0, sizeof(val->v));
    return mallctl(name, &val->v, &len, NULL, 0) == 0;
}

static void put_value(struct emitter *e, const struct value *val)
{
    switch (val->t) {
    case V_BOOL: outs(e, val->v.b ? "true" : "false"); break;
    case V_UNSIGNED: outf(e, "%u", val->v.u); break;
    case V_SIZE: outf(e, "%zu", val->v.z); break;
    case V_SSIZE: outf(e, "%zd", val->v.zd); break;
    case V_UINT64: outf(e, "%llu", (unsigned long long)val->v.u64); break;
    case V_STR:
        if (e->json) {
            json_str(e, val->v.s);
        } else { /* whole: a formatted line stops at 512 bytes (a long prof_prefix) */
            outs(e, "\"");
            outs(e, val->v.s ? val->v.s : "");
            outs(e, "\"");
        }
        break;
    }
}

/* `name` read and shown as "  name: value" (text) or "key": value (JSON,
 * key = the last component of name).  Missing names are skipped. */
static void item(struct emitter *e, const char *name, enum vtype t)
{
    struct value val;
    if (!read_value(name, t, &val))
        return;
    if (e->json) {
        const char *dot = strrchr(name, '.');
        json_key(e, dot ? dot + 1 : name);
    } else {
        outf(e, "  %s: ", name);
    }
    put_value(e, &val);
    if (!e->json)
        outs(e, "\n");
}

static size_t read_size(const char *name)
{
    struct value val;
    return read_value(name, V_SIZE, &val) ? val.v.z : 0;
}

/* ---- the report ---- */

static void general(struct emitter *e)
{
    struct value version;
    if (read_value("version", V_STR, &version)) {
        if (e->json) {
            json_key(e, "version");
            put_value(e, &version);
        } else {
            outs(e, "Version: ");
            put_value(e, &version);
            outs(e, "\n");
        }
    }
    static const char *const config[] = {
        "config.cache_oblivious", "config.debug", "config.fill", "config.lazy_lock",
        "config.opt_safety_checks", "config.prof", "config.prof_libgcc",
        "config.prof_libunwind", "config.stats", "config.utrace", "config.xmalloc",
    };
    obj_begin(e, "config", "Build-time option settings");
    item(e, "config.malloc_conf", V_STR);
    for (size_t i = 0; i < sizeof(config) / sizeof(config[0]); i++)
        item(e, config[i], V_BOOL);
    obj_end(e);

    /* Every opt.* leaf, in jemalloc's order and then salloc's own
     * (test_ctl checks each option of salloc(3) is here). */
    static const struct { const char *name; enum vtype t; } opts[] = {
        {"opt.abort", V_BOOL}, {"opt.abort_conf", V_BOOL}, {"opt.confirm_conf", V_BOOL},
        {"opt.retain", V_BOOL}, {"opt.narenas", V_UNSIGNED}, {"opt.percpu_arena", V_STR},
        {"opt.oversize_threshold", V_SIZE}, {"opt.metadata_thp", V_STR},
        {"opt.background_thread", V_BOOL}, {"opt.max_background_threads", V_SIZE},
        {"opt.dirty_decay_ms", V_SSIZE}, {"opt.muzzy_decay_ms", V_SSIZE},
        {"opt.junk", V_STR}, {"opt.zero", V_BOOL}, {"opt.tcache", V_BOOL},
        {"opt.tcache_max", V_SIZE}, {"opt.lg_tcache_max", V_SIZE}, {"opt.thp", V_STR},
        {"opt.prof", V_BOOL}, {"opt.prof_prefix", V_STR}, {"opt.prof_active", V_BOOL},
        {"opt.prof_thread_active_init", V_BOOL}, {"opt.lg_prof_sample", V_SIZE},
        {"opt.prof_accum", V_BOOL}, {"opt.lg_prof_interval", V_SSIZE},
        {"opt.prof_gdump", V_BOOL}, {"opt.prof_final", V_BOOL},
        {"opt.prof_leak", V_BOOL}, {"opt.prof_leak_error", V_BOOL},
        {"opt.prof_recent_alloc_max", V_SSIZE}, {"opt.prof_sys_thread_name", V_BOOL},
        {"opt.stats_print", V_BOOL}, {"opt.stats_print_opts", V_STR},
        {"opt.zero_realloc", V_STR},
        {"opt.check", V_BOOL}, {"opt.prof_format", V_STR}, {"opt.prof_unwind", V_STR},
        {"opt.prof_final_peak", V_BOOL}, {"opt.prof_peak_pct", V_SIZE},
        {"opt.prof_guard", V_BOOL}, {"opt.lg_prof_guard_every", V_SSIZE},
    };
    obj_begin(e, "opt", "Run-time option settings");
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        item(e, opts[i].name, opts[i].t);
    obj_end(e);

    obj_begin(e, "prof", "Profiling settings");
    item(e, "prof.active", V_BOOL);
    item(e, "prof.thread_active_init", V_BOOL);
    item(e, "prof.gdump", V_BOOL);
    item(e, "prof.interval", V_UINT64);
    item(e, "prof.lg_sample", V_SIZE);
    item(e, "prof.sample_count", V_SIZE);
    obj_end(e);

    obj_begin(e, "arenas", "Arenas");
    item(e, "arenas.narenas", V_UNSIGNED);
    item(e, "arenas.quantum", V_SIZE);
    item(e, "arenas.page", V_SIZE);
    item(e, "arenas.nbins", V_UNSIGNED);
    item(e, "arenas.dirty_decay_ms", V_SSIZE);
    obj_end(e);
}

/* The summary line, with jemalloc's field names and order. */
static void summary(struct emitter *e)
{
    static const char *const names[] = {"allocated", "active", "metadata",
                                        "resident", "mapped", "retained"};
    size_t v[6];
    char name[32];
    for (int i = 0; i < 6; i++) {
        sa_format(name, sizeof(name), "stats.%s", names[i]);
        v[i] = read_size(name);
    }
    if (e->json) {
        obj_begin(e, "stats", NULL);
        for (int i = 0; i < 6; i++) {
            json_key(e, names[i]);
            outf(e, "%zu", v[i]);
        }
        obj_end(e);
        return;
    }
    outf(e, "Allocated: %zu, active: %zu, metadata: %zu (n_thp 0), ", v[0], v[1], v[2]);
    outf(e, "resident: %zu, mapped: %zu, retained: %zu\n", v[3], v[4], v[5]);
}

/* arenas[0]: page counts and, unless 'b', one row per size class.  The
 * class figures go through mallctlbymib, translated once. */
static void arena(struct emitter *e, bool bins)
{
    obj_begin(e, "stats.arenas", NULL);
    obj_begin(e, "0", "arenas[0]:");
    item(e, "stats.arenas.0.nthreads", V_UNSIGNED);
    item(e, "stats.arenas.0.uptime", V_UINT64);
    item(e, "stats.arenas.0.dirty_decay_ms", V_SSIZE);
    item(e, "stats.arenas.0.pactive", V_SIZE);
    item(e, "stats.arenas.0.pdirty", V_SIZE);
    item(e, "stats.arenas.0.dirty_purged", V_UINT64);
    item(e, "stats.arenas.0.dirty_nmadvise", V_UINT64);
    /* JSON: "small": {"allocated": n} and "large": {...}, as jemalloc
     * nests them; keyed by the last component alone, both were
     * "allocated" in one object, and a reader kept only the large one. */
    obj_begin(e, "small", NULL);
    item(e, "stats.arenas.0.small.allocated", V_SIZE);
    item(e, "stats.arenas.0.small.nmalloc", V_UINT64);
    item(e, "stats.arenas.0.small.ndalloc", V_UINT64);
    item(e, "stats.arenas.0.small.nfills", V_UINT64);
    item(e, "stats.arenas.0.small.nflushes", V_UINT64);
    obj_end(e);
    obj_begin(e, "large", NULL);
    item(e, "stats.arenas.0.large.allocated", V_SIZE);
    item(e, "stats.arenas.0.large.nmalloc", V_UINT64);
    item(e, "stats.arenas.0.large.ndalloc", V_UINT64);
    obj_end(e);
    item(e, "stats.arenas.0.tcache_bytes", V_SIZE);
    unsigned nbins = 0;
    size_t len = sizeof(nbins);
    /* A row per class: its shape (arenas.bin.<j>.*), then its counts
     * (stats.arenas.0.bins.<j>.*), each leaf translated to a MIB once. */
    static const struct {
        const char *name, *key;
        enum vtype type;
        size_t at; /* the class's index in the MIB */
    } cols[] = {
        {"arenas.bin.0.size", "size", V_SIZE, 2},
        {"arenas.bin.0.nregs", "nregs", V_UNSIGNED, 2},
        {"arenas.bin.0.slab_size", "slab_size", V_SIZE, 2},
        {"stats.arenas.0.bins.0.curslabs", "curslabs", V_SIZE, 4},
        {"stats.arenas.0.bins.0.curregs", "curregs", V_SIZE, 4},
        {"stats.arenas.0.bins.0.nmalloc", "nmalloc", V_UINT64, 4},
        {"stats.arenas.0.bins.0.ndalloc", "ndalloc", V_UINT64, 4},
        {"stats.arenas.0.bins.0.nslabs", "nslabs", V_UINT64, 4},
        {"stats.arenas.0.bins.0.nfills", "nfills", V_UINT64, 4},
        {"stats.arenas.0.bins.0.nflushes", "nflushes", V_UINT64, 4},
        {"stats.arenas.0.bins.0.nonfull_slabs", "nonfull_slabs", V_SIZE, 4},
    };
    enum { NCOLS = sizeof(cols) / sizeof(cols[0]) };
    size_t mib[NCOLS][6], miblen[NCOLS];
    bool ok = bins && mallctl("arenas.nbins", &nbins, &len, NULL, 0) == 0;
    for (unsigned c = 0; ok && c < NCOLS; c++) {
        miblen[c] = 6;
        ok = mallctlnametomib(cols[c].name, mib[c], &miblen[c]) == 0;
    }
    if (ok) {
        arr_begin(e, "bins");
        if (!e->json) {
            outs(e, "bins:");
            for (unsigned c = 0; c < NCOLS; c++)
                outf(e, " %s", cols[c].key);
            outs(e, "\n");
        }
        for (unsigned i = 0; i < nbins; i++) {
            if (e->json) {
                json_key(e, NULL);
                outs(e, "{");
            } else {
                outs(e, " ");
            }
            for (unsigned c = 0; c < NCOLS; c++) {
                /* nregs is a uint32_t; every other column a size_t or a
                 * uint64_t, one word on the platforms salloc builds for. */
                uint64_t word = 0;
                uint32_t u32 = 0;
                size_t wl = cols[c].type == V_UNSIGNED ? sizeof(u32) : sizeof(word);
                mib[c][cols[c].at] = i;
                mallctlbymib(mib[c], miblen[c], cols[c].type == V_UNSIGNED ? (void *)&u32 : (void *)&word,
                             &wl, NULL, 0);
                unsigned long long v = cols[c].type == V_UNSIGNED ? u32 : word;
                if (e->json)
                    outf(e, "%s\"%s\": %llu", c ? ", " : "", cols[c].key, v);
                else
                    outf(e, " %llu", v);
            }
            outs(e, e->json ? "}" : "\n");
        }
        arr_end(e);
    }
    obj_end(e);
    obj_end(e);
}

SA_EXPORT void malloc_stats_print(void (*write_cb)(void *, const char *), void *cbopaque,
                                  const char *opts)
{
    int saved = errno;
    struct emitter e = {.writer = {write_cb, cbopaque}, .first = true};
    outbuf_init(&e.out, e.buf, sizeof(e.buf), outbuf_writer_sink, &e.writer);
    bool show_general = true, show_arena = true, show_bins = true;
    for (const char *o = opts; o && *o; o++) {
        switch (*o) {
        case 'J': e.json = true; break;
        case 'g': show_general = false; break;
        case 'a': show_arena = false; break;
        case 'b': show_bins = false; break;
        default: break; /* m d l x e h: nothing of theirs is printed; others ignored */
        }
    }
    uint64_t epoch = 1;
    mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)); /* refresh stats.* */

    if (e.json) {
        outs(&e, "{");
        obj_begin(&e, "salloc", NULL);
    } else {
        outs(&e, "___ Begin salloc statistics ___\n");
    }
    if (show_general)
        general(&e);
    summary(&e);
    if (show_arena)
        arena(&e, show_bins);
    if (e.json) {
        obj_end(&e);
        outs(&e, "\n}\n");
    } else {
        outs(&e, "--- End salloc statistics ---\n");
    }
    flush(&e);
    errno = saved;
}

void stats_print_at_exit(void) { malloc_stats_print(NULL, NULL, opt_stats_print_opts); }
