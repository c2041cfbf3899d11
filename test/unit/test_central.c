/*
 * test_central.c: batches between the central lists and their callers:
 * objects are distinct, inside spans of their class, at object boundaries;
 * spans come and go with their objects; counts stay consistent; two live
 * thread caches never get objects of one span (span affinity), and a gone
 * one's spans are anyone's; a span's pages carry its owner's tag; a
 * span's free objects go out lowest address first; the transfer caches
 * keep what fits and hand it out the last freed first; a block given back
 * twice aborts, in one batch or in two with its span emptied between
 * (test_api: twice in two, the span kept).
 */
#include "unit.h"

/* Reverses a[0, n). */
static void reverse(void **a, unsigned n)
{
    for (unsigned i = 0; i < n / 2; i++) {
        void *t = a[i];
        a[i] = a[n - 1 - i];
        a[n - 1 - i] = t;
    }
}

/* `n` objects into out[0, n) in the order they are handed out (batches
 * come in stack order, the last the first to hand out). */
static void take_as(struct central_owner owner, unsigned cls, unsigned n, void **out)
{
    unsigned got = 0;
    while (got < n) {
        unsigned k = central_alloc_batch(cls, n - got, owner, out + got);
        assert_true(k >= 1);
        reverse(out + got, k);
        got += k;
    }
}

static void take(unsigned cls, unsigned n, void **out)
{
    take_as((struct central_owner){NULL, 0, 0}, cls, n, out);
}

/* Gives back objs[0, n), freed in that order (objs[n - 1] the last). */
static void give(unsigned cls, unsigned n, void **objs)
{
    central_free_batch(cls, objs, n, NULL);
}

/* Gives back objs[0, n) as a chain from objs[0] (a remote free's). */
static void give_chain(unsigned cls, unsigned n, void **objs)
{
    for (unsigned i = 0; i < n; i++)
        *(void **)objs[i] = i + 1 < n ? objs[i + 1] : NULL;
    central_free_chain(cls, objs[0], n);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void test_central_batches_are_distinct_objects_of_the_class(void **state)
{
    (void)state;
    unsigned classes[] = {1, 2, sizeclass_of(100), sizeclass_of(3000), sizeclass_of(70000),
                          SA_NUM_CLASSES - 1};
    for (size_t k = 0; k < sizeof(classes) / sizeof(classes[0]); k++) {
        unsigned cls = classes[k], n = 3 * sizeclass_objects(cls) + 5;
        void **objs = malloc(n * sizeof(void *));
        take(cls, n, objs);
        for (unsigned i = 0; i < n; i++) {
            struct span *s = pagemap_span(objs[i]);
            assert_non_null(s);
            assert_int_equal(s->state, SPAN_SMALL);
            assert_int_equal(s->cls, cls);
            assert_int_equal(((uintptr_t)objs[i] - s->start) % sizeclass_size(cls), 0);
            assert_int_equal(pagemap_class(objs[i]), cls);
            memset(objs[i], 0x5a, sizeclass_size(cls)); /* whole object is ours */
        }
        void **sorted = malloc(n * sizeof(void *));
        memcpy(sorted, objs, n * sizeof(void *));
        qsort(sorted, n, sizeof(void *), cmp_ptr);
        for (unsigned i = 1; i < n; i++)
            assert_true((uintptr_t)sorted[i] >= (uintptr_t)sorted[i - 1] + sizeclass_size(cls));
        central_check(cls);
        give(cls, n, objs);
        central_check(cls);
        free(sorted);
        free(objs);
    }
}

/* Spans return to the page heap when their objects do, at once. */
static void test_central_empty_spans_go_back(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(5000); /* a class this test process barely uses */
    struct central_stats before, during, after;
    central_release_xfer(); /* nothing in its transfer cache */
    central_get_stats(cls, &before);
    unsigned n = 10 * sizeclass_objects(cls);
    void **objs = malloc(n * sizeof(void *));
    take(cls, n, objs);
    central_get_stats(cls, &during);
    assert_int_equal(during.allocated, before.allocated + n);
    assert_true(during.spans >= before.spans + 9);
    give(cls, n, objs);
    central_get_stats(cls, &after);
    assert_int_equal(after.allocated, before.allocated);
    /* All back but the transfer cache's (the last given back), whose
     * spans stay. */
    unsigned kept = central_xfer_capacity(cls), holding = 0;
    for (unsigned i = n - kept; i < n; i++)
        holding += i == n - kept || pagemap_span(objs[i]) != pagemap_span(objs[i - 1]);
    assert_true(after.spans <= before.spans + holding);
    central_release_xfer();
    central_get_stats(cls, &after);
    assert_true(after.spans <= before.spans);
    central_check(cls);
    pageheap_check();
    free(objs);
}

/* Objects given back in any order are handed out again before new spans. */
static void test_central_reuses_returned_objects(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(700), n = 2 * sizeclass_objects(cls);
    void **objs = malloc(n * sizeof(void *)), **again = malloc(n * sizeof(void *));
    take(cls, n, objs);
    struct central_stats st1, st2;
    central_get_stats(cls, &st1);
    give(cls, n / 2, objs + n / 4); /* a middle slice */
    take(cls, n / 2, again);
    central_get_stats(cls, &st2);
    assert_int_equal(st1.spans, st2.spans);
    give(cls, n / 2, again);
    give(cls, n / 4, objs);
    give(cls, n - n / 4 - n / 2, objs + n / 4 + n / 2);
    central_check(cls);
    free(objs);
    free(again);
}

/* The next batch of `cls` comes from a span no other object of the class
 * shares yet: every partial span is used up first.  Returns that new
 * span's first object. */
static void *use_up_partial_spans(unsigned cls, struct central_owner owner)
{
    void *head;
    struct central_stats before, after;
    central_get_stats(cls, &before);
    do {
        assert_int_equal(central_alloc_batch(cls, 1, owner, &head), 1);
        central_get_stats(cls, &after);
    } while (after.spans == before.spans);
    return head;
}

/* A fresh span's objects come out in ascending address order, one after
 * the other, as a program's consecutive allocations are best laid out. */
static void test_central_fresh_span_goes_out_ascending(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(48), n = sizeclass_objects(cls) / 2;
    void **objs = malloc(n * sizeof(void *));
    struct central_owner owner = {NULL, 0, 0};
    void *head = use_up_partial_spans(cls, owner);
    /* head is the first object of the new span; the next n follow it. */
    take_as(owner, cls, n, objs);
    uintptr_t size = sizeclass_size(cls);
    assert_int_equal((uintptr_t)objs[0], (uintptr_t)head + size);
    for (unsigned i = 1; i < n; i++)
        assert_int_equal((uintptr_t)objs[i], (uintptr_t)objs[i - 1] + size);
    give(cls, n, objs);
    give(cls, 1, &head);
    central_check(cls);
    free(objs);
}

/* Span affinity: A's objects given back (as a cross-thread free or an exit
 * flush does) are not handed to B while A lives, so no cache line holds
 * objects of both; once A is gone, B reuses A's span. */
static void test_central_live_owners_get_their_own_spans(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(16);
    uint32_t gen_a = 7, gen_b = 3;
    struct central_owner a = {&gen_a, gen_a, 1}, b = {&gen_b, gen_b, 2};
    enum { N = 64 };
    void *objs_a[N], *objs_b[N], *again[N];
    take_as(a, cls, N, objs_a);
    give(cls, N / 2, objs_a); /* half of A's back in A's span */
    take_as(b, cls, N, objs_b);
    struct span *span_a = pagemap_span(objs_a[N - 1]);
    for (unsigned i = 0; i < N; i++)
        assert_ptr_not_equal(pagemap_span(objs_b[i]), span_a);
    give(cls, N, objs_b);
    /* A is gone (its cache's generation moved on): its span is B's to use. */
    gen_a++;
    take_as(b, cls, N, again);
    unsigned from_a = 0;
    for (unsigned i = 0; i < N; i++)
        from_a += pagemap_span(again[i]) == span_a;
    assert_true(from_a >= N / 2);
    give(cls, N, again);
    give(cls, N / 2, objs_a + N / 2);
    central_check(cls);
}

/* The pages of a span of a class that keeps to its threads carry the tag
 * of the cache that took objects from it last (free() reads it: tcache.h,
 * remote frees); an anonymous taker, or a class too large for affinity,
 * leaves 0; a span back in the page heap has 0 again. */
static void test_central_spans_carry_their_owners_tag(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(32), big = sizeclass_of(1024);
    uint32_t gen_a = 1, gen_b = 1;
    struct central_owner a = {&gen_a, gen_a, 0x0f}, b = {&gen_b, gen_b, 0xf0};
    enum { N = 8 };
    void *objs_a[N], *objs_b[N], *anon[N], *large[N];
    take_as(a, cls, N, objs_a);
    take_as(b, cls, N, objs_b);
    take_as(a, big, N, large);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(pagemap_owner_of(objs_a[i]), 0x0f);
        assert_int_equal(pagemap_owner_of(objs_b[i]), 0xf0);
        assert_int_equal(pagemap_owner_of(large[i]), 0);
    }
    /* An anonymous taker (a thread without a cache) may take from any
     * span, and the span is then nobody's: tag 0. */
    take(cls, N, anon);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(pagemap_owner_of(anon[i]), 0);
    give(cls, N, objs_a);
    give(cls, N, objs_b);
    give(cls, N, anon);
    give(big, N, large);
    central_release_xfer();
    assert_int_equal(pagemap_owner_of(objs_a[0]), 0);
    central_check(cls);
}

/* Whether free object `obj` of class `cls` went back to its span: its bit
 * is set, or the span, emptied, went back to the page heap. */
static bool back_in_its_span(unsigned cls, void *obj)
{
    struct span *s = pagemap_span(obj);
    if (!s || s->state != SPAN_SMALL || s->cls != cls)
        return true;
    size_t idx = ((uintptr_t)obj - s->start) / sizeclass_size(cls);
    return span_free_bits(s)[idx / 64] >> (idx % 64) & 1;
}

/* A class above the affinity size keeps a batch given back in its
 * transfer cache: no longer counted out, but still out of its spans, which
 * stay; the next batch taken is the same objects, the last freed first; a
 * double-free check finds them free; malloc_trim gives them back to their
 * spans, which then go back to the page heap. */
static void test_central_keeps_a_batch_given_back(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(5000), batch = sizeclass_batch(cls);
    assert_true(central_xfer_capacity(cls) >= batch);
    central_release_xfer(); /* no objects kept by an earlier test */
    void **objs = malloc(batch * sizeof(void *)), **again = malloc(batch * sizeof(void *));
    struct central_stats before, taken, kept, trimmed;
    central_get_stats(cls, &before);
    take(cls, batch, objs);
    central_get_stats(cls, &taken);
    assert_true(taken.spans > before.spans);
    /* The fragmentation dump's view of the first object's span. */
    size_t free_out, free_kept;
    unsigned out, out_kept, in_span = 0;
    assert_true(central_span_usage(objs[0], &free_out, &out));
    for (unsigned i = 0; i < batch; i++)
        in_span += pagemap_span(objs[i]) == pagemap_span(objs[0]);
    give(cls, batch, objs);
    assert_true(central_span_usage(objs[0], &free_kept, &out_kept));
    assert_int_equal(out_kept, out - in_span);
    assert_int_equal(free_kept, free_out + in_span * sizeclass_size(cls));
    central_get_stats(cls, &kept);
    assert_int_equal(kept.allocated, before.allocated);
    assert_int_equal(kept.spans, taken.spans); /* emptied spans would have gone */
    for (unsigned i = 0; i < batch; i++) {
        const void *start;
        assert_int_equal(central_object_state(cls, objs[i], &start), OBJECT_FREE);
        assert_false(back_in_its_span(cls, objs[i]));
    }
    central_check(cls);
    take(cls, batch, again);
    for (unsigned i = 0; i < batch; i++)
        assert_ptr_equal(again[i], objs[batch - 1 - i]);
    give(cls, batch, again);
    central_release_xfer();
    central_get_stats(cls, &trimmed);
    assert_int_equal(trimmed.allocated, before.allocated);
    assert_true(trimmed.spans <= before.spans);
    central_check(cls);
    pageheap_check();
    free(objs);
    free(again);
}

/* A batch given back by the cache that took the class's last batch goes
 * back to its spans, not to the transfer cache; another cache's batch is
 * kept there, for the next taker. */
static void test_central_last_takers_batch_skips_the_transfer_cache(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(5000), batch = sizeclass_batch(cls);
    assert_true(central_xfer_capacity(cls) >= batch);
    central_release_xfer(); /* no objects kept by an earlier test */
    uint32_t gen_a = 1, gen_b = 1;
    struct central_owner a = {&gen_a, gen_a, 0};
    void **objs = malloc(batch * sizeof(void *));
    struct central_stats before, after;
    central_get_stats(cls, &before);

    take_as(a, cls, batch, objs);
    central_free_batch(cls, objs, batch, &gen_a);
    for (unsigned i = 0; i < batch; i++)
        assert_true(back_in_its_span(cls, objs[i]));
    central_get_stats(cls, &after);
    assert_int_equal(after.allocated, before.allocated);
    central_check(cls);

    take_as(a, cls, batch, objs);
    central_free_batch(cls, objs, batch, &gen_b);
    for (unsigned i = 0; i < batch; i++) {
        const void *start;
        assert_false(back_in_its_span(cls, objs[i]));
        assert_int_equal(central_object_state(cls, objs[i], &start), OBJECT_FREE);
    }
    central_check(cls);
    central_release_xfer();
    for (unsigned i = 0; i < batch; i++)
        assert_true(back_in_its_span(cls, objs[i]));
    central_check(cls);
    pageheap_check();
    free(objs);
}

/* central_decay: transfer cache objects that stayed through a whole
 * window (a decay time at least, from one look to the next that closes
 * it) go back to their spans, those a batch taken reached in it do not.
 * Times are made up, from os_now_ns() on.
 *
 * Two batches go into a transfer cache (from no cache: kept), of which
 * the next taker takes one, which comes back: at the end of the window in
 * which they came, nothing goes; at the end of the next, the batch no
 * taker reached. */
static void test_central_decay_gives_back_what_sits_unused(void **state)
{
    (void)state;
    long saved = pageheap_decay_ms();
    pageheap_set_decay_ms(1000);
    const uint64_t decay = 1000000000u;
    central_release_xfer();
    uint32_t gen_a = 1;
    struct central_owner a = {&gen_a, gen_a, 0};
    unsigned cls = sizeclass_of(512), batch = sizeclass_batch(cls);
    assert_true(central_xfer_capacity(cls) >= 2 * batch);
    void **objs = malloc(2 * batch * sizeof(void *));
    void **again = malloc(batch * sizeof(void *));
    uint64_t t = os_now_ns() + 1000 * decay; /* past any look already scheduled */
    central_decay(t); /* a window begins, the cache empty */
    take_as(a, cls, 2 * batch, objs);
    central_free_batch(cls, objs, 2 * batch, NULL);
    t += decay;
    central_decay(t);
    for (unsigned i = 0; i < 2 * batch; i++)
        assert_false(back_in_its_span(cls, objs[i]));
    take_as(a, cls, batch, again); /* the last freed: objs[batch, 2 batch) */
    for (unsigned i = 0; i < batch; i++)
        assert_ptr_equal(again[i], objs[2 * batch - 1 - i]);
    central_free_batch(cls, again, batch, NULL);
    t += decay;
    central_decay(t);
    for (unsigned i = 0; i < batch; i++) {
        assert_true(back_in_its_span(cls, objs[i]));   /* stayed through */
        assert_false(back_in_its_span(cls, again[i])); /* reached */
    }
    central_check(cls);
    central_release_xfer();
    central_check(cls);
    pageheap_check();
    pageheap_set_decay_ms(saved);
    free(objs);
    free(again);
}

/* A class's transfer cache holds at most central_xfer_capacity() objects:
 * of a batch that does not fit, the last freed are kept and the rest go
 * back to their spans' own lists.  Objects come out the last kept first.
 * A class whose batch is more than the 128 KiB cap keeps none. */
static void test_central_transfer_cache_is_capped(void **state)
{
    (void)state;
    unsigned big = sizeclass_of(100000);
    assert_true(sizeclass_size(big) * sizeclass_batch(big) > (128 << 10));
    assert_int_equal(central_xfer_capacity(big), 0);
    unsigned cls = sizeclass_of(1024), cap = central_xfer_capacity(cls), extra = 10;
    assert_true(cap >= 2 * sizeclass_batch(cls));
    central_release_xfer();
    /* Both arrays at once and before the cache fills: an array of 128
     * pointers is itself an object of this class. */
    void **objs = malloc((2 * cap + extra + 1) * sizeof(void *)), **again = objs + cap + extra + 1;
    take(cls, cap + extra + 1, objs);
    void **first = objs, **second = objs + extra, *one = objs[cap + extra];
    give(cls, extra, first);
    give(cls, cap, second); /* room for cap - extra: its first extra go back */
    for (unsigned i = 0; i < cap; i++)
        assert_int_equal(back_in_its_span(cls, second[i]), i < extra);
    for (unsigned i = 0; i < extra; i++)
        assert_false(back_in_its_span(cls, first[i]));
    central_check(cls);
    /* The cache is full: one more object goes to its span. */
    give(cls, 1, &one);
    assert_true(back_in_its_span(cls, one));
    /* Out the last kept first: second's from its end, then first's. */
    take(cls, cap, again);
    for (unsigned i = 0; i < cap - extra; i++)
        assert_ptr_equal(again[i], second[cap - 1 - i]);
    for (unsigned i = 0; i < extra; i++)
        assert_ptr_equal(again[cap - extra + i], first[extra - 1 - i]);
    give(cls, cap, again);
    central_release_xfer();
    central_check(cls);
    free(objs);
}

/* Classes above 1 KiB keep one batch (64 KiB) at most, up to 1 KiB as
 * many batches as fit in 128 KiB: bigger objects rarely cross threads in
 * numbers, and idle objects of every class hold memory nobody else can
 * use.  All classes' caches fit in the slots they share. */
static void test_central_big_classes_keep_one_batch(void **state)
{
    (void)state;
    unsigned total = 0;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++) {
        size_t size = sizeclass_size(cls), batch = sizeclass_batch(cls);
        unsigned cap = central_xfer_capacity(cls);
        total += cap;
        assert_int_equal(cap % batch, 0);
        if (size <= 256)
            assert_int_equal(cap, 0);
        else if (size <= 1024)
            assert_true(cap >= 2 * batch && cap * size <= (128 << 10));
        else
            assert_int_equal(cap, batch * size <= (64 << 10) ? batch : 0);
    }
    unsigned c4k = sizeclass_of(4096);
    assert_int_equal(central_xfer_capacity(c4k), sizeclass_batch(c4k));
    assert_int_equal(central_xfer_capacity(sizeclass_of(65536)), 0);
    assert_true(total <= central_xfer_store_slots());
}

/* Classes that keep to their owners' spans keep no transfer cache: a
 * batch goes back to its spans, where only its owner takes it again. */
static void test_central_owned_classes_keep_no_transfer_cache(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(256);
    assert_int_equal(central_xfer_capacity(cls), 0);
    enum { N = 16 };
    void *objs[N];
    take(cls, N, objs);
    give(cls, N, objs);
    for (unsigned i = 0; i < N; i++)
        assert_true(back_in_its_span(cls, objs[i]));
    central_check(cls);
}

/* One batch of exactly `want` objects, in the order they are handed out. */
static void take_batch(unsigned cls, unsigned want, void **out)
{
    unsigned k = central_alloc_batch(cls, want, (struct central_owner){NULL, 0, 0}, out);
    assert_int_equal(k, want);
    reverse(out, k);
}

/* Two fresh spans of `cls` (`n` objects each), taken whole: A's objects
 * in objs[0, n), B's in objs[n, 2n), each in address order. */
static void take_two_fresh_spans(unsigned cls, unsigned n, void **objs)
{
    struct central_owner anyone = {NULL, 0, 0};
    objs[0] = use_up_partial_spans(cls, anyone);
    take_as(anyone, cls, 2 * n - 1, objs + 1);
    assert_ptr_not_equal(pagemap_span(objs[0]), pagemap_span(objs[n]));
}

/* A batch takes a span's free objects lowest address first, whatever
 * order they came back in, and goes on to the next span's when the first
 * runs out; of more than it still wants it takes only that many.  The
 * span given back to last is tried first.  Counts stay right throughout
 * (central_check). */
static void test_central_batch_takes_lowest_free_objects_first(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(64), n = sizeclass_objects(cls);
    void **objs = malloc(2 * n * sizeof(void *)), *batch[5];
    take_two_fresh_spans(cls, n, objs);
    void **a = objs, **b = objs + n;
    give(cls, 3, (void *[]){a[3], a[1], a[2]});
    give(cls, 3, (void *[]){b[2], b[3], b[1]});
    take_batch(cls, 5, batch);
    void *want1[5] = {b[1], b[2], b[3], a[1], a[2]};
    for (unsigned i = 0; i < 5; i++)
        assert_ptr_equal(batch[i], want1[i]);
    central_check(cls);
    /* A has 3 free.  One more below it, and two of B's: B's, then A's. */
    give(cls, 1, &a[0]);                  /* A: 0, 3 */
    give(cls, 2, (void *[]){b[6], b[5]}); /* B: 5, 6 */
    void *more[4];
    take_batch(cls, 4, more);
    void *want2[4] = {b[5], b[6], a[0], a[3]};
    for (unsigned i = 0; i < 4; i++)
        assert_ptr_equal(more[i], want2[i]);
    central_check(cls);
    give(cls, 5, batch);
    give(cls, 4, more);
    central_check(cls);
    free(objs);
}

/* A batch that goes from span to span and back (A A B B B A), as an array
 * or as a chain, returns each object to its own span: every span's count
 * drops by its objects, both spans are on the partial list again (the
 * last given back to first), and a span's last objects coming back in one
 * batch empty it. */
static void runs_of_one_span_go_back_whole(bool chained)
{
    void (*give_as)(unsigned, unsigned, void **) = chained ? give_chain : give;
    unsigned cls = sizeclass_of(64), n = sizeclass_objects(cls);
    void **objs = malloc(2 * n * sizeof(void *)), *batch[6];
    take_two_fresh_spans(cls, n, objs);
    void **a = objs, **b = objs + n;
    struct span *sa = pagemap_span(a[0]), *sb = pagemap_span(b[0]);
    unsigned a_out = sa->allocated, b_out = sb->allocated;
    give_as(cls, 6, (void *[]){a[0], a[1], b[1], b[0], b[2], a[2]});
    assert_int_equal(sa->allocated, a_out - 3);
    assert_int_equal(sb->allocated, b_out - 3);
    central_check(cls);
    take_batch(cls, 6, batch);
    void *want[6] = {b[0], b[1], b[2], a[0], a[1], a[2]};
    for (unsigned i = 0; i < 6; i++)
        assert_ptr_equal(batch[i], want[i]);
    central_check(cls);
    /* All of B in one batch: B is empty again and is kept (or given to
     * the page heap), off the partial list. */
    struct central_stats before, after;
    central_get_stats(cls, &before);
    give_as(cls, n, b);
    central_get_stats(cls, &after);
    assert_int_equal(after.allocated, before.allocated - n);
    assert_true(sb->state != SPAN_SMALL || sb->allocated == 0);
    central_check(cls);
    give(cls, 3, batch + 3);
    give(cls, n - 3, a + 3);
    central_check(cls);
    free(objs);
}

static void test_central_runs_of_one_span_go_back_whole(void **state)
{
    (void)state;
    runs_of_one_span_go_back_whole(false);
}

static void test_central_chain_runs_of_one_span_go_back_whole(void **state)
{
    (void)state;
    runs_of_one_span_go_back_whole(true);
}

/* A block given back twice in one batch, the second time after its span's
 * count reached 0 with the first: the second still finds its bit set in
 * the span's record and aborts naming it.  (Given to the page heap at the
 * first, the span's record would have been the page heap's by then.) */
static void free_twice_in_one_batch(void *unused)
{
    (void)unused;
    unsigned cls = sizeclass_of(64), n = sizeclass_objects(cls);
    void **objs = malloc(2 * n * sizeof(void *));
    take_two_fresh_spans(cls, n, objs);
    give(cls, n - 1, objs + 1); /* all of A's but its first */
    assert_int_equal(pagemap_span(objs[0])->allocated, 1);
    give(cls, 2, (void *[]){objs[0], objs[0]});
}

/* The same, the second copy in a batch of its own, after the first emptied
 * the span and the page heap took it back: the record is no longer a
 * small span of the class, and the second aborts naming the block rather
 * than setting a bit in a free span's fields. */
static void free_twice_in_two_batches(void *unused)
{
    (void)unused;
    unsigned cls = sizeclass_of(64), n = sizeclass_objects(cls);
    void **objs = malloc(2 * n * sizeof(void *));
    take_two_fresh_spans(cls, n, objs);
    give(cls, n - 1, objs + 1);
    give(cls, 1, objs);
    assert_int_not_equal(pagemap_span(objs[0])->state, SPAN_SMALL);
    give(cls, 1, objs);
}

static void test_central_block_freed_twice_aborts(void **state)
{
    (void)state;
    const struct {
        void (*run)(void *);
        const char *why;
    } cases[] = {
        {free_twice_in_one_batch, "(already free in its span)"},
        /* The free span's record may still hold the old bits: the state,
         * not a bit, must be what stops it. */
        {free_twice_in_two_batches, "(its span is empty and given back)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int sig;
        char *err = unit_run_in_child(cases[i].run, NULL, &sig);
        if (sig != SIGABRT ||
            !strstr(err, "salloc: free(): double free of the 64-byte block at 0x") ||
            !strstr(err, cases[i].why))
            fail_msg("a block freed twice (case %zu): signal %d, stderr \"%s\"", i, sig, err);
    }
}

/* Appends from[lo, hi) to out[k...]; the new length. */
static unsigned append(void **out, unsigned k, void **from, unsigned lo, unsigned hi)
{
    for (unsigned i = lo; i < hi; i++)
        out[k++] = from[i];
    return k;
}

/* Batches go back 32 objects at a time (return_group): a run longer than
 * that, and one open across the boundary, still reach their spans whole.
 * Batch: A's 0..39 (over the first boundary), B's 0..2, A's 40..44, B's
 * 3..20 (over the second): 66 objects, which come out again B's 0..20 (B
 * given back to last), then A's 0..44. */
static void runs_cross_the_read_groups_whole(bool chained)
{
    unsigned cls = sizeclass_of(64), n = sizeclass_objects(cls);
    assert_true(n >= 64);
    void **objs = malloc(2 * n * sizeof(void *)), *chain[66], *batch[21];
    take_two_fresh_spans(cls, n, objs);
    void **a = objs, **b = objs + n;
    struct span *sa = pagemap_span(a[0]), *sb = pagemap_span(b[0]);
    unsigned a_out = sa->allocated, b_out = sb->allocated;
    unsigned k = append(chain, 0, a, 0, 40);
    k = append(chain, k, b, 0, 3);
    k = append(chain, k, a, 40, 45);
    k = append(chain, k, b, 3, 21);
    assert_int_equal(k, 66);
    (chained ? give_chain : give)(cls, k, chain);
    assert_int_equal(sa->allocated, a_out - 45);
    assert_int_equal(sb->allocated, b_out - 21);
    central_check(cls);
    take_batch(cls, 21, batch);
    for (unsigned i = 0; i < 21; i++)
        assert_ptr_equal(batch[i], b[i]);
    take_batch(cls, 45, chain);
    for (unsigned i = 0; i < 45; i++)
        assert_ptr_equal(chain[i], a[i]);
    central_check(cls);
    give(cls, 21, batch);
    give(cls, 45, chain);
    give(cls, n - 45, a + 45);
    give(cls, n - 21, b + 21);
    central_check(cls);
    free(objs);
}

static void test_central_runs_cross_the_read_groups_whole(void **state)
{
    (void)state;
    runs_cross_the_read_groups_whole(false);
}

static void test_central_chain_runs_cross_the_read_groups_whole(void **state)
{
    (void)state;
    runs_cross_the_read_groups_whole(true);
}

/* Objects given back to their spans and taken again come back exactly as
 * they were written: the central list keeps its free objects in the
 * spans' records and writes none of their bytes (a list linked through
 * them wrote a link into each).  One object of each span stays out, so
 * the spans stay, first on the partial list. */
static void test_central_leaves_free_objects_untouched(void **state)
{
    (void)state;
    unsigned cls = sizeclass_of(64), n = sizeclass_objects(cls), m = 2 * n - 2;
    size_t size = sizeclass_size(cls);
    void **objs = malloc(2 * n * sizeof(void *)), **again = malloc(m * sizeof(void *));
    take_two_fresh_spans(cls, n, objs);
    struct span *sa = pagemap_span(objs[0]), *sb = pagemap_span(objs[n]);
    for (unsigned i = 0; i < 2 * n; i++)
        memset(objs[i], 0xa5, size);
    give(cls, n - 1, objs + 1);
    give(cls, n - 1, objs + n + 1);
    take(cls, m, again);
    for (unsigned i = 0; i < m; i++) {
        struct span *s = pagemap_span(again[i]);
        assert_true(s == sa || s == sb);
        for (size_t b = 0; b < size; b++)
            assert_int_equal(((unsigned char *)again[i])[b], 0xa5);
    }
    give(cls, m, again);
    give(cls, 1, objs);
    give(cls, 1, objs + n);
    central_check(cls);
    free(objs);
    free(again);
}

/* Every class's objects fit a span's free bits, and its objects' index
 * fits the 16-bit counts. */
static void test_central_every_class_fits_the_free_bits(void **state)
{
    (void)state;
    for (unsigned cls = 1; cls < SA_NUM_CLASSES; cls++)
        assert_true(sizeclass_objects(cls) <= 64 * SPAN_FREE_WORDS);
    assert_true(64 * SPAN_FREE_WORDS <= UINT16_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_central_live_owners_get_their_own_spans),
        cmocka_unit_test(test_central_spans_carry_their_owners_tag),
        cmocka_unit_test(test_central_batches_are_distinct_objects_of_the_class),
        cmocka_unit_test(test_central_empty_spans_go_back),
        cmocka_unit_test(test_central_reuses_returned_objects),
        cmocka_unit_test(test_central_fresh_span_goes_out_ascending),
        cmocka_unit_test(test_central_keeps_a_batch_given_back),
        cmocka_unit_test(test_central_last_takers_batch_skips_the_transfer_cache),
        cmocka_unit_test(test_central_decay_gives_back_what_sits_unused),
        cmocka_unit_test(test_central_transfer_cache_is_capped),
        cmocka_unit_test(test_central_owned_classes_keep_no_transfer_cache),
        cmocka_unit_test(test_central_big_classes_keep_one_batch),
        cmocka_unit_test(test_central_batch_takes_lowest_free_objects_first),
        cmocka_unit_test(test_central_runs_of_one_span_go_back_whole),
        cmocka_unit_test(test_central_runs_cross_the_read_groups_whole),
        cmocka_unit_test(test_central_chain_runs_of_one_span_go_back_whole),
        cmocka_unit_test(test_central_chain_runs_cross_the_read_groups_whole),
        cmocka_unit_test(test_central_block_freed_twice_aborts),
        cmocka_unit_test(test_central_leaves_free_objects_untouched),
        cmocka_unit_test(test_central_every_class_fits_the_free_bits),
    };
    return cmocka_run_group_tests_name("central", tests, NULL, NULL);
}
