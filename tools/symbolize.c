/*
 * symbolize.c: a function name and a source location for every address of
 * a profile, from the dump's own MAPPED_LIBRARIES section:
 *
 *   address -> the mapping holding it -> file offset -> the ELF virtual
 *   address (elf.c, PT_LOAD headers) -> the function symbol (elf.c) and,
 *   when addr2line is installed, "function" and "file:line" from the debug
 *   information: one addr2line process per file and per 512 addresses.
 *
 * Stack addresses are return addresses: the address looked up is pc - 1,
 * inside the call instruction (jeprof does the same for all frames but the
 * first; salloc's first frame is a return address too, and in jemalloc's
 * dumps the first frames are the allocator's own, dropped anyway).
 *
 * A file named in the map that no longer exists at that path (a dump copied
 * from another machine) is looked for next to the dump, by base name.
 *
 * Allocator frames: as jeprof, every frame up to the last one named malloc,
 * calloc, operator new, ... is dropped, and so are leading frames inside an
 * allocator library (libjemalloc, libtcmalloc, libsalloc), whose symbols
 * may not be available.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* jeprof's list (RemoveUninterestingFrames, heap profiles). */
static const char *const alloc_names[] = {
    "calloc", "cfree", "malloc", "newImpl", "free", "memalign", "posix_memalign",
    "aligned_alloc", "pvalloc", "valloc", "realloc", "mallocx", "rallocx", "xallocx",
    "dallocx", "sdallocx", "sdallocx_noflags", "reallocarray", "do_malloc",
    "DoSampledAllocation", "operator new", "operator new[]", "__builtin_new",
    "__builtin_vec_new", "operator delete", "operator delete[]", "__builtin_delete",
    "__builtin_vec_delete", "malloc_usable_size", NULL,
};

static bool allocator_name(const char *f)
{
    if (!strncmp(f, "tc_", 3) || strstr(f, "TCMalloc") || !strncmp(f, "tcmalloc::", 10))
        return true;
    for (int i = 0; alloc_names[i]; i++) {
        size_t n = strlen(alloc_names[i]);
        /* "operator new(unsigned long)" counts as "operator new" */
        if (!strncmp(f, alloc_names[i], n) && (f[n] == '\0' || (f[n] == '(' && !strncmp(f, "operator", 8))))
            return true;
    }
    return false;
}

static bool allocator_library(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    return !strncmp(b, "libjemalloc", 11) || !strncmp(b, "libtcmalloc", 11) ||
           !strncmp(b, "libsalloc", 9);
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int map_cmp(const void *a, const void *b)
{
    const struct mapping *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static const struct mapping *find_mapping(const struct profile *p, uint64_t a)
{
    size_t lo = 0, hi = p->nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->maps[mid].start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct mapping *m = &p->maps[lo - 1];
    return a < m->end ? m : NULL;
}

/* The file to read for a mapping's path: the path itself, else the file of
 * that base name beside the dump. Caller frees. */
static char *locate(const char *dump, const char *mpath)
{
    char *path = xstrdup(mpath);
    size_t n = strlen(path);
    if (n > 10 && !strcmp(path + n - 10, " (deleted)"))
        path[n - 10] = '\0';
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return path;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *slash = strrchr(dump, '/');
    size_t dlen = slash ? (size_t)(slash - dump) : 1;
    char *alt = xmalloc(dlen + strlen(base) + 2);
    sprintf(alt, "%.*s/%s", (int)dlen, slash ? dump : ".", base);
    free(path);
    if (stat(alt, &st) == 0 && S_ISREG(st.st_mode))
        return alt;
    free(alt);
    return NULL;
}

struct query {
    struct frame *f;
    uint64_t vaddr;
};

static bool have_addr2line = true;

static void strip_discriminator(char *s)
{
    char *d = strstr(s, " (discriminator");
    if (d)
        *d = '\0';
}

/* One "function\nfile:line\n" pair of addr2line output; false at EOF. */
static bool read_pair(FILE *out, char **func, char **loc)
{
    static char *line;
    static size_t cap;
    if (getline(&line, &cap, out) <= 0)
        return false;
    line[strcspn(line, "\n")] = '\0';
    *func = xstrdup(line);
    if (getline(&line, &cap, out) <= 0) {
        free(*func);
        return false;
    }
    line[strcspn(line, "\n")] = '\0';
    strip_discriminator(line);
    *loc = xstrdup(line);
    return true;
}

static bool known_loc(const char *l)
{
    size_t n = strlen(l);
    return strncmp(l, "??", 2) && !(n >= 2 && (!strcmp(l + n - 2, ":0") || !strcmp(l + n - 2, ":?")));
}

/* Runs addr2line -i on q[0..n) of `file`; fills names, locations and the
 * functions each address is inlined into.  Each address is followed by the
 * address 0, which addr2line answers with one "??" pair: the separator
 * between the variable-length inline chains. */
static void addr2line_batch(const char *file, struct query *q, size_t n, bool want_locations)
{
    if (!have_addr2line)
        return;
    char **argv = xmalloc((2 * n + 8) * sizeof(*argv));
    char *hex = xmalloc(n * 20);
    size_t k = 0;
    argv[k++] = "addr2line";
    argv[k++] = "-f";
    argv[k++] = "-i";
    argv[k++] = "-C";
    argv[k++] = "-e";
    argv[k++] = (char *)file;
    for (size_t i = 0; i < n; i++) {
        snprintf(hex + i * 20, 20, "%#" PRIx64, q[i].vaddr);
        argv[k++] = hex + i * 20;
        argv[k++] = "0";
    }
    argv[k] = NULL;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        free(argv), free(hex);
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "addr2line", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc) {
        have_addr2line = false;
        close(fds[0]);
        free(argv), free(hex);
        return;
    }
    FILE *out = fdopen(fds[0], "r");
    char *func, *loc;
    for (size_t i = 0; i < n && read_pair(out, &func, &loc); i++) {
        struct frame *f = q[i].f;
        /* First pair: the innermost function at the address. */
        if (strcmp(func, "??") && func[0]) {
            free((char *)f->func);
            f->func = func;
        } else {
            free(func);
        }
        if (want_locations && known_loc(loc)) {
            free((char *)f->loc);
            f->loc = loc;
        } else {
            free(loc);
        }
        /* Then the functions it is inlined into, up to the separator. */
        bool more = true;
        while ((more = read_pair(out, &func, &loc))) {
            bool sep = !strcmp(func, "??");
            free(loc);
            if (sep) {
                free(func);
                break;
            }
            f->outer = xrealloc(f->outer, (f->nouter + 1) * sizeof(*f->outer));
            f->outer[f->nouter++] = func;
        }
        if (!more)
            break;
    }
    fclose(out);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        have_addr2line = false;
    free(argv), free(hex);
}

static int query_cmp(const void *a, const void *b)
{
    const struct query *x = a, *y = b;
    return u64_cmp(&x->vaddr, &y->vaddr);
}

void symbolize(struct profile *p, bool want_locations)
{
    /* Distinct addresses. */
    size_t total = 0;
    for (size_t i = 0; i < p->nrecs; i++)
        total += p->recs[i].depth;
    uint64_t *pcs = xmalloc((total + 1) * sizeof(*pcs));
    size_t n = 0;
    for (size_t i = 0; i < p->nrecs; i++)
        for (size_t k = 0; k < p->recs[i].depth; k++)
            pcs[n++] = p->recs[i].pcs[k];
    qsort(pcs, n, sizeof(*pcs), u64_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || pcs[i] != pcs[u - 1])
            pcs[u++] = pcs[i];
    p->frames = xmalloc((u + 1) * sizeof(*p->frames));
    p->nframes = u;
    if (p->nmaps) /* a dump without MAPPED_LIBRARIES has no array at all */
        qsort(p->maps, p->nmaps, sizeof(*p->maps), map_cmp);

    /* Default names, and the ELF address of each, grouped by file. */
    const struct mapping **owner = xmalloc((u + 1) * sizeof(*owner));
    struct query *q = xmalloc((u + 1) * sizeof(*q));
    for (size_t i = 0; i < u; i++) {
        struct frame *f = &p->frames[i];
        f->pc = pcs[i];
        f->loc = NULL;
        f->outer = NULL;
        f->nouter = 0;
        f->allocator = false;
        uint64_t a = pcs[i] ? pcs[i] - 1 : 0;
        const struct mapping *m = find_mapping(p, a);
        owner[i] = m && m->path ? m : NULL;
        char buf[512];
        if (owner[i]) {
            const char *b = strrchr(m->path, '/');
            snprintf(buf, sizeof(buf), "%s+%#" PRIx64, b ? b + 1 : m->path, a - m->start + m->offset);
            f->allocator = allocator_library(m->path);
        } else {
            snprintf(buf, sizeof(buf), "%#" PRIx64, pcs[i]);
        }
        f->func = xstrdup(buf);
    }
    bool *done = calloc(u + 1, 1);
    for (size_t i = 0; i < u; i++) {
        if (done[i] || !owner[i])
            continue;
        const char *path = owner[i]->path;
        struct elf *e = NULL;
        char *file = locate(p->path, path);
        if (file)
            e = elf_open(file);
        size_t nq = 0;
        for (size_t j = i; j < u; j++) {
            if (done[j] || !owner[j] || strcmp(owner[j]->path, path))
                continue;
            done[j] = true;
            uint64_t a = p->frames[j].pc - 1;
            uint64_t off = a - owner[j]->start + owner[j]->offset, vaddr;
            if (e && elf_offset_to_vaddr(e, off, &vaddr))
                q[nq++] = (struct query){&p->frames[j], vaddr};
        }
        qsort(q, nq, sizeof(*q), query_cmp);
        for (size_t k = 0; k < nq; k++) {
            const char *s = elf_symbol(e, q[k].vaddr);
            if (s) {
                free((char *)q[k].f->func);
                q[k].f->func = xstrdup(s);
            }
        }
        elf_close(e);
        for (size_t k = 0; k < nq; k += 512)
            addr2line_batch(file, q + k, nq - k < 512 ? nq - k : 512, want_locations);
        free(file);
    }
    for (size_t i = 0; i < u; i++)
        if (allocator_name(p->frames[i].func))
            p->frames[i].allocator = true;

    /* Where each record's own frames start. */
    for (size_t i = 0; i < p->nrecs; i++) {
        struct record *r = &p->recs[i];
        size_t first = 0;
        for (size_t k = 0; k < r->depth; k++)
            if (profile_frame(p, r->pcs[k])->allocator)
                first = k + 1;
        r->first = first < r->depth ? first : 0;
    }
    free(done);
    free(q);
    free(owner);
    free(pcs);
}
