/*
 * sampler.c: exponential intervals, per-thread PRNG and the slow-path
 * accounting (see sampler.h for the argument).  No locks: global settings
 * are atomics, per-thread state is the owning thread's.
 */
#include "sampler.h"

#include "fmath.h"
#include "os.h"
#include "tcache.h"
#include "thread_peak.h"

/* The rate's lg in the low byte, "sampling on" in CONF_ON: one word, each
 * setter changing only its own part with a compare-and-swap, so that
 * prof.active and prof.lg_sample written at once by two threads keep both
 * writes (as separate words each setter wrote whole, a write of one could
 * put back the other's old value). */
#define CONF_LG_MASK 0xffu
#define CONF_ON 0x100u
static uint32_t global_conf = 19 | CONF_ON;
static uint32_t global_gen = 1;

static void conf_update(uint32_t keep, uint32_t set)
{
    uint32_t old = __atomic_load_n(&global_conf, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&global_conf, &old, (old & keep) | set, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    /* After the word: a thread that sees the new generation sees it. */
    __atomic_fetch_add(&global_gen, 1, __ATOMIC_RELEASE);
}

void sampler_set_lg(size_t lg)
{
    conf_update(CONF_ON, (uint32_t)(lg > SAMPLER_MAX_LG ? SAMPLER_MAX_LG : lg));
}

void sampler_set_on(bool on) { conf_update(CONF_LG_MASK, on ? CONF_ON : 0); }

size_t sampler_lg(void) { return __atomic_load_n(&global_conf, __ATOMIC_RELAXED) & CONF_LG_MASK; }

bool sampler_on(void) { return __atomic_load_n(&global_conf, __ATOMIC_RELAXED) & CONF_ON; }

/* xorshift64*: fast, 64-bit state, good enough for interval draws. */
static uint64_t next_random(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double sampler_uniform(uint64_t *state)
{
    return (double)((next_random(state) >> 11) + 1) * 0x1.0p-53;
}

_Static_assert(SA_ZIG_STRIPS == 256, "a draw's top 8 bits pick a strip");

/* A ziggurat point from one 64-bit draw: its strip (the top 8 bits) and
 * its place in the strip (53 more). */
static unsigned zig_strip(uint64_t u) { return (unsigned)(u >> 56); }
static uint64_t zig_place(uint64_t u) { return (u >> 3) & (((uint64_t)1 << 53) - 1); }

/* The ziggurat's rare cases (about 1.2% of draws): draw `u` put its point
 * outside the part of its strip wholly under e^-x.  In the base strip it
 * is in the tail beyond r (exponential again, shifted: memoryless); in the
 * others, under the curve with probability given by the wedge test;
 * rejected points draw again. */
static __attribute__((noinline)) double unit_exponential_edge(uint64_t *state, uint64_t u)
{
    for (;;) {
        unsigned i = zig_strip(u);
        double x = (double)zig_place(u) * sa_zig[i].scale;
        if (i == 0)
            return SA_ZIG_R - sa_ln(sampler_uniform(state));
        double y = sa_zig_f[i] + sampler_uniform(state) * (sa_zig_f[i - 1] - sa_zig_f[i]);
        if (y < sa_exp_neg(-x))
            return x;
        u = next_random(state);
        i = zig_strip(u);
        if (zig_place(u) < sa_zig[i].bound)
            return (double)zig_place(u) * sa_zig[i].scale;
    }
}

/* An exponential variate of mean 1, by the ziggurat (fmath_tables.h):
 * 98.8% of points need no more than a compare and a multiply, where a
 * logarithm per variate took 76 instructions (callgrind). */
static double unit_exponential(uint64_t *state)
{
    uint64_t u = next_random(state);
    unsigned i = zig_strip(u);
    uint64_t m = zig_place(u);
    if (__builtin_expect(m < sa_zig[i].bound, 1))
        return (double)m * sa_zig[i].scale;
    return unit_exponential_edge(state, u);
}

/* A unit exponential as an interval of mean `rate` bytes. */
static int64_t scale(double unit, uint64_t rate)
{
    double x = unit * (double)rate;
    return x >= 0x1.0p62 ? (int64_t)1 << 62 : (int64_t)x;
}

int64_t sampler_draw(uint64_t *state, uint64_t rate) { return scale(unit_exponential(state), rate); }

static int64_t remaining(const struct tcache *tc) { return tc->bytes_until_sample + tc->prof.carry; }

/* The fast path's window: SAMPLER_CHECKIN, 0 under opt.check, or
 * NEVER_CHECKIN under opt.prof false; and the distance to the next visit
 * when the thread is not sampling. */
#define NEVER_CHECKIN ((int64_t)1 << 62)
static int64_t checkin = SAMPLER_CHECKIN;
static int64_t idle_interval = SAMPLER_CHECKIN;

void sampler_check_every_allocation(void) { checkin = 0; }

void sampler_never_sample(void)
{
    idle_interval = NEVER_CHECKIN;
    if (checkin)
        checkin = NEVER_CHECKIN;
}

/* The thread's window: `checkin`, or its own if that is shorter. */
static int64_t window_of(const struct tcache *tc)
{
    int64_t own = tc->prof.peak_window;
    return own && own < checkin ? own : checkin;
}

/* Puts `left` bytes of interval in place: at most the window visible to
 * the fast path, the rest in carry. */
static void set_remaining(struct tcache *tc, int64_t left)
{
    int64_t window = window_of(tc);
    tc->bytes_until_sample = left < window ? left : window;
    tc->prof.carry = left - tc->bytes_until_sample;
}

void sampler_set_window(struct tcache *tc, int64_t window)
{
    tc->prof.peak_window = window;
    set_remaining(tc, remaining(tc));
}

/* Starts a new interval (or, with sampling off, a check-in distance),
 * keeping thread.allocated continuous. */
static void new_interval(struct tcache *tc)
{
    uint64_t allocated = tc->prof.alloc_base - (uint64_t)remaining(tc);
    int64_t next = idle_interval;
    tc->prof.rate = 0;
    uint32_t conf = __atomic_load_n(&global_conf, __ATOMIC_RELAXED);
    if (tc->prof.active && (conf & CONF_ON)) {
        tc->prof.rate = (uint64_t)1 << (conf & CONF_LG_MASK);
        /* The variate drawn one interval ahead: nothing waits for the one
         * drawn now (a rare ziggurat edge case's logarithm overlaps the
         * sample's other work), and the intervals stay independent draws. */
        next = scale(tc->prof.next_unit, tc->prof.rate);
        tc->prof.next_unit = unit_exponential(&tc->prof.prng);
    }
    set_remaining(tc, next);
    tc->prof.alloc_base = allocated + (uint64_t)next;
}

void sampler_refresh(struct tcache *tc)
{
    uint32_t gen = __atomic_load_n(&global_gen, __ATOMIC_ACQUIRE);
    if (tc->prof.gen != gen) {
        tc->prof.gen = gen;
        new_interval(tc);
    }
}

void sampler_thread_init(struct tcache *tc)
{
    static uint64_t threads;
    uint64_t n = __atomic_add_fetch(&threads, 1, __ATOMIC_RELAXED);
    /* splitmix64 of (cache address, time, thread count): independent
     * streams per thread, never zero (xorshift's one bad state). */
    uint64_t z = (uintptr_t)tc ^ os_now_ns() ^ (n * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    tc->prof.prng = z ? z : 1;
    tc->prof.next_unit = unit_exponential(&tc->prof.prng);
    tc->prof.gen = 0; /* forces the first draw */
    tc->bytes_until_sample = 0;
    tc->prof.carry = 0;
    tc->prof.alloc_base = 0;
    sampler_refresh(tc);
}

uint64_t sampler_account(struct tcache *tc, size_t usable, size_t gain)
{
    sampler_refresh(tc);
    tc->bytes_until_sample -= (int64_t)usable;
    if (tc->bytes_until_sample >= 0)
        return 0;
    if (unlikely(tc->prof.peak_window)) /* a window's end: the peak looks */
        thread_peak_observe(tc, gain);
    int64_t left = remaining(tc);
    uint64_t rate = tc->prof.rate;
    if (left >= 0 && rate) { /* a chunk boundary, not the interval's end */
        set_remaining(tc, left);
        return 0;
    }
    new_interval(tc); /* sampled, or a check-in with sampling off */
    return rate;
}

uint64_t sampler_thread_allocated(const struct tcache *tc)
{
    return tc->prof.alloc_base - (uint64_t)remaining(tc);
}
