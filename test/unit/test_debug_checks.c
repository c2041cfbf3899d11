/*
 * test_debug_checks.c: debug builds (SA_DEBUG, as unit tests are) check the
 * heap's invariants on their own, from the slow paths, not only when a test
 * calls the checkers.  Each case breaks one invariant in a child process,
 * then only allocates and frees; the child must die by abort() with the
 * checker's message within a few hundred slow-path visits:
 *
 *   - a thread cache's list shorter than its count (tcache_check, from a
 *     refill or an overflow);
 *   - a small span's count of allocated objects off by one (central_check,
 *     from a central batch);
 *   - a free span's dirty bit flipped (pageheap_check, from an allocation
 *     or free of the page heap).
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prof.h"
#include "unit.h"

static void *volatile sink;

int malloc_trim(size_t pad);

/* Traffic that visits every slow path: cache refills and overflows,
 * central batches (with `trim`, malloc_trim gives every cached object back
 * each round: more of them), page-heap allocations and frees. */
static void churn(bool trim)
{
    static void *held[4096];
    for (int round = 0; round < 64; round++) {
        if (trim)
            malloc_trim(0);
        for (int i = 0; i < 4096; i++)
            held[i] = malloc((size_t)(i % 64 + 1) * 48);
        for (int i = 0; i < 4096; i++)
            free(held[i]);
        for (int i = 0; i < 64; i++) {
            sink = malloc((size_t)(i + 1) * SA_PAGE_SIZE + SA_MAX_SMALL);
            free(sink);
        }
    }
}

/* Runs `breaker` then churn() in a child; the child must abort with
 * `message` on stderr. */
static void expect_caught(void (*breaker)(void), bool trim, const char *message)
{
    int err[2];
    assert_int_equal(pipe(err), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(err[1], 2);
        alarm(60); /* a check that never comes: SIGALRM, not a hang */
        breaker();
        churn(trim);
        _exit(0); /* not caught */
    }
    close(err[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) - 1 && (r = read(err[0], buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(err[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    fprintf(stderr, "# %s", buf);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !strstr(buf, message))
        fail_msg("expected abort with \"%s\"; status 0x%x, stderr: %s", message, status, buf);
}

static void lose_cached_objects(void)
{
    unsigned cls = sizeclass_of(64);
    for (int i = 0; i < 8; i++) { /* some objects on the stack */
        sink = malloc(64);
        free(sink);
    }
    struct tcache_bin *bin = &tcache_get()->bins[cls];
    assert_true(tcache_bin_count(bin) > 0);
    bin->top[-1] = malloc(96); /* an object of another class in its place */
}

static void miscount_span(void)
{
    prof_thread_active_set(false); /* a sampled block has no small span */
    void *p = malloc(96);
    struct span *s = pagemap_span(p);
    assert_true(s && s->state == SPAN_SMALL);
    s->allocated++;
}

static void flip_free_span(void)
{
    void *p = malloc(64 * SA_PAGE_SIZE);
    free(p);
    struct span *s = pagemap_span(p);
    assert_true(s && s->state == SPAN_FREE);
    s->dirty ^= 1;
}

static void test_debug_checks_tcache(void **state)
{
    (void)state;
    expect_caught(lose_cached_objects, false, "not an object of its class");
}

static void test_debug_checks_central(void **state)
{
    (void)state;
    expect_caught(miscount_span, true, "central: ");
}

static void test_debug_checks_pageheap(void **state)
{
    (void)state;
    expect_caught(flip_free_span, false, "pageheap: ");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_debug_checks_tcache),
        cmocka_unit_test(test_debug_checks_central),
        cmocka_unit_test(test_debug_checks_pageheap),
    };
    return cmocka_run_group_tests_name("debug checks on slow paths", tests, NULL, NULL);
}
