/*
 * prof.c: the heap profiler: option values, switches, the records of live
 * sampled allocations, and when dumps happen (see prof.h, sampler.h).
 *
 * A sampled allocation lives alone on its own pages, so its residency can be
 * read exactly.  A small one (up to SA_MAX_SMALL) gets a mapping of its own
 * (whole salloc pages, MADV_NOHUGEPAGE; sampled_pages.c) and holds a proxy
 * object of its class from the ordinary slabs for its lifetime, so class
 * and span statistics stay true; the pagemap marks the mapping as a
 * SPAN_SAMPLED span pointing at its record, which is how free(), realloc()
 * and malloc_usable_size() find it.  A large one is an ordinary large span
 * (its own pages by construction) whose `sample` field points at its
 * record: it is reused, grown in place and decayed like any large block,
 * and realloc() can sample or unsample it where it stands.
 *
 * Locks: live records sit on SAMPLE_SHARDS lists, each under its own lock
 * (LOCK_RANK_SAMPLES; a polled lock, lock.h, whose unlock is a plain
 * store: a sample and its free hold one each, and waiters are rare).  A
 * thread's samples go to its own shard, so threads sampling at once rarely
 * meet, and each shard keeps a freed mapping for its next sample.
 * dump_lock (LOCK_RANK_DUMP) serialises dumps and guards the prefix and
 * the automatic-name counters.  No allocator lock is held while
 * a stack is captured.  Nothing here calls malloc.
 */
#define _GNU_SOURCE /* dladdr */
#include "prof.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h> /* stdout's flush, before prof_leak_error's _exit */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dump.h"
#include "fmath.h"
#include "guard.h"
#include "init.h"
#include "lock.h"
#include "log.h"
#include "meta.h"
#include "os.h"
#include "pageheap.h"
#include "pagemap.h"
#include "prof_recent.h"
#include "sampled_pages.h"
#include "sampler.h"
#include "stack.h"
#include "tcache.h"

/* ---- options (written by conf.c before set-up finishes) ---- */
bool opt_prof = true;
bool opt_prof_active = true;
bool opt_prof_thread_active_init = true;
size_t opt_lg_prof_sample = 19;
char opt_prof_prefix[PROF_PREFIX_MAX] = "salloc";
char opt_prof_format[PROF_CHOICE_MAX] = "heap";
char opt_prof_unwind[PROF_CHOICE_MAX] = "fast";
bool opt_prof_final = false;
bool opt_prof_leak = false;
bool opt_prof_leak_error = false;
bool opt_prof_sys_thread_name = false;
bool opt_prof_accum = false;
ssize_t opt_lg_prof_interval = -1;
bool opt_prof_gdump = false;
size_t opt_prof_peak_pct = 10;
ssize_t opt_prof_recent_alloc_max = 0;
bool opt_prof_final_peak = false;
bool opt_prof_guard = false;
ssize_t opt_lg_prof_guard_every = -1;

/* ---- run-time state ---- */
static bool thread_active_init, gdump; /* prof.active is the sampler's switch */
static uint32_t epoch = 1;       /* prof.reset generation; samples keep theirs */
static uint64_t alloc_total;     /* bytes allocated, as reported at samples */
static uint64_t next_interval;   /* alloc_total at which the next .i dump is due */
static size_t gdump_high;        /* heap size at the last .u dump */
static uint64_t samples_failed;  /* samples that could not be recorded */

/* The peak snapshot: the live samples as they were when live_estimate() last
 * grew by opt_prof_peak_pct over the previous snapshot.  peak_lock
 * (LOCK_RANK_PEAK) guards the buffer, which comes from os_map. */
static sa_lock_t peak_lock = SA_LOCK_INITIALIZER(LOCK_RANK_PEAK);
static struct dump_entry *peak_buf; /* under peak_lock */
static size_t peak_cap, peak_len;   /* under peak_lock; peak_cap read without it
                                     * by prof_peak_buffer_bytes() */
static int64_t peak_mark;           /* live_estimate() at the last snapshot */
static int64_t peak_slack;          /* see peak_check(); atomic */

static sa_lock_t dump_lock = SA_LOCK_INITIALIZER(LOCK_RANK_DUMP);
static char prefix[PROF_PREFIX_MAX];      /* under dump_lock */
static uint64_t seq, mseq, iseq, useq;    /* under dump_lock */

struct sample {
    struct sample *next, *prev;
    void *ptr;          /* the allocation: start of its own mapping, or
                         * further in when guarded (guard.h) */
    size_t usable;      /* Z */
    size_t map_len;     /* bytes mapped for it (whole salloc pages) */
    size_t own_bytes;   /* its own mapping's, guard page included; 0: large */
    uint64_t rate;      /* R its interval was drawn with */
    struct prof_stack *stack;
    void *proxy;        /* small: an object of its class, held for its life */
    struct span *span;  /* large: the heap span it is (NULL: its own mapping) */
    int64_t weight;     /* Z / p(Z), rounded: its share of live_estimate(); 0 once
                         * a reset forgot it (forget_live) */
    uint32_t epoch;
    uint8_t shard;      /* the shard its record belongs to (home) */
    bool guarded;       /* its own mapping ends in an inaccessible page */
    struct prof_stack *free_stack; /* guarded, in quarantine: who freed it */
    struct prof_recent *recent; /* its record among the recent samples; under
                                 * prof_recent.c's lock (prof_recent.h) */
    char thread[32];    /* thread.prof.name when it was taken (pprof label) */
};

#define SAMPLE_SHARDS PROF_SAMPLE_SHARDS
#define SHARD_SPARES PROF_SHARD_SPARES /* see "spare mappings" below */
#define SHARD_SPARE_BYTES PROF_SHARD_SPARE_BYTES

/* Two cache lines: the first for the records, the second for the spare
 * mappings.  Only the threads sampling into a shard (one, up to
 * SAMPLE_SHARDS threads) and those freeing its samples write them. */
static struct sample_shard {
    sa_polled_lock_t lock; /* see lock.h: a sample and its free hold it briefly */
    struct sample *live;  /* doubly linked */
    struct sample *spare; /* records to reuse */
    size_t count;
    size_t own_bytes; /* of the live samples' own mappings (stats.allocated) */
    /* The prof.reset generation its new samples take, and the only one its
     * part of the live estimate counts (forget_live moves it on). */
    uint32_t live_epoch;
    uint32_t spare_bytes; /* of its spare mappings; atomic reads */
    unsigned nspares;
    /* Freed samples' mappings waiting for the shard's next samples of their
     * lengths, oldest first, and when each was freed. */
    _Alignas(SA_CACHELINE) struct span *spare_map[SHARD_SPARES];
    uint64_t spare_freed_at[SHARD_SPARES];
} shards[SAMPLE_SHARDS] SA_ALIGNED(SA_CACHELINE) = {
    [0 ... SAMPLE_SHARDS - 1] = {.lock = SA_POLLED_LOCK_INITIALIZER(LOCK_RANK_SAMPLES),
                                 .live_epoch = 1},
};

/* A power of two, so that sh - shards, which a sample's publish and release
 * take, is a shift (72 bytes made it a multiply and cost each sample 6
 * instructions). */
_Static_assert(sizeof(struct sample_shard) == 2 * SA_CACHELINE, "a shard is two cache lines");

/* A thread publishes its samples in its own shard (pick_shard), so that
 * up to SAMPLE_SHARDS threads sampling at once meet only when one frees
 * another's samples, and a thread's next sample finds the mapping its last
 * one freed. */
static struct sample_shard *thread_shard(const struct tcache *tc) { return &shards[tc->prof.shard]; }

/* The shard a record belongs to, wherever it is freed. */
static struct sample_shard *home(const struct sample *s) { return &shards[s->shard]; }

/* The live estimate (unbiased live bytes, from the samples since the last
 * prof.reset), in one part per shard, each written only under its shard's
 * lock: a sample and its free change it with a plain store where a locked
 * add would cost as much as the lock again.  A line each: packed into two,
 * every sample and free of one thread took the line from the others, and
 * at 2 threads sampling every 4 KiB the stores to it were 9% of the run
 * (perf).  `checked`: the part as the last full peak check read it (see
 * "the peak snapshot"). */
static struct live_part {
    _Alignas(SA_CACHELINE) int64_t bytes;
    int64_t checked;
} shard_live[SAMPLE_SHARDS];

/* Under sh's lock. */
static void shard_live_add(const struct sample_shard *sh, int64_t delta)
{
    int64_t *part = &shard_live[sh - shards].bytes;
    __atomic_store_n(part, *part + delta, __ATOMIC_RELAXED);
}

static int64_t live_estimate(void)
{
    int64_t sum = 0;
#pragma GCC unroll 16
    for (size_t i = 0; i < SAMPLE_SHARDS; i++)
        sum += __atomic_load_n(&shard_live[i].bytes, __ATOMIC_RELAXED);
    return sum;
}

/* ---- set-up ---- */

static void final_dump(void);

void prof_boot(void)
{
    thread_active_init = opt_prof_thread_active_init;
    gdump = opt_prof && opt_prof_gdump;
    memcpy(prefix, opt_prof_prefix, sizeof(prefix));
    next_interval = prof_interval_get();
    gdump_high = pageheap_mapped_bytes();
    if (!opt_prof)
        sampler_never_sample();
    sampler_set_lg(opt_lg_prof_sample);
    sampler_set_on(opt_prof && opt_prof_active);
    if (!opt_prof)
        return;
    stack_warm_up();
    os_thp_always(); /* read now: never first inside a sample */
    if (opt_prof_guard || opt_lg_prof_guard_every >= 0)
        guard_install_handler();
    prof_recent_set_max(opt_prof_recent_alloc_max); /* conf.c kept it >= -1 */
    if ((opt_prof_final || opt_prof_final_peak) && prefix[0] && atexit(final_dump) != 0)
        sa_warn("prof_final: atexit() failed: no dump at exit");
}

/* Live threads per shard, and the choice of a new thread's shard.  The
 * shard with the fewest live threads, so that up to SAMPLE_SHARDS threads
 * sampling at once never share one (as round robin did once threads had
 * come and gone); among those, the one keeping the most spare bytes.  A
 * program that starts a thread for each task then samples on the shard its
 * last exited thread left its spares in, and reuses them.  Round robin
 * left each thread's spares in a shard of its own, dirty and unused until
 * decay: scale_local at 1 thread (a new thread each run) ended with spares
 * in 10-11 shards, 144-176 KiB, against 32 KiB in 2 shards now.  Two
 * threads starting at once may pick the same shard: they only share its
 * lock. */
static unsigned shard_threads[SAMPLE_SHARDS]; /* atomic */

static uint8_t pick_shard(void)
{
    unsigned best = 0, best_threads = UINT_MAX;
    uint32_t best_spares = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        unsigned t = __atomic_load_n(&shard_threads[i], __ATOMIC_RELAXED);
        uint32_t spares = __atomic_load_n(&shards[i].spare_bytes, __ATOMIC_RELAXED);
        if (t < best_threads || (t == best_threads && spares > best_spares)) {
            best = i;
            best_threads = t;
            best_spares = spares;
        }
    }
    __atomic_fetch_add(&shard_threads[best], 1, __ATOMIC_RELAXED);
    return (uint8_t)best;
}

void prof_thread_exit(const struct tcache *tc)
{
    __atomic_fetch_sub(&shard_threads[tc->prof.shard], 1, __ATOMIC_RELAXED);
}

void prof_thread_init(struct tcache *tc)
{
    tc->prof.shard = pick_shard();
    tc->prof.active = __atomic_load_n(&thread_active_init, __ATOMIC_RELAXED);
    tc->prof.memo.pc = 0; /* a reused cache: its last owner's stack is not this one */
    tc->prof.memo_stack = NULL;
    sampler_thread_init(tc);
}

/* ---- switches ---- */

bool prof_active_get(void) { return sampler_on(); }

/* Other threads see a change within SAMPLER_CHECKIN bytes of allocation;
 * the thread that made it sees it at once. */
static void refresh_own_thread(void)
{
    struct tcache *tc = init_current_cache();
    if (tc)
        sampler_refresh(tc);
}

void prof_active_set(bool on)
{
    if (!opt_prof)
        return;
    sampler_set_on(on);
    refresh_own_thread();
}

bool prof_thread_active_init_get(void) { return __atomic_load_n(&thread_active_init, __ATOMIC_RELAXED); }
void prof_thread_active_init_set(bool on) { __atomic_store_n(&thread_active_init, on, __ATOMIC_RELAXED); }

bool prof_gdump_get(void) { return __atomic_load_n(&gdump, __ATOMIC_RELAXED); }

void prof_gdump_set(bool on)
{
    if (!opt_prof)
        return;
    __atomic_store_n(&gdump_high, pageheap_mapped_bytes(), __ATOMIC_RELAXED);
    __atomic_store_n(&gdump, on, __ATOMIC_RELAXED);
}

size_t prof_lg_sample_get(void) { return opt_prof ? sampler_lg() : 0; }

void prof_lg_sample_set(size_t lg)
{
    if (!opt_prof)
        return;
    sampler_set_lg(lg);
    refresh_own_thread();
}

/* Forgets the samples taken so far in the live estimate and the peak
 * snapshot, as dumps forget them.  Each shard moves to epoch `e` under its
 * lock (never back, when two resets cross), its part of the estimate to 0
 * and its live samples' weights with it, so that their frees take nothing
 * off: a sample's weight counts exactly while it bears its shard's epoch.
 * A walk of every live record, once a reset, where a test of the epoch at
 * each free cost every sample 10 instructions (callgrind). */
static void forget_live(uint32_t e)
{
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        struct sample_shard *sh = &shards[i];
        sa_polled_lock(&sh->lock);
        if ((int32_t)(e - sh->live_epoch) > 0) {
            sh->live_epoch = e;
            for (struct sample *s = sh->live; s; s = s->next)
                s->weight = 0;
            __atomic_store_n(&shard_live[i].bytes, 0, __ATOMIC_RELAXED);
        }
        sa_polled_unlock(&sh->lock);
    }
    sa_lock(&peak_lock);
    peak_len = 0;
    __atomic_store_n(&peak_mark, 0, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++)
        __atomic_store_n(&shard_live[i].checked, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&peak_slack, 0, __ATOMIC_RELAXED);
    sa_unlock(&peak_lock);
}

void prof_reset(size_t lg)
{
    if (!opt_prof)
        return;
    uint32_t e = __atomic_add_fetch(&epoch, 1, __ATOMIC_RELAXED);
    stack_accum_reset(e);
    forget_live(e);
    sampler_set_lg(lg);
    refresh_own_thread();
}

uint64_t prof_interval_get(void)
{
    return opt_prof && opt_lg_prof_interval >= 0 ? (uint64_t)1 << opt_lg_prof_interval : 0;
}

size_t prof_sample_count(void)
{
    uint32_t now = __atomic_load_n(&epoch, __ATOMIC_RELAXED);
    size_t n = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        sa_polled_lock(&shards[i].lock);
        for (struct sample *s = shards[i].live; s; s = s->next)
            n += s->epoch == now;
        sa_polled_unlock(&shards[i].lock);
    }
    return n;
}

uint64_t prof_samples_failed(void) { return __atomic_load_n(&samples_failed, __ATOMIC_RELAXED); }

/* ---- the calling thread ---- */

bool prof_thread_active_get(void)
{
    struct tcache *tc = init_current_cache();
    return tc ? tc->prof.active : prof_thread_active_init_get();
}

void prof_thread_active_set(bool on)
{
    struct tcache *tc = init_thread_cache();
    if (!tc)
        return;
    tc->prof.active = on;
    tc->prof.gen = 0; /* redraw the interval at once */
    sampler_refresh(tc);
}

/* isgraph() || isblank() in the C locale: what a thread's name may hold
 * (dumps write it into lines and labels). */
static bool name_char(char c) { return (c > ' ' && c < 0x7f) || c == ' ' || c == '\t'; }

/* opt.prof_sys_thread_name: the name the kernel has for the calling thread
 * (pthread_setname_np's), read at each sample, as it may change at any
 * time; a character a name may not hold becomes '?'. */
static void name_from_system(struct tcache *tc)
{
    char name[OS_THREAD_NAME_MAX];
    os_thread_name(name);
    size_t n = 0;
    for (; name[n]; n++)
        tc->prof.name[n] = name_char(name[n]) ? name[n] : '?';
    tc->prof.name[n] = '\0';
}
_Static_assert(sizeof(((struct tcache *)0)->prof.name) >= OS_THREAD_NAME_MAX,
               "a kernel thread name fits");

const char *prof_thread_name_get(void)
{
    struct tcache *tc = init_current_cache();
    if (tc && opt_prof_sys_thread_name)
        name_from_system(tc);
    return tc ? tc->prof.name : "";
}

int prof_thread_name_set(const char *name)
{
    if (opt_prof_sys_thread_name)
        return ENOENT; /* the kernel's names, as jemalloc */
    if (!name)
        return EFAULT;
    for (const char *c = name; *c; c++)
        if (!name_char(*c))
            return EFAULT;
    struct tcache *tc = init_thread_cache();
    if (!tc)
        return EAGAIN;
    size_t n = strlen(name);
    if (n >= sizeof(tc->prof.name))
        n = sizeof(tc->prof.name) - 1;
    memcpy(tc->prof.name, name, n);
    tc->prof.name[n] = '\0';
    return 0;
}

uint64_t prof_thread_allocated(void)
{
    struct tcache *tc = init_current_cache();
    return tc ? sampler_thread_allocated(tc) : 0;
}

uint64_t prof_thread_deallocated(void)
{
    struct tcache *tc = init_current_cache();
    return tc ? tcache_deallocated(tc, sampler_thread_allocated(tc)) : 0;
}

/* ---- the peak snapshot ---- */

/* The estimate above which the next snapshot is taken. */
static int64_t peak_threshold(int64_t mark) { return mark + mark / 100 * (int64_t)opt_prof_peak_pct; }

/* Under peak_lock: reads every shard's part of the estimate, noting each as
 * checked; takes a snapshot if their sum is over the threshold; sets the
 * slack for the parts read.  Outside any allocator lock; the buffer grows
 * with os_map, never malloc. */
static void peak_full_check_locked(void)
{
    int64_t live = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        int64_t part = __atomic_load_n(&shard_live[i].bytes, __ATOMIC_RELAXED);
        __atomic_store_n(&shard_live[i].checked, part, __ATOMIC_RELAXED);
        live += part;
    }
    int64_t mark = __atomic_load_n(&peak_mark, __ATOMIC_RELAXED);
    if (live > peak_threshold(mark)) {
        size_t want = prof_live_upper_bound() + 256;
        if (want > peak_cap) {
            size_t bytes = sa_align_up(want * 2 * sizeof(struct dump_entry), os_page_size());
            struct dump_entry *grown = os_map(bytes, os_page_size());
            if (grown) {
                if (peak_buf)
                    os_unmap(peak_buf, sa_align_up(peak_cap * sizeof(struct dump_entry), os_page_size()));
                peak_buf = grown;
                __atomic_store_n(&peak_cap, bytes / sizeof(struct dump_entry), __ATOMIC_RELAXED);
            }
        }
        if (peak_buf)
            peak_len = prof_snapshot(peak_buf, peak_cap);
        mark = live;
        __atomic_store_n(&peak_mark, mark, __ATOMIC_RELAXED);
    }
    int64_t room = peak_threshold(mark) - live;
    __atomic_store_n(&peak_slack, room > 0 ? room / SAMPLE_SHARDS : 0, __ATOMIC_RELAXED);
}

/* A slack that no part is within: every sample sums the parts. */
#define PEAK_SUM_ALWAYS INT64_MIN

/* Called after shard sh's part of the estimate grew by `grew` (a sample,
 * or one grown in place): a new peak more than opt_prof_peak_pct above the
 * last snapshot takes a new one.
 *
 * Summing the parts at every sample read every shard's line, which its
 * owner then had to take back for its next sample: at 16 threads sampling
 * every 4 KiB that cost churn/threads=8 two thirds of its time.  So a full
 * check leaves a slack, (threshold - sum) / SAMPLE_SHARDS: while no part
 * has grown by more than that since the check read it, the sum cannot be
 * over the threshold, and a sample reads only its own shard's line and
 * the slack.  That holds only while every part is within the slack: a
 * part left past it, its sum under the threshold, lets the others pass
 * the threshold by its excess unseen (test_profiles: "peak past another
 * shard's grown part").  So a part that grows past the slack either makes
 * a full check, which reads every part anew, or, where the room left is
 * less than a sixteenth of what it grew by (a heap of a few samples: a
 * new slack would be passed again by the next sample), turns the slack
 * off: every sample then sums the parts, as all did before, and writes
 * no other thread's line, until a sum finds room again.  A part that
 * grows while another thread's full check runs can be judged against the
 * slack before that check's: the sum can then pass the threshold by that
 * one growth until its shard's next sample. */
static void peak_check(const struct sample_shard *sh, int64_t grew)
{
    const struct live_part *part = &shard_live[sh - shards];
    int64_t since = __atomic_load_n(&part->bytes, __ATOMIC_RELAXED) -
                    __atomic_load_n(&part->checked, __ATOMIC_RELAXED);
    int64_t slack = __atomic_load_n(&peak_slack, __ATOMIC_RELAXED);
    if (since <= slack)
        return;
    int64_t live = live_estimate(), threshold = peak_threshold(__atomic_load_n(&peak_mark, __ATOMIC_RELAXED));
    if (live > threshold) {
        sa_lock(&peak_lock);
    } else if ((threshold - live) / SAMPLE_SHARDS < grew) {
        if (slack != PEAK_SUM_ALWAYS)
            __atomic_store_n(&peak_slack, PEAK_SUM_ALWAYS, __ATOMIC_RELAXED);
        return;
    } else if (!sa_trylock(&peak_lock)) {
        /* Another thread is checking, and sets a slack from parts it may
         * have read before this one grew; or it is reading the snapshot.
         * Either way this part can stay past the slack until the next full
         * check: the race above. */
        return;
    }
    peak_full_check_locked();
    sa_unlock(&peak_lock);
}

size_t prof_peak_count(void)
{
    sa_lock(&peak_lock);
    size_t n = peak_len;
    sa_unlock(&peak_lock);
    return n;
}

size_t prof_peak_snapshot(struct dump_entry *out, size_t cap)
{
    sa_lock(&peak_lock);
    size_t n = peak_len < cap ? peak_len : cap;
    for (size_t i = 0; i < n; i++) {
        out[i] = peak_buf[i];
        out[i].ptr = out[i].proxy = NULL; /* those may be gone: only stack and weight */
    }
    sa_unlock(&peak_lock);
    return n;
}

/* ---- sampled allocations ---- */

/* What a new sample is, as its caller knows it; publish() adds the rest. */
struct sample_new {
    void *ptr;
    size_t usable, map_len, own_bytes;
    uint64_t rate;
    struct prof_stack *stack;
    void *proxy;
    struct span *span;
    bool guarded;
};

/* Under sh's lock: makes `n` a live sample of weight `weight`, taken by
 * the thread named `thread`: a spare record of the shard (or a new one)
 * filled in place and linked in.  NULL on ENOMEM. */
static struct sample *sample_publish_locked(struct sample_shard *sh, const struct sample_new *n,
                                            int64_t weight, const char *thread)
{
    struct sample *s = sh->spare;
    if (s)
        sh->spare = s->next;
    else
        s = meta_alloc(sizeof(*s), 16); /* LOCK_RANK_META is below this lock */
    if (s) {
        s->ptr = n->ptr;
        s->usable = n->usable;
        s->map_len = n->map_len;
        s->own_bytes = n->own_bytes;
        s->rate = n->rate;
        s->stack = n->stack;
        s->proxy = n->proxy;
        s->span = n->span;
        s->weight = weight;
        s->epoch = sh->live_epoch;
        s->shard = (uint8_t)(sh - shards);
        s->guarded = n->guarded;
        s->free_stack = NULL;
        s->recent = NULL;
        memcpy(s->thread, thread, sizeof(s->thread) - 1);
        s->thread[sizeof(s->thread) - 1] = '\0';
        s->prev = NULL;
        s->next = sh->live;
        if (sh->live)
            sh->live->prev = s;
        sh->live = s;
        /* Read without the lock; written only under it, so a plain
         * store will do (a locked add costs as much as the lock). */
        __atomic_store_n(&sh->count, sh->count + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&sh->own_bytes, sh->own_bytes + s->own_bytes, __ATOMIC_RELAXED);
        shard_live_add(sh, weight);
    }
    return s;
}

/* Under sh's lock: unlinks live sample `s`; keeps its record for reuse
 * unless `keep` (a guarded sample's, which stays with its mapping in
 * quarantine until sample_recycle). */
static void sample_release_locked(struct sample_shard *sh, struct sample *s, bool keep)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        sh->live = s->next;
    if (s->next)
        s->next->prev = s->prev;
    __atomic_store_n(&sh->count, sh->count - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->own_bytes, sh->own_bytes - s->own_bytes, __ATOMIC_RELAXED);
    shard_live_add(sh, -s->weight); /* 0 if a reset forgot it */
    if (!keep) {
        s->next = sh->spare;
        sh->spare = s;
    }
}

static void sample_recycle(struct sample_shard *sh, struct sample *s)
{
    sa_polled_lock(&sh->lock);
    s->next = sh->spare;
    sh->spare = s;
    sa_polled_unlock(&sh->lock);
}

/* ---- spare mappings ----
 *
 * A freed sample's mapping of up to SHARD_SPARE_BYTES waits in its record's
 * shard for the shard's next sample of its length.  It is taken and given
 * back under the shard lock that publishing and releasing the record hold
 * anyway, so a thread sampling a few lengths again and again reuses its
 * mappings with no atomic instruction of its own and nothing another
 * thread writes (sampled_pages.c's hot slots and lock are shared by all
 * threads).  sampled_pages.c keeps the rest.
 *
 * Up to SHARD_SPARES, not one: a thread keeps a few samples live at once
 * and frees them in any order, so a shard of one spare sent a free that
 * found it taken to sampled_pages.c, and the next sample after two frees
 * back for a mapping.  scale_local at 2 threads sampling every 4 KiB (about
 * 2 samples live per thread) spent 18% of its time in sampled_pages.c's
 * shared slots and lock (perf) with one spare.
 *
 * Spares are dirty, and decay as sampled_pages' mappings do: a free at
 * most every eighth of the decay time gives back, purged, the spares idle
 * longer than it; malloc_trim purges them all; with dirty_decay_ms 0
 * (purge at once) there are none. */
static uint64_t next_spare_check; /* atomic */

static size_t map_bytes(const struct span *m) { return m->npages << SA_PAGE_SHIFT; }

/* Under sh's lock: spare i out of sh, keeping the others' order. */
static struct span *spare_remove_locked(struct sample_shard *sh, unsigned i)
{
    struct span *m = sh->spare_map[i];
    for (unsigned j = i + 1; j < sh->nspares; j++) {
        sh->spare_map[j - 1] = sh->spare_map[j];
        sh->spare_freed_at[j - 1] = sh->spare_freed_at[j];
    }
    sh->nspares--;
    __atomic_store_n(&sh->spare_bytes, sh->spare_bytes - (uint32_t)map_bytes(m), __ATOMIC_RELAXED);
    return m;
}

/* Under sh's lock: its most recently freed spare of `len` bytes, now the
 * caller's, if `align` asks no more than a page; else NULL. */
static struct span *spare_take_locked(struct sample_shard *sh, size_t len, size_t align)
{
    if (align > SA_PAGE_SIZE)
        return NULL;
    for (unsigned i = sh->nspares; i-- > 0;)
        if (map_bytes(sh->spare_map[i]) == len)
            return spare_remove_locked(sh, i);
    return NULL;
}

/* Under sh's lock: keeps mapping `m`, freed at `now`, as a spare of sh,
 * making room by taking out the spares freed longest ago, into out[]
 * (*nout of them, at most SHARD_SPARES: the caller gives them to
 * sampled_pages.c once the lock is released); false if `m` is longer than
 * a shard keeps or `decays` is false (dirty_decay_ms 0).  Room for the
 * newest, not the oldest: one spare of a length the thread no longer
 * samples (a 1 KiB sample of a program's start-up, say) left no room for
 * a 64 KiB mapping, and sent every later 64 KiB sample of pair/65536
 * through sampled_pages.c's shared slots. */
static bool spare_keep_locked(struct sample_shard *sh, struct span *m, uint64_t now, bool decays,
                              struct span **out, unsigned *nout)
{
    size_t len = map_bytes(m);
    if (!decays || len > SHARD_SPARE_BYTES)
        return false;
    while (sh->nspares == SHARD_SPARES || sh->spare_bytes + len > SHARD_SPARE_BYTES)
        out[(*nout)++] = spare_remove_locked(sh, 0); /* spares are in the order freed */
    sh->spare_map[sh->nspares] = m;
    sh->spare_freed_at[sh->nspares++] = now;
    __atomic_store_n(&sh->spare_bytes, sh->spare_bytes + (uint32_t)len, __ATOMIC_RELAXED);
    return true;
}

/* Gives back, purged, every spare freed at or before `idle_since`;
 * returns the bytes purged. */
static size_t spares_purge(uint64_t idle_since)
{
    size_t purged = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        struct sample_shard *sh = &shards[i];
        struct span *out[SHARD_SPARES];
        unsigned n = 0;
        sa_polled_lock(&sh->lock);
        for (unsigned k = 0; k < sh->nspares;) {
            if (sh->spare_freed_at[k] <= idle_since)
                out[n++] = spare_remove_locked(sh, k);
            else
                k++;
        }
        sa_polled_unlock(&sh->lock);
        for (unsigned k = 0; k < n; k++)
            purged += sampled_pages_put_purged(out[k]);
    }
    return purged;
}

/* `now`: os_now_ns(); `decay_ms`: pageheap_decay_ms(), read by the caller. */
static void decay_spares(uint64_t now, long decay_ms)
{
    if (decay_ms <= 0) /* 0: no spares; negative: purged only by malloc_trim */
        return;
    uint64_t decay_ns = (uint64_t)decay_ms * 1000000u;
    if (!pageheap_decay_look_due(&next_spare_check, now, pageheap_decay_step_ns(decay_ns)))
        return;
    if (now > decay_ns)
        spares_purge(now - decay_ns);
}

void prof_decay_spares(uint64_t now) { decay_spares(now, pageheap_decay_ms()); }

size_t prof_purge_spares(void) { return spares_purge(UINT64_MAX); }

size_t prof_spare_bytes(void)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++)
        bytes += __atomic_load_n(&shards[i].spare_bytes, __ATOMIC_RELAXED);
    return bytes;
}

/* A mapping of `len` bytes for a sample in sh: its spare, or one from
 * sampled_pages.c.  Returns with sh's lock held, or NULL (ENOMEM) with
 * it not held: the caller publishes under the same hold. */
static struct span *lock_with_mapping(struct sample_shard *sh, size_t len, size_t align, bool *zeroed)
{
    sa_polled_lock(&sh->lock);
    struct span *m = spare_take_locked(sh, len, align);
    if (m) {
        *zeroed = false; /* spares are dirty */
        return m;
    }
    sa_polled_unlock(&sh->lock); /* sampled_pages may map: not under it */
    if (!(m = sampled_pages_get(len, align, zeroed)))
        return NULL;
    sa_polled_lock(&sh->lock);
    return m;
}

/* The calling thread's stack, walked from here (no memo), interned. */
static struct prof_stack *walk_and_intern(void)
{
    void *frames[STACK_WALK_SLOTS];
    unsigned depth = stack_capture(frames);
    return stack_intern(frames, depth);
}

/* The stack from `from` on, through the thread's memo: a replayed walk
 * gives the frames the memo's stack was interned from, so it is that
 * record again, without copying, hashing and comparing them. */
static struct prof_stack *walk_and_intern_memo(struct tcache *tc, const struct unwind_from *from)
{
    struct unwind_memo *m = &tc->prof.memo;
    struct unwind_from mine = *from;
    mine.memo = m;
    if (tc->prof.memo_stack && stack_capture_would_replay(&mine))
        return tc->prof.memo_stack;
    /* Walked afresh (or replayed with no record yet): interned, and kept
     * as the memo's record if the memo now holds these frames. */
    m->last = UNWIND_MEMO_UNUSED; /* stays so if stack.c walks without it */
    void *frames[STACK_WALK_SLOTS];
    unsigned depth = stack_capture_from(&mine, frames);
    struct prof_stack *st = stack_intern(frames, depth);
    if (m->last != UNWIND_MEMO_UNUSED)
        tc->prof.memo_stack = st;
    return st;
}

/* ---- hooks (experimental.hooks.*: prof.h) ---- */

/* NULL: salloc's own walker, with the memo's replays (capture_stack). */
static prof_backtrace_hook_t backtrace_hook;
static prof_dump_hook_t dump_hook;

void prof_default_backtrace(void **vec, unsigned *len, unsigned max)
{
    void *frames[STACK_WALK_SLOTS];
    const struct unwind_from *from = tcache_get()->prof.hook_from;
    unsigned n = from ? stack_capture_from(from, frames) : stack_capture(frames);
    if (n > max)
        n = max;
    memcpy(vec, frames, n * sizeof(void *));
    *len = n;
}

prof_backtrace_hook_t prof_backtrace_hook_get(void)
{
    prof_backtrace_hook_t hook = __atomic_load_n(&backtrace_hook, __ATOMIC_ACQUIRE);
    return hook ? hook : prof_default_backtrace;
}

int prof_backtrace_hook_set(prof_backtrace_hook_t hook)
{
    if (!hook)
        return EINVAL;
    __atomic_store_n(&backtrace_hook, hook == prof_default_backtrace ? NULL : hook,
                     __ATOMIC_RELEASE);
    return 0;
}

prof_dump_hook_t prof_dump_hook_get(void) { return __atomic_load_n(&dump_hook, __ATOMIC_ACQUIRE); }
void prof_dump_hook_set(prof_dump_hook_t hook) { __atomic_store_n(&dump_hook, hook, __ATOMIC_RELEASE); }

/* A sample's stack as the prof_backtrace hook gives it, interned.  Out of
 * line, so that its buffer is on a sample's stack only with a hook set (a
 * sample may run on a small signal or coroutine stack).  The hook runs
 * under the reentrancy guard: what it allocates is served unsampled. */
__attribute__((noinline)) static struct prof_stack *
walk_with_hook(struct tcache *tc, prof_backtrace_hook_t hook, const struct unwind_from *from)
{
    void *frames[STACK_MAX_DEPTH];
    unsigned len = 0;
    tc->prof.hook_from = from;
    hook(frames, &len, STACK_MAX_DEPTH);
    tc->prof.hook_from = NULL;
    return stack_intern(frames, len < STACK_MAX_DEPTH ? len : STACK_MAX_DEPTH);
}

/* Captures the calling thread's stack into the stack table, under the
 * reentrancy guard; NULL if the thread is already inside the profiler (the
 * unwinder allocating: that allocation is served unsampled) or the table is
 * out of memory.  On success the guard stays set: publish() or
 * sample_failed clears it. */
static struct prof_stack *capture_stack(struct tcache *tc, const struct unwind_from *from)
{
    if (tc->prof.in_prof)
        return NULL;
    tc->prof.in_prof = true;
    if (unlikely(opt_prof_sys_thread_name)) /* a system call: before any lock */
        name_from_system(tc);
    prof_backtrace_hook_t hook = __atomic_load_n(&backtrace_hook, __ATOMIC_ACQUIRE);
    struct prof_stack *st = unlikely(hook != NULL) ? walk_with_hook(tc, hook, from)
                            : from                 ? walk_and_intern_memo(tc, from)
                                                   : walk_and_intern();
    if (!st) { /* no memory for the stack's record (or no frames): this sample is lost */
        __atomic_fetch_add(&samples_failed, 1, __ATOMIC_RELAXED);
        tc->prof.in_prof = false;
    }
    return st;
}

static void sample_failed(struct tcache *tc)
{
    __atomic_fetch_add(&samples_failed, 1, __ATOMIC_RELAXED);
    tc->prof.in_prof = false;
}

/* Z / p(Z), rounded: a sample's share of live_estimate(). */
static int64_t sample_weight(size_t usable, uint64_t rate)
{
    double p = sa_one_minus_exp_neg((double)usable / (double)rate);
    return (int64_t)(usable / p + 0.5);
}

/* Under the lock of the thread's shard: publishes sample `n` (its weight,
 * epoch and thread name filled in here): its record, or NULL (counted
 * failed) on ENOMEM.  Clears the guard either way.  The weight of the
 * thread's last size and rate is kept: a program samples the same few
 * sizes again and again. */
static struct sample *publish_locked(struct tcache *tc, const struct sample_new *n)
{
    if (n->usable != tc->prof.weight_usable || n->rate != tc->prof.weight_rate) {
        tc->prof.weight = sample_weight(n->usable, n->rate);
        tc->prof.weight_usable = n->usable;
        tc->prof.weight_rate = n->rate;
    }
    struct sample *s = sample_publish_locked(thread_shard(tc), n, tc->prof.weight, tc->prof.name);
    if (!s) {
        sample_failed(tc);
        return NULL;
    }
    tc->prof.in_prof = false;
    return s;
}

/* After a sample is in place: its accumulated count, the live estimate,
 * interval dumps and peak snapshots. */
#ifdef SA_TESTING
void (*prof_test_before_accum)(void);
void (*prof_test_before_spare_keep)(void);
#endif

static void after_publish(struct tcache *tc, struct sample *s)
{
#ifdef SA_TESTING
    if (prof_test_before_accum) /* a prof.reset here, say */
        prof_test_before_accum();
#endif
    if (opt_prof_accum)
        stack_accum_add(s->stack, s->usable, s->rate, s->epoch);
    if (unlikely(prof_recent_max() != 0))
        prof_recent_alloc(&s->recent, s->usable, s->stack, s->thread);
    prof_after_sample(tc);
    /* The weight publish_locked gave it: s->weight is the shard lock's (a
     * prof.reset zeroes it), and this thread no longer holds it. */
    peak_check(home(s), tc->prof.weight);
}

bool prof_should_guard(struct tcache *tc)
{
    if (opt_prof_guard)
        return guard_room();
    if (opt_lg_prof_guard_every < 0)
        return false;
    /* One sample in 2^lg, at random, from the thread's generator. */
    double u = sampler_uniform(&tc->prof.prng); /* (0, 1] */
    return u <= 1.0 / (double)((uint64_t)1 << opt_lg_prof_guard_every) && guard_room();
}

/* A guarded sample's mapping gives back no memory when freed until it
 * leaves the quarantine; the mapping it pushes out is released here. */
static void release_quarantined(struct span *span)
{
    struct sample *s = span->sample;
    guard_retire(span); /* out of the pagemap first: no fault finds s now */
    sample_recycle(home(s), s);
}

void *prof_alloc_sampled(struct tcache *tc, size_t usable, size_t align, uint64_t rate,
                         void *proxy, bool guarded, bool *zeroed, const struct unwind_from *from)
{
    struct prof_stack *st = capture_stack(tc, from);
    if (!st)
        return NULL;
    struct sample_shard *sh = thread_shard(tc);
    size_t map_len = sa_align_up(usable, SA_PAGE_SIZE);
    uintptr_t object = 0;
    struct span *span = guarded ? guard_map(usable, align, &object, &map_len) : NULL;
    if (span) {
        *zeroed = true;
        sa_polled_lock(&sh->lock);
    } else if (guarded && !proxy) {
        /* A large one the guard could not map: served, and sampled, as an
         * ordinary large span by the caller. */
        tc->prof.in_prof = false;
        return NULL;
    } else {
        guarded = false;
        if (!(span = lock_with_mapping(sh, map_len, align, zeroed))) {
            sample_failed(tc);
            return NULL;
        }
        object = span->start;
    }
    void *mem = (void *)object;
    struct sample *s = publish_locked(tc, &(struct sample_new){.ptr = mem, .usable = usable,
                                                               .map_len = map_len,
                                                               .own_bytes = span->npages << SA_PAGE_SHIFT,
                                                               .rate = rate, .stack = st,
                                                               .proxy = proxy, .guarded = guarded});
    sa_polled_unlock(&sh->lock);
    if (!s) {
        if (guarded)
            guard_unmap(span);
        else
            sampled_pages_put(span);
        return NULL;
    }
    pageheap_sampled_attach(span, s, object);
    after_publish(tc, s);
    return mem;
}

/* Residency is read per OS page: with transparent huge pages on for all
 * memory, or asked for this part of the heap (opt.thp), keep the kernel
 * from backing sampled large span `span` with one, unless so many spans
 * already are that their split mappings could use up the process's
 * (pageheap_small_pages_mark).  Undone when the span is freed. */
static void small_pages_for(struct span *span)
{
    if ((os_thp_always() || pageheap_hugepages_advised()) && pageheap_small_pages_mark(span))
        os_nohugepage((void *)span->start, span->npages << SA_PAGE_SHIFT);
}

bool prof_sample_span(struct tcache *tc, struct span *span, size_t usable, uint64_t rate,
                      const struct unwind_from *from)
{
    struct prof_stack *st = capture_stack(tc, from);
    if (!st)
        return false;
    void *mem = (void *)span->start;
    struct sample_shard *sh = thread_shard(tc);
    sa_polled_lock(&sh->lock);
    struct sample *s = publish_locked(tc, &(struct sample_new){.ptr = mem, .usable = usable,
                                                               .map_len = span->npages << SA_PAGE_SHIFT,
                                                               .rate = rate, .stack = st, .span = span});
    sa_polled_unlock(&sh->lock);
    if (!s)
        return false;
    small_pages_for(span);
    __atomic_store_n(&span->sample, s, __ATOMIC_RELEASE);
    after_publish(tc, s);
    return true;
}

void prof_resize_span_sample(struct span *span, size_t usable)
{
    struct sample *s = span->sample;
    struct sample_shard *shard = home(s);
    int64_t weight = sample_weight(usable, s->rate);
    sa_polled_lock(&shard->lock); /* dumps copy records under it */
    int64_t grew = 0;
    if (s->epoch == shard->live_epoch) { /* else forgotten: its weight stays 0 */
        grew = weight - s->weight;
        shard_live_add(shard, grew);
        s->weight = weight;
    }
    s->usable = usable;
    s->map_len = span->npages << SA_PAGE_SHIFT;
    sa_polled_unlock(&shard->lock);
    small_pages_for(span); /* the pages it grew by too */
    if (grew > 0)
        peak_check(shard, grew);
}

/* Takes record `s` out of the live samples and the live estimate; its
 * record is kept if `keep` (see sample_release). */
static void forget_sample(struct sample *s, bool keep)
{
    struct sample_shard *sh = home(s);
    sa_polled_lock(&sh->lock);
    sample_release_locked(sh, s, keep);
    sa_polled_unlock(&sh->lock);
}

/* The stack that frees a sample, for a report of a use after free of a
 * guarded one, or for its recent record: NULL if this thread has no cache
 * (exiting) or is inside the profiler. */
static struct prof_stack *free_stack(void)
{
    struct tcache *tc = init_current_cache();
    if (!tc || tc->prof.in_prof)
        return NULL;
    tc->prof.in_prof = true;
    struct prof_stack *st = walk_and_intern();
    tc->prof.in_prof = false;
    return st;
}

/* Sample `s` is being freed (or unsampled): its recent record, if it has
 * one, is completed. */
static void release_recent(struct sample *s)
{
    if (unlikely(prof_recent_has(&s->recent)))
        prof_recent_release(&s->recent, free_stack());
}

void prof_unsample_span(struct span *span)
{
    struct sample *s = span->sample;
    release_recent(s);
    __atomic_store_n(&span->sample, NULL, __ATOMIC_RELAXED);
    forget_sample(s, false);
}

size_t prof_free_sampled(struct span *span, void **proxy)
{
    struct sample *s = span->sample;
    release_recent(s);
    size_t usable = s->usable;
    *proxy = s->proxy;
    if (s->guarded) {
        /* Out of the live samples, but its record stays with the mapping,
         * inaccessible in quarantine, to name both stacks if it is used. */
        s->free_stack = free_stack();
        forget_sample(s, true);
        pageheap_sampled_detach(span, SPAN_QUARANTINED);
        struct span *out = guard_quarantine(span);
        if (out)
            release_quarantined(out);
        return usable;
    }
    struct prof_stack *st = s->stack;
    pageheap_sampled_detach(span, SPAN_PARKED);
    span->sample = st; /* for the message if it is freed again (prof_describe) */
    /* Out of the live samples, and its mapping its shard's spare if there
     * is room, under one hold of the shard's lock. */
    struct sample_shard *sh = home(s);
    uint64_t now = os_now_ns();
    long decay_ms = pageheap_decay_ms();
#ifdef SA_TESTING
    if (prof_test_before_spare_keep) /* dirty_decay_ms set to 0 here, say */
        prof_test_before_spare_keep();
#endif
    struct span *out[SHARD_SPARES];
    unsigned nout = 0;
    sa_polled_lock(&sh->lock);
    sample_release_locked(sh, s, false);
    bool kept = spare_keep_locked(sh, span, now, decay_ms != 0, out, &nout);
    sa_polled_unlock(&sh->lock);
    for (unsigned k = 0; k < nout; k++)
        sampled_pages_put(out[k]);
    if (!kept)
        sampled_pages_put(span);
    else if (pageheap_decay_ms() == 0)
        /* Set to 0 since `decay_ms` was read: its purge of the spares
         * (ctl.c) may have passed this shard before this one was kept,
         * and under 0 nothing waits dirty. */
        prof_purge_spares();
    if (!pageheap_decay_in_background()) /* else the background thread's job */
        decay_spares(now, decay_ms);
    return usable;
}

/* ---- describing a sampled block, for messages ---- */

/* One line per frame: address, and function+offset (library) when the
 * dynamic loader knows them (dladdr: symbols of the dynamic symbol table). */
static void print_stack(const struct prof_stack *st)
{
    for (uint32_t i = 0; i < st->depth; i++) {
        Dl_info info;
        const void *pc = st->frames[i];
        if (dladdr(pc, &info) && info.dli_sname)
            sa_message("    #%u %p %s+0x%lx (%s)", i, pc, info.dli_sname,
                       (unsigned long)((const char *)pc - (const char *)info.dli_saddr),
                       info.dli_fname ? info.dli_fname : "?");
        else if (info.dli_fname)
            sa_message("    #%u %p (%s+0x%lx)", i, pc, info.dli_fname,
                       (unsigned long)((const char *)pc - (const char *)info.dli_fbase));
        else
            sa_message("    #%u %p", i, pc);
    }
}

/* A guarded sample in quarantine: where `p` is, who freed it, who
 * allocated it. */
static void describe_freed(const void *p, const struct sample *s)
{
    const char *q = p, *start = s->ptr;
    if (q >= start && q < start + s->usable)
        sa_message("  %p is %zu bytes into the %zu-byte block at %p, freed already, at:", p,
                   (size_t)(q - start), s->usable, s->ptr);
    else
        sa_message("  %p is in the pages of the %zu-byte block at %p, freed already, at:", p,
                   s->usable, s->ptr);
    if (s->free_stack)
        print_stack(s->free_stack);
    else
        sa_message("    (stack not recorded)");
    sa_message("  and allocated at:");
    print_stack(s->stack);
}

/* A pointer past the first and last pages of a sampled large span, which
 * are all the pagemap records of a large span: found among the live
 * samples (on the way to an abort, so a walk of them all will do). */
static void describe_in_large_sample(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    struct sample found = {.stack = NULL};
    for (unsigned i = 0; i < SAMPLE_SHARDS && !found.stack; i++) {
        sa_polled_lock(&shards[i].lock);
        for (const struct sample *s = shards[i].live; s; s = s->next)
            if (s->span && a >= (uintptr_t)s->ptr && a - (uintptr_t)s->ptr < s->map_len) {
                found = *s;
                break;
            }
        sa_polled_unlock(&shards[i].lock);
    }
    if (!found.stack)
        return;
    sa_message("  %p is %zu bytes into the sampled %zu-byte block at %p, allocated at:", p,
               (size_t)(a - (uintptr_t)found.ptr), found.usable, found.ptr);
    print_stack(found.stack);
}

void prof_describe(const void *p)
{
    struct span *span = pagemap_span(p);
    if (!span || (uintptr_t)p < span->start || (uintptr_t)p >= span_end(span)) {
        describe_in_large_sample(p);
        return;
    }
    unsigned state = __atomic_load_n(&span->state, __ATOMIC_ACQUIRE);
    const struct sample *s = state == SPAN_SAMPLED || state == SPAN_LARGE ? span->sample : NULL;
    if (s) {
        sa_message("  %p is %zu bytes into the sampled %zu-byte block at %p, allocated at:", p,
                   (size_t)((const char *)p - (const char *)s->ptr), s->usable, s->ptr);
        print_stack(s->stack);
    } else if (state == SPAN_PARKED && span->sample) {
        sa_message("  %p is in the pages of a sampled block freed already (a double free or a "
                   "use after free), allocated at:", p);
        print_stack(span->sample);
    } else if (state == SPAN_QUARANTINED && span->sample) {
        describe_freed(p, span->sample);
    }
}

bool prof_report_fault(const void *addr, int is_write)
{
    struct span *span = pagemap_span(addr);
    if (!span || (uintptr_t)addr < span->start || (uintptr_t)addr >= span_end(span))
        return false;
    unsigned state = __atomic_load_n(&span->state, __ATOMIC_ACQUIRE);
    const struct sample *s = __atomic_load_n(&span->sample, __ATOMIC_ACQUIRE);
    const char *access = is_write < 0 ? "access" : is_write ? "write" : "read";
    if (state == SPAN_SAMPLED && s && s->guarded &&
        (const char *)addr >= (const char *)s->ptr + s->usable) {
        sa_message("heap-buffer-overflow: %s of %p, %zu bytes past the end of the %zu-byte "
                   "block at %p (a guarded sample), allocated at:",
                   access, addr, (size_t)((const char *)addr - (const char *)s->ptr - s->usable),
                   s->usable, s->ptr);
        print_stack(s->stack);
        return true;
    }
    if (state == SPAN_QUARANTINED && s) {
        sa_message("heap-use-after-free: %s of %p (a guarded sample):", access, addr);
        describe_freed(addr, s);
        return true;
    }
    return false;
}

bool prof_is_sampled(const void *p)
{
    if (pageheap_sampled_span(p))
        return true;
    const struct span *s = pageheap_large_span(p);
    return s && __atomic_load_n(&s->sample, __ATOMIC_ACQUIRE) != NULL;
}

size_t prof_sampled_usable(const struct span *span)
{
    return ((const struct sample *)span->sample)->usable;
}

/* ---- dumps ---- */

size_t prof_snapshot(struct dump_entry *out, size_t cap)
{
    uint32_t now = __atomic_load_n(&epoch, __ATOMIC_RELAXED);
    size_t n = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        sa_polled_lock(&shards[i].lock);
        for (struct sample *s = shards[i].live; s && n < cap; s = s->next)
            if (s->epoch == now) {
                out[n] = (struct dump_entry){.stack = s->stack, .usable = s->usable,
                                             .rate = s->rate, .live = 1, .ptr = s->ptr,
                                             .proxy = s->proxy, .map_len = s->map_len};
                memcpy(out[n++].thread, s->thread, sizeof(s->thread));
            }
        sa_polled_unlock(&shards[i].lock);
    }
    return n;
}

size_t prof_own_mapping_bytes(void)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++)
        bytes += __atomic_load_n(&shards[i].own_bytes, __ATOMIC_RELAXED);
    return bytes;
}

size_t prof_peak_buffer_bytes(void)
{
    size_t cap = __atomic_load_n(&peak_cap, __ATOMIC_RELAXED);
    return sa_align_up(cap * sizeof(struct dump_entry), os_page_size());
}

size_t prof_live_upper_bound(void)
{
    size_t n = 0;
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++)
        n += __atomic_load_n(&shards[i].count, __ATOMIC_RELAXED);
    return n;
}

/* Builds <prefix>.<pid>.<seq>.<kind><kseq>.<format> (kind 'f' and 'p': no
 * kseq; format heap, pb or pb.gz from opt.prof_format) into `path`; false
 * if the prefix is empty or the name too long.  Under dump_lock. */
static bool auto_name(char *path, size_t size, char kind, uint64_t *kseq)
{
    if (!prefix[0])
        return false;
    size_t n = kseq ? sa_format(path, size, "%s.%d.%llu.%c%llu.%s", prefix, (int)getpid(),
                                (unsigned long long)seq, kind, (unsigned long long)*kseq,
                                opt_prof_format)
                    : sa_format(path, size, "%s.%d.%llu.%c.%s", prefix, (int)getpid(),
                                (unsigned long long)seq, kind, opt_prof_format);
    if (n + 1 >= size)
        return false;
    seq++;
    if (kseq)
        (*kseq)++;
    return true;
}

/* The name of the last automatic dump (under dump_lock; not on a small
 * thread's stack). */
SA_BSS_APART static char auto_path[PROF_PREFIX_MAX + 96];

static int dump_locked(const char *path, char kind, uint64_t *kseq, enum dump_kind what,
                       struct dump_totals *totals)
{
    if (!path) {
        if (!auto_name(auto_path, sizeof(auto_path), kind, kseq)) {
            auto_path[0] = '\0';
            if (totals) /* prof_leak's summary needs no file */
                dump_write(NULL, (uint64_t)1 << sampler_lg(), what, totals);
            return EFAULT;
        }
        path = auto_path;
    }
    return dump_write(path, (uint64_t)1 << sampler_lg(), what, totals) ? EFAULT : 0;
}

/* A dump makes system calls that are cancellation points (open, read,
 * write, close): a thread cancelled there would never release dump_lock,
 * and would leave its buffer and temporary file behind.  So a dump runs
 * with cancellation off; a request made meanwhile acts when prof.dump
 * returns (manual_dump), or, for a dump made inside malloc (which is no
 * cancellation point), at the thread's next cancellation point.  Returns
 * the state to restore. */
static int dump_begin(void)
{
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    sa_lock(&dump_lock);
    return old;
}

static void dump_end(int cancel_state)
{
    sa_unlock(&dump_lock);
    pthread_setcancelstate(cancel_state, NULL);
}

/* dump_end, then the prof_dump hook told that `path` was written.  An
 * automatic name is copied first: the next dump reuses auto_path as soon
 * as the lock is free.  Out of line: the copy is on the stack only when a
 * hook is set (an automatic dump runs inside malloc). */
__attribute__((noinline)) static void dump_end_telling(int cancel_state, prof_dump_hook_t hook,
                                                       const char *path)
{
    char name[sizeof(auto_path)];
    if (path == auto_path) {
        memcpy(name, auto_path, sizeof(name));
        path = name;
    }
    dump_end(cancel_state);
    hook(path);
}

/* dump_end after a dump that returned `rc` on `path` (NULL: auto_path),
 * telling the prof_dump hook if it wrote the file. */
static void dump_end_after(int cancel_state, int rc, const char *path)
{
    prof_dump_hook_t hook = prof_dump_hook_get();
    if (rc == 0 && hook)
        dump_end_telling(cancel_state, hook, path ? path : auto_path);
    else
        dump_end(cancel_state);
}

static int manual_dump(const char *path, enum dump_kind what)
{
    if (!opt_prof)
        return ENOENT;
    int state = dump_begin();
    int rc = dump_locked(path, 'm', &mseq, what, NULL);
    dump_end_after(state, rc, path);
    if (state == PTHREAD_CANCEL_ENABLE)
        pthread_testcancel(); /* nothing held now */
    return rc;
}

int prof_dump(const char *path) { return manual_dump(path, DUMP_LIVE); }
int prof_dump_fragmentation(const char *path) { return manual_dump(path, DUMP_FRAGMENTATION); }
int prof_dump_peak(const char *path) { return manual_dump(path, DUMP_PEAK); }
bool prof_residency(void) { return dump_residency_available(); }

static void auto_dump(char kind, uint64_t *kseq)
{
    int state = dump_begin();
    int rc = dump_locked(NULL, kind, kseq, DUMP_LIVE, NULL);
    dump_end_after(state, rc, NULL);
}

static const char *plural(unsigned long long n) { return n == 1 ? "" : "s"; }

/* prof_leak: what the final dump holds, in jemalloc's words and format.
 * The figures are the dump's own unbiased sums (each sample by its own
 * size and rate), where jemalloc scales the totals by their mean size. */
static void report_leaks(const struct dump_totals *t, const char *path, bool written)
{
    unsigned long long bytes = t->bytes > 0 ? (unsigned long long)(t->bytes + 0.5) : 0;
    unsigned long long objects = t->objects > 0 ? (unsigned long long)(t->objects + 0.5) : 0;
    if (!bytes)
        return; /* nothing live: no summary, as jemalloc */
    sa_report("Leak approximation summary: ~%llu byte%s, ~%llu object%s, >= %zu context%s", bytes,
              plural(bytes), objects, plural(objects), t->stacks, plural(t->stacks));
    if (written) /* jeprof reads heap_v2, pprof profile.proto */
        sa_report("Run %s on \"%s\" for leak detail", opt_prof_format[0] == 'p' ? "pprof" : "jeprof",
                  path);
    else if (path[0])
        sa_report("No leak detail: the final dump \"%s\" could not be written", path);
    else
        sa_report("No leak detail: no name for the final dump (prof.prefix)");
    if (opt_prof_leak_error) {
        sa_report("Exiting with error code because memory leaks were detected");
        /* _exit: exit() again from an atexit handler is undefined.  What
         * the program left in stdout's buffer is written first, as exit()
         * would have done after the handlers, unless another thread holds
         * the stream: fflush would wait for it, where exit()'s own flush
         * takes no lock.  Other streams' buffers are lost, as in jemalloc. */
        if (ftrylockfile(stdout) == 0) {
            fflush_unlocked(stdout);
            funlockfile(stdout);
        }
        _exit(1);
    }
}

static void final_dump(void)
{
    /* The final dump's name, for the summary made after dump_lock is
     * released (it may flush stdio, which may allocate and so dump). */
    SA_BSS_APART static char final_path[sizeof(auto_path)], peak_path[sizeof(auto_path)];
    struct dump_totals leaks = {.taken = false}; /* stays so if no dump was attempted */
    int state = dump_begin();
    bool written = dump_locked(NULL, 'f', NULL, DUMP_LIVE, opt_prof_leak ? &leaks : NULL) == 0;
    memcpy(final_path, auto_path, sizeof(final_path));
    bool peak_written = false;
    if (opt_prof_final_peak) {
        peak_written = dump_locked(NULL, 'p', NULL, DUMP_PEAK, NULL) == 0;
        memcpy(peak_path, auto_path, sizeof(peak_path));
    }
    dump_end(state);
    prof_dump_hook_t hook = prof_dump_hook_get();
    if (hook && written)
        hook(final_path);
    if (hook && peak_written)
        hook(peak_path);
    if (opt_prof_leak && leaks.taken)
        report_leaks(&leaks, final_path, written);
}

int prof_prefix_set(const char *p)
{
    if (!opt_prof)
        return ENOENT;
    if (!p || strlen(p) >= sizeof(prefix))
        return EFAULT;
    sa_lock(&dump_lock);
    memcpy(prefix, p, strlen(p) + 1);
    sa_unlock(&dump_lock);
    return 0;
}

const char *prof_prefix_get(void) { return prefix; }

void prof_after_sample(struct tcache *tc)
{
    uint64_t interval = prof_interval_get();
    if (!interval)
        return;
    uint64_t allocated = sampler_thread_allocated(tc);
    uint64_t total = __atomic_add_fetch(&alloc_total, allocated - tc->prof.reported, __ATOMIC_RELAXED);
    tc->prof.reported = allocated;
    uint64_t due = __atomic_load_n(&next_interval, __ATOMIC_RELAXED);
    if (total < due)
        return;
    uint64_t next = total - total % interval + interval;
    if (__atomic_compare_exchange_n(&next_interval, &due, next, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        auto_dump('i', &iseq);
}

void prof_maybe_gdump(void)
{
    if (!__atomic_load_n(&gdump, __ATOMIC_RELAXED))
        return;
    size_t mapped = pageheap_mapped_bytes(), high = __atomic_load_n(&gdump_high, __ATOMIC_RELAXED);
    if (mapped > high && __atomic_compare_exchange_n(&gdump_high, &high, mapped, false,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        auto_dump('u', &useq);
}

/* ---- fork ---- */

void prof_prefork(void)
{
    sa_lock(&dump_lock);
    sa_lock(&peak_lock);
    prof_recent_prefork();
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++)
        sa_polled_lock_unranked(&shards[i].lock); /* same rank: see lock.h */
    stack_prefork();
    sampled_pages_prefork();
}

void prof_postfork_parent(void)
{
    sampled_pages_postfork_parent();
    stack_postfork_parent();
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++)
        sa_polled_unlock_unranked(&shards[i].lock);
    prof_recent_postfork_parent();
    sa_unlock(&peak_lock);
    sa_unlock(&dump_lock);
}

void prof_postfork_child(void)
{
    sampled_pages_postfork_child();
    stack_postfork_child();
    for (unsigned i = 0; i < SAMPLE_SHARDS; i++) {
        sa_polled_lock_reset_unranked(&shards[i].lock);
        shard_threads[i] = 0; /* the parent's other threads are not here */
    }
    struct tcache *self = init_current_cache();
    if (self)
        shard_threads[self->prof.shard] = 1;
    prof_recent_postfork_child();
    sa_lock_reinit(&peak_lock);
    sa_lock_reinit(&dump_lock);
}
