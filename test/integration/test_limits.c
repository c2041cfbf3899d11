/*
 * test_limits.c: the kernel's own limits, with salloc preloaded.  In a
 * child process (the limits are per process), RLIMIT_AS or RLIMIT_DATA is
 * lowered to what the process has plus 256 MiB; then:
 *
 *   - malloc of 1 MiB blocks, then of 64-byte ones, until they fail: NULL
 *     with ENOMEM, no crash; calloc, realloc (the old block kept),
 *     aligned_alloc and posix_memalign fail the same way at that point;
 *   - everything is freed, the limit raised again, and 512 MiB can be
 *     allocated and written: nothing was lost on the way.
 *
 * The child reports by exit status and one line on stdout; the parent
 * asserts.  Run by make test with LD_PRELOAD=lib/libsalloc.so (and passes
 * with glibc too, which is how the test itself was checked).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#define MIB ((size_t)1 << 20)
#define MAX_BLOCKS (1u << 24)

/* Virtual size of this process, from /proc/self/statm (pages). */
static size_t vm_bytes(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static int fail_child(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return 1;
}

/* Allocates `size` blocks until NULL; they go into blocks[] from *n on. */
static int fill(void **blocks, size_t *n, size_t size)
{
    for (;;) {
        if (*n == MAX_BLOCKS)
            return fail_child("%zu-byte blocks never ran out", size);
        errno = 0;
        void *p = malloc(size);
        if (!p)
            return errno == ENOMEM ? 0 : fail_child("malloc(%zu): errno %d", size, errno);
        memset(p, 1, size < 4096 ? size : 4096);
        blocks[(*n)++] = p;
    }
}

/* The whole scenario under `resource`; the child's exit status. */
static int run_limited(int resource)
{
    static void *blocks[MAX_BLOCKS];
    size_t n = 0;
    struct rlimit old, low;
    getrlimit(resource, &old);
    low = old;
    low.rlim_cur = vm_bytes() + 256 * MIB;
    if (setrlimit(resource, &low) != 0)
        return fail_child("setrlimit: %s", strerror(errno));
    if (fill(blocks, &n, MIB) || fill(blocks, &n, 64))
        return 1;
    size_t filled = n;
    /* At the limit every other function fails cleanly too. */
    errno = 0;
    if (calloc(1, 8 * MIB) || errno != ENOMEM)
        return fail_child("calloc at the limit: errno %d", errno);
    errno = 0;
    if (aligned_alloc(4096, 8 * MIB) || errno != ENOMEM)
        return fail_child("aligned_alloc at the limit: errno %d", errno);
    void *p = NULL;
    if (posix_memalign(&p, 64, 8 * MIB) != ENOMEM || p)
        return fail_child("posix_memalign at the limit");
    void *keep = blocks[0];
    errno = 0;
    if (realloc(keep, 64 * MIB) || errno != ENOMEM)
        return fail_child("realloc at the limit: errno %d", errno);
    if (((char *)blocks[0])[100] != 1)
        return fail_child("realloc at the limit damaged the block");
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
    if (setrlimit(resource, &old) != 0)
        return fail_child("setrlimit back: %s", strerror(errno));
    /* Memory again: a large block and many small ones. */
    char *big = malloc(512 * MIB);
    if (!big)
        return fail_child("512 MiB after the limit was lifted: errno %d", errno);
    memset(big, 2, 512 * MIB);
    free(big);
    for (size_t i = 0; i < 100000; i++)
        if (!(blocks[i] = malloc(64)))
            return fail_child("64 bytes after the limit was lifted");
    for (size_t i = 0; i < 100000; i++)
        free(blocks[i]);
    printf("ok: %zu blocks before the limit, then failures with ENOMEM, then memory again\n",
           filled);
    fflush(stdout);
    return 0;
}

static void run_in_child(int resource, const char *what)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        _exit(run_limited(resource));
    }
    close(fds[1]);
    char out[512] = "";
    ssize_t len = read(fds[0], out, sizeof(out) - 1);
    out[len > 0 ? len : 0] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    fprintf(stderr, "# %s: %s", what, out);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s: child %s %d: %s", what, WIFSIGNALED(status) ? "killed by signal" : "exited",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), out);
}

static void test_limits_address_space(void **state)
{
    (void)state;
    run_in_child(RLIMIT_AS, "RLIMIT_AS");
}

static void test_limits_data(void **state)
{
    (void)state;
    run_in_child(RLIMIT_DATA, "RLIMIT_DATA");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_address_space),
        cmocka_unit_test(test_limits_data),
    };
    return cmocka_run_group_tests_name("limits", tests, NULL, NULL);
}
