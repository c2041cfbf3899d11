/*
 * fuzz_dump_readers.c: every reader of outside data the salloc command
 * (tools/) has, on fuzzed bytes:
 *
 *   - an input that starts with the ELF magic is an ELF file: elf_open()
 *     (tools/elf.c) reads it from a temporary file, then elf_symbol() and
 *     elf_offset_to_vaddr() answer for every 8-byte-aligned 64-bit value of
 *     the input (symbol addresses among them) and a few fixed ones;
 *   - any other input is a dump, optionally followed by a line
 *     "ADDR2LINE:" and what addr2line is to print:
 *
 *         heap_v2/1024            <- the dump: profile_load() (profile.c,
 *           t*: ...                  heapv2.c: the heap_v2 text and its
 *         ...                        MAPPED_LIBRARIES /proc/pid/maps lines)
 *         MAPPED_LIBRARIES:
 *         ...
 *         ADDR2LINE:              <- the rest is addr2line's output
 *         main                       (symbolize.c's reader of it)
 *         /src/x.c:12
 *
 *     A dump that loads is symbolized (symbolize.c: the mappings, the ELF
 *     files they name, addr2line's answers) and then read by one report,
 *     picked by the input's checksum: salloc top (with options also picked
 *     so), salloc flame (SVG into the temporary directory) or salloc diff
 *     (the dump against itself).
 *
 * symbolize.c is compiled into this file (#include) with four stand-ins,
 * so that no program runs and nothing outside the temporary directory is
 * opened:
 *   - posix_spawnp("addr2line") runs nothing: it writes the input's
 *     ADDR2LINE part into the pipe symbolize.c reads (as much as the pipe
 *     holds, 64 KiB) and reports a child that exits 0 (waitpid);
 *   - stat() sees only files in the temporary directory, so a mapping's
 *     file is found there by its base name (symbolize.c's fallback "beside
 *     the dump").  The directory holds copies of build/fuzz/elf_sample
 *     (elf_sample.c) under the base names the seed dumps use.
 *
 * Messages (salloc: <file>: malformed ...) and the reports' output go to
 * /dev/null: LLVMFuzzerInitialize asks libFuzzer for -close_fd_mask=3.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#include "fuzz_util.h"

/* ---- stand-ins for symbolize.c ---- */

#define FAKE_PID 424242

static const uint8_t *a2l_data; /* what "addr2line" prints */
static size_t a2l_len;
static int a2l_fd = -1;         /* the write end symbolize.c gives it as stdout */

static int fuzz_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
    if (newfd == 1)
        a2l_fd = fd;
    return posix_spawn_file_actions_adddup2(fa, fd, newfd);
}

static int fuzz_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    (void)fa, (void)attr, (void)envp;
    FUZZ_CHECK(!strcmp(file, "addr2line") && a2l_fd >= 0);
    /* addr2line -f -i -C -e FILE, then pairs: an address and "0". */
    size_t n = 0;
    while (argv[n])
        n++;
    FUZZ_CHECK(n >= 6 && n % 2 == 0 && !strcmp(argv[4], "-e"));
    for (size_t i = 6; i < n; i += 2)
        FUZZ_CHECK((!strncmp(argv[i], "0x", 2) || !strcmp(argv[i], "0")) && !strcmp(argv[i + 1], "0"));
    int flags = fcntl(a2l_fd, F_GETFL);
    fcntl(a2l_fd, F_SETFL, flags | O_NONBLOCK);
    for (size_t off = 0; off < a2l_len;) {
        ssize_t w = write(a2l_fd, a2l_data + off, a2l_len - off);
        if (w <= 0)
            break; /* the pipe is full: addr2line's output ends there */
        off += (size_t)w;
    }
    fcntl(a2l_fd, F_SETFL, flags);
    a2l_fd = -1;
    *pid = FAKE_PID;
    return 0;
}

static pid_t fuzz_waitpid(pid_t pid, int *status, int options)
{
    (void)options;
    FUZZ_CHECK(pid == FAKE_PID);
    *status = 0; /* exited, status 0 */
    return pid;
}

/* Only files under the temporary directory exist. */
static int fuzz_stat(const char *path, struct stat *st)
{
    size_t n = strlen(fuzz_tmpdir);
    if (strncmp(path, fuzz_tmpdir, n) || path[n] != '/' || strstr(path, "/..")) {
        errno = ENOENT;
        return -1;
    }
    return stat(path, st);
}

#define posix_spawn_file_actions_adddup2 fuzz_adddup2
#define posix_spawnp fuzz_spawnp
#define waitpid fuzz_waitpid
#define stat(path, st) fuzz_stat(path, st)
#include "symbolize.c"
#undef posix_spawn_file_actions_adddup2
#undef posix_spawnp
#undef waitpid
#undef stat

/* ---- the target ---- */

static char dump_path[PATH_MAX], svg_path[PATH_MAX], elf_path[PATH_MAX];

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FUZZ_CHECK(fd >= 0);
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    FUZZ_CHECK(close(fd) == 0);
}

/* Copies build/fuzz/elf_sample (beside this program) into the temporary
 * directory under each base name the seed dumps map. */
static void install_elf_sample(void)
{
    static const char *const names[] = {"elf_sample", "salloc-demo", "three_sites",
                                        "libsalloc.so.0.1.0", "libc.so.6"};
    char self[PATH_MAX], src[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return;
    *slash = '\0';
    snprintf(src, sizeof(src), "%s/elf_sample", self);
    FILE *f = fopen(src, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_dump_readers: no %s: dumps will not be symbolized against an ELF file\n", src);
        return;
    }
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char dst[PATH_MAX + 32];
        snprintf(dst, sizeof(dst), "%s/%s", fuzz_tmpdir, names[i]);
        write_file(dst, buf, len);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_default_flag(argc, argv, "-close_fd_mask=", "3");
    fuzz_tmpdir_create("readers");
    snprintf(dump_path, sizeof(dump_path), "%s/dump.heap", fuzz_tmpdir);
    snprintf(svg_path, sizeof(svg_path), "%s/flame.svg", fuzz_tmpdir);
    snprintf(elf_path, sizeof(elf_path), "%s/input.elf", fuzz_tmpdir);
    install_elf_sample();
    return 0;
}

static void elf_input(const uint8_t *data, size_t size)
{
    write_file(elf_path, data, size);
    struct elf *e = elf_open(elf_path);
    unlink(elf_path);
    if (!e)
        return;
    static const uint64_t fixed[] = {0, 1, 0x1000, 0x400000, UINT64_MAX};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) + size / 8 && i < 4096; i++) {
        uint64_t v = i < 5 ? fixed[i] : 0, va;
        if (i >= 5)
            memcpy(&v, data + (i - 5) * 8, sizeof(v));
        const char *s = elf_symbol(e, v);
        if (s)
            FUZZ_CHECK(strlen(s) < size);
        if (elf_offset_to_vaddr(e, v, &va) && (s = elf_symbol(e, va)))
            FUZZ_CHECK(strlen(s) < size);
    }
    elf_close(e);
}

/* A report reads the dump again, in its own way: one per input (each
 * loads and symbolizes the dump anew), picked by the input's checksum. */
static void report(unsigned pick)
{
    static const char *const metric[] = {"--space", "--objects", "--resident", "--fragmentation"};
    char *top[] = {"top", "-n", pick & 32 ? "0" : "3", (char *)metric[(pick >> 2) % 4],
                   pick & 16 ? "--alloc" : "--inuse", dump_path, NULL};
    char *flame[] = {"flame", dump_path, "-o", svg_path, NULL};
    char *diff[] = {"diff", "-n", "0", dump_path, dump_path, NULL};
    int rc;
    switch (pick % 3) {
    case 0:
        rc = cmd_top(6, top);
        FUZZ_CHECK(rc == 0 || rc == 1); /* 1: the dump lacks the values asked for */
        break;
    case 1:
        rc = cmd_flame(4, flame);
        FUZZ_CHECK(rc == 0);
        unlink(svg_path);
        break;
    default:
        rc = cmd_diff(5, diff);
        FUZZ_CHECK(rc == 0);
        break;
    }
    fflush(stdout);
}

static volatile size_t touched; /* keeps the strlen() calls */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= SELFMAG && !memcmp(data, ELFMAG, SELFMAG)) {
        elf_input(data, size);
        return 0;
    }
    static const char sep[] = "\nADDR2LINE:\n";
    const uint8_t *at = memmem(data, size, sep, sizeof(sep) - 1);
    size_t dump_len = at ? (size_t)(at - data) + 1 : size;
    a2l_data = at ? at + sizeof(sep) - 1 : NULL;
    a2l_len = at ? size - (size_t)(a2l_data - data) : 0;
    write_file(dump_path, data, dump_len);

    struct profile p;
    if (profile_load(dump_path, &p) == 0) {
        have_addr2line = true; /* symbolize.c's; a failed spawn clears it */
        symbolize(&p, true);
        for (size_t i = 0; i < p.nrecs; i++) {
            const struct record *r = &p.recs[i];
            FUZZ_CHECK(r->depth > 0 && r->first < r->depth);
            for (size_t k = 0; k < r->depth; k++) {
                const struct frame *f = profile_frame(&p, r->pcs[k]);
                FUZZ_CHECK(f->func != NULL);
                touched += strlen(f->func); /* ASan checks the string ends */
                if (f->loc)
                    touched += strlen(f->loc);
            }
        }
        profile_free(&p);
        unsigned sum = 0;
        for (size_t i = 0; i < size; i++)
            sum += data[i];
        report(sum);
    }
    unlink(dump_path);
    return 0;
}
