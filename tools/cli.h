/*
 * cli.h: what the pieces of the salloc command share.
 *
 * The command is an ordinary program (stdio, malloc); nothing here runs
 * inside a profiled process.  Data flows one way:
 *
 *   reader (heapv2.c; a profile.proto reader can sit beside it)
 *       -> struct profile: records with *unbiased* values, the memory map
 *   symbolize.c (+ elf.c, addr2line)
 *       -> a name and a source location for every address, allocator
 *          frames marked so reports start at the caller of malloc
 *   reports: top.c, diff.c, flame.c;  run.c starts programs.
 *
 * Every reader fills the same struct profile, so the reports never see a
 * file format.  Errors are reported by returning -1 after printing one
 * line "salloc: <file>: <what>" to stderr.
 */
#ifndef SALLOC_CLI_H
#define SALLOC_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The values a record may carry, all already unbiased (objects or bytes
 * that the samples stand for, not raw sample counts). */
enum value {
    V_INUSE_OBJECTS,
    V_INUSE_SPACE,
    V_ALLOC_OBJECTS,
    V_ALLOC_SPACE,
    V_RESIDENT,      /* salloc's "# salloc: resident" comment lines */
    V_SWAPPED,
    V_FRAGMENTATION,
    V_COUNT
};

struct record {
    uint64_t *pcs;       /* return addresses, leaf first, as in the file */
    size_t depth;
    size_t first;        /* index of the first frame past the allocator's own
                            frames (set by symbolize(); 0 before) */
    double v[V_COUNT];
};

struct mapping {
    uint64_t start, end, offset; /* [start, end) maps file bytes from offset */
    bool exec;
    char *path;                  /* NULL for anonymous memory */
};

/* What symbolize() learnt about one address. */
struct frame {
    uint64_t pc;
    const char *func;    /* never NULL: a name, or "0x... (object)" */
    const char *loc;     /* "file:line", or NULL when unknown */
    char **outer;        /* functions this one is inlined into, innermost
                            first (addr2line -i); the last is the function
                            the address physically lies in */
    size_t nouter;
    bool allocator;      /* inside malloc & co. (jeprof's list) or an allocator library */
};

struct profile {
    const char *path;
    const char *format;          /* "heap_v2", ... */
    double rate;                 /* mean sampling interval R in bytes */
    bool has[V_COUNT];           /* which values this file carries */
    bool fragmentation_dump;     /* inuse_space is free span space (salloc) */
    bool peak_dump;              /* the samples live at the heap's peak (salloc) */
    struct record *recs;
    size_t nrecs;
    struct mapping *maps;
    size_t nmaps;
    bool has_maps;               /* a MAPPED_LIBRARIES section was present */
    struct frame *frames;        /* sorted by pc, one per distinct address */
    size_t nframes;
};

/* profile.c: load any supported format; -1 (message printed) on failure. */
int profile_load(const char *path, struct profile *p);
void profile_free(struct profile *p);
double unbias_scale(double n, double s, double rate);
/* The frame for pc (after symbolize()), never NULL. */
const struct frame *profile_frame(const struct profile *p, uint64_t pc);
/* Name of a record's frame i for reports: its function name. */
const char *record_func(const struct profile *p, const struct record *r, size_t i);

/* heapv2.c: parse a heap_v2 text dump held in buf[0..len). */
int heapv2_parse(const char *buf, size_t len, struct profile *p);

/* symbolize.c: names and locations for every address of the profile. */
void symbolize(struct profile *p, bool want_locations);

/* elf.c: a minimal ELF64 reader. */
struct elf;
struct elf *elf_open(const char *path);
void elf_close(struct elf *e);
/* File offset -> virtual address through the PT_LOAD headers. */
bool elf_offset_to_vaddr(const struct elf *e, uint64_t off, uint64_t *vaddr);
/* The function symbol covering vaddr, or NULL. */
const char *elf_symbol(const struct elf *e, uint64_t vaddr);

/* Subcommands: each returns the process exit status. */
int cmd_run(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_flame(int argc, char **argv);
int cmd_diff(int argc, char **argv);

/* util, in salloc.c */
/* Exit with a message when out of memory; never NULL. */
__attribute__((returns_nonnull, malloc)) void *xmalloc(size_t n);
__attribute__((returns_nonnull)) void *xrealloc(void *p, size_t n);
__attribute__((returns_nonnull, malloc)) char *xstrdup(const char *s);
/* Human-readable bytes ("1.5 MiB") into buf. */
const char *human_bytes(double b, char *buf, size_t size);

#endif
