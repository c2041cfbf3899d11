/*
 * conf.c: option strings (see conf.h, spec/mallctl.md section 3).  The table
 * below is the one place that lists option names; each row says how its
 * value parses and where it goes.
 *
 * Owns opt_dirty_decay_ms, opt_abort_conf, opt_confirm_conf, opt_check,
 * opt_background_thread, opt_tcache, opt_tcache_max, opt_thp,
 * opt_stats_print(_opts), opt_zero_realloc, opt_junk and opt_zero; assigns
 * the profiling options of prof.h (prof.c defines them) before
 * prof_boot().
 * Runs during the one-time set-up, possibly before main(): never calls
 * malloc or stdio; diagnostics are whole lines written with write(2).
 */
#define _GNU_SOURCE /* secure_getenv */
#include "conf.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "pageheap.h"
#include "prof.h"
#include "tcache.h"
#include "util.h"

ssize_t opt_dirty_decay_ms = 10000;
bool opt_abort_conf = false;
bool opt_confirm_conf = false;
bool opt_check = false;
bool opt_background_thread = false;
bool opt_tcache = true;
size_t opt_tcache_max = SA_MAX_SMALL;
size_t opt_lg_tcache_max = 18;
_Static_assert(SA_MAX_SMALL == (size_t)1 << 18, "opt_lg_tcache_max is log2(opt_tcache_max)");
/* "default", as jemalloc's: the heap asks nothing of the kernel about huge
 * pages (pageheap.c, "transparent huge pages", says why not "auto"). */
char opt_thp[CONF_CHOICE_MAX] = "default";
bool opt_stats_print = false;
char opt_stats_print_opts[CONF_FLAGS_MAX] = "";
char opt_zero_realloc[CONF_CHOICE_MAX] = "free";
char opt_junk[CONF_CHOICE_MAX] = "false";
bool opt_zero = false;

/* The program may define `const char *malloc_conf = "...";` (jemalloc's
 * convention); weak, so it is NULL when it does not. */
extern const char *malloc_conf __attribute__((weak));

/* ---- messages: one line each, "<salloc>: " + parts, through write(2) ---- */

struct line {
    char buf[PROF_PREFIX_MAX + 128];
    size_t len;
};

static void put(struct line *l, const char *s, size_t n)
{
    if (n > sizeof(l->buf) - 1 - l->len)
        n = sizeof(l->buf) - 1 - l->len; /* keep room for the newline */
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts0(struct line *l, const char *s) { put(l, s, strlen(s)); }

static void emit(struct line *l)
{
    l->buf[l->len++] = '\n';
    for (const char *p = l->buf; l->len;) {
        ssize_t w = write(2, p, l->len);
        if (w <= 0)
            return;
        p += w;
        l->len -= (size_t)w;
    }
}

/* "<salloc>: <what><k>:<v>" */
static void report_pair(const char *what, const char *k, size_t klen, const char *v, size_t vlen)
{
    struct line l = {.len = 0};
    puts0(&l, "<salloc>: ");
    puts0(&l, what);
    put(&l, k, klen);
    put(&l, ":", 1);
    put(&l, v, vlen);
    emit(&l);
}

/* "<salloc>: Malformed conf string at "<rest>"" */
static void report_malformed(const char *rest)
{
    struct line l = {.len = 0};
    puts0(&l, "<salloc>: Malformed conf string at \"");
    puts0(&l, rest);
    put(&l, "\"", 1);
    emit(&l);
}

/* ---- values ---- */

enum verdict { V_OK, V_INVALID, V_RANGE };

static bool parse_bool(const char *v, size_t len, bool *out)
{
    if (len == 4 && !memcmp(v, "true", 4))
        *out = true;
    else if (len == 5 && !memcmp(v, "false", 5))
        *out = false;
    else
        return false;
    return true;
}

/* An integer in C syntax (strtoimax/strtoumax, base 0: 10, 0x10, 010),
 * the whole value consumed.  White space is part of the value, so it is
 * invalid; so is a sign on an unsigned option. */
static enum verdict parse_int(const char *v, size_t len, bool is_signed, intmax_t *s, uintmax_t *u)
{
    char buf[64];
    if (len == 0 || len >= sizeof(buf))
        return V_INVALID;
    memcpy(buf, v, len);
    buf[len] = '\0';
    bool neg = buf[0] == '-';
    if (!(buf[neg] >= '0' && buf[neg] <= '9') || (neg && !is_signed))
        return V_INVALID;
    char *end;
    int saved = errno;
    errno = 0;
    if (is_signed)
        *s = strtoimax(buf, &end, 0);
    else
        *u = strtoumax(buf, &end, 0);
    bool ok = errno == 0 && *end == '\0';
    errno = saved;
    return ok ? V_OK : V_INVALID;
}

enum kind {
    K_BOOL,      /* true/false into a bool */
    K_TRUE,      /* a bool salloc cannot turn off: false is out of range */
    K_UNSIGNED,  /* lo..hi, else out of range */
    K_CLIP,      /* unsigned, values above hi clipped to hi */
    K_SIGNED,    /* lo..hi, else out of range */
    K_STRING,    /* copied into a PROF_PREFIX_MAX array; longer is out of range */
    K_CHOICE,    /* one of `choices`, copied into a CONF_CHOICE_MAX array */
    K_FLAGS,     /* letters of choices[0], each kept once, into a CONF_FLAGS_MAX array */
};
_Static_assert(PROF_CHOICE_MAX == CONF_CHOICE_MAX, "K_CHOICE copies into arrays of one size");

struct option {
    const char *name;
    enum kind kind;
    void *var;                 /* NULL: accepted and checked, then ignored */
    intmax_t lo, hi;
    void (*then)(intmax_t);    /* called with an accepted integer value */
    const char *const *choices; /* K_CHOICE: the accepted values, NULL-ended */
};

static const char *const formats[] = {"heap", "pb", "pb.gz", NULL};
static const char *const unwinders[] = {"fast", "libgcc", "check", NULL};
static const char *const thp_modes[] = {"auto", "always", "never", "default", NULL};
static const char *const zero_realloc_modes[] = {"free", "alloc", "abort", NULL};
static const char *const junk_modes[] = {"true", "false", "alloc", "free", NULL};
static const char *const metadata_thp_modes[] = {"disabled", "auto", "always", NULL};
static const char *const percpu_arena_modes[] = {"disabled", "percpu", "phycpu", NULL};
/* malloc_stats_print's letters (jemalloc's; salloc has nothing of its own
 * to leave out for m, d, l, x, e and h). */
static const char *const stats_letters[] = {"Jgmdablxeh", NULL};
_Static_assert(sizeof("Jgmdablxeh") <= CONF_FLAGS_MAX, "every letter once fits");

static void set_decay(intmax_t ms) { pageheap_set_decay_ms((long)ms); }
static void set_tcache_max(intmax_t bytes)
{
    opt_lg_tcache_max = bytes > 1 ? (size_t)(63 - __builtin_clzll((unsigned long long)bytes)) : 0;
    tcache_set_max_size((size_t)bytes);
}
static void set_lg_tcache_max(intmax_t lg)
{
    opt_tcache_max = (size_t)1 << lg;
    set_tcache_max((intmax_t)opt_tcache_max);
}

/* Sorted by name.  The bounds of dirty_decay_ms keep ms * 1e6 (ns) in a
 * long; lg_prof_sample's 62 is prof.h's; narenas, percpu_arena,
 * oversize_threshold, muzzy_decay_ms and metadata_thp are accepted for
 * jemalloc's sake and ignored (one arena, so none per CPU and none for
 * oversize requests; no muzzy pages; metadata is never advised huge);
 * oversize_threshold clips at PTRDIFF_MAX, about jemalloc's largest size;
 * max_background_threads is clipped to the one thread salloc runs, as
 * jemalloc clips it to its limit (0 is out of range there too).
 * tcache_max and lg_tcache_max clip at jemalloc's limit (8 MiB, 2^23), as
 * jemalloc does; salloc caches at most its small classes whatever they say. */
static const struct option options[] = {
    {"abort", K_BOOL, &opt_abort, 0, 0, NULL, NULL},
    {"abort_conf", K_BOOL, &opt_abort_conf, 0, 0, NULL, NULL},
    {"background_thread", K_BOOL, &opt_background_thread, 0, 0, NULL, NULL},
    {"check", K_BOOL, &opt_check, 0, 0, NULL, NULL},
    {"confirm_conf", K_BOOL, &opt_confirm_conf, 0, 0, NULL, NULL},
    {"dirty_decay_ms", K_SIGNED, &opt_dirty_decay_ms, -1, LONG_MAX / 1000000, set_decay, NULL},
    {"junk", K_CHOICE, opt_junk, 0, 0, NULL, junk_modes},
    {"lg_prof_guard_every", K_SIGNED, &opt_lg_prof_guard_every, -1, 63, NULL, NULL},
    {"lg_prof_interval", K_SIGNED, &opt_lg_prof_interval, -1, 63, NULL, NULL},
    {"lg_prof_sample", K_CLIP, &opt_lg_prof_sample, 0, 62, NULL, NULL},
    {"lg_tcache_max", K_CLIP, NULL, 0, 23, set_lg_tcache_max, NULL},
    {"max_background_threads", K_CLIP, NULL, 1, 1, NULL, NULL},
    {"metadata_thp", K_CHOICE, NULL, 0, 0, NULL, metadata_thp_modes},
    {"muzzy_decay_ms", K_SIGNED, NULL, -1, SSIZE_MAX, NULL, NULL},
    {"narenas", K_UNSIGNED, NULL, 1, UINT_MAX, NULL, NULL},
    {"oversize_threshold", K_CLIP, NULL, 0, PTRDIFF_MAX, NULL, NULL},
    {"percpu_arena", K_CHOICE, NULL, 0, 0, NULL, percpu_arena_modes},
    {"prof", K_BOOL, &opt_prof, 0, 0, NULL, NULL},
    {"prof_accum", K_BOOL, &opt_prof_accum, 0, 0, NULL, NULL},
    {"prof_active", K_BOOL, &opt_prof_active, 0, 0, NULL, NULL},
    {"prof_final", K_BOOL, &opt_prof_final, 0, 0, NULL, NULL},
    {"prof_final_peak", K_BOOL, &opt_prof_final_peak, 0, 0, NULL, NULL},
    {"prof_format", K_CHOICE, opt_prof_format, 0, 0, NULL, formats},
    {"prof_gdump", K_BOOL, &opt_prof_gdump, 0, 0, NULL, NULL},
    {"prof_guard", K_BOOL, &opt_prof_guard, 0, 0, NULL, NULL},
    {"prof_leak", K_BOOL, &opt_prof_leak, 0, 0, NULL, NULL},
    {"prof_leak_error", K_BOOL, &opt_prof_leak_error, 0, 0, NULL, NULL},
    {"prof_peak_pct", K_UNSIGNED, &opt_prof_peak_pct, 1, 1000, NULL, NULL},
    {"prof_prefix", K_STRING, opt_prof_prefix, 0, 0, NULL, NULL},
    {"prof_recent_alloc_max", K_SIGNED, &opt_prof_recent_alloc_max, -1, SSIZE_MAX, NULL, NULL},
    {"prof_sys_thread_name", K_BOOL, &opt_prof_sys_thread_name, 0, 0, NULL, NULL},
    {"prof_thread_active_init", K_BOOL, &opt_prof_thread_active_init, 0, 0, NULL, NULL},
    {"prof_unwind", K_CHOICE, opt_prof_unwind, 0, 0, NULL, unwinders},
    {"retain", K_TRUE, NULL, 0, 0, NULL, NULL},
    {"stats_print", K_BOOL, &opt_stats_print, 0, 0, NULL, NULL},
    {"stats_print_opts", K_FLAGS, opt_stats_print_opts, 0, 0, NULL, stats_letters},
    {"tcache", K_BOOL, &opt_tcache, 0, 0, NULL, NULL},
    {"tcache_max", K_CLIP, &opt_tcache_max, 0, (intmax_t)8 << 20, set_tcache_max, NULL},
    {"thp", K_CHOICE, opt_thp, 0, 0, NULL, thp_modes},
    {"zero", K_BOOL, &opt_zero, 0, 0, NULL, NULL},
    {"zero_realloc", K_CHOICE, opt_zero_realloc, 0, 0, NULL, zero_realloc_modes},
};

static enum verdict set_option(const struct option *o, const char *v, size_t len)
{
    bool b;
    intmax_t s = 0;
    uintmax_t u = 0;
    enum verdict r;
    switch (o->kind) {
    case K_BOOL:
    case K_TRUE:
        if (!parse_bool(v, len, &b))
            return V_INVALID;
        if (o->kind == K_TRUE)
            return b ? V_OK : V_RANGE;
        *(bool *)o->var = b;
        return V_OK;
    case K_STRING:
        if (len > PROF_PREFIX_MAX - 1) /* cut, it would name another path */
            return V_RANGE;
        memcpy(o->var, v, len);
        ((char *)o->var)[len] = '\0';
        return V_OK;
    case K_CHOICE:
        for (const char *const *c = o->choices; *c; c++)
            if (strlen(*c) == len && !memcmp(*c, v, len)) {
                if (o->var) {
                    memcpy(o->var, v, len);
                    ((char *)o->var)[len] = '\0';
                }
                return V_OK;
            }
        return V_INVALID;
    case K_FLAGS: {
        char kept[CONF_FLAGS_MAX];
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            if (!memchr(o->choices[0], v[i], strlen(o->choices[0])))
                return V_INVALID; /* the option keeps its value */
            if (!memchr(kept, v[i], n))
                kept[n++] = v[i];
        }
        memcpy(o->var, kept, n);
        ((char *)o->var)[n] = '\0';
        return V_OK;
    }
    case K_UNSIGNED:
    case K_CLIP:
        if ((r = parse_int(v, len, false, NULL, &u)) != V_OK)
            return r;
        if (o->kind == K_CLIP && u > (uintmax_t)o->hi)
            u = (uintmax_t)o->hi;
        if (u < (uintmax_t)o->lo || u > (uintmax_t)o->hi)
            return V_RANGE;
        if (o->var)
            *(size_t *)o->var = (size_t)u; /* every unsigned option kept is a size_t */
        if (o->then)
            o->then((intmax_t)u);
        return V_OK;
    case K_SIGNED:
        if ((r = parse_int(v, len, true, &s, NULL)) != V_OK)
            return r;
        if (s < o->lo || s > o->hi)
            return V_RANGE;
        if (o->var)
            *(ssize_t *)o->var = (ssize_t)s;
        if (o->then)
            o->then(s);
        return V_OK;
    }
    return V_INVALID;
}

/* Applies one pair; reports it as jemalloc would.  `only_confirm`: the quiet
 * first pass that looks for confirm_conf alone. */
static int apply_pair(const char *k, size_t klen, const char *v, size_t vlen, bool only_confirm)
{
    const struct option *o = NULL;
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]) && !o; i++)
        if (strlen(options[i].name) == klen && !memcmp(options[i].name, k, klen))
            o = &options[i];
    if (only_confirm) {
        if (o && o->var == &opt_confirm_conf)
            set_option(o, v, vlen);
        return 0;
    }
    if (!o) {
        report_pair("Invalid conf pair: ", k, klen, v, vlen);
        return 1;
    }
    switch (set_option(o, v, vlen)) {
    case V_OK:
        if (opt_confirm_conf)
            report_pair("-- Set conf value: ", k, klen, v, vlen);
        return 0;
    case V_RANGE:
        report_pair("Out-of-range conf value: ", k, klen, v, vlen);
        return 1;
    default:
        report_pair("Invalid conf value: ", k, klen, v, vlen);
        return 1;
    }
}

static bool key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* options = [pair *("," pair)], pair = key ":" value.  A syntax error (a
 * key character outside [A-Za-z0-9_], a key without ':', an empty key, a
 * trailing comma) is reported once and ends this source. */
static int parse(const char *opts, bool only_confirm)
{
    int bad = 0;
    for (const char *p = opts; p && *p;) {
        const char *key = p;
        while (key_char(*p))
            p++;
        size_t klen = (size_t)(p - key);
        if (*p != ':' || klen == 0) {
            if (!only_confirm)
                report_malformed(key);
            return bad + 1;
        }
        const char *val = ++p;
        /* Not strcspn(): its libc variant lies in a 64 KiB of libc's code
         * that nothing else a program commonly runs maps, and one call
         * mapped all of it (40 KiB more resident than without MALLOC_CONF). */
        size_t vlen = 0;
        while (val[vlen] && val[vlen] != ',')
            vlen++;
        bad += apply_pair(key, klen, val, vlen, only_confirm);
        p = val + vlen;
        if (*p == ',' && *++p == '\0') {
            if (!only_confirm)
                report_malformed(p);
            return bad + 1;
        }
    }
    return bad;
}

int conf_apply(const char *opts, const char *source)
{
    (void)source;
    return parse(opts, false);
}

/* prof_leak_error sets prof_leak, as in jemalloc; both report at the
 * final dump, so without prof_final they would do nothing: said once, as
 * jemalloc says it of prof_leak_error (a bad option for abort_conf). */
static int check_leak_options(void)
{
    if (opt_prof_leak_error)
        opt_prof_leak = true;
    if (!opt_prof_leak || opt_prof_final)
        return 0;
    struct line l = {.len = 0};
    puts0(&l, opt_prof_leak_error ? "<salloc>: prof_leak_error is set w/o prof_final."
                                  : "<salloc>: prof_leak is set w/o prof_final.");
    emit(&l);
    return 1;
}

void conf_init(void)
{
    const char *names[3] = {"malloc_conf", "MALLOC_CONF", "SALLOC_CONF"};
    /* As glibc ignores its MALLOC_ variables in a set-user-ID or
     * set-group-ID program (secure execution, AT_SECURE), and jemalloc its
     * MALLOC_CONF: whoever runs such a program would otherwise choose where
     * it writes its heap profiles (prof_prefix, prof_final), with its
     * rights. */
    const char *srcs[3] = {&malloc_conf ? malloc_conf : NULL, secure_getenv("MALLOC_CONF"),
                           secure_getenv("SALLOC_CONF")};
    /* confirm_conf applies to every source, so look for it first. */
    for (int i = 0; i < 3; i++)
        parse(srcs[i], true);
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        if (!srcs[i])
            continue;
        if (opt_confirm_conf) {
            char n[2] = {(char)('1' + i), '\0'};
            struct line l = {.len = 0};
            puts0(&l, "<salloc>: malloc_conf #");
            puts0(&l, n);
            puts0(&l, " (");
            puts0(&l, names[i]);
            puts0(&l, "): \"");
            puts0(&l, srcs[i]);
            put(&l, "\"", 1);
            emit(&l);
        }
        bad += conf_apply(srcs[i], names[i]);
    }
    bad += check_leak_options();
    if (bad && opt_abort_conf) {
        struct line l = {.len = 0};
        puts0(&l, "<salloc>: Abort (abort_conf:true) on invalid conf value (see above).");
        emit(&l);
        abort();
    }
}
