/*
 * stack.c: stack capture and the sharded stack table (see stack.h).
 * Never calls malloc itself; backtrace() may, on its first call only, which
 * stack_warm_up() makes happen at start-up.
 */
#include "stack.h"

#include <execinfo.h>
#include <string.h>
#include <sys/auxv.h>

#include "lock.h"
#include "log.h"
#include "meta.h"
#include "prof.h"
#include "unwind.h"

#define SHARDS 64
#define BUCKETS_PER_SHARD 256
/* The first table: one page, until it holds FIRST_STACKS (below). */
#define FIRST_BUCKETS_PER_SHARD 8
#define FIRST_STACKS 512

/* Section bounds defined by the linker for salloc_text (see the Makefile). */
extern char __start_salloc_text[] __attribute__((visibility("hidden")));
extern char __stop_salloc_text[] __attribute__((visibility("hidden")));

/* A shard: its lock, and its hash chains, all NULL at start.  The chains
 * live apart from the locks so that they are .bss, not 128 KiB of .data
 * (file pages a process would fault in as soon as it touched a lock).
 * Chains only grow at their head, under the lock, and a record never
 * changes once published: lookups walk them without the lock. */
struct shard {
    sa_lock_t lock;
} SA_ALIGNED(SA_CACHELINE);

static struct shard shards[SHARDS] = {
    [0 ... SHARDS - 1] = {.lock = SA_LOCK_INITIALIZER(LOCK_RANK_STACKS)},
};
SA_BSS_APART static struct prof_stack *chains[SHARDS][BUCKETS_PER_SHARD];

/* The first stacks go to a table of one page, the rest to the whole one.
 * A hash spreads stacks over every page of the table it indexes: a small
 * profiled program's few dozen stacks touched 2 or 3 of the whole table's
 * 32 pages, where the first table takes one.  A program with more stacks
 * than FIRST_STACKS puts the rest in the whole table; their records stay
 * where they were published (lookups walk chains without the lock, and a
 * record never moves), so a lookup tries the first table's chain, then,
 * once it has filled (`grown`), the whole table's.  Both chains of a hash
 * are under its shard's lock. */
SA_BSS_APART static struct prof_stack *first_chains[SHARDS][FIRST_BUCKETS_PER_SHARD]
    SA_ALIGNED(4096);
static unsigned first_stacks; /* atomic: stacks in first_chains */
static bool grown;            /* atomic: new stacks go to `chains` */

static struct prof_stack **chain_of(uint64_t hash)
{
    return &chains[hash % SHARDS][(hash / SHARDS) % BUCKETS_PER_SHARD];
}

static struct prof_stack **first_chain_of(uint64_t hash)
{
    return &first_chains[hash % SHARDS][(hash / SHARDS) % FIRST_BUCKETS_PER_SHARD];
}

int stack_in_salloc(const void *addr)
{
    return (const char *)addr >= __start_salloc_text && (const char *)addr < __stop_salloc_text;
}

/* opt.prof_unwind, read once at start-up; WALK_DEFERRED until libc has
 * started in a static executable (stack_warm_up). */
enum walk { WALK_FAST, WALK_LIBGCC, WALK_CHECK, WALK_DEFERRED };
static enum walk walker, walker_chosen;
static bool constructed; /* salloc's constructor has run (walk_after_libc_start) */
static uint64_t truncated, mismatches; /* relaxed atomics */

/* Frames above salloc's own: the index of the first one not in salloc. */
static int first_outside(void *const *raw, int n)
{
    int first = 0;
    while (first < n && stack_in_salloc(raw[first]))
        first++;
    return first;
}

/* opt.prof_unwind:check: the walker's stack against backtrace()'s, for
 * the frames above salloc (salloc's own frames differ by the function that
 * called each).  The first few disagreements are reported, all counted.
 * Out of line: its buffer, inlined, was on every sample's stack (1.1 KB of
 * a sampled malloc's, which may run on a small signal or coroutine stack). */
__attribute__((noinline)) static void check_against_libgcc(void *const *raw, int n)
{
    void *ref[STACK_WALK_SLOTS];
    int m = backtrace(ref, STACK_WALK_SLOTS);
    int a = first_outside(raw, n), b = first_outside(ref, m);
    int len = n - a < m - b ? n - a : m - b;
    bool full = n == STACK_WALK_SLOTS || m == STACK_WALK_SLOTS; /* truncated */
    int bad = full || n - a == m - b ? -1 : len;
    for (int i = 0; i < len && bad < 0; i++)
        if (raw[a + i] != ref[b + i])
            bad = i;
    if (bad >= 0 && __atomic_fetch_add(&mismatches, 1, __ATOMIC_RELAXED) < 10)
        sa_message("prof_unwind:check: stacks differ at frame %d: walker %p (%d frames), "
                   "backtrace %p (%d frames)",
                   bad, bad < n - a ? raw[a + bad] : NULL, n - a,
                   bad < m - b ? ref[b + bad] : NULL, m - b);
}

/* By default a stack the walker cannot finish is kept as far as it got
 * (counted in prof.unwind_truncated): calling libgcc instead would mean
 * loading it, and its first load from inside a sample could wait for the
 * loader lock held by a thread that waits for this one; loaded at start-up
 * it costs every process about 300 KiB of resident memory for a case the
 * walker never meets in practice (a CFA expression, a frame over 1 MiB). */
unsigned stack_capture(void **frames)
{
    return stack_capture_from(NULL, frames);
}

unsigned stack_capture_from(const struct unwind_from *from, void **frames)
{
    void **raw = frames; /* the walk in place, salloc's frames dropped below */
    int n;
    if (unlikely(walker == WALK_DEFERRED))
        return 0;
    if (walker == WALK_LIBGCC) {
        n = backtrace(raw, STACK_WALK_SLOTS);
    } else {
        bool complete;
        n = (int)(from && from->pc && walker == WALK_FAST
                      ? unwind_capture_from(from, raw, STACK_WALK_SLOTS, &complete)
                      : unwind_capture(raw, STACK_WALK_SLOTS, &complete));
        if (!complete) {
            __atomic_fetch_add(&truncated, 1, __ATOMIC_RELAXED);
            if (walker == WALK_CHECK)
                n = backtrace(raw, STACK_WALK_SLOTS);
        } else if (walker == WALK_CHECK) {
            check_against_libgcc(raw, n);
        }
    }
    int first = first_outside(raw, n);
    unsigned depth = (unsigned)(n - first);
    if (depth > STACK_MAX_DEPTH)
        depth = STACK_MAX_DEPTH;
    memmove(frames, raw + first, depth * sizeof(void *));
    return depth;
}

bool stack_capture_would_replay(const struct unwind_from *from)
{
    return walker == WALK_FAST && unwind_memo_replays(from, STACK_WALK_SLOTS);
}

uint64_t stack_unwind_truncated(void) { return __atomic_load_n(&truncated, __ATOMIC_RELAXED); }
uint64_t stack_unwind_mismatches(void) { return __atomic_load_n(&mismatches, __ATOMIC_RELAXED); }

/* backtrace() loads libgcc on its first call: at start-up, never first
 * inside a sample.  The fast walker needs no warming up.  A walk here would
 * only read the unwind tables of whatever code made the first allocation
 * (the loader's start-up, libstdc++'s), which no sample's stack may ever
 * pass through, and the kernel maps file pages in 64 KiB windows around
 * each one read: 150 KiB more resident memory in a C++ program whose first
 * allocation came from libstdc++. */
static void load_libgcc(enum walk w)
{
    if (w != WALK_FAST) {
        void *frames[4];
        backtrace(frames, 4);
    }
}

void stack_warm_up(void)
{
    walker = !strcmp(opt_prof_unwind, "libgcc") ? WALK_LIBGCC
             : !strcmp(opt_prof_unwind, "check") ? WALK_CHECK
                                                 : WALK_FAST;
    /* A static executable (no program interpreter: AT_BASE 0) sets up
     * salloc at glibc's own start-up, whose first allocations come before
     * the loader's object lookup (_dl_find_object), which the walker and
     * libgcc's both use, is ready: a sample then read it half made and
     * crashed.  Stacks wait for salloc's constructor, which runs after;
     * samples due before fail (prof.samples_failed). */
    if (getauxval(AT_BASE) == 0 && !constructed) {
        walker_chosen = walker;
        walker = WALK_DEFERRED;
        return;
    }
    load_libgcc(walker);
}

__attribute__((constructor)) static void walk_after_libc_start(void)
{
    constructed = true;
    if (walker == WALK_DEFERRED) {
        /* Still deferred meanwhile: a static libgcc allocates inside its
         * first walk, holding its lock, and a sample of that allocation
         * walking with backtrace() again waited for that lock forever. */
        load_libgcc(walker_chosen);
        walker = walker_chosen;
    }
}

static uint64_t hash_frames(void *const *frames, unsigned depth)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ depth;
    for (unsigned i = 0; i < depth; i++) {
        h ^= (uintptr_t)frames[i];
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h;
}

/* The record of this stack in the chain from `head` on, or NULL. */
static struct prof_stack *find(struct prof_stack *head, uint64_t h, void *const *frames,
                               unsigned depth)
{
    for (struct prof_stack *st = head; st; st = st->next)
        if (st->hash == h && st->depth == depth &&
            !memcmp(st->frames, frames, depth * sizeof(void *)))
            return st;
    return NULL;
}

struct prof_stack *stack_intern(void *const *frames, unsigned depth)
{
    if (depth == 0) /* no stack to record (walks deferred, stack_capture) */
        return NULL;
    uint64_t h = hash_frames(frames, depth);
    struct prof_stack **first = first_chain_of(h), **whole = chain_of(h);
    /* Most samples come from stacks seen before: no lock for those.  A
     * stack published in the whole table was published after `grown`
     * was set; a lookup that missed it finds it under the lock. */
    struct prof_stack *first_head = __atomic_load_n(first, __ATOMIC_ACQUIRE);
    struct prof_stack *st = find(first_head, h, frames, depth);
    if (st)
        return st;
    struct prof_stack *whole_head = NULL;
    if (__atomic_load_n(&grown, __ATOMIC_ACQUIRE)) {
        whole_head = __atomic_load_n(whole, __ATOMIC_ACQUIRE);
        if ((st = find(whole_head, h, frames, depth)))
            return st;
    }
    struct shard *sh = &shards[h % SHARDS];
    sa_lock(&sh->lock);
    /* Added meanwhile, to either chain?  Not to the whole table's unless
     * it has grown, which a stack of this hash could only have seen
     * under this lock (so the whole table stays untouched till then). */
    if (*first != first_head)
        st = find(*first, h, frames, depth);
    if (!st && __atomic_load_n(&grown, __ATOMIC_RELAXED) && *whole != whole_head)
        st = find(*whole, h, frames, depth);
    if (!st && (st = meta_alloc(sizeof(*st) + depth * sizeof(void *), 16))) {
        bool to_whole = __atomic_load_n(&grown, __ATOMIC_RELAXED);
        struct prof_stack **chain = to_whole ? whole : first;
        st->hash = h;
        st->depth = depth;
        memcpy(st->frames, frames, depth * sizeof(void *));
        st->next = *chain;
        __atomic_store_n(chain, st, __ATOMIC_RELEASE); /* published whole */
        if (!to_whole && __atomic_add_fetch(&first_stacks, 1, __ATOMIC_RELAXED) >= FIRST_STACKS)
            __atomic_store_n(&grown, true, __ATOMIC_RELEASE);
    }
    sa_unlock(&sh->lock);
    return st;
}

static struct shard *shard_of(const struct prof_stack *st) { return &shards[st->hash % SHARDS]; }

/* The prof.reset epoch whose samples are counted: set before a reset takes
 * the shard locks to zero the counts, read under one.  So an add that reads
 * the old epoch ran before the zeroing of its shard, and one that runs
 * after sees the new epoch and counts only samples of it. */
static uint32_t accum_epoch = 1;

void stack_accum_add(struct prof_stack *st, size_t usable, uint64_t rate, uint32_t epoch)
{
    struct shard *sh = shard_of(st);
    sa_lock(&sh->lock);
    if (epoch != __atomic_load_n(&accum_epoch, __ATOMIC_RELAXED)) {
        sa_unlock(&sh->lock); /* published before a reset that forgot it */
        return;
    }
    struct stack_accum *g;
    for (g = st->accum; g; g = g->next)
        if (g->usable == usable && g->rate == rate)
            break;
    if (!g && (g = meta_alloc(sizeof(*g), 16))) {
        g->usable = usable;
        g->rate = rate;
        g->next = st->accum;
        st->accum = g;
    }
    if (g)
        g->count++;
    sa_unlock(&sh->lock);
}

/* Chain b of shard s, counting the first table's chains first: b below
 * FIRST_BUCKETS_PER_SHARD + BUCKETS_PER_SHARD. */
static struct prof_stack *shard_chain(unsigned s, unsigned b)
{
    return b < FIRST_BUCKETS_PER_SHARD ? first_chains[s][b]
                                       : chains[s][b - FIRST_BUCKETS_PER_SHARD];
}

void stack_accum_foreach(int (*fn)(const struct stack_accum *, struct prof_stack *, void *),
                         void *arg)
{
    for (unsigned s = 0; s < SHARDS; s++) {
        sa_lock(&shards[s].lock);
        for (unsigned b = 0; b < FIRST_BUCKETS_PER_SHARD + BUCKETS_PER_SHARD; b++)
            for (struct prof_stack *st = shard_chain(s, b); st; st = st->next)
                for (struct stack_accum *g = st->accum; g; g = g->next)
                    if (g->count && !fn(g, st, arg)) {
                        sa_unlock(&shards[s].lock);
                        return;
                    }
        sa_unlock(&shards[s].lock);
    }
}

void stack_accum_reset(uint32_t epoch)
{
    /* Never back, when two resets cross (as prof.c's forget_live): the
     * earlier one, finishing last, would count no sample until the next
     * reset; and it stops zeroing once the later one has begun. */
    uint32_t now = __atomic_load_n(&accum_epoch, __ATOMIC_RELAXED);
    do {
        if ((int32_t)(epoch - now) <= 0)
            return;
    } while (!__atomic_compare_exchange_n(&accum_epoch, &now, epoch, false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    /* Groups are kept (they are metadata), only their counts go. */
    for (unsigned s = 0; s < SHARDS; s++) {
        sa_lock(&shards[s].lock);
        if (__atomic_load_n(&accum_epoch, __ATOMIC_RELAXED) != epoch) {
            sa_unlock(&shards[s].lock);
            return;
        }
        for (unsigned b = 0; b < FIRST_BUCKETS_PER_SHARD + BUCKETS_PER_SHARD; b++)
            for (struct prof_stack *st = shard_chain(s, b); st; st = st->next)
                for (struct stack_accum *g = st->accum; g; g = g->next)
                    g->count = 0;
        sa_unlock(&shards[s].lock);
    }
}

void stack_prefork(void)
{
    for (unsigned s = 0; s < SHARDS; s++)
        sa_lock_unranked(&shards[s].lock); /* same rank: see lock.h */
}

void stack_postfork_parent(void)
{
    for (unsigned s = 0; s < SHARDS; s++)
        sa_unlock_unranked(&shards[s].lock);
}

void stack_postfork_child(void)
{
    for (unsigned s = 0; s < SHARDS; s++)
        sa_lock_reset_unranked(&shards[s].lock);
}
