/*
 * bodies_threads.c: workloads with several threads, each body spawning its
 * own pthreads and timing itself with the wall clock.
 *
 *   prodcons        one thread allocates, another frees: every free is a
 *                   cross-thread free (pipelines, queues, message passing)
 *   larson          a server: threads churn their own working sets and hand
 *                   live objects to each other (modelled on Larson & Krishnan's
 *                   benchmark, written anew)
 *   false_sharing   do two threads' small objects end up in one cache line?
 *                   active: both allocate at the same time; passive: one
 *                   frees the other's objects and allocates again (after
 *                   Hoard's cache-thrash/cache-scratch tests)
 *   churn           more threads than cores, each replaced by a new thread a
 *                   few times: per-thread cache set-up and teardown, and
 *                   objects outliving the thread that allocated them
 *   scale_local     nothing shared: how throughput per thread holds up as
 *                   threads are added (the scaling figure)
 *   idle_pool       work moves through a pool of threads, each of which does
 *                   a burst and then waits: what an allocator keeps for
 *                   threads that have stopped allocating (peak RSS)
 *
 * Harness memory that threads share (mailboxes, per-thread records) is
 * allocated 64-byte aligned and padded, and per-thread working sets live on
 * each thread's stack or in its own record, so the harness itself adds no
 * false sharing.  Every thread draws from its own fixed seed.
 */
#define _POSIX_C_SOURCE 200809L   /* pthread barriers, posix_memalign */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_bodies.h"
#include "bench_util.h"

#define CACHE_LINE 64

/* ---- small helpers ---- */

static void start_thread(pthread_t *tid, void *(*fn)(void *), void *arg)
{
    if (pthread_create(tid, NULL, fn, arg) != 0)
        die("pthread_create failed");
}

static void join_thread(pthread_t tid)
{
    if (pthread_join(tid, NULL) != 0)
        die("pthread_join failed");
}

static void barrier_init(pthread_barrier_t *b, unsigned count)
{
    if (pthread_barrier_init(b, NULL, count) != 0)
        die("pthread_barrier_init failed");
}

/* Harness records shared between threads: cache-line aligned and padded,
 * so that only the allocator under test can cause false sharing. */
static void *alloc_lines(size_t size)
{
    size = (size + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
    void *p = aligned_alloc(CACHE_LINE, size);
    if (p == NULL)
        die("aligned_alloc returned NULL");
    memset(p, 0, size);
    return p;
}

/* Wait politely: spin a little, then give the core away, then sleep.  The
 * machine may have fewer free cores than threads, and a waiting thread must
 * not keep the one it waits for off the CPU (sched_yield alone does not
 * promise that it runs). */
static void wait_a_little(unsigned *spins)
{
    ++*spins;
    if (*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else if (*spins < 64 + 16) {
        sched_yield();
    } else {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000};
        nanosleep(&pause, NULL);
    }
}

/* Write the first and last byte: both ends of the object are used. */
static void touch_ends(char *p, size_t size)
{
    p[0] = (char)size;
    p[size - 1] = (char)size;
    escape(p);
}

/* ---- prodcons: allocate on one thread, free on another ---- */

/* Power of two.  Room for a few milliseconds of objects, so that a thread
 * descheduled for a while (or sleeping in wait_a_little) does not stall
 * the other at once. */
#define RING_SLOTS 4096

/* Each side reads the other's index only when its cached copy says the
 * ring is full (producer) or empty (consumer): the index lines move
 * between cores once per batch, not once per object. */
struct ring {
    _Alignas(CACHE_LINE) atomic_size_t head;   /* written by the producer only */
    _Alignas(CACHE_LINE) atomic_size_t tail;   /* written by the consumer only */
    _Alignas(CACHE_LINE) void *slot[RING_SLOTS];
    size_t size;
    size_t objects;
    unsigned long checksum;   /* of what the consumer read */
};

static void *producer(void *arg)
{
    struct ring *ring = arg;
    size_t tail_seen = 0;
    for (size_t head = 0; head < ring->objects; head++) {
        char *p = alloc_or_die(ring->size);
        memset(p, (int)(head & 0xff), ring->size);
        unsigned spins = 0;
        while (head - tail_seen == RING_SLOTS) {
            tail_seen = atomic_load_explicit(&ring->tail, memory_order_acquire);
            if (head - tail_seen == RING_SLOTS)
                wait_a_little(&spins);
        }
        ring->slot[head & (RING_SLOTS - 1)] = p;
        atomic_store_explicit(&ring->head, head + 1, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    struct ring *ring = arg;
    size_t head_seen = 0;
    unsigned long sum = 0;
    for (size_t tail = 0; tail < ring->objects; tail++) {
        unsigned spins = 0;
        while (tail == head_seen) {
            head_seen = atomic_load_explicit(&ring->head, memory_order_acquire);
            if (tail == head_seen)
                wait_a_little(&spins);
        }
        unsigned char *p = ring->slot[tail & (RING_SLOTS - 1)];
        atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
        sum += p[0] + p[ring->size - 1];   /* the consumer reads the message */
        free(p);
    }
    ring->checksum = sum;
    return NULL;
}

double bench_prodcons(size_t size, size_t objects)
{
    struct ring *ring = alloc_lines(sizeof *ring);
    ring->size = size;
    ring->objects = objects;
    pthread_t prod, cons;
    uint64_t start = bench_now_ns();
    start_thread(&cons, consumer, ring);
    start_thread(&prod, producer, ring);
    join_thread(prod);
    join_thread(cons);
    double seconds = seconds_since(start);
    escape(&ring->checksum);
    free(ring);
    return seconds;
}

/* ---- larson: a server's threads hand objects to each other ---- */

#define LARSON_SLOTS    1000   /* live objects per thread */
#define LARSON_PERIOD   128    /* of every PERIOD ops, ...                 */
#define LARSON_HANDOFF  32     /* ... HANDOFF give their old object away   */
#define LARSON_MIN_SIZE 16
#define LARSON_MAX_SIZE 1024

/* A batch of objects on its way to another thread (itself malloc'd by the
 * sender and freed by the receiver, as a message would be). */
struct handoff {
    struct handoff *next;
    void *object[LARSON_HANDOFF];
};

struct larson_thread {
    pthread_t tid;
    unsigned index;
    size_t ops;
    pthread_barrier_t *all_done;
    struct larson_thread *next;      /* who receives our hand-offs */
    pthread_mutex_t lock;            /* guards inbox */
    struct handoff *inbox;
};

static void post_handoff(struct larson_thread *to, struct handoff *batch)
{
    pthread_mutex_lock(&to->lock);
    batch->next = to->inbox;
    to->inbox = batch;
    pthread_mutex_unlock(&to->lock);
}

/* Free everything other threads handed us: the cross-thread frees. */
static void drain_inbox(struct larson_thread *self)
{
    pthread_mutex_lock(&self->lock);
    struct handoff *batch = self->inbox;
    self->inbox = NULL;
    pthread_mutex_unlock(&self->lock);
    while (batch != NULL) {
        struct handoff *next = batch->next;
        for (size_t i = 0; i < LARSON_HANDOFF; i++)
            free(batch->object[i]);
        free(batch);
        batch = next;
    }
}

static void *larson_object(bench_rng *rng)
{
    size_t size = bench_rng_range(rng, LARSON_MIN_SIZE, LARSON_MAX_SIZE);
    char *p = alloc_or_die(size);
    touch_ends(p, size);
    return p;
}

/* Each op replaces the object in a random slot: the old object is freed
 * here, or, for HANDOFF ops of every PERIOD, given to the next thread
 * (which frees it the next time it drains its inbox, every PERIOD ops). */
static void *larson_thread_main(void *arg)
{
    struct larson_thread *self = arg;
    bench_rng rng = bench_rng_seeded(100 + self->index);
    void *slot[LARSON_SLOTS];
    for (size_t i = 0; i < LARSON_SLOTS; i++)
        slot[i] = larson_object(&rng);

    struct handoff *outgoing = NULL;
    for (size_t op = 0; op < self->ops; op++) {
        size_t phase = op % LARSON_PERIOD;
        size_t victim = bench_rng_below(&rng, LARSON_SLOTS);
        if (phase < LARSON_HANDOFF) {
            if (outgoing == NULL)
                outgoing = alloc_or_die(sizeof *outgoing);
            outgoing->object[phase] = slot[victim];
            if (phase == LARSON_HANDOFF - 1) {
                post_handoff(self->next, outgoing);
                outgoing = NULL;
            }
        } else {
            free(slot[victim]);
        }
        slot[victim] = larson_object(&rng);
        if (phase == LARSON_PERIOD - 1)
            drain_inbox(self);
    }
    /* ops is a multiple of LARSON_PERIOD: no half-filled batch is left. */

    /* Nobody posts after this barrier: the last drain is complete. */
    pthread_barrier_wait(self->all_done);
    drain_inbox(self);
    for (size_t i = 0; i < LARSON_SLOTS; i++)
        free(slot[i]);
    return NULL;
}

double bench_larson(unsigned threads, size_t ops_per_thread)
{
    if (ops_per_thread % LARSON_PERIOD != 0)
        die("larson: ops per thread must be a multiple of LARSON_PERIOD");
    pthread_barrier_t all_done;
    barrier_init(&all_done, threads);
    struct larson_thread **t = alloc_or_die(threads * sizeof *t);
    for (unsigned i = 0; i < threads; i++)
        t[i] = alloc_lines(sizeof **t);
    for (unsigned i = 0; i < threads; i++) {
        t[i]->index = i;
        t[i]->ops = ops_per_thread;
        t[i]->all_done = &all_done;
        t[i]->next = t[(i + 1) % threads];
        pthread_mutex_init(&t[i]->lock, NULL);
    }

    uint64_t start = bench_now_ns();
    for (unsigned i = 0; i < threads; i++)
        start_thread(&t[i]->tid, larson_thread_main, t[i]);
    for (unsigned i = 0; i < threads; i++)
        join_thread(t[i]->tid);
    double seconds = seconds_since(start);

    for (unsigned i = 0; i < threads; i++) {
        pthread_mutex_destroy(&t[i]->lock);
        free(t[i]);
    }
    free(t);
    pthread_barrier_destroy(&all_done);
    return seconds;
}

/* ---- false sharing ---- */

#define FS_OBJECTS  256   /* live objects per thread */
#define FS_SIZE     16
#define FS_LOCKSTEP 4     /* objects each thread allocates between barriers */

struct fs_run {
    pthread_barrier_t barrier;     /* the two threads */
    size_t rounds;
    _Alignas(CACHE_LINE) void *mine[2][FS_OBJECTS];   /* each thread's live objects */
    _Alignas(CACHE_LINE) void *handed[FS_OBJECTS];    /* passive: A's, freed by B */
    uint64_t start_ns[2], end_ns[2];   /* per thread: see scale_thread */
    size_t shared_lines;
};

struct fs_thread {
    pthread_t tid;
    int id;
    struct fs_run *run;
};

static void *fs_object(void)
{
    void *p = alloc_or_die(FS_SIZE);
    memset(p, 0, FS_SIZE);
    escape(p);
    return p;
}

/* Each round increments the first byte of every object: read-modify-write
 * through volatile, so every store happens and a line shared with the other
 * thread bounces between the cores. */
static void write_rounds(void *const *obj, size_t n, size_t rounds)
{
    for (size_t r = 0; r < rounds; r++)
        for (size_t k = 0; k < n; k++) {
            volatile unsigned char *p = obj[k];
            *p = (unsigned char)(*p + 1);
        }
}

static int compare_uintptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* The cache lines n objects of FS_SIZE bytes cover, sorted, without
 * duplicates; returns how many.  out has room for 2n (an object crosses at
 * most one line boundary). */
static size_t lines_of(void *const *obj, size_t n, uintptr_t *out)
{
    size_t count = 0;
    for (size_t k = 0; k < n; k++) {
        uintptr_t first = (uintptr_t)obj[k] / CACHE_LINE;
        uintptr_t last = ((uintptr_t)obj[k] + FS_SIZE - 1) / CACHE_LINE;
        for (uintptr_t line = first; line <= last; line++)
            out[count++] = line;
    }
    qsort(out, count, sizeof *out, compare_uintptr);
    size_t unique = 0;
    for (size_t i = 0; i < count; i++)
        if (unique == 0 || out[unique - 1] != out[i])
            out[unique++] = out[i];
    return unique;
}

/* Lines that hold objects of both threads: each is written by two cores. */
static size_t count_shared_lines(void *const *a, void *const *b, size_t n)
{
    uintptr_t la[2 * FS_OBJECTS], lb[2 * FS_OBJECTS];
    size_t na = lines_of(a, n, la), nb = lines_of(b, n, lb);
    size_t shared = 0;
    for (size_t i = 0, j = 0; i < na && j < nb;) {
        if (la[i] < lb[j])
            i++;
        else if (la[i] > lb[j])
            j++;
        else
            shared++, i++, j++;
    }
    return shared;
}

/* Both variants end the same way: the two threads write their own objects
 * for run->rounds rounds between two barriers (each stamps its own start
 * and end, as in scale_local), thread 0 counts the shared lines while
 * everything is still live, then each thread frees its own objects. */
static void fs_timed_writes(struct fs_run *run, int id)
{
    pthread_barrier_wait(&run->barrier);
    run->start_ns[id] = bench_now_ns();
    write_rounds(run->mine[id], FS_OBJECTS, run->rounds);
    run->end_ns[id] = bench_now_ns();
    pthread_barrier_wait(&run->barrier);
    if (id == 0)
        run->shared_lines = count_shared_lines(run->mine[0], run->mine[1], FS_OBJECTS);
    pthread_barrier_wait(&run->barrier);
    for (size_t k = 0; k < FS_OBJECTS; k++)
        free(run->mine[id][k]);
}

/* Active: both threads allocate at the same time, FS_LOCKSTEP objects each
 * between barriers.  An allocator that serves both from one free list
 * interleaves their objects in the same lines. */
static void *fs_active_thread(void *arg)
{
    struct fs_thread *self = arg;
    struct fs_run *run = self->run;
    for (size_t k = 0; k < FS_OBJECTS; k++) {
        if (k % FS_LOCKSTEP == 0)
            pthread_barrier_wait(&run->barrier);
        run->mine[self->id][k] = fs_object();
    }
    fs_timed_writes(run, self->id);
    return NULL;
}

/* Passive: thread A (0) allocates 2N objects back to back and hands every
 * other one to B (1); B frees them, then allocates N of its own.  An
 * allocator that gives B back the memory it just freed puts B's new objects
 * between A's live ones.  B is a worker that has allocated before (one
 * malloc+free): some allocators set up a thread's cache only at its first
 * malloc, and a thread whose first call is free() would not show what a
 * long-lived worker does. */
static void *fs_passive_thread(void *arg)
{
    struct fs_thread *self = arg;
    struct fs_run *run = self->run;
    if (self->id == 1)
        free(fs_object());
    if (self->id == 0)
        for (size_t k = 0; k < 2 * FS_OBJECTS; k++) {
            void *p = fs_object();
            if (k % 2 == 0)
                run->mine[0][k / 2] = p;
            else
                run->handed[k / 2] = p;
        }
    pthread_barrier_wait(&run->barrier);   /* the hand-off */
    if (self->id == 1) {
        for (size_t k = 0; k < FS_OBJECTS; k++)
            free(run->handed[k]);
        for (size_t k = 0; k < FS_OBJECTS; k++)
            run->mine[1][k] = fs_object();
    }
    fs_timed_writes(run, self->id);
    return NULL;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static struct false_sharing_result false_sharing(void *(*thread_main)(void *), size_t rounds)
{
    struct fs_run *run = alloc_lines(sizeof *run);
    run->rounds = rounds;
    barrier_init(&run->barrier, 2);
    struct fs_thread *t = alloc_lines(2 * sizeof *t);
    for (int id = 0; id < 2; id++) {
        t[id].id = id;
        t[id].run = run;
        start_thread(&t[id].tid, thread_main, &t[id]);
    }
    for (int id = 0; id < 2; id++)
        join_thread(t[id].tid);
    struct false_sharing_result result = {
        .seconds = (double)(max_u64(run->end_ns[0], run->end_ns[1]) -
                            min_u64(run->start_ns[0], run->start_ns[1])) * 1e-9,
        .shared_lines = run->shared_lines,
    };
    pthread_barrier_destroy(&run->barrier);
    free(t);
    free(run);
    return result;
}

struct false_sharing_result bench_false_sharing_active(size_t rounds)
{
    return false_sharing(fs_active_thread, rounds);
}

struct false_sharing_result bench_false_sharing_passive(size_t rounds)
{
    return false_sharing(fs_passive_thread, rounds);
}

/* ---- churn: threads come and go ---- */

#define CHURN_LIVE 64   /* objects a lane keeps live */

/* A lane is a chain of threads: each does its ops on the lane's live set,
 * starts its successor and exits; the successor first joins it (so the
 * exited thread's allocator teardown is finished), then frees and replaces
 * objects the dead thread allocated. */
struct churn_lane {
    void *slot[CHURN_LIVE];
    bench_rng rng;
    size_t ops;
    unsigned generations_left;
    pthread_t predecessor;
    int has_predecessor;
    pthread_t last;                  /* the lane's final thread, for main to join */
    struct churn_run *run;
};

struct churn_run {
    pthread_mutex_t lock;
    pthread_cond_t lane_done;
    unsigned lanes_done;
};

/* Small objects mostly, some buffers: 80% in 16..128 B, 20% in 129..2048. */
static void *churn_object(bench_rng *rng)
{
    size_t size = bench_rng_below(rng, 5) < 4 ? bench_rng_range(rng, 16, 128)
                                              : bench_rng_range(rng, 129, 2048);
    char *p = alloc_or_die(size);
    touch_ends(p, size);
    return p;
}

static void *churn_thread_main(void *arg)
{
    struct churn_lane *lane = arg;
    if (lane->has_predecessor)
        join_thread(lane->predecessor);
    for (size_t op = 0; op < lane->ops; op++) {
        size_t victim = bench_rng_below(&lane->rng, CHURN_LIVE);
        free(lane->slot[victim]);   /* NULL in the lane's first thread */
        lane->slot[victim] = churn_object(&lane->rng);
    }
    if (--lane->generations_left > 0) {
        /* After pthread_create the lane belongs to the successor. */
        lane->predecessor = pthread_self();
        lane->has_predecessor = 1;
        pthread_t successor;
        start_thread(&successor, churn_thread_main, lane);
        return NULL;
    }
    for (size_t i = 0; i < CHURN_LIVE; i++)
        free(lane->slot[i]);
    struct churn_run *run = lane->run;
    pthread_mutex_lock(&run->lock);
    lane->last = pthread_self();
    run->lanes_done++;
    pthread_cond_signal(&run->lane_done);
    pthread_mutex_unlock(&run->lock);
    return NULL;
}

double bench_churn(unsigned threads, unsigned generations, size_t ops_per_thread)
{
    struct churn_run run = {.lanes_done = 0};
    pthread_mutex_init(&run.lock, NULL);
    pthread_cond_init(&run.lane_done, NULL);
    struct churn_lane **lane = alloc_or_die(threads * sizeof *lane);
    for (unsigned i = 0; i < threads; i++) {
        lane[i] = alloc_lines(sizeof **lane);   /* zeroed: slots start NULL */
        lane[i]->rng = bench_rng_seeded(200 + i);
        lane[i]->ops = ops_per_thread;
        lane[i]->generations_left = generations;
        lane[i]->run = &run;
    }

    uint64_t start = bench_now_ns();
    for (unsigned i = 0; i < threads; i++) {
        pthread_t first;
        start_thread(&first, churn_thread_main, lane[i]);
    }
    pthread_mutex_lock(&run.lock);
    while (run.lanes_done < threads)
        pthread_cond_wait(&run.lane_done, &run.lock);
    pthread_mutex_unlock(&run.lock);
    for (unsigned i = 0; i < threads; i++)
        join_thread(lane[i]->last);
    double seconds = seconds_since(start);

    for (unsigned i = 0; i < threads; i++)
        free(lane[i]);
    free(lane);
    pthread_cond_destroy(&run.lane_done);
    pthread_mutex_destroy(&run.lock);
    return seconds;
}

/* ---- idle_pool: a burst on each thread of a pool, which then waits ---- */

#define IDLE_POOL_BURST 4000   /* objects a burst allocates, then frees */
#define IDLE_POOL_ROUNDS 3     /* bursts a worker makes in its turn */

struct idle_pool_run {
    pthread_mutex_t lock;
    pthread_cond_t next;     /* turn moved on */
    unsigned turn;           /* the worker whose turn it is */
    pthread_barrier_t done;  /* every worker, after its turn: all wait */
};

struct idle_pool_worker {
    struct idle_pool_run *run;
    unsigned index;
    bench_rng rng;
};

/* Waits for its turn, makes its bursts, passes the turn on and waits, idle,
 * until the whole pool has had its turn: one worker allocates at a time, so
 * what the others keep is all the memory the pool needs beyond one burst. */
static void *idle_pool_main(void *arg)
{
    struct idle_pool_worker *w = arg;
    struct idle_pool_run *run = w->run;
    pthread_mutex_lock(&run->lock);
    while (run->turn != w->index)
        pthread_cond_wait(&run->next, &run->lock);
    pthread_mutex_unlock(&run->lock);
    void **slot = alloc_or_die(IDLE_POOL_BURST * sizeof *slot);
    for (unsigned round = 0; round < IDLE_POOL_ROUNDS; round++) {
        for (unsigned i = 0; i < IDLE_POOL_BURST; i++) {
            size_t size = bench_rng_range(&w->rng, 16, 512);
            char *p = alloc_or_die(size);
            touch_ends(p, size);
            slot[i] = p;
        }
        for (unsigned i = 0; i < IDLE_POOL_BURST; i++)
            free(slot[i]);
    }
    free(slot);
    pthread_mutex_lock(&run->lock);
    run->turn++;
    pthread_cond_broadcast(&run->next);
    pthread_mutex_unlock(&run->lock);
    pthread_barrier_wait(&run->done);
    return NULL;
}

size_t bench_idle_pool_ops(unsigned threads)
{
    return (size_t)threads * IDLE_POOL_ROUNDS * IDLE_POOL_BURST;
}

double bench_idle_pool(unsigned threads)
{
    struct idle_pool_run *run = alloc_lines(sizeof *run);
    pthread_mutex_init(&run->lock, NULL);
    pthread_cond_init(&run->next, NULL);
    barrier_init(&run->done, threads);
    struct idle_pool_worker *w = alloc_lines(threads * sizeof *w);
    pthread_t *tid = alloc_or_die(threads * sizeof *tid);
    uint64_t start = bench_now_ns();
    for (unsigned i = 0; i < threads; i++) {
        w[i] = (struct idle_pool_worker){run, i, bench_rng_seeded(300 + i)};
        start_thread(&tid[i], idle_pool_main, &w[i]);
    }
    for (unsigned i = 0; i < threads; i++)
        join_thread(tid[i]);
    double seconds = seconds_since(start);
    free(tid);
    free(w);
    pthread_barrier_destroy(&run->done);
    pthread_cond_destroy(&run->next);
    pthread_mutex_destroy(&run->lock);
    free(run);
    return seconds;
}

/* ---- scale_local: thread-local work, for the scaling figure ---- */

#define SCALE_LIVE 128   /* objects each thread keeps live */

struct scale_run {
    pthread_barrier_t start, end;   /* the threads */
    _Alignas(CACHE_LINE) atomic_uint gate;   /* threads past `start` */
    char pad[CACHE_LINE - sizeof(atomic_uint)];
    size_t ops;
    unsigned threads;
    bool harness_only;              /* scale_reuse instead of free+malloc */
};

/* Each thread stamps its own start and end: the measured window runs from
 * the first thread's start to the last thread's end.  (A timing thread
 * woken from the start barrier could be scheduled late, behind the
 * workers, and shorten the window.) */
struct scale_thread {
    pthread_t tid;
    unsigned index;
    struct scale_run *run;
    uint64_t start_ns, end_ns;
};

/* A small size mix: 75% in 16..64 B, 25% in 65..256 B. */
static size_t scale_size(bench_rng *rng)
{
    return bench_rng_below(rng, 4) < 3 ? bench_rng_range(rng, 16, 64)
                                       : bench_rng_range(rng, 65, 256);
}

static void *scale_object(bench_rng *rng)
{
    size_t size = scale_size(rng);
    char *p = alloc_or_die(size);
    touch_ends(p, size);
    return p;
}

/* The harness alone: the same draws and the same writes, into the victim's
 * own block (256 B, its largest size) instead of a new one.  What this
 * loses as threads are added is the machine's (shared caches, frequency,
 * the hypervisor), not any allocator's. */
static void scale_reuse(bench_rng *rng, char *block)
{
    touch_ends(block, scale_size(rng));
}

/* The start gate, after the start barrier: a futex barrier wakes its
 * waiters one after another, so the last can start a wake-up latency or
 * more after the first, and the window (first start to last end) would
 * charge that to the allocator.  Spinning until every thread has arrived
 * starts them within a cache-line transfer of each other.  The yield keeps
 * a machine with fewer cores than threads moving. */
static void scale_gate_pass(atomic_uint *gate, unsigned threads)
{
    atomic_fetch_add_explicit(gate, 1, memory_order_acq_rel);
    for (unsigned spins = 1; atomic_load_explicit(gate, memory_order_acquire) < threads; spins++) {
        if (spins % 256 == 0)
            sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
    }
}

/* The live set is filled before the start barrier and freed after the end
 * barrier, so neither the thread cache's set-up nor its teardown is timed:
 * only the steady state, which should scale. */
static void *scale_thread_main(void *arg)
{
    struct scale_thread *self = arg;
    struct scale_run *run = self->run;
    bench_rng rng = bench_rng_seeded(300 + self->index);
    void *slot[SCALE_LIVE];
    for (size_t i = 0; i < SCALE_LIVE; i++)
        slot[i] = run->harness_only ? alloc_or_die(256) : scale_object(&rng);
    pthread_barrier_wait(&run->start);
    scale_gate_pass(&run->gate, run->threads);
    self->start_ns = bench_now_ns();
    if (run->harness_only) {
        for (size_t op = 0; op < run->ops; op++)
            scale_reuse(&rng, slot[bench_rng_below(&rng, SCALE_LIVE)]);
    } else {
        for (size_t op = 0; op < run->ops; op++) {
            size_t victim = bench_rng_below(&rng, SCALE_LIVE);
            free(slot[victim]);
            slot[victim] = scale_object(&rng);
        }
    }
    self->end_ns = bench_now_ns();
    pthread_barrier_wait(&run->end);
    for (size_t i = 0; i < SCALE_LIVE; i++)
        free(slot[i]);
    return NULL;
}

struct scale_result bench_scale_local(unsigned threads, size_t ops_per_thread, bool harness_only)
{
    struct scale_run *run = alloc_lines(sizeof *run);
    run->ops = ops_per_thread;
    run->harness_only = harness_only;
    run->threads = threads;
    atomic_init(&run->gate, 0);
    barrier_init(&run->start, threads);
    barrier_init(&run->end, threads);
    struct scale_thread **t = alloc_or_die(threads * sizeof *t);
    for (unsigned i = 0; i < threads; i++) {
        t[i] = alloc_lines(sizeof **t);
        t[i]->index = i;
        t[i]->run = run;
        start_thread(&t[i]->tid, scale_thread_main, t[i]);
    }
    uint64_t first_start = UINT64_MAX, last_end = 0, own_ns = 0;
    for (unsigned i = 0; i < threads; i++) {
        join_thread(t[i]->tid);
        if (t[i]->start_ns < first_start)
            first_start = t[i]->start_ns;
        if (t[i]->end_ns > last_end)
            last_end = t[i]->end_ns;
        own_ns += t[i]->end_ns - t[i]->start_ns;
        free(t[i]);
    }
    free(t);
    pthread_barrier_destroy(&run->start);
    pthread_barrier_destroy(&run->end);
    free(run);
    return (struct scale_result){
        .seconds = (double)(last_end - first_start) * 1e-9,
        .mean_thread_seconds = (double)own_ns * 1e-9 / threads,
    };
}
