/*
 * pprof.h: writing profile.proto heap profiles (spec/heap-dump-formats.md,
 * section 3), encoded by hand: varints, length-delimited messages, and for
 * .pb.gz a gzip stream of stored deflate blocks with its CRC-32.  No protobuf
 * or zlib library.
 *
 * The caller (dump.c) gives records whose values are already unbiased and
 * rounded: pprof never rescales.  The writer adds the mappings, dedups
 * locations (address = return address - 1, one Location per address),
 * interns strings in first-use order, and sets period_type space/bytes,
 * period = R and default_sample_type.
 *
 * Runs inside the allocator (a dump may be written from malloc's slow path,
 * or in a fork child): never calls malloc or stdio; scratch memory comes
 * from os_map and is unmapped before returning.
 */
#ifndef SA_PPROF_H
#define SA_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PPROF_MAX_TYPES 8

struct pprof_value_type {
    const char *type, *unit; /* e.g. "inuse_space", "bytes" */
};

/* One Sample. */
struct pprof_record {
    void *const *frames;   /* return addresses, leaf first */
    uint32_t depth;
    uint64_t usable;       /* label "bytes" (num, num_unit "bytes"); 0: no label */
    const char *thread;    /* label "thread" (str); NULL or "": no label */
    int64_t values[PPROF_MAX_TYPES]; /* one per sample type, in order */
};

/* One Mapping (an executable file-backed segment). */
struct pprof_mapping {
    uint64_t start, limit, offset;
    const char *filename;
    const char *build_id;  /* hex, or NULL */
};

struct pprof_profile {
    const struct pprof_value_type *types;
    size_t ntypes;
    const char *default_type;      /* NULL: not written */
    const struct pprof_record *records;
    size_t nrecords;
    const struct pprof_mapping *mappings; /* main program first */
    size_t nmappings;
    uint64_t period;               /* R; 0: period/period_type not written */
    int64_t time_nanos;            /* 0: not written */
    const char *const *comments;
    size_t ncomments;
};

/* Encodes `p` to `fd`, gzip-wrapped (stored blocks) if `gzip`.  0, or -1
 * with errno on a write error or ENOMEM. */
int pprof_write(int fd, const struct pprof_profile *p, bool gzip);

/* Reads the executable file-backed mappings of this process from
 * /proc/self/maps into `out` (up to `cap`), main program first; the strings
 * point into `buf` (size `bufsize`).  Returns the count, or 0 if the file
 * cannot be read.  Not reentrant (its line buffer is static, off a small
 * thread's stack): callers hold the dump lock. */
size_t pprof_read_mappings(struct pprof_mapping *out, size_t cap, char *buf, size_t bufsize);

/* CRC-32 (IEEE 802.3, as zlib's crc32()) of `len` bytes, continuing `crc`
 * (start with 0). */
uint32_t pprof_crc32(uint32_t crc, const void *data, size_t len);

#endif
