/*
 * test_pageheap.c: spans: alignment, split, coalesce, purge and decay,
 * out-of-memory, the cache of recent spans, and the heap's invariants
 * after each.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"

#include "conf.h"
#include "meta.h"

static int check_after(void **state)
{
    (void)state;
    pageheap_check();
    return 0;
}

/* The free span that contains address `a`, found through the pagemap ends:
 * walks back page by page to the record that covers `a`. */
static struct span *free_span_covering(uintptr_t a)
{
    for (uintptr_t p = a;; p -= SA_PAGE_SIZE) {
        struct span *s = pagemap_span((void *)p);
        if (s && s->state == SPAN_FREE && s->start <= a && a < span_end(s))
            return s;
        if (s && s->state != SPAN_FREE && s->start <= a && a < span_end(s))
            return NULL;
    }
}

/* Grows `s` in place to `npages`, which leaves a free span of at least
 * `rest` pages right after it. */
static void grow_leaving_free_rest(struct span *s, size_t npages, size_t rest)
{
    assert_true(pageheap_grow_in_place(s, npages));
    assert_int_equal(s->npages, npages);
    struct span *after = free_span_covering(span_end(s));
    assert_non_null(after);
    assert_int_equal(after->start, span_end(s));
    assert_true(after->npages >= rest);
}

static void test_pageheap_alignment_up_to_1gib(void **state)
{
    (void)state;
    for (size_t align_pages = 1; align_pages <= ((size_t)1 << 30) / SA_PAGE_SIZE; align_pages *= 4) {
        struct span *s = pageheap_alloc(3, align_pages, 0, NULL);
        assert_non_null(s);
        assert_int_equal(s->start % (align_pages * SA_PAGE_SIZE), 0);
        assert_int_equal(s->npages, 3);
        memset((void *)s->start, 0xab, 3 * SA_PAGE_SIZE);
        pageheap_free(s);
    }
}

/* Growing a span in place splits the free span after it. */
static void test_pageheap_split_leaves_remainder_free(void **state)
{
    (void)state;
    struct span *s = pageheap_alloc(200, 1, 0, NULL);
    assert_non_null(s);
    pageheap_shrink(s, 50);
    assert_int_equal(s->npages, 50);
    struct span *tail = free_span_covering(span_end(s));
    assert_non_null(tail);
    assert_int_equal(tail->start, span_end(s));
    assert_true(tail->npages >= 150);

    grow_leaving_free_rest(s, 120, 80);
    pageheap_check();
    pageheap_free(s);
}

/* Freeing a span next to a free one merges them. */
static void test_pageheap_coalesces_neighbours(void **state)
{
    (void)state;
    struct span *s = pageheap_alloc(300, 1, 0, NULL);
    assert_non_null(s);
    uintptr_t start = s->start, end = span_end(s);
    pageheap_shrink(s, 100); /* pages 100..299 become free */
    pageheap_free(s);        /* pages 0..99 join them */
    struct span *f = free_span_covering(start);
    assert_non_null(f);
    assert_true(f->start <= start && span_end(f) >= end);
}

/* A free neighbour is maximal (coalesced), so growing past it must fail
 * and growing exactly to its end must succeed. */
static void test_pageheap_grow_in_place_stops_at_free_neighbour(void **state)
{
    (void)state;
    struct span *a = pageheap_alloc(64, 1, 0, NULL);
    assert_non_null(a);
    pageheap_shrink(a, 32);
    struct span *f = free_span_covering(span_end(a));
    assert_non_null(f);
    size_t room = f->npages;
    assert_false(pageheap_grow_in_place(a, 32 + room + 1));
    assert_int_equal(a->npages, 32);
    assert_true(pageheap_grow_in_place(a, 32 + room));
    assert_int_equal(a->npages, 32 + room);
    pageheap_free(a);
}

static void test_pageheap_purge_releases_everything_dirty(void **state)
{
    (void)state;
    struct pageheap_stats st;
    struct span *s = pageheap_alloc(2048, 1, 0, NULL); /* 16 MiB */
    assert_non_null(s);
    memset((void *)s->start, 1, 2048 * SA_PAGE_SIZE);
    pageheap_free(s);
    pageheap_get_stats(&st);
    assert_true(st.free_dirty >= 2048 * SA_PAGE_SIZE);
    assert_true(pageheap_purge() >= 2048 * SA_PAGE_SIZE);
    pageheap_get_stats(&st);
    assert_int_equal(st.free_dirty, 0);
    /* The memory reads back as zero and is handed out as known-zero. */
    bool zeroed = false;
    s = pageheap_alloc(2048, 1, 0, &zeroed);
    assert_true(zeroed);
    for (size_t i = 0; i < 2048 * SA_PAGE_SIZE; i += 4096)
        assert_int_equal(((char *)s->start)[i], 0);
    pageheap_free(s);
}

static void test_pageheap_decay(void **state)
{
    (void)state;
    struct pageheap_stats st;
    long saved = pageheap_decay_ms();

    pageheap_set_decay_ms(0); /* purge at once */
    pageheap_purge();
    struct span *s = pageheap_alloc(100, 1, 0, NULL);
    memset((void *)s->start, 1, 100 * SA_PAGE_SIZE);
    pageheap_free(s);
    pageheap_get_stats(&st);
    assert_int_equal(st.free_dirty, 0);

    /* 200 ms: nothing between the frees and the stats below decays
     * (microseconds apart), even on a loaded machine. */
    pageheap_set_decay_ms(200);
    s = pageheap_alloc(100, 1, 0, NULL);
    memset((void *)s->start, 1, 100 * SA_PAGE_SIZE);
    pageheap_free(s);
    /* A short span waits in the recent cache: decay reaches it too. */
    struct span *r = pageheap_alloc(2, 1, 0, NULL);
    memset((void *)r->start, 1, 2 * SA_PAGE_SIZE);
    pageheap_free(r);
    pageheap_get_stats(&st);
    assert_true(st.free_dirty >= 100 * SA_PAGE_SIZE); /* r may be cut from s */
    assert_true(st.recent >= 2 * SA_PAGE_SIZE);
    struct timespec nap = {0, 500 * 1000 * 1000};
    nanosleep(&nap, NULL);
    pageheap_free(pageheap_alloc(1, 1, 0, NULL)); /* any heap activity decays */
    pageheap_get_stats(&st);
    assert_true(st.free_dirty <= 2 * SA_PAGE_SIZE);

    pageheap_set_decay_ms(saved);
}

/* A span of a chunk mapped for it: 64 MiB spans are taken until the heap
 * maps more (earlier tests leave free chunks behind); the others are
 * given back. */
static struct span *span_of_new_chunk(void)
{
    enum { PAGES = (64 << 20) / SA_PAGE_SIZE, TRIES = 64 };
    struct span *taken[TRIES], *fresh = NULL;
    unsigned n = 0;
    while (!fresh && n < TRIES) {
        size_t mapped = pageheap_mapped_bytes();
        struct span *s = pageheap_alloc(PAGES, 1, 0, NULL);
        assert_non_null(s);
        if (pageheap_mapped_bytes() > mapped)
            fresh = s;
        else
            taken[n++] = s;
    }
    assert_non_null(fresh);
    while (n)
        pageheap_free(taken[--n]);
    return fresh;
}

/* opt.thp: under "auto" the heap's first 64 MiB keep small pages and
 * chunks mapped beyond them ask for huge pages, until a purge in one turns
 * it back (so khugepaged does not fill in what was purged); "always" asks
 * for every chunk, "never" refuses them, "default" (the default) leaves the
 * system's setting. */
static void test_pageheap_transparent_huge_pages(void **state)
{
    (void)state;
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0)
        skip(); /* a kernel without transparent huge pages has no such flags */
    assert_string_equal(opt_thp, "default");
    strcpy(opt_thp, "auto"); /* chunks mapped from now on */
    void *early = malloc(16); /* from the first chunk, never purged yet */
    assert_false(unit_vm_flag((uintptr_t)early, "hg"));
    free(early);
    long saved = pageheap_decay_ms();
    pageheap_set_decay_ms(-1); /* purged only when asked */

    assert_true(pageheap_mapped_bytes() < (size_t)64 << 20); /* the first chunk */
    struct span *second = span_of_new_chunk(); /* mapped with less than 64 MiB before it */
    assert_false(unit_vm_flag(second->start, "hg"));
    assert_false(pageheap_hugepages_advised());
    struct span *s = span_of_new_chunk(); /* beyond 64 MiB */
    assert_true(pageheap_hugepages_advised());
    assert_true(unit_vm_flag(s->start, "hg"));
    pageheap_free(second);
    pageheap_free(s);
    pageheap_purge();
    assert_false(unit_vm_flag(s->start, "hg"));
    assert_true(unit_vm_flag(s->start, "nh"));

    const struct {
        const char *mode;
        bool hg, nh;
    } modes[] = {{"always", true, false}, {"never", false, true}, {"default", false, false}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        strcpy(opt_thp, modes[i].mode);
        s = span_of_new_chunk();
        assert_int_equal(unit_vm_flag(s->start, "hg"), modes[i].hg);
        assert_int_equal(unit_vm_flag(s->start, "nh"), modes[i].nh);
        pageheap_free(s);
    }
    strcpy(opt_thp, "default");
    pageheap_set_decay_ms(saved);
}

/* Every free span clean, the recent cache empty, and no decay look due
 * (one would file the cache), for a test of the cache. */
static void quiet_heap(void)
{
    pageheap_purge();
    pageheap_decay_now();
}

/* Pages freed long ago keep their time when a span freed next to them
 * merges with them: a span taken from their start and given back again
 * and again once made them look freed just now, every time, and they were
 * never purged.  Here 1000 dirty pages wait 150 ms, the 100 before them
 * are freed, and 100 ms later (250 ms after the 1000, decay 200 ms) the
 * next look purges them all. */
static void test_pageheap_old_dirty_pages_keep_their_time_when_merged(void **state)
{
    (void)state;
    long saved = pageheap_decay_ms();
    quiet_heap(); /* every free span clean: none merges with the span's pages */
    pageheap_set_decay_ms(200);
    struct span *s = pageheap_alloc(1100, 1, 0, NULL);
    assert_non_null(s);
    memset((void *)s->start, 1, 1100 * SA_PAGE_SIZE);
    assert_true(pageheap_shrink(s, 100)); /* its last 1000 pages: dirty, free */
    struct pageheap_stats st;
    pageheap_get_stats(&st);
    assert_true(st.free_dirty >= 1000 * SA_PAGE_SIZE);
    struct timespec nap = {0, 150 * 1000 * 1000};
    nanosleep(&nap, NULL);
    pageheap_free(s); /* merged with them */
    nap.tv_nsec = 100 * 1000 * 1000;
    nanosleep(&nap, NULL);
    pageheap_free(pageheap_alloc(1, 1, 0, NULL)); /* any heap activity decays */
    pageheap_get_stats(&st);
    assert_true(st.free_dirty <= 2 * SA_PAGE_SIZE);
    pageheap_set_decay_ms(saved);
}

/* What is left of an old dirty span a run was cut from keeps its time:
 * filed at the LRU's tail, behind a younger dirty span, it took that
 * span's time, and a buffer cut from it again and again kept it resident
 * for good.  Here 1100 dirty pages wait 150 ms, 50 are freed elsewhere, a
 * run of 1098 is cut from the 1100, and 100 ms later (250 ms after the
 * 1100, decay 200 ms) a decay pass purges the 2 left. */
static void test_pageheap_old_dirty_pages_keep_their_time_when_cut(void **state)
{
    (void)state;
    enum { TRIES = 64 };
    long saved = pageheap_decay_ms();
    quiet_heap();
    pageheap_set_decay_ms(200);
    struct span *young = pageheap_alloc(50, 1, 0, NULL), *s = pageheap_alloc(1200, 1, 0, NULL);
    assert_non_null(young);
    assert_non_null(s);
    memset((void *)young->start, 1, 50 * SA_PAGE_SIZE);
    memset((void *)s->start, 1, 1200 * SA_PAGE_SIZE);
    uintptr_t old_start = s->start + 100 * SA_PAGE_SIZE, old_end = span_end(s);
    assert_true(pageheap_shrink(s, 100)); /* pages 100..1199: dirty, free */
    struct timespec nap = {0, 150 * 1000 * 1000};
    nanosleep(&nap, NULL);
    pageheap_free(young); /* the LRU's tail: younger */
    /* The run from the old pages: the best fit, unless a clean span of
     * 1098 or 1099 pages is about (held meanwhile). */
    struct span *held[TRIES], *run = NULL;
    unsigned n = 0;
    while (n < TRIES && (run = pageheap_alloc(1098, 1, 0, NULL)) && run->start != old_start)
        held[n++] = run;
    assert_non_null(run);
    assert_int_equal(run->start, old_start);
    nap.tv_nsec = 100 * 1000 * 1000;
    nanosleep(&nap, NULL);
    pageheap_decay_now();
    struct span *left = free_span_covering(old_end - SA_PAGE_SIZE);
    assert_non_null(left);
    assert_false(left->dirty);
    pageheap_free(run);
    while (n)
        pageheap_free(held[--n]);
    pageheap_free(s);
    pageheap_set_decay_ms(saved);
}

/* From a quiet heap: a span of 8 pages shrunk to 4, its last 4 pages freed
 * (a recent span). */
static struct span *four_pages_and_a_recent_tail(void)
{
    quiet_heap();
    struct span *s = pageheap_alloc(8, 1, 0, NULL);
    assert_non_null(s);
    pageheap_shrink(s, 4);
    return s;
}

/* A span of a few pages, freed, waits unmerged in the recent cache and is
 * the next of its length handed out; a purge merges and purges it. */
static void test_pageheap_recent_spans_come_back_unmerged(void **state)
{
    (void)state;
    struct pageheap_stats st;
    struct span *s = four_pages_and_a_recent_tail();
    uintptr_t start = s->start;
    pageheap_free(s); /* pages 0..3 freed next to pages 4..7 */
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 8 * SA_PAGE_SIZE);
    assert_true(st.free_dirty >= 8 * SA_PAGE_SIZE);
    struct span *f = free_span_covering(start);
    assert_non_null(f);
    assert_int_equal(f->start, start);
    assert_int_equal(f->npages, 4); /* not merged with pages 4..7 */

    struct span *a = pageheap_alloc(4, 1, 0, NULL), *b = pageheap_alloc(4, 1, 0, NULL);
    assert_int_equal(a->start, start); /* the last freed first */
    assert_int_equal(b->start, start + 4 * SA_PAGE_SIZE);
    struct span *c = pageheap_alloc(4, 1, 0, NULL); /* the cache is empty: from the lists */
    pageheap_free(c);
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 4 * SA_PAGE_SIZE); /* c's */
    pageheap_check();

    pageheap_free(b);
    pageheap_free(a);
    pageheap_purge();
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 0);
    assert_int_equal(st.free_dirty, 0);
    f = free_span_covering(start);
    assert_non_null(f);
    assert_true(f->start <= start && span_end(f) >= start + 8 * SA_PAGE_SIZE); /* merged */
}

/* The heap takes no clean pages while the cache holds dirty ones: it
 * files them first, merged, where the search can find them. */
static void test_pageheap_recent_spans_go_first_to_the_lists(void **state)
{
    (void)state;
    struct pageheap_stats st;
    quiet_heap();
    struct span *s = pageheap_alloc(3, 1, 0, NULL);
    memset((void *)s->start, 1, 3 * SA_PAGE_SIZE);
    pageheap_free(s);
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 3 * SA_PAGE_SIZE);
    struct span *t = pageheap_alloc(5, 1, 0, NULL); /* no dirty span fits */
    assert_non_null(t);
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 0);
    assert_int_equal(st.free_dirty, 3 * SA_PAGE_SIZE);
    pageheap_free(t);
}

/* Growing in place takes a recent span after the allocation, and files
 * what it leaves of it merged with whatever free span follows. */
static void test_pageheap_grow_in_place_into_recent_span(void **state)
{
    (void)state;
    struct pageheap_stats st;
    struct span *s = four_pages_and_a_recent_tail();
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 4 * SA_PAGE_SIZE);
    grow_leaving_free_rest(s, 6, 2);
    pageheap_get_stats(&st);
    assert_int_equal(st.recent, 0);
    pageheap_check();
    pageheap_free(s);
}

static void *failing_mmap(void *a, size_t l, int p, int f, int fd, off_t o)
{
    (void)a, (void)l, (void)p, (void)f, (void)fd, (void)o;
    errno = ENOMEM;
    return MAP_FAILED;
}

static void test_pageheap_out_of_memory(void **state)
{
    (void)state;
    errno = 0;
    assert_null(pageheap_alloc(PAGEHEAP_MAX_PAGES + 1, 1, 0, NULL));
    assert_int_equal(errno, ENOMEM);
    assert_null(pageheap_alloc(1, PAGEHEAP_MAX_PAGES + 1, 0, NULL));

    /* The kernel says no: nothing changes, and the heap works afterwards. */
    struct pageheap_stats before, after;
    pageheap_get_stats(&before);
    os_syscalls.mmap = failing_mmap;
    errno = 0;
    struct span *s = pageheap_alloc(1 << 16, 1, 0, NULL); /* 512 MiB: needs a new chunk */
    os_syscalls.mmap = mmap;
    assert_null(s);
    assert_int_equal(errno, ENOMEM);
    pageheap_get_stats(&after);
    assert_int_equal(before.mapped, after.mapped);
    pageheap_check();
    s = pageheap_alloc(1 << 16, 1, 0, NULL);
    assert_non_null(s);
    pageheap_free(s);
}

/* A small span's record has room for its class's free bits (span.h).
 * Pages whose free span had a short record, cut for a class of more than
 * 64 objects, get a longer record in its place, which the pagemap shows; a
 * class of 64 objects or fewer makes no longer record. */
#define RECORD_TEST_SPANS 300
static void test_pageheap_small_spans_get_records_their_bits_fit(void **state)
{
    (void)state;
    static struct span *held[RECORD_TEST_SPANS];
    assert_int_equal(span_record_bytes(SPAN_RECORD_SHORT), 64);
    assert_int_equal(span_record_bytes(SPAN_RECORD_MEDIUM), 128);
    assert_int_equal(span_record_bytes(SPAN_RECORD_LONG), 192);
    unsigned short_cls = sizeclass_of(256);                  /* 32 objects a span */
    unsigned longer[] = {sizeclass_of(16), sizeclass_of(8)}; /* 512 and 1,024 */
    assert_int_equal(span_record_kind_for(sizeclass_objects(short_cls)), SPAN_RECORD_SHORT);
    assert_int_equal(span_record_kind_for(sizeclass_objects(longer[0])), SPAN_RECORD_MEDIUM);
    assert_int_equal(span_record_kind_for(sizeclass_objects(longer[1])), SPAN_RECORD_LONG);

    struct pageheap_stats before, after;
    pageheap_get_stats(&before);
    for (size_t i = 0; i < RECORD_TEST_SPANS; i++)
        assert_non_null(held[i] = pageheap_alloc(1, 1, short_cls, NULL));
    pageheap_get_stats(&after);
    assert_int_equal(after.records[SPAN_RECORD_MEDIUM], before.records[SPAN_RECORD_MEDIUM]);
    assert_int_equal(after.records[SPAN_RECORD_LONG], before.records[SPAN_RECORD_LONG]);
    for (size_t i = 0; i < RECORD_TEST_SPANS; i++)
        pageheap_free(held[i]);

    /* The same pages (the freshest free ones), cut for the longer classes. */
    for (size_t k = 0; k < 2; k++) {
        unsigned cls = longer[k], nobjs = sizeclass_objects(cls);
        assert_int_equal(sizeclass_pages(cls), 1);
        for (size_t i = 0; i < RECORD_TEST_SPANS; i++) {
            struct span *s = held[i] = pageheap_alloc(1, 1, cls, NULL);
            assert_non_null(s);
            assert_true(s->record_kind >= span_record_kind_for(nobjs));
            assert_int_equal(s->state, SPAN_SMALL);
            assert_ptr_equal(pagemap_span((void *)s->start), s);
            uint64_t *bits = span_free_bits(s); /* every word the class has */
            for (unsigned w = 0; w < span_free_words(nobjs); w++)
                bits[w] = ~(uint64_t)0;
        }
        pageheap_check();
        for (size_t i = 0; i < RECORD_TEST_SPANS; i++)
            pageheap_free(held[i]);
    }
    pageheap_get_stats(&after);
    assert_true(after.records[SPAN_RECORD_LONG] <= before.records[SPAN_RECORD_LONG] +
                                                       RECORD_TEST_SPANS);
}

/* No long record to be had (the metadata chunk spent, mmap refused, the
 * spares taken): a span for the class that needs one is refused with
 * ENOMEM, and its pages are free again, every page counted.  The free
 * spans it is cut from are single pages between live ones, more of them
 * than long records were ever made, so that no split (which needs a short
 * record) can be what fails. */
static void test_pageheap_small_span_without_a_long_record(void **state)
{
    (void)state;
    static struct span *large[1 << 15], *small[1 << 14];
    unsigned cls = sizeclass_of(8);
    assert_int_equal(span_record_kind_for(sizeclass_objects(cls)), SPAN_RECORD_LONG);
    struct pageheap_stats st;
    pageheap_get_stats(&st);
    size_t holes = st.records[SPAN_RECORD_LONG] + 8, nsmall = 0;
    assert_true(2 * holes <= sizeof(large) / sizeof(large[0]));
    for (size_t i = 0; i < 2 * holes; i++)
        assert_non_null(large[i] = pageheap_alloc(1, 1, 0, NULL));
    for (size_t i = 0; i < 2 * holes; i += 2)
        pageheap_free(large[i]);
    os_syscalls.mmap = failing_mmap;
    while (meta_alloc(span_record_bytes(SPAN_RECORD_LONG), 64))
        ;
    struct span *s;
    errno = 0;
    while ((s = pageheap_alloc(1, 1, cls, NULL))) {
        assert_true(nsmall < holes);
        assert_int_equal(s->record_kind, SPAN_RECORD_LONG);
        small[nsmall++] = s;
    }
    assert_int_equal(errno, ENOMEM);
    pageheap_get_stats(&st);
    assert_int_equal(st.free_clean + st.free_dirty + st.small + st.large, st.mapped);
    pageheap_check();
    os_syscalls.mmap = mmap;
    assert_non_null(s = pageheap_alloc(1, 1, cls, NULL)); /* metadata again */
    assert_int_equal(s->record_kind, SPAN_RECORD_LONG);
    pageheap_free(s);
    while (nsmall)
        pageheap_free(small[--nsmall]);
    for (size_t i = 1; i < 2 * holes; i += 2)
        pageheap_free(large[i]);
}

/* An aligned allocation that must split its free span when no record for
 * the pieces can be had (the metadata chunk spent, mmap refused): NULL, and
 * every page still counted and on a list.  When the split of the pages
 * before the aligned run failed, they were once filed nowhere. */
static void test_pageheap_aligned_carve_without_records(void **state)
{
    (void)state;
    static struct span *held[1 << 16];
    struct span *big = pageheap_alloc(8192, 1, 0, NULL); /* 64 MiB free afterwards */
    assert_non_null(big);
    pageheap_free(big);
    os_syscalls.mmap = failing_mmap;
    while (meta_alloc(sizeof(struct span), 64)) /* the metadata chunk runs dry */
        ;
    size_t n = 0;
    struct span *s;
    while (n < (1u << 16) && (s = pageheap_alloc(1, 1, 0, NULL))) /* and the spare records */
        held[n++] = s;
    assert_true(n < (1u << 16));
    size_t refused = 0;
    for (size_t align = 2; align <= 4096; align *= 2) {
        s = pageheap_alloc(1, align, 0, NULL);
        if (s)
            held[n++] = s;
        else
            refused++;
        struct pageheap_stats st;
        pageheap_get_stats(&st);
        assert_int_equal(st.free_clean + st.free_dirty + st.small + st.large, st.mapped);
    }
    os_syscalls.mmap = mmap;
    assert_true(refused > 0);
    pageheap_check();
    while (n)
        pageheap_free(held[--n]);
}

/* dirty_decay_ms set while other threads read it without the page heap
 * lock (sampled_pages.c and prof.c read it at every sampled free): it was
 * written with a plain store under the lock, a data race with those reads
 * that make test-tsan reports. */
static int reading, stop_reading;

static void *read_decay_time(void *arg)
{
    long *last = arg;
    do {
        *last = pageheap_decay_ms();
        __atomic_store_n(&reading, 1, __ATOMIC_RELEASE);
    } while (!__atomic_load_n(&stop_reading, __ATOMIC_ACQUIRE));
    return NULL;
}

static void test_pageheap_decay_time_set_while_read(void **state)
{
    (void)state;
    long saved = pageheap_decay_ms(), last = 0;
    pthread_t t;
    __atomic_store_n(&reading, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&stop_reading, 0, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&t, NULL, read_decay_time, &last), 0);
    while (!__atomic_load_n(&reading, __ATOMIC_ACQUIRE)) /* reads while it is set */
        sched_yield();
    for (int i = 0; i < 1000; i++)
        pageheap_set_decay_ms(i % 2 ? 10000 : 5000);
    __atomic_store_n(&stop_reading, 1, __ATOMIC_RELEASE);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(last == 5000 || last == 10000 || last == saved);
    pageheap_set_decay_ms(saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* First: before any purge turns the first chunk's advice. */
        cmocka_unit_test_teardown(test_pageheap_transparent_huge_pages, check_after),
        cmocka_unit_test_teardown(test_pageheap_alignment_up_to_1gib, check_after),
        cmocka_unit_test_teardown(test_pageheap_split_leaves_remainder_free, check_after),
        cmocka_unit_test_teardown(test_pageheap_coalesces_neighbours, check_after),
        cmocka_unit_test_teardown(test_pageheap_grow_in_place_stops_at_free_neighbour, check_after),
        cmocka_unit_test_teardown(test_pageheap_purge_releases_everything_dirty, check_after),
        cmocka_unit_test_teardown(test_pageheap_decay, check_after),
        cmocka_unit_test_teardown(test_pageheap_decay_time_set_while_read, check_after),
        cmocka_unit_test_teardown(test_pageheap_old_dirty_pages_keep_their_time_when_merged,
                                  check_after),
        cmocka_unit_test_teardown(test_pageheap_old_dirty_pages_keep_their_time_when_cut,
                                  check_after),
        cmocka_unit_test_teardown(test_pageheap_recent_spans_come_back_unmerged, check_after),
        cmocka_unit_test_teardown(test_pageheap_recent_spans_go_first_to_the_lists, check_after),
        cmocka_unit_test_teardown(test_pageheap_grow_in_place_into_recent_span, check_after),
        cmocka_unit_test_teardown(test_pageheap_out_of_memory, check_after),
        cmocka_unit_test_teardown(test_pageheap_small_spans_get_records_their_bits_fit,
                                  check_after),
        cmocka_unit_test_teardown(test_pageheap_small_span_without_a_long_record, check_after),
        cmocka_unit_test_teardown(test_pageheap_aligned_carve_without_records, check_after),
    };
    return cmocka_run_group_tests_name("pageheap", tests, NULL, NULL);
}
