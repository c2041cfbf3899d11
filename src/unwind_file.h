/*
 * unwind_file.h: an object's unwind tables read from its file, not from
 * where the loader mapped it.
 *
 * The walker looks a return address it has no rule for up in the object's
 * .eh_frame_hdr and .eh_frame: pages most programs never read, and each
 * first read of one maps the kernel's whole fault-around window (64 KiB)
 * of the file into the process.  A small profiled program's first samples
 * so mapped 68 to 152 KiB of libc's and libstdc++'s tables, for a few
 * dozen rules read once each: with sampling on, bench_core's pair/16 had a
 * peak RSS of 4,404 KiB, with sampling off 4,276.  Dropping the pages
 * again after the reads (MADV_DONTNEED) does not help the peak: the kernel
 * records the high-water mark before it unmaps them.
 *
 * Reading the same bytes with pread() through the page cache maps nothing.
 * The file is the one the object was loaded from only if its build ID,
 * read where the object's notes lie in the file, is the one the mapped
 * object carries (the walker has read it already: unwind.c's
 * code_identity): a library replaced on disk since (an upgrade) has
 * another, and an object without a build ID, without a file (the vDSO),
 * or with text relocations (its read-only segments changed after loading)
 * is read in memory, as before.
 *
 * Costs a read of the binary-search table's block, one of the FDE and,
 * once per object per walk, one of its CIE for a rule the cache did not
 * hold, where each step of the table's search was a read of its own
 * before its object's index (unwind.c; an object searched often enough
 * gets one): 13 reads a rule of gcc's cc1 before.  gcc -O2 -c src/prof.c
 * at the default rate: 8,833 to 9,768 reads before, 2,306 to 2,377 after;
 * python3 building a 300,000-key dict: 2,219 to 3,716 and 1,150 to 1,192.
 * Then
 * an open, an fstat, a read and a close per object per walk that needed
 * one, as raw system calls (the
 * C library's are cancellation points: os.h); never calls malloc;
 * the state lives in the walk's frame.  The file is open only while the
 * walk runs (close-on-exec): a fork() another thread makes meanwhile
 * leaves the child a copy of the descriptor, as any library's open file
 * would.  Where open() fails (a system-call filter, a file gone), the
 * tables are read in memory.
 */
#ifndef SA_UNWIND_FILE_H
#define SA_UNWIND_FILE_H

#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h"

/* What the walker reads of a CIE: all of every CIE of libc, libstdc++ and
 * python3.11 (28 bytes at most, unwind.c). */
#define UNWIND_FILE_CIE_BYTES 128

struct unwind_file {
    int fd;            /* the object's file, or -1 */
    uintptr_t object;  /* the map start of the object it serves; 0: none yet */
    bool usable;       /* its file was found and is its build */
    uintptr_t base;    /* the object's load bias and program headers */
    const ElfW(Phdr) *phdr;
    size_t phnum;
    /* Its .eh_frame_hdr's search table and entries, once the walker has
     * read them (unwind.c's find_fde); table 0: not yet. */
    uintptr_t table;
    uint64_t count;
    /* The last CIE the walk read for it (its address, the bytes read and
     * how many; cie_at 0: none): an object's FDEs mostly share one or
     * two CIEs, so a walk's further rules in it read only their FDEs. */
    uintptr_t cie_at;
    size_t cie_got;
    uint8_t cie[UNWIND_FILE_CIE_BYTES];
};

/* The object, as the walker found it through _dl_find_object. */
struct unwind_file_object {
    uintptr_t map_start;
    const char *name; /* the link map's l_name: "" for the main program */
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    size_t phnum;
    const ElfW(Dyn) *dynamic;
    const unsigned char *id; /* its build ID where it is mapped, or NULL */
    size_t id_len;
};

/* Whether rules are read from files: off in tests that need a control. */
extern bool SA_TEST_MUTABLE unwind_file_enabled;

static inline void unwind_file_start(struct unwind_file *f)
{
    f->fd = -1;
    f->object = 0;
    f->usable = false;
    f->table = 0;
    f->cie_at = 0;
}

/* Makes `f` serve `o` (closing the file of another object first): true if
 * reads of o's tables may come from its file. */
bool unwind_file_select(struct unwind_file *f, const struct unwind_file_object *o);

/* Reads [addr, addr + len) of the selected object from its file: false
 * unless that lies in the file image of one segment it maps without write
 * permission and the read gets it all. */
bool unwind_file_read(const struct unwind_file *f, uintptr_t addr, void *buf, size_t len);

/* Reads up to `max` bytes from `addr` as unwind_file_read does, fewer
 * where the segment's file image ends: how many, 0 on failure. */
size_t unwind_file_read_upto(const struct unwind_file *f, uintptr_t addr, void *buf, size_t max);

void unwind_file_end(struct unwind_file *f);

#endif
