/*
 * bodies_single.c: one-thread workloads, the allocator's fast paths.
 *
 *   pairs          malloc+free of one size: the thread cache's pop and push
 *   batch LIFO/FIFO  1000 allocations, then 1000 frees: refills and flushes
 *                  of the thread cache, in stack order and in queue order
 *   sizemix        a live working set of a realistic size mix, each object
 *                  written in full: what a program's steady state costs
 *   realloc_grow   a buffer grown by doubling and a vector grown by appends
 *   calloc         zeroed memory: who can skip the memset on fresh pages
 *   aligned        aligned_alloc / posix_memalign at cache-line and page
 *                  alignment
 *
 * Every object is touched (written, or read for calloc) so the allocation
 * is real, the same way for every allocator.  These bodies are built with
 * -fno-builtin-malloc/-calloc/-realloc/-free, AND each pointer goes through
 * escape(), so gcc cannot delete free(malloc(n)) or the writes.
 */
#define _POSIX_C_SOURCE 200809L   /* posix_memalign */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_bodies.h"
#include "bench_util.h"

/* ---- pairs and batches ---- */

static inline void *alloc_touch(size_t size)
{
    char *p = alloc_or_die(size);
    p[0] = (char)size;   /* one write: the first page is really used */
    escape(p);
    return p;
}

void bench_pairs(size_t size, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(alloc_touch(size));
}

static void *batch_slots[BENCH_BATCH_MAX];

void bench_batch_lifo(size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++)
        batch_slots[i] = alloc_touch(size);
    for (size_t i = count; i-- > 0;)
        free(batch_slots[i]);
}

void bench_batch_fifo(size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++)
        batch_slots[i] = alloc_touch(size);
    for (size_t i = 0; i < count; i++)
        free(batch_slots[i]);
}

/* ---- sizemix: a live working set with a skewed size mix ---- */

struct sizemix {
    size_t nslots;
    void **slot;
    bench_rng rng;
};

/* Sizes as C and C++ programs request them: mostly small structs, strings
 * and list nodes, a tail of buffers, a rare big block.  Per 1000 draws:
 * 850 uniform in 16..128 B; 149 in 129 B..4 KiB, log-uniform (as many
 * 129..256 B as 2..4 KiB: small buffers are more common than large ones);
 * 1 in 4 KiB..64 KiB, log-uniform too. */
static size_t sizemix_size(bench_rng *rng)
{
    uint32_t draw = bench_rng_below(rng, 1000);
    if (draw < 850)
        return bench_rng_range(rng, 16, 128);
    size_t base = draw < 999 ? (size_t)128 << bench_rng_below(rng, 5)     /* 128..2048 */
                             : (size_t)4096 << bench_rng_below(rng, 4);   /* 4 K..32 K */
    return bench_rng_range(rng, base + 1, 2 * base);
}

/* A new object, written in full as a program initialising it would. */
static void *sizemix_object(bench_rng *rng)
{
    size_t size = sizemix_size(rng);
    void *p = alloc_or_die(size);
    memset(p, (int)(size & 0xff), size);
    escape(p);
    return p;
}

struct sizemix *bench_sizemix_create(size_t slots)
{
    struct sizemix *mix = alloc_or_die(sizeof *mix);
    mix->nslots = slots;
    mix->slot = alloc_or_die(slots * sizeof *mix->slot);
    mix->rng = bench_rng_seeded(1);
    for (size_t i = 0; i < slots; i++)
        mix->slot[i] = sizemix_object(&mix->rng);
    return mix;
}

void bench_sizemix_run(struct sizemix *mix, size_t ops)
{
    for (size_t i = 0; i < ops; i++) {
        size_t victim = bench_rng_below(&mix->rng, (uint32_t)mix->nslots);
        free(mix->slot[victim]);
        mix->slot[victim] = sizemix_object(&mix->rng);
    }
}

void bench_sizemix_destroy(struct sizemix *mix)
{
    for (size_t i = 0; i < mix->nslots; i++)
        free(mix->slot[i]);
    free(mix->slot);
    free(mix);
}

/* ---- realloc_grow: buffers that grow ---- */

#define DOUBLING_FIRST ((size_t)16)
#define DOUBLING_LIMIT ((size_t)1 << 20)    /* 16 B .. 1 MiB: 17 reallocs */
#define APPEND_LIMIT   ((size_t)64 << 10)   /* ~1600 appends of 16..64 B */

struct realloc_grow {
    enum realloc_growth growth;
    char *buf;
    size_t size;
    bench_rng rng;
};

struct realloc_grow *bench_realloc_grow_create(enum realloc_growth growth)
{
    struct realloc_grow *grow = alloc_or_die(sizeof *grow);
    grow->growth = growth;
    grow->buf = NULL;
    grow->size = 0;
    grow->rng = bench_rng_seeded(2);
    return grow;
}

/* The next size of the buffer; 0 when it has reached its limit. */
static size_t next_size(struct realloc_grow *grow)
{
    if (grow->growth == REALLOC_DOUBLING) {
        if (grow->size == DOUBLING_LIMIT)
            return 0;
        return grow->size == 0 ? DOUBLING_FIRST : 2 * grow->size;
    }
    size_t size = grow->size + bench_rng_range(&grow->rng, 16, 64);
    return size > APPEND_LIMIT ? 0 : size;
}

/* n reallocs.  The first of each cycle is realloc(NULL, size), i.e. a
 * malloc; the buffer is freed when it reaches its limit (the free's cost is
 * spread over the cycle's reallocs).  The appended bytes are written, as a
 * program appending data would: an allocator that moves the buffer to
 * fresh pages pays their page faults here. */
void bench_realloc_grow_run(struct realloc_grow *grow, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t size = next_size(grow);
        if (size == 0) {
            free(grow->buf);
            grow->buf = NULL;
            grow->size = 0;
            size = next_size(grow);
        }
        char *buf = realloc(grow->buf, size);
        if (buf == NULL)
            die("realloc returned NULL");
        memset(buf + grow->size, (int)(i & 0xff), size - grow->size);
        escape(buf);
        grow->buf = buf;
        grow->size = size;
    }
}

void bench_realloc_grow_destroy(struct realloc_grow *grow)
{
    free(grow->buf);
    free(grow);
}

/* ---- calloc ---- */

void bench_calloc_pairs(size_t size, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *p = calloc(1, size);
        if (p == NULL)
            die("calloc returned NULL");
        escape(p);
        /* One read: the memory is used, and it must be zero. */
        if (*(volatile char *)p != 0)
            die("calloc returned memory that is not zeroed");
        free(p);
    }
}

/* ---- aligned allocations ---- */

static void *aligned_or_die(size_t align, size_t size)
{
    void *p = NULL;
    if (size % align == 0)
        p = aligned_alloc(align, size);
    else if (posix_memalign(&p, align, size) != 0)
        p = NULL;
    if (p == NULL)
        die("aligned allocation returned NULL");
    if (((uintptr_t)p & (align - 1)) != 0)
        die("aligned allocation is misaligned");
    return p;
}

void bench_aligned_pairs(size_t align, size_t size, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *p = aligned_or_die(align, size);
        p[0] = (char)i;
        escape(p);
        free(p);
    }
}
