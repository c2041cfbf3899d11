/*
 * run.c: "salloc run [options] -- PROGRAM ARGS...": run a program with the
 * salloc library preloaded and its heap profiler set to dump at exit, wait
 * for it, list the dumps it wrote, and exit with its status.
 *
 * The library is found beside the command: <dir of salloc>/../lib/
 * libsalloc.so, which is lib/libsalloc.so for build/bin/salloc in the build
 * tree and $(PREFIX)/lib/libsalloc.so once installed; SALLOC_LIB overrides.
 * Options reach the library through SALLOC_CONF, appended to any the user
 * already set (later pairs win).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static const char run_usage[] =
    "usage: salloc run [-r RATE] [-o PREFIX] [--interval BYTES] [--peak] [--leaks | --leak-check]\n"
    "                  -- PROGRAM [ARGS...]\n"
    "  -r, --rate RATE      mean sampling interval in bytes (k, m, g suffixes; a power of two,\n"
    "                       others are rounded to the nearest); default 512k\n"
    "  -o, --prefix PREFIX  dump file prefix (default ./salloc): PREFIX.<pid>.<seq>.f.heap\n"
    "  --interval BYTES     also dump every BYTES allocated (PREFIX.<pid>.<seq>.i<n>.heap)\n"
    "  --peak               also write the peak-heap profile at exit (PREFIX.<pid>.<seq>.p.heap)\n"
    "  --leaks              print a summary of what is still allocated at exit (prof_leak)\n"
    "  --leak-check         the same, and exit status 1 if anything is (prof_leak_error)\n"
    "Environment: SALLOC_LIB names the library to preload.\n";

/* "64k" -> log2, rounded to the nearest power of two; -1 if malformed. */
static int parse_lg(const char *s, const char *what)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) {
        fprintf(stderr, "salloc run: %s must be a positive number of bytes, not '%s'\n", what, s);
        return -1;
    }
    switch (*end) {
    case 'k': case 'K': v *= 1024, end++; break;
    case 'm': case 'M': v *= 1024 * 1024, end++; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024, end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end) {
        fprintf(stderr, "salloc run: %s: cannot read '%s' (bytes, with an optional k, m or g)\n", what, s);
        return -1;
    }
    double lg = round(log2(v));
    if (lg < 0)
        lg = 0;
    if (lg > 62) {
        fprintf(stderr, "salloc run: %s %s is too large (at most 2^62)\n", what, s);
        return -1;
    }
    if (ldexp(1, (int)lg) != v)
        fprintf(stderr, "salloc run: %s %s rounded to 2^%d = %.0f bytes\n", what, s, (int)lg, ldexp(1, (int)lg));
    return (int)lg;
}

/* The library to preload, or NULL: SALLOC_LIB, else beside the command:
 * <dir>/../lib/libsalloc.so (an install: $(PREFIX)/bin -> $(PREFIX)/lib),
 * then <dir>/../../lib/libsalloc.so (the build tree: build/bin -> lib). */
static char *find_library(void)
{
    const char *env = getenv("SALLOC_LIB");
    if (env && *env)
        return xstrdup(env);
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    /* The configured library directory (make passes $(LIBDIR)) comes last:
     * a tree that was moved as a whole still finds its own library. */
#ifdef SALLOC_LIBDIR
    static const char libdir_so[] = SALLOC_LIBDIR "/libsalloc.so";
#else
    static const char libdir_so[] = "";
#endif
    static const char *const rel[] = {"/../lib/libsalloc.so", "/../../lib/libsalloc.so"};
    for (int i = 0; i < 2; i++) {
        char *lib = xmalloc(strlen(self) + 32);
        sprintf(lib, "%s%s", self, rel[i]);
        char *real = realpath(lib, NULL);
        free(lib);
        if (real)
            return real;
    }
    return libdir_so[0] ? realpath(libdir_so, NULL) : NULL;
}

static int seq_of(const char *path, size_t skip)
{
    return atoi(path + skip);
}

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"rate", required_argument, NULL, 'r'},   {"prefix", required_argument, NULL, 'o'},
        {"interval", required_argument, NULL, 'I'}, {"peak", no_argument, NULL, 'P'},
        {"leaks", no_argument, NULL, 'L'},        {"leak-check", no_argument, NULL, 'E'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    int lg_sample = -1, lg_interval = -1;
    bool peak = false;
    const char *leaks = NULL; /* the option that asks for the summary */
    const char *prefix = "./salloc";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+r:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            if ((lg_sample = parse_lg(optarg, "RATE")) < 0)
                return 2;
            break;
        case 'I':
            if ((lg_interval = parse_lg(optarg, "--interval")) < 0)
                return 2;
            break;
        case 'o': prefix = optarg; break;
        case 'P': peak = true; break;
        case 'L': if (!leaks) leaks = ",prof_leak:true"; break;
        case 'E': leaks = ",prof_leak_error:true"; break;
        case 'h': fputs(run_usage, stdout); return 0;
        default: fputs(run_usage, stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "salloc run: no program to run\n");
        fputs(run_usage, stderr);
        return 2;
    }
    char **prog = argv + optind;

    char *lib = find_library();
    struct stat st;
    if (!lib || stat(lib, &st)) {
        fprintf(stderr, "salloc run: cannot find libsalloc.so %s%s(looked in <salloc's dir>/../lib "
                        "and <salloc's dir>/../../lib; SALLOC_LIB names it)\n",
                lib ? lib : "", lib ? " " : "");
        free(lib);
        return 1;
    }
    /* The dynamic loader splits LD_PRELOAD at spaces and colons: such a
     * path would run the program without salloc, and no dump to show. */
    if (strpbrk(lib, " \t:")) {
        fprintf(stderr, "salloc run: the library path '%s' holds a space or ':', which LD_PRELOAD "
                        "splits on; name one without them in SALLOC_LIB (a symbolic link will do)\n",
                lib);
        free(lib);
        return 1;
    }
    /* An absolute prefix, so that a program that changes directory still
     * writes its dumps where the listing below looks for them. */
    char *abs_prefix;
    if (prefix[0] == '/') {
        abs_prefix = xstrdup(prefix);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd))) {
            fprintf(stderr, "salloc run: getcwd: %s\n", strerror(errno));
            free(lib);
            return 1;
        }
        const char *rel = strncmp(prefix, "./", 2) ? prefix : prefix + 2;
        abs_prefix = xmalloc(strlen(cwd) + strlen(rel) + 2);
        sprintf(abs_prefix, "%s/%s", cwd, rel);
    }
    if (strchr(abs_prefix, ',') || !*prefix) {
        fprintf(stderr, "salloc run: the prefix '%s' cannot contain ',' or be empty (SALLOC_CONF syntax)\n",
                abs_prefix);
        free(lib), free(abs_prefix);
        return 2;
    }

    const char *old_conf = getenv("SALLOC_CONF");
    size_t clen = strlen(abs_prefix) + (old_conf ? strlen(old_conf) : 0) + 160;
    char *conf = xmalloc(clen);
    /* prof_format:heap: the dumps listed below, and read by salloc top,
     * are heap_v2 text, whatever format the user's SALLOC_CONF asked. */
    int k = snprintf(conf, clen, "%s%sprof_final:true,prof_format:heap,prof_prefix:%s", old_conf ? old_conf : "",
                     old_conf && *old_conf ? "," : "", abs_prefix);
    if (lg_sample >= 0)
        k += snprintf(conf + k, clen - (size_t)k, ",lg_prof_sample:%d", lg_sample);
    if (lg_interval >= 0)
        k += snprintf(conf + k, clen - (size_t)k, ",lg_prof_interval:%d", lg_interval);
    if (peak)
        k += snprintf(conf + k, clen - (size_t)k, ",prof_final_peak:true");
    if (leaks)
        snprintf(conf + k, clen - (size_t)k, "%s", leaks);
    const char *old_pre = getenv("LD_PRELOAD");
    char *preload = xmalloc(strlen(lib) + (old_pre ? strlen(old_pre) : 0) + 2);
    sprintf(preload, "%s%s%s", lib, old_pre && *old_pre ? ":" : "", old_pre ? old_pre : "");

    /* Like a shell: the terminal's ^C goes to the program; we wait for it
     * and still list its dumps. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "salloc run: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        setenv("SALLOC_CONF", conf, 1);
        setenv("LD_PRELOAD", preload, 1);
        execvp(prog[0], prog);
        fprintf(stderr, "salloc run: cannot run %s: %s\n", prog[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "salloc run: waitpid: %s\n", strerror(errno));
            return 1;
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);

    int rc;
    if (WIFSIGNALED(status)) {
        rc = 128 + WTERMSIG(status);
        fprintf(stderr, "salloc run: %s killed by signal %d (%s)\n", prog[0], WTERMSIG(status),
                strsignal(WTERMSIG(status)));
    } else {
        rc = WEXITSTATUS(status);
    }

    /* The prefix is a path, not a pattern: its *, ? and [ are escaped. */
    char *pattern = xmalloc(2 * strlen(abs_prefix) + 48), *q = pattern;
    for (const char *a = abs_prefix; *a; a++) {
        if (strchr("*?[\\", *a))
            *q++ = '\\';
        *q++ = *a;
    }
    sprintf(q, ".%d.*.heap", (int)pid);
    int plen = snprintf(NULL, 0, "%s.%d.", abs_prefix, (int)pid);
    glob_t g;
    int gr = glob(pattern, 0, NULL, &g);
    if (gr == 0 && g.gl_pathc) {
        /* Sort by <seq>, the dumps' order in time (glob sorts as text). */
        for (size_t i = 1; i < g.gl_pathc; i++)
            for (size_t j = i; j > 0 && seq_of(g.gl_pathv[j - 1], (size_t)plen) > seq_of(g.gl_pathv[j], (size_t)plen); j--) {
                char *t = g.gl_pathv[j];
                g.gl_pathv[j] = g.gl_pathv[j - 1];
                g.gl_pathv[j - 1] = t;
            }
        fprintf(stderr, "salloc run: %s (pid %d) exited with status %d; %zu dump%s:\n", prog[0], (int)pid,
                rc, g.gl_pathc, g.gl_pathc == 1 ? "" : "s");
        for (size_t i = 0; i < g.gl_pathc; i++)
            fprintf(stderr, "  %s\n", g.gl_pathv[i]);
        const char *hint = g.gl_pathv[g.gl_pathc - 1];
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (strstr(g.gl_pathv[i], ".f.heap"))
                hint = g.gl_pathv[i];
        fprintf(stderr, "salloc run: read it with: salloc top %s\n", hint);
    } else {
        fprintf(stderr, "salloc run: %s (pid %d) exited with status %d and wrote no dump matching %s.%d.*.heap\n"
                        "  (it wrote none if it never called malloc, left through _exit or exec, or ran with prof:false)\n",
                prog[0], (int)pid, rc, abs_prefix, (int)pid);
    }
    if (gr == 0)
        globfree(&g);
    free(pattern), free(conf), free(preload), free(lib), free(abs_prefix);
    return rc;
}
