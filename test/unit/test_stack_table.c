/*
 * test_stack_table.c: the stack table (src/stack.c): one record per
 * distinct stack, however many threads intern it at once.
 *
 *   - 3,000 distinct stacks, interned by 4 threads at once in different
 *     orders: every thread gets the same record for a stack, and distinct
 *     stacks get distinct records; the first 512 go to the table's first
 *     page, the rest to the whole table, and the switch happens while the
 *     threads race (a lookup that misses a stack published in the whole
 *     table must find it under the lock, not publish it twice);
 *   - prof.accum's walk over the table (stack_accum_foreach) and its reset
 *     reach every record, in both tables.
 *
 * The stacks are made-up return addresses, in no code: only the table
 * sees them.
 */
#include <pthread.h>

#include "stack.h"
#include "unit.h"

#define STACKS 3000
#define THREADS 4
#define DEPTH 4

/* Stack i's frames: distinct for each i, none a real return address. */
static void frames_of(unsigned i, void **frames)
{
    frames[0] = (void *)(uintptr_t)(0x51a0000000ull + 16 * (uint64_t)i);
    frames[1] = (void *)(uintptr_t)0x51b0000000ull;
    frames[2] = (void *)(uintptr_t)(0x51c0000000ull + i);
    frames[3] = (void *)(uintptr_t)0x51d0000000ull;
}

static struct prof_stack *records[THREADS][STACKS];
static pthread_barrier_t start;

struct interner {
    unsigned t;
};

static void *intern_all(void *arg)
{
    unsigned t = ((struct interner *)arg)->t;
    pthread_barrier_wait(&start);
    for (unsigned k = 0; k < STACKS; k++) {
        /* Thread t goes through the stacks from its own starting point,
         * half of them backwards: the same stack is new to several
         * threads at once, at the moment the first table fills too. */
        unsigned i = t % 2 ? (t * 997 + k) % STACKS : (STACKS - 1 - (t * 997 + k) % STACKS);
        void *frames[DEPTH];
        frames_of(i, frames);
        records[t][i] = stack_intern(frames, DEPTH);
    }
    return NULL;
}

static int compare_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void test_stack_table_one_record_per_stack_across_threads(void **state)
{
    (void)state;
    pthread_t th[THREADS];
    struct interner arg[THREADS];
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    for (unsigned t = 0; t < THREADS; t++) {
        arg[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, intern_all, &arg[t]), 0);
    }
    for (unsigned t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);
    pthread_barrier_destroy(&start);
    static uintptr_t sorted[STACKS];
    for (unsigned i = 0; i < STACKS; i++) {
        struct prof_stack *st = records[0][i];
        assert_non_null(st);
        for (unsigned t = 1; t < THREADS; t++)
            if (records[t][i] != st)
                fail_msg("stack %u: thread %u got record %p, thread 0 %p", i, t,
                         (void *)records[t][i], (void *)st);
        void *frames[DEPTH];
        frames_of(i, frames);
        assert_int_equal(st->depth, DEPTH);
        assert_memory_equal(st->frames, frames, sizeof(frames));
        /* Found again, by a lookup alone. */
        assert_ptr_equal(stack_intern(frames, DEPTH), st);
        sorted[i] = (uintptr_t)st;
    }
    qsort(sorted, STACKS, sizeof(sorted[0]), compare_ptr);
    for (unsigned i = 1; i < STACKS; i++)
        assert_true(sorted[i] != sorted[i - 1]);
}

/* Marks the made-up stacks stack_accum_foreach reaches. */
static int mark_seen(const struct stack_accum *g, struct prof_stack *st, void *arg)
{
    unsigned char *seen = arg;
    uintptr_t f0 = (uintptr_t)st->frames[0];
    if (st->depth == DEPTH && f0 >= 0x51a0000000ull && f0 < 0x51a0000000ull + 16 * STACKS &&
        (uintptr_t)st->frames[1] == 0x51b0000000ull && g->count) {
        unsigned i = (unsigned)((f0 - 0x51a0000000ull) / 16);
        seen[i] += (unsigned char)g->count;
    }
    return 1;
}

static void test_stack_table_accumulated_counts_reach_both_tables(void **state)
{
    (void)state;
    static unsigned char seen[STACKS];
    stack_accum_reset(2); /* counts go on for epoch 2 only */
    for (unsigned i = 0; i < STACKS; i++) {
        void *frames[DEPTH];
        frames_of(i, frames);
        struct prof_stack *st = stack_intern(frames, DEPTH);
        assert_non_null(st);
        stack_accum_add(st, 64, 1u << 19, 2);
    }
    memset(seen, 0, sizeof(seen));
    stack_accum_foreach(mark_seen, seen);
    for (unsigned i = 0; i < STACKS; i++)
        if (seen[i] != 1)
            fail_msg("stack %u counted %u times by stack_accum_foreach", i, seen[i]);
    /* A reset reaches them all too. */
    stack_accum_reset(3);
    memset(seen, 0, sizeof(seen));
    stack_accum_foreach(mark_seen, seen);
    for (unsigned i = 0; i < STACKS; i++)
        assert_int_equal(seen[i], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stack_table_one_record_per_stack_across_threads),
        cmocka_unit_test(test_stack_table_accumulated_counts_reach_both_tables),
    };
    return cmocka_run_group_tests_name("stack_table", tests, NULL, NULL);
}
