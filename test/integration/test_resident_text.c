/*
 * test_resident_text.c: a program that only allocates and frees maps no
 * more than 64 KiB of salloc's code.  Run with LD_PRELOAD=lib/libsalloc.so
 * (make test does).
 *
 * The kernel maps a library's cached pages up to 64 KiB around each fault
 * in it, so every 64 KiB window of code that a program touches at all is
 * resident whole.  The shared library puts the functions ordinary programs
 * run (src/hot_text.list) in the first window of its text segment, from a
 * 64 KiB boundary, and the rest after it (Makefile, "Link order"): a
 * program that threads, forks, reallocates, allocates aligned and zeroed
 * memory, frees across threads and is sampled, but never calls mallctl,
 * dumps or errs, keeps that one window.  Laid out in link order alone, all
 * 124 KiB of the code was resident in such a program.
 *
 * Nor does it map salloc's own unwind tables, which only an unwinder
 * through salloc's frames reads: with the library's constants beside
 * them, the first read of one mapped them all (12 of 13 pages).
 *
 * The count is of pages mapped into this process (/proc/self/pagemap's
 * "present" bit), read at the end, in a child that did the work: the
 * test framework's own allocations stay out of it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "child_run.h"

#define WINDOW (64 * 1024)
#define THREADS 4

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

/* salloc's mallctl, if salloc is the allocator; NULL otherwise. */
static mallctl_fn salloc_mallctl(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (!sym || !dladdr(sym, &info) || !strstr(info.dli_fname, "libsalloc"))
        return NULL;
    return (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
}

/* Objects handed from one thread to the next, freed there. */
static void *handoff[THREADS][256];

static void churn(unsigned seed, void **keep, size_t nkeep)
{
    for (unsigned round = 0; round < 200; round++) {
        for (size_t i = 0; i < nkeep; i++) {
            seed = seed * 1103515245u + 12345u;
            size_t size = 8 + (seed >> 16) % ((seed & 1) ? 512 : 40000);
            free(keep[i]);
            keep[i] = malloc(size);
            memset(keep[i], (int)i, size < 64 ? size : 64);
        }
    }
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    void *keep[128] = {NULL};
    churn(id + 1, keep, 128);
    for (size_t i = 0; i < 256; i++)
        handoff[id][i] = malloc(16 + i * 8);
    for (size_t i = 0; i < 128; i++)
        free(keep[i]);
    return NULL;
}

/* What an ordinary program does: threads that allocate, free what other
 * threads allocated and exit; realloc growth; calloc; aligned memory; a
 * large block; fork, with the child allocating; some 100 MB in all, so
 * sampling at the default rate takes a few hundred samples. */
static void ordinary_work(void)
{
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            _exit(2);
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (unsigned i = 0; i < THREADS; i++)
        for (size_t k = 0; k < 256; k++)
            free(handoff[i][k]);
    char *grow = NULL;
    for (size_t n = 16; n <= (1u << 22); n *= 2) {
        grow = realloc(grow, n);
        grow[n - 1] = 1;
    }
    free(grow);
    void *zeroed = calloc(1000, 100), *aligned = NULL, *big = malloc(8u << 20);
    if (posix_memalign(&aligned, 4096, 10000) != 0 || !zeroed || !big)
        _exit(2);
    memset(big, 1, 8u << 20);
    free(zeroed);
    free(aligned);
    free(big);
    aligned = aligned_alloc(64, 640);
    free(aligned);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        void *keep[64] = {NULL};
        churn(99, keep, 64);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    void *keep[256] = {NULL};
    churn(7, keep, 256);
    for (size_t i = 0; i < 256; i++)
        free(keep[i]);
}

/* Pages of this process's mapping of salloc's code (the executable
 * mapping of the libsalloc file) that are present, and its length in
 * pages; -1 if there is none. */
static int resident_code_pages(int *mapping_pages)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    int pagemap = open("/proc/self/pagemap", O_RDONLY);
    if (!maps || pagemap < 0)
        return -1;
    char line[512];
    int present = -1;
    long page = sysconf(_SC_PAGESIZE);
    while (fgets(line, sizeof(line), maps)) {
        uintptr_t lo, hi;
        char perms[8];
        if (!strstr(line, "libsalloc") || sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 ||
            strcmp(perms, "r-xp") != 0)
            continue;
        present = 0;
        *mapping_pages = (int)((hi - lo) / (uintptr_t)page);
        for (uintptr_t a = lo; a < hi; a += (uintptr_t)page) {
            uint64_t entry = 0;
            if (pread(pagemap, &entry, sizeof(entry), (off_t)(a / (uintptr_t)page * 8)) == 8 &&
                (entry >> 63))
                present++;
        }
        break;
    }
    fclose(maps);
    close(pagemap);
    return present;
}

/* The segment of salloc's that holds its unwind tables (.eh_frame_hdr,
 * .eh_frame): its range, found through the loader. */
static int find_tables(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t *range = arg, hdr = 0;
    if (!strstr(info->dlpi_name, "libsalloc"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            hdr = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && hdr >= start && hdr - start < ph->p_memsz) {
            range[0] = start;
            range[1] = start + ph->p_memsz;
        }
    }
    return 1;
}

/* Present pages of salloc's unwind-table segment, and its length in pages
 * (-1 if not found).  Only an unwinder through salloc's own frames reads
 * them (an exception thrown through operator new, a debugger): the
 * library's constants are linked into its first segment, away from them
 * (src/salloc_text.ld), so that a read of a constant does not map the
 * tables with the 64 KiB around it. */
static int resident_table_pages(int *segment_pages)
{
    uintptr_t range[2] = {0, 0};
    int pagemap = open("/proc/self/pagemap", O_RDONLY);
    if (pagemap < 0 || dl_iterate_phdr(find_tables, range) != 1 || !range[0])
        return -1;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int present = 0;
    *segment_pages = 0;
    for (uintptr_t a = range[0] / page * page; a < range[1]; a += page) {
        uint64_t entry = 0;
        (*segment_pages)++;
        if (pread(pagemap, &entry, sizeof(entry), (off_t)(a / page * 8)) == 8 && (entry >> 63))
            present++;
    }
    close(pagemap);
    return present;
}

/* Runs the work in a fresh exec of this program under SALLOC_CONF=`conf`
 * and checks that it kept to one window of salloc's code. */
static void check_one_window(const char *conf)
{
    mallctl_fn mallctl = salloc_mallctl();
    if (!mallctl) {
        print_message("skipped: salloc is not the allocator (run with LD_PRELOAD=lib/libsalloc.so)\n");
        skip();
    }
#if defined(__clang__) || !defined(__GNUC__)
    /* Built, as make builds the tests, by the library's compiler: the list
     * names what gcc's inlining leaves as functions; clang's differs. */
    print_message("skipped: src/hot_text.list is gcc's (tools/hot_text.sh writes one for this compiler)\n");
    skip();
#endif
    bool debug = false;
    size_t len = sizeof(debug);
    if (mallctl("config.debug", &debug, &len, NULL, 0) == 0 && debug) {
        /* SA_DEBUG's checks run on slow paths, from code not listed hot. */
        print_message("skipped: an SA_DEBUG build checks its heap from code laid out cold\n");
        skip();
    }
    /* A fresh exec: the parent's code pages (cmocka's calls into salloc
     * included) are not the child's. */
    struct child_outcome o;
    child_run("test_resident_text", "work", conf, false, &o);
    assert_int_equal(o.signal, 0);
    assert_int_equal(o.status, 0);
    int present = -1, pages = 0, tables = -1, table_pages = 0;
    assert_int_equal(sscanf(o.out, "%d %d %d %d", &present, &pages, &tables, &table_pages), 4);
    print_message("salloc's code under SALLOC_CONF=\"%s\": %d of %d pages resident; "
                  "its unwind tables: %d of %d\n",
                  conf, present, pages, tables, table_pages);
    assert_true(present > 0);
    assert_true(present * sysconf(_SC_PAGESIZE) <= WINDOW);
    assert_int_equal(tables, 0);
}

static void test_ordinary_program_maps_one_window_of_code(void **state)
{
    (void)state;
    check_one_window("");
}

/* Profiling off, as programs that never want it run it, and options
 * parsed: the same window (sampler_never_sample, once laid out cold, made
 * such a program map all of salloc's code). */
static void test_program_without_profiling_maps_one_window_of_code(void **state)
{
    (void)state;
    check_one_window("prof:false,dirty_decay_ms:5000");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "work") == 0) {
        ordinary_work();
        int pages = 0, present = resident_code_pages(&pages);
        int table_pages = 0, tables = resident_table_pages(&table_pages);
        printf("%d %d %d %d\n", present, pages, tables, table_pages);
        return present < 0 || tables < 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ordinary_program_maps_one_window_of_code),
        cmocka_unit_test(test_program_without_profiling_maps_one_window_of_code),
    };
    return cmocka_run_group_tests_name("resident_text", tests, NULL, NULL);
}
