/*
 * bench_bodies.h: the C benchmark bodies, registered with google benchmark by
 * bench_core.cc.  Three families, one file each:
 *
 *   bodies_single.c   one thread, the allocator's fast paths: pairs, batches,
 *                     a realistic size mix, realloc growth, calloc, alignment
 *   bodies_threads.c  threads that spawn their own pthreads: cross-thread
 *                     frees, larson, false sharing, thread churn, scaling
 *   bodies_memory.c   a heap that changes shape: peak and returned memory
 *
 * Single-thread bodies do exactly `n` operations per call, so the shim uses
 * KeepRunningBatch(n) and google benchmark's time per iteration is the time
 * of ONE operation.  Threaded bodies (and the phase body) time themselves
 * (wall clock) and return the seconds; the shim reports them with
 * UseManualTime, again per operation.  Every body draws its sizes and slots
 * from fixed seeds, so every allocator runs the same sequence.
 */
#ifndef SALLOC_BENCH_BODIES_H
#define SALLOC_BENCH_BODIES_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bodies_single.c ---- */

/* Largest batch bench_batch_lifo/bench_batch_fifo accept. */
#define BENCH_BATCH_MAX 4096

/* n times: p = malloc(size); touch p; free(p). */
void bench_pairs(size_t size, size_t n);

/* count allocations of size bytes, then free them newest first (LIFO) or
 * oldest first (FIFO).  count <= BENCH_BATCH_MAX. */
void bench_batch_lifo(size_t count, size_t size);
void bench_batch_fifo(size_t count, size_t size);

/* A live working set of `slots` objects of a skewed size mix; each op frees
 * a random slot and fills it with a new object, written in full. */
struct sizemix;
struct sizemix *bench_sizemix_create(size_t slots);
void bench_sizemix_run(struct sizemix *mix, size_t ops);
void bench_sizemix_destroy(struct sizemix *mix);

/* A buffer grown by realloc, n reallocs per call; the buffer is freed and
 * started again at its limit.  DOUBLING: 16 B, 32 B, ... 1 MiB.
 * APPEND: +16..+64 B at a time up to 64 KiB (a growing vector). */
enum realloc_growth { REALLOC_DOUBLING, REALLOC_APPEND };
struct realloc_grow;
struct realloc_grow *bench_realloc_grow_create(enum realloc_growth growth);
void bench_realloc_grow_run(struct realloc_grow *grow, size_t n);
void bench_realloc_grow_destroy(struct realloc_grow *grow);

/* n times: p = calloc(1, size); read one byte; free(p). */
void bench_calloc_pairs(size_t size, size_t n);

/* n times: aligned allocation of size bytes at align (aligned_alloc when
 * size is a multiple of align, as C11 requires, else posix_memalign); touch;
 * free. */
void bench_aligned_pairs(size_t align, size_t size, size_t n);

/* ---- bodies_threads.c: each returns the wall-clock seconds it measured ---- */

/* One producer thread allocates and writes `objects` objects of `size` bytes
 * and passes them through a bounded SPSC ring to a consumer thread that
 * reads and frees them. */
double bench_prodcons(size_t size, size_t objects);

/* larson-like server: `threads` threads, each with its own slot array, each
 * doing ops_per_thread random free+malloc ops and regularly handing a batch
 * of its live objects to the next thread, which frees them. */
double bench_larson(unsigned threads, size_t ops_per_thread);

/* False sharing, two threads.  seconds: `rounds` rounds of each thread
 * writing all its objects; shared_lines: 64-byte lines holding objects of
 * both threads. */
struct false_sharing_result {
    double seconds;
    size_t shared_lines;
};
struct false_sharing_result bench_false_sharing_active(size_t rounds);
struct false_sharing_result bench_false_sharing_passive(size_t rounds);

/* `threads` lanes run at once; each lane is a chain of `generations`
 * threads, each doing ops_per_thread random malloc/free ops on a small live
 * set inherited from its predecessor, then exiting. */
double bench_churn(unsigned threads, unsigned generations, size_t ops_per_thread);

/* A pool of `threads` threads, each in turn allocating and freeing bursts
 * of small objects, then waiting, idle, until all have had their turn;
 * seconds for the whole run, whose malloc+free pairs bench_idle_pool_ops
 * counts. */
double bench_idle_pool(unsigned threads);
size_t bench_idle_pool_ops(unsigned threads);

/* `threads` threads, each doing ops_per_thread malloc/free ops on its own
 * small live set; nothing shared.  seconds: from the first thread's start
 * to the last thread's end (thread start-up excluded), which charges any
 * stagger of the threads' starts to the allocator; mean_thread_seconds:
 * the mean of each thread's own start-to-end time.  harness_only: the same
 * random draws and writes on a fixed set of blocks, no malloc or free (the
 * machine's own scaling). */
struct scale_result {
    double seconds;
    double mean_thread_seconds;
};
struct scale_result bench_scale_local(unsigned threads, size_t ops_per_thread, bool harness_only);

/* ---- bodies_memory.c ---- */

/* Build a heap of objects_per_build mixed small objects (about 256 MiB for
 * 800000), free 90% at random, build again with another size mix, free
 * everything.  seconds covers all of it; RSS figures in MiB. */
struct phase_result {
    double seconds;
    size_t allocations;
    double rss_peak_mib;
    double rss_after_free_mib;
    /* Each part's time per operation: the first build's allocations, the
     * frees of 90% of it (random order), the second build's allocations,
     * the frees of everything left (the first build's 10% and the second
     * build, random order).  An allocation includes writing the object. */
    double build_ns, free_most_ns, rebuild_ns, free_rest_ns;
};
struct phase_result bench_phase(size_t objects_per_build);

#ifdef __cplusplus
}
#endif

#endif
