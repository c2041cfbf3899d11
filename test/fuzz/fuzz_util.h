/*
 * fuzz_util.h: what the libFuzzer targets of test/fuzz/ share (static
 * functions only; each target includes it once).
 *
 *   fuzz_default_flag()  adds a libFuzzer flag unless the command line
 *                        already gives it (LLVMFuzzerInitialize runs before
 *                        libFuzzer reads its flags)
 *   fuzz_tmpdir_*()      a private temporary directory for everything a
 *                        target writes, emptied after each input and
 *                        removed at exit
 *   FUZZ_CHECK()         an invariant of the code under test: abort (a
 *                        crash libFuzzer keeps) with the failed expression
 *
 * Quiet runs: a target that passes -close_fd_mask=2 gets fd 2 pointed at
 * /dev/null by libFuzzer itself, which first duplicates the real stderr for
 * its own lines and for sanitizer reports.  So the code under test writes
 * its diagnostics to /dev/null, and crashes are still reported in full.
 */
#ifndef SALLOC_FUZZ_UTIL_H
#define SALLOC_FUZZ_UTIL_H

#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sanitizer runtime (sanitizer/common_interface_defs.h); weak so that a
 * target also links without one. */
void __sanitizer_report_error_summary(const char *summary) __attribute__((weak));

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Appends "<flag><value>" (flag such as "-close_fd_mask=") to the command
 * line unless an argument already starts with flag. */
__attribute__((unused)) static void fuzz_default_flag(int *argc, char ***argv, const char *flag, const char *value)
{
    size_t n = strlen(flag);
    for (int i = 1; i < *argc; i++)
        if (!strncmp((*argv)[i], flag, n))
            return;
    static char **v; /* kept for the life of the process (and seen by LeakSanitizer) */
    v = malloc(((size_t)*argc + 2) * sizeof(*v));
    char *arg = malloc(n + strlen(value) + 1);
    if (!v || !arg)
        abort();
    memcpy(v, *argv, (size_t)*argc * sizeof(*v));
    strcpy(arg, flag);
    strcat(arg, value);
    v[(*argc)++] = arg;
    v[*argc] = NULL;
    *argv = v;
}

/* An invariant: abort with a message on the sanitizer's report fd (fd 2 may
 * be /dev/null, see above) and a stack trace from libFuzzer. */
#define FUZZ_CHECK(cond)                                                  \
    do {                                                                  \
        if (!(cond))                                                      \
            fuzz_check_failed(#cond, __FILE__, __LINE__);                 \
    } while (0)

__attribute__((noreturn, unused)) static void fuzz_check_failed(const char *what, const char *file,
                                                                int line)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "FUZZ_CHECK failed: %s (%s:%d)", what, file, line);
    if (__sanitizer_report_error_summary)
        __sanitizer_report_error_summary(msg); /* "SUMMARY: ..." on the report fd */
    else
        fprintf(stderr, "%s\n", msg);
    abort();
}

static char fuzz_tmpdir[PATH_MAX];

__attribute__((unused)) static void fuzz_tmpdir_empty(void)
{
    DIR *d = opendir(fuzz_tmpdir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
}

__attribute__((unused)) static void fuzz_tmpdir_remove(void)
{
    fuzz_tmpdir_empty();
    rmdir(fuzz_tmpdir);
}

/* Creates $TMPDIR/salloc-fuzz-<what>-XXXXXX (or under /tmp), removed at
 * exit (a crash leaves it behind). */
__attribute__((unused)) static const char *fuzz_tmpdir_create(const char *what)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(fuzz_tmpdir, sizeof(fuzz_tmpdir), "%s/salloc-fuzz-%s-XXXXXX", base, what);
    if (!mkdtemp(fuzz_tmpdir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_tmpdir_remove);
    return fuzz_tmpdir;
}

#endif
