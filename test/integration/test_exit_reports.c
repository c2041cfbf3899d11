/*
 * test_exit_reports.c: opt.stats_print and opt.stats_print_opts, the
 * statistics report malloc_stats_print() writes to standard error at exit;
 * run with LD_PRELOAD=libsalloc.so.
 *
 * Each case runs the scenario "work" in a child of its own (child_run.h)
 * under the options it names: a few allocations, one left live, the
 * options as mallctl reads them printed to stdout, then exit().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child_run.h"

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static int work(void)
{
    mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    if (!mallctl) {
        fprintf(stderr, "not running under salloc\n");
        return 2;
    }
    for (int i = 0; i < 1000; i++)
        free(malloc(16 + i));
    void *keep = malloc(4096); /* live at exit */
    __asm__ volatile("" : : "r"(keep) : "memory");
    bool print = false;
    const char *opts = NULL;
    size_t blen = sizeof(print), slen = sizeof(opts);
    if (mallctl("opt.stats_print", &print, &blen, NULL, 0) ||
        mallctl("opt.stats_print_opts", &opts, &slen, NULL, 0))
        return 3;
    printf("stats_print %d opts '%s'\n", print, opts);
    exit(0);
}

static void run_work(const char *conf, struct child_outcome *o)
{
    child_run("test_exit_reports", "work", conf, false, o);
    if (o->signal || o->status)
        fail_msg("child under \"%s\" ended with signal %d, status %d: %s", conf, o->signal, o->status,
                 o->err);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* stats_print: the whole text report, on stderr, at exit. */
static void test_stats_print_at_exit(void **state)
{
    (void)state;
    static struct child_outcome o;
    run_work("stats_print:true", &o);
    assert_string_equal(o.out, "stats_print 1 opts ''\n");
    assert_true(starts_with(o.err, "___ Begin salloc statistics ___\n"));
    assert_true(ends_with(o.err, "--- End salloc statistics ---\n"));
    assert_non_null(strstr(o.err, "  opt.stats_print: true\n"));
    assert_non_null(strstr(o.err, "\nAllocated: "));
    assert_non_null(strstr(o.err, "\nbins: size nregs slab_size curslabs curregs nmalloc ndalloc nslabs nfills nflushes nonfull_slabs\n"));
}

/* Without it, nothing. */
static void test_no_report_by_default(void **state)
{
    (void)state;
    static struct child_outcome o;
    run_work("", &o);
    assert_string_equal(o.out, "stats_print 0 opts ''\n");
    assert_string_equal(o.err, "");
}

/* stats_print_opts: J gives JSON; g and b leave out the settings and the
 * size classes; each letter counts once. */
static void test_stats_print_opts(void **state)
{
    (void)state;
    static struct child_outcome o;
    run_work("stats_print:true,stats_print_opts:J", &o);
    assert_string_equal(o.out, "stats_print 1 opts 'J'\n");
    assert_true(starts_with(o.err, "{\n"));
    assert_true(ends_with(o.err, "}\n"));
    assert_non_null(strstr(o.err, "\"salloc\": {"));
    assert_non_null(strstr(o.err, "\"stats_print_opts\": \"J\""));

    run_work("stats_print:true,stats_print_opts:gbgg", &o);
    assert_string_equal(o.out, "stats_print 1 opts 'gb'\n");
    assert_true(starts_with(o.err, "___ Begin salloc statistics ___\n"));
    assert_null(strstr(o.err, "Run-time option settings"));
    assert_null(strstr(o.err, "bins:"));
    assert_non_null(strstr(o.err, "\nAllocated: "));
}

/* A letter malloc_stats_print does not know: one warning line, the option
 * keeps its value, the report comes as before. */
static void test_stats_print_opts_bad_letter(void **state)
{
    (void)state;
    static struct child_outcome o;
    run_work("stats_print:true,stats_print_opts:Jz", &o);
    assert_string_equal(o.out, "stats_print 1 opts ''\n");
    assert_true(starts_with(o.err, "<salloc>: Invalid conf value: stats_print_opts:Jz\n"
                                   "___ Begin salloc statistics ___\n"));
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "work"))
        return work();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_print_at_exit),
        cmocka_unit_test(test_no_report_by_default),
        cmocka_unit_test(test_stats_print_opts),
        cmocka_unit_test(test_stats_print_opts_bad_letter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
