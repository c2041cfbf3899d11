/*
 * test_dump.c: heap_v2 dumps, parsed back the way jeprof reads them.
 *
 *   - the format: header, totals, records, MAPPED_LIBRARIES; no temporary
 *     file left behind; an unwritable path fails and leaves nothing, and
 *     never damages an older dump at the same path;
 *   - unbiasedness end to end: known call sites (many 16-byte objects, a
 *     few 8 MiB ones, a site mixing 8-byte and 64 KiB objects, objects of
 *     exactly R bytes), dumped ROUNDS times after prof.reset: each site's
 *     mean estimate (jeprof's own rescaling of the written counts) lies
 *     within 4 standard errors of the truth, and its spread matches the
 *     theoretical standard deviation sqrt(sum Z^2 e^(-Z/R) / (1 - e^(-Z/R)));
 *   - a rate change between samples and dump keeps the estimate unbiased;
 *   - every sample names its own stack when a thread samples one site
 *     through two callers and two sites through one (a replayed walk
 *     reuses the stack record of the walk it replays, prof.c);
 *   - MAPPED_LIBRARIES stays sorted and free of overlaps while another
 *     thread splits and merges mappings (the kernel's maps file is read a
 *     page at a time and can go back between reads).
 *
 * The sites live in their own sections, so a record belongs to a site when
 * its first frame (the return address into the caller of malloc) lies in
 * that section.  Statistical bounds: 6 SE on the mean (below 1e-8 per
 * check, the binomials' skew included) and a generous chi-square band on
 * the spread, [0.35, 1.9] times the theory's sd (below 1e-9, for the small
 * site's few samples a round too): the whole file's false-failure odds are
 * below 1e-7 a run.  (At 5 SE and [0.45, 1.65] they were 4e-6.)
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dump.h"
#include "log.h"
#include "prof.h"
#include "sites.h"
#include "stack.h"
#include "unit.h"
#include "unwind.h"

#define ROUNDS 40
#define LG 16 /* R = 64 KiB: enough samples per round for a quick test */

SECTION_BOUNDS(small)
SECTION_BOUNDS(huge)
SECTION_BOUNDS(mixed)
SECTION_BOUNDS(exact)
SECTION_BOUNDS(alt_a)
SECTION_BOUNDS(alt_b)
SECTION_BOUNDS(via_x)
SECTION_BOUNDS(via_y)


SITE(small) void *site_small(void) { CALL_MALLOC(16); }
SITE(huge) void *site_huge(void) { CALL_MALLOC((size_t)8 << 20); }
SITE(mixed) void *site_mixed(size_t n) { CALL_MALLOC(n); }
SITE(exact) void *site_exact(void) { CALL_MALLOC((size_t)1 << LG); }
SITE(alt_a) void *site_alt_a(void) { CALL_MALLOC(64); }
SITE(alt_b) void *site_alt_b(void) { CALL_MALLOC(64); }
/* Two callers of a site, with frames of one size: the site's malloc call
 * starts at one pc and rsp through either, and the stacks differ only in
 * the return address into the caller. */
#define CALL_SITE(site)                                                        \
    do {                                                                       \
        void *p_ = (site)();                                                   \
        __asm__ volatile("" : : "r"(p_) : "memory");                           \
        return p_;                                                             \
    } while (0)
SITE(via_x) void *via_x(void *(*site)(void)) { CALL_SITE(site); }
SITE(via_y) void *via_y(void *(*site)(void)) { CALL_SITE(site); }

enum { S_SMALL, S_HUGE, S_MIXED, S_EXACT, NSITES };
static const char *site_names[NSITES] = {"small", "huge", "mixed", "exact"};

static int site_of(uintptr_t a)
{
    if (IN_SECTION(small, a)) return S_SMALL;
    if (IN_SECTION(huge, a)) return S_HUGE;
    if (IN_SECTION(mixed, a)) return S_MIXED;
    if (IN_SECTION(exact, a)) return S_EXACT;
    return -1;
}

struct estimate {
    double objects[NSITES], bytes[NSITES];
    unsigned long long header_rate;
    bool has_maps;
};

/* Reads a heap_v2 file as jeprof does: for each record's t* line, scale
 * (n, s) by 1 / (1 - exp(-(s/n)/R)); credit it to the site of frame 0. */
static void parse_dump(const char *path, struct estimate *e)
{
    memset(e, 0, sizeof(*e));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    assert_true(getline(&line, &cap, f) > 0);
    assert_int_equal(sscanf(line, "heap_v2/%llu", &e->header_rate), 1);
    double rate = (double)e->header_rate;
    int site = -2; /* before the first record */
    while (getline(&line, &cap, f) > 0) {
        if (!strncmp(line, "MAPPED_LIBRARIES:", 17)) {
            e->has_maps = true;
            break;
        }
        if (line[0] == '@') {
            unsigned long long first = 0;
            assert_int_equal(sscanf(line, "@ %llx", &first), 1);
            site = site_of((uintptr_t)first);
            continue;
        }
        unsigned long long n, s, an, as;
        if (site >= 0 && sscanf(line, "  t*: %llu: %llu [%llu: %llu]", &n, &s, &an, &as) == 4 && n) {
            double scale = 1 / (1 - exp(-((double)s / n) / rate));
            e->objects[site] += n * scale;
            e->bytes[site] += s * scale;
        }
    }
    free(line);
    fclose(f);
}

static char dump_path[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dump_path, sizeof(dump_path), "/tmp/salloc_test_dump.%d.heap", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(dump_path);
    return 0;
}

static void test_dump_format_and_bad_paths(void **state)
{
    (void)state;
    prof_reset(LG);
    void *keep[64];
    for (int i = 0; i < 64; i++)
        keep[i] = site_exact(); /* p = 0.63 each: some samples for sure */
    assert_int_equal(prof_dump(dump_path), 0);
    struct estimate e;
    parse_dump(dump_path, &e);
    assert_int_equal(e.header_rate, 1u << LG);
    assert_true(e.has_maps);
    assert_true(e.objects[S_EXACT] > 10);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", dump_path, (int)getpid());
    assert_int_equal(access(tmp, F_OK), -1); /* the temporary is gone */

    /* Unwritable places: EFAULT, nothing created, the old dump intact. */
    struct stat before, after;
    assert_int_equal(stat(dump_path, &before), 0);
    assert_int_equal(prof_dump("/nonexistent-dir/x.heap"), EFAULT);
    assert_int_equal(prof_dump("/proc/version"), EFAULT); /* rename over it fails */
    assert_int_equal(prof_dump("/tmp"), EFAULT);          /* a directory */
    assert_int_equal(prof_dump(""), EFAULT);
    assert_int_equal(stat(dump_path, &after), 0);
    assert_int_equal(before.st_size, after.st_size);
    for (int i = 0; i < 64; i++)
        free(keep[i]);
}

/* A link planted at a dump's temporary name (<path>.tmp.<pid>) is not
 * followed: the file it names keeps its contents, and the dump lands at
 * the path.  The temporary was once opened through it and truncated. */
static void test_dump_temporary_name_link_not_followed(void **state)
{
    (void)state;
    char victim[300], tmp[300];
    snprintf(victim, sizeof(victim), "%s.victim", dump_path);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", dump_path, (int)getpid());
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("victim\n", f);
    fclose(f);
    unlink(tmp);
    assert_int_equal(symlink(victim, tmp), 0);
    assert_int_equal(prof_dump(dump_path), 0);
    char text[16] = "";
    f = fopen(victim, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    assert_string_equal(text, "victim\n");
    struct stat st;
    assert_int_equal(lstat(dump_path, &st), 0);
    assert_true(S_ISREG(st.st_mode)); /* the dump, not the link renamed */
    assert_int_equal(lstat(tmp, &st), -1);
    unlink(victim);
}

/* A process that cannot open /proc/self/maps (here: no descriptor left
 * after the dump's own file) writes no maps section at all, blank line
 * included, as the format asks; an empty one once said the process had no
 * mappings. */
static void test_dump_without_maps_has_no_section(void **state)
{
    (void)state;
    prof_reset(LG);
    void *keep[64];
    for (int i = 0; i < 64; i++)
        keep[i] = site_exact();
    unlink(dump_path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        struct rlimit one_file = {4, 4}; /* 0, 1, 2 and the dump's */
        _exit(setrlimit(RLIMIT_NOFILE, &one_file) == 0 && prof_dump(dump_path) == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct estimate e;
    parse_dump(dump_path, &e);
    assert_false(e.has_maps);
    assert_true(e.objects[S_EXACT] > 10);
    FILE *f = fopen(dump_path, "r");
    assert_non_null(f);
    char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    assert_null(strstr(text, "MAPPED_LIBRARIES"));
    assert_true(n > 2 && text[n - 1] == '\n' && text[n - 2] != '\n'); /* no blank line at the end */
    for (int i = 0; i < 64; i++)
        free(keep[i]);
}

/* A dump's writes go on after a signal that interrupts one (a handler
 * installed without SA_RESTART, a write blocked on a full pipe, or on NFS):
 * they once failed the dump.  Here the sink is a pipe whose reader waits
 * 200 ms, and a timer's signal comes at 50 ms. */
static void on_alarm(int sig) { (void)sig; }

struct pipe_reader {
    int fd;
    size_t got;
};

static void *read_pipe_later(void *arg)
{
    struct pipe_reader *r = arg;
    struct timespec wait = {0, 200 * 1000 * 1000};
    nanosleep(&wait, NULL);
    char buf[4096];
    ssize_t k;
    while ((k = read(r->fd, buf, sizeof(buf))) > 0)
        r->got += (size_t)k;
    return NULL;
}

static void test_dump_writes_resume_after_a_signal(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    struct sigaction sa = {.sa_handler = on_alarm}, old_sa; /* no SA_RESTART */
    assert_int_equal(sigaction(SIGALRM, &sa, &old_sa), 0);
    struct pipe_reader reader = {fds[0], 0};
    pthread_t t;
    sigset_t alarm, old_mask; /* the signal for this thread: the reader's blocks it */
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm, &old_mask);
    assert_int_equal(pthread_create(&t, NULL, read_pipe_later, &reader), 0);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    struct itimerval at = {{0, 0}, {0, 50 * 1000}};
    assert_int_equal(setitimer(ITIMER_REAL, &at, NULL), 0);
    enum { TOTAL = 256 << 10 };
    static char chunk[4096], buf[4096]; /* writes of a pipe's atomic size */
    memset(chunk, 'x', sizeof(chunk));
    struct outbuf o;
    outbuf_init(&o, buf, sizeof(buf), outbuf_fd_sink, &fds[1]);
    for (size_t n = 0; n < TOTAL; n += sizeof(chunk))
        outbuf_bytes(&o, chunk, sizeof(chunk));
    bool ok = outbuf_flush(&o);
    close(fds[1]);
    pthread_join(t, NULL);
    close(fds[0]);
    sigaction(SIGALRM, &old_sa, NULL);
    assert_true(ok);
    assert_int_equal(reader.got, TOTAL);
}

/* Samples taken while a dump's buffer is being mapped, more than the room
 * it leaves for them (1024): all in the dump.  The copy once stopped at the
 * buffer's end, and the dump left them out and reported success.  The
 * buffer's mapping is where they come in: the first mmap of the dump. */
enum { EARLY = 100, LATE = 1100 };
static void *late_blocks[LATE];
static bool late_armed;

static void *mmap_after_late_samples(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (late_armed) {
        late_armed = false;
        for (int i = 0; i < LATE; i++)
            late_blocks[i] = malloc(256); /* R = 1 byte: sampled but with e^-256 */
    }
    return mmap(addr, len, prot, flags, fd, off);
}

/* The raw sample count of a heap_v2 dump: its records' "t*: n" summed. */
static unsigned long long dump_samples(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    unsigned long long total = 0, n, s, an, as;
    bool in_record = false; /* the totals line before the first record is no record's */
    while (getline(&line, &cap, f) > 0 && strncmp(line, "MAPPED_LIBRARIES:", 17)) {
        in_record |= line[0] == '@';
        if (in_record && sscanf(line, "  t*: %llu: %llu [%llu: %llu]", &n, &s, &an, &as) == 4)
            total += n;
    }
    free(line);
    fclose(f);
    return total;
}

static void test_dump_keeps_samples_taken_meanwhile(void **state)
{
    (void)state;
    prof_reset(0); /* R = 1 byte */
    void *early[EARLY];
    for (int i = 0; i < EARLY; i++)
        early[i] = malloc(256);
    late_armed = true;
    os_syscalls.mmap = mmap_after_late_samples;
    int rc = prof_dump(dump_path);
    os_syscalls.mmap = mmap;
    assert_int_equal(rc, 0);
    assert_false(late_armed);
    size_t live = prof_sample_count();
    assert_true(live >= EARLY + LATE);
    assert_int_equal(dump_samples(dump_path), live);
    for (int i = 0; i < EARLY; i++)
        free(early[i]);
    for (int i = 0; i < LATE; i++)
        free(late_blocks[i]);
    prof_reset(LG);
}

/* One round: allocate the known workload, dump, parse, free. */
static void one_round(struct estimate *e, double truth_obj[NSITES], double truth_bytes[NSITES])
{
    enum { N_SMALL = 20000, N_HUGE = 4, N_MIXED = 200, N_EXACT = 50 };
    static void *small[N_SMALL], *huge[N_HUGE], *mixed[N_MIXED], *exact[N_EXACT];
    prof_reset(LG);
    memset(truth_obj, 0, NSITES * sizeof(double));
    memset(truth_bytes, 0, NSITES * sizeof(double));
    for (int i = 0; i < N_SMALL; i++)
        small[i] = site_small();
    for (int i = 0; i < N_HUGE; i++)
        huge[i] = site_huge();
    for (int i = 0; i < N_MIXED; i++)
        mixed[i] = site_mixed(i % 2 ? 8 : 65536);
    for (int i = 0; i < N_EXACT; i++)
        exact[i] = site_exact();
    void **all[NSITES] = {small, huge, mixed, exact};
    int counts[NSITES] = {N_SMALL, N_HUGE, N_MIXED, N_EXACT};
    for (int s = 0; s < NSITES; s++)
        for (int i = 0; i < counts[s]; i++) {
            truth_obj[s] += 1;
            truth_bytes[s] += malloc_usable_size(all[s][i]);
        }
    assert_int_equal(prof_dump(dump_path), 0);
    parse_dump(dump_path, e);
    for (int s = 0; s < NSITES; s++)
        for (int i = 0; i < counts[s]; i++)
            free(all[s][i]);
}

/* sqrt(sum Z^2 e^(-Z/R) / (1 - e^(-Z/R))) over the site's objects: the
 * standard deviation of the bytes estimate (seeds/001). */
static double theory_sd_bytes(int site)
{
    double r = 1 << LG, v = 0;
    struct { double z; int n; } parts[NSITES][2] = {
        {{16, 20000}, {0, 0}}, {{8 << 20, 4}, {0, 0}}, {{8, 100}, {65536, 100}}, {{65536, 50}, {0, 0}}};
    for (int k = 0; k < 2; k++) {
        double z = parts[site][k].z;
        if (z > 0)
            v += parts[site][k].n * z * z * exp(-z / r) / -expm1(-z / r);
    }
    return sqrt(v);
}

static void test_dump_unbiased_end_to_end(void **state)
{
    (void)state;
    double sum[NSITES] = {0}, sumsq[NSITES] = {0}, osum[NSITES] = {0};
    double truth_obj[NSITES], truth_bytes[NSITES];
    for (int r = 0; r < ROUNDS; r++) {
        struct estimate e;
        one_round(&e, truth_obj, truth_bytes);
        for (int s = 0; s < NSITES; s++) {
            sum[s] += e.bytes[s];
            sumsq[s] += e.bytes[s] * e.bytes[s];
            osum[s] += e.objects[s];
        }
    }
    for (int s = 0; s < NSITES; s++) {
        double mean = sum[s] / ROUNDS;
        double sd = sqrt(fmax(0, sumsq[s] / ROUNDS - mean * mean) * ROUNDS / (ROUNDS - 1));
        double theory = theory_sd_bytes(s), se = theory / sqrt(ROUNDS);
        fprintf(stderr, "# site %-5s truth %10.0f B  mean %12.1f B  sd %10.1f (theory %10.1f)  objects %.1f of %.0f\n",
                site_names[s], truth_bytes[s], mean, sd, theory, osum[s] / ROUNDS, truth_obj[s]);
        if (theory < 1e-6 * truth_bytes[s]) { /* every object sampled: exact */
            assert_true(fabs(mean - truth_bytes[s]) <= 1e-6 * truth_bytes[s]);
            continue;
        }
        if (fabs(mean - truth_bytes[s]) > 6 * se)
            fail_msg("site %s: mean %.1f, truth %.1f, 6 SE = %.1f", site_names[s], mean,
                     truth_bytes[s], 6 * se);
        /* sd^2 (ROUNDS-1)/theory^2 ~ chi-square(39): outside [0.35, 1.9]
         * for sd/theory has probability below 1e-9. */
        if (sd < 0.35 * theory || sd > 1.9 * theory)
            fail_msg("site %s: spread %.1f, theory %.1f", site_names[s], sd, theory);
    }
}

/* Samples taken at one rate and dumped at another stay unbiased. */
static void test_dump_rate_change_keeps_estimate(void **state)
{
    (void)state;
    enum { N = 4000 };
    static void *objs[2 * N];
    double total = 0, truth = 0;
    for (int r = 0; r < ROUNDS; r++) {
        prof_reset(12);
        for (int i = 0; i < N; i++)
            objs[i] = site_mixed(4096); /* Z = R: p = 0.63 */
        prof_lg_sample_set(LG);            /* header rate differs from the samples' */
        for (int i = N; i < 2 * N; i++)
            objs[i] = site_mixed(4096);    /* p = 0.06 */
        assert_int_equal(prof_dump(dump_path), 0);
        struct estimate e;
        parse_dump(dump_path, &e);
        assert_int_equal(e.header_rate, 1u << LG);
        total += e.bytes[S_MIXED];
        truth = 2.0 * N * 4096;
        for (int i = 0; i < 2 * N; i++)
            free(objs[i]);
    }
    double mean = total / ROUNDS;
    double var = N * 4096.0 * 4096 * (exp(-1.0) / -expm1(-1.0) +
                                      exp(-4096.0 / 65536) / -expm1(-4096.0 / 65536));
    double se = sqrt(var / ROUNDS);
    fprintf(stderr, "# rate change: truth %.0f mean %.1f (6 SE %.1f)\n", truth, mean, 6 * se);
    assert_true(fabs(mean - truth) <= 6 * se + 0.001 * truth);
}

static int sum_accumulated(const struct stack_accum *g, struct prof_stack *st, void *arg)
{
    (void)st;
    *(uint64_t *)arg += g->count;
    return 1;
}

static uint64_t accumulated_samples(void)
{
    uint64_t n = 0;
    stack_accum_foreach(sum_accumulated, &n);
    return n;
}

static void reset_once(void)
{
    prof_test_before_accum = NULL;
    prof_reset(0);
}

/* A prof.reset between a sample's publication and its accumulated count:
 * the sample is of the epoch the reset forgot, so it counts in neither the
 * live view nor the accumulated one.  It once counted as accumulated after
 * the reset.  A sample after the reset counts. */
static void test_dump_reset_forgets_a_sample_being_counted(void **state)
{
    (void)state;
    bool saved = opt_prof_accum;
    opt_prof_accum = true;
    prof_reset(0); /* R = 1 byte: every block is sampled */
    prof_test_before_accum = reset_once;
    void *p = malloc(64);
    assert_null(prof_test_before_accum); /* p was sampled, and the reset ran */
    assert_int_equal(accumulated_samples(), 0);
    assert_int_equal(prof_sample_count(), 0);
    void *q = malloc(64);
    assert_int_equal(accumulated_samples(), 1);
    assert_int_equal(prof_sample_count(), 1);
    free(q);
    free(p);
    opt_prof_accum = saved;
    prof_reset(LG);
}

/* Two prof.reset calls crossing: the later one's reset of the accumulated
 * counts done first, the earlier one's last.  The counted epoch stays the
 * later one's, as the live samples' does; it went back to the earlier one's,
 * and no sample counted until the next reset. */
static void test_dump_crossing_resets_keep_counting(void **state)
{
    (void)state;
    bool saved = opt_prof_accum;
    opt_prof_accum = true;
    prof_reset(0); /* R = 1 byte: every block is sampled */
    stack_accum_reset(1); /* the first epoch's: a reset older than any, done last */
    void *p = malloc(64);
    assert_int_equal(prof_sample_count(), 1);
    assert_int_equal(accumulated_samples(), 1);
    free(p);
    opt_prof_accum = saved;
    prof_reset(LG);
}

/* jeprof's --alloc_space view: with prof_accum, freed objects still count
 * in the [allocated-ever] pair, unbiased like the live one. */
static void test_dump_accumulated_counts(void **state)
{
    (void)state;
    enum { N = 20000 };
    static void *objs[N];
    bool saved = opt_prof_accum;
    opt_prof_accum = true;
    double total = 0;
    const int rounds = 20;
    for (int r = 0; r < rounds; r++) {
        prof_reset(LG);
        for (int i = 0; i < N; i++)
            objs[i] = site_mixed(2048);
        for (int i = 0; i < N; i++)
            free(objs[i]); /* nothing live: only the accumulated pair remains */
        assert_int_equal(prof_dump(dump_path), 0);
        FILE *f = fopen(dump_path, "r");
        char line[4096];
        int site = -1;
        double rate = 1 << LG;
        while (fgets(line, sizeof(line), f)) {
            unsigned long long n, s, an, as, first;
            if (line[0] == '@' && sscanf(line, "@ %llx", &first) == 1)
                site = site_of((uintptr_t)first);
            else if (site == S_MIXED &&
                     sscanf(line, "  t*: %llu: %llu [%llu: %llu]", &n, &s, &an, &as) == 4) {
                assert_int_equal(n, 0);
                if (an)
                    total += as / -expm1(-((double)as / an) / rate);
            }
        }
        fclose(f);
    }
    opt_prof_accum = saved;
    double mean = total / rounds, truth = N * 2048.0, x = 2048.0 / (1 << LG);
    double se = sqrt(N * 2048.0 * 2048 * exp(-x) / -expm1(-x) / rounds);
    fprintf(stderr, "# accumulated: truth %.0f mean %.1f (6 SE %.1f)\n", truth, mean, 6 * se);
    assert_true(fabs(mean - truth) <= 6 * se);
}

/* Splits a 256-page region into 256 mappings (every other page read-only)
 * and merges it back, over and over: /proc/self/maps changes under a reader. */
enum { CHURN_PAGES = 256 };
static atomic_bool churn_stop;

static void *churn_mappings(void *arg)
{
    char *region = arg;
    long page = sysconf(_SC_PAGESIZE);
    while (!atomic_load(&churn_stop)) {
        for (int i = 0; i < CHURN_PAGES; i += 2)
            mprotect(region + i * page, (size_t)page, PROT_READ);
        mprotect(region, (size_t)CHURN_PAGES * page, PROT_READ | PROT_WRITE);
    }
    return NULL;
}

/* Whether the MAPPED_LIBRARIES lines of the dump at `path` are sorted and
 * do not overlap; *lines gets how many there were. */
static bool maps_sorted(const char *path, int *lines)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4200];
    bool in_maps = false, ok = true;
    unsigned long last_end = 0;
    *lines = 0;
    while (fgets(line, sizeof(line), f)) {
        if (!in_maps) {
            in_maps = !strcmp(line, "MAPPED_LIBRARIES:\n");
            continue;
        }
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        ++*lines;
        if (lo < last_end || hi <= lo)
            ok = false;
        last_end = hi;
    }
    fclose(f);
    return ok;
}

static void test_dump_maps_sorted_while_mappings_change(void **state)
{
    (void)state;
    prof_reset(LG);
    long page = sysconf(_SC_PAGESIZE);
    char *region = mmap(NULL, (size_t)CHURN_PAGES * page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(region != MAP_FAILED);
    atomic_store(&churn_stop, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn_mappings, region), 0);
    int bad = 0, most = 0;
    for (int i = 0; i < 300; i++) {
        assert_int_equal(prof_dump(dump_path), 0);
        int lines;
        bad += !maps_sorted(dump_path, &lines);
        most = lines > most ? lines : most;
    }
    atomic_store(&churn_stop, true);
    pthread_join(t, NULL);
    munmap(region, (size_t)CHURN_PAGES * page);
    assert_int_equal(bad, 0);
    assert_true(most > CHURN_PAGES / 4); /* the dumps did see the split region */
}

/* Replays reuse the stack record of the walk they replay: each sample
 * of a sequence that replays some walks, and changes site or caller between
 * them, still names its own site and caller. */
static void test_dump_replayed_walks_keep_their_own_stacks(void **state)
{
    (void)state;
    static const struct {
        void *(*via)(void *(*)(void));
        void *(*site)(void);
    } order[] = {
        {via_x, site_alt_a}, {via_x, site_alt_a}, /* the second replays */
        {via_x, site_alt_b}, {via_x, site_alt_b}, /* another site */
        {via_y, site_alt_b}, {via_y, site_alt_b}, /* the same site, another caller */
        {via_x, site_alt_a}, {via_y, site_alt_a}, {via_y, site_alt_a},
    };
    enum { N = sizeof(order) / sizeof(order[0]) };
    size_t saved = prof_lg_sample_get();
    prof_reset(0); /* R = 1: every allocation is sampled */
    struct unwind_stats before, after;
    unwind_get_stats(&before);
    void *p[N];
    for (size_t i = 0; i < N; i++)
        p[i] = order[i].via(order[i].site);
    unwind_get_stats(&after);
    static struct dump_entry entries[4096];
    size_t n = prof_snapshot(entries, 4096); /* this epoch's samples */
    prof_reset(saved);
    for (size_t i = 0; i < N; i++) {
        const struct prof_stack *st = NULL;
        for (size_t k = 0; k < n && !st; k++)
            if (entries[k].ptr == p[i])
                st = entries[k].stack;
        assert_non_null(st);
        assert_true(st->depth >= 2);
        uintptr_t site = (uintptr_t)st->frames[0], via = (uintptr_t)st->frames[1];
        bool a = order[i].site == site_alt_a, x = order[i].via == via_x;
        if (!(a ? IN_SECTION(alt_a, site) : IN_SECTION(alt_b, site)) ||
            !(x ? IN_SECTION(via_x, via) : IN_SECTION(via_y, via)))
            fail_msg("sample %zu (site %c via %c) has the stack of another", i, a ? 'a' : 'b',
                     x ? 'x' : 'y');
    }
    /* The second of each pair replayed (a sample where a walk was due
     * would test nothing here). */
    assert_true(after.replays - before.replays >= 4);
    for (size_t i = 0; i < N; i++)
        free(p[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dump_format_and_bad_paths),
        cmocka_unit_test(test_dump_without_maps_has_no_section),
        cmocka_unit_test(test_dump_temporary_name_link_not_followed),
        cmocka_unit_test(test_dump_writes_resume_after_a_signal),
        cmocka_unit_test(test_dump_keeps_samples_taken_meanwhile),
        cmocka_unit_test(test_dump_unbiased_end_to_end),
        cmocka_unit_test(test_dump_rate_change_keeps_estimate),
        cmocka_unit_test(test_dump_accumulated_counts),
        cmocka_unit_test(test_dump_reset_forgets_a_sample_being_counted),
        cmocka_unit_test(test_dump_crossing_resets_keep_counting),
        cmocka_unit_test(test_dump_replayed_walks_keep_their_own_stacks),
        cmocka_unit_test(test_dump_maps_sorted_while_mappings_change),
    };
    return cmocka_run_group_tests_name("dump", tests, setup, teardown);
}
