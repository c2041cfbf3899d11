/*
 * test_conf.c: option strings (conf.c, spec/mallctl.md section 3): every
 * key, each diagnostic's exact text (stderr captured through a pipe), a
 * malformed source's rest ignored, later pairs winning, clipping,
 * confirm_conf and abort_conf.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "conf.h"
#include "log.h"
#include "prof.h"
#include "unit.h"

static char out[16384];

/* conf_apply() with fd 2 redirected into `out`. */
static int apply(const char *opts)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(2);
    dup2(p[1], 2);
    close(p[1]);
    int bad = conf_apply(opts, "test");
    dup2(saved, 2);
    close(saved);
    ssize_t n = read(p[0], out, sizeof(out) - 1);
    out[n > 0 ? n : 0] = '\0';
    close(p[0]);
    return bad;
}

/* Puts every option back to its default after each test. */
static int reset(void **state)
{
    (void)state;
    int bad = conf_apply("confirm_conf:false,prof:true,prof_active:true,prof_thread_active_init:true,"
                         "lg_prof_sample:19,prof_prefix:salloc,prof_final:false,"
                         "prof_accum:false,lg_prof_interval:-1,prof_gdump:false,"
                         "prof_leak:false,prof_leak_error:false,stats_print:false,stats_print_opts:,"
                         "prof_sys_thread_name:false,abort:false,zero_realloc:free,"
                         "dirty_decay_ms:10000,abort_conf:false,prof_format:heap,prof_unwind:fast,"
                         "thp:default,tcache:true,tcache_max:262144,junk:false,zero:false,"
                         "prof_recent_alloc_max:0",
                         "reset");
    return bad;
}

/* thread.tcache.enabled, read on a thread of its own into *arg. */
static void *thread_cache_enabled(void *arg)
{
    size_t len = sizeof(bool);
    free(malloc(1)); /* its cache made, as opt.tcache says */
    if (mallctl("thread.tcache.enabled", arg, &len, NULL, 0) != 0)
        *(bool *)arg = !*(bool *)arg; /* the caller's check fails */
    return NULL;
}

/* Every value of choice option `key` is accepted and lands in `var`. */
static void expect_choices(const char *key, const char *const *choices, const char *var)
{
    for (; *choices; choices++) {
        char opts[64];
        snprintf(opts, sizeof opts, "%s:%s", key, *choices);
        assert_int_equal(apply(opts), 0);
        assert_string_equal(var, *choices);
    }
}

static void test_conf_every_key_accepted(void **state)
{
    (void)state;
    assert_int_equal(apply("prof:false,prof_active:false,prof_thread_active_init:false,"
                           "lg_prof_sample:12,prof_prefix:/tmp/p x,prof_final:true,"
                           "prof_accum:true,lg_prof_interval:30,prof_gdump:true,"
                           "dirty_decay_ms:500,muzzy_decay_ms:0,narenas:8,tcache:true,"
                           "max_background_threads:1,max_background_threads:64,"
                           "percpu_arena:percpu,percpu_arena:phycpu,percpu_arena:disabled,"
                           "metadata_thp:auto,metadata_thp:always,metadata_thp:disabled,"
                           "oversize_threshold:0,oversize_threshold:8388608,"
                           "oversize_threshold:18446744073709551615,"
                           "retain:true,abort_conf:false,confirm_conf:false"),
                     0);
    assert_string_equal(out, "");
    assert_false(opt_prof);
    assert_false(opt_prof_active);
    assert_false(opt_prof_thread_active_init);
    assert_int_equal(opt_lg_prof_sample, 12);
    assert_string_equal(opt_prof_prefix, "/tmp/p x"); /* white space is part of a value */
    assert_true(opt_prof_final);
    assert_true(opt_prof_accum);
    assert_int_equal(opt_lg_prof_interval, 30);
    assert_true(opt_prof_gdump);
    assert_int_equal(opt_dirty_decay_ms, 500);
    assert_int_equal(pageheap_decay_ms(), 500);
    expect_choices("zero_realloc", (const char *const[]){"alloc", "abort", "free", NULL},
                   opt_zero_realloc);
    assert_int_equal(apply("abort:true"), 0);
    assert_true(opt_abort);
    assert_int_equal(apply("tcache:false"), 0);
    assert_false(opt_tcache);
    bool cached = true;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread_cache_enabled, &cached), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_false(cached); /* a new thread starts without a cache */
    assert_int_equal(apply("tcache:true"), 0);
    assert_int_equal(pthread_create(&t, NULL, thread_cache_enabled, &cached), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(cached);
    expect_choices("junk", (const char *const[]){"true", "alloc", "free", "false", NULL}, opt_junk);
    assert_int_equal(apply("zero:true"), 0);
    assert_true(opt_zero);
    assert_int_equal(apply("prof_sys_thread_name:true"), 0);
    assert_true(opt_prof_sys_thread_name);
    assert_int_equal(apply("prof_leak:true,prof_leak_error:true"), 0);
    assert_true(opt_prof_leak);
    assert_true(opt_prof_leak_error);
    assert_int_equal(apply("stats_print:true,stats_print_opts:Jgmdablxeh"), 0);
    assert_true(opt_stats_print);
    assert_string_equal(opt_stats_print_opts, "Jgmdablxeh");
    assert_int_equal(apply("stats_print_opts:bJbJ"), 0); /* each letter once */
    assert_string_equal(opt_stats_print_opts, "bJ");
    assert_int_equal(apply("stats_print_opts:"), 0);
    assert_string_equal(opt_stats_print_opts, "");
    assert_int_equal(apply("prof_format:pb.gz,prof_unwind:libgcc"), 0);
    assert_string_equal(opt_prof_format, "pb.gz");
    assert_string_equal(opt_prof_unwind, "libgcc");
    assert_int_equal(apply("prof_unwind:check,prof_unwind:fast"), 0);
    assert_string_equal(opt_prof_unwind, "fast");
    expect_choices("thp", (const char *const[]){"always", "never", "default", "auto", NULL}, opt_thp);
    assert_int_equal(apply(""), 0);
    assert_int_equal(apply(NULL), 0);
    assert_string_equal(out, "");
}

static void test_conf_diagnostics(void **state)
{
    (void)state;
    static const struct {
        const char *opts, *msg;
    } cases[] = {
        {"bogus:1", "<salloc>: Invalid conf pair: bogus:1\n"},
        {"Prof:true", "<salloc>: Invalid conf pair: Prof:true\n"},
        {"prof: true", "<salloc>: Invalid conf value: prof: true\n"},
        {"prof:1", "<salloc>: Invalid conf value: prof:1\n"},
        {"prof:", "<salloc>: Invalid conf value: prof:\n"},
        {"lg_prof_sample:abc", "<salloc>: Invalid conf value: lg_prof_sample:abc\n"},
        {"lg_prof_sample:12k", "<salloc>: Invalid conf value: lg_prof_sample:12k\n"},
        {"lg_prof_sample:-1", "<salloc>: Invalid conf value: lg_prof_sample:-1\n"},
        {"lg_prof_sample: 5", "<salloc>: Invalid conf value: lg_prof_sample: 5\n"},
        {"narenas:99999999999999999999999", "<salloc>: Invalid conf value: narenas:99999999999999999999999\n"},
        {"narenas:0", "<salloc>: Out-of-range conf value: narenas:0\n"},
        {"max_background_threads:0", "<salloc>: Out-of-range conf value: max_background_threads:0\n"},
        {"percpu_arena:percore", "<salloc>: Invalid conf value: percpu_arena:percore\n"},
        {"metadata_thp:true", "<salloc>: Invalid conf value: metadata_thp:true\n"},
        {"oversize_threshold:-1", "<salloc>: Invalid conf value: oversize_threshold:-1\n"},
        {"oversize_threshold:8M", "<salloc>: Invalid conf value: oversize_threshold:8M\n"},
        {"lg_prof_interval:-2", "<salloc>: Out-of-range conf value: lg_prof_interval:-2\n"},
        {"lg_prof_interval:64", "<salloc>: Out-of-range conf value: lg_prof_interval:64\n"},
        {"dirty_decay_ms:-2", "<salloc>: Out-of-range conf value: dirty_decay_ms:-2\n"},
        {"tcache:off", "<salloc>: Invalid conf value: tcache:off\n"},
        {"retain:false", "<salloc>: Out-of-range conf value: retain:false\n"},
        {"tcache_max:-1", "<salloc>: Invalid conf value: tcache_max:-1\n"},
        {"junk:yes", "<salloc>: Invalid conf value: junk:yes\n"},
        {"junk:", "<salloc>: Invalid conf value: junk:\n"},
        {"zero:1", "<salloc>: Invalid conf value: zero:1\n"},
        {"lg_tcache_max:16k", "<salloc>: Invalid conf value: lg_tcache_max:16k\n"},
        {"prof_unwind:fastest", "<salloc>: Invalid conf value: prof_unwind:fastest\n"},
        {"prof_unwind:", "<salloc>: Invalid conf value: prof_unwind:\n"},
        {"prof_format:pb.gzip", "<salloc>: Invalid conf value: prof_format:pb.gzip\n"},
        {"thp:madvise", "<salloc>: Invalid conf value: thp:madvise\n"},
        {"prof_leak:yes", "<salloc>: Invalid conf value: prof_leak:yes\n"},
        {"stats_print_opts:Jz", "<salloc>: Invalid conf value: stats_print_opts:Jz\n"},
        {"zero_realloc:ignore", "<salloc>: Invalid conf value: zero_realloc:ignore\n"},
        {"stats_print_opts:J g", "<salloc>: Invalid conf value: stats_print_opts:J g\n"},
        {"prof-x:true", "<salloc>: Malformed conf string at \"prof-x:true\"\n"},
        {"prof", "<salloc>: Malformed conf string at \"prof\"\n"},
        {":true", "<salloc>: Malformed conf string at \":true\"\n"},
        {"prof:true,", "<salloc>: Malformed conf string at \"\"\n"},
        {"prof,prof:true", "<salloc>: Malformed conf string at \"prof,prof:true\"\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(apply(cases[i].opts), 1);
        assert_string_equal(out, cases[i].msg);
    }
    /* Processing goes on after a bad pair: one line per error. */
    assert_int_equal(apply("bogus:1,lg_prof_sample:7,prof:yes"), 2);
    assert_string_equal(out, "<salloc>: Invalid conf pair: bogus:1\n"
                             "<salloc>: Invalid conf value: prof:yes\n");
    assert_int_equal(opt_lg_prof_sample, 7);
}

static void test_conf_malformed_rest_ignored(void **state)
{
    (void)state;
    assert_int_equal(apply("lg_prof_sample:10,bo-gus:1,lg_prof_sample:11"), 1);
    assert_string_equal(out, "<salloc>: Malformed conf string at \"bo-gus:1,lg_prof_sample:11\"\n");
    assert_int_equal(opt_lg_prof_sample, 10);
}

static void test_conf_later_wins_and_bad_value_keeps(void **state)
{
    (void)state;
    assert_int_equal(apply("lg_prof_sample:5,lg_prof_sample:7"), 0);
    assert_int_equal(opt_lg_prof_sample, 7);
    assert_int_equal(apply("lg_prof_sample:oops"), 1);
    assert_int_equal(opt_lg_prof_sample, 7); /* unchanged */
    assert_int_equal(apply("lg_prof_interval:-2"), 1);
    assert_int_equal(opt_lg_prof_interval, -1);
}

static void test_conf_integers_and_clipping(void **state)
{
    (void)state;
    assert_int_equal(apply("lg_prof_sample:0x10"), 0);
    assert_int_equal(opt_lg_prof_sample, 16);
    assert_int_equal(apply("lg_prof_sample:010"), 0);
    assert_int_equal(opt_lg_prof_sample, 8);
    assert_int_equal(apply("lg_prof_sample:99"), 0);
    assert_int_equal(opt_lg_prof_sample, 62);
    assert_string_equal(out, "");
    assert_int_equal(apply("lg_prof_interval:63,dirty_decay_ms:-1"), 0);
    assert_int_equal(opt_lg_prof_interval, 63);
    assert_int_equal(pageheap_decay_ms(), -1);
    /* prof_prefix: up to PROF_PREFIX_MAX - 1 bytes; a longer one, cut,
     * would name another path: refused, the prefix unchanged (it was once
     * cut silently). */
    static char longest[PROF_PREFIX_MAX + 100] = "prof_prefix:";
    memset(longest + 12, 'a', PROF_PREFIX_MAX - 1);
    assert_int_equal(apply(longest), 0);
    assert_int_equal(strlen(opt_prof_prefix), PROF_PREFIX_MAX - 1);
    assert_int_equal(apply("prof_prefix:/tmp/x"), 0);
    longest[12 + PROF_PREFIX_MAX - 1] = 'a';
    out[0] = '\0';
    assert_int_equal(apply(longest), 1);
    assert_string_equal(opt_prof_prefix, "/tmp/x");
    assert_non_null(strstr(out, "<salloc>: Out-of-range conf value: prof_prefix:aaaa"));
    assert_int_equal(apply("prof_prefix:"), 0);
    assert_string_equal(opt_prof_prefix, "");
}

/* opt.tcache_max and arenas.tcache_max, read as a program reads them. */
static size_t read_size(const char *name)
{
    size_t v = 0, len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

/* tcache_max: the option as given, clipped at jemalloc's 8 MiB; the
 * largest class it lets the caches hold, at most salloc's largest small
 * class; lg_tcache_max the same as a power of two, clipped at 2^23; a bad
 * value keeps the last good one. */
static void test_conf_tcache_max(void **state)
{
    (void)state;
    assert_int_equal(read_size("opt.tcache_max"), SA_MAX_SMALL); /* the default */
    assert_int_equal(read_size("opt.lg_tcache_max"), 18);
    unsigned nhbins = 0, nbins = 0;
    size_t len = sizeof(nhbins);
    assert_int_equal(mallctl("arenas.nhbins", &nhbins, &len, NULL, 0), 0);
    assert_int_equal(mallctl("arenas.nbins", &nbins, &len, NULL, 0), 0);
    assert_int_equal(nhbins, nbins); /* every class */
    assert_int_equal(read_size("arenas.tcache_max"), SA_MAX_SMALL);
    assert_int_equal(apply("tcache_max:4096"), 0);
    assert_int_equal(read_size("opt.tcache_max"), 4096);
    assert_int_equal(read_size("arenas.tcache_max"), 4096);
    assert_int_equal(read_size("opt.lg_tcache_max"), 12);
    assert_int_equal(apply("tcache_max:5000"), 0); /* between two classes: the lower */
    assert_int_equal(read_size("opt.tcache_max"), 5000);
    assert_int_equal(read_size("opt.lg_tcache_max"), 12);
    size_t below = sizeclass_size(sizeclass_of(5000) - 1);
    assert_true(below <= 5000 && sizeclass_size(sizeclass_of(5000)) > 5000);
    assert_int_equal(read_size("arenas.tcache_max"), below);
    assert_int_equal(apply("tcache_max:7"), 0); /* below the smallest class: none */
    assert_int_equal(read_size("arenas.tcache_max"), 0);
    assert_int_equal(read_size("opt.lg_tcache_max"), 2);
    assert_int_equal(apply("tcache_max:0"), 0);
    assert_int_equal(read_size("opt.lg_tcache_max"), 0);
    assert_int_equal(apply("tcache_max:0x4000000"), 0);
    assert_int_equal(read_size("opt.tcache_max"), (size_t)8 << 20);
    assert_int_equal(read_size("arenas.tcache_max"), SA_MAX_SMALL);
    assert_int_equal(read_size("opt.lg_tcache_max"), 23);
    assert_int_equal(apply("lg_tcache_max:10"), 0);
    assert_int_equal(read_size("opt.tcache_max"), 1024);
    assert_int_equal(read_size("opt.lg_tcache_max"), 10);
    assert_int_equal(mallctl("arenas.nhbins", &nhbins, &len, NULL, 0), 0);
    assert_int_equal(nhbins, sizeclass_of(1024)); /* classes 1 .. the 1 KiB one */
    assert_int_equal(read_size("arenas.tcache_max"), 1024);
    assert_int_equal(apply("lg_tcache_max:40"), 0);
    assert_int_equal(read_size("opt.tcache_max"), (size_t)8 << 20);
    assert_int_equal(apply("tcache_max:65536,lg_tcache_max:x"), 1);
    assert_int_equal(read_size("opt.tcache_max"), 65536);
    assert_int_equal(read_size("arenas.tcache_max"), 65536);
    assert_string_equal(out, "<salloc>: Invalid conf value: lg_tcache_max:x\n");
}

static void test_conf_confirm(void **state)
{
    (void)state;
    opt_confirm_conf = true;
    assert_int_equal(apply("lg_prof_sample:9,bogus:2"), 1);
    assert_string_equal(out, "<salloc>: -- Set conf value: lg_prof_sample:9\n"
                             "<salloc>: Invalid conf pair: bogus:2\n");
}

/* Runs fn(arg) in a child whose stderr goes into `out`; returns its wait
 * status (fn's result is the child's exit status). */
static int in_child(int (*fn)(const void *), const void *arg)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        _exit(fn(arg));
    }
    close(p[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(p[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    return status;
}

struct sources {
    const char *malloc_env, *salloc_env;
};

static int init_from(const void *arg)
{
    const struct sources *src = arg;
    if (src->malloc_env)
        setenv("MALLOC_CONF", src->malloc_env, 1);
    else
        unsetenv("MALLOC_CONF");
    setenv("SALLOC_CONF", src->salloc_env, 1);
    conf_init();
    return (int)opt_lg_prof_sample;
}

/* conf_init() in a child: the sources in order (SALLOC_CONF last wins), the
 * confirm_conf header lines whatever the pair's position, and abort_conf. */
static int child_init(const char *malloc_env, const char *salloc_env, int *status)
{
    *status = in_child(init_from, &(struct sources){malloc_env, salloc_env});
    return 0;
}

static void test_conf_init_sources(void **state)
{
    (void)state;
    int status;
    child_init("lg_prof_sample:5", "lg_prof_sample:6,confirm_conf:true", &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 6);
    assert_string_equal(out, "<salloc>: malloc_conf #2 (MALLOC_CONF): \"lg_prof_sample:5\"\n"
                             "<salloc>: -- Set conf value: lg_prof_sample:5\n"
                             "<salloc>: malloc_conf #3 (SALLOC_CONF): "
                             "\"lg_prof_sample:6,confirm_conf:true\"\n"
                             "<salloc>: -- Set conf value: lg_prof_sample:6\n"
                             "<salloc>: -- Set conf value: confirm_conf:true\n");
    child_init(NULL, "bogus:1,abort_conf:true", &status);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_string_equal(out, "<salloc>: Invalid conf pair: bogus:1\n"
                             "<salloc>: Abort (abort_conf:true) on invalid conf value "
                             "(see above).\n");
    child_init(NULL, "lg_prof_sample:4,abort_conf:true", &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 4);
    assert_string_equal(out, "");
}

static int warn_under(const void *on)
{
    char opts[32];
    snprintf(opts, sizeof(opts), "abort:%s", (const char *)on);
    conf_apply(opts, "test");
    sa_warn("a warning: %d", 7);
    return 0;
}

/* A warning in a child under abort:`on`: its wait status; its stderr in
 * `out`. */
static int child_warn(const char *on) { return in_child(warn_under, on); }

/* abort:true makes a warning end the process; by default it carries on. */
static void test_conf_abort_on_warnings(void **state)
{
    (void)state;
    int status = child_warn("false");
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_string_equal(out, "salloc: a warning: 7\n");
    status = child_warn("true");
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_string_equal(out, "salloc: a warning: 7\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_conf_every_key_accepted, reset),
        cmocka_unit_test_teardown(test_conf_diagnostics, reset),
        cmocka_unit_test_teardown(test_conf_malformed_rest_ignored, reset),
        cmocka_unit_test_teardown(test_conf_later_wins_and_bad_value_keeps, reset),
        cmocka_unit_test_teardown(test_conf_integers_and_clipping, reset),
        cmocka_unit_test_teardown(test_conf_tcache_max, reset),
        cmocka_unit_test_teardown(test_conf_confirm, reset),
        cmocka_unit_test_teardown(test_conf_init_sources, reset),
        cmocka_unit_test_teardown(test_conf_abort_on_warnings, reset),
    };
    return cmocka_run_group_tests_name("conf", tests, NULL, NULL);
}
