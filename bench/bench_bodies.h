/*
 * bench_bodies.h: the C benchmark bodies, registered with google benchmark by
 * bench_core.cc.  Every body does `n` malloc+free operations per call, so the
 * shim can use KeepRunningBatch(n) and google benchmark's "time per
 * iteration" is the time of ONE malloc+free, for every benchmark.
 */
#ifndef SALLOC_BENCH_BODIES_H
#define SALLOC_BENCH_BODIES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest batch bench_batch_lifo/bench_batch_fifo accept. */
#define BENCH_BATCH_MAX 4096

/* n times: p = malloc(size); touch p; free(p). */
void bench_pairs(size_t size, size_t n);

/* count allocations of size bytes, then free them newest first (LIFO) or
 * oldest first (FIFO).  count <= BENCH_BATCH_MAX. */
void bench_batch_lifo(size_t count, size_t size);
void bench_batch_fifo(size_t count, size_t size);

#ifdef __cplusplus
}
#endif

#endif
