/*
 * test_profiles.c: what only sampled-on-own-pages allocation can know.
 *
 *   - residency: a workload that touches half of its sampled pages shows
 *     about half of them resident; MADV_DONTNEED on some shows them gone;
 *     an unreadable pagemap still gives a dump, which says so;
 *   - fragmentation: a site that frees 15 of every 16 objects shows about
 *     15/16 of its spans as fragmentation (prof.dump_fragmentation);
 *   - peak: a 200 MiB structure, freed, then a 20 MiB one: the peak profile
 *     shows the first, the current profile the second; with a prof.reset
 *     between them, the peak shows the second; a peak that many threads
 *     reach together, each growing a little, is snapshotted too.
 *
 * Dumps are read as jeprof reads them (scale each record's (n, s) by
 * 1/(1 - exp(-(s/n)/R))); residency comes from salloc's comment lines,
 * which carry unbiased bytes already.  Sites live in their own sections.
 */
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "dump.h"
#include "init.h"
#include "prof.h"
#include "residency.h"
#include "sites.h"
#include "unit.h"

SECTION_BOUNDS(big)
SECTION_BOUNDS(frag)
SECTION_BOUNDS(peak_big)
SECTION_BOUNDS(peak_small)
SECTION_BOUNDS(peak_shared)
SECTION_BOUNDS(peak_mid)

SITE(big) void *site_big(void) { CALL_MALLOC(1 << 20); }
SITE(frag) void *site_frag(void) { CALL_MALLOC(64); }
SITE(peak_big) void *site_peak_big(void) { CALL_MALLOC(8 << 20); }
SITE(peak_small) void *site_peak_small(void) { CALL_MALLOC(64 << 10); }
SITE(peak_shared) void *site_peak_shared(void) { CALL_MALLOC(16 << 10); }
SITE(peak_mid) void *site_peak_mid(void) { CALL_MALLOC(128 << 10); }

struct site_totals {
    double bytes, resident, swapped, frag;
    bool residency_note; /* the "residency unavailable" comment */
};

/* Sums, for records whose first frame is in [lo, hi), jeprof's scaled bytes
 * and salloc's resident/swapped/fragmentation comment values. */
static void read_site(const char *path, const char *lo, const char *hi, struct site_totals *t)
{
    memset(t, 0, sizeof(*t));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192];
    unsigned long long rate = 0;
    assert_non_null(fgets(line, sizeof(line), f));
    assert_int_equal(sscanf(line, "heap_v2/%llu", &rate), 1);
    bool in = false;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long n, s, a, b, first, res, sw, fr;
        if (strstr(line, "residency unavailable"))
            t->residency_note = true;
        if (!strncmp(line, "MAPPED_LIBRARIES:", 17))
            break;
        if (line[0] == '@' && sscanf(line, "@ %llx", &first) == 1)
            in = first >= (uintptr_t)lo && first < (uintptr_t)hi;
        else if (in && sscanf(line, "  t*: %llu: %llu [%llu: %llu]", &n, &s, &a, &b) == 4 && n)
            t->bytes += s / -expm1(-((double)s / n) / (double)rate);
        else if (in && sscanf(line, "# salloc: resident %llu swapped %llu fragmentation %llu",
                              &res, &sw, &fr) == 3) {
            t->resident += res;
            t->swapped += sw;
            t->frag += fr;
        }
    }
    fclose(f);
}

static char path[256];

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof(path), "/tmp/salloc_test_profiles.%d.heap", (int)getpid());
    void *volatile warm = malloc(1); /* set salloc up before the tests change it */
    free(warm);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void test_profiles_residency_half_touched_then_dropped(void **state)
{
    (void)state;
    enum { N = 40, MIB = 1 << 20 };
    char *objs[N];
    prof_reset(14); /* R = 16 KiB: every 1 MiB allocation is sampled */
    for (int i = 0; i < N; i++) {
        objs[i] = site_big();
        memset(objs[i], 1, MIB / 2); /* touch half of its pages */
    }
    struct site_totals t;
    assert_int_equal(prof_dump(path), 0);
    read_site(path, __start_sec_big, __stop_sec_big, &t);
    fprintf(stderr, "# half touched: bytes %.0f resident %.0f (expect %d)\n", t.bytes, t.resident,
            N * MIB / 2);
    assert_true(fabs(t.bytes - N * MIB) < 0.01 * N * MIB);
    assert_true(fabs(t.resident - N * MIB / 2) < 0.05 * N * MIB / 2);
    assert_true(t.swapped == 0);

    /* Drop a quarter of each object's pages: they are gone. */
    for (int i = 0; i < N; i++)
        madvise(objs[i], MIB / 4, MADV_DONTNEED);
    assert_int_equal(prof_dump(path), 0);
    read_site(path, __start_sec_big, __stop_sec_big, &t);
    fprintf(stderr, "# after MADV_DONTNEED: resident %.0f (expect %d)\n", t.resident, N * MIB / 4);
    assert_true(fabs(t.resident - N * MIB / 4) < 0.05 * N * MIB / 4);

    /* No pagemap: the dump still works and says so; prof.residency false. */
    const char *saved = residency_pagemap_path;
    residency_pagemap_path = "/nonexistent/pagemap";
    assert_false(prof_residency());
    assert_int_equal(prof_dump(path), 0);
    read_site(path, __start_sec_big, __stop_sec_big, &t);
    assert_true(t.residency_note);
    assert_true(t.bytes > 0.99 * N * MIB && t.resident == 0);
    residency_pagemap_path = saved;
    assert_true(prof_residency());
    for (int i = 0; i < N; i++)
        free(objs[i]);
}

/* Residency counts an object's own bytes, not its whole page: touched
 * 32-byte objects are exactly as resident as they are live. */
static void test_profiles_residency_of_small_objects(void **state)
{
    (void)state;
    enum { N = 20000 };
    static void *objs[N];
    prof_reset(10);
    for (int i = 0; i < N; i++) {
        objs[i] = site_frag();
        memset(objs[i], 7, 64);
    }
    struct site_totals t;
    assert_int_equal(prof_dump(path), 0);
    read_site(path, __start_sec_frag, __stop_sec_frag, &t);
    fprintf(stderr, "# small objects: bytes %.0f resident %.0f\n", t.bytes, t.resident);
    assert_true(t.bytes > 0);
    assert_true(fabs(t.resident - t.bytes) <= 0.01 * t.bytes);
    for (int i = 0; i < N; i++)
        free(objs[i]);
    prof_reset(19);
}

static void test_profiles_fragmentation_fifteen_of_sixteen_freed(void **state)
{
    (void)state;
    enum { N = 1 << 16 };
    static void *objs[N];
    prof_reset(6); /* R = 64 bytes: p(64) = 0.63, thousands of samples */
    for (int i = 0; i < N; i++)
        objs[i] = site_frag();
    for (int i = 0; i < N; i++)
        if (i % 16) {
            free(objs[i]);
            objs[i] = NULL;
        }
    tcache_flush_all(init_current_cache()); /* freed objects back in their spans */
    assert_int_equal(prof_dump_fragmentation(path), 0);
    struct site_totals t;
    read_site(path, __start_sec_frag, __stop_sec_frag, &t);
    /* Each 8 KiB span of 128 objects keeps 8 live: 15/16 of it is free. */
    double spans = N * 64.0, expect = spans * 15 / 16;
    fprintf(stderr, "# fragmentation: %.0f of %.0f span bytes (expect %.0f)\n", t.bytes, spans,
            expect);
    assert_true(fabs(t.bytes - expect) < 0.1 * expect);
    for (int i = 0; i < N; i += 16)
        free(objs[i]);
    prof_reset(19);
}

enum { BIG = 25, SMALL = 320 }; /* 25 x 8 MiB, 320 x 64 KiB = 20 MiB */

/* The peak tests' 200 MiB structure, built and freed, at R = 64 KiB. */
static void big_structure_built_and_freed(void)
{
    static void *big[BIG];
    prof_reset(16);
    for (int i = 0; i < BIG; i++)
        big[i] = site_peak_big();
    for (int i = 0; i < BIG; i++)
        free(big[i]);
}

static void test_profiles_peak_shows_the_big_structure(void **state)
{
    (void)state;
    static void *small[SMALL];
    big_structure_built_and_freed();
    for (int i = 0; i < SMALL; i++)
        small[i] = site_peak_small();
    /* The snapshot's buffer is mapped metadata (stats.metadata counts it). */
    assert_true(prof_peak_buffer_bytes() >= BIG / 2 * sizeof(struct dump_entry));
    struct site_totals pb, ps, cb, cs;
    assert_int_equal(prof_dump_peak(path), 0);
    read_site(path, __start_sec_peak_big, __stop_sec_peak_big, &pb);
    read_site(path, __start_sec_peak_small, __stop_sec_peak_small, &ps);
    assert_int_equal(prof_dump(path), 0);
    read_site(path, __start_sec_peak_big, __stop_sec_peak_big, &cb);
    read_site(path, __start_sec_peak_small, __stop_sec_peak_small, &cs);
    fprintf(stderr, "# peak: big %.1f MiB small %.1f MiB; now: big %.1f MiB small %.1f MiB\n",
            pb.bytes / 1048576, ps.bytes / 1048576, cb.bytes / 1048576, cs.bytes / 1048576);
    /* The snapshot is taken each time the heap grows 10%: within 10% of 200. */
    assert_true(pb.bytes >= 0.85 * BIG * (8 << 20) && pb.bytes <= 1.01 * BIG * (8 << 20));
    assert_true(ps.bytes == 0);
    assert_true(cb.bytes == 0);
    assert_true(fabs(cs.bytes - SMALL * 65536.0) < 0.25 * SMALL * 65536.0);
    for (int i = 0; i < SMALL; i++)
        free(small[i]);
    prof_reset(19);
}

/* prof.reset forgets the samples taken before it in the peak too: a 200
 * MiB structure freed, a reset, then a 20 MiB one: the peak profile shows
 * the second only.  (The snapshot and its mark once outlived the reset:
 * the peak showed 200 MiB of forgotten samples, and no new one was taken
 * below that mark.)  The 20 MiB site's estimate: about 200 samples of p =
 * 0.63, 4.3% standard deviation, and a snapshot up to 10% behind the
 * heap: the band below is 9 sd wide on the low side and 7 on the high. */
static void test_profiles_reset_forgets_the_peak(void **state)
{
    (void)state;
    static void *small[SMALL];
    big_structure_built_and_freed();
    prof_reset(16);
    for (int i = 0; i < SMALL; i++)
        small[i] = site_peak_small();
    struct site_totals pb, ps;
    assert_int_equal(prof_dump_peak(path), 0);
    read_site(path, __start_sec_peak_big, __stop_sec_peak_big, &pb);
    read_site(path, __start_sec_peak_small, __stop_sec_peak_small, &ps);
    fprintf(stderr, "# peak after a reset: big %.1f MiB small %.1f MiB\n", pb.bytes / 1048576,
            ps.bytes / 1048576);
    assert_true(pb.bytes == 0);
    assert_true(ps.bytes > 0.5 * SMALL * 65536.0 && ps.bytes < 1.3 * SMALL * 65536.0);
    for (int i = 0; i < SMALL; i++)
        free(small[i]);
    prof_reset(19);
}

/* A peak no thread reaches alone: THREADS threads (a sample shard each)
 * take turns to allocate 16 KiB blocks until together they hold more than
 * the 1 MiB block freed before them, by more than prof_peak_pct.  Each
 * sample reads only its own shard's part of the estimate while that part
 * has grown less than its slack (prof.c, peak_check): a slack not divided
 * among the shards let the parts pass the threshold together unseen, and
 * the peak kept the 1 MiB block. */
enum { THREADS = 8, TURNS = 10 }; /* 80 x 16 KiB = 1.25 MiB */
static void *shared_blocks[THREADS][TURNS];
static unsigned turn; /* atomic: whose turn, round robin */
static pthread_barrier_t all_allocated;

static void *take_turns(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    for (unsigned k = 0; k < TURNS; k++) {
        while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != k * THREADS + id)
            sched_yield();
        shared_blocks[id][k] = site_peak_shared();
        __atomic_store_n(&turn, k * THREADS + id + 1, __ATOMIC_RELEASE);
    }
    pthread_barrier_wait(&all_allocated); /* main dumps the peak */
    pthread_barrier_wait(&all_allocated);
    for (unsigned k = 0; k < TURNS; k++)
        free(shared_blocks[id][k]);
    return NULL;
}

static void test_profiles_peak_reached_by_many_threads_together(void **state)
{
    (void)state;
    prof_reset(0); /* R = 1 byte: every block sampled, weight = its size */
    free(site_big()); /* the first snapshot's mark: 1 MiB */
    turn = 0;
    assert_int_equal(pthread_barrier_init(&all_allocated, NULL, THREADS + 1), 0);
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, take_turns, (void *)(uintptr_t)i), 0);
    pthread_barrier_wait(&all_allocated);
    struct site_totals big, shared;
    assert_int_equal(prof_dump_peak(path), 0);
    read_site(path, __start_sec_big, __stop_sec_big, &big);
    read_site(path, __start_sec_peak_shared, __stop_sec_peak_shared, &shared);
    pthread_barrier_wait(&all_allocated);
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&all_allocated);
    fprintf(stderr, "# peak of %d threads together: 1 MiB block %.0f KiB, theirs %.0f KiB\n",
            THREADS, big.bytes / 1024, shared.bytes / 1024);
    /* Taken once they held 10% over the 1 MiB block (and the little else
     * sampled then): more than the block, 1.25 MiB at most. */
    assert_true(big.bytes == 0);
    assert_true(shared.bytes > (1 << 20) && shared.bytes <= THREADS * TURNS * 16384.0);
    prof_reset(19);
}

/* prof.reset while another thread samples: the reset zeroes the weight of
 * every live sample under its shard's lock, so nothing reads a sample's
 * weight outside that lock.  The peak check once took the new sample's
 * weight from its record after the lock was let go: a data race with the
 * reset that make test-tsan reports (here nothing else can fail). */
enum { RESET_ROUNDS = 2000, RESET_LIVE = 8 };
static unsigned resets_left; /* atomic */

static void *sample_while_resetting(void *arg)
{
    (void)arg;
    void *live[RESET_LIVE];
    while (__atomic_load_n(&resets_left, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < RESET_LIVE; i++)
            live[i] = site_frag();
        for (int i = 0; i < RESET_LIVE; i++)
            free(live[i]);
    }
    return NULL;
}

static void test_profiles_reset_while_another_thread_samples(void **state)
{
    (void)state;
    prof_reset(0); /* R = 1 byte: every block sampled */
    __atomic_store_n(&resets_left, RESET_ROUNDS, __ATOMIC_RELEASE);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, sample_while_resetting, NULL), 0);
    while (__atomic_load_n(&resets_left, __ATOMIC_ACQUIRE)) {
        prof_reset(0);
        __atomic_sub_fetch(&resets_left, 1, __ATOMIC_RELEASE);
    }
    pthread_join(t, NULL);
    prof_reset(19);
}

/* A peak passed by a thread whose part of the estimate is still within
 * the slack, after another thread's part grew past it: a 1 MiB block
 * (the mark) freed; another thread (another shard) takes a 128 KiB block,
 * more than the slack (a sixteenth of the 10% room) and more than a
 * sixteenth of the room left, so its sum sets no new slack; then the 1 MiB
 * block again, its own part back where the last full check read it.
 * Together 1.125 MiB, over the 1.1 MiB threshold: the peak must show both.
 * The 128 KiB sample once left the old slack standing, and the 1 MiB one,
 * within it, summed nothing: the peak kept the first block alone. */
static pthread_barrier_t mid_step;
static void *mid_block;

static void *hold_mid(void *arg)
{
    (void)arg;
    mid_block = site_peak_mid();
    pthread_barrier_wait(&mid_step); /* main takes the 1 MiB block again */
    pthread_barrier_wait(&mid_step); /* and dumps the peak */
    free(mid_block);
    return NULL;
}

static void test_profiles_peak_past_another_shards_grown_part(void **state)
{
    (void)state;
    prof_reset(0); /* R = 1 byte: every block sampled, weight = its size */
    free(site_big()); /* the first snapshot's mark: 1 MiB */
    assert_int_equal(pthread_barrier_init(&mid_step, NULL, 2), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_mid, NULL), 0);
    pthread_barrier_wait(&mid_step);
    void *big = site_big();
    struct site_totals b, m;
    assert_int_equal(prof_dump_peak(path), 0);
    read_site(path, __start_sec_big, __stop_sec_big, &b);
    read_site(path, __start_sec_peak_mid, __stop_sec_peak_mid, &m);
    pthread_barrier_wait(&mid_step);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&mid_step);
    free(big);
    fprintf(stderr, "# peak past another shard's grown part: 1 MiB %.0f KiB, 128 KiB %.0f KiB\n",
            b.bytes / 1024, m.bytes / 1024);
    assert_true(m.bytes > 0.99 * (128 << 10) && m.bytes < 1.01 * (128 << 10));
    assert_true(b.bytes > 0.99 * (1 << 20) && b.bytes < 1.01 * (1 << 20));
    prof_reset(19);
}

/* A sampled large block in a chunk asked to have huge pages (opt.thp), grown
 * in place by realloc: the pages it gains keep small pages too, as its
 * first ones do, so its residency is read per page.  They once kept the
 * chunk's advice.  Shrunk or freed, the pages it lets go take the chunk's
 * advice back. */
enum { MIB = 1 << 20, KEEP = 1024 };
static char *held[KEEP];
static size_t nheld;
static char saved_thp[sizeof(opt_thp)];

/* Under opt.thp "always", unsampled 1 MiB blocks held until one needs a
 * new chunk, asked to have huge pages: that block is the chunk's first,
 * and its span the only free one of 1 MiB once it is freed.  Then every
 * allocation is sampled (R = 1 byte), from that chunk.  Undone by
 * advised_chunk_end(). */
static void advised_chunk_begin(void)
{
    strcpy(saved_thp, opt_thp);
    strcpy(opt_thp, "always"); /* chunks mapped from now on ask for huge pages */
    prof_thread_active_set(false);
    size_t mapped = pageheap_mapped_bytes();
    nheld = 0;
    while (nheld < KEEP && pageheap_mapped_bytes() == mapped)
        held[nheld++] = malloc(MIB);
    assert_true(pageheap_mapped_bytes() > mapped);
    free(held[--nheld]);
    prof_thread_active_set(true);
    prof_reset(0);
}

static void advised_chunk_end(void)
{
    while (nheld)
        free(held[--nheld]);
    strcpy(opt_thp, saved_thp);
    prof_reset(19);
}

static void test_profiles_grown_sample_keeps_small_pages(void **state)
{
    (void)state;
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0)
        skip(); /* no such flags without transparent huge pages */
    advised_chunk_begin();
    char *p = malloc(MIB);
    assert_true(prof_is_sampled(p));
    assert_true(unit_vm_flag((uintptr_t)p, "nh"));
    char *q = realloc(p, 2 * MIB);
    assert_ptr_equal(q, p); /* grown in place: the chunk's rest is free */
    assert_true(prof_is_sampled(q));
    assert_true(unit_vm_flag((uintptr_t)q + MIB + MIB / 2, "nh"));
    /* Shrunk in place: the pages it gives back ask for huge pages again,
     * as their chunk does; its own stay small while it is sampled. */
    char *r = realloc(q, MIB);
    assert_ptr_equal(r, q);
    assert_true(prof_is_sampled(r));
    assert_true(unit_vm_flag((uintptr_t)r, "nh"));
    assert_true(unit_vm_flag((uintptr_t)r + MIB + MIB / 2, "hg"));
    assert_false(unit_vm_flag((uintptr_t)r + MIB + MIB / 2, "nh"));
    /* Freed: all of it asks again.  It once kept small pages for good. */
    free(r);
    assert_true(unit_vm_flag((uintptr_t)r, "hg"));
    assert_false(unit_vm_flag((uintptr_t)r, "nh"));
    advised_chunk_end();
}

/* Each sampled large span kept on small pages splits its chunk's kernel
 * mapping: past pageheap_small_pages_max such spans, samples stay on the
 * chunk's pages (sampled all the same), so that live samples cannot use
 * up vm.max_map_count; freed, they give their room back. */
static void test_profiles_small_pages_capped(void **state)
{
    (void)state;
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0)
        skip();
    advised_chunk_begin();
    size_t saved = pageheap_small_pages_max, marked = pageheap_small_pages_spans();
    pageheap_small_pages_max = marked + 2;
    char *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = malloc(MIB / 2);
        assert_true(prof_is_sampled(p[i]));
        /* Marked while there is room (the others' pages may be "nh" anyway,
         * as a chunk purged under opt.thp "auto" is). */
        assert_int_equal(pageheap_small_pages_spans(), marked + (i < 2 ? i + 1 : 2));
        if (i < 2)
            assert_true(unit_vm_flag((uintptr_t)p[i], "nh"));
    }
    assert_int_equal(pageheap_small_pages_spans(), marked + 2);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    assert_int_equal(pageheap_small_pages_spans(), marked);
    pageheap_small_pages_max = saved;
    advised_chunk_end();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiles_residency_half_touched_then_dropped),
        cmocka_unit_test(test_profiles_residency_of_small_objects),
        cmocka_unit_test(test_profiles_fragmentation_fifteen_of_sixteen_freed),
        cmocka_unit_test(test_profiles_peak_shows_the_big_structure),
        cmocka_unit_test(test_profiles_reset_forgets_the_peak),
        cmocka_unit_test(test_profiles_peak_reached_by_many_threads_together),
        cmocka_unit_test(test_profiles_reset_while_another_thread_samples),
        cmocka_unit_test(test_profiles_peak_past_another_shards_grown_part),
        cmocka_unit_test(test_profiles_grown_sample_keeps_small_pages),
        cmocka_unit_test(test_profiles_small_pages_capped),
    };
    return cmocka_run_group_tests_name("profiles", tests, setup, teardown);
}
