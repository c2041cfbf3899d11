/*
 * test_prof.c: the profiler through the public interface, with salloc
 * preloaded (make test runs this binary with LD_PRELOAD=lib/libsalloc.so
 * and passes SALLOC_LIB for the children it starts):
 *
 *   - jeprof --text reads a real dump of prof_sites and reports each known
 *     site within 5 standard deviations of the truth (skipped, saying so,
 *     if jeprof is not installed: Debian package libjemalloc-dev);
 *   - every allocation sampled (lg_prof_sample:0) in a threaded C++ program
 *     with exceptions and dlopen: no deadlock, no crash, same output;
 *   - threads sampling at once, fork() with sampling on;
 *   - automatic dumps: final (prof_final), interval (lg_prof_interval) and
 *     high-water (prof_gdump), with jemalloc's file names;
 *   - a malformed SALLOC_CONF: one warning line per bad pair, the program
 *     runs on.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

int mallctl(const char *, void *, size_t *, void *, size_t) __attribute__((weak));

extern char **environ;

static char tmpdir[] = "/tmp/salloc_test_prof.XXXXXX";

static const char *salloc_lib(void)
{
    const char *lib = getenv("SALLOC_LIB");
    if (!lib || lib[0] != '/') {
        fprintf(stderr, "SALLOC_LIB must name lib/libsalloc.so by absolute path (make test sets it)\n");
        fail();
    }
    return lib;
}

static const char *bin_path(const char *name)
{
    static char path[4][4096];
    static int next;
    char *p = path[next++ % 4];
    const char *dir = getenv("TEST_BIN_DIR");
    snprintf(p, 4096, "%s/%s", dir ? dir : "test/bin", name);
    char *real = realpath(p, NULL);
    if (!real) {
        fprintf(stderr, "%s is missing: build it with make test\n", p);
        fail();
    }
    snprintf(p, 4096, "%s", real);
    free(real);
    return p;
}

struct run {
    int status; /* exit status, or 128 + signal */
    char out[1 << 16], err[1 << 16];
};

static void slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs argv with LD_PRELOAD=salloc (if `preload`) and SALLOC_CONF=conf (if
 * not NULL), killing it after `timeout_s`. */
static void run(struct run *r, bool preload, const char *conf, int timeout_s, char *const argv[])
{
    char out[4200], err[4200], pre[4200], cnf[4200];
    snprintf(out, sizeof(out), "%s/out", tmpdir);
    snprintf(err, sizeof(err), "%s/err", tmpdir);
    snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", salloc_lib());
    snprintf(cnf, sizeof(cnf), "SALLOC_CONF=%s", conf ? conf : "");
    char *env[512];
    int n = 0;
    for (char **e = environ; *e && n < 500; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "SALLOC_CONF=", 12) &&
            strncmp(*e, "MALLOC_CONF=", 12))
            env[n++] = *e;
    if (preload)
        env[n++] = pre;
    if (conf)
        env[n++] = cnf;
    env[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    int status = 0;
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (waited >= timeout_s * 10) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("%s did not finish in %d s (deadlock?)", argv[0], timeout_s);
        }
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    slurp(out, r->out, sizeof(r->out));
    slurp(err, r->err, sizeof(r->err));
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static bool have_program(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

/* jeprof's --text line: "flat flat% sum% cum cum% name"; returns flat bytes. */
static double jeprof_flat(const char *text, const char *fn)
{
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        double flat;
        char name[256];
        if (sscanf(line, " %lf %*f%% %*f%% %*f %*f%% %255s", &flat, name) == 2 && !strcmp(name, fn))
            return flat;
    }
    return -1;
}

static void test_prof_jeprof_reads_dump(void **state)
{
    (void)state;
    if (!have_program("jeprof")) {
        fprintf(stderr, "SKIP: jeprof not found (Debian package libjemalloc-dev)\n");
        skip();
    }
    const char *sites = bin_path("prof_sites");
    char dump[4200];
    snprintf(dump, sizeof(dump), "%s/sites.heap", tmpdir);
    static struct run r, j;
    run(&r, true, "lg_prof_sample:14", 60, (char *const[]){(char *)sites, dump, NULL});
    if (r.status)
        fail_msg("prof_sites exited %d: %s", r.status, r.err);
    char jeprof[] = "/usr/bin/jeprof";
    run(&j, false, NULL, 120,
        (char *const[]){have_program("/usr/bin/jeprof") ? jeprof : (char *)"jeprof", (char *)"--text",
                        (char *)"--show_bytes", (char *)"--inuse_space", (char *)sites, dump, NULL});
    if (j.status)
        fail_msg("jeprof exited %d: %s", j.status, j.err);
    /* R = 2^14: sd of the bytes estimate, sqrt(N Z^2 e^-x / (1 - e^-x)). */
    struct { const char *fn; double n, z; } site[] = {
        {"site_small", 200000, 16}, {"site_medium", 2000, 3072}, {"site_large", 16, 1 << 20}};
    for (int i = 0; i < 3; i++) {
        double truth = 0, x = site[i].z / 16384.0;
        char key[64];
        snprintf(key, sizeof(key), "truth %s ", site[i].fn);
        const char *t = strstr(r.out, key);
        assert_non_null(t);
        truth = strtod(t + strlen(key), NULL);
        double sd = sqrt(site[i].n * site[i].z * site[i].z * exp(-x) / -expm1(-x));
        double got = jeprof_flat(j.out, site[i].fn);
        fprintf(stderr, "# jeprof %-11s truth %9.0f reported %9.0f (sd %7.0f)\n", site[i].fn, truth,
                got, sd);
        if (got < 0)
            fail_msg("jeprof does not list %s:\n%s", site[i].fn, j.out);
        if (fabs(got - truth) > 6 * sd + 0.0001 * truth + 1)
            fail_msg("%s: jeprof says %.0f, truth %.0f, 6 sd = %.0f", site[i].fn, got, truth, 6 * sd);
    }
}

/* go tool pprof's -top line: "flat flat% sum% cum cum% name", flat in
 * bytes with -unit=bytes. */
static double pprof_flat(const char *text, const char *fn)
{
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        double flat;
        char unit[8] = "", name[256];
        if (sscanf(line, " %lf%7[a-zA-Z] %*f%% %*f%% %*f%*s %*f%% %255s", &flat, unit, name) == 3 &&
            !strcmp(name, fn))
            return flat;
    }
    return -1;
}

/* A profile.proto dump (.pb.gz) of prof_sites, PIE and not: go tool pprof
 * names the sites and reports them within 6 sd, as jeprof does. */
static void test_prof_go_pprof_reads_pb(void **state)
{
    (void)state;
    if (!have_program("go")) {
        fprintf(stderr, "SKIP: go not found (Debian package golang-go)\n");
        skip();
    }
    const char *bins[] = {"prof_sites", "prof_sites_nopie"};
    for (int b = 0; b < 2; b++) {
        const char *sites = bin_path(bins[b]);
        char dump[4200];
        snprintf(dump, sizeof(dump), "%s/%s.pb.gz", tmpdir, bins[b]);
        static struct run r, g;
        run(&r, true, "lg_prof_sample:14", 60, (char *const[]){(char *)sites, dump, NULL});
        if (r.status)
            fail_msg("%s exited %d: %s", bins[b], r.status, r.err);
        char *home = getenv("HOME");
        setenv("HOME", tmpdir, 1); /* pprof writes under $HOME/pprof */
        char go[] = "/usr/bin/go";
        run(&g, false, NULL, 120,
            (char *const[]){have_program("/usr/bin/go") ? go : (char *)"go", (char *)"tool", (char *)"pprof",
                            (char *)"-top", (char *)"-unit=bytes", (char *)"-sample_index=inuse_space",
                            (char *)sites, dump, NULL});
        if (home)
            setenv("HOME", home, 1);
        if (g.status)
            fail_msg("go tool pprof exited %d: %s", g.status, g.err);
        struct { const char *fn; double n, z; } site[] = {
            {"site_small", 200000, 16}, {"site_medium", 2000, 3072}, {"site_large", 16, 1 << 20}};
        for (int i = 0; i < 3; i++) {
            char key[64];
            snprintf(key, sizeof(key), "truth %s ", site[i].fn);
            const char *t = strstr(r.out, key);
            assert_non_null(t);
            double truth = strtod(t + strlen(key), NULL), x = site[i].z / 16384.0;
            double sd = sqrt(site[i].n * site[i].z * site[i].z * exp(-x) / -expm1(-x));
            double got = pprof_flat(g.out, site[i].fn);
            fprintf(stderr, "# pprof %-16s %-11s truth %9.0f reported %9.0f (sd %7.0f)\n", bins[b],
                    site[i].fn, truth, got, sd);
            if (got < 0)
                fail_msg("go tool pprof does not name %s:\n%s", site[i].fn, g.out);
            if (fabs(got - truth) > 6 * sd + 0.001 * truth + 1)
                fail_msg("%s: pprof says %.0f, truth %.0f, 6 sd = %.0f", site[i].fn, got, truth, 6 * sd);
        }
    }
}

static void set_lg(size_t lg)
{
    assert_int_equal(mallctl("prof.lg_sample", NULL, NULL, &lg, sizeof(lg)), 0);
}

static void *named_thread(void *arg)
{
    const char *name = "worker-7";
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), 0);
    for (int i = 0; i < 200; i++)
        ((void **)arg)[i] = malloc(1000);
    return NULL;
}

/* The pprof label "thread" carries thread.prof.name of the allocating thread. */
static void test_prof_pprof_thread_label(void **state)
{
    (void)state;
    if (!have_program("go")) {
        fprintf(stderr, "SKIP: go not found (Debian package golang-go)\n");
        skip();
    }
    static void *objs[200];
    set_lg(8);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, named_thread, objs), 0);
    pthread_join(t, NULL);
    char dump[4200];
    snprintf(dump, sizeof(dump), "%s/threads.pb", tmpdir);
    const char *p = dump;
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &p, sizeof(p)), 0);
    set_lg(19);
    for (int i = 0; i < 200; i++)
        free(objs[i]);
    static struct run g;
    char *home = getenv("HOME");
    setenv("HOME", tmpdir, 1);
    run(&g, false, NULL, 120,
        (char *const[]){(char *)"/usr/bin/go", (char *)"tool", (char *)"pprof", (char *)"-tags",
                        (char *)"-symbolize=none", dump, NULL});
    if (home)
        setenv("HOME", home, 1);
    if (g.status)
        fail_msg("go tool pprof exited %d: %s", g.status, g.err);
    /* -tags summarises every label: "thread: Total ...", then the values. */
    if (!strstr(g.out, "worker-7") || !strstr(g.out, "1kB"))
        fail_msg("labels missing from pprof -tags:\n%.3000s", g.out);
}

static void test_prof_reentrancy_every_allocation_sampled(void **state)
{
    (void)state;
    const char *bin = bin_path("prof_reentrancy");
    static struct run plain, sampled;
    run(&plain, false, NULL, 120, (char *const[]){(char *)bin, NULL});
    run(&sampled, true, "lg_prof_sample:0", 300, (char *const[]){(char *)bin, NULL});
    assert_int_equal(plain.status, 0);
    if (sampled.status)
        fail_msg("prof_reentrancy under lg_prof_sample:0 exited %d: %s", sampled.status, sampled.err);
    assert_string_equal(plain.out, sampled.out);
}

static void test_prof_malformed_conf_warns_and_runs_on(void **state)
{
    (void)state;
    static struct run r;
    run(&r, true, "lg_prof_sample:abc,bogus:1,dirty_decay_ms:100,prof_accum:maybe", 30,
        (char *const[]){(char *)"/bin/echo", (char *)"still running", NULL});
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "still running\n");
    assert_non_null(strstr(r.err, "lg_prof_sample:abc"));
    assert_non_null(strstr(r.err, "bogus:1"));
    assert_non_null(strstr(r.err, "prof_accum:maybe"));
    assert_null(strstr(r.err, "dirty_decay_ms"));
    int lines = 0;
    for (const char *c = r.err; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 3); /* one line per bad pair */
}

/* Entries of `dir` whose names hold both `a` and `b` and not `not` (if
 * not NULL). */
static int count_names(const char *dir, const char *a, const char *b, const char *not)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, a) && strstr(e->d_name, b) && !(not && strstr(e->d_name, not));
    if (d)
        closedir(d);
    return n;
}

/* Finished heap dumps in `dir` whose names hold `infix`. */
static int count_files(const char *dir, const char *infix)
{
    return count_names(dir, infix, ".heap", ".tmp.");
}

/* prof_final, lg_prof_interval and prof_gdump write <prefix>.<pid>.<seq>.
 * <kind><kseq>.heap files. */
static void test_prof_automatic_dumps(void **state)
{
    (void)state;
    const char *sites = bin_path("prof_sites");
    char conf[4400], dump[4200], prefix[4200];
    snprintf(prefix, sizeof(prefix), "%s/auto", tmpdir);
    snprintf(dump, sizeof(dump), "%s/manual.heap", tmpdir);
    snprintf(conf, sizeof(conf), "prof_final:true,lg_prof_interval:22,prof_gdump:true,prof_prefix:%s",
             prefix);
    static struct run r;
    run(&r, true, conf, 60, (char *const[]){(char *)sites, dump, NULL});
    if (r.status)
        fail_msg("prof_sites exited %d: %s", r.status, r.err);
    int finals = count_files(tmpdir, ".f.heap"), intervals = count_files(tmpdir, ".i");
    int gdumps = count_files(tmpdir, ".u");
    fprintf(stderr, "# automatic dumps: %d final, %d interval, %d gdump\n", finals, intervals, gdumps);
    assert_int_equal(finals, 1);
    assert_true(intervals >= 3); /* ~26 MB allocated, one every 4 MiB */
    assert_true(gdumps >= 1);
}

/* An interval dump runs inside malloc() on the thread that took the sample:
 * one with a PTHREAD_STACK_MIN stack too, in both formats, leaving no
 * temporary file.  The dump's buffers once took 13 KB of the stack (21 KB
 * with pprof's): the thread crashed in the dump. */
static void test_prof_interval_dumps_on_a_small_stack(void **state)
{
    (void)state;
    const char *prog = bin_path("prof_small_stack");
    const char *formats[] = {"heap", "pb.gz"};
    for (int f = 0; f < 2; f++) {
        char dir[4200], conf[4400];
        snprintf(dir, sizeof(dir), "%s/small_stack_%s", tmpdir, formats[f]);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(conf, sizeof(conf), "lg_prof_sample:0,lg_prof_interval:0,prof_format:%s,prof_prefix:%s/ss",
                 formats[f], dir);
        static struct run r;
        run(&r, true, conf, 60, (char *const[]){(char *)prog, NULL});
        if (r.status)
            fail_msg("prof_small_stack (%s) ended with %d: %s", formats[f], r.status, r.err);
        assert_string_equal(r.out, "16 blocks\n");
        int dumps = count_names(dir, ".i", formats[f], ".tmp"),
            temporary = count_names(dir, ".tmp", "", NULL);
        fprintf(stderr, "# %s: %d interval dumps, %d temporary files\n", formats[f], dumps, temporary);
        assert_true(dumps >= 16);
        assert_int_equal(temporary, 0);
    }
}

/* ---- prof_leak: the summary at exit ---- */

/* What prof_leaks printed ("truth <bytes> <objects> leak <prof_leak>
 * <prof_leak_error>") and salloc's summary line, if any. */
struct leak_run {
    struct run r;
    unsigned long long truth_bytes, truth_objects, bytes, objects;
    size_t contexts;
    int opt_leak, opt_leak_error;
    bool summary;
};

static void run_leaks_with(struct leak_run *l, const char *mode, const char *arg, const char *conf)
{
    run(&l->r, true, conf, 60,
        (char *const[]){(char *)bin_path("prof_leaks"), (char *)mode, (char *)arg, NULL});
    if (sscanf(l->r.out, "truth %llu %llu leak %d %d", &l->truth_bytes, &l->truth_objects,
               &l->opt_leak, &l->opt_leak_error) != 4)
        fail_msg("prof_leaks %s printed \"%s\" (exit %d): %s", mode, l->r.out, l->r.status, l->r.err);
    const char *line = strstr(l->r.err, "<salloc>: Leak approximation summary: ~");
    l->summary = line != NULL;
    if (line && sscanf(line, "<salloc>: Leak approximation summary: ~%llu bytes, ~%llu objects, >= %zu contexts",
                       &l->bytes, &l->objects, &l->contexts) != 3)
        fail_msg("a summary line not in jemalloc's words: %s", line);
}

static void run_leaks(struct leak_run *l, const char *mode, const char *conf)
{
    run_leaks_with(l, mode, NULL, conf);
}

/* The prefix of automatic dumps in a directory of their own. */
static void leak_conf(char *conf, size_t size, const char *name, const char *options)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(conf, size, "%s,prof_prefix:%s/leaks", options, dir);
}

/* Every allocation sampled: the summary is exact (objects, usable bytes and
 * the two sites), and its second line names the final dump, written. */
static void test_prof_leak_summary_at_exit(void **state)
{
    (void)state;
    char conf[4400];
    leak_conf(conf, sizeof(conf), "leak_exact", "prof_leak:true,prof_final:true,lg_prof_sample:0");
    static struct leak_run l;
    run_leaks(&l, "leak", conf);
    assert_int_equal(l.r.status, 0);
    assert_true(l.summary);
    assert_int_equal(l.opt_leak, 1);
    assert_int_equal(l.opt_leak_error, 0);
    assert_int_equal(l.bytes, l.truth_bytes);
    assert_int_equal(l.objects, l.truth_objects);
    assert_int_equal(l.contexts, 2);
    const char *detail = strstr(l.r.err, "<salloc>: Run jeprof on \"");
    assert_non_null(detail);
    char path[4200];
    assert_int_equal(sscanf(detail, "<salloc>: Run jeprof on \"%4199[^\"]\"", path), 1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_non_null(strstr(path, ".f.heap"));
    /* A profile.proto final dump is pprof's to read. */
    leak_conf(conf, sizeof(conf), "leak_pb", "prof_leak:true,prof_final:true,prof_format:pb.gz");
    run_leaks(&l, "leak", conf);
    assert_int_equal(l.r.status, 0);
    assert_true(l.summary);
    detail = strstr(l.r.err, "<salloc>: Run pprof on \"");
    assert_non_null(detail);
    assert_int_equal(sscanf(detail, "<salloc>: Run pprof on \"%4199[^\"]\"", path), 1);
    assert_int_equal(stat(path, &st), 0);
    assert_non_null(strstr(path, ".f.pb.gz"));
    /* prof.prefix emptied at run time: no dump can be named, the summary
     * still comes, and says so. */
    leak_conf(conf, sizeof(conf), "leak_noprefix", "prof_leak:true,prof_final:true,lg_prof_sample:0");
    run_leaks_with(&l, "leak", "noprefix", conf);
    assert_int_equal(l.r.status, 0);
    assert_true(l.summary);
    assert_int_equal(l.bytes, l.truth_bytes);
    assert_non_null(strstr(l.r.err, "<salloc>: No leak detail: no name for the final dump (prof.prefix)\n"));
}

/* At a sample every 4 KiB the summary is the dump's unbiased estimate:
 * within 5 standard deviations of the truth (sd of the bytes 1.3% here,
 * nearly all from the 1 KiB objects, each sampled with p = 0.22). */
static void test_prof_leak_summary_is_unbiased(void **state)
{
    (void)state;
    char conf[4400];
    leak_conf(conf, sizeof(conf), "leak_sampled", "prof_leak:true,prof_final:true,lg_prof_sample:12");
    static struct leak_run l;
    run_leaks(&l, "leak", conf);
    assert_int_equal(l.r.status, 0);
    assert_true(l.summary);
    double p = 1 - exp(-1024.0 / 4096.0);
    double sd_bytes = sqrt(20000.0 * 1024.0 * 1024.0 * (1 - p) / p);
    double sd_objects = sqrt(20000.0 * (1 - p) / p);
    fprintf(stderr, "# leak estimate: %llu bytes (truth %llu, sd %.0f), %llu objects (truth %llu, sd %.0f)\n",
            l.bytes, l.truth_bytes, sd_bytes, l.objects, l.truth_objects, sd_objects);
    assert_true(fabs((double)l.bytes - (double)l.truth_bytes) < 5 * sd_bytes);
    assert_true(fabs((double)l.objects - (double)l.truth_objects) < 5 * sd_objects);
    assert_int_equal(l.contexts, 2);
}

/* prof_leak_error: the summary, then exit status 1, with the program's
 * buffered output still written; no leak, no summary, status 0. */
static void test_prof_leak_error_exits_with_1(void **state)
{
    (void)state;
    char conf[4400];
    leak_conf(conf, sizeof(conf), "leak_error", "prof_leak_error:true,prof_final:true,lg_prof_sample:0");
    static struct leak_run l;
    run_leaks(&l, "leak", conf);
    assert_int_equal(l.r.status, 1);
    assert_true(l.summary);
    assert_int_equal(l.opt_leak, 1); /* prof_leak_error sets prof_leak */
    assert_int_equal(l.opt_leak_error, 1);
    assert_non_null(strstr(l.r.err, "<salloc>: Exiting with error code because memory leaks were detected"));
    run_leaks(&l, "none", conf);
    assert_int_equal(l.r.status, 0);
    assert_false(l.summary);
    assert_int_equal(l.truth_bytes, 0);
    /* Another thread holds stdout for good: the exit does not wait for it
     * (a hang here is run()'s timeout); stdout's buffer is lost then. */
    run(&l.r, true, conf, 60,
        (char *const[]){(char *)bin_path("prof_leaks"), "leak", "holdstdout", NULL});
    assert_int_equal(l.r.status, 1);
    assert_non_null(strstr(l.r.err, "<salloc>: Exiting with error code because memory leaks were detected"));
}

/* Without prof_final there is no final dump to report with: one warning
 * line at start-up, no summary, the program unharmed. */
static void test_prof_leak_without_final_warns(void **state)
{
    (void)state;
    static struct leak_run l;
    run_leaks(&l, "leak", "prof_leak:true,lg_prof_sample:0");
    assert_int_equal(l.r.status, 0);
    assert_false(l.summary);
    assert_string_equal(l.r.err, "<salloc>: prof_leak is set w/o prof_final.\n");
    run_leaks(&l, "leak", "prof_leak_error:true,lg_prof_sample:0");
    assert_int_equal(l.r.status, 0);
    assert_false(l.summary);
    assert_string_equal(l.r.err, "<salloc>: prof_leak_error is set w/o prof_final.\n");
    /* A bad option, for abort_conf as for jemalloc. */
    run(&l.r, true, "prof_leak:true,abort_conf:true", 60,
        (char *const[]){(char *)bin_path("prof_leaks"), "leak", NULL});
    assert_int_equal(l.r.status, 128 + SIGABRT);
    assert_non_null(strstr(l.r.err, "<salloc>: prof_leak is set w/o prof_final.\n"
                                    "<salloc>: Abort (abort_conf:true) on invalid conf value (see above).\n"));
}

/* ---- in this process (salloc preloaded) ---- */


static size_t sample_count(void)
{
    size_t n, len = sizeof(n);
    assert_int_equal(mallctl("prof.sample_count", &n, &len, NULL, 0), 0);
    return n;
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *keep[256] = {0};
    for (int i = 0; i < 200000; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % 256);
        free(keep[k]);
        keep[k] = malloc(8 + (seed >> 16) % 5000);
        memset(keep[k], 1, 8);
    }
    for (int k = 0; k < 256; k++)
        free(keep[k]);
    return NULL;
}

static void test_prof_threads_sampling_at_once(void **state)
{
    (void)state;
    if (!mallctl) {
        fprintf(stderr, "not running under salloc\n");
        fail();
    }
    size_t before = sample_count();
    set_lg(8);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)), 0);
    char path[4200];
    snprintf(path, sizeof(path), "%s/threads.heap", tmpdir);
    const char *p = path;
    for (int i = 0; i < 5; i++) /* dumps while the threads sample */
        assert_int_equal(mallctl("prof.dump", NULL, NULL, &p, sizeof(p)), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    set_lg(19);
    /* Every churn object was freed; what may remain sampled are the C
     * library's own per-thread records (kept with its cache of thread
     * stacks), a handful at most. */
    size_t after = sample_count();
    if (after > before + 16)
        fail_msg("%zu live samples after the threads freed everything (%zu before)", after, before);
}

static void test_prof_fork_with_sampling(void **state)
{
    (void)state;
    set_lg(10);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 7)), 0);
    char path[4200];
    snprintf(path, sizeof(path), "%s/child.heap", tmpdir);
    for (int round = 0; round < 10; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            void *keep[1000];
            for (int i = 0; i < 1000; i++)
                keep[i] = malloc(100 + i);
            const char *p = path;
            int rc = mallctl("prof.dump", NULL, NULL, &p, sizeof(p));
            for (int i = 0; i < 1000; i++)
                free(keep[i]);
            _exit(rc == 0 ? 0 : 3);
        }
        int status;
        waitpid(pid, &status, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    set_lg(19);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prof_threads_sampling_at_once),
        cmocka_unit_test(test_prof_fork_with_sampling),
        cmocka_unit_test(test_prof_malformed_conf_warns_and_runs_on),
        cmocka_unit_test(test_prof_automatic_dumps),
        cmocka_unit_test(test_prof_leak_summary_at_exit),
        cmocka_unit_test(test_prof_leak_summary_is_unbiased),
        cmocka_unit_test(test_prof_leak_error_exits_with_1),
        cmocka_unit_test(test_prof_leak_without_final_warns),
        cmocka_unit_test(test_prof_interval_dumps_on_a_small_stack),
        cmocka_unit_test(test_prof_jeprof_reads_dump),
        cmocka_unit_test(test_prof_go_pprof_reads_pb),
        cmocka_unit_test(test_prof_pprof_thread_label),
        cmocka_unit_test(test_prof_reentrancy_every_allocation_sampled),
    };
    return cmocka_run_group_tests_name("prof", tests, setup, teardown);
}
