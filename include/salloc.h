/*
 * salloc.h: the public interface of salloc, a general-purpose memory
 * allocator for Linux (see salloc(3)).
 *
 * salloc replaces the standard allocation functions: preload it
 * (LD_PRELOAD=libsalloc.so) or link with -lsalloc, and every malloc in the
 * process is salloc's.  This header declares them all, including the ones
 * older C libraries lack (free_sized, free_aligned_sized).  glibc's
 * <malloc.h> functions (mallinfo2, mallinfo, malloc_stats, malloc_info,
 * mallopt) are salloc's too; <malloc.h> declares them.
 */
#ifndef SALLOC_H
#define SALLOC_H

#include <stddef.h>

#define SALLOC_VERSION "0.1.0"
#define SALLOC_VERSION_MAJOR 0
#define SALLOC_VERSION_MINOR 1
#define SALLOC_VERSION_PATCH 0

/* The same exception specification as the C library's own declarations, so
 * that this header and <stdlib.h> can both be included, in C and C++. */
#if defined(__cplusplus) && __cplusplus >= 201103L
extern "C" {
#define SALLOC_NOTHROW noexcept(true)
#elif defined(__cplusplus)
extern "C" {
#define SALLOC_NOTHROW throw()
#else
#define SALLOC_NOTHROW __attribute__((nothrow))
#endif

/* ISO C */
void *malloc(size_t size) SALLOC_NOTHROW;
void free(void *ptr) SALLOC_NOTHROW;
void *calloc(size_t nmemb, size_t size) SALLOC_NOTHROW;
void *realloc(void *ptr, size_t size) SALLOC_NOTHROW;
void *aligned_alloc(size_t alignment, size_t size) SALLOC_NOTHROW;
void free_sized(void *ptr, size_t size) SALLOC_NOTHROW;
void free_aligned_sized(void *ptr, size_t alignment, size_t size) SALLOC_NOTHROW;

/* POSIX and common extensions */
int posix_memalign(void **memptr, size_t alignment, size_t size) SALLOC_NOTHROW;
void *reallocarray(void *ptr, size_t nmemb, size_t size) SALLOC_NOTHROW;
void *memalign(size_t alignment, size_t size) SALLOC_NOTHROW;
void *valloc(size_t size) SALLOC_NOTHROW;
void *pvalloc(size_t size) SALLOC_NOTHROW;
size_t malloc_usable_size(void *ptr) SALLOC_NOTHROW;
int malloc_trim(size_t pad) SALLOC_NOTHROW;

/* jemalloc-compatible control and statistics (salloc(3), MALLCTL
 * NAMESPACE).  Each returns 0 or an errno value and leaves errno alone. */
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
            size_t newlen) SALLOC_NOTHROW;
int mallctlnametomib(const char *name, size_t *mibp, size_t *miblenp) SALLOC_NOTHROW;
int mallctlbymib(const size_t *mib, size_t miblen, void *oldp, size_t *oldlenp,
                 void *newp, size_t newlen) SALLOC_NOTHROW;
/* A statistics report through write_cb (NULL: standard error); opts as
 * jemalloc's: 'J' JSON, 'g' no settings, 'a' no arena, 'b' no size classes. */
void malloc_stats_print(void (*write_cb)(void *cbopaque, const char *s),
                        void *cbopaque, const char *opts) SALLOC_NOTHROW;

/* jemalloc's own allocation functions (salloc(3), MALLOCX), with its
 * flags: the same values, so that a program built against jemalloc's
 * header passes what salloc reads. */
#ifndef MALLOCX_ZERO
#define MALLOCX_LG_ALIGN(la) ((int)(la))
#define MALLOCX_ALIGN(a) ((int)__builtin_ctzll((unsigned long long)(a)))
#define MALLOCX_ZERO ((int)0x40)
#define MALLOCX_TCACHE(tc) ((int)(((tc) + 2) << 8))
#define MALLOCX_TCACHE_NONE MALLOCX_TCACHE(-1)
#define MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)
#endif
void *mallocx(size_t size, int flags) SALLOC_NOTHROW;
void *rallocx(void *ptr, size_t size, int flags) SALLOC_NOTHROW;
size_t xallocx(void *ptr, size_t size, size_t extra, int flags) SALLOC_NOTHROW;
size_t sallocx(const void *ptr, int flags) SALLOC_NOTHROW;
void dallocx(void *ptr, int flags) SALLOC_NOTHROW;
void sdallocx(void *ptr, size_t size, int flags) SALLOC_NOTHROW;
size_t nallocx(size_t size, int flags) SALLOC_NOTHROW;

#ifdef __cplusplus
}
#endif

#endif
