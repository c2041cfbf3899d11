/*
 * test_ctl.c: mallctl(), mallctlnametomib(), mallctlbymib() and
 * malloc_stats_print(): every error code path of spec/mallctl.md 1.2-1.4,
 * MIB round trips, the statistics' order and growth, and the report's
 * shape in text and JSON.
 */
#define _GNU_SOURCE /* pthread_getname_np, pthread_setname_np */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "../../include/salloc.h"
#include "central.h"
#include "ctl.h"
#include "dump.h"
#include "init.h"
#include "prof.h"
#include "tcache.h"
#include "unit.h"

static size_t read_z(const char *name)
{
    size_t v = 0, len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    assert_int_equal(len, sizeof(v));
    return v;
}

static bool read_b(const char *name)
{
    bool v = false;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

static void refresh(void)
{
    uint64_t e = 1;
    assert_int_equal(mallctl("epoch", NULL, NULL, &e, sizeof(e)), 0);
}

static void test_ctl_table_sorted(void **state)
{
    (void)state;
    assert_true(ctl_table_ok());
}

static void test_ctl_reads(void **state)
{
    (void)state;
    const char *v = NULL;
    size_t len = sizeof(v);
    assert_int_equal(mallctl("version", &v, &len, NULL, 0), 0);
    assert_string_equal(v, "salloc 0.1.0");
    assert_int_equal(mallctl("config.malloc_conf", &v, &len, NULL, 0), 0);
    assert_string_equal(v, "");
    assert_true(read_b("config.prof"));
    assert_true(read_b("config.stats"));
    assert_true(read_b("config.fill")); /* junk and zero */
    assert_true(read_b("opt.tcache"));
    assert_true(read_b("opt.retain"));
    assert_int_equal(mallctl("opt.thp", &v, &len, NULL, 0), 0);
    assert_string_equal(v, "default");
    assert_int_equal(mallctl("opt.thp", NULL, NULL, &v, sizeof(v)), EPERM);
    assert_int_equal(read_z("arenas.page"), 8192);
    assert_int_equal(read_z("arenas.quantum"), 16);
    unsigned u = 0;
    len = sizeof(u);
    assert_int_equal(mallctl("arenas.narenas", &u, &len, NULL, 0), 0);
    assert_int_equal(u, 1);
    assert_int_equal(mallctl("opt.narenas", &u, &len, NULL, 0), 0);
    assert_int_equal(u, 1);
    assert_int_equal(mallctl("arenas.nbins", &u, &len, NULL, 0), 0);
    assert_int_equal(u, SA_NUM_CLASSES - 1);
    assert_int_equal(mallctl("thread.arena", &u, &len, NULL, 0), 0);
    assert_int_equal(u, 0);
    ssize_t z = -5;
    len = sizeof(z);
    assert_int_equal(mallctl("opt.muzzy_decay_ms", &z, &len, NULL, 0), 0);
    assert_int_equal(z, 0);
    assert_int_equal(read_z("opt.oversize_threshold"), 0);
    len = sizeof(v);
    assert_int_equal(mallctl("opt.percpu_arena", &v, &len, NULL, 0), 0);
    assert_string_equal(v, "disabled");
    assert_int_equal(mallctl("opt.metadata_thp", &v, &len, NULL, 0), 0);
    assert_string_equal(v, "disabled");
    /* jemalloc's bin i is salloc's class i + 1. */
    assert_int_equal(read_z("arenas.bin.0.size"), sizeclass_size(1));
    assert_int_equal(read_z("arenas.bin.3.size"), sizeclass_size(4));
    uint32_t nregs = 0;
    len = sizeof(nregs);
    assert_int_equal(mallctl("arenas.bin.3.nregs", &nregs, &len, NULL, 0), 0);
    assert_int_equal(nregs, sizeclass_objects(4));
    assert_int_equal(read_z("arenas.bin.3.slab_size"), sizeclass_pages(4) * SA_PAGE_SIZE);
    /* Either pointer alone: the read is skipped, not an error. */
    assert_int_equal(mallctl("arenas.page", &z, NULL, NULL, 0), 0);
    len = sizeof(size_t);
    assert_int_equal(mallctl("arenas.page", NULL, &len, NULL, 0), 0);
}

static void test_ctl_enoent(void **state)
{
    (void)state;
    size_t v, len = sizeof(v);
    /* unknown, inner node, past a leaf, empty component, bad index */
    assert_int_equal(mallctl("bogus", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("opt", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("arenas.bin.0", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("opt.prof.x", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("opt..prof", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("opt.", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl(".opt", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("arena.1.purge", NULL, NULL, NULL, 0), ENOENT);
    assert_int_equal(mallctl("arena.100000.purge", NULL, NULL, NULL, 0), ENOENT);
    assert_int_equal(mallctl("arena.99999999999999999999999.purge", NULL, NULL, NULL, 0), ENOENT);
    assert_int_equal(mallctl("arenas.bin.96.size", &v, &len, NULL, 0), 0); /* the last bin */
    assert_int_equal(mallctl("arenas.bin.97.size", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("arenas.bin.x.size", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("OPT.prof", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("background_threads", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("thread.allocatedp", &v, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl(NULL, &v, &len, NULL, 0), ENOENT);
    /* arena 4096 (MALLCTL_ARENAS_ALL) and 0 exist */
    assert_int_equal(mallctl("arena.4096.purge", NULL, NULL, NULL, 0), 0);
    assert_int_equal(mallctl("arena.0.purge", NULL, NULL, NULL, 0), 0);
    assert_int_equal(mallctl("arena.0.decay", NULL, NULL, NULL, 0), 0);
}

static void test_ctl_einval_partial_copy(void **state)
{
    (void)state;
    /* A size_t read into 4 bytes: the low 4 bytes, *oldlenp = 4. */
    uint64_t buf[2] = {0, 0};
    size_t len = 4;
    assert_int_equal(mallctl("arenas.page", buf, &len, NULL, 0), EINVAL);
    assert_int_equal(len, 4);
    uint32_t low;
    memcpy(&low, buf, 4);
    assert_int_equal(low, 8192);
    /* Into 16: 8 bytes copied, *oldlenp = 8. */
    memset(buf, 0xff, sizeof(buf));
    len = 16;
    assert_int_equal(mallctl("arenas.page", buf, &len, NULL, 0), EINVAL);
    assert_int_equal(len, 8);
    assert_int_equal(buf[0], 8192);
    assert_int_equal(buf[1], UINT64_MAX); /* untouched */
}

static void test_ctl_einval_write_size(void **state)
{
    (void)state;
    bool was = read_b("prof.active"), f = !was;
    uint32_t four = 0;
    assert_int_equal(mallctl("prof.active", NULL, NULL, &four, sizeof(four)), EINVAL);
    assert_int_equal(read_b("prof.active"), was);
    /* Read + write with a wrong *oldlenp: partial copy, EINVAL, no write. */
    uint64_t old = 0;
    size_t len = sizeof(old);
    assert_int_equal(mallctl("prof.active", &old, &len, &f, sizeof(f)), EINVAL);
    assert_int_equal(len, sizeof(bool));
    assert_int_equal(read_b("prof.active"), was);
    ssize_t ms = 0;
    assert_int_equal(mallctl("arenas.dirty_decay_ms", NULL, NULL, &ms, 4), EINVAL);
    const char *p = "/tmp/x";
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &p, 4), EINVAL);
}

static void test_ctl_eperm(void **state)
{
    (void)state;
    size_t v = 1, len = sizeof(v);
    /* writing r- (with a value, or with newlen alone) */
    assert_int_equal(mallctl("arenas.page", NULL, NULL, &v, sizeof(v)), EPERM);
    assert_int_equal(mallctl("arenas.page", &v, &len, NULL, sizeof(v)), EPERM);
    assert_int_equal(mallctl("stats.allocated", NULL, NULL, &v, sizeof(v)), EPERM);
    /* reading -w */
    const char *path = NULL;
    assert_int_equal(mallctl("prof.dump", &path, &len, NULL, 0), EPERM);
    assert_int_equal(mallctl("prof.reset", NULL, &len, NULL, 0), EPERM);
    /* any argument on -- */
    assert_int_equal(mallctl("arena.0.purge", &v, &len, NULL, 0), EPERM);
    assert_int_equal(mallctl("arena.0.purge", NULL, NULL, NULL, 8), EPERM);
    assert_int_equal(mallctl("thread.tcache.flush", &v, NULL, NULL, 0), EPERM);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    /* thread.prof.name: read or write, not both */
    const char *name = "worker", *old = NULL;
    len = sizeof(old);
    assert_int_equal(mallctl("thread.prof.name", &old, &len, &name, sizeof(name)), EPERM);
}

static void test_ctl_efault(void **state)
{
    (void)state;
    const char *path = "/nonexistent-dir/x.heap";
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &path, sizeof(path)), EFAULT);
    const char *bad = "a\001b", *null = NULL;
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &bad, sizeof(bad)), EFAULT);
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &null, sizeof(null)), EFAULT);
    unsigned one = 1;
    assert_int_equal(mallctl("thread.arena", NULL, NULL, &one, sizeof(one)), EFAULT);
    ssize_t ms = -2;
    assert_int_equal(mallctl("arenas.dirty_decay_ms", NULL, NULL, &ms, sizeof(ms)), EFAULT);
    /* prof.prefix needs a value */
    assert_int_equal(mallctl("prof.prefix", NULL, NULL, NULL, 0), EINVAL);
    /* errno is never touched */
    errno = 12345;
    mallctl("prof.dump", NULL, NULL, &path, sizeof(path));
    mallctl("bogus", NULL, NULL, NULL, 0);
    assert_int_equal(errno, 12345);
}

static void *flush_in_new_thread(void *arg)
{
    /* Nothing allocated on this thread yet: it has no cache to flush. */
    *(int *)arg = mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
    return NULL;
}

static void test_ctl_tcache_flush_without_cache(void **state)
{
    (void)state;
    pthread_t t;
    int rc = -1;
    assert_int_equal(pthread_create(&t, NULL, flush_in_new_thread, &rc), 0);
    pthread_join(t, NULL);
    assert_int_equal(rc, EFAULT);
}

/* thread.tcache.enabled: rw, per thread.  Off gives the cache back and
 * makes thread.tcache.flush fail as jemalloc's does (EFAULT); on again,
 * the thread caches again.  A bool, so other lengths are EINVAL. */
static void test_ctl_tcache_enabled(void **state)
{
    (void)state;
    bool on = false, off = false, yes = true;
    size_t len = sizeof(on);
    assert_int_equal(mallctl("thread.tcache.enabled", &on, &len, NULL, 0), 0);
    assert_true(on);
    assert_true(read_b("opt.tcache"));
    static void *p[256];
    for (int i = 0; i < 256; i++)
        p[i] = malloc(64);
    for (int i = 0; i < 256; i++)
        free(p[i]);
    struct tcache *tc = init_current_cache();
    assert_true(tcache_cached_bytes(tc) > 0);
    assert_int_equal(mallctl("thread.tcache.enabled", &on, &len, &off, sizeof(off)), 0);
    assert_true(on); /* the old value */
    assert_int_equal(tcache_cached_bytes(tc), 0);
    assert_int_equal(mallctl("thread.tcache.enabled", &on, &len, NULL, 0), 0);
    assert_false(on);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), EFAULT);
    free(malloc(64));
    assert_int_equal(tcache_cached_bytes(tc), 0);
    assert_int_equal(mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof(off)), 0);
    int wide = 1;
    assert_int_equal(mallctl("thread.tcache.enabled", NULL, NULL, &wide, sizeof(wide)), EINVAL);
    assert_int_equal(mallctl("thread.tcache.enabled", NULL, NULL, &yes, sizeof(yes)), 0);
    assert_int_equal(mallctl("thread.tcache.enabled", &on, &len, NULL, 0), 0);
    assert_true(on);
    free(malloc(64));
    assert_true(tcache_cached_bytes(tc) > 0);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    assert_true(read_b("opt.tcache")); /* one thread's switch, not the option */
}

static void *idle_in_new_thread(void *arg)
{
    *(int *)arg = mallctl("thread.idle", NULL, NULL, NULL, 0);
    return NULL;
}

/* thread.idle: the thread's cache given back (and a decay pass); a thread
 * with no cache may say so too.  An action: no value either way. */
static void test_ctl_thread_idle(void **state)
{
    (void)state;
    static void *p[512];
    for (int i = 0; i < 512; i++)
        p[i] = malloc(i % 2 ? 64 : 2000);
    for (int i = 0; i < 512; i++)
        free(p[i]);
    struct tcache *tc = init_current_cache();
    assert_non_null(tc);
    assert_true(tcache_cached_bytes(tc) > 0);
    assert_int_equal(mallctl("thread.idle", NULL, NULL, NULL, 0), 0);
    assert_int_equal(tcache_cached_bytes(tc), 0);
    int x = 0;
    size_t len = sizeof(x);
    assert_int_equal(mallctl("thread.idle", &x, &len, NULL, 0), EPERM);
    assert_int_equal(mallctl("thread.idle", NULL, NULL, &x, sizeof(x)), EPERM);
    pthread_t t;
    int rc = -1;
    assert_int_equal(pthread_create(&t, NULL, idle_in_new_thread, &rc), 0);
    pthread_join(t, NULL);
    assert_int_equal(rc, 0);
}

/* opt.tcache_max and arenas.tcache_max: every small class is cached, up to
 * the largest. */
static void test_ctl_tcache_max(void **state)
{
    (void)state;
    size_t opt = 0, arenas = 0, largest = 0, len = sizeof(size_t);
    unsigned nbins = 0;
    size_t ulen = sizeof(nbins);
    assert_int_equal(mallctl("opt.tcache_max", &opt, &len, NULL, 0), 0);
    assert_int_equal(mallctl("arenas.tcache_max", &arenas, &len, NULL, 0), 0);
    assert_int_equal(mallctl("arenas.nbins", &nbins, &ulen, NULL, 0), 0);
    char name[64];
    snprintf(name, sizeof(name), "arenas.bin.%u.size", nbins - 1);
    assert_int_equal(mallctl(name, &largest, &len, NULL, 0), 0);
    assert_int_equal(opt, largest);
    assert_int_equal(arenas, largest);
    bool off = false, on = true;
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &off, sizeof(off)), 0);
    void *a = malloc(largest); /* unsampled: a block of the class, not a mapping */
    free(a);
    void *b = malloc(largest); /* from the thread's cache: the block just freed */
    assert_ptr_equal(a, b);
    free(b);
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &on, sizeof(on)), 0);
}

static void test_ctl_thread_prof_name(void **state)
{
    (void)state;
    const char *name = "worker 1", *got = NULL;
    size_t len = sizeof(got);
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), 0);
    assert_int_equal(mallctl("thread.prof.name", &got, &len, NULL, 0), 0);
    assert_string_equal(got, "worker 1");
    name = "";
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), 0);
    assert_int_equal(mallctl("thread.prof.name", &got, &len, NULL, 0), 0);
    assert_string_equal(got, "");
}

/* The sample of `p`, taken in this epoch, from a snapshot. */
static const struct dump_entry *sample_of(const void *p)
{
    static struct dump_entry entries[4096];
    size_t n = prof_snapshot(entries, 4096);
    for (size_t i = 0; i < n; i++)
        if (entries[i].ptr == p)
            return &entries[i];
    return NULL;
}

/* opt.prof_sys_thread_name: the kernel's name for the thread, read at each
 * sample and at each read of thread.prof.name, which cannot be written. */
static void test_ctl_thread_names_from_the_system(void **state)
{
    (void)state;
    char was[16];
    assert_int_equal(pthread_getname_np(pthread_self(), was, sizeof(was)), 0);
    size_t saved_lg = prof_lg_sample_get();
    prof_reset(0); /* R = 1: every allocation is sampled */
    opt_prof_sys_thread_name = true;

    assert_int_equal(pthread_setname_np(pthread_self(), "sys-name\x01x"), 0);
    const char *got = NULL, *name = "mine";
    size_t len = sizeof(got);
    assert_int_equal(mallctl("thread.prof.name", &got, &len, NULL, 0), 0);
    assert_string_equal(got, "sys-name?x"); /* no control characters in dumps */
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), ENOENT);
    void *a = malloc(100);
    assert_int_equal(pthread_setname_np(pthread_self(), "renamed"), 0);
    void *b = malloc(100); /* the name as it is now, not as last read */
    const struct dump_entry *ea = sample_of(a), *eb = sample_of(b);
    assert_non_null(ea);
    assert_non_null(eb);
    assert_string_equal(ea->thread, "sys-name?x");
    assert_string_equal(eb->thread, "renamed");

    opt_prof_sys_thread_name = false;
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), 0);
    void *c = malloc(100);
    const struct dump_entry *ec = sample_of(c);
    assert_non_null(ec);
    assert_string_equal(ec->thread, "mine");
    name = "";
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), 0);
    free(a);
    free(b);
    free(c);
    prof_reset(saved_lg);
    pthread_setname_np(pthread_self(), was);
}

static void test_ctl_prof_switches(void **state)
{
    (void)state;
    /* rw: the value returned is the one before the write. */
    bool t = true, f = false, old = false;
    size_t len = sizeof(old);
    assert_int_equal(mallctl("prof.active", &old, &len, &f, sizeof(f)), 0);
    assert_true(old);
    assert_false(read_b("prof.active"));
    assert_int_equal(mallctl("prof.active", &old, &len, &t, sizeof(t)), 0);
    assert_false(old);
    assert_true(read_b("prof.active"));
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &f, sizeof(f)), 0);
    assert_false(read_b("thread.prof.active"));
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &t, sizeof(t)), 0);
    assert_int_equal(mallctl("prof.gdump", NULL, NULL, &f, sizeof(f)), 0);
    assert_int_equal(mallctl("prof.thread_active_init", NULL, NULL, &t, sizeof(t)), 0);
    /* prof.reset sets the rate; with no value it keeps it. */
    size_t lg = 12;
    assert_int_equal(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0);
    assert_int_equal(read_z("prof.lg_sample"), 12);
    assert_int_equal(mallctl("prof.reset", NULL, NULL, NULL, 0), 0);
    assert_int_equal(read_z("prof.lg_sample"), 12);
    lg = 99;
    assert_int_equal(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), 0);
    assert_int_equal(read_z("prof.lg_sample"), 62);
    lg = 19; /* writable in salloc */
    assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &lg, sizeof(lg)), 0);
    assert_int_equal(read_z("prof.lg_sample"), 19);
    uint64_t interval = 1;
    len = sizeof(interval);
    assert_int_equal(mallctl("prof.interval", &interval, &len, NULL, 0), 0);
    read_z("prof.sample_count");
    /* The stack walker: its option and its counters (this test's samples
     * are plain C frames: the walker never needs libgcc for them). */
    const char *unwind = NULL;
    len = sizeof(unwind);
    assert_int_equal(mallctl("opt.prof_unwind", &unwind, &len, NULL, 0), 0);
    assert_string_equal(unwind, "fast");
    uint64_t count = 1;
    len = sizeof(count);
    assert_int_equal(mallctl("prof.unwind_mismatches", &count, &len, NULL, 0), 0);
    assert_int_equal(count, 0);
    assert_int_equal(mallctl("prof.samples_failed", &count, &len, NULL, 0), 0);
    assert_int_equal(mallctl("prof.samples_failed", NULL, NULL, &count, sizeof(count)), EPERM);
    assert_int_equal(mallctl("prof.unwind_truncated", &count, &len, NULL, 0), 0);
    assert_int_equal(count, 0);
    assert_int_equal(mallctl("prof.unwind_truncated", NULL, NULL, &count, sizeof(count)), EPERM);
}

/* prof.active and prof.lg_sample, each written by its own thread at the
 * same time: every write of one stays, whatever the other thread writes.
 * Each setter once wrote both switches back, reading the other's just
 * before: 1.3% of rate writes were undone.  The other thread writes the
 * value its switch already has, so only such a write-back could change
 * what this one reads back. */
struct switch_writer {
    const char *name;
    atomic_bool stop;
};

static void *write_switch(void *arg)
{
    struct switch_writer *w = arg;
    bool on = true;
    size_t lg = 13;
    while (!atomic_load(&w->stop)) {
        if (!strcmp(w->name, "prof.active"))
            assert_int_equal(mallctl(w->name, NULL, NULL, &on, sizeof(on)), 0);
        else
            assert_int_equal(mallctl(w->name, NULL, NULL, &lg, sizeof(lg)), 0);
    }
    return NULL;
}

static void test_ctl_prof_switches_written_at_once(void **state)
{
    (void)state;
    size_t saved_lg = read_z("prof.lg_sample");
    bool on = true;
    assert_int_equal(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
    enum { WRITES = 100000 };

    /* This thread sets the rate while another sets prof.active true. */
    struct switch_writer other = {"prof.active", false};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_switch, &other), 0);
    unsigned lost = 0;
    for (unsigned i = 0; i < WRITES; i++) {
        size_t lg = 10 + i % 2;
        assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &lg, sizeof(lg)), 0);
        lost += read_z("prof.lg_sample") != lg;
    }
    atomic_store(&other.stop, true);
    pthread_join(t, NULL);
    assert_int_equal(lost, 0);

    /* And prof.active while another sets the rate (13, as it is). */
    size_t lg = 13;
    assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &lg, sizeof(lg)), 0);
    struct switch_writer rate = {"prof.lg_sample", false};
    assert_int_equal(pthread_create(&t, NULL, write_switch, &rate), 0);
    for (unsigned i = 0; i < WRITES; i++) {
        bool want = i % 2;
        assert_int_equal(mallctl("prof.active", NULL, NULL, &want, sizeof(want)), 0);
        lost += read_b("prof.active") != want;
    }
    atomic_store(&rate.stop, true);
    pthread_join(t, NULL);
    assert_int_equal(lost, 0);
    assert_int_equal(mallctl("prof.active", NULL, NULL, &on, sizeof(on)), 0);
    assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &saved_lg, sizeof(saved_lg)), 0);
}

/* spec 1.2: the prof.* names with profiling off.  opt_prof is flipped here
 * only for the duration of the test. */
static void test_ctl_prof_disabled(void **state)
{
    (void)state;
    opt_prof = false;
    bool t = true, f = false;
    size_t lg = 10, len;
    const char *s = "x", *got;
    assert_int_equal(mallctl("prof.dump", NULL, NULL, NULL, 0), ENOENT);
    assert_int_equal(mallctl("prof.dump", &got, &len, NULL, 0), ENOENT); /* before EPERM */
    assert_int_equal(mallctl("prof.prefix", NULL, NULL, &s, sizeof(s)), ENOENT);
    assert_int_equal(mallctl("prof.reset", NULL, NULL, &lg, sizeof(lg)), ENOENT);
    len = sizeof(got);
    assert_int_equal(mallctl("thread.prof.name", &got, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctl("prof.active", NULL, NULL, &t, sizeof(t)), ENOENT);
    assert_int_equal(mallctl("prof.active", NULL, NULL, &f, sizeof(f)), 0);
    assert_int_equal(mallctl("prof.gdump", NULL, NULL, &f, sizeof(f)), ENOENT);
    assert_int_equal(mallctl("prof.thread_active_init", NULL, NULL, &f, sizeof(f)), ENOENT);
    assert_int_equal(mallctl("thread.prof.active", NULL, NULL, &f, sizeof(f)), ENOENT);
    assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &lg, sizeof(lg)), ENOENT);
    assert_false(read_b("prof.active"));
    assert_false(read_b("prof.gdump"));
    assert_false(read_b("prof.thread_active_init"));
    assert_false(read_b("thread.prof.active"));
    assert_false(read_b("opt.prof"));
    assert_int_equal(read_z("prof.lg_sample"), 0);
    assert_int_equal(read_z("prof.sample_count"), 0);
    uint64_t interval = 1;
    len = sizeof(interval);
    assert_int_equal(mallctl("prof.interval", &interval, &len, NULL, 0), 0);
    assert_int_equal(interval, 0);
    opt_prof = true;
    assert_true(read_b("prof.active"));
}

static void test_ctl_mib_round_trip(void **state)
{
    (void)state;
    size_t mib[8], n = 8;
    assert_int_equal(mallctlnametomib("arenas.bin.0.size", mib, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(mib[2], 0);
    unsigned nbins = 0;
    size_t len = sizeof(nbins);
    assert_int_equal(mallctl("arenas.nbins", &nbins, &len, NULL, 0), 0);
    for (unsigned i = 0; i < nbins; i++) {
        size_t size = 0;
        len = sizeof(size);
        mib[2] = i;
        assert_int_equal(mallctlbymib(mib, 4, &size, &len, NULL, 0), 0);
        assert_int_equal(size, sizeclass_size(i + 1));
    }
    mib[2] = nbins; /* past the last bin */
    len = sizeof(size_t);
    size_t size;
    assert_int_equal(mallctlbymib(mib, 4, &size, &len, NULL, 0), ENOENT);
    /* A smaller capacity: a partial MIB, still success. */
    n = 2;
    assert_int_equal(mallctlnametomib("arenas.bin.0.size", mib, &n), 0);
    assert_int_equal(n, 2);
    /* A name stopping at an inner node: success with nametomib... */
    n = 8;
    assert_int_equal(mallctlnametomib("arenas.bin", mib, &n), 0);
    assert_int_equal(n, 2);
    /* ...but ENOENT through bymib. */
    assert_int_equal(mallctlbymib(mib, 2, &size, &len, NULL, 0), ENOENT);
    assert_int_equal(mallctlbymib(mib, 0, &size, &len, NULL, 0), ENOENT);
    n = 8;
    assert_int_equal(mallctlnametomib("arenas.bogus", mib, &n), ENOENT);
    assert_int_equal(mallctlnametomib("opt.prof.x", mib, &n), ENOENT);
    /* Garbage named components. */
    size_t junk[2] = {CTL_MIB_NAMED | ((size_t)1 << 40), 3};
    assert_int_equal(mallctlbymib(junk, 2, &size, &len, NULL, 0), ENOENT);
    /* Writes and actions through a MIB. */
    n = 8;
    assert_int_equal(mallctlnametomib("arena.0.purge", mib, &n), 0);
    assert_int_equal(n, 3);
    mib[1] = MALLCTL_ARENAS_ALL;
    assert_int_equal(mallctlbymib(mib, 3, NULL, NULL, NULL, 0), 0);
    mib[1] = 7;
    assert_int_equal(mallctlbymib(mib, 3, NULL, NULL, NULL, 0), ENOENT);
    n = 8;
    assert_int_equal(mallctlnametomib("stats.arenas.0.bins.0.curregs", mib, &n), 0);
    assert_int_equal(n, 6);
    mib[4] = 2;
    len = sizeof(size);
    assert_int_equal(mallctlbymib(mib, 6, &size, &len, NULL, 0), 0);
    ssize_t ms = 0, old = 0;
    n = 8;
    assert_int_equal(mallctlnametomib("arenas.dirty_decay_ms", mib, &n), 0);
    len = sizeof(old);
    assert_int_equal(mallctlbymib(mib, n, &old, &len, &ms, sizeof(ms)), 0);
    assert_int_equal(read_z("arenas.dirty_decay_ms"), 0);
    assert_int_equal(mallctlbymib(mib, n, NULL, NULL, &old, sizeof(old)), 0);
}

static void test_ctl_stats_order_and_growth(void **state)
{
    (void)state;
    uint64_t e1 = 0, e2 = 0, one = 1;
    size_t len = sizeof(e1);
    assert_int_equal(mallctl("epoch", &e1, &len, &one, sizeof(one)), 0);
    assert_int_equal(mallctl("epoch", &e2, &len, NULL, 0), 0);
    assert_int_equal(e2, e1 + 1);
    size_t allocated = read_z("stats.allocated"), active = read_z("stats.active");
    size_t resident = read_z("stats.resident"), mapped = read_z("stats.mapped");
    assert_true(allocated > 0);
    assert_true(allocated <= active);
    assert_true(active <= resident);
    assert_true(active <= mapped);
    assert_int_equal(active % SA_PAGE_SIZE, 0);
    assert_true(read_z("stats.metadata") > 0);
    read_z("stats.retained");

    /* Snapshots: nothing changes until the next epoch write. */
    size_t big = (size_t)10 << 20;
    char *p = malloc(big);
    assert_non_null(p);
    memset(p, 1, big);
    assert_int_equal(read_z("stats.allocated"), allocated);
    refresh();
    size_t grown = read_z("stats.allocated");
    assert_true(grown >= allocated + big);
    assert_true(grown <= allocated + big + ((size_t)1 << 20));
    free(p);
    refresh();
    assert_true(read_z("stats.allocated") < grown - big / 2);
}

/* A sampled small allocation lives on a mapping of its own: stats.allocated
 * and stats.active count that mapping (its pages, from the profiler's
 * shards) while it is live, and not after it is freed. */
static void test_ctl_stats_count_sampled_mappings(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0); /* every allocation sampled */
    enum { N = 8 };
    void *p[N];
    refresh();
    size_t allocated = read_z("stats.allocated"), active = read_z("stats.active");
    for (int i = 0; i < N; i++) {
        p[i] = malloc(3 * SA_PAGE_SIZE + 1); /* 4 pages of its own */
        assert_true(prof_is_sampled(p[i]));
    }
    refresh();
    size_t own = N * 4 * SA_PAGE_SIZE;
    assert_true(read_z("stats.allocated") >= allocated + own);
    assert_true(read_z("stats.active") >= active + own);
    assert_true(read_z("stats.allocated") <= allocated + own + ((size_t)256 << 10));
    for (int i = 0; i < N; i++)
        free(p[i]);
    prof_lg_sample_set(saved);
    refresh();
    assert_true(read_z("stats.allocated") < allocated + own / 2);
}

/* The pagemap's leaves are metadata too: a page of a leaf that a writer
 * touched shows in stats.metadata and stats.resident (which must bound
 * what salloc keeps resident). */
static void test_ctl_stats_metadata_counts_pagemap_leaves(void **state)
{
    (void)state;
    uintptr_t page = (uintptr_t)0x7c00 << 28 >> SA_PAGE_SHIFT; /* no heap there */
    assert_null(pagemap_leaf_of((void *)(page << SA_PAGE_SHIFT)));
    refresh();
    size_t metadata = read_z("stats.metadata"), resident = read_z("stats.resident");
    assert_true(pagemap_ensure(page, 1));
    pagemap_set_span(page, NULL); /* faults in a page of the new leaf */
    refresh();
    assert_true(read_z("stats.metadata") >= metadata + os_page_size());
    assert_true(read_z("stats.resident") >= resident + os_page_size());
}

static void test_ctl_thread_counters(void **state)
{
    (void)state;
    uint64_t a0 = 0, a1 = 0, d0 = 0, d1 = 0;
    size_t len = sizeof(a0);
    assert_int_equal(mallctl("thread.allocated", &a0, &len, NULL, 0), 0);
    assert_int_equal(mallctl("thread.deallocated", &d0, &len, NULL, 0), 0);
    void *volatile p = malloc(1000);
    assert_non_null(p);
    assert_int_equal(mallctl("thread.allocated", &a1, &len, NULL, 0), 0);
    free(p);
    assert_int_equal(mallctl("thread.deallocated", &d1, &len, NULL, 0), 0);
    assert_true(a1 - a0 >= 1000);
    assert_true(d1 - d0 >= 1000);
}

struct capture {
    char buf[256 << 10];
    size_t len;
    int calls;
};

static void capture_cb(void *opaque, const char *s)
{
    struct capture *c = opaque;
    size_t n = strlen(s);
    if (c->len + n < sizeof(c->buf)) {
        memcpy(c->buf + c->len, s, n + 1);
        c->len += n;
    }
    c->calls++;
}

static struct capture cap;

static void test_ctl_stats_print_text(void **state)
{
    (void)state;
    memset(&cap, 0, sizeof(cap));
    malloc_stats_print(capture_cb, &cap, NULL);
    assert_true(cap.calls > 0);
    assert_non_null(strstr(cap.buf, "___ Begin salloc statistics ___\n"));
    assert_non_null(strstr(cap.buf, "--- End salloc statistics ---\n"));
    const char *line = strstr(cap.buf, "\nAllocated: ");
    assert_non_null(line);
    size_t a, b, c, d, e, f;
    assert_int_equal(sscanf(line + 1,
                            "Allocated: %zu, active: %zu, metadata: %zu (n_thp 0), "
                            "resident: %zu, mapped: %zu, retained: %zu",
                            &a, &b, &c, &d, &e, &f),
                     6);
    assert_true(a <= b && b <= d);
    assert_non_null(strstr(cap.buf, "bins:"));
    assert_non_null(strstr(cap.buf, "opt.prof: "));
    /* 'b': no size-class table; 'g': no settings. */
    memset(&cap, 0, sizeof(cap));
    malloc_stats_print(capture_cb, &cap, "bg");
    assert_null(strstr(cap.buf, "bins:"));
    assert_null(strstr(cap.buf, "opt.prof: "));
    assert_non_null(strstr(cap.buf, "Allocated: "));
    /* A string value longer than a formatted line (512 bytes) comes out
     * whole: a 900-byte prof_prefix was cut at 510 and lost its quote. */
    char saved[PROF_PREFIX_MAX], want[PROF_PREFIX_MAX + 32];
    memcpy(saved, opt_prof_prefix, sizeof(saved));
    memset(opt_prof_prefix, 'p', 900);
    opt_prof_prefix[900] = '\0';
    snprintf(want, sizeof(want), "  opt.prof_prefix: \"%s\"\n", opt_prof_prefix);
    memset(&cap, 0, sizeof(cap));
    malloc_stats_print(capture_cb, &cap, NULL);
    memcpy(opt_prof_prefix, saved, sizeof(saved));
    assert_non_null(strstr(cap.buf, want));
}

/* Valid-looking JSON: balanced braces and brackets outside strings, one
 * top-level object, the keys a reader looks for. */
static void test_ctl_stats_print_json(void **state)
{
    (void)state;
    memset(&cap, 0, sizeof(cap));
    malloc_stats_print(capture_cb, &cap, "J");
    int depth = 0, objects = 0;
    bool in_str = false;
    for (const char *p = cap.buf; *p; p++) {
        if (in_str) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                in_str = false;
            continue;
        }
        if (*p == '"')
            in_str = true;
        else if (*p == '{' || *p == '[')
            objects += depth++ == 0;
        else if (*p == '}' || *p == ']')
            assert_true(--depth >= 0);
        else if (*p == ',')
            assert_true(depth > 0);
    }
    assert_int_equal(depth, 0);
    assert_false(in_str);
    assert_int_equal(objects, 1);
    assert_int_equal(cap.buf[0], '{');
    assert_non_null(strstr(cap.buf, "\"salloc\": {"));
    assert_non_null(strstr(cap.buf, "\"allocated\": "));
    assert_non_null(strstr(cap.buf, "\"bins\": ["));
    /* Small and large allocated bytes each under its own key (they were
     * both "allocated", one key twice in the arena's object). */
    const char *small = strstr(cap.buf, "\"small\": {"), *large = strstr(cap.buf, "\"large\": {");
    assert_non_null(small);
    assert_non_null(large);
    small += strspn(small + 12, "\n ") + 12;
    large += strspn(large + 12, "\n ") + 12;
    assert_true(strncmp(small, "\"allocated\": ", 13) == 0);
    assert_true(strncmp(large, "\"allocated\": ", 13) == 0);
    assert_null(strstr(cap.buf, ",\n}"));
    assert_null(strstr(cap.buf, "Begin salloc"));
}

/* Each option of salloc(3)'s TUNING reads back as opt.<name> with the
 * type the page gives it (man/salloc.3: ".BR name \" (type, ...)\""), so
 * a program that reads it with that type gets it, not EINVAL.
 * prof_peak_pct said unsigned and was a size_t.  Each is in
 * malloc_stats_print's settings too (junk, tcache_max and eleven more were
 * missing). */
static void test_ctl_opt_types_match_the_man_page(void **state)
{
    (void)state;
    FILE *f = fopen("man/salloc.3", "r");
    if (!f)
        skip(); /* run from the repository's root (make test) */
    static const struct { const char *type; size_t size; } types[] = {
        {"bool", sizeof(bool)},          {"ssize_t", sizeof(ssize_t)},
        {"size_t", sizeof(size_t)},      {"unsigned", sizeof(unsigned)},
        {"string", sizeof(const char *)}, {"const char *", sizeof(const char *)},
    };
    memset(&cap, 0, sizeof(cap));
    malloc_stats_print(capture_cb, &cap, NULL);
    char line[512];
    bool tuning = false;
    int checked = 0;
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, ".SH ", 4))
            tuning = !strncmp(line, ".SH TUNING", 10);
        char name[64], type[64];
        if (!tuning || sscanf(line, ".BR %63s \" (%63[^,;)]", name, type) != 2)
            continue;
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
            if (strcmp(type, types[i].type))
                continue;
            char opt[80];
            char buf[16];
            snprintf(opt, sizeof(opt), "opt.%s", name);
            size_t len = types[i].size;
            if (mallctl(opt, buf, &len, NULL, 0) != 0)
                fail_msg("%s, %s in salloc(3), does not read as %zu bytes", opt, type,
                         types[i].size);
            char printed[96];
            snprintf(printed, sizeof(printed), "\n  %s: ", opt);
            if (!strstr(cap.buf, printed))
                fail_msg("%s is not in malloc_stats_print's settings", opt);
            checked++;
        }
    }
    fclose(f);
    assert_true(checked >= 20);
}

static uint64_t read_u64(const char *name)
{
    uint64_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

static uint64_t bin_u64(unsigned bin, const char *leaf)
{
    char name[96];
    snprintf(name, sizeof(name), "stats.arenas.0.bins.%u.%s", bin, leaf);
    return read_u64(name);
}

static size_t bin_z(unsigned bin, const char *leaf)
{
    char name[96];
    snprintf(name, sizeof(name), "stats.arenas.0.bins.%u.%s", bin, leaf);
    return read_z(name);
}

#define COUNTED_BLOCKS 1000

/* A thread that allocates COUNTED_BLOCKS 48-byte blocks into `arg` and,
 * if told to, frees them itself; its cache, gone with it, gives back what
 * it holds. */
struct counted_blocks {
    void *p[COUNTED_BLOCKS];
    bool free_them, uncached;
};

static void *allocate_blocks(void *arg)
{
    struct counted_blocks *b = arg;
    bool off = false;
    if (b->uncached)
        assert_int_equal(mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof(off)), 0);
    for (unsigned i = 0; i < COUNTED_BLOCKS; i++)
        b->p[i] = malloc(48);
    for (unsigned i = 0; b->free_them && i < COUNTED_BLOCKS; i++)
        free(b->p[i]);
    return NULL;
}

/* bins.<j>.nmalloc and .ndalloc count objects out of and back into a
 * class's central list since start-up: curregs is always their difference,
 * a thread's blocks add to both, and the small.* sums agree; nslabs is
 * never below curslabs.  large.nmalloc and .ndalloc count large blocks. */
static void test_ctl_allocation_counters(void **state)
{
    (void)state;
    unsigned bin = sizeclass_of(48) - 1; /* jemalloc's bin j is class j + 1 */
    refresh();
    uint64_t nmalloc = bin_u64(bin, "nmalloc"), ndalloc = bin_u64(bin, "ndalloc");
    uint64_t nfills = bin_u64(bin, "nfills"), nflushes = bin_u64(bin, "nflushes");
    static struct counted_blocks blocks;
    pthread_t t;
    for (int remote = 0; remote < 2; remote++) { /* freed by it, then by this thread */
        blocks.free_them = !remote;
        assert_int_equal(pthread_create(&t, NULL, allocate_blocks, &blocks), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        for (unsigned i = 0; remote && i < COUNTED_BLOCKS; i++)
            free(blocks.p[i]);
    }
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    refresh();
    assert_true(bin_u64(bin, "nmalloc") >= nmalloc + 2 * COUNTED_BLOCKS);
    assert_true(bin_u64(bin, "ndalloc") >= ndalloc + 2 * COUNTED_BLOCKS);
    /* Batches: at least one refill and one flush, far fewer than objects. */
    uint64_t fills = bin_u64(bin, "nfills") - nfills, flushes = bin_u64(bin, "nflushes") - nflushes;
    assert_true(fills >= 2 && fills < COUNTED_BLOCKS);
    assert_true(flushes >= 2 && flushes < COUNTED_BLOCKS);
    /* An uncached thread's objects come and go one at a time: counted as
     * objects, not as a cache's fills or flushes. */
    nmalloc = bin_u64(bin, "nmalloc"), ndalloc = bin_u64(bin, "ndalloc");
    nfills = bin_u64(bin, "nfills"), nflushes = bin_u64(bin, "nflushes");
    blocks.free_them = blocks.uncached = true;
    assert_int_equal(pthread_create(&t, NULL, allocate_blocks, &blocks), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    refresh();
    assert_true(bin_u64(bin, "nmalloc") >= nmalloc + COUNTED_BLOCKS);
    assert_true(bin_u64(bin, "ndalloc") >= ndalloc + COUNTED_BLOCKS);
    assert_int_equal(bin_u64(bin, "nfills"), nfills);
    assert_int_equal(bin_u64(bin, "nflushes"), nflushes);
    uint64_t small_nmalloc = 0, small_ndalloc = 0;
    for (unsigned j = 0; j < SA_NUM_CLASSES - 1; j++) {
        uint64_t m = bin_u64(j, "nmalloc"), d = bin_u64(j, "ndalloc");
        assert_true(m >= d);
        assert_int_equal(bin_z(j, "curregs"), m - d);
        assert_true(bin_u64(j, "nslabs") >= bin_z(j, "curslabs"));
        assert_true(bin_z(j, "nonfull_slabs") <= bin_z(j, "curslabs"));
        central_check(j + 1); /* its partial list as long as counted */
        small_nmalloc += m;
        small_ndalloc += d;
    }
    assert_int_equal(read_u64("stats.arenas.0.small.nmalloc"), small_nmalloc);
    assert_int_equal(read_u64("stats.arenas.0.small.ndalloc"), small_ndalloc);

    uint64_t large_nmalloc = read_u64("stats.arenas.0.large.nmalloc");
    uint64_t large_ndalloc = read_u64("stats.arenas.0.large.ndalloc");
    void *big[3];
    for (int i = 0; i < 3; i++)
        assert_non_null(big[i] = malloc((size_t)1 << 20));
    refresh();
    assert_int_equal(read_u64("stats.arenas.0.large.nmalloc"), large_nmalloc + 3);
    assert_int_equal(read_u64("stats.arenas.0.large.ndalloc"), large_ndalloc);
    for (int i = 0; i < 3; i++)
        free(big[i]);
    refresh();
    assert_int_equal(read_u64("stats.arenas.0.large.ndalloc"), large_ndalloc + 3);
}

static unsigned read_u(const char *name)
{
    unsigned v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

static ssize_t read_zd(const char *name)
{
    ssize_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

/* The arena's own figures: threads with a cache, time since start-up, the
 * decay time, the heap's purges, and (one arena) the process's totals. */
static void test_ctl_arena_figures(void **state)
{
    (void)state;
    free(malloc(1)); /* this thread's cache */
    refresh();
    assert_true(read_u("stats.arenas.0.nthreads") >= 1);
    uint64_t uptime = read_u64("stats.arenas.0.uptime");
    assert_true(uptime > 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    refresh();
    /* Read from the kernel's coarse clock (os.h): a tick of a few ms. */
    assert_true(read_u64("stats.arenas.0.uptime") >= uptime + 10 * 1000 * 1000);
    assert_int_equal(read_zd("stats.arenas.0.dirty_decay_ms"), read_zd("arenas.dirty_decay_ms"));
    assert_int_equal(read_zd("stats.arenas.0.muzzy_decay_ms"), 0);
    assert_int_equal(read_z("stats.arenas.0.pmuzzy"), 0);
    assert_int_equal(read_z("stats.arenas.0.mapped"), read_z("stats.mapped"));
    assert_int_equal(read_z("stats.arenas.0.resident"), read_z("stats.resident"));
    assert_int_equal(read_z("stats.arenas.0.retained"), read_z("stats.retained"));
    assert_int_equal(read_z("stats.arenas.0.base"), read_z("stats.metadata"));
    /* A freed 4 MiB block, purged now: its pages counted, with a madvise. */
    uint64_t purged = read_u64("stats.arenas.0.dirty_purged");
    uint64_t nmadvise = read_u64("stats.arenas.0.dirty_nmadvise");
    char *big = malloc((size_t)4 << 20);
    assert_non_null(big);
    memset(big, 1, (size_t)4 << 20);
    free(big);
    assert_int_equal(mallctl("arena.0.purge", NULL, NULL, NULL, 0), 0);
    refresh();
    assert_true(read_u64("stats.arenas.0.dirty_purged") >= purged + ((4u << 20) >> SA_PAGE_SHIFT));
    assert_true(read_u64("stats.arenas.0.dirty_nmadvise") > nmadvise);
}

/* arena.0.decay purges what has been free for a decay time, at once and
 * without the page heap being used (no background thread here).  200 ms:
 * the frees, microseconds apart, must all fall within one decay time (a
 * later free decays an earlier block), even on a loaded machine. */
static void test_ctl_arena_decay_purges_aged_pages(void **state)
{
    (void)state;
    ssize_t ms = 200, old_ms = 0;
    size_t len = sizeof(old_ms);
    assert_int_equal(mallctl("arenas.dirty_decay_ms", &old_ms, &len, &ms, sizeof(ms)), 0);
    enum { BLOCKS = 8, BLOCK = 1 << 20 };
    char *block[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        block[i] = malloc(BLOCK);
        assert_non_null(block[i]);
        memset(block[i], 1, BLOCK);
    }
    for (int i = 0; i < BLOCKS; i++)
        free(block[i]);
    refresh();
    size_t dirty_after_free = read_z("stats.arenas.4096.pdirty");
    assert_true(dirty_after_free >= (size_t)BLOCKS * BLOCK / SA_PAGE_SIZE / 2);
    struct timespec wait = {.tv_sec = 0, .tv_nsec = 500 * 1000 * 1000};
    nanosleep(&wait, NULL); /* older than the decay time: due */
    refresh();
    assert_int_equal(read_z("stats.arenas.4096.pdirty"), dirty_after_free); /* nothing ran decay */
    assert_int_equal(mallctl("arena.0.decay", NULL, NULL, NULL, 0), 0);
    refresh();
    assert_true(read_z("stats.arenas.4096.pdirty") < dirty_after_free / 8);
    assert_int_equal(mallctl("arenas.dirty_decay_ms", NULL, NULL, &old_ms, sizeof(old_ms)), 0);
}

int main(void)
{
    void *warm = malloc(1); /* the main thread gets its cache */
    free(warm);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctl_table_sorted),
        cmocka_unit_test(test_ctl_reads),
        cmocka_unit_test(test_ctl_enoent),
        cmocka_unit_test(test_ctl_einval_partial_copy),
        cmocka_unit_test(test_ctl_einval_write_size),
        cmocka_unit_test(test_ctl_eperm),
        cmocka_unit_test(test_ctl_efault),
        cmocka_unit_test(test_ctl_tcache_flush_without_cache),
        cmocka_unit_test(test_ctl_tcache_enabled),
        cmocka_unit_test(test_ctl_thread_idle),
        cmocka_unit_test(test_ctl_tcache_max),
        cmocka_unit_test(test_ctl_thread_prof_name),
        cmocka_unit_test(test_ctl_thread_names_from_the_system),
        cmocka_unit_test(test_ctl_prof_switches),
        cmocka_unit_test(test_ctl_prof_switches_written_at_once),
        cmocka_unit_test(test_ctl_prof_disabled),
        cmocka_unit_test(test_ctl_mib_round_trip),
        cmocka_unit_test(test_ctl_stats_order_and_growth),
        cmocka_unit_test(test_ctl_stats_count_sampled_mappings),
        cmocka_unit_test(test_ctl_stats_metadata_counts_pagemap_leaves),
        cmocka_unit_test(test_ctl_thread_counters),
        cmocka_unit_test(test_ctl_stats_print_text),
        cmocka_unit_test(test_ctl_stats_print_json),
        cmocka_unit_test(test_ctl_opt_types_match_the_man_page),
        cmocka_unit_test(test_ctl_arena_decay_purges_aged_pages),
        cmocka_unit_test(test_ctl_allocation_counters),
        cmocka_unit_test(test_ctl_arena_figures),
    };
    return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
