/*
 * test_real_programs.c: real programs must behave the same with the
 * allocator under test preloaded as without it.  Each test runs a program
 * (python3's own test suite, git, gcc, our C++ program cxx_threads) once
 * plain and once with LD_PRELOAD=$SALLOC_LIB, and compares exit status and
 * output.
 *
 * SALLOC_LIB must be the absolute path of the library under test (the test
 * fails without it).  CXX_THREADS_BIN names cxx_threads (default
 * test/bin/cxx_threads).  PYTHON3 may name the python to use (default
 * /usr/bin/python3, else python3 from PATH).  A test is skipped only when
 * its program is missing.
 *
 * Run with SALLOC_CONF=prof_unwind:check (make test's heavy-sampling
 * pass does), any disagreement salloc reports between its stack walker
 * and backtrace() fails the test.
 *
 * LD_PRELOAD is set only in the children's environments; an LD_PRELOAD in
 * this process's own environment (make test sets one) is removed from the
 * "plain" runs so that they really run without the library.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

extern char **environ;

/* ------------------------------------------------------------------ */
/* Small helpers. */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* malloc'd printf; aborts the test when out of memory. */
__attribute__((format(printf, 1, 2)))
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        fail_msg("out of memory");
    return s;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fail_msg("cannot create %s: %s", path, strerror(errno));
    fputs(text, f);
    if (fclose(f) != 0)
        fail_msg("cannot write %s: %s", path, strerror(errno));
}

/* The whole file, NUL-terminated; *len gets its size.  NULL if unreadable. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (cap - n - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        fail_msg("out of memory reading %s", path);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir)
{
    nftw(dir, remove_entry, 32, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------------ */
/* The library under test and the programs. */

/* $SALLOC_LIB, checked; fails the test with a clear message when unusable. */
static const char *salloc_lib(void)
{
    const char *lib = getenv("SALLOC_LIB");
    if (!lib || !*lib) {
        fprintf(stderr, "SALLOC_LIB is not set: set it to the absolute path of the "
                "allocator library to test (e.g. $PWD/lib/libsalloc.so)\n");
        fail_msg("SALLOC_LIB is not set");
    }
    if (lib[0] != '/' || access(lib, R_OK) != 0) {
        fprintf(stderr, "SALLOC_LIB=%s: must be an absolute path to a readable file\n", lib);
        fail_msg("SALLOC_LIB=%s is not an absolute path to a readable file", lib);
    }
    return lib;
}

/* Full path of an executable: `name` itself when it has a '/', else the
 * first match on PATH.  Returns a malloc'd string or NULL. */
static char *find_program(const char *name)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0 ? realpath(name, NULL) : NULL;
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "/usr/bin:/bin"), *save = NULL;
    char *found = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found;
         dir = strtok_r(NULL, ":", &save)) {
        char *cand = xasprintf("%s/%s", *dir ? dir : ".", name);
        if (access(cand, X_OK) == 0)
            found = cand;
        else
            free(cand);
    }
    free(copy);
    return found;
}

/* Like find_program, but skips the test (with a message naming the
 * Debian package) when the program is missing. */
#define REQUIRE_PROGRAM(var, name, package)                                   \
    do {                                                                      \
        (var) = find_program(name);                                           \
        if (!(var)) {                                                         \
            fprintf(stderr, "SKIP: program '%s' not found (Debian package %s)\n", \
                    (name), (package));                                       \
            skip();                                                           \
        }                                                                     \
    } while (0)

/* ------------------------------------------------------------------ */
/* Running a program: fork/exec with its own environment, stdout and
 * stderr in files, a time limit, killed with its process group after it. */

typedef struct {
    int status;        /* wait status; meaningful unless timed_out */
    bool timed_out;
    char *out, *err;   /* captured output, NUL-terminated */
    size_t out_len, err_len;
    double secs;
} run_t;

/* The child's environment: ours without LD_PRELOAD and without the names
 * `extra` sets ("NAME=value" strings), then `extra`, then LD_PRELOAD when
 * `preload` is given.  The array is malloc'd; its strings are borrowed,
 * except the LD_PRELOAD one, left in *preload_str for the caller to free. */
static char **child_env(const char *preload, char *const *extra, char **preload_str)
{
    size_t n_env = 0, n_extra = 0;
    while (environ[n_env])
        n_env++;
    while (extra && extra[n_extra])
        n_extra++;
    char **env = calloc(n_env + n_extra + 2, sizeof *env);
    if (!env)
        fail_msg("out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t name_len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool drop = name_len == 10 && strncmp(environ[i], "LD_PRELOAD", 10) == 0;
        for (size_t j = 0; j < n_extra && !drop; j++)
            drop = strncmp(environ[i], extra[j], name_len + 1) == 0;
        if (!drop)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < n_extra; j++)
        env[k++] = extra[j];
    *preload_str = NULL;
    if (preload)
        env[k++] = *preload_str = xasprintf("LD_PRELOAD=%s", preload);
    env[k] = NULL;
    return env;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
__attribute__((noreturn))
static void child_exec(char *const argv[], char **env, const char *cwd, int out, int err)
{
    setpgid(0, 0);
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(126);
    if (cwd && chdir(cwd) != 0)
        _exit(126);
    execve(argv[0], argv, env);
    _exit(127);
}

/* Waits for pid until `deadline`; kills its process group after that. */
static void wait_or_kill(pid_t pid, double deadline, run_t *r)
{
    for (;;) {
        pid_t got = waitpid(pid, &r->status, WNOHANG);
        if (got == pid)
            return;
        if (got < 0 && errno != EINTR) {
            r->status = -1;
            return;
        }
        if (now_s() > deadline) {
            r->timed_out = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &r->status, 0);
            return;
        }
        sleep_ms(5);
    }
}

/* A temporary file under `dir` for captured output; fd returned. */
static int capture_file(const char *dir, const char *what, char **path)
{
    *path = xasprintf("%s/.%s.XXXXXX", dir, what);
    int fd = mkstemp(*path);
    if (fd < 0)
        fail_msg("mkstemp %s: %s", *path, strerror(errno));
    return fd;
}

/* Runs argv (argv[0] a full path) in `cwd` with `extra` environment, with
 * `preload` in LD_PRELOAD when not NULL.  Output goes to temp files in
 * `tmp`, read back into r. */
static void run_program(char *const argv[], const char *cwd, const char *tmp,
                        const char *preload, char *const *extra, int timeout_s, run_t *r)
{
    memset(r, 0, sizeof *r);
    char *out_path, *err_path, *preload_str;
    int out = capture_file(tmp, "stdout", &out_path);
    int err = capture_file(tmp, "stderr", &err_path);
    char **env = child_env(preload, extra, &preload_str);
    double start = now_s();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0)
        child_exec(argv, env, cwd, out, err);
    setpgid(pid, pid);   /* also here: no race with the kill below */
    wait_or_kill(pid, start + timeout_s, r);
    r->secs = now_s() - start;
    close(out);
    close(err);
    r->out = read_file(out_path, &r->out_len);
    r->err = read_file(err_path, &r->err_len);
    unlink(out_path);
    unlink(err_path);
    free(out_path);
    free(err_path);
    free(preload_str);
    free(env);
    if (!r->out || !r->err)
        fail_msg("cannot read captured output of %s", argv[0]);
    /* Under SALLOC_CONF=...,prof_unwind:check salloc compares its stack
     * walker with backtrace() on every sample and reports disagreements. */
    const char *differ = preload ? strstr(r->err, "prof_unwind:check: stacks differ") : NULL;
    if (differ)
        fail_msg("%s: salloc's stack walker disagreed with backtrace(): %.300s", argv[0], differ);
}

static void run_free(run_t *r)
{
    free(r->out);
    free(r->err);
}

/* Our own program `name` in TEST_BIN_DIR (default test/bin), by its full
 * path (malloc'd); missing means the build is broken: the test fails. */
static char *own_program(const char *name)
{
    const char *dir = getenv("TEST_BIN_DIR");
    char *bin = xasprintf("%s/%s", dir && *dir ? dir : "test/bin", name);
    char *path = realpath(bin, NULL);
    if (!path || access(path, X_OK) != 0)
        fail_msg("%s not found at %s (make test/bin/%s)", name, bin, name);
    free(bin);
    return path;
}

/* The last `n` bytes of s, for messages. */
static const char *tail(const char *s, size_t len, size_t n)
{
    return len > n ? s + len - n : s;
}

/* Fails unless the run exited 0 in time; shows its stderr's tail. */
static void expect_success(const char *what, const run_t *r)
{
    if (!r->timed_out && r->status != -1 && WIFEXITED(r->status) &&
        WEXITSTATUS(r->status) == 0)
        return;
    fprintf(stderr, "%s: %s\n--- stdout (tail) ---\n%s\n--- stderr (tail) ---\n%s\n",
            what,
            r->timed_out ? "timed out" : "did not exit with status 0",
            tail(r->out, r->out_len, 2000), tail(r->err, r->err_len, 2000));
    if (r->timed_out)
        fail_msg("%s: timed out after %.0f s", what, r->secs);
    if (r->status != -1 && WIFSIGNALED(r->status))
        fail_msg("%s: killed by signal %d", what, WTERMSIG(r->status));
    fail_msg("%s: exit status %d", what,
             r->status != -1 && WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1);
}

/* Runs argv (in `tmp`, with `extra` environment) plainly and with `lib`
 * preloaded: both must exit 0 within `timeout_s`. */
static void run_plain_and_preloaded(char *const argv[], const char *tmp, const char *lib,
                                    char *const *extra, int timeout_s, run_t *plain, run_t *pre)
{
    run_program(argv, tmp, tmp, NULL, extra, timeout_s, plain);
    run_program(argv, tmp, tmp, lib, extra, timeout_s, pre);
    char what[256];
    snprintf(what, sizeof(what), "%s (plain)", argv[0]);
    expect_success(what, plain);
    snprintf(what, sizeof(what), "%s (preload)", argv[0]);
    expect_success(what, pre);
}

/* Prints the first line where a and b differ. */
static void show_first_difference(const char *a, const char *b)
{
    size_t line = 1, i = 0;
    for (; a[i] && a[i] == b[i]; i++)
        if (a[i] == '\n')
            line++;
    size_t start = i;
    while (start > 0 && a[start - 1] != '\n')
        start--;
    fprintf(stderr, "first difference at line %zu:\n  plain:   %.200s\n  preload: %.200s\n",
            line, a + start, b + start);
}

/* Fails unless both runs printed the same stdout. */
static void expect_same_stdout(const char *what, const run_t *plain, const run_t *pre)
{
    if (plain->out_len == pre->out_len && memcmp(plain->out, pre->out, pre->out_len) == 0)
        return;
    fprintf(stderr, "%s: stdout differs with LD_PRELOAD (%zu vs %zu bytes)\n", what,
            plain->out_len, pre->out_len);
    show_first_difference(plain->out, pre->out);
    fail_msg("%s: output differs with the allocator preloaded", what);
}

/* ------------------------------------------------------------------ */
/* Per-test temporary directory (cmocka state). */

static int tmpdir_setup(void **state)
{
    char tmpl[] = "/tmp/salloc-integ.XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir)
        return -1;
    *state = strdup(dir);
    return *state ? 0 : -1;
}

static int tmpdir_teardown(void **state)
{
    remove_tree(*state);
    free(*state);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The preload really takes effect, and only where it is asked for. */

static void test_real_programs_preload_reaches_only_children(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    char *cat;
    REQUIRE_PROGRAM(cat, "cat", "coreutils");
    char *real = realpath(lib, NULL);
    assert_non_null(real);
    char *argv[] = { cat, "/proc/self/maps", NULL };
    run_t plain, pre;
    run_program(argv, tmp, tmp, NULL, NULL, 30, &plain);
    run_program(argv, tmp, tmp, lib, NULL, 30, &pre);
    expect_success("cat (plain)", &plain);
    expect_success("cat (preload)", &pre);
    if (!strstr(pre.out, real))
        fail_msg("%s is not mapped in a child run with LD_PRELOAD=%s", real, lib);
    if (strstr(plain.out, real))
        fail_msg("%s is mapped in a child run without LD_PRELOAD", real);
    run_free(&plain);
    run_free(&pre);
    free(real);
    free(cat);
}

/* ------------------------------------------------------------------ */
/* python3 runs part of its own test suite: dicts, lists, sets, strings,
 * JSON, regexes, pickling, GC, weakrefs, threads. */

static char *find_python(void)
{
    const char *env = getenv("PYTHON3");
    if (env && *env)
        return find_program(env);
    if (access("/usr/bin/python3", X_OK) == 0)
        return strdup("/usr/bin/python3");
    return find_program("python3");
}

static void test_real_programs_python_test_suite(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    char *py = find_python();
    if (!py) {
        fprintf(stderr, "SKIP: program 'python3' not found (Debian package python3)\n");
        skip();
    }
    char *probe[] = { py, "-c", "import test.test_dict, test.test_json", NULL };
    run_t r;
    run_program(probe, tmp, tmp, NULL, NULL, 60, &r);
    bool have_suite = !r.timed_out && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
    run_free(&r);
    if (!have_suite) {
        fprintf(stderr, "SKIP: %s has no test suite (Debian package libpython3.11-testsuite)\n", py);
        skip();
    }
    /* -i: string_tests' test_find_periodic_pattern draws random patterns
     * and texts, and its reference search gives -1 for an empty pattern
     * in an empty text, where find() gives 0: about once in 10^4 runs of
     * these modules it draws both empty and fails, with or without salloc
     * (a CI run failed so, in the plain run). */
    char *argv[] = { py, "-m", "test", "-q", "-j2", "-i", "test_find_periodic_pattern",
                     "test_dict", "test_list", "test_set", "test_unicode", "test_json",
                     "test_re", "test_collections", "test_deque", "test_bytes",
                     "test_gc", "test_sort", "test_thread", "test_heapq", NULL };
    char *extra[] = { "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0", NULL };
    run_t plain, pre;
    run_program(argv, tmp, tmp, NULL, extra, 300, &plain);
    run_program(argv, tmp, tmp, lib, extra, 300, &pre);
    fprintf(stderr, "python3 -m test: %.1f s plain, %.1f s preloaded\n", plain.secs, pre.secs);
    expect_success("python3 -m test (plain)", &plain);
    expect_success("python3 -m test (preload)", &pre);
    assert_non_null(strstr(plain.out, "SUCCESS"));
    if (!strstr(pre.out, "SUCCESS"))
        fail_msg("python3 -m test with LD_PRELOAD did not report SUCCESS");
    run_free(&plain);
    run_free(&pre);
    free(py);
}

/* ------------------------------------------------------------------ */
/* git: the same history built twice, plain and preloaded, must have the
 * same hashes, logs, diffs and objects, before and after gc. */

#define GIT_FILES 300

/* Writes the work tree's files for `version` (0 initial, 1 feature branch,
 * 2 main branch); content is a deterministic function of index and version. */
static void git_write_files(const char *repo, int version)
{
    for (int d = 0; d < 10; d++) {
        char *dir = xasprintf("%s/dir%02d", repo, d);
        mkdir(dir, 0755);
        free(dir);
    }
    for (int i = 0; i < GIT_FILES + 30; i++) {
        bool exists = i < GIT_FILES || version == 1;           /* feature adds 30 */
        bool deleted = version == 1 && i % 13 == 5;            /* and removes some */
        bool feature_touches = i % 7 == 0 || i % 13 == 5;    /* main keeps off them: */
        bool changed = (version == 1 && i % 7 == 0) ||         /* the merge is clean */
                       (version == 2 && i % 11 == 3 && !feature_touches);
        char *path = xasprintf("%s/dir%02d/file%03d.txt", repo, i % 10, i);
        if (!exists || deleted) {
            unlink(path);
            free(path);
            continue;
        }
        FILE *f = fopen(path, "w");
        if (!f)
            fail_msg("cannot create %s", path);
        unsigned x = (unsigned)i * 2654435761u;
        for (int line = 0; line < 20 + i % 50; line++) {
            x = x * 1103515245u + 12345u;
            fprintf(f, "file %d line %d value %u%s\n", i, line, x >> 8,
                    changed && line % 5 == 0 ? (version == 1 ? " feature" : " main") : "");
        }
        fclose(f);
        free(path);
    }
}

typedef struct {
    const char *tmp, *lib;
    char *git;
    char *plain_repo, *pre_repo;
} git_ctx_t;

/* Runs `git args...` (NULL-terminated) in both repositories; both must
 * succeed.  When `compare` is set their stdouts must be equal. */
static void git_both(git_ctx_t *c, bool compare, const char *const *args)
{
    char *argv[16] = { c->git };
    size_t n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    char *home = xasprintf("HOME=%s", c->tmp), *xdg = xasprintf("XDG_CONFIG_HOME=%s", c->tmp);
    char *extra[] = {
        "GIT_AUTHOR_NAME=Salloc Test", "GIT_AUTHOR_EMAIL=test@salloc.invalid",
        "GIT_AUTHOR_DATE=2024-01-02T03:04:05+00:00",
        "GIT_COMMITTER_NAME=Salloc Test", "GIT_COMMITTER_EMAIL=test@salloc.invalid",
        "GIT_COMMITTER_DATE=2024-01-02T03:04:05+00:00",
        "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_PAGER=cat",
        "PAGER=cat", "LC_ALL=C", "TZ=UTC", home, xdg, NULL };
    run_t plain, pre;
    char what[160];
    snprintf(what, sizeof what, "git %s %s", args[0], args[1] ? args[1] : "");
    run_program(argv, c->plain_repo, c->tmp, NULL, extra, 120, &plain);
    run_program(argv, c->pre_repo, c->tmp, c->lib, extra, 120, &pre);
    expect_success(what, &plain);
    expect_success(what, &pre);
    if (compare)
        expect_same_stdout(what, &plain, &pre);
    run_free(&plain);
    run_free(&pre);
    free(home);
    free(xdg);
}

#define GIT(c, compare, ...) git_both((c), (compare), (const char *const[]){ __VA_ARGS__, NULL })

static void git_write_both(git_ctx_t *c, int version)
{
    git_write_files(c->plain_repo, version);
    git_write_files(c->pre_repo, version);
}

static void git_commit_both(git_ctx_t *c, const char *message)
{
    GIT(c, true, "add", "-A");
    GIT(c, true, "commit", "-q", "-m", message);
}

/* Everything that must be identical: history, trees, diffs, objects. */
static void git_compare_state(git_ctx_t *c)
{
    GIT(c, true, "rev-parse", "HEAD", "main", "feature");
    GIT(c, true, "log", "--graph", "--stat", "--format=%H %P %an %ad %s");
    GIT(c, true, "diff", "main~1", "feature");
    GIT(c, true, "diff", "--stat", "HEAD~1", "HEAD");
    GIT(c, true, "ls-tree", "-r", "HEAD");
    GIT(c, true, "status", "--porcelain");
    GIT(c, true, "cat-file", "--batch-all-objects", "--batch-check");
}

static void test_real_programs_git(void **state)
{
    git_ctx_t c = { .tmp = *state, .lib = salloc_lib() };
    REQUIRE_PROGRAM(c.git, "git", "git");
    c.plain_repo = xasprintf("%s/plain", c.tmp);
    c.pre_repo = xasprintf("%s/preload", c.tmp);
    assert_int_equal(mkdir(c.plain_repo, 0755), 0);
    assert_int_equal(mkdir(c.pre_repo, 0755), 0);
    double start = now_s();

    GIT(&c, true, "init", "-q", "-b", "main");
    git_write_both(&c, 0);
    git_commit_both(&c, "initial import");
    GIT(&c, true, "checkout", "-q", "-b", "feature");
    git_write_both(&c, 1);
    git_commit_both(&c, "feature work");
    GIT(&c, true, "checkout", "-q", "main");
    git_write_both(&c, 2);
    git_commit_both(&c, "main work");
    GIT(&c, true, "merge", "-q", "--no-edit", "feature");
    git_compare_state(&c);
    GIT(&c, true, "gc", "-q", "--aggressive");
    GIT(&c, true, "fsck", "--full", "--no-progress");
    git_compare_state(&c);

    fprintf(stderr, "git: %.1f s for both repositories\n", now_s() - start);
    free(c.plain_repo);
    free(c.pre_repo);
    free(c.git);
}

/* ------------------------------------------------------------------ */
/* gcc: compiling under the preload gives the same object file, and the
 * program built that way prints the same thing. */

/* A C program with many functions, so that cc1 has real work to do. */
static char *gcc_source(void)
{
    size_t cap = 1 << 20, n = 0;
    char *src = malloc(cap);
    assert_non_null(src);
    n += (size_t)snprintf(src + n, cap - n,
                          "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
                          "static int cmp(const void *a, const void *b)\n"
                          "{ unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;"
                          " return (x > y) - (x < y); }\n");
    for (int f = 0; f < 150; f++)
        n += (size_t)snprintf(src + n, cap - n,
                              "static unsigned f%d(unsigned x)\n{\n"
                              "    unsigned a[64];\n"
                              "    for (int i = 0; i < 64; i++)\n"
                              "        a[i] = x = x * %uu + %du;\n"
                              "    qsort(a, 64, sizeof a[0], cmp);\n"
                              "    switch (x %% 5) {\n"
                              "    case 0: return a[%d] ^ %du;\n"
                              "    case 1: return a[%d] + x;\n"
                              "    case 2: return (a[0] << %d) | (a[63] >> 3);\n"
                              "    default: return a[x %% 64] * %du;\n"
                              "    }\n}\n",
                              f, 1103515245u + 2u * (unsigned)f, 12345 + f, f % 64,
                              f * 7, (f * 3) % 64, f % 31, f + 3);
    n += (size_t)snprintf(src + n, cap - n,
                          "int main(void)\n{\n    unsigned h = 1, s = 0;\n");
    for (int f = 0; f < 150; f++)
        n += (size_t)snprintf(src + n, cap - n,
                              "    h = f%d(h) ^ (h >> 7); s += h;\n", f);
    n += (size_t)snprintf(src + n, cap - n,
                          "    char *buf = malloc(1 << 20);\n"
                          "    memset(buf, (int)(h & 0xff), 1 << 20);\n"
                          "    for (int i = 0; i < (1 << 20); i += 4096) s += (unsigned char)buf[i];\n"
                          "    free(buf);\n"
                          "    printf(\"h=%%08x s=%%08x\\n\", h, s);\n    return 0;\n}\n");
    assert_true(n < cap - 1);
    return src;
}

/* gcc -O2 -g compile then link in `tmp`, preloaded when `lib` is set. */
static void gcc_build(const char *gcc, const char *tmp, const char *lib,
                      const char *obj, const char *exe, double *secs)
{
    char *compile[] = { (char *)gcc, "-O2", "-g", "-c", "prog.c", "-o", (char *)obj, NULL };
    char *link[] = { (char *)gcc, "-O2", (char *)obj, "-o", (char *)exe, NULL };
    char *extra[] = { "LC_ALL=C", NULL };
    run_t r;
    run_program(compile, tmp, tmp, lib, extra, 300, &r);
    *secs = r.secs;
    expect_success(lib ? "gcc -c (preload)" : "gcc -c (plain)", &r);
    run_free(&r);
    run_program(link, tmp, tmp, lib, extra, 120, &r);
    expect_success(lib ? "gcc link (preload)" : "gcc link (plain)", &r);
    run_free(&r);
}

static void test_real_programs_gcc(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    char *gcc;
    REQUIRE_PROGRAM(gcc, "gcc", "gcc");
    char *src = gcc_source(), *src_path = xasprintf("%s/prog.c", tmp);
    write_file(src_path, src);
    double t_plain, t_pre;
    gcc_build(gcc, tmp, NULL, "plain.o", "plain", &t_plain);
    gcc_build(gcc, tmp, lib, "preload.o", "preload", &t_pre);
    fprintf(stderr, "gcc -O2 -g -c: %.1f s plain, %.1f s preloaded\n", t_plain, t_pre);

    /* The object files must be identical, byte for byte (what cmp checks). */
    char *po = xasprintf("%s/plain.o", tmp), *qo = xasprintf("%s/preload.o", tmp);
    size_t plen, qlen;
    char *pbytes = read_file(po, &plen), *qbytes = read_file(qo, &qlen);
    assert_non_null(pbytes);
    assert_non_null(qbytes);
    if (plen != qlen || memcmp(pbytes, qbytes, plen) != 0)
        fail_msg("gcc under LD_PRELOAD produced a different object file (%zu vs %zu bytes)",
                 plen, qlen);

    /* Both programs, and the preload-built one run preloaded, agree. */
    char *pexe = xasprintf("%s/plain", tmp), *qexe = xasprintf("%s/preload", tmp);
    char *argv_p[] = { pexe, NULL }, *argv_q[] = { qexe, NULL };
    run_t rp, rq, rqq;
    run_program(argv_p, tmp, tmp, NULL, NULL, 60, &rp);
    run_program(argv_q, tmp, tmp, NULL, NULL, 60, &rq);
    run_program(argv_q, tmp, tmp, lib, NULL, 60, &rqq);
    expect_success("program built plain", &rp);
    expect_success("program built preloaded", &rq);
    expect_success("program built preloaded, run preloaded", &rqq);
    expect_same_stdout("program built with gcc", &rp, &rq);
    expect_same_stdout("program built with gcc, run preloaded", &rp, &rqq);
    assert_non_null(strstr(rp.out, "h="));
    run_free(&rp);
    run_free(&rq);
    run_free(&rqq);
    free(pexe), free(qexe), free(po), free(qo), free(pbytes), free(qbytes);
    free(src), free(src_path), free(gcc);
}

/* ------------------------------------------------------------------ */
/* cxx_threads: our threaded C++ program prints the same checksums. */

static void test_real_programs_cxx_threads(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    const char *bin = getenv("CXX_THREADS_BIN");
    if (!bin || !*bin)
        bin = "test/bin/cxx_threads";
    char *path = realpath(bin, NULL);
    if (!path || access(path, X_OK) != 0) {
        /* Our own program: missing means the build is broken, not skipped. */
        fprintf(stderr, "cxx_threads not found at %s (build it: make test/bin/cxx_threads, "
                "or set CXX_THREADS_BIN)\n", bin);
        fail_msg("cxx_threads not found at %s", bin);
    }
    char *argv[] = { path, NULL };
    run_t plain, pre;
    run_program(argv, tmp, tmp, NULL, NULL, 120, &plain);
    run_program(argv, tmp, tmp, lib, NULL, 120, &pre);
    fprintf(stderr, "cxx_threads: %.1f s plain, %.1f s preloaded\n", plain.secs, pre.secs);
    expect_success("cxx_threads (plain)", &plain);
    expect_success("cxx_threads (preload)", &pre);
    assert_non_null(strstr(plain.out, "total: "));
    expect_same_stdout("cxx_threads", &plain, &pre);
    run_free(&plain);
    run_free(&pre);
    free(path);
}

/* ------------------------------------------------------------------ */
/* fork_handlers: fork handlers that allocate, registered before salloc's
 * (lock.h, sa_in_fork).  They once waited forever for the locks salloc's
 * prepare handler had taken; and, once they allocated, for the background
 * thread's lock when they read the statistics (background.c). */

static void test_real_programs_fork_handlers_allocate(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    char *path = own_program("fork_handlers");
    char *argv[] = { path, NULL };
    run_t plain, pre;
    run_plain_and_preloaded(argv, tmp, lib, NULL, 60, &plain, &pre);
    assert_non_null(strstr(pre.out, "forks: 20 of 20"));
    run_free(&plain);
    run_free(&pre);
    free(path);
}

/* ------------------------------------------------------------------ */
/* jemalloc_linked: a program linked with -ljemalloc that mixes jemalloc's
 * mallocx family with malloc and free on the same blocks.  Preloaded, salloc
 * must answer both (xallocx.c): before salloc had a mallocx of its own,
 * jemalloc's served those calls and the program aborted on its first
 * block handed to salloc.  Built only where jemalloc's header is
 * (libjemalloc-dev). */

static void test_real_programs_jemalloc_linked_program(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    const char *dir = getenv("TEST_BIN_DIR");
    char *bin = xasprintf("%s/jemalloc_linked", dir && *dir ? dir : "test/bin");
    bool built = access(bin, X_OK) == 0;
    free(bin);
    if (!built) {
        fprintf(stderr, "SKIP: jemalloc_linked: not built (libjemalloc-dev is not installed)\n");
        skip();
    }
    char *path = own_program("jemalloc_linked");
    char *argv[] = { path, NULL };
    run_t plain, pre;
    run_plain_and_preloaded(argv, tmp, lib, NULL, 60, &plain, &pre);
    assert_string_equal(plain.out, "allocator: jemalloc\nok\n");
    assert_string_equal(pre.out, "allocator: salloc\nok\n");
    run_free(&plain);
    run_free(&pre);
    free(path);
}

/* ------------------------------------------------------------------ */
/* secure_env: SALLOC_CONF and MALLOC_CONF count in a program run plainly,
 * not in one run set-user-ID (secure execution), as glibc's MALLOC_
 * variables do not: whoever ran it would choose where it writes heap
 * profiles, with its rights.  The set-user-ID run needs root (to give the
 * copy to nobody) and a file system that honours the bit: it says so and
 * stops short where it cannot. */

static void test_real_programs_secure_execution_ignores_options(void **state)
{
    const char *tmp = *state;
    char *path = own_program("secure_env");
    char *extra[] = { "SALLOC_CONF=lg_prof_sample:7", "MALLOC_CONF=lg_prof_sample:7", NULL };
    char *argv[] = { path, NULL };
    run_t plain;
    run_program(argv, tmp, tmp, NULL, extra, 30, &plain);
    expect_success("secure_env (plain)", &plain);
    assert_string_equal(plain.out, "secure 0 lg 7\n");
    run_free(&plain);

    char *copy = xasprintf("%s/secure_env", tmp), *cmd = xasprintf("cp %s %s", path, copy);
    assert_int_equal(system(cmd), 0);
    if (geteuid() != 0 || chown(copy, 65534, 65534) != 0 || chmod(copy, 04755) != 0) {
        fprintf(stderr, "secure_env: not root: no set-user-ID run\n");
    } else {
        char *copy_argv[] = { copy, NULL };
        run_t setuid_run;
        run_program(copy_argv, "/", tmp, NULL, extra, 30, &setuid_run);
        expect_success("secure_env (set-user-ID)", &setuid_run);
        if (strncmp(setuid_run.out, "secure 1", 8) != 0)
            fprintf(stderr, "secure_env: the set-user-ID bit was not honoured here (%s)\n",
                    setuid_run.out);
        else
            assert_string_equal(setuid_run.out, "secure 1 lg 19\n");
        run_free(&setuid_run);
    }
    free(cmd), free(copy), free(path);
}

/* ------------------------------------------------------------------ */
/* static_sampling: a fully static executable sampling every allocation
 * from its first, glibc's start-up's.  Those once walked the stack with
 * the loader's lookup not ready yet and crashed (20 runs in 20); now they
 * fail, counted, and main's are sampled. */

static void test_real_programs_static_executable_samples(void **state)
{
    const char *tmp = *state;
    char *path = own_program("static_sampling");
    /* The last run with libgcc's unwinder, linked in statically: it
     * allocates inside its first walk, which salloc makes in its
     * constructor; a sample of that once walked again and deadlocked. */
    char *confs[] = { "SALLOC_CONF=lg_prof_sample:0", "SALLOC_CONF=lg_prof_sample:0",
                      "SALLOC_CONF=lg_prof_sample:0", "SALLOC_CONF=lg_prof_sample:0",
                      "SALLOC_CONF=lg_prof_sample:0,prof_unwind:libgcc" };
    char *argv[] = { path, NULL };
    for (int i = 0; i < 5; i++) {
        char *extra[] = { confs[i], NULL };
        run_t r;
        run_program(argv, tmp, tmp, NULL, extra, 30, &r);
        expect_success("static_sampling", &r);
        assert_non_null(strstr(r.out, "live 100 "));
        run_free(&r);
    }
    free(path);
}

/* ------------------------------------------------------------------ */
/* small_stack_coroutine: a sampled malloc on a 4.5 KiB coroutine stack.
 * A sample once kept two frame arrays and backtrace()'s third on the stack
 * (3.3 KB) and needed 5.5 KiB of it; it needs 3.5 KiB now (glibc's malloc
 * 2.5). */

static void test_real_programs_sampling_on_a_small_stack(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    char *path = own_program("small_stack_coroutine");
    char *extra[] = { "SALLOC_CONF=lg_prof_sample:0", NULL };
    char *argv[] = { path, "4608", NULL };
    run_t plain, pre;
    run_plain_and_preloaded(argv, tmp, lib, extra, 30, &plain, &pre);
    assert_string_equal(pre.out, "250 blocks on a 4608-byte stack\n");
    run_free(&plain);
    run_free(&pre);
    free(path);
}

/* ------------------------------------------------------------------ */
/* C++'s operator new and delete: salloc defines them (src/cxx_new.c).
 * cxx_new_check runs every form and the out-of-memory cases (bad_alloc,
 * nothrow, new_handler); preloaded it also checks that they are salloc's. */

static void test_real_programs_cxx_operators(void **state)
{
    const char *tmp = *state, *lib = salloc_lib();
    char *path = own_program("cxx_new_check");
    char *plain_argv[] = { path, NULL }, *pre_argv[] = { path, "salloc", NULL };
    run_t plain, pre;
    run_program(plain_argv, tmp, tmp, NULL, NULL, 60, &plain);
    run_program(pre_argv, tmp, tmp, lib, NULL, 60, &pre);
    expect_success("cxx_new_check (plain)", &plain);
    expect_success("cxx_new_check (preload)", &pre);
    assert_non_null(strstr(pre.out, "ok: operator new is salloc's"));
    assert_non_null(strstr(pre.out, "ok: new_handler called once, then std::bad_alloc"));
    assert_non_null(strstr(pre.out, "all checks passed"));
    run_free(&plain);
    run_free(&pre);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_real_programs_jemalloc_linked_program,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_fork_handlers_allocate,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_secure_execution_ignores_options,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_static_executable_samples,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_sampling_on_a_small_stack,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_cxx_operators,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_preload_reaches_only_children,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_cxx_threads,
                                        tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_gcc, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_git, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_real_programs_python_test_suite,
                                        tmpdir_setup, tmpdir_teardown),
    };
    return cmocka_run_group_tests_name("real programs", tests, NULL, NULL);
}
