/*
 * os.c: mmap, munmap, madvise, futexes and the clock (see os.h for the contracts).
 */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static long futex_call(uint32_t *word, int op, uint32_t val, const struct timespec *timeout,
                       uint32_t *word2, uint32_t val3)
{
    return syscall(SYS_futex, word, op, val, timeout, word2, val3);
}

SA_TEST_MUTABLE struct os_syscalls os_syscalls = {mmap, munmap, madvise, mprotect, futex_call};

static void *map_raw(size_t len)
{
    /* No MAP_NORESERVE: under the kernel's default overcommit heuristic a
     * request larger than the machine could ever back (malloc(64 TiB)) then
     * fails here, with ENOMEM, as it does with glibc, instead of succeeding
     * and leaving the failure to the OOM killer. */
    void *p = os_syscalls.mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

void *os_map(size_t len, size_t align)
{
    size_t page = os_page_size();
    if (align <= page)
        return map_raw(len);
    if (len > SIZE_MAX - align)
        return errno = ENOMEM, NULL;
    /* Over-map by the alignment and trim both ends: the kernel has no
     * aligned mmap, and the trimmed ends go back at once. */
    char *raw = map_raw(len + align);
    if (!raw)
        return NULL;
    char *start = (char *)sa_align_up((uintptr_t)raw, align);
    if (start > raw)
        os_syscalls.munmap(raw, (size_t)(start - raw));
    size_t tail = (size_t)(raw + len + align - (start + len));
    if (tail)
        os_syscalls.munmap(start + len, tail);
    return start;
}

void os_unmap(void *addr, size_t len)
{
    os_syscalls.munmap(addr, len);
}

bool os_purge(void *addr, size_t len)
{
    return os_syscalls.madvise(addr, len, MADV_DONTNEED) == 0;
}

bool os_protect(void *addr, size_t len, bool accessible)
{
    return os_syscalls.mprotect(addr, len, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

void os_nohugepage(void *addr, size_t len)
{
    os_syscalls.madvise(addr, len, MADV_NOHUGEPAGE);
}

void os_hugepage(void *addr, size_t len)
{
    os_syscalls.madvise(addr, len, MADV_HUGEPAGE);
}

bool os_thp_always(void)
{
    static int always = -1; /* -1: not read yet */
    if (always < 0) {
        char buf[128] = {0};
        int fd = os_file_open("/sys/kernel/mm/transparent_hugepage/enabled", 0);
        ssize_t n = fd >= 0 ? os_file_pread(fd, buf, sizeof(buf) - 1, 0) : -1;
        if (fd >= 0)
            os_file_close(fd);
        always = n > 0 && strstr(buf, "[always]") != NULL;
    }
    return always;
}

/* The kernel reads the word for a futex wait, whose only other effect
 * here is none: a word that differs from OS_PROBE_VALUE returns at once
 * (EAGAIN), and one that matches times out at once (ETIMEDOUT: an absolute
 * deadline long past, which unlike a relative 0 sets no timer to wait
 * for); an unreadable one is EFAULT.  A futex wait rather than
 * process_vm_readv, which would say the same: sandboxes that allow
 * threads allow futexes (glibc waits this way), while process_vm_readv is
 * a debugging call that seccomp filters such as systemd's @system-service
 * leave out, and refuse by killing the process. */
int os_readable(const void *addr)
{
    int saved = errno;
    static const struct timespec long_past = {0, 0};
    long r = os_syscalls.futex((uint32_t *)addr, FUTEX_WAIT_BITSET_PRIVATE, OS_PROBE_VALUE,
                               &long_past, NULL, FUTEX_BITSET_MATCH_ANY);
    int readable = r == 0 || errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR ? 1
                   : errno == EFAULT                                                ? 0
                                                                                    : -1;
    errno = saved;
    return readable;
}

size_t os_page_size(void)
{
    static size_t page;
    if (!page)
        page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

bool os_thread_name(char *buf)
{
    int saved = errno; /* a sample must not change it */
    buf[0] = '\0';
    bool ok = prctl(PR_GET_NAME, buf) == 0;
    buf[OS_THREAD_NAME_MAX - 1] = '\0';
    errno = saved;
    return ok;
}

uint64_t os_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The locks' waits call futex_call directly, not through os_syscalls:
 * a test that refuses os_readable's question must not refuse them too. */
void os_futex_wait(int *word, int expected)
{
    futex_call((uint32_t *)word, FUTEX_WAIT_PRIVATE, (uint32_t)expected, NULL, NULL, 0);
}

void os_futex_wake_one(int *word)
{
    futex_call((uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void os_yield(void) { sched_yield(); }

void os_nap_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    /* The raw system call: glibc's nanosleep() is a cancellation point,
     * and a thread cancelled there would leave the allocator half way
     * through a sample.  A signal cuts the nap short: the caller looks
     * again. */
    syscall(SYS_nanosleep, &ts, NULL);
}

int os_file_open(const char *path, int flags)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | flags);
}

bool os_file_is_regular(int fd)
{
    struct stat st;
    return syscall(SYS_newfstatat, fd, "", &st, AT_EMPTY_PATH) == 0 && S_ISREG(st.st_mode);
}

ssize_t os_file_pread(int fd, void *buf, size_t len, off_t offset)
{
    return (ssize_t)syscall(SYS_pread64, fd, buf, len, offset);
}

void os_file_close(int fd) { syscall(SYS_close, fd); }

uint64_t os_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
