/*
 * test_tcache.c: a thread cache's refill, overflow, adaptive limits, budget
 * and destruction, on caches made for the test (not the thread's own), plus
 * the thread's own cache across thread exit; thread.deallocated, which is
 * derived rather than counted, stays exact through every slow path; remote
 * frees (another live thread's objects) go back to their spans, not into
 * the freeing thread's hands.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../../include/salloc.h"
#include "conf.h"
#include "dump.h"
#include "prof.h"
#include "unit.h"

/* free() on cache `tc`, as the fast path and its slow path do it. */
static void cache_free(struct tcache *tc, void *p)
{
    unsigned cls = pagemap_class(p);
    struct tcache_bin *bin = &tc->bins[cls];
    if (!tcache_bin_full(bin))
        tcache_bin_push(bin, p);
    else
        tcache_overflow(tc, cls, p);
}

static void *cache_malloc(struct tcache *tc, unsigned cls)
{
    struct tcache_bin *bin = &tc->bins[cls];
    return tcache_bin_empty(bin) ? tcache_refill(tc, cls) : tcache_bin_pop(bin);
}

/* Sets prof.active; returns what it was. */
static bool test_prof_active(bool on)
{
    bool old;
    size_t len = sizeof(old);
    assert_int_equal(mallctl("prof.active", &old, &len, &on, sizeof(on)), 0);
    return old;
}

/* Refills start small and double up to the class's batch (slow start), so
 * a short-lived thread does not carve a whole batch for one object. */
static void test_tcache_refill_slow_starts_to_a_batch(void **state)
{
    (void)state;
    struct tcache *tc = tcache_create();
    assert_non_null(tc);
    unsigned cls = sizeclass_of(48), batch = sizeclass_batch(cls);
    assert_int_equal(tcache_bin_max(&tc->bins[0]), 0);
    unsigned expect = 4, fetched[8];
    void *keep[1024];
    unsigned nkeep = 0;
    for (int r = 0; r < 8; r++) {
        void *p = tcache_refill(tc, cls);
        assert_non_null(p);
        assert_int_equal(pagemap_class(p), cls);
        fetched[r] = tcache_bin_count(&tc->bins[cls]) + 1;
        keep[nkeep++] = p;
        while (tcache_bin_count(&tc->bins[cls])) /* empty the stack so the next call refills */
            keep[nkeep++] = cache_malloc(tc, cls);
        assert_int_equal(fetched[r], expect);
        expect = expect * 2 < batch ? expect * 2 : batch;
    }
    assert_int_equal(fetched[7], batch);
    assert_true(tcache_bin_max(&tc->bins[cls]) > batch); /* keeps growing past a batch */
    tcache_check(tc);
    for (unsigned i = 0; i < nkeep; i++)
        cache_free(tc, keep[i]);
    tcache_destroy(tc);
}

/* The stack never passes its max, and a consumer's max shrinks back. */
static void test_tcache_overflow_flushes_and_limits_adapt(void **state)
{
    (void)state;
    struct tcache *tc = tcache_create();
    unsigned cls = sizeclass_of(200), batch = sizeclass_batch(cls), n = 4000;
    void **objs = malloc(n * sizeof(void *));
    for (unsigned i = 0; i < n; i++)
        objs[i] = cache_malloc(tc, cls);
    uint32_t grown = tcache_bin_max(&tc->bins[cls]);
    assert_true(grown > batch);
    struct tcache *consumer = tcache_create();
    for (unsigned i = 0; i < n; i++) {
        cache_free(consumer, objs[i]);
        assert_true(tcache_bin_count(&consumer->bins[cls]) <= tcache_bin_max(&consumer->bins[cls]));
    }
    assert_true(tcache_bin_max(&consumer->bins[cls]) <= batch * 2);
    tcache_check(consumer);
    tcache_destroy(consumer);
    tcache_destroy(tc);
    central_check(cls);
    free(objs);
}

/* A cache holding more than its budget gives half of it back.  Every class
 * from 8 KiB up filled to its own cap would hold about 7 MiB; the 4 MiB
 * whole-cache budget (checked every 64 slow events) must keep it lower. */
static void test_tcache_whole_cache_budget(void **state)
{
    (void)state;
    struct tcache *tc = tcache_create();
    unsigned first = sizeclass_of(8192), per_class = 40;
    size_t uncapped = 0, n = 0;
    void **objs = malloc((SA_NUM_CLASSES - first) * per_class * sizeof(void *));
    for (unsigned cls = first; cls < SA_NUM_CLASSES; cls++) {
        uncapped += tcache_class_cap(cls) * sizeclass_size(cls);
        for (unsigned i = 0; i < per_class; i++)
            objs[n++] = cache_malloc(tc, cls);
    }
    assert_true(uncapped >= (size_t)6 << 20);
    for (size_t i = 0; i < n; i++)
        cache_free(tc, objs[i]);
    assert_true(tcache_cached_bytes(tc) <= (size_t)5 << 20);
    tcache_check(tc);
    tcache_destroy(tc);
    free(objs);
}

/* Many threads (tcache.c): with more than 8 caches alive, what a cache's
 * stacks' limits grow by stays within its share of 8 MiB (64 KiB at
 * least): a burst of 2 MiB of one class leaves no more than that cached.
 * Once the other caches are gone, its limit grows to the class's cap
 * (256 KiB), past that share, as before. */
#define MANY 40
static struct tcache *many[MANY + 1]; /* the test's own last: its caches, for many_end */

static void many_start(void)
{
    for (unsigned i = 0; i < MANY; i++)
        many[i] = tcache_create();
}

/* Destroys what a test of many caches left (also after a failed assert,
 * as a teardown: otherwise every later test would run among 40 caches). */
static int many_end(void **state)
{
    (void)state;
    for (unsigned i = 0; i <= MANY; i++)
        if (many[i]) {
            tcache_destroy(many[i]);
            many[i] = NULL;
        }
    return 0;
}

static void test_tcache_many_caches_bound_what_each_keeps(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(512);
    static void *objs[4096];
    many_start();
    size_t bound = tcache_capacity_bound();
    assert_true(bound != SIZE_MAX);
    assert_true(bound >= ((size_t)64 << 10) && bound <= ((size_t)8 << 20) / MANY);
    struct tcache *tc = many[MANY] = tcache_create();
    for (unsigned i = 0; i < 4096; i++)
        objs[i] = cache_malloc(tc, cls);
    assert_true(tc->capacity_bytes <= bound);
    for (unsigned i = 0; i < 4096; i++)
        cache_free(tc, objs[i]);
    assert_true(tc->capacity_bytes <= bound);
    assert_true(tcache_cached_bytes(tc) <= bound + 4 * 512); /* its first limit's 4 objects */
    tcache_check(tc);
    many[MANY] = NULL;
    many_end(NULL);
    many[MANY] = tc;
    assert_int_equal(tcache_capacity_bound(), SIZE_MAX); /* few again */
    for (unsigned i = 0; i < 4096; i++)
        objs[i] = cache_malloc(tc, cls);
    assert_true(tc->capacity_bytes > bound);
    for (unsigned i = 0; i < 4096; i++)
        cache_free(tc, objs[i]);
    tcache_check(tc);
}

/* More caches started after a cache grew: a budget check (here made by
 * another class's refills and overflows) finds its limits over its smaller
 * share and halves them until they are within it. */
static void test_tcache_capacity_shrinks_as_threads_start(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(256), other = sizeclass_of(48);
    static void *objs[2048], *small[512];
    struct tcache *tc = many[MANY] = tcache_create();
    for (unsigned i = 0; i < 2048; i++)
        objs[i] = cache_malloc(tc, cls); /* out, not on the stack: no overflow of cls below */
    size_t grown = tc->capacity_bytes; /* the class's cap: about 256 KiB */
    many_start();
    size_t bound = tcache_capacity_bound();
    assert_true(grown > bound);
    for (unsigned round = 0; round < 64 && tc->capacity_bytes > bound; round++) {
        for (unsigned i = 0; i < 512; i++)
            small[i] = cache_malloc(tc, other);
        for (unsigned i = 0; i < 512; i++)
            cache_free(tc, small[i]);
    }
    assert_true(tc->capacity_bytes <= bound);
    for (unsigned i = 0; i < 2048; i++)
        cache_free(tc, objs[i]);
    assert_true(tcache_cached_bytes(tc) <= bound + 4 * (256 + 48));
    tcache_check(tc);
}

/* A slow event of another class than `cls` (an overflow, forced): whatever
 * the thread does between two allocations of a class it takes among
 * others. */
static void other_class_event(struct tcache *tc, unsigned cls)
{
    unsigned other = cls == sizeclass_of(64) ? sizeclass_of(80) : sizeclass_of(64);
    tcache_overflow(tc, other, cache_malloc(tc, other));
}

/* A stack's max grows with its refills up to its class's cap: 256 KiB worth
 * of objects up to 1 KiB, but only 64 KiB (a batch) of bigger ones, which
 * a program takes few of at a time among others (here another class's
 * slow event between any two allocations), and which would otherwise sit
 * idle in every thread's cache. */
static void test_tcache_big_classes_cache_a_batch(void **state)
{
    (void)state;
    struct tcache *tc = tcache_create();
    const size_t sizes[] = {1024, 1152, 4096, 16384, 65536};
    enum { N = 600 };
    void **objs = malloc(N * sizeof(void *));
    for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        unsigned cls = sizeclass_of(sizes[k]);
        size_t size = sizeclass_size(cls), batch = sizeclass_batch(cls);
        for (unsigned i = 0; i < N; i++) {
            objs[i] = cache_malloc(tc, cls);
            other_class_event(tc, cls);
        }
        size_t max = tcache_bin_max(&tc->bins[cls]);
        assert_int_equal(max, tcache_class_cap(cls));
        if (size <= 1024)
            assert_true(max * size >= (size_t)200 << 10);
        else
            assert_true(max * size <= (size_t)64 << 10 || max == batch);
        assert_int_equal(tc->burst_bytes, 0);
        for (unsigned i = 0; i < N; i++) {
            cache_free(tc, objs[i]);
            assert_true(tcache_bin_count(&tc->bins[cls]) <= tcache_class_cap(cls));
        }
        tcache_check(tc);
    }
    tcache_destroy(tc);
    free(objs);
}

/* A big class taken in bulk (its refills one right after another, no other
 * slow event in between: 200 blocks of 4 KiB allocated, then freed) grows
 * past its cap, so that the stack takes the whole burst back and the next
 * burst needs no refill at all; within TCACHE_BURST_BYTES for all classes
 * together; and once other classes' slow events show the burst is over,
 * the stack goes back to its cap. */
static void bursts_of_big_classes(uint32_t first_event)
{
    struct tcache *tc = tcache_create();
    tc->events = first_event;
    unsigned cls = sizeclass_of(4096);
    uint32_t cap = tcache_class_cap(cls);
    enum { N = 200 };
    void *objs[N];
    for (int round = 0; round < 3; round++) {
        uint32_t events = tc->events;
        for (unsigned i = 0; i < N; i++)
            objs[i] = cache_malloc(tc, cls);
        for (unsigned i = 0; i < N; i++)
            cache_free(tc, objs[i]);
        if (round == 0)
            assert_true(tc->events - events > N / sizeclass_batch(cls)); /* refills */
        else
            assert_int_equal(tc->events, events); /* the stack held it all */
        assert_true(tcache_bin_count(&tc->bins[cls]) >= N); /* and what the last refill left */
        assert_true(tcache_bin_max(&tc->bins[cls]) > cap);
        assert_int_equal(tc->burst_bytes, (tcache_bin_max(&tc->bins[cls]) - cap) * 4096);
        tcache_check(tc);
    }

    /* 1000 blocks of 16 KiB, 16 MiB: beyond what bursts may hold.  The
     * stack grows to the room left; the free half's overflows (over 64 slow
     * events: budget checks) show the burst still going, so it keeps that
     * and ends full. */
    unsigned big = sizeclass_of(16384);
    enum { M = 1000 };
    void **more = malloc(M * sizeof(void *));
    for (unsigned i = 0; i < M; i++)
        more[i] = cache_malloc(tc, big);
    assert_true(tc->burst_bytes <= TCACHE_BURST_BYTES);
    assert_true(tc->burst_bytes > TCACHE_BURST_BYTES - 16384);
    uint32_t grown = tcache_bin_max(&tc->bins[big]), events = tc->events;
    for (unsigned i = 0; i < M; i++)
        cache_free(tc, more[i]);
    assert_true(tc->events - events > 2 * 64);
    assert_int_equal(tcache_bin_max(&tc->bins[big]), grown);
    assert_int_equal(tcache_bin_count(&tc->bins[big]), grown);
    tcache_check(tc);
    free(more);

    /* The program moves on: both stacks back to their caps. */
    for (unsigned i = 0; i < 4 * 64; i++)
        other_class_event(tc, cls);
    assert_int_equal(tcache_bin_max(&tc->bins[cls]), cap);
    assert_int_equal(tcache_bin_max(&tc->bins[big]), tcache_class_cap(big));
    assert_true(tcache_bin_count(&tc->bins[cls]) <= cap);
    assert_int_equal(tc->burst_bytes, 0);
    tcache_check(tc);
    tcache_destroy(tc);
}

static void test_tcache_bursts_of_big_classes(void **state)
{
    (void)state;
    bursts_of_big_classes(0);
}

/* The same across the wrap of the classes' 16-bit event stamps (struct
 * tcache): a refill right after another still reads as a burst, and a
 * class busy in the last 64 events as busy, when the count passes 65535 in
 * between, at each point of the test (it takes some 700 events). */
static void test_tcache_bursts_across_the_stamps_wrap(void **state)
{
    (void)state;
    for (uint32_t before = 1; before < 900; before += 37)
        bursts_of_big_classes(65536 - before);
}

/* A burst is a big class refilled right after its own refill.  Its first
 * refill, after another class's, is none, whatever the cache's event count
 * (a zeroed stamp once made the cache's second slow event read as one: the
 * 24 KiB class's stack grew to 4, past its cap of 2). */
static void test_tcache_first_refill_is_no_burst(void **state)
{
    (void)state;
    unsigned small = sizeclass_of(64), big = sizeclass_of(24576);
    uint32_t cap = tcache_class_cap(big);
    for (uint32_t first_event = 0; first_event < 4; first_event++) {
        struct tcache *tc = tcache_create();
        tc->events = first_event;
        void *a = cache_malloc(tc, small);
        void *b[8];
        unsigned nb = 0;
        b[nb++] = cache_malloc(tc, big);
        while (!tcache_bin_empty(&tc->bins[big]))
            b[nb++] = tcache_bin_pop(&tc->bins[big]);
        assert_true(tcache_bin_max(&tc->bins[big]) <= cap);
        assert_int_equal(tc->burst_bytes, 0);
        for (unsigned i = 0; i < nb; i++)
            cache_free(tc, b[i]);
        cache_free(tc, a);
        tcache_check(tc);
        tcache_destroy(tc);
    }
}

/* A refill's objects go out in the order the central list hands them
 * (they land on the stack as it gives them, central.h): a fresh span's in
 * ascending addresses, as a program's consecutive allocations are best
 * laid out. */
static void test_tcache_refill_hands_out_in_address_order(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(704);
    size_t size = sizeclass_size(cls);
    struct central_stats st;
    central_get_stats(cls, &st);
    assert_int_equal(st.spans, 0); /* no test before this one uses the class */
    struct tcache *tc = tcache_create();
    /* Refills of 4, then 8 (slow start), within the span. */
    unsigned n = sizeclass_objects(cls) < 12 ? sizeclass_objects(cls) : 12;
    assert_true(n > 4);
    void *objs[12];
    for (unsigned i = 0; i < n; i++) {
        objs[i] = cache_malloc(tc, cls);
        if (i)
            assert_int_equal((uintptr_t)objs[i], (uintptr_t)objs[i - 1] + size);
    }
    for (unsigned i = 0; i < n; i++)
        cache_free(tc, objs[i]);
    tcache_check(tc);
    tcache_destroy(tc);
}

/* free() writes the pointer into the thread's stack, not into the object:
 * a list linked through the objects wrote a cold line per free, which a
 * program freeing at random over a large heap paid for (tcache.h).  Word 1
 * is left out: opt.check marks freed blocks there. */
static void test_tcache_free_leaves_the_object_untouched(void **state)
{
    (void)state;
    bool was_active = test_prof_active(false); /* no sample: a block from the stack */
    unsigned char *p = malloc(64);
    memset(p, 0x5a, 64);
    free(p);
    for (unsigned i = 0; i < 64; i++)
        if (i < sizeof(void *) || i >= 2 * sizeof(void *))
            assert_int_equal(p[i], 0x5a);
    assert_ptr_equal(malloc(64), p); /* on the stack's top */
    free(p);
    test_prof_active(was_active);
}

/* A batch that goes from one thread's cache to another's through its
 * class's transfer cache is neither read nor written on the way: the
 * giver's flush and the taker's refill copy pointers only (central.c), so
 * each object reaches the taker with every byte the giver wrote (chained
 * through their first words, as batches once were, they would not). */
static void test_tcache_transfer_leaves_objects_untouched(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(1024), batch = sizeclass_batch(cls);
    size_t size = sizeclass_size(cls);
    assert_true(central_xfer_capacity(cls) >= batch);
    central_release_xfer(); /* its transfer cache empty */
    struct tcache *giver = tcache_create(), *taker = tcache_create();
    void **objs = malloc(batch * sizeof(void *));
    for (unsigned i = 0; i < batch; i++) {
        objs[i] = cache_malloc(giver, cls);
        memset(objs[i], (int)(0xa0 + i), size);
    }
    for (unsigned i = 0; i < batch; i++)
        cache_free(giver, objs[i]);
    tcache_destroy(giver); /* the rest of its stack */
    for (unsigned k = 0; k < batch; k++) {
        unsigned char *p = cache_malloc(taker, cls);
        unsigned i = 0;
        while (i < batch && objs[i] != p)
            i++;
        assert_true(i < batch); /* one of the giver's */
        for (size_t b = 0; b < size; b++)
            assert_int_equal(p[b], (unsigned char)(0xa0 + i));
        objs[i] = NULL; /* each once */
    }
    tcache_check(taker);
    tcache_destroy(taker);
    free(objs);
}

static size_t metadata_bytes(void)
{
    uint64_t epoch = 1;
    size_t bytes, len = sizeof(bytes);
    assert_int_equal(mallctl("epoch", NULL, NULL, &epoch, sizeof(epoch)), 0);
    assert_int_equal(mallctl("stats.metadata", &bytes, &len, NULL, 0), 0);
    return bytes;
}

struct own_slots_use {
    unsigned n;      /* 64-byte objects to cache */
    size_t metadata; /* stats.metadata while the thread lives */
    void **slots;    /* where its stack of 64-byte objects is */
    unsigned tier;   /* and in which tier (tcache.c) */
};

/* Caches use->n 64-byte objects (tcache.c's tiers: past the record's
 * slots, past the first slots of its own). */
static void *cache_past_small_slots(void *arg)
{
    struct own_slots_use *use = arg;
    void *objs[4 * TCACHE_MID_SLOTS];
    for (unsigned i = 0; i < use->n; i++)
        objs[i] = malloc(64);
    for (unsigned i = 0; i < use->n; i++)
        free(objs[i]);
    const struct tcache *tc = tcache_get();
    use->slots = tcache_bin_base(&tc->bins[sizeclass_of(64)]);
    use->tier = tc->slots_tier[sizeclass_of(64)];
    use->metadata = metadata_bytes();
    return NULL;
}

/* Caches one 64-byte object: within the record's slots. */
static void *cache_within_small_slots(void *arg)
{
    free(malloc(64));
    const struct tcache *tc = tcache_get();
    *(bool *)arg = tcache_bin_base(&tc->bins[sizeclass_of(64)]) ==
                   (void **)tc->small_slots[sizeclass_of(64)];
    return NULL;
}

/* A thread whose stack outgrows the record's slots of its class takes
 * slots of its own (tcache.c), first a few, then the class's cap, which go
 * to a pool when it exits (the few when it leaves them): the next thread
 * whose stack of the class grows as far takes the same slots and maps
 * nothing new, so threads that come and go map no more than the most that
 * held them at once.  A thread in between that caches little starts in the
 * small slots again. */
static void test_tcache_own_slots_go_to_the_next_thread(void **state)
{
    (void)state;
    /* Not sampling: a sample's records and a new stack's table are
     * metadata too, and a CI run once drew one in the second thread (80
     * KiB more than between). */
    bool was_active = test_prof_active(false);
    const unsigned counts[2] = {4 * TCACHE_SMALL_SLOTS, 4 * TCACHE_MID_SLOTS};
    for (unsigned tier = 1; tier <= 2; tier++) {
        pthread_t t;
        struct own_slots_use first = {.n = counts[tier - 1]}, second = first;
        bool small = false;
        size_t before = metadata_bytes();
        assert_int_equal(pthread_create(&t, NULL, cache_past_small_slots, &first), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        size_t between = metadata_bytes();
        assert_int_equal(pthread_create(&t, NULL, cache_within_small_slots, &small), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_equal(pthread_create(&t, NULL, cache_past_small_slots, &second), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        size_t after = metadata_bytes();
        fprintf(stderr, "# %u objects: tier %u; stats.metadata %zu before, %zu in the first "
                "thread, %zu between, %zu in the second, %zu after\n", first.n, first.tier,
                before, first.metadata, between, second.metadata, after);
        assert_int_equal(first.tier, tier);
        assert_int_equal(second.tier, tier);
        assert_true(small);
        assert_ptr_equal(second.slots, first.slots);
        assert_int_equal(second.metadata, between);
        assert_int_equal(after, between);
    }
    test_prof_active(was_active);
}

/* Threads that outgrow their small slots at the same time, and exit at the
 * same time, round after round: the pool (tcache.c) never hands one
 * class's slots to two live threads.  Each thread fills its stacks of two
 * classes (an owner-tagged one and a larger one) past the small slots,
 * waits until every thread of the round has, then takes its objects back:
 * a stack another thread shared would give back objects that thread
 * freed, or lose some. */
enum { OWN_THREADS = 4, OWN_ROUNDS = 25, OWN_OBJS = 4 * TCACHE_SMALL_SLOTS };
static const size_t own_sizes[2] = {64, 512};

struct own_slots_round {
    pthread_barrier_t filled, checked;
    atomic_uint next;
    void **slots[OWN_THREADS][2]; /* each thread's, while all are live */
    atomic_bool moved_all, got_back_all;
};

static void *outgrow_together(void *arg)
{
    struct own_slots_round *r = arg;
    unsigned me = atomic_fetch_add(&r->next, 1);
    void *objs[2][OWN_OBJS];
    for (unsigned k = 0; k < 2; k++)
        for (unsigned i = 0; i < OWN_OBJS; i++)
            if (!(objs[k][i] = malloc(own_sizes[k])))
                abort(); /* no cmocka assertion off the test's thread */
    for (unsigned k = 0; k < 2; k++)
        for (unsigned i = 0; i < OWN_OBJS; i++)
            free(objs[k][i]);
    const struct tcache *tc = tcache_get();
    for (unsigned k = 0; k < 2; k++) {
        unsigned cls = sizeclass_of(own_sizes[k]);
        r->slots[me][k] = tcache_bin_base(&tc->bins[cls]);
        if (tc->slots_tier[cls] == 0 || r->slots[me][k] == (void **)tc->small_slots[cls])
            atomic_store(&r->moved_all, false);
    }
    pthread_barrier_wait(&r->filled);
    for (unsigned k = 0; k < 2; k++)
        for (unsigned i = OWN_OBJS; i-- > 0;) /* a stack: the last freed first */
            if (malloc(own_sizes[k]) != objs[k][i])
                atomic_store(&r->got_back_all, false);
    pthread_barrier_wait(&r->checked);
    for (unsigned k = 0; k < 2; k++)
        for (unsigned i = 0; i < OWN_OBJS; i++)
            free(objs[k][i]);
    return NULL;
}

static void test_tcache_own_slots_are_never_shared(void **state)
{
    (void)state;
    bool was_active = test_prof_active(false); /* no sample in place of a pop */
    for (unsigned round = 0; round < OWN_ROUNDS; round++) {
        struct own_slots_round r = {.moved_all = true, .got_back_all = true};
        pthread_barrier_init(&r.filled, NULL, OWN_THREADS);
        pthread_barrier_init(&r.checked, NULL, OWN_THREADS);
        pthread_t t[OWN_THREADS];
        for (unsigned i = 0; i < OWN_THREADS; i++)
            assert_int_equal(pthread_create(&t[i], NULL, outgrow_together, &r), 0);
        for (unsigned i = 0; i < OWN_THREADS; i++)
            assert_int_equal(pthread_join(t[i], NULL), 0);
        pthread_barrier_destroy(&r.filled);
        pthread_barrier_destroy(&r.checked);
        assert_true(atomic_load(&r.moved_all));
        assert_true(atomic_load(&r.got_back_all));
        for (unsigned k = 0; k < 2; k++)
            for (unsigned i = 0; i < OWN_THREADS; i++)
                for (unsigned j = i + 1; j < OWN_THREADS; j++)
                    assert_ptr_not_equal(r.slots[i][k], r.slots[j][k]);
    }
    test_prof_active(was_active);
}

static void test_tcache_destroy_returns_everything(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(96);
    struct central_stats before, after;
    central_get_stats(cls, &before);
    struct tcache *tc = tcache_create();
    void *p[100];
    for (int i = 0; i < 100; i++)
        p[i] = cache_malloc(tc, cls);
    for (int i = 0; i < 100; i++)
        cache_free(tc, p[i]);
    tcache_destroy(tc);
    central_get_stats(cls, &after);
    assert_int_equal(after.allocated, before.allocated);
}

static void *thread_body(void *arg)
{
    (void)arg;
    void *p[1000];
    for (int i = 0; i < 1000; i++)
        p[i] = malloc(64);
    for (int i = 0; i < 1000; i++)
        free(p[i]);
    return NULL;
}

/* A thread's cache is flushed when the thread exits: nothing stays allocated
 * in the central list on its behalf. */
static void test_tcache_thread_exit_returns_cache(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(64);
    struct central_stats before, after;
    central_get_stats(cls, &before);
    for (int round = 0; round < 20; round++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, thread_body, NULL), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
    }
    central_get_stats(cls, &after);
    assert_true(after.allocated <= before.allocated + 64); /* this thread's own traffic */
    assert_true(tcache_all_cached_bytes() < (size_t)1 << 20);
}

/* ---- remote frees (tcache.h) ---- */

/* Every live cache has its own tag, a byte with four bits set (so none is
 * a subset of another: free()'s one-test check), and foreign_owners is its
 * complement. */
static void test_tcache_owner_tags_are_distinct_four_bit_bytes(void **state)
{
    (void)state;
    enum { N = 40 }; /* with the records made before: at most 70 in all */
    struct tcache *tc[N];
    for (int i = 0; i < N; i++) {
        tc[i] = tcache_create();
        assert_non_null(tc[i]);
        assert_int_equal(__builtin_popcount(tc[i]->owner_tag), 4);
        assert_int_equal(tc[i]->foreign_owners, (uint8_t)~tc[i]->owner_tag);
        assert_int_not_equal(tc[i]->owner_tag, tcache_get()->owner_tag);
        for (int j = 0; j < i; j++)
            assert_int_not_equal(tc[i]->owner_tag, tc[j]->owner_tag);
    }
    for (int i = 0; i < N; i++)
        tcache_destroy(tc[i]);
}

#define HANDED 256
#define HANDED_SIZE 16

struct passive {
    void *handed[HANDED]; /* the main thread's, freed by the other thread */
    void *got[HANDED];    /* what the other thread allocates afterwards */
};

static void *free_then_allocate(void *arg)
{
    struct passive *run = arg;
    for (int i = 0; i < HANDED; i++)
        free(run->handed[i]);
    for (int i = 0; i < HANDED; i++)
        run->got[i] = malloc(HANDED_SIZE);
    return NULL;
}

static uintptr_t line_of(const void *p) { return (uintptr_t)p / 64; }

/* Hoard's passive false sharing: this thread allocates objects in pairs,
 * keeps one of each and hands the other to a thread that frees them and
 * allocates as many; returns how many of that thread's objects share a
 * cache line with one kept here.  It must be none: the handed objects go
 * back to this thread's spans (the remote chain, then the central list),
 * not into the other thread's stack. */
static size_t passive_hand_off(void)
{
    static struct passive run;
    void *kept[HANDED];
    for (int i = 0; i < HANDED; i++) {
        kept[i] = malloc(HANDED_SIZE);
        run.handed[i] = malloc(HANDED_SIZE);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, free_then_allocate, &run) != 0 || pthread_join(t, NULL) != 0)
        abort();
    size_t shared = 0;
    for (int i = 0; i < HANDED; i++)
        for (int j = 0; j < HANDED; j++)
            shared += line_of(run.got[i]) == line_of(kept[j]);
    for (int i = 0; i < HANDED; i++) {
        free(kept[i]);
        free(run.got[i]); /* now the exited thread's: anyone's */
    }
    return shared;
}

static void test_tcache_remote_frees_do_not_share_lines(void **state)
{
    (void)state;
    assert_int_equal(passive_hand_off(), 0);
}

struct sampled_hand_off {
    void *block;               /* a sampled 16-byte block of another thread */
    uint32_t listed, chained;  /* the freeing thread's stack and remote chain */
};

static void *free_the_sampled_block(void *arg)
{
    struct sampled_hand_off *h = arg;
    unsigned cls = sizeclass_of(HANDED_SIZE);
    free(malloc(4 * HANDED_SIZE)); /* a thread with a cache of its own */
    free(h->block);
    h->listed = tcache_bin_count(&tcache_get()->bins[cls]);
    h->chained = tcache_get()->remote[cls].count;
    return NULL;
}

/* Allocates until a block is sampled, and has another thread free it while
 * this one (the owner of the proxy's span) still lives. */
static void *sampled_hand_off(void *arg)
{
    struct sampled_hand_off *h = arg;
    static void *unsampled[4096];
    unsigned n = 0;
    while (!h->block && n < 4096) {
        void *p = malloc(HANDED_SIZE);
        if (prof_is_sampled(p))
            h->block = p;
        else
            unsampled[n++] = p;
    }
    pthread_t t;
    if (h->block &&
        (pthread_create(&t, NULL, free_the_sampled_block, h) != 0 || pthread_join(t, NULL) != 0))
        abort();
    while (n)
        free(unsampled[--n]);
    return NULL;
}

/* A sampled block's proxy, given back when another thread frees the block,
 * goes back towards its span like any of the owner's objects, not onto the
 * freeing thread's stack. */
static void test_tcache_remote_proxies_go_back(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(6); /* R = 64 bytes: 22% of 16-byte blocks */
    struct sampled_hand_off h = {.listed = 99, .chained = 99};
    pthread_t t; /* a new thread starts with the new rate */
    assert_int_equal(pthread_create(&t, NULL, sampled_hand_off, &h), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    prof_lg_sample_set(saved);
    assert_non_null(h.block);
    assert_int_equal(h.listed, 0);
    assert_int_equal(h.chained, 1);
}

/* A malloc due for sampling whose stack is not empty (malloc_sample_due,
 * fastpath.h): the sample's proxy is the stack's top object, and the free
 * gives it back to the stack; a due allocation that cannot be recorded (the
 * thread is inside the profiler) is served by that top object itself,
 * unsampled.  thread.allocated and thread.deallocated count each block
 * once, whichever way. */
struct due_from_stack {
    bool sampled, proxy_popped, proxy_back, unrecorded_is_head, unrecorded_unsampled;
    uint64_t allocated, deallocated;
};

static void *sample_due_from_stack(void *arg)
{
    struct due_from_stack *r = arg;
    /* Sampled too: the first makes the thread's cache and refills the
     * stack, the frees give the proxies back (a few, within the stack's
     * starting max). */
    void *warm[2] = {malloc(64), malloc(64)};
    free(warm[0]);
    free(warm[1]);
    struct tcache_bin *bin = &tcache_get()->bins[sizeclass_of(64)];
    uint64_t allocated = prof_thread_allocated(), deallocated = prof_thread_deallocated();
    uint32_t listed = tcache_bin_count(bin);
    void *second = listed >= 2 ? bin->top[-2] : NULL;
    void *p = malloc(64);
    r->sampled = prof_is_sampled(p);
    r->proxy_popped = listed >= 2 && tcache_bin_count(bin) == listed - 1 && bin->top[-1] == second;
    free(p);
    r->proxy_back = tcache_bin_count(bin) == listed;
    void *head = tcache_bin_empty(bin) ? NULL : bin->top[-1];
    tcache_get()->prof.in_prof = true;
    p = malloc(64);
    tcache_get()->prof.in_prof = false;
    r->unrecorded_is_head = head != NULL && p == head;
    r->unrecorded_unsampled = !prof_is_sampled(p);
    free(p);
    r->allocated = prof_thread_allocated() - allocated;
    r->deallocated = prof_thread_deallocated() - deallocated;
    return NULL;
}

static void test_tcache_sample_due_takes_its_proxy_from_the_stack(void **state)
{
    (void)state;
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(0); /* R = 1 byte: every 64-byte block is due */
    struct due_from_stack r = {0};
    pthread_t t; /* a new thread starts with the new rate */
    assert_int_equal(pthread_create(&t, NULL, sample_due_from_stack, &r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    prof_lg_sample_set(saved);
    assert_true(r.sampled);
    assert_true(r.proxy_popped);
    assert_true(r.proxy_back);
    assert_true(r.unrecorded_is_head);
    assert_true(r.unrecorded_unsampled);
    assert_int_equal(r.allocated, 2 * 64);
    assert_int_equal(r.deallocated, 2 * 64);
}

struct few_remote {
    void *objs[3];
    unsigned cls;
    size_t start, held, after_flush; /* the class's central allocated count */
    uint32_t chained;                /* the thread's remote chain, before the flush */
};

static size_t central_allocated(unsigned cls)
{
    struct central_stats st;
    central_get_stats(cls, &st);
    return st.allocated;
}

static void *free_few_then_flush(void *arg)
{
    struct few_remote *f = arg;
    /* A cache of its own first: were objs[0] sampled, its free would find
     * none and give its proxy straight to the central list. */
    free(malloc(64));
    for (int i = 0; i < 3; i++)
        free(f->objs[i]);
    f->chained = tcache_get()->remote[f->cls].count;
    f->held = central_allocated(f->cls);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    f->after_flush = central_allocated(f->cls);
    return NULL;
}

/* Objects in the inbox of class `cls` of cache `tc`. */
static uint32_t inbox_count(const struct tcache *tc, unsigned cls)
{
    return tcache_inbox_count(__atomic_load_n(&tc->inbox[cls], __ATOMIC_ACQUIRE));
}

/* Fewer remote frees than a batch wait on the chain, counted as cached;
 * thread.tcache.flush hands them to their owner's inbox (this thread is
 * alive), and this thread's own flush gives its inbox to the central list. */
static void test_tcache_remote_chain_is_flushed(void **state)
{
    (void)state;
    struct few_remote f = {.cls = sizeclass_of(48)};
    for (int i = 0; i < 3; i++)
        f.objs[i] = malloc(48);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    f.start = central_allocated(f.cls);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_few_then_flush, &f), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(f.chained, 3);
    assert_int_equal(f.held, f.start);
    assert_int_equal(f.after_flush, f.start);
    assert_int_equal(inbox_count(tcache_get(), f.cls), 3);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    assert_int_equal(inbox_count(tcache_get(), f.cls), 0);
    assert_int_equal(central_allocated(f.cls), f.start - 3);
}

/* ---- owner inboxes (tcache.h) ---- */

#define OWNED_MAX 1024

/* A thread that allocates `n` objects of `size` bytes, publishes them and
 * its cache, and lives until the test lets it go. */
struct owner {
    size_t size;
    unsigned n;
    void *objs[OWNED_MAX];
    struct tcache *tc;
    pthread_barrier_t ready, done;
    pthread_t tid;
};

static void *owner_body(void *arg)
{
    struct owner *o = arg;
    for (unsigned i = 0; i < o->n; i++)
        o->objs[i] = malloc(o->size);
    o->tc = tcache_get();
    pthread_barrier_wait(&o->ready);
    pthread_barrier_wait(&o->done);
    return NULL;
}

static void owner_start(struct owner *o, size_t size, unsigned n)
{
    o->size = size;
    o->n = n;
    assert_int_equal(pthread_barrier_init(&o->ready, NULL, 2), 0);
    assert_int_equal(pthread_barrier_init(&o->done, NULL, 2), 0);
    assert_int_equal(pthread_create(&o->tid, NULL, owner_body, o), 0);
    pthread_barrier_wait(&o->ready);
}

static void owner_end(struct owner *o)
{
    pthread_barrier_wait(&o->done);
    assert_int_equal(pthread_join(o->tid, NULL), 0);
    pthread_barrier_destroy(&o->ready);
    pthread_barrier_destroy(&o->done);
}

/* Frees objs[0..n) on a thread of its own, which then exits. */
struct free_job {
    void **objs;
    unsigned n;
};

static void *free_job_body(void *arg)
{
    struct free_job *job = arg;
    free(malloc(64)); /* a cache of its own first (free_few_then_flush) */
    for (unsigned i = 0; i < job->n; i++)
        free(job->objs[i]);
    return NULL;
}

static void free_elsewhere(void **objs, unsigned n)
{
    struct free_job job = {objs, n};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_job_body, &job), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* A batch freed by another thread goes whole into its owner's inbox, past
 * the central list; the owner's exit gives it back to the central list. */
static void test_tcache_remote_batch_goes_to_owners_inbox(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(48), batch = sizeclass_batch(cls);
    struct owner o;
    owner_start(&o, 48, batch);
    size_t start = central_allocated(cls);
    for (unsigned i = 0; i < batch; i++)
        free(o.objs[i]); /* the chain's batch is flushed on the last */
    assert_int_equal(tcache_get()->remote[cls].count, 0);
    assert_int_equal(inbox_count(o.tc, cls), batch);
    assert_int_equal(central_allocated(cls), start);
    owner_end(&o);
    assert_int_equal(inbox_count(o.tc, cls), 0);
    assert_true(central_allocated(cls) <= start - batch);
}

/* The owner's refill takes its whole inbox before it asks the central
 * list: the objects it gets next are the ones it handed away. */
static void test_tcache_refill_takes_the_inbox_first(void **state)
{
    (void)state;
    bool was_active = test_prof_active(false); /* no proxies: the stack holds what malloc got */
    unsigned cls = sizeclass_of(48), batch = sizeclass_batch(cls);
    struct tcache *me = tcache_get();
    static void *mine[OWNED_MAX], *handed[OWNED_MAX];
    unsigned n = 0;
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    for (unsigned i = 0; i < batch; i++)
        handed[i] = malloc(48);
    size_t start = central_allocated(cls);
    free_elsewhere(handed, batch);
    assert_int_equal(inbox_count(me, cls), batch);
    while (!tcache_bin_empty(&me->bins[cls])) /* empty the stack: the next malloc refills */
        mine[n++] = malloc(48);
    void *p = malloc(48);
    assert_int_equal(inbox_count(me, cls), 0);
    assert_int_equal(central_allocated(cls), start);
    assert_int_equal(tcache_bin_count(&me->bins[cls]), batch - 1);
    bool found = false;
    for (unsigned i = 0; i < batch; i++)
        found |= handed[i] == p;
    assert_true(found);
    free(p);
    for (unsigned i = 0; i < n; i++)
        free(mine[i]);
    test_prof_active(was_active);
}

/* An inbox holds at most 32 KiB (INBOX_BYTES): more goes to the central
 * list, so an owner that stops allocating a class strands little. */
static void test_tcache_inbox_is_bounded(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(256), n = 10 * sizeclass_batch(cls);
    assert_true(n <= OWNED_MAX && (size_t)n * 256 > ((size_t)32 << 10));
    struct owner o;
    owner_start(&o, 256, n);
    size_t start = central_allocated(cls);
    for (unsigned i = 0; i < n; i++)
        free(o.objs[i]);
    uint32_t kept = inbox_count(o.tc, cls);
    assert_true(kept >= sizeclass_batch(cls));
    assert_true((size_t)kept * 256 <= ((size_t)32 << 10));
    assert_int_equal(central_allocated(cls), start - (n - kept));
    owner_end(&o);
}

/* A remote chain holds one owner's objects: another owner's object flushes
 * it to the first owner's inbox. */
static void test_tcache_remote_chain_has_one_owner(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(48);
    struct owner a, b;
    owner_start(&a, 48, 2);
    owner_start(&b, 48, 1);
    free(a.objs[0]);
    free(a.objs[1]);
    assert_int_equal(tcache_get()->remote[cls].count, 2);
    free(b.objs[0]);
    assert_int_equal(tcache_get()->remote[cls].count, 1);
    assert_int_equal(inbox_count(a.tc, cls), 2);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    assert_int_equal(inbox_count(b.tc, cls), 1);
    owner_end(&a);
    owner_end(&b);
}

/* malloc_trim gives every live thread's inbox to the central list, and
 * stats count inbox objects as cached, not allocated. */
static void test_tcache_trim_drains_inboxes(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(48), batch = sizeclass_batch(cls);
    struct owner o;
    owner_start(&o, 48, batch);
    size_t start = central_allocated(cls), cached_before = tcache_all_cached_bytes();
    free_elsewhere(o.objs, batch);
    assert_int_equal(inbox_count(o.tc, cls), batch);
    assert_int_equal(tcache_all_cached_bytes() - cached_before, (size_t)batch * 48);
    malloc_trim(0);
    assert_int_equal(inbox_count(o.tc, cls), 0);
    assert_int_equal(central_allocated(cls), start - batch);
    owner_end(&o);
}

/* ---- uncached threads (tcache.h) ---- */

static bool cache_enabled(void)
{
    bool on;
    size_t len = sizeof(on);
    assert_int_equal(mallctl("thread.tcache.enabled", &on, &len, NULL, 0), 0);
    return on;
}

static void cache_enable(bool on)
{
    assert_int_equal(mallctl("thread.tcache.enabled", NULL, NULL, &on, sizeof(on)), 0);
    assert_true(cache_enabled() == on);
}

#define UNCACHED_N 100

/* With its cache off, a thread takes each object from the central list and
 * gives each back there, one at a time, from spans no thread owns: nothing
 * stays with it.  Turned on again, it caches again. */
static void *uncached_body(void *arg)
{
    (void)arg;
    unsigned cls = sizeclass_of(48);
    static void *p[UNCACHED_N];
    free(malloc(48)); /* a cache, on */
    assert_true(cache_enabled());
    cache_enable(false);
    struct tcache *tc = tcache_get();
    for (unsigned c = 1; c < SA_NUM_CLASSES; c++) {
        assert_int_equal(tcache_bin_max(&tc->bins[c]), 0);
        assert_int_equal(tcache_bin_count(&tc->bins[c]), 0);
    }
    assert_int_equal(tc->burst_bytes, 0);
    size_t start = central_allocated(cls);
    for (unsigned i = 0; i < UNCACHED_N; i++) {
        p[i] = malloc(48);
        assert_non_null(p[i]);
        assert_int_equal(central_allocated(cls), start + i + 1); /* one, not a batch */
        assert_int_equal(pagemap_owner_of(p[i]), 0);
    }
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), EFAULT);
    for (unsigned i = 0; i < UNCACHED_N; i++) {
        free(p[i]);
        assert_int_equal(central_allocated(cls), start + UNCACHED_N - i - 1);
    }
    assert_int_equal(tcache_cached_bytes(tc), 0);
    cache_enable(true);
    free(malloc(48)); /* a refill's batch, and the object back on top of it */
    assert_true(tcache_bin_count(&tc->bins[cls]) > 1);
    assert_int_equal(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0), 0);
    return NULL;
}

static void test_tcache_uncached_thread_keeps_nothing(void **state)
{
    (void)state;
    bool was_active = test_prof_active(false); /* no proxies: exact counts */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, uncached_body, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    test_prof_active(was_active);
}

/* Turning a cache off gives back all it holds, and its spans become
 * anyone's: another thread's frees of its objects go to the central list,
 * not to its inbox, where nobody would take them. */
static void *turn_off_body(void *arg)
{
    (void)arg;
    unsigned cls = sizeclass_of(48), batch = sizeclass_batch(cls);
    static void *live[OWNED_MAX], *spare[200];
    size_t start = central_allocated(cls);
    for (unsigned i = 0; i < batch; i++)
        live[i] = malloc(48);
    for (unsigned i = 0; i < 200; i++)
        spare[i] = malloc(48);
    for (unsigned i = 0; i < 200; i++)
        free(spare[i]);
    struct tcache *tc = tcache_get();
    assert_true(tcache_cached_bytes(tc) > 0);
    assert_int_equal(pagemap_owner_of(live[0]), tc->owner_tag);
    uint32_t incarnation = tc->incarnation;
    cache_enable(false);
    assert_int_equal(tcache_cached_bytes(tc), 0);
    assert_int_not_equal(tc->incarnation, incarnation);
    assert_int_equal(central_allocated(cls), start + batch);
    free_elsewhere(live, batch); /* a whole batch: the chain is flushed */
    assert_int_equal(inbox_count(tc, cls), 0);
    assert_int_equal(central_allocated(cls), start);
    cache_enable(true);
    return NULL;
}

static void test_tcache_turning_off_gives_everything_back(void **state)
{
    (void)state;
    bool was_active = test_prof_active(false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, turn_off_body, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    test_prof_active(was_active);
}

/* ---- classes above tcache_max (tcache.h) ---- */

#define ABOVE_MAX_N 64

/* With tcache_max at 1 KiB, a thread takes each object of a bigger class
 * from the central list and gives each back there, one at a time, from
 * spans no thread owns, and so does another thread that frees them; its
 * stacks of those classes stay at max 0, whether its cache was just made
 * or turned off and on; smaller classes are cached as before. */
static void *above_max_body(void *arg)
{
    (void)arg;
    unsigned big = sizeclass_of(2048), small = sizeclass_of(48);
    static void *p[ABOVE_MAX_N];
    free(malloc(48)); /* a cache, on */
    struct tcache *tc = tcache_get();
    assert_true(tcache_is_cached(tc));
    for (int round = 0; round < 2; round++) {
        for (unsigned c = 1; c < SA_NUM_CLASSES; c++)
            if (sizeclass_size(c) > 1024) {
                assert_int_equal(tcache_bin_max(&tc->bins[c]), 0);
                assert_int_equal(tcache_bin_count(&tc->bins[c]), 0);
            }
        size_t start = central_allocated(big);
        for (unsigned i = 0; i < ABOVE_MAX_N; i++) {
            p[i] = malloc(2048);
            assert_non_null(p[i]);
            assert_int_equal(central_allocated(big), start + i + 1); /* one, not a batch */
            assert_int_equal(pagemap_owner_of(p[i]), 0);
        }
        free_elsewhere(p, ABOVE_MAX_N / 2); /* straight back, not chained */
        assert_int_equal(central_allocated(big), start + ABOVE_MAX_N - ABOVE_MAX_N / 2);
        for (unsigned i = ABOVE_MAX_N / 2; i < ABOVE_MAX_N; i++) {
            free(p[i]);
            assert_int_equal(central_allocated(big), start + ABOVE_MAX_N - i - 1);
        }
        assert_int_equal(tcache_bin_count(&tc->bins[big]), 0);
        for (unsigned i = 0; i < ABOVE_MAX_N; i++)
            p[i] = malloc(48);
        for (unsigned i = 0; i < ABOVE_MAX_N; i++)
            free(p[i]);
        assert_true(tcache_bin_count(&tc->bins[small]) > 1); /* cached */
        tcache_check(tc);
        cache_enable(false);
        cache_enable(true); /* its stacks start again: the big ones at 0 */
    }
    return NULL;
}

static void test_tcache_classes_above_max_uncached(void **state)
{
    (void)state;
    bool was_active = test_prof_active(false); /* no proxies: exact counts */
    assert_int_equal(conf_apply("tcache_max:1024", "test"), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, above_max_body, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(conf_apply("tcache_max:262144", "test"), 0);
    test_prof_active(was_active);
}

/* ---- thread.deallocated (derived: tcache.h) ---- */

static uint64_t read_u64(const char *name)
{
    uint64_t v = 0;
    size_t len = sizeof(v);
    assert_int_equal(mallctl(name, &v, &len, NULL, 0), 0);
    return v;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A size from 1 byte to 1 MiB, mostly small: lists fill and overflow,
 * refill, and large spans come and go. */
static size_t random_size(uint64_t *rng)
{
    uint64_t r = rng_next(rng);
    switch (r % 16) {
    case 0: return 1 + (r >> 8) % (1 << 20);          /* large, sometimes */
    case 1: case 2: return 1 + (r >> 8) % 65536;
    default: return 1 + (r >> 8) % 512;
    }
}

#define SLOTS 3000

struct handoff {
    void **objs;
    size_t n;
    uint64_t expect;  /* usable bytes the freeing thread must report */
    uint64_t got;
};

static void *free_all(void *arg)
{
    struct handoff *h = arg;
    uint64_t d0 = read_u64("thread.deallocated");
    for (size_t i = 0; i < h->n; i++)
        free(h->objs[i]);
    h->got = read_u64("thread.deallocated") - d0;
    return NULL;
}

/* Every free, realloc move and cross-thread free of a random workload under
 * heavy sampling (proxies taken and given back) against the sum of the
 * usable sizes freed, checked after each step; with `toggling`, the
 * thread's cache goes off and on every 10007 steps (uncached threads). */
static void deallocated_workload(bool toggling)
{
    size_t saved = prof_lg_sample_get();
    prof_lg_sample_set(12); /* a sample every 4 KiB: many proxies */
    void **slot = calloc(SLOTS, sizeof(void *));
    uint64_t rng = 0x9e3779b97f4a7c15ull, freed = 0;
    uint64_t d0 = read_u64("thread.deallocated");
    for (int step = 0; step < 200000; step++) {
        size_t i = rng_next(&rng) % SLOTS, n = random_size(&rng);
        void *p = slot[i];
        switch (rng_next(&rng) % 8) {
        case 0: /* realloc frees the old block, moved or not (as jemalloc counts) */
            if (p) {
                freed += malloc_usable_size(p);
                slot[i] = realloc(p, n);
                assert_non_null(slot[i]);
                break;
            }
            /* fall through */
        case 1:
            if (p) {
                freed += malloc_usable_size(p);
                free(p);
            }
            slot[i] = rng_next(&rng) % 2 ? calloc(1, n) : aligned_alloc(64, (n + 63) & ~63ul);
            break;
        case 2:
            if (step % 5000 == 0)
                malloc_trim(0); /* flushes the whole cache */
            /* fall through */
        default:
            if (p) {
                freed += malloc_usable_size(p);
                free(p);
            }
            slot[i] = malloc(n);
        }
        if (step % 997 == 0)
            assert_int_equal(read_u64("thread.deallocated") - d0, freed);
        if (toggling && step % 10007 == 0)
            cache_enable(!cache_enabled());
    }
    assert_int_equal(read_u64("thread.deallocated") - d0, freed);

    /* Half the live objects freed by another thread: its count, not ours. */
    struct handoff h = {.objs = slot, .n = SLOTS / 2};
    for (size_t i = 0; i < h.n; i++)
        h.expect += malloc_usable_size(slot[i]);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_all, &h), 0);
    pthread_join(t, NULL);
    assert_int_equal(h.got, h.expect);
    assert_int_equal(read_u64("thread.deallocated") - d0, freed);
    for (size_t i = SLOTS / 2; i < SLOTS; i++) {
        freed += malloc_usable_size(slot[i]);
        free(slot[i]);
    }
    assert_int_equal(read_u64("thread.deallocated") - d0, freed);
    free(slot);
    prof_lg_sample_set(saved);
    cache_enable(true);
}

static void test_tcache_deallocated_is_exact(void **state)
{
    (void)state;
    deallocated_workload(false);
}

static void test_tcache_deallocated_is_exact_cache_off_and_on(void **state)
{
    (void)state;
    deallocated_workload(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcache_refill_slow_starts_to_a_batch),
        cmocka_unit_test(test_tcache_overflow_flushes_and_limits_adapt),
        cmocka_unit_test(test_tcache_whole_cache_budget),
        cmocka_unit_test_teardown(test_tcache_many_caches_bound_what_each_keeps, many_end),
        cmocka_unit_test_teardown(test_tcache_capacity_shrinks_as_threads_start, many_end),
        cmocka_unit_test(test_tcache_big_classes_cache_a_batch),
        cmocka_unit_test(test_tcache_bursts_of_big_classes),
        cmocka_unit_test(test_tcache_bursts_across_the_stamps_wrap),
        cmocka_unit_test(test_tcache_first_refill_is_no_burst),
        cmocka_unit_test(test_tcache_refill_hands_out_in_address_order),
        cmocka_unit_test(test_tcache_transfer_leaves_objects_untouched),
        cmocka_unit_test(test_tcache_free_leaves_the_object_untouched),
        cmocka_unit_test(test_tcache_own_slots_go_to_the_next_thread),
        cmocka_unit_test(test_tcache_own_slots_are_never_shared),
        cmocka_unit_test(test_tcache_destroy_returns_everything),
        cmocka_unit_test(test_tcache_thread_exit_returns_cache),
        cmocka_unit_test(test_tcache_owner_tags_are_distinct_four_bit_bytes),
        cmocka_unit_test(test_tcache_remote_frees_do_not_share_lines),
        cmocka_unit_test(test_tcache_remote_proxies_go_back),
        cmocka_unit_test(test_tcache_sample_due_takes_its_proxy_from_the_stack),
        cmocka_unit_test(test_tcache_remote_chain_is_flushed),
        cmocka_unit_test(test_tcache_remote_batch_goes_to_owners_inbox),
        cmocka_unit_test(test_tcache_refill_takes_the_inbox_first),
        cmocka_unit_test(test_tcache_inbox_is_bounded),
        cmocka_unit_test(test_tcache_remote_chain_has_one_owner),
        cmocka_unit_test(test_tcache_trim_drains_inboxes),
        cmocka_unit_test(test_tcache_uncached_thread_keeps_nothing),
        cmocka_unit_test(test_tcache_turning_off_gives_everything_back),
        cmocka_unit_test(test_tcache_classes_above_max_uncached),
        cmocka_unit_test(test_tcache_deallocated_is_exact),
        cmocka_unit_test(test_tcache_deallocated_is_exact_cache_off_and_on),
    };
    return cmocka_run_group_tests_name("tcache", tests, NULL, NULL);
}
