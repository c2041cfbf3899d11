/*
 * test_cli.c: the salloc command (tools/) end to end.  Builds nothing:
 *
 *   SALLOC_CMD    build/bin/salloc
 *   SALLOC_DEMO   build/bin/salloc-demo
 *   SALLOC_LIB    lib/libsalloc.so (absolute; "salloc run" preloads it)
 *   FIXTURES_DIR  shared/fixtures (default ../shared/fixtures, from the repo)
 *
 * Checked: "salloc run" on the demo writes a final dump and prints its
 * path; "salloc top" names the demo's sites with the leak on top, and on
 * jemalloc's own three_sites dump agrees with the jeprof outputs committed
 * beside it; "salloc flame" writes well-formed XML (xmllint, Debian
 * libxml2-utils, when installed) whose root is exactly as wide as its
 * children; "salloc diff" shows growth; missing, empty, malformed and
 * truncated dumps get a message and a non-zero exit, never a crash or hang.
 *
 * Each command runs under a 60 s limit; the demo is deterministic, and at
 * R = 16 KiB the leak (about 10 MiB in 7 KiB buffers, about 1500 samples)
 * cannot fall from first place by chance (the next site is half its size).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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

extern char **environ;

static char tmpdir[] = "/tmp/salloc_test_cli.XXXXXX";
static char demo_dump[4200]; /* the final dump of the demo, from setup */

struct run {
    int status; /* exit status, or 128 + signal */
    char out[1 << 16], err[1 << 16];
};

static const char *env_path(const char *name, const char *hint)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "%s is not set (%s; make test sets it)\n", name, hint);
        fail();
    }
    return v;
}

static const char *salloc_cmd(void) { return env_path("SALLOC_CMD", "path of build/bin/salloc"); }

static const char *fixtures(void)
{
    const char *d = getenv("FIXTURES_DIR");
    return d && *d ? d : "../shared/fixtures";
}

static void slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs argv (NULL-terminated) without salloc preloaded and without any
 * SALLOC_CONF, killing it after 60 s. */
static void run(struct run *r, char *const argv[])
{
    char out[4200], err[4200];
    snprintf(out, sizeof(out), "%s/out", tmpdir);
    snprintf(err, sizeof(err), "%s/err", tmpdir);
    char *env[512];
    int n = 0;
    for (char **e = environ; *e && n < 510; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "SALLOC_CONF=", 12) &&
            strncmp(*e, "MALLOC_CONF=", 12))
            env[n++] = *e;
    env[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    int status = 0;
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (waited >= 600) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("%s %s did not finish in 60 s (hang?)", argv[0], argv[1] ? argv[1] : "");
        }
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    slurp(out, r->out, sizeof(r->out));
    slurp(err, r->err, sizeof(r->err));
}

static bool have_program(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

static char *tmp_path(const char *name)
{
    static char p[4][4200];
    static int next;
    char *s = p[next++ % 4];
    snprintf(s, 4200, "%s/%s", tmpdir, name);
    return s;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The value column of "salloc top" for function fn, or -1; *rank gets its
 * 1-based row. */
static double top_value(const char *out, const char *fn, int *rank)
{
    int row = 0;
    const char *t = strstr(out, "function");
    for (const char *line = t ? strchr(t, '\n') : NULL; line && *++line; line = strchr(line, '\n')) {
        double v;
        char name[256];
        row++;
        if (sscanf(line, " %lf %*f%% %*f%% %255s", &v, name) == 2 && !strcmp(name, fn)) {
            if (rank)
                *rank = row;
            return v;
        }
    }
    return -1;
}

/* jeprof --text: "flat flat% sum% cum cum% name"; the flat column. */
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

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmpdir))
        return -1;
    if (!getenv("SALLOC_CMD") || !getenv("SALLOC_DEMO") || !getenv("SALLOC_LIB")) {
        fprintf(stderr, "SALLOC_CMD, SALLOC_DEMO and SALLOC_LIB must be set (make test sets them)\n");
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_cli_run_writes_final_dump(void **state)
{
    (void)state;
    static struct run r;
    const char *demo = env_path("SALLOC_DEMO", "path of build/bin/salloc-demo");
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-r", "16k", "-o", tmp_path("demo"), "--",
                            (char *)demo, NULL});
    if (r.status)
        fail_msg("salloc run exited %d:\n%s", r.status, r.err);
    assert_non_null(strstr(r.out, "leaked:")); /* the demo's own output passes through */
    /* The listing: "  <prefix>.<pid>.<seq>.f.heap" on stderr. */
    const char *f = strstr(r.err, ".f.heap");
    if (!f)
        fail_msg("salloc run printed no .f.heap path:\n%s", r.err);
    const char *start = f;
    while (start > r.err && start[-1] != ' ' && start[-1] != '\n')
        start--;
    size_t n = (size_t)(f + 7 - start);
    assert_true(n < sizeof(demo_dump));
    memcpy(demo_dump, start, n);
    demo_dump[n] = '\0';
    assert_int_equal(strncmp(demo_dump, tmpdir, strlen(tmpdir)), 0);
    struct stat st;
    if (stat(demo_dump, &st) || st.st_size == 0)
        fail_msg("%s is missing or empty", demo_dump);

    /* The program's exit status comes back. */
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-o", tmp_path("sh"), "--", "sh", "-c", "exit 7", NULL});
    assert_int_equal(r.status, 7);
}

/* --leaks: the program's summary of what it still holds (the demo leaks by
 * design); --leak-check: the same, and exit status 1; a program that
 * frees everything passes (status 0, no summary). */
static void test_cli_run_leak_check(void **state)
{
    (void)state;
    static struct run r;
    const char *demo = env_path("SALLOC_DEMO", "path of build/bin/salloc-demo");
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-r", "16k", "--leaks", "-o",
                            tmp_path("leaks"), "--", (char *)demo, NULL});
    if (r.status)
        fail_msg("salloc run --leaks exited %d:\n%s", r.status, r.err);
    assert_non_null(strstr(r.err, "<salloc>: Leak approximation summary: ~"));
    assert_non_null(strstr(r.err, "<salloc>: Run jeprof on \""));
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-r", "16k", "--leak-check", "-o",
                            tmp_path("leaks"), "--", (char *)demo, NULL});
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "<salloc>: Leak approximation summary: ~"));
    assert_non_null(strstr(r.err, "<salloc>: Exiting with error code because memory leaks were detected"));
    /* sh -c "exit 0" frees what it allocates, or nothing is sampled at
     * this rate: the check passes. */
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-r", "1g", "--leak-check", "-o",
                            tmp_path("leaks"), "--", "sh", "-c", "exit 0", NULL});
    if (r.status)
        fail_msg("salloc run --leak-check of a clean exit exited %d:\n%s", r.status, r.err);
    assert_null(strstr(r.err, "Leak approximation summary"));
}

/* A prefix is a path: "[1]" in it is not a glob bracket expression (the
 * dump was written, and the listing said there was none). */
static void test_cli_run_lists_dumps_of_any_prefix(void **state)
{
    (void)state;
    static struct run r;
    const char *demo = env_path("SALLOC_DEMO", "path of build/bin/salloc-demo");
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-o", tmp_path("odd[1]"), "--", (char *)demo, NULL});
    if (r.status)
        fail_msg("salloc run exited %d:\n%s", r.status, r.err);
    char want[4300];
    snprintf(want, sizeof(want), "  %s.", tmp_path("odd[1]"));
    if (!strstr(r.err, want) || !strstr(r.err, ".f.heap"))
        fail_msg("salloc run did not list the dump %s<pid>.0.f.heap:\n%s", want + 2, r.err);
}

/* A prof_format the user set does not change what run writes and lists:
 * heap_v2 text, which top reads.  With prof_format:pb the dump was a .pb
 * and run said the program "wrote no dump". */
static void test_cli_run_writes_text_whatever_the_format(void **state)
{
    (void)state;
    static struct run r;
    const char *demo = env_path("SALLOC_DEMO", "path of build/bin/salloc-demo");
    run(&r, (char *const[]){"env", "SALLOC_CONF=prof_format:pb", (char *)salloc_cmd(), "run", "-o",
                            tmp_path("pbconf"), "--", (char *)demo, NULL});
    if (r.status || !strstr(r.err, ".f.heap"))
        fail_msg("salloc run under prof_format:pb exited %d, listing no .f.heap:\n%s", r.status, r.err);
}

/* A library path LD_PRELOAD would split: said so, and the program not run
 * (it ran without salloc, and run said only that it wrote no dump). */
static void test_cli_run_refuses_a_library_path_preload_splits(void **state)
{
    (void)state;
    static struct run r;
    char lib[4200];
    snprintf(lib, sizeof(lib), "SALLOC_LIB=%s", tmp_path("a lib.so"));
    const char *real = env_path("SALLOC_LIB", "path of lib/libsalloc.so");
    assert_int_equal(symlink(real, lib + strlen("SALLOC_LIB=")), 0);
    run(&r, (char *const[]){"env", lib, (char *)salloc_cmd(), "run", "-o", tmp_path("spaced"), "--",
                            "true", NULL});
    if (r.status != 1 || !strstr(r.err, "holds a space or ':'"))
        fail_msg("salloc run with a library path holding a space exited %d:\n%s", r.status, r.err);
}

static void need_demo_dump(void)
{
    if (!demo_dump[0])
        fail_msg("no demo dump (test_cli_run_writes_final_dump failed)");
}

static void test_cli_top_names_demo_sites(void **state)
{
    (void)state;
    need_demo_dump();
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", "-n", "10", demo_dump, NULL});
    if (r.status)
        fail_msg("salloc top exited %d:\n%s", r.status, r.err);
    fprintf(stderr, "%s", r.out);
    int rank = 0;
    double leak = top_value(r.out, "request_buffer_alloc", &rank);
    if (leak < 0)
        fail_msg("the leak site request_buffer_alloc is not listed:\n%s", r.out);
    assert_int_equal(rank, 1);
    /* 1500 buffers of 7168 bytes are leaked; R = 16 KiB gives ~1500
     * samples, sd about 2.6%: 20% is far outside chance. */
    assert_true(fabs(leak - 1500 * 7168.0) < 0.2 * 1500 * 7168.0);
    assert_true(top_value(r.out, "word_node_new", NULL) > 0);
    assert_true(top_value(r.out, "record_payload_new", NULL) > 0);
    assert_non_null(strstr(r.out, "demo.c:"));
}

static void compare_with_jeprof(const char *dump, const char *jeprof_txt, const char *flag)
{
    char path[4200], jpath[4200];
    snprintf(path, sizeof(path), "%s/jemalloc/%s", fixtures(), dump);
    snprintf(jpath, sizeof(jpath), "%s/jemalloc/%s", fixtures(), jeprof_txt);
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "SKIP: %s not found (set FIXTURES_DIR)\n", path);
        skip();
    }
    size_t len;
    char *jeprof = read_all(jpath, &len);
    static struct run r;
    char *argv[8] = {(char *)salloc_cmd(), "top", "-n", "0", path, NULL, NULL};
    if (flag) {
        argv[4] = (char *)flag;
        argv[5] = path;
    }
    run(&r, argv);
    if (r.status)
        fail_msg("salloc top %s exited %d:\n%s", dump, r.status, r.err);
    fprintf(stderr, "%s", r.out);
    static const char *const sites[] = {"site_small", "site_medium", "site_large"};
    for (int i = 0; i < 3; i++) {
        double want = jeprof_flat(jeprof, sites[i]);
        double got = top_value(r.out, sites[i], NULL);
        assert_true(want > 0);
        if (got < 0)
            fail_msg("%s is not listed by salloc top %s", sites[i], dump);
        /* jeprof truncates, salloc rounds: the same number within 1. */
        if (fabs(got - want) > 1 + 1e-6 * want)
            fail_msg("%s: salloc top %.0f, jeprof %.0f", sites[i], got, want);
    }
    free(jeprof);
}

static void test_cli_top_matches_jeprof(void **state)
{
    (void)state;
    compare_with_jeprof("three_sites.heap", "three_sites.jeprof.inuse_space.txt", NULL);
    compare_with_jeprof("three_sites.heap", "three_sites.jeprof.inuse_objects.txt", "--objects");
    compare_with_jeprof("three_sites.accum.heap", "three_sites.accum.jeprof.alloc_space.txt", "--alloc");
}

static void test_cli_top_explains_missing_values(void **state)
{
    (void)state;
    char path[4200];
    snprintf(path, sizeof(path), "%s/jemalloc/three_sites.heap", fixtures());
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", "--alloc", path, NULL});
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "prof_accum"));
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", "--resident", path, NULL});
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "resident"));
}

/* The width of every rect with data-depth="depth", summed; *count of them. */
static double depth_width(const char *svg, int depth, int *count)
{
    char key[32];
    snprintf(key, sizeof(key), "data-depth=\"%d\"", depth);
    double sum = 0;
    *count = 0;
    for (const char *p = strstr(svg, key); p; p = strstr(p + 1, key)) {
        const char *w = strstr(p, "width=\"");
        const char *end = strchr(p, '>');
        assert_non_null(w);
        assert_true(w < end);
        sum += strtod(w + 7, NULL);
        (*count)++;
    }
    return sum;
}

static void test_cli_flame_is_wellformed(void **state)
{
    (void)state;
    need_demo_dump();
    static struct run r;
    const char *svg_path = tmp_path("heap.svg");
    run(&r, (char *const[]){(char *)salloc_cmd(), "flame", demo_dump, "-o", (char *)svg_path, NULL});
    if (r.status)
        fail_msg("salloc flame exited %d:\n%s", r.status, r.err);
    if (have_program("xmllint")) {
        run(&r, (char *const[]){"xmllint", "--noout", (char *)svg_path, NULL});
        if (r.status)
            fail_msg("xmllint rejects the SVG:\n%s", r.err);
    } else {
        fprintf(stderr, "SKIP (XML check only): xmllint not found (Debian package libxml2-utils)\n");
    }
    size_t len;
    char *svg = read_all(svg_path, &len);
    assert_non_null(strstr(svg, "<svg"));
    assert_non_null(strstr(svg, "</svg>"));
    int nroot, nkids;
    double root = depth_width(svg, 0, &nroot);
    double kids = depth_width(svg, 1, &nkids);
    assert_int_equal(nroot, 1);
    assert_true(nkids >= 2); /* main's stacks and the threads' */
    /* Widths are printed to 0.01 px and each child is rounded on its own. */
    if (fabs(root - kids) > 0.01 * (nkids + 1))
        fail_msg("root width %.2f, children %.2f", root, kids);
    for (const char *fn = "request_buffer_alloc"; fn; fn = NULL)
        assert_non_null(strstr(svg, fn));
    /* One tooltip per frame. */
    int titles = 0, rects = 0;
    for (const char *p = strstr(svg, "<title>"); p; p = strstr(p + 1, "<title>"))
        titles++;
    for (const char *p = strstr(svg, "data-depth="); p; p = strstr(p + 1, "data-depth="))
        rects++;
    assert_int_equal(titles, rects);
    free(svg);
}

/* -o naming something other than a regular file is written, not replaced:
 * a link to /dev/stdout (the command's stdout is a file here) stays a link
 * and the SVG reaches stdout; renamed over, /dev/null itself would become a
 * plain file when run as root. */
static void test_cli_flame_writes_through_links(void **state)
{
    (void)state;
    need_demo_dump();
    const char *link = tmp_path("stdout.svg");
    unlink(link);
    assert_int_equal(symlink("/dev/stdout", link), 0);
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), "flame", demo_dump, "-o", (char *)link, NULL});
    if (r.status)
        fail_msg("salloc flame -o <link to /dev/stdout> exited %d:\n%s", r.status, r.err);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    if (!S_ISLNK(st.st_mode))
        fail_msg("%s was replaced by a plain file", link);
    if (!strstr(r.out, "</svg>"))
        fail_msg("no SVG on standard output:\n%.200s", r.out);
    assert_int_equal(lstat(tmp_path("stdout.svg.tmp"), &st), -1);
}

/* three_sites.heap with site_large's 8 objects doubled, beside a link to
 * the fixture binary so that it symbolizes. */
static void test_cli_diff_shows_growth(void **state)
{
    (void)state;
    char path[4200], bin[4200];
    snprintf(path, sizeof(path), "%s/jemalloc/three_sites.heap", fixtures());
    snprintf(bin, sizeof(bin), "%s/jemalloc/three_sites", fixtures());
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "SKIP: %s not found (set FIXTURES_DIR)\n", path);
        skip();
    }
    char *abs_bin = realpath(bin, NULL);
    assert_non_null(abs_bin);
    unlink(tmp_path("three_sites"));
    assert_int_equal(symlink(abs_bin, tmp_path("three_sites")), 0);
    free(abs_bin);
    size_t len;
    char *text = read_all(path, &len);
    const char *from = "  t*: 8: 1048576 [0: 0]\n  t1: 8: 1048576 [0: 0]\n";
    const char *to = "  t*: 16: 2097152 [0: 0]\n  t1: 16: 2097152 [0: 0]\n";
    char *at = strstr(text, from);
    assert_non_null(at);
    char *grown = malloc(len + 64);
    size_t head = (size_t)(at - text);
    memcpy(grown, text, head);
    strcpy(grown + head, to);
    strcat(grown + head, at + strlen(from));
    write_file(tmp_path("old.heap"), text, len);
    write_file(tmp_path("new.heap"), grown, strlen(grown));
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), "diff", tmp_path("old.heap"), tmp_path("new.heap"), NULL});
    if (r.status)
        fail_msg("salloc diff exited %d:\n%s", r.status, r.err);
    fprintf(stderr, "%s", r.out);
    /* The first row after the column header is site_large, +1048576. */
    const char *row = strstr(r.out, "function\n");
    assert_non_null(row);
    double o, n, d;
    char name[256];
    assert_int_equal(sscanf(row + 9, " %lf %lf %lf %*s %255s", &o, &n, &d, name), 4);
    assert_string_equal(name, "site_large");
    assert_true(fabs(d - 1048576) < 1);
    assert_non_null(strstr(r.out, "change: +1048576"));
    free(text);
    free(grown);
}

/* With prof_accum a freed stack keeps its record, "0: 0 [n: s]": top's
 * live view and diff list no row for it (diff called it "new"), top
 * --alloc still does. */
static void test_cli_nothing_live_is_no_row(void **state)
{
    (void)state;
    const char dump[] = "heap_v2/1024\n  t*: 3: 300 [5: 500]\n"
                        "@ 0x1000\n  t*: 3: 300 [3: 300]\n"
                        "@ 0x2000\n  t*: 0: 0 [2: 200]\n";
    write_file(tmp_path("accum.heap"), dump, strlen(dump));
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", "-n", "0", tmp_path("accum.heap"), NULL});
    assert_int_equal(r.status, 0);
    if (!strstr(r.out, "0x1000") || strstr(r.out, "0x2000") || !strstr(r.out, "Top 1 of 1 sites"))
        fail_msg("salloc top lists a site with no live bytes:\n%s", r.out);
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", "--alloc", tmp_path("accum.heap"), NULL});
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "0x2000"));
    run(&r, (char *const[]){(char *)salloc_cmd(), "diff", tmp_path("accum.heap"), tmp_path("accum.heap"), NULL});
    assert_int_equal(r.status, 0);
    if (!strstr(r.out, "0x1000") || strstr(r.out, "0x2000"))
        fail_msg("salloc diff lists a function with no live bytes:\n%s", r.out);
}

/* A fragmentation dump's bytes are free span space, and a peak dump has
 * no residency: top and flame say what they show.  Both were called live
 * heap ("inuse space"), and --resident on a peak dump blamed jemalloc or
 * an unreadable pagemap. */
static void test_cli_names_fragmentation_and_peak_dumps(void **state)
{
    (void)state;
    const char frag[] = "heap_v2/1024\n"
                        "# salloc: fragmentation profile: bytes are the free span space each stack keeps alive\n"
                        "  t*: 3: 300 [0: 0]\n@ 0x1000\n  t*: 3: 300 [0: 0]\n";
    const char peak[] = "heap_v2/1024\n# salloc: peak profile: the live samples at the last heap peak\n"
                        "  t*: 3: 300 [0: 0]\n@ 0x1000\n  t*: 3: 300 [0: 0]\n";
    write_file(tmp_path("f.heap"), frag, strlen(frag));
    write_file(tmp_path("p.heap"), peak, strlen(peak));
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", tmp_path("f.heap"), NULL});
    assert_int_equal(r.status, 0);
    if (!strstr(r.out, "Total fragmentation space"))
        fail_msg("top of a fragmentation dump:\n%s", r.out);
    const char *svg = tmp_path("f.svg");
    run(&r, (char *const[]){(char *)salloc_cmd(), "flame", tmp_path("f.heap"), "-o", (char *)svg, NULL});
    assert_int_equal(r.status, 0);
    static char text[1 << 16];
    slurp(svg, text, sizeof(text));
    if (!strstr(text, "salloc: fragmentation") || strstr(text, "live heap"))
        fail_msg("flame of a fragmentation dump is titled otherwise:\n%.400s", text);
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", "--resident", tmp_path("p.heap"), NULL});
    assert_int_equal(r.status, 1);
    if (!strstr(r.err, "a peak dump carries no resident bytes"))
        fail_msg("top --resident of a peak dump:\n%s", r.err);
}

/* A failing command: non-zero exit, a message, no signal. */
static void expect_failure(const char *what, char *const argv[])
{
    static struct run r;
    run(&r, argv);
    if (r.status == 0 || r.status >= 128)
        fail_msg("%s: salloc %s exited %d (want 1 or 2):\n%s", what, argv[1], r.status, r.err);
    if (!strstr(r.err, "salloc"))
        fail_msg("%s: salloc %s printed no message", what, argv[1]);
}

static void expect_all_fail(const char *what, const char *dump)
{
    char *cmd = (char *)salloc_cmd();
    char *good = demo_dump;
    expect_failure(what, (char *const[]){cmd, "top", (char *)dump, NULL});
    expect_failure(what, (char *const[]){cmd, "flame", (char *)dump, "-o", tmp_path("bad.svg"), NULL});
    expect_failure(what, (char *const[]){cmd, "diff", (char *)dump, good, NULL});
    expect_failure(what, (char *const[]){cmd, "diff", good, (char *)dump, NULL});
}

static void test_cli_rejects_bad_dumps(void **state)
{
    (void)state;
    need_demo_dump();
    expect_all_fail("missing file", tmp_path("no-such.heap"));
    expect_all_fail("directory", tmpdir);
    write_file(tmp_path("empty.heap"), "", 0);
    expect_all_fail("empty file", tmp_path("empty.heap"));
    const char garbage[] = "this is not a heap profile\n\x01\x02\x03";
    write_file(tmp_path("garbage.heap"), garbage, sizeof(garbage));
    expect_all_fail("garbage", tmp_path("garbage.heap"));
    const char bad_addr[] = "heap_v2/1024\n  t*: 1: 2 [0: 0]\n@ 0x40 zzz\n  t*: 1: 2 [0: 0]\n";
    write_file(tmp_path("bad_addr.heap"), bad_addr, strlen(bad_addr));
    expect_all_fail("bad address", tmp_path("bad_addr.heap"));
    const char bad_count[] = "heap_v2/1024\n  t*: 1: 2 [0: 0]\n@ 0x40\n  t*: 1: -2 [0: 0]\n";
    write_file(tmp_path("bad_count.heap"), bad_count, strlen(bad_count));
    expect_all_fail("negative count", tmp_path("bad_count.heap"));
    const char no_counts[] = "heap_v2/1024\n  t*: 1: 2 [0: 0]\n@ 0x40\n";
    write_file(tmp_path("no_counts.heap"), no_counts, strlen(no_counts));
    expect_all_fail("record without counts", tmp_path("no_counts.heap"));

    /* The real dump cut inside a line, at several places from the header
     * to the memory map. */
    size_t len;
    char *text = read_all(demo_dump, &len);
    static const double at[] = {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        size_t off = (size_t)(at[i] * (double)len);
        while (off > 1 && (text[off - 1] == '\n' || text[off] == '\n'))
            off--; /* mid-line: a cut at a line end can be a valid, shorter dump */
        char what[64];
        snprintf(what, sizeof(what), "truncated at %zu of %zu bytes", off, len);
        write_file(tmp_path("cut.heap"), text, off);
        expect_all_fail(what, tmp_path("cut.heap"));
    }
    write_file(tmp_path("cut.heap"), text, len - 1); /* the final newline */
    expect_all_fail("missing final newline", tmp_path("cut.heap"));
    free(text);
}

static void test_cli_usage(void **state)
{
    (void)state;
    static struct run r;
    run(&r, (char *const[]){(char *)salloc_cmd(), NULL});
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "usage"));
    run(&r, (char *const[]){(char *)salloc_cmd(), "--help", NULL});
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "salloc run"));
    assert_non_null(strstr(r.out, "salloc top"));
    run(&r, (char *const[]){(char *)salloc_cmd(), "frobnicate", NULL});
    assert_int_equal(r.status, 2);
    run(&r, (char *const[]){(char *)salloc_cmd(), "top", NULL});
    assert_int_equal(r.status, 2);
    run(&r, (char *const[]){(char *)salloc_cmd(), "run", "-r", "lots", "--", "true", NULL});
    assert_int_equal(r.status, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_run_writes_final_dump),
        cmocka_unit_test(test_cli_run_lists_dumps_of_any_prefix),
        cmocka_unit_test(test_cli_run_leak_check),
        cmocka_unit_test(test_cli_run_writes_text_whatever_the_format),
        cmocka_unit_test(test_cli_run_refuses_a_library_path_preload_splits),
        cmocka_unit_test(test_cli_top_names_demo_sites),
        cmocka_unit_test(test_cli_top_matches_jeprof),
        cmocka_unit_test(test_cli_top_explains_missing_values),
        cmocka_unit_test(test_cli_flame_is_wellformed),
        cmocka_unit_test(test_cli_flame_writes_through_links),
        cmocka_unit_test(test_cli_diff_shows_growth),
        cmocka_unit_test(test_cli_nothing_live_is_no_row),
        cmocka_unit_test(test_cli_names_fragmentation_and_peak_dumps),
        cmocka_unit_test(test_cli_rejects_bad_dumps),
        cmocka_unit_test(test_cli_usage),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
