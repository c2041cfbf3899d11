/*
 * test_prof_hooks.c: experimental.hooks.prof_backtrace (a walker of the
 * program's own for samples' stacks) and experimental.hooks.prof_dump (told
 * each dump's file name), as jemalloc has them: what mallctl accepts and
 * refuses, the stacks samples get, salloc's walker restored, a hook that
 * allocates or dumps from inside.
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "dump.h"
#include "prof.h"
#include "sampler.h"
#include "tcache.h"
#include "stack.h"
#include "unit.h"

typedef void (*backtrace_fn)(void **, unsigned *, unsigned);
typedef void (*dump_fn)(const char *);

static backtrace_fn read_backtrace_hook(void)
{
    backtrace_fn fn = NULL;
    size_t len = sizeof(fn);
    assert_int_equal(mallctl("experimental.hooks.prof_backtrace", &fn, &len, NULL, 0), 0);
    assert_non_null(fn);
    return fn;
}

static void set_backtrace_hook(backtrace_fn fn)
{
    assert_int_equal(mallctl("experimental.hooks.prof_backtrace", NULL, NULL, &fn, sizeof(fn)), 0);
}

static void set_dump_hook(dump_fn fn)
{
    assert_int_equal(mallctl("experimental.hooks.prof_dump", NULL, NULL, &fn, sizeof(fn)), 0);
}

/* The live sample at `p`: its stack's frames into `frames` (up to
 * STACK_MAX_DEPTH), how many; fails if `p` is not sampled. */
static unsigned sample_frames(const void *p, void **frames)
{
    static struct dump_entry entries[4096];
    size_t n = prof_snapshot(entries, 4096);
    for (size_t i = 0; i < n; i++)
        if (entries[i].ptr == p) {
            memcpy(frames, entries[i].stack->frames, entries[i].stack->depth * sizeof(void *));
            return entries[i].stack->depth;
        }
    fail_msg("%p is not a live sample", p);
    return 0;
}

/* Every allocation sampled, on this thread. */
static size_t sample_everything(void)
{
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0);
    prof_thread_active_set(true);
    sampler_refresh(tcache_get()); /* now, not at the thread's next check-in */
    return saved;
}

#define FAKE_DEPTH 5
/* Volatile: gcc takes malloc (attribute malloc) to change no other memory,
 * and would keep these in registers across it. */
static volatile unsigned fake_calls;

/* A walker that makes up its stacks: fixed addresses, the deepest one
 * counting the calls, so that no two samples share a stack. */
static void fake_backtrace(void **vec, unsigned *len, unsigned max)
{
    assert_int_equal(*len, 0);
    assert_int_equal(max, STACK_MAX_DEPTH);
    fake_calls++;
    for (unsigned i = 0; i < FAKE_DEPTH; i++)
        vec[i] = (void *)(uintptr_t)(0x1000 * (i + 1) + (i == FAKE_DEPTH - 1 ? fake_calls : 0u));
    *len = FAKE_DEPTH;
}

/* What mallctl takes: the backtrace hook reads salloc's walker before any
 * is set, is never NULL, and neither a read nor a write is EINVAL, as a
 * value of the wrong size is. */
static void test_prof_hooks_mallctl_rules(void **state)
{
    (void)state;
    backtrace_fn fn = read_backtrace_hook();
    assert_ptr_equal(fn, prof_default_backtrace);
    backtrace_fn null_fn = NULL;
    assert_int_equal(mallctl("experimental.hooks.prof_backtrace", NULL, NULL, &null_fn,
                             sizeof(null_fn)),
                     EINVAL);
    assert_int_equal(mallctl("experimental.hooks.prof_backtrace", NULL, NULL, NULL, 0), EINVAL);
    assert_int_equal(mallctl("experimental.hooks.prof_dump", NULL, NULL, NULL, 0), EINVAL);
    int small = 0;
    assert_int_equal(mallctl("experimental.hooks.prof_backtrace", NULL, NULL, &small,
                             sizeof(small)),
                     EINVAL);
    dump_fn dfn = (dump_fn)1;
    size_t len = sizeof(dfn);
    assert_int_equal(mallctl("experimental.hooks.prof_dump", &dfn, &len, NULL, 0), 0);
    assert_null(dfn); /* none until one is set */
    assert_ptr_equal(read_backtrace_hook(), prof_default_backtrace); /* unchanged */
}

/* A sample's stack is what the hook gave; writing back the walker read
 * first restores salloc's own. */
static void test_prof_hooks_backtrace_gives_the_stack(void **state)
{
    (void)state;
    size_t saved = sample_everything();
    backtrace_fn salloc_walker = read_backtrace_hook();
    set_backtrace_hook(fake_backtrace);
    assert_ptr_equal(read_backtrace_hook(), fake_backtrace);
    unsigned before = fake_calls;
    void *p = malloc(100);
    assert_int_equal(fake_calls, before + 1);
    void *frames[STACK_MAX_DEPTH];
    assert_int_equal(sample_frames(p, frames), FAKE_DEPTH);
    assert_ptr_equal(frames[0], (void *)0x1000);
    assert_ptr_equal(frames[FAKE_DEPTH - 1], (void *)(uintptr_t)(0x5000 + fake_calls));
    set_backtrace_hook(salloc_walker);
    void *q = malloc(100);
    assert_int_equal(fake_calls, before + 1); /* not called again */
    unsigned depth = sample_frames(q, frames);
    assert_true(depth > 1);
    assert_false(stack_in_salloc(frames[0])); /* the test's own frame */
    free(p);
    free(q);
    prof_lg_sample_set(saved);
}

static backtrace_fn augmented_default;

/* jemalloc's pattern: salloc's stack, and one frame of the hook's own. */
static void augmenting_backtrace(void **vec, unsigned *len, unsigned max)
{
    augmented_default(vec, len, max - 1);
    vec[(*len)++] = (void *)0xfeed;
}

__attribute__((noinline)) static void *allocate_here(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

/* The walker read from mallctl, called inside a hook, gives the sample's
 * stack above salloc: the same frames salloc's own walk records. */
static void test_prof_hooks_default_walker_inside_a_hook(void **state)
{
    (void)state;
    size_t saved = sample_everything();
    augmented_default = read_backtrace_hook();
    void *p[2], *frames[2][STACK_MAX_DEPTH];
    unsigned depth[2];
    /* One call instruction for both (volatile: a loop the compiler cannot
     * unroll into two call sites with two return addresses). */
    for (volatile int i = 0; i < 2; i++) {
        if (i == 1)
            set_backtrace_hook(augmenting_backtrace);
        p[i] = allocate_here(200);
    }
    set_backtrace_hook(augmented_default);
    for (int i = 0; i < 2; i++)
        depth[i] = sample_frames(p[i], frames[i]);
    assert_int_equal(depth[1], depth[0] + 1);
    for (unsigned k = 0; k < depth[0]; k++)
        assert_ptr_equal(frames[1][k], frames[0][k]);
    assert_ptr_equal(frames[1][depth[0]], (void *)0xfeed);
    free(p[0]);
    free(p[1]);
    prof_lg_sample_set(saved);
}

static volatile unsigned allocating_calls; /* as fake_calls */

/* A hook that allocates: served unsampled, no recursion, no deadlock. */
static void allocating_backtrace(void **vec, unsigned *len, unsigned max)
{
    (void)max;
    allocating_calls++;
    void *tmp = malloc(64);
    vec[0] = (void *)0x7777;
    *len = 1;
    free(tmp);
}

static void test_prof_hooks_backtrace_hook_may_allocate(void **state)
{
    (void)state;
    size_t saved = sample_everything();
    backtrace_fn salloc_walker = read_backtrace_hook();
    set_backtrace_hook(allocating_backtrace);
    allocating_calls = 0;
    void *p[10];
    for (int i = 0; i < 10; i++)
        p[i] = malloc(300);
    assert_int_equal(allocating_calls, 10); /* once a sample, not for its own mallocs */
    set_backtrace_hook(salloc_walker);
    for (int i = 0; i < 10; i++)
        free(p[i]);
    prof_lg_sample_set(saved);
}

static char told[8][512];
static unsigned ntold;
static bool dump_again; /* the hook asks for one more dump, once */

static void record_dump(const char *filename)
{
    if (ntold < 8)
        snprintf(told[ntold], sizeof(told[0]), "%s", filename);
    ntold++;
    if (dump_again) {
        dump_again = false;
        const char *again = NULL; /* the next automatic name */
        assert_int_equal(mallctl("prof.dump", NULL, NULL, &again, sizeof(again)), 0);
    }
}

/* The dump hook hears of each file written, by the name it has, and of
 * none that failed; it may ask for a dump itself. */
static void test_prof_hooks_dump_hook_told_each_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/salloc_hooks.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], prefix[256];
    snprintf(path, sizeof(path), "%s/named.heap", dir);
    snprintf(prefix, sizeof(prefix), "%s/auto", dir);
    const char *old_prefix = prof_prefix_get(), *p = path, *pre = prefix;
    char saved_prefix[PROF_PREFIX_MAX];
    snprintf(saved_prefix, sizeof(saved_prefix), "%s", old_prefix);
    assert_int_equal(mallctl("prof.prefix", NULL, NULL, &pre, sizeof(pre)), 0);
    set_dump_hook(record_dump);
    ntold = 0;
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &p, sizeof(p)), 0);
    assert_int_equal(ntold, 1);
    assert_string_equal(told[0], path);
    const char *none = NULL;
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &none, sizeof(none)), 0);
    assert_int_equal(ntold, 2);
    assert_memory_equal(told[1], prefix, strlen(prefix));
    struct stat st;
    assert_int_equal(stat(told[1], &st), 0);
    const char *bad = "/nonexistent-dir/x.heap";
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &bad, sizeof(bad)), EFAULT);
    assert_int_equal(ntold, 2); /* a failed dump is not told */
    dump_again = true;
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &p, sizeof(p)), 0);
    assert_int_equal(ntold, 4); /* this one, and the hook's own */
    assert_string_equal(told[2], path);
    assert_int_equal(stat(told[3], &st), 0);
    dump_fn none_fn = NULL;
    set_dump_hook(none_fn);
    assert_int_equal(mallctl("prof.dump", NULL, NULL, &p, sizeof(p)), 0);
    assert_int_equal(ntold, 4);
    pre = saved_prefix;
    assert_int_equal(mallctl("prof.prefix", NULL, NULL, &pre, sizeof(pre)), 0);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prof_hooks_mallctl_rules),
        cmocka_unit_test(test_prof_hooks_backtrace_gives_the_stack),
        cmocka_unit_test(test_prof_hooks_default_walker_inside_a_hook),
        cmocka_unit_test(test_prof_hooks_backtrace_hook_may_allocate),
        cmocka_unit_test(test_prof_hooks_dump_hook_told_each_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
