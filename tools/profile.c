/*
 * profile.c: loading a dump into a struct profile, whatever its format.
 *
 * The format is recognised from the first bytes: "heap_v2/" goes to
 * heapv2.c.  A profile.proto reader (plain, or gzip magic 1f 8b) plugs in
 * here the same way: fill struct profile with unbiased values (pprof
 * values from salloc are already unbiased) and the mappings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* jeprof's AdjustSamples: 1 / (1 - exp(-(s/n)/R)); no scaling when n or R
 * is 0 (jeprof does not rescale heap_v2/0). */
double unbias_scale(double n, double s, double rate)
{
    if (n <= 0 || rate <= 0)
        return 1.0;
    double p = -expm1(-(s / n) / rate);
    return p > 0 ? 1.0 / p : 1.0;
}

/* Dumps above this are refused: a real heap_v2 file is a few MB. */
#define MAX_DUMP_BYTES ((size_t)1 << 31)

int profile_load(const char *path, struct profile *p)
{
    memset(p, 0, sizeof(*p));
    p->path = path;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "salloc: %s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "salloc: %s: is a directory, not a dump\n", path);
        fclose(f);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (len == cap) {
            if (cap >= MAX_DUMP_BYTES) {
                fprintf(stderr, "salloc: %s: larger than 2 GiB, not a heap dump\n", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = xrealloc(buf, cap *= 2);
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "salloc: %s: read error\n", path);
        free(buf);
        return -1;
    }
    int rc;
    if (len >= 8 && !memcmp(buf, "heap_v2/", 8)) {
        rc = heapv2_parse(buf, len, p);
    } else if (len == 0) {
        fprintf(stderr, "salloc: %s: empty file (not a heap profile)\n", path);
        rc = -1;
    } else if (len >= 2 && (unsigned char)buf[0] == 0x1f && (unsigned char)buf[1] == 0x8b) {
        fprintf(stderr, "salloc: %s: a gzipped profile.proto (pprof) dump; this salloc reads "
                        "heap_v2 dumps only (use prof_format:heap)\n", path);
        rc = -1;
    } else if (len >= 13 && !memcmp(buf, "heap profile:", 13)) {
        fprintf(stderr, "salloc: %s: a legacy gperftools heap profile; this salloc reads "
                        "heap_v2 dumps only\n", path);
        rc = -1;
    } else {
        fprintf(stderr, "salloc: %s: not a heap profile (expected a heap_v2 dump)\n", path);
        rc = -1;
    }
    free(buf);
    if (rc)
        profile_free(p);
    return rc;
}

void profile_free(struct profile *p)
{
    for (size_t i = 0; i < p->nrecs; i++)
        free(p->recs[i].pcs);
    free(p->recs);
    for (size_t i = 0; i < p->nmaps; i++)
        free(p->maps[i].path);
    free(p->maps);
    for (size_t i = 0; i < p->nframes; i++) {
        free((char *)p->frames[i].func);
        free((char *)p->frames[i].loc);
        for (size_t k = 0; k < p->frames[i].nouter; k++)
            free(p->frames[i].outer[k]);
        free(p->frames[i].outer);
    }
    free(p->frames);
    const char *path = p->path;
    memset(p, 0, sizeof(*p));
    p->path = path;
}

const struct frame *profile_frame(const struct profile *p, uint64_t pc)
{
    size_t lo = 0, hi = p->nframes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->frames[mid].pc < pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < p->nframes && p->frames[lo].pc == pc)
        return &p->frames[lo];
    static struct frame unknown = {0, "??", NULL, NULL, 0, false};
    return &unknown;
}

const char *record_func(const struct profile *p, const struct record *r, size_t i)
{
    return profile_frame(p, r->pcs[i])->func;
}
