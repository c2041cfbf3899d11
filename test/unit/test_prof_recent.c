/*
 * test_prof_recent.c: experimental.prof_recent.alloc_max and .alloc_dump
 * (prof_recent.h), as jemalloc has them: off by default; the last N
 * samples kept, oldest first, each with its size, thread, time and stack,
 * and once freed its free's thread, time and stack; the limit lowered or
 * raised at run time; bad values refused; a record's sample freed after the
 * record was dropped.
 */
#define _GNU_SOURCE /* gettid */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "../../include/salloc.h"
#include "prof.h"
#include "sampler.h"
#include "tcache.h"
#include "unit.h"

struct writer {
    void (*write_cb)(void *, const char *);
    void *cbopaque;
};

static char out[1 << 18];
static size_t out_len;

static void collect(void *opaque, const char *s)
{
    (void)opaque;
    size_t n = strlen(s);
    assert_true(out_len + n < sizeof(out));
    memcpy(out + out_len, s, n + 1);
    out_len += n;
}

/* The dump into `out`. */
static void dump(void)
{
    out_len = 0;
    out[0] = '\0';
    struct writer w = {collect, NULL};
    assert_int_equal(mallctl("experimental.prof_recent.alloc_dump", NULL, NULL, &w, sizeof(w)), 0);
}

static size_t occurrences(const char *what)
{
    size_t n = 0;
    for (const char *p = out; (p = strstr(p, what)); p++)
        n++;
    return n;
}

static void set_max(ssize_t max)
{
    assert_int_equal(mallctl("experimental.prof_recent.alloc_max", NULL, NULL, &max, sizeof(max)), 0);
}

static ssize_t read_max(void)
{
    ssize_t max = 0;
    size_t len = sizeof(max);
    assert_int_equal(mallctl("experimental.prof_recent.alloc_max", &max, &len, NULL, 0), 0);
    return max;
}

/* Every allocation sampled, on this thread and on threads started now. */
static size_t saved_lg;

static int sample_everything(void **state)
{
    (void)state;
    saved_lg = prof_lg_sample_get();
    prof_lg_sample_set(0);
    prof_thread_active_set(true);
    sampler_refresh(tcache_get()); /* now, not at the thread's next check-in */
    return 0;
}

static int restore(void **state)
{
    (void)state;
    set_max(0);
    prof_lg_sample_set(saved_lg);
    sampler_refresh(tcache_get());
    return 0;
}

/* The "size" of each record, oldest first, into sizes[]; how many. */
static size_t record_sizes(size_t *sizes, size_t cap)
{
    size_t n = 0;
    for (const char *p = out; n < cap && (p = strstr(p, "\"size\": ")); p++)
        sizes[n++] = strtoul(p + 8, NULL, 10);
    return n;
}

static void test_recent_off_by_default(void **state)
{
    (void)state;
    ssize_t opt = 1;
    size_t len = sizeof(opt);
    assert_int_equal(mallctl("opt.prof_recent_alloc_max", &opt, &len, NULL, 0), 0);
    assert_int_equal(opt, 0);
    assert_int_equal(read_max(), 0);
    free(malloc(100)); /* sampled, not recorded */
    dump();
    assert_non_null(strstr(out, "\"recent_alloc_max\": 0"));
    assert_non_null(strstr(out, "\"recent_alloc\": []"));
    assert_non_null(strstr(out, "\"sample_interval\": 1,"));
}

#define BLOCKS 5

static void test_recent_keeps_the_last_n(void **state)
{
    (void)state;
    set_max(3);
    void *p[BLOCKS];
    size_t usable[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        p[i] = malloc(100 * (size_t)(i + 1));
        usable[i] = malloc_usable_size(p[i]);
    }
    free(p[3]);
    dump();
    size_t sizes[8];
    assert_int_equal(record_sizes(sizes, 8), 3); /* the last three, oldest first */
    for (int i = 0; i < 3; i++)
        assert_int_equal(sizes[i], usable[2 + i]);
    assert_int_equal(occurrences("\"released\": true"), 1);
    assert_int_equal(occurrences("\"free_trace\": [\"0x"), 1);
    assert_int_equal(occurrences("\"alloc_trace\": [\"0x"), 3);
    char uid[64];
    snprintf(uid, sizeof(uid), "\"alloc_thread_uid\": %d,", (int)gettid());
    assert_int_equal(occurrences(uid), 3);
    snprintf(uid, sizeof(uid), "\"free_thread_uid\": %d,", (int)gettid());
    assert_int_equal(occurrences(uid), 1);

    set_max(1); /* the oldest two go */
    dump();
    assert_int_equal(record_sizes(sizes, 8), 1);
    assert_int_equal(sizes[0], usable[4]);
    assert_int_equal(occurrences("\"released\": false"), 1);
    for (int i = 0; i < BLOCKS; i++)
        if (i != 3)
            free(p[i]); /* their records gone or completed: no trouble either way */
    dump();
    assert_int_equal(occurrences("\"released\": true"), 1);
    set_max(0);
    dump();
    assert_non_null(strstr(out, "\"recent_alloc\": []"));
}

static void test_recent_limits(void **state)
{
    (void)state;
    ssize_t bad = -2;
    assert_int_equal(mallctl("experimental.prof_recent.alloc_max", NULL, NULL, &bad, sizeof(bad)),
                     EINVAL);
    assert_int_equal(read_max(), 0);
    set_max(-1); /* all */
    void *p[40];
    for (int i = 0; i < 40; i++)
        p[i] = malloc(64);
    dump();
    assert_int_equal(occurrences("\"size\": "), 40);
    assert_non_null(strstr(out, "\"recent_alloc_max\": -1"));
    for (int i = 0; i < 40; i++)
        free(p[i]);
    dump();
    assert_int_equal(occurrences("\"released\": true"), 40);
    /* The dump's own errors: no writer, or one of the wrong size. */
    assert_int_equal(mallctl("experimental.prof_recent.alloc_dump", NULL, NULL, NULL, 0), EINVAL);
    struct writer w = {collect, NULL};
    assert_int_equal(mallctl("experimental.prof_recent.alloc_dump", NULL, NULL, &w, 1), EINVAL);
    assert_int_equal(mallctl("experimental.prof_recent.alloc_dump", &w, NULL, NULL, 0), EPERM);
}

/* A sample whose record was dropped, freed after its record went to a
 * newer sample, leaves that record alone. */
static void test_recent_dropped_records_stay_dropped(void **state)
{
    (void)state;
    set_max(1);
    void *a = malloc(100), *b = malloc(200); /* a's record dropped for b's */
    void *c = malloc(300);                   /* takes a's old record; b's dropped */
    free(a);
    free(b);
    dump();
    size_t sizes[4];
    assert_int_equal(record_sizes(sizes, 4), 1);
    assert_int_equal(sizes[0], malloc_usable_size(c));
    assert_int_equal(occurrences("\"released\": false"), 1);
    free(c);
    dump();
    assert_int_equal(occurrences("\"released\": true"), 1);
}

/* A named thread allocates; this one frees. */
struct handed {
    void *block;
    pid_t tid; /* the allocating thread's */
};

static void *allocate_named(void *arg)
{
    struct handed *h = arg;
    const char *name = "recent-worker";
    assert_int_equal(mallctl("thread.prof.name", NULL, NULL, &name, sizeof(name)), 0);
    h->block = malloc(300);
    h->tid = gettid();
    return NULL;
}

static void test_recent_free_by_another_thread(void **state)
{
    (void)state;
    set_max(4);
    struct handed h = {NULL, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, allocate_named, &h), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    free(h.block);
    dump();
    char uid[64];
    snprintf(uid, sizeof(uid), "\"alloc_thread_uid\": %d,", (int)h.tid);
    assert_int_equal(occurrences(uid), 1);
    assert_int_equal(occurrences("\"alloc_thread_name\": \"recent-worker\""), 1);
    snprintf(uid, sizeof(uid), "\"free_thread_uid\": %d,", (int)gettid());
    assert_int_equal(occurrences(uid), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_recent_off_by_default, sample_everything, restore),
        cmocka_unit_test_setup_teardown(test_recent_keeps_the_last_n, sample_everything, restore),
        cmocka_unit_test_setup_teardown(test_recent_limits, sample_everything, restore),
        cmocka_unit_test_setup_teardown(test_recent_dropped_records_stay_dropped,
                                        sample_everything, restore),
        cmocka_unit_test_setup_teardown(test_recent_free_by_another_thread, sample_everything,
                                        restore),
    };
    return cmocka_run_group_tests_name("prof_recent", tests, NULL, NULL);
}
