/*
 * os.h: the only layer that talks to the kernel about memory and time.
 * Nothing else in salloc includes <sys/mman.h> or calls mmap/madvise.
 *
 * Every primitive is safe to call with any salloc lock held: none allocates
 * or takes a lock.  Failures come back as NULL/false with errno set by the
 * kernel (ENOMEM for maps); none aborts.
 *
 * Test seam: the syscalls go through `os_syscalls`, a table that is const in
 * the library and writable in test builds (SA_TESTING), so tests can make
 * mmap fail without touching the rest of the code.
 */
#ifndef SA_OS_H
#define SA_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#ifdef SA_TESTING
#define SA_TEST_MUTABLE
#else
#define SA_TEST_MUTABLE const
#endif

struct os_syscalls {
    void *(*mmap)(void *addr, size_t len, int prot, int flags, int fd, off_t off);
    int (*munmap)(void *addr, size_t len);
    int (*madvise)(void *addr, size_t len, int advice);
    int (*mprotect)(void *addr, size_t len, int prot);
    long (*futex)(uint32_t *word, int op, uint32_t val, const struct timespec *timeout,
                  uint32_t *word2, uint32_t val3);
};
extern SA_TEST_MUTABLE struct os_syscalls os_syscalls;

/* Fresh zeroed read-write memory of `len` bytes (a multiple of the OS page),
 * aligned to `align` (a power of two, at least the OS page).  Untouched
 * pages cost no resident memory; the kernel's overcommit policy applies
 * (no MAP_NORESERVE), so an absurd length fails.  NULL + ENOMEM on failure. */
void *os_map(size_t len, size_t align);

/* Gives the range back to the kernel entirely. */
void os_unmap(void *addr, size_t len);

/* Drops the contents of whole OS pages in the range (MADV_DONTNEED): they stay
 * mapped, read back as zeros and cost no resident memory until touched.
 * Returns false if the kernel refused. */
bool os_purge(void *addr, size_t len);

/* Makes whole OS pages inaccessible (any access faults: guarded samples)
 * or readable and writable again.  False if the kernel refused. */
bool os_protect(void *addr, size_t len, bool accessible);

/* Asks the kernel not to back the range with transparent huge pages, so that
 * residency per OS page stays exact (sampled allocations). */
void os_nohugepage(void *addr, size_t len);
/* Asks for transparent huge pages on [addr, addr + len) (MADV_HUGEPAGE);
 * best effort, as os_nohugepage. */
void os_hugepage(void *addr, size_t len);

/* Whether the kernel backs all anonymous memory with transparent huge
 * pages when it can (/sys/kernel/mm/transparent_hugepage/enabled says
 * [always]), read once (the first call opens the file: make it at start-up).
 * False if the file cannot be read. */
bool os_thp_always(void);

/* Whether the word at `addr` (4-aligned; so its whole OS page) can be read
 * without a fault: 1 yes, 0 no (unmapped or PROT_NONE), -1 the kernel
 * would not say (the call refused: a seccomp filter's errno).  The kernel
 * reads it, one system call, no fault, errno kept (os.c says which call
 * and why).  For the stack walker on a stack whose extent it cannot
 * tell. */
int os_readable(const void *addr);
#define OS_PROBE_VALUE 0x5a17c0deu /* the value its futex wait expects */

/* The kernel's page size (4 KiB on x86-64), read once. */
size_t os_page_size(void);

/* Sleeps while *word == expected (or until a wake-up or a signal: the
 * caller looks again either way); wakes one thread sleeping on word.
 * Process-private futexes, for lock.c. */
void os_futex_wait(int *word, int expected);
void os_futex_wake_one(int *word);

/* Gives the CPU to another runnable thread, if any; sleeps about `ns`
 * nanoseconds (at least the kernel's timer slack).  For lock.c's polled
 * lock, whose waiters are never woken.  Neither is a cancellation point. */
void os_yield(void);
void os_nap_ns(uint64_t ns);

/* A file read from inside the allocator (the stack walker reads unwind
 * tables from object files during a sample): open read-only with `flags`
 * added (O_CLOEXEC always), whether it is a regular file, pread, close.
 * Raw system calls: the C library's open, fstat, pread and close are
 * cancellation points, where a thread whose cancellation is pending would
 * be cancelled in the middle of malloc.  -1 (errno set) on failure. */
int os_file_open(const char *path, int flags);
bool os_file_is_regular(int fd);
ssize_t os_file_pread(int fd, void *buf, size_t len, off_t offset);
void os_file_close(int fd);

/* Monotonic time in nanoseconds; cheap (vDSO), coarse (a few ms). */
uint64_t os_now_ns(void);

/* Wall-clock time in nanoseconds since the Unix epoch (dump time stamps). */
uint64_t os_wall_ns(void);

/* The calling thread's name as the kernel keeps it (prctl PR_GET_NAME: what
 * pthread_setname_np set, or the program's name), NUL-terminated in
 * buf[OS_THREAD_NAME_MAX]; false (buf "") if it cannot be read. */
#define OS_THREAD_NAME_MAX 16
bool os_thread_name(char *buf);

#endif
