/*
 * fuzz_mallctl.c: mallctl(), mallctlnametomib(), mallctlbymib() and
 * malloc_stats_print() (src/ctl.c, src/stats.c) with fuzzed names and
 * fuzzed, well-typed values.
 *
 * An input is a sequence of up to 32 calls; each is
 *
 *   mode oldlen newlen aux  name NUL  [index slots] [value]
 *
 *   mode bits 0-2  which call: 0 and 4-7 mallctl(name); 1 mallctlnametomib
 *                  (name) into a MIB of aux&15 slots, then mallctlbymib with
 *                  it (aux&0x10: its integer slots overwritten by 8-byte
 *                  indices from the input; aux&0x20: one slot short, an
 *                  inner node); 2 mallctlbymib with aux&15 raw 8-byte slots
 *                  from the input, read-only; 3 malloc_stats_print(name as
 *                  its opts)
 *        bit 3     oldp: a buffer of exactly oldlen&31 bytes (ASan checks
 *                  every byte mallctl touches)
 *        bit 4     oldlenp: &len, len = oldlen&31
 *        bit 5     newp: a buffer of exactly newlen&31 bytes holding the value
 *        bit 6     string leaves: write a NULL string instead
 *        bit 7     after the call, allocate 8<<(aux>>4) + (aux&15) bytes with
 *                  salloc's own malloc (kept in a ring of 16, so sampling,
 *                  dumps and statistics see live blocks)
 *
 * Values are well typed, as a correct caller's would be: a write of 1 byte
 * (only bool leaves have that size) is 0 or 1; a string leaf (strings[]
 * below) gets a pointer to a NUL-terminated string read from the input up
 * to its NUL, never raw input bytes as a pointer.  Paths (prof.dump,
 * prof.dump_fragmentation, prof.dump_peak, prof.prefix) are moved into the
 * target's temporary directory ('/' becomes '_'), which is the prefix of
 * every automatic dump too and is emptied after each input.  A function
 * leaf (experimental.hooks.*) gets one of the functions below, salloc's own
 * walker, or NULL, chosen by an input byte: never raw bytes either.  A new
 * string or function leaf in src/ctl.c's table must be added to strings[]
 * (test/fuzz/check_string_leaves.sh checks).
 *
 * Checked on every call: the return code is one mallctl may return, errno
 * is untouched, *oldlenp never grows past the buffer, a string read points
 * at a terminated string.  After each input the run-time switches are put
 * back (reset_state), so inputs stay independent.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <unistd.h> /* access */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "salloc.h"

#include "ctl.h"

#include "fuzz_util.h"

/* salloc's own allocation calls, built under these names (the Makefile's
 * FUZZ_RENAME): this process's malloc is ASan's. */
void *sa_fuzz_malloc(size_t size);
void sa_fuzz_free(void *p);

#define LG_SAMPLE 12 /* sample about one allocation per 4 KiB */

enum { S_READ = 1, S_WRITE = 2, S_PATH = 4, S_FN = 8, S_WRITER = 16 };
static const struct {
    const char *name;
    unsigned how;
} strings[] = {
    {"config.malloc_conf", S_READ},
    {"experimental.hooks.prof_backtrace", S_FN},
    {"experimental.hooks.prof_dump", S_FN},
    {"experimental.prof_recent.alloc_dump", S_WRITER},
    {"opt.junk", S_READ},
    {"opt.metadata_thp", S_READ},
    {"opt.percpu_arena", S_READ},
    {"opt.prof_format", S_READ},
    {"opt.prof_prefix", S_READ},
    {"opt.prof_unwind", S_READ},
    {"opt.stats_print_opts", S_READ},
    {"opt.thp", S_READ},
    {"opt.zero_realloc", S_READ},
    {"prof.dump", S_WRITE | S_PATH},
    {"prof.dump_fragmentation", S_WRITE | S_PATH},
    {"prof.dump_peak", S_WRITE | S_PATH},
    {"prof.prefix", S_WRITE | S_PATH},
    {"thread.prof.name", S_READ | S_WRITE},
    {"version", S_READ},
};

static unsigned string_leaf(const char *name)
{
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
        if (!strcmp(strings[i].name, name))
            return strings[i].how;
    return 0;
}

/* ---- the hooks a function leaf may get ---- */

typedef void (*backtrace_fn)(void **, unsigned *, unsigned);
typedef void (*dump_fn)(const char *);
static backtrace_fn salloc_walker; /* read at start-up */
static unsigned fuzz_walks;

/* Made-up stacks, a few addresses no code is at: the dump writers meet
 * frames in no mapping. */
static void fuzz_backtrace(void **vec, unsigned *len, unsigned max)
{
    FUZZ_CHECK(*len == 0 && max > 0);
    unsigned n = 1 + fuzz_walks++ % 4;
    for (unsigned i = 0; i < n && i < max; i++)
        vec[i] = (void *)(uintptr_t)(0x100 * (i + 1) + fuzz_walks % 8);
    *len = n < max ? n : max;
}

/* Told of each dump: a file in the target's directory, in place. */
static void fuzz_dump_hook(const char *filename)
{
    FUZZ_CHECK(filename != NULL);
    FUZZ_CHECK(access(filename, F_OK) == 0);
}

/* The function a write to hook leaf `name` passes, chosen by `pick`. */
static void (*hook_value(const char *name, uint8_t pick))(void)
{
    if (!strcmp(name, "experimental.hooks.prof_dump"))
        return pick % 2 ? (void (*)(void))fuzz_dump_hook : NULL;
    switch (pick % 3) {
    case 0: return (void (*)(void))fuzz_backtrace;
    case 1: return (void (*)(void))salloc_walker;
    default: return NULL; /* refused: EINVAL */
    }
}

/* Whether `fn`, read from a hook leaf, is one that was written there. */
static bool hook_known(void (*fn)(void))
{
    return fn == NULL || fn == (void (*)(void))fuzz_backtrace ||
           fn == (void (*)(void))salloc_walker || fn == (void (*)(void))fuzz_dump_hook;
}

/* ---- reading the input ---- */

struct input {
    const uint8_t *p, *end;
};

static uint8_t take_byte(struct input *in) { return in->p < in->end ? *in->p++ : 0; }

/* n bytes, zeros past the end of the input. */
static void take_bytes(struct input *in, void *out, size_t n)
{
    size_t have = (size_t)(in->end - in->p);
    if (have > n)
        have = n;
    memcpy(out, in->p, have);
    memset((char *)out + have, 0, n - have);
    in->p += have;
}

/* The bytes up to the next NUL (consumed) or the end, as a string. */
static char *take_string(struct input *in)
{
    const uint8_t *nul = memchr(in->p, 0, (size_t)(in->end - in->p));
    size_t n = (size_t)((nul ? nul : in->end) - in->p);
    char *s = malloc(n + 1);
    memcpy(s, in->p, n);
    s[n] = '\0';
    in->p += nul ? n + 1 : n;
    return s;
}

/* ---- state ---- */

static char auto_prefix[PATH_MAX];

/* A path under the temporary directory for the fuzzed string s (freed by
 * the caller); "" stays "" (an error path of its own). */
static char *in_tmpdir(const char *s)
{
    if (!*s)
        return strdup("");
    size_t d = strlen(fuzz_tmpdir);
    char *p = malloc(d + 1 + strlen(s) + 1);
    memcpy(p, fuzz_tmpdir, d);
    p[d++] = '/';
    for (; *s; s++)
        p[d++] = *s == '/' ? '_' : *s;
    p[d] = '\0';
    return p;
}

#define RING 16
static void *ring[RING];
static unsigned ring_next;

/* Live blocks from before any input, so that dumps and statistics have
 * something to show; made again after an input that may have reset the
 * profile (prof.reset forgets every sample). */
#define BASELINE 96
static void *baseline[BASELINE];

static void baseline_make(void)
{
    static const size_t sizes[] = {24, 48, 100, 1000, 5000, 20000, 70000, 300000, 1 << 20};
    for (unsigned i = 0; i < BASELINE; i++) {
        sa_fuzz_free(baseline[i]);
        baseline[i] = sa_fuzz_malloc(sizes[i % (sizeof(sizes) / sizeof(sizes[0]))] + i);
        FUZZ_CHECK(baseline[i] != NULL);
    }
}

static void set(const char *name, void *v, size_t len)
{
    int rc = mallctl(name, NULL, NULL, v, len);
    FUZZ_CHECK(rc == 0);
}

/* Every switch mallctl can flip, back to what it was at start. */
static void reset_state(bool maybe_reset)
{
    for (unsigned i = 0; i < RING; i++) {
        sa_fuzz_free(ring[i]);
        ring[i] = NULL;
    }
    ring_next = 0;
    bool on = true, off = false;
    size_t lg = LG_SAMPLE;
    ssize_t decay = 10000;
    const char *prefix = auto_prefix, *no_name = "";
    set("prof.active", &on, sizeof(on));
    set("prof.thread_active_init", &on, sizeof(on));
    set("thread.prof.active", &on, sizeof(on));
    set("thread.tcache.enabled", &on, sizeof(on));
    set("prof.gdump", &off, sizeof(off));
    set("prof.lg_sample", &lg, sizeof(lg));
    set("arenas.dirty_decay_ms", &decay, sizeof(decay));
    set("prof.prefix", &prefix, sizeof(prefix));
    set("thread.prof.name", &no_name, sizeof(no_name));
    dump_fn no_dump_hook = NULL;
    set("experimental.hooks.prof_backtrace", &salloc_walker, sizeof(salloc_walker));
    set("experimental.hooks.prof_dump", &no_dump_hook, sizeof(no_dump_hook));
    ssize_t no_recent = 0;
    set("experimental.prof_recent.alloc_max", &no_recent, sizeof(no_recent));
    if (maybe_reset)
        baseline_make();
    fuzz_tmpdir_empty();
}

/* ---- one call ---- */

static void stats_cb(void *opaque, const char *s) { *(size_t *)opaque += strlen(s); }

/* What a writer leaf (experimental.prof_recent.alloc_dump) gets: this
 * callback, counting into a variable of the target's, never raw bytes. */
static size_t writer_bytes;
struct writer {
    void (*write_cb)(void *, const char *);
    void *cbopaque;
};

static void check_rc(int rc)
{
    FUZZ_CHECK(rc == 0 || rc == EINVAL || rc == ENOENT || rc == EPERM || rc == EFAULT ||
               rc == EAGAIN);
}

/* Returns true if the call may have been prof.reset. */
static bool one_call(struct input *in)
{
    uint8_t mode = take_byte(in);
    size_t oldlen = take_byte(in) & 31, newlen = take_byte(in) & 31;
    uint8_t aux = take_byte(in);
    unsigned api = mode & 7;
    char *name = take_string(in);
    bool maybe_reset = !strcmp(name, "prof.reset");

    if (api == 3) {
        size_t bytes = 0;
        int saved = errno = 4321;
        malloc_stats_print(stats_cb, &bytes, name);
        FUZZ_CHECK(errno == saved);
        FUZZ_CHECK(bytes > 0);
        free(name);
        return false;
    }

    /* The MIB, for the mallctlbymib() calls. */
    size_t *mib = NULL, miblen = 0;
    if (api == 1) {
        size_t cap = aux & 15;
        mib = malloc(cap * sizeof(*mib));
        miblen = cap;
        int saved = errno = 4321;
        int rc = mallctlnametomib(name, mib, &miblen);
        FUZZ_CHECK(errno == saved);
        check_rc(rc);
        if (rc) {
            free(mib);
            free(name);
            return false;
        }
        FUZZ_CHECK(miblen <= cap);
        if (aux & 0x10)
            for (size_t i = 0; i < miblen; i++)
                if (!(mib[i] & CTL_MIB_NAMED)) {
                    uint64_t v;
                    take_bytes(in, &v, sizeof(v));
                    mib[i] = (size_t)v & (CTL_MIB_NAMED - 1);
                }
        if ((aux & 0x20) && miblen)
            miblen--;
    } else if (api == 2) {
        miblen = aux & 15;
        mib = malloc(miblen * sizeof(*mib));
        take_bytes(in, mib, miblen * sizeof(*mib));
        maybe_reset = true; /* a raw MIB may name anything */
    }

    /* Old value: buffer and length exactly as fuzzed. */
    void *oldp = (mode & 8) ? malloc(oldlen) : NULL;
    size_t len = oldlen, *oldlenp = (mode & 16) ? &len : NULL;

    /* New value: well typed (see the top of the file). */
    unsigned str = api == 2 ? 0 : string_leaf(name);
    void *newp = NULL;
    char *value = NULL;
    if ((mode & 32) && api != 2) {
        newp = malloc(newlen);
        if (str & S_FN) {
            void (*fn)(void) = hook_value(name, take_byte(in));
            memset(newp, 0, newlen);
            memcpy(newp, &fn, newlen < sizeof(fn) ? newlen : sizeof(fn));
        } else if (str & S_WRITER) {
            struct writer w = {stats_cb, &writer_bytes};
            memset(newp, 0, newlen);
            memcpy(newp, &w, newlen < sizeof(w) ? newlen : sizeof(w));
        } else if (str & S_WRITE) {
            char *s = take_string(in);
            value = (str & S_PATH) ? in_tmpdir(s) : strdup(s);
            free(s);
            const char *ptr = (mode & 64) ? NULL : value;
            memset(newp, 0, newlen);
            memcpy(newp, &ptr, newlen < sizeof(ptr) ? newlen : sizeof(ptr));
        } else {
            take_bytes(in, newp, newlen);
            if (newlen == 1)
                *(uint8_t *)newp &= 1; /* a bool */
        }
    }

    int saved = errno = 4321;
    int rc = api == 0 || api >= 4 ? mallctl(name, oldp, oldlenp, newp, newlen)
                                  : mallctlbymib(mib, miblen, oldp, oldlenp, newp, newlen);
    FUZZ_CHECK(errno == saved);
    check_rc(rc);
    FUZZ_CHECK(len <= oldlen);
    if (rc == 0 && oldp && oldlenp && len == sizeof(char *) && (str & S_READ)) {
        const char *s;
        memcpy(&s, oldp, sizeof(s));
        FUZZ_CHECK(s != NULL);
        FUZZ_CHECK(strlen(s) < 4096);
    }
    if (rc == 0 && oldp && oldlenp && len == sizeof(void (*)(void)) && (str & S_FN)) {
        void (*fn)(void);
        memcpy(&fn, oldp, sizeof(fn));
        FUZZ_CHECK(hook_known(fn));
    }

    if (mode & 128) {
        unsigned slot = ring_next++ % RING;
        sa_fuzz_free(ring[slot]);
        ring[slot] = sa_fuzz_malloc(((size_t)8 << (aux >> 4)) + (aux & 15));
        FUZZ_CHECK(ring[slot] != NULL);
    }

    free(value);
    free(newp);
    free(oldp);
    free(mib);
    free(name);
    return maybe_reset;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_tmpdir_create("mallctl");
    snprintf(auto_prefix, sizeof(auto_prefix), "%s/auto", fuzz_tmpdir);
    /* Read by salloc's one-time set-up, on the first mallctl() below. */
    char conf[PATH_MAX + 128];
    snprintf(conf, sizeof(conf), "prof:true,lg_prof_sample:%d,prof_accum:true,prof_prefix:%s",
             LG_SAMPLE, auto_prefix);
    unsetenv("MALLOC_CONF");
    setenv("SALLOC_CONF", conf, 1);
    size_t lg = 0, len = sizeof(lg);
    FUZZ_CHECK(mallctl("prof.lg_sample", &lg, &len, NULL, 0) == 0);
    FUZZ_CHECK(lg == LG_SAMPLE); /* the options above were applied */
    len = sizeof(salloc_walker);
    FUZZ_CHECK(mallctl("experimental.hooks.prof_backtrace", &salloc_walker, &len, NULL, 0) == 0);
    FUZZ_CHECK(salloc_walker != NULL);
    baseline_make();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, data + size};
    bool maybe_reset = false;
    for (unsigned n = 0; n < 32 && in.p < in.end; n++)
        maybe_reset |= one_call(&in);
    reset_state(maybe_reset);
    return 0;
}
