/*
 * test_lock.c: salloc's futex lock (lock.h).
 *
 *   - mutual exclusion: threads on more threads than cores increment a
 *     plain counter under one lock, and none of the increments is lost;
 *   - a thread that finds the lock held for long marks the word and
 *     sleeps, and the holder's unlock wakes it (a missing wake-up fails the
 *     test by a timeout instead of hanging it);
 *   - after fork, the child's reset frees a lock the parent held;
 *   - the polled lock (a plain-store unlock, no wake-ups) excludes as well,
 *     and a waiter that has gone to napping gets it once it is free, even
 *     if cancelled meanwhile (the nap is no cancellation point).
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"
#include "unit.h"

#define THREADS 4
#define ROUNDS 200000

static sa_lock_t counted = SA_LOCK_INITIALIZER(LOCK_RANK_CENTRAL);
static sa_polled_lock_t polled_counted = SA_POLLED_LOCK_INITIALIZER(LOCK_RANK_SAMPLES);
static unsigned long counter; /* under the lock being tested */

/* One kind of lock, for the tests both kinds share. */
struct kind {
    void (*lock)(void *l);
    void (*unlock)(void *l);
    void *l;
    const int *word;
};

static void futex_lock(void *l) { sa_lock(l); }
static void futex_unlock(void *l) { sa_unlock(l); }
static void polled_lock(void *l) { sa_polled_lock(l); }
static void polled_unlock(void *l) { sa_polled_unlock(l); }

static void *increment(void *arg)
{
    const struct kind *k = arg;
    for (unsigned i = 0; i < ROUNDS; i++) {
        k->lock(k->l);
        /* A read, a pause and a write: a second holder would lose one. */
        unsigned long v = counter;
        __asm__ volatile("" ::: "memory");
        counter = v + 1;
        k->unlock(k->l);
    }
    return NULL;
}

static void excludes_under_contention(struct kind *k)
{
    counter = 0;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, increment, k), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(counter, (unsigned long)THREADS * ROUNDS);
    assert_int_equal(__atomic_load_n(k->word, __ATOMIC_RELAXED), LOCK_FREE);
}

static void test_lock_excludes_under_contention(void **state)
{
    (void)state;
    excludes_under_contention(&(struct kind){futex_lock, futex_unlock, &counted, &counted.word});
}

static void test_polled_lock_excludes_under_contention(void **state)
{
    (void)state;
    excludes_under_contention(&(struct kind){polled_lock, polled_unlock, &polled_counted,
                                             &polled_counted.lock.word});
}

static sa_lock_t held = SA_LOCK_INITIALIZER(LOCK_RANK_CENTRAL);
static int got_it; /* set by the waiter once it holds `held` */

/* Takes and drops the lock of kind `arg`, saying so in got_it. */
static void *wait_for_it(void *arg)
{
    const struct kind *k = arg;
    k->lock(k->l);
    __atomic_store_n(&got_it, 1, __ATOMIC_RELAXED);
    k->unlock(k->l);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Joins `t` within 5 s, else fails with `msg` (a waiter never served). */
static void *join_within_5s(pthread_t t, const char *msg)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;
    void *res = NULL;
    int rc = pthread_timedjoin_np(t, &res, &deadline);
    if (rc == ETIMEDOUT)
        fail_msg("%s", msg);
    assert_int_equal(rc, 0);
    return res;
}

static void test_lock_sleeper_is_woken(void **state)
{
    (void)state;
    sa_lock(&held);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_it,
                                    &(struct kind){futex_lock, futex_unlock, &held, &held.word}),
                     0);
    /* The waiter spins a while, then marks the word and sleeps. */
    int waited_ms = 0;
    while (__atomic_load_n(&held.word, __ATOMIC_RELAXED) != LOCK_HELD_WAITERS && waited_ms < 5000) {
        sleep_ms(1);
        waited_ms++;
    }
    assert_int_equal(__atomic_load_n(&held.word, __ATOMIC_RELAXED), LOCK_HELD_WAITERS);
    sleep_ms(20); /* asleep in the kernel by now, not spinning */
    assert_int_equal(__atomic_load_n(&got_it, __ATOMIC_RELAXED), 0);
    sa_unlock(&held);
    join_within_5s(t, "the waiter was not woken by the unlock");
    assert_int_equal(__atomic_load_n(&got_it, __ATOMIC_RELAXED), 1);
    /* The waiter took the lock marked (another might have slept too), so
     * its own unlock made a wake-up call that found no one: harmless. */
    assert_int_equal(__atomic_load_n(&held.word, __ATOMIC_RELAXED), LOCK_FREE);
}

static sa_polled_lock_t polled_held = SA_POLLED_LOCK_INITIALIZER(LOCK_RANK_SAMPLES);
static struct kind polled_held_kind = {polled_lock, polled_unlock, &polled_held, &polled_held.lock.word};

/* Holds polled_held and starts `waiter` on it; returns once the waiter has
 * had `ms` to spin, yield and go to napping. */
static pthread_t hold_with_napping_waiter(void *(*waiter)(void *), long ms)
{
    __atomic_store_n(&got_it, 0, __ATOMIC_RELAXED);
    sa_polled_lock(&polled_held);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &polled_held_kind), 0);
    sleep_ms(ms);
    assert_int_equal(__atomic_load_n(&got_it, __ATOMIC_RELAXED), 0);
    /* The word says held, never "waiters": a waiter leaves no mark. */
    assert_int_equal(__atomic_load_n(&polled_held.lock.word, __ATOMIC_RELAXED), LOCK_HELD);
    return t;
}

/* Nobody wakes a polled lock's waiter: held for 200 ms, its waiter has
 * spun, yielded and gone to napping, and must still notice the unlock. */
static void test_polled_lock_napping_waiter_gets_it(void **state)
{
    (void)state;
    pthread_t t = hold_with_napping_waiter(wait_for_it, 200);
    sa_polled_unlock(&polled_held);
    join_within_5s(t, "the napping waiter never took the freed polled lock");
    assert_int_equal(__atomic_load_n(&got_it, __ATOMIC_RELAXED), 1);
    assert_int_equal(__atomic_load_n(&polled_held.lock.word, __ATOMIC_RELAXED), LOCK_FREE);
}

static void assert_child_exited_zero(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_lock_reset_in_fork_child(void **state)
{
    (void)state;
    sa_lock(&held);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sa_lock_reinit(&held); /* what fork.c's child handler does */
        sa_lock(&held);        /* would wait forever if still held */
        sa_unlock(&held);
        _exit(held.word == LOCK_FREE ? 0 : 1);
    }
    sa_unlock(&held);
    assert_child_exited_zero(pid);
}

static void *wait_for_polled_then_testcancel(void *arg)
{
    wait_for_it(arg);
    pthread_testcancel(); /* the cancellation lands here, after the lock */
    return NULL;
}

/* A napping waiter is inside malloc or free: cancelled there, it would
 * unwind out of a half-done sample.  So the nap is no cancellation point:
 * a cancelled waiter still takes the lock, and is cancelled afterwards. */
static void test_polled_lock_nap_is_no_cancellation_point(void **state)
{
    (void)state;
    pthread_t t = hold_with_napping_waiter(wait_for_polled_then_testcancel, 100);
    assert_int_equal(pthread_cancel(t), 0);
    sleep_ms(50);
    sa_polled_unlock(&polled_held);
    void *res = join_within_5s(t, "the cancelled napping waiter never finished");
    assert_int_equal(__atomic_load_n(&got_it, __ATOMIC_RELAXED), 1);
    assert_ptr_equal(res, PTHREAD_CANCELED);
    assert_int_equal(__atomic_load_n(&polled_held.lock.word, __ATOMIC_RELAXED), LOCK_FREE);
}

static void test_polled_lock_reset_in_fork_child(void **state)
{
    (void)state;
    sa_polled_lock(&polled_held);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sa_polled_lock_reset_unranked(&polled_held); /* prof.c's child handler */
        sa_polled_lock_unranked(&polled_held);       /* would wait forever if still held */
        sa_polled_unlock_unranked(&polled_held);
        _exit(polled_held.lock.word == LOCK_FREE ? 0 : 1);
    }
    sa_polled_unlock(&polled_held);
    assert_child_exited_zero(pid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_excludes_under_contention),
        cmocka_unit_test(test_lock_sleeper_is_woken),
        cmocka_unit_test(test_lock_reset_in_fork_child),
        cmocka_unit_test(test_polled_lock_excludes_under_contention),
        cmocka_unit_test(test_polled_lock_napping_waiter_gets_it),
        cmocka_unit_test(test_polled_lock_nap_is_no_cancellation_point),
        cmocka_unit_test(test_polled_lock_reset_in_fork_child),
    };
    return cmocka_run_group_tests_name("lock", tests, NULL, NULL);
}
