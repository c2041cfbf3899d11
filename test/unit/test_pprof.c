/*
 * test_pprof.c: the profile.proto writer (src/pprof.c).
 *
 *   - golden bytes: the inputs of spec/heap-dump-formats.md 3.6 encode to
 *     exactly fixtures/tools/golden.pb (read from $FIXTURES_DIR, default
 *     ../shared/fixtures, relative to the repository root where make runs);
 *   - CRC-32: the check value of "123456789", every table entry against a
 *     bit-by-bit CRC, and continuation across calls;
 *   - gzip: /bin/gunzip (gunzip from $PATH) restores the raw bytes, for an
 *     empty stream, 1 byte, exact multiples of a stored block, and a
 *     profile over 200 KB (several blocks) against its raw encoding;
 *   - structure, decoded here: locations deduplicated in first-use order,
 *     address = return address - 1, mapping_id of the containing mapping or
 *     0, labels, the string table;
 *   - errors: ENOMEM when os_map fails, EBADF on a bad fd;
 *   - pprof_read_mappings on this process: main program first, its build id
 *     as readelf prints it (when readelf is installed);
 *   - `go tool pprof` (skipped when go is not installed): -raw prints the 7
 *     types, values and labels; -proto merges two profiles by summing.
 */
#include "unit.h" /* first: it defines _GNU_SOURCE (memfd_create) */

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pprof.h"

/* Test seam in pprof.c (SA_TESTING): raw bytes framed like a profile. */
int pprof_test_frame(int fd, const void *data, size_t len, bool gzip);

struct bytes {
    unsigned char *p;
    size_t n;
};

static struct bytes read_fd(int fd)
{
    struct bytes b = {NULL, 0};
    size_t cap = 0;
    for (;;) {
        if (b.n + 65536 > cap) {
            cap = 2 * cap + 65536;
            b.p = realloc(b.p, cap);
            assert_non_null(b.p);
        }
        ssize_t k = read(fd, b.p + b.n, cap - b.n);
        assert_true(k >= 0);
        if (k == 0)
            return b;
        b.n += (size_t)k;
    }
}

static int memfd(void)
{
    int fd = memfd_create("pprof", 0);
    assert_true(fd >= 0);
    return fd;
}

static struct bytes rewind_read(int fd)
{
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    struct bytes b = read_fd(fd);
    close(fd);
    return b;
}

static struct bytes encode(const struct pprof_profile *p, bool gzip)
{
    int fd = memfd();
    assert_int_equal(pprof_write(fd, p, gzip), 0);
    return rewind_read(fd);
}

static struct bytes frame(const void *data, size_t len, bool gzip)
{
    int fd = memfd();
    assert_int_equal(pprof_test_frame(fd, data, len, gzip), 0);
    return rewind_read(fd);
}

/* `cmd` run through sh with `in` on its stdin (a file); its stdout. */
static struct bytes run_cmd(const char *cmd, const struct bytes *in, int *status)
{
    char path[] = "/tmp/test_pprof_in.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    if (in)
        assert_int_equal(write(fd, in->p, in->n), (ssize_t)in->n);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    int out[2];
    assert_int_equal(pipe(out), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 0);
        dup2(out[1], 1);
        close(out[0]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(fd);
    unlink(path);
    struct bytes b = read_fd(out[0]);
    close(out[0]);
    assert_int_equal(waitpid(pid, status, 0), pid);
    return b;
}

static struct bytes gunzip(const struct bytes *gz)
{
    int status;
    struct bytes b = run_cmd("gunzip -c", gz, &status);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return b;
}

static bool have_cmd(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

/* ---- the golden example (spec 3.6) ---- */

static const struct pprof_value_type four_types[] = {
    {"alloc_objects", "count"},
    {"alloc_space", "bytes"},
    {"inuse_objects", "count"},
    {"inuse_space", "bytes"},
};
static void *const golden_stack1[] = {(void *)0x400123, (void *)0x400456};
static void *const golden_stack2[] = {(void *)0x400789, (void *)0x400456};
static const struct pprof_record golden_records[] = {
    {.frames = golden_stack1, .depth = 2, .usable = 4096, .values = {0, 0, 10, 40960}},
    {.frames = golden_stack2, .depth = 2, .usable = 100, .values = {0, 0, 3, 300}},
};
static const struct pprof_mapping golden_mapping = {0x400000, 0x401000, 0, "/usr/bin/salloc-demo",
                                                    NULL};
static const struct pprof_profile golden = {
    .types = four_types, .ntypes = 4, .default_type = "inuse_space",
    .records = golden_records, .nrecords = 2,
    .mappings = &golden_mapping, .nmappings = 1, .period = 1024,
};

static void test_pprof_golden_bytes(void **state)
{
    (void)state;
    const char *dir = getenv("FIXTURES_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tools/golden.pb", dir ? dir : "../shared/fixtures");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        fail_msg("cannot open %s (set FIXTURES_DIR to shared/fixtures)", path);
    struct bytes want = read_fd(fd);
    close(fd);
    assert_int_equal(want.n, 229);

    struct bytes got = encode(&golden, false);
    assert_int_equal(got.n, want.n);
    for (size_t i = 0; i < got.n; i++)
        if (got.p[i] != want.p[i])
            fail_msg("byte %zu: got %02x, golden.pb has %02x", i, got.p[i], want.p[i]);
    free(want.p);
    free(got.p);
}

/* ---- CRC-32 ---- */

static uint32_t crc_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & -(c & 1));
    }
    return ~c;
}

static void test_pprof_crc32_check_value(void **state)
{
    (void)state;
    assert_int_equal(pprof_crc32(0, "123456789", 9), 0xcbf43926u);
    assert_int_equal(pprof_crc32(0, "", 0), 0);
    /* Continuing a CRC across calls equals one call over the whole. */
    assert_int_equal(pprof_crc32(pprof_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
    /* Each single byte exercises one table entry. */
    for (unsigned i = 0; i < 256; i++) {
        unsigned char b = (unsigned char)i;
        assert_int_equal(pprof_crc32(0, &b, 1), crc_bitwise(&b, 1));
    }
}

/* ---- gzip ---- */

static void check_frame_round_trip(size_t len)
{
    unsigned char *data = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i * 2654435761u >> 13);
    struct bytes gz = frame(data, len, true);
    /* Header, one 5-byte header per stored block (at least one), trailer. */
    size_t blocks = len ? (len + 65534) / 65535 : 1;
    assert_int_equal(gz.n, 10 + 5 * blocks + len + 8);
    assert_memory_equal(gz.p, "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
    size_t last_len = len ? (len - 1) % 65535 + 1 : 0; /* the final block's */
    size_t last_hdr = 10 + 5 * (blocks - 1) + (len - last_len);
    assert_int_equal(gz.p[last_hdr], 1); /* BFINAL, stored */
    assert_int_equal(gz.p[last_hdr + 1] | gz.p[last_hdr + 2] << 8, last_len);
    if (blocks > 1)
        assert_int_equal(gz.p[10], 0); /* not final */
    struct bytes raw = gunzip(&gz);
    assert_int_equal(raw.n, len);
    if (len)
        assert_memory_equal(raw.p, data, len);
    struct bytes plain = frame(data, len, false);
    assert_int_equal(plain.n, len);
    if (len)
        assert_memory_equal(plain.p, data, len);
    free(data);
    free(gz.p);
    free(raw.p);
    free(plain.p);
}

static void test_pprof_gzip_frames_round_trip(void **state)
{
    (void)state;
    size_t lens[] = {0, 1, 65534, 65535, 65536, 2 * 65535, 300000};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        check_frame_round_trip(lens[i]);
}

/* A profile of `n` records with distinct stacks (n * 48 + strings bytes). */
struct big {
    struct pprof_record *recs;
    void **frames;
    struct pprof_mapping maps[2];
    char (*threads)[16];
};

static const char *const big_comments[] = {"hello", "world"};

static struct pprof_profile make_big(struct big *b, size_t n, size_t ntypes, const struct pprof_value_type *types)
{
    b->recs = calloc(n + 1, sizeof(*b->recs));
    b->frames = calloc(4 * n + 1, sizeof(void *));
    b->threads = calloc(n + 1, sizeof(*b->threads));
    b->maps[0] = (struct pprof_mapping){0x10000000, 0x20000000, 0, "/opt/big/main", "00ff"};
    b->maps[1] = (struct pprof_mapping){0x7f0000000000, 0x7f0000100000, 0x1000, "/lib/libbig.so", NULL};
    for (size_t i = 0; i < n; i++) {
        void **f = &b->frames[4 * i];
        f[0] = (void *)(uintptr_t)(0x10000000 + 16 * i);
        f[1] = (void *)(uintptr_t)(0x7f0000000000 + 8 * (i % 1000));
        f[2] = (void *)(uintptr_t)(0x10000000 + 4);
        f[3] = (void *)(uintptr_t)(0x5000 + i % 7); /* in no mapping */
        snprintf(b->threads[i], sizeof(b->threads[i]), "t%zu", i % 50);
        b->recs[i] = (struct pprof_record){.frames = f, .depth = 4, .usable = 16 * (i % 9),
                                           .thread = (i % 3) ? b->threads[i] : NULL};
        for (size_t t = 0; t < ntypes; t++)
            b->recs[i].values[t] = (int64_t)(i * 1000 + t);
    }
    return (struct pprof_profile){.types = types, .ntypes = ntypes, .default_type = "inuse_space",
                                  .records = b->recs, .nrecords = n, .mappings = b->maps,
                                  .nmappings = 2, .period = 4096, .time_nanos = 1700000000123456789,
                                  .comments = big_comments, .ncomments = 2};
}

static void free_big(struct big *b)
{
    free(b->recs);
    free(b->frames);
    free(b->threads);
}

static void check_profile_gzip(const struct pprof_profile *p, size_t min_raw)
{
    struct bytes raw = encode(p, false), gz = encode(p, true);
    assert_true(raw.n >= min_raw);
    assert_int_equal(gz.n, 10 + 5 * ((raw.n + 65534) / 65535) + raw.n + 8);
    struct bytes back = gunzip(&gz);
    assert_int_equal(back.n, raw.n);
    assert_memory_equal(back.p, raw.p, raw.n);
    free(raw.p);
    free(gz.p);
    free(back.p);
}

static void test_pprof_gzip_profiles_round_trip(void **state)
{
    (void)state;
    struct pprof_profile empty = {0};
    struct bytes e = encode(&empty, false);
    assert_int_equal(e.n, 2); /* string_table[0] = "" only */
    assert_memory_equal(e.p, "\x32\x00", 2);
    free(e.p);
    check_profile_gzip(&empty, 2);
    check_profile_gzip(&golden, 229);
    struct big b;
    struct pprof_profile p = make_big(&b, 5000, 4, four_types);
    check_profile_gzip(&p, 200 * 1024);
    free_big(&b);
}

/* ---- structure, decoded ---- */

struct pb {
    const unsigned char *p, *end;
};

static uint64_t pb_varint(struct pb *r)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        assert_true(r->p < r->end && shift < 64);
        unsigned char c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return v;
    }
}

/* Next field: its number, and either a varint (*v) or a sub-reader (*sub). */
static unsigned pb_field(struct pb *r, uint64_t *v, struct pb *sub)
{
    uint64_t key = pb_varint(r);
    if ((key & 7) == 0) {
        *v = pb_varint(r);
    } else {
        assert_int_equal(key & 7, 2);
        uint64_t len = pb_varint(r);
        assert_true(len <= (uint64_t)(r->end - r->p));
        *sub = (struct pb){r->p, r->p + len};
        r->p += len;
    }
    return (unsigned)(key >> 3);
}

#define MAXN 64
struct decoded {
    const char *str[MAXN];
    size_t str_len[MAXN], nstr;
    uint64_t loc_id[MAXN], loc_map[MAXN], loc_addr[MAXN];
    size_t nloc;
    uint64_t sample_locs[MAXN][8];
    size_t sample_depth[MAXN], nsample;
    uint64_t label_key[MAXN][2], label_str[MAXN][2], label_num[MAXN][2], label_unit[MAXN][2];
    size_t nlabel[MAXN];
    uint64_t map_id[MAXN], map_file[MAXN], map_build[MAXN];
    size_t nmap;
    uint64_t time, period, dflt, comment[4];
    size_t ncomment;
};

static void decode(const struct bytes *b, struct decoded *d)
{
    memset(d, 0, sizeof(*d));
    struct pb r = {b->p, b->p + b->n}, m, s;
    uint64_t v;
    while (r.p < r.end) {
        switch (pb_field(&r, &v, &m)) {
        case 2: {
            size_t i = d->nsample++;
            while (m.p < m.end) {
                unsigned f = pb_field(&m, &v, &s);
                if (f == 1)
                    while (s.p < s.end)
                        d->sample_locs[i][d->sample_depth[i]++] = pb_varint(&s);
                if (f == 3) {
                    size_t l = d->nlabel[i]++;
                    while (s.p < s.end) {
                        struct pb x;
                        unsigned g = pb_field(&s, &v, &x);
                        uint64_t *dst[] = {NULL, d->label_key[i], d->label_str[i], d->label_num[i],
                                           d->label_unit[i]};
                        assert_true(g >= 1 && g <= 4);
                        dst[g][l] = v;
                    }
                }
            }
            break;
        }
        case 3: {
            size_t i = d->nmap++;
            while (m.p < m.end) {
                unsigned f = pb_field(&m, &v, &s);
                if (f == 1) d->map_id[i] = v;
                if (f == 5) d->map_file[i] = v;
                if (f == 6) d->map_build[i] = v;
            }
            break;
        }
        case 4: {
            size_t i = d->nloc++;
            while (m.p < m.end) {
                unsigned f = pb_field(&m, &v, &s);
                if (f == 1) d->loc_id[i] = v;
                if (f == 2) d->loc_map[i] = v;
                if (f == 3) d->loc_addr[i] = v;
            }
            break;
        }
        case 6:
            d->str[d->nstr] = (const char *)m.p;
            d->str_len[d->nstr++] = (size_t)(m.end - m.p);
            break;
        case 9: d->time = v; break;
        case 12: d->period = v; break;
        case 13: d->comment[d->ncomment++] = v; break;
        case 14: d->dflt = v; break;
        default: break;
        }
    }
}

static bool str_is(const struct decoded *d, uint64_t i, const char *s)
{
    return i < d->nstr && d->str_len[i] == strlen(s) && !memcmp(d->str[i], s, d->str_len[i]);
}

static void test_pprof_locations_and_labels(void **state)
{
    (void)state;
    /* Mappings given out of address order: the main program first. */
    struct pprof_mapping maps[] = {
        {0x500000, 0x600000, 0, "/bin/main", "abcd"},
        {0x100000, 0x200000, 0x2000, "/lib/a.so", NULL},
        {0x300000, 0x300100, 0, "/lib/b.so", NULL},
    };
    void *s1[] = {(void *)0x300100, (void *)0x500001, (void *)0x100000};
    void *s2[] = {(void *)0x500001, (void *)0x250000, (void *)0x300100, (void *)0x5fffff};
    struct pprof_record recs[] = {
        {.frames = s1, .depth = 3, .usable = 48, .thread = "main", .values = {1, 2}},
        {.frames = s2, .depth = 4, .usable = 0, .thread = "", .values = {3, 4}},
        {.frames = s1, .depth = 0, .usable = 0, .thread = "worker", .values = {5, 6}},
    };
    const struct pprof_value_type types[] = {{"objects", "count"}, {"space", "bytes"}};
    const char *comments[] = {"c1"};
    struct pprof_profile p = {.types = types, .ntypes = 2, .default_type = "space",
                              .records = recs, .nrecords = 3, .mappings = maps, .nmappings = 3,
                              .time_nanos = 42, .comments = comments, .ncomments = 1};
    struct bytes b = encode(&p, false);
    struct decoded d;
    decode(&b, &d);

    assert_true(str_is(&d, 0, ""));
    for (size_t i = 1; i < d.nstr; i++) /* interned: no duplicates */
        for (size_t j = 0; j < i; j++)
            assert_false(d.str_len[i] == d.str_len[j] && !memcmp(d.str[i], d.str[j], d.str_len[i]));

    assert_int_equal(d.nmap, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(d.map_id[i], i + 1);
        assert_true(str_is(&d, d.map_file[i], maps[i].filename));
    }
    assert_true(str_is(&d, d.map_build[0], "abcd"));
    assert_int_equal(d.map_build[1], 0);

    /* Ids in first use order; address - 1; the containing mapping. Return
     * address 0x300100 lies one past b.so but its call (0x3000ff) inside;
     * 0x100000 is a.so's first byte, so its call is outside every mapping. */
    uint64_t want_addr[] = {0x3000ff, 0x500000, 0x0fffff, 0x24ffff, 0x5ffffe};
    uint64_t want_map[] = {3, 1, 0, 0, 1};
    assert_int_equal(d.nloc, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(d.loc_id[i], i + 1);
        assert_int_equal(d.loc_addr[i], want_addr[i]);
        assert_int_equal(d.loc_map[i], want_map[i]);
    }
    assert_int_equal(d.nsample, 3);
    uint64_t want_s1[] = {1, 2, 3}, want_s2[] = {2, 4, 1, 5};
    assert_int_equal(d.sample_depth[0], 3);
    assert_memory_equal(d.sample_locs[0], want_s1, sizeof(want_s1));
    assert_int_equal(d.sample_depth[1], 4);
    assert_memory_equal(d.sample_locs[1], want_s2, sizeof(want_s2));
    assert_int_equal(d.sample_depth[2], 0);

    /* Labels: bytes (num + unit) when usable != 0; thread when non-empty. */
    assert_int_equal(d.nlabel[0], 2);
    assert_true(str_is(&d, d.label_key[0][0], "bytes"));
    assert_int_equal(d.label_num[0][0], 48);
    assert_true(str_is(&d, d.label_unit[0][0], "bytes"));
    assert_int_equal(d.label_str[0][0], 0);
    assert_true(str_is(&d, d.label_key[0][1], "thread"));
    assert_true(str_is(&d, d.label_str[0][1], "main"));
    assert_int_equal(d.label_num[0][1], 0);
    assert_int_equal(d.nlabel[1], 0);
    assert_int_equal(d.nlabel[2], 1);
    assert_true(str_is(&d, d.label_str[2][0], "worker"));

    assert_int_equal(d.period, 0); /* period 0: neither period nor its type */
    for (size_t i = 0; i < d.nstr; i++)
        assert_false(str_is(&d, i, "bytes") && d.label_key[0][0] != i);
    assert_int_equal(d.time, 42);
    assert_true(str_is(&d, d.dflt, "space"));
    assert_int_equal(d.ncomment, 1);
    assert_true(str_is(&d, d.comment[0], "c1"));
    free(b.p);
}

/* Many distinct addresses: the location table grows past its first size
 * and keeps every id; one address repeated across records stays one. */
static void test_pprof_many_locations(void **state)
{
    (void)state;
    struct big b;
    struct pprof_profile p = make_big(&b, 20000, 4, four_types);
    struct bytes raw = encode(&p, false);
    size_t nloc = 0, last_id = 0;
    struct pb r = {raw.p, raw.p + raw.n}, m, s;
    uint64_t v;
    while (r.p < r.end)
        if (pb_field(&r, &v, &m) == 4) {
            nloc++;
            assert_int_equal(pb_field(&m, &v, &s), 1);
            assert_int_equal(v, ++last_id);
        }
    /* 20000 leaf frames, 1000 library frames, one shared, 7 unmapped. */
    assert_int_equal(nloc, 20000 + 1000 + 1 + 7);
    free(raw.p);
    free_big(&b);
}

/* ---- errors ---- */

static void *failing_mmap(void *a, size_t l, int p, int f, int fd, off_t o)
{
    (void)a, (void)l, (void)p, (void)f, (void)fd, (void)o;
    return MAP_FAILED;
}

static void test_pprof_errors(void **state)
{
    (void)state;
    int fd = memfd();
    void *(*real)(void *, size_t, int, int, int, off_t) = os_syscalls.mmap;
    os_syscalls.mmap = failing_mmap;
    errno = 0;
    int rc = pprof_write(fd, &golden, true);
    int err = errno;
    os_syscalls.mmap = real;
    assert_int_equal(rc, -1);
    assert_int_equal(err, ENOMEM);
    struct bytes nothing = rewind_read(fd);
    assert_int_equal(nothing.n, 0);
    free(nothing.p);

    errno = 0;
    assert_int_equal(pprof_write(-1, &golden, false), -1);
    assert_int_equal(errno, EBADF);
    int devfull = open("/dev/full", O_WRONLY);
    if (devfull >= 0) {
        assert_int_equal(pprof_write(devfull, &golden, true), -1);
        assert_int_equal(errno, ENOSPC);
        close(devfull);
    }
    struct pprof_profile too_many = golden;
    too_many.ntypes = PPROF_MAX_TYPES + 1;
    assert_int_equal(pprof_write(1, &too_many, false), -1);
    assert_int_equal(errno, EINVAL);
}

/* ---- this process's mappings ---- */

static void test_pprof_read_mappings(void **state)
{
    (void)state;
    struct pprof_mapping maps[512];
    static char buf[128 << 10];
    size_t n = pprof_read_mappings(maps, 512, buf, sizeof(buf));
    assert_true(n >= 2); /* this program and libc at least */
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(k > 0);
    exe[k] = '\0';
    assert_string_equal(maps[0].filename, exe);
    /* This code lies in a mapping of the main program. */
    uintptr_t here = (uintptr_t)test_pprof_read_mappings;
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        assert_true(maps[i].filename[0] == '/');
        assert_true(maps[i].start < maps[i].limit);
        if (here >= maps[i].start && here < maps[i].limit)
            found = !strcmp(maps[i].filename, exe);
    }
    assert_true(found);
    /* A tiny capacity is respected; an empty text buffer keeps nothing. */
    assert_int_equal(pprof_read_mappings(maps, 1, buf, sizeof(buf)), 1);
    assert_int_equal(pprof_read_mappings(maps, 512, buf, 0), 0);

    n = pprof_read_mappings(maps, 512, buf, sizeof(buf));
    if (!have_cmd("readelf")) {
        print_message("readelf not installed: build id not checked\n");
        return;
    }
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "readelf -n '%s' | sed -n 's/.*Build ID: *//p'", exe);
    int status;
    struct bytes out = run_cmd(cmd, NULL, &status);
    while (out.n && (out.p[out.n - 1] == '\n' || out.p[out.n - 1] == ' '))
        out.n--;
    if (out.n == 0) {
        assert_null(maps[0].build_id); /* linked without --build-id */
    } else {
        assert_non_null(maps[0].build_id);
        assert_int_equal(strlen(maps[0].build_id), out.n);
        assert_memory_equal(maps[0].build_id, out.p, out.n);
    }
    free(out.p);
}

/* ---- go tool pprof ---- */

static const struct pprof_value_type seven_types[] = {
    {"alloc_objects", "count"},  {"alloc_space", "bytes"},   {"inuse_objects", "count"},
    {"inuse_space", "bytes"},    {"resident_space", "bytes"}, {"swapped_space", "bytes"},
    {"fragmentation_space", "bytes"},
};

static bool have_go(void)
{
    return have_cmd("go") && system("go tool pprof -h >/dev/null 2>&1") == 0;
}

/* `go tool pprof ARGS` on the files, stdout as a string with every run of
 * blanks collapsed to one space (pprof pads columns). */
static char *pprof_cmd(const char *args, const struct bytes *files, size_t nfiles,
                       struct bytes *raw_out)
{
    char names[4][64], cmd[1024];
    int len = snprintf(cmd, sizeof(cmd), "HOME=/tmp go tool pprof %s", args);
    for (size_t i = 0; i < nfiles; i++) {
        snprintf(names[i], sizeof(names[i]), "/tmp/test_pprof_%d_%zu.pb", (int)getpid(), i);
        FILE *f = fopen(names[i], "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(files[i].p, 1, files[i].n, f), files[i].n);
        fclose(f);
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " %s", names[i]);
    }
    snprintf(cmd + len, sizeof(cmd) - (size_t)len, " 2>/dev/null");
    int status;
    struct bytes out = run_cmd(cmd, NULL, &status);
    for (size_t i = 0; i < nfiles; i++)
        unlink(names[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("go tool pprof %s failed (status %d)", args, status);
    if (raw_out) {
        *raw_out = out;
        return NULL;
    }
    char *s = malloc(out.n + 1), *w = s;
    for (size_t i = 0; i < out.n; i++)
        if (out.p[i] != ' ' || (w > s && w[-1] != ' ' && w[-1] != '\n'))
            *w++ = (char)out.p[i];
    *w = '\0';
    free(out.p);
    return s;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("pprof output lacks \"%s\":\n%s", needle, hay);
}

/* Three mappings, two stacks, labels of both kinds. */
static void *const go_s1[] = {(void *)0x401001, (void *)0x7f0000002001, (void *)0x402001};
static void *const go_s2[] = {(void *)0x7f1000000011, (void *)0x402001};
static const struct pprof_mapping go_maps[] = {
    {0x400000, 0x500000, 0, "/opt/demo/main", "0123abcd"},
    {0x7f0000000000, 0x7f0000100000, 0x1000, "/opt/demo/libone.so", NULL},
    {0x7f1000000000, 0x7f1000001000, 0, "/opt/demo/libtwo.so", NULL},
};

static struct pprof_profile go_profile(struct pprof_record *recs, int64_t scale, uint64_t period)
{
    recs[0] = (struct pprof_record){.frames = go_s1, .depth = 3, .usable = 4096, .thread = "worker",
                                    .values = {11, 45056, 7, 28672, 8192, 4096, 512}};
    recs[1] = (struct pprof_record){.frames = go_s2, .depth = 2, .usable = 32,
                                    .values = {1000, 32000, 250, 8000, 4096, 0, 64}};
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < 7; t++)
            recs[r].values[t] *= scale;
    return (struct pprof_profile){.types = seven_types, .ntypes = 7, .default_type = "inuse_space",
                                  .records = recs, .nrecords = 2, .mappings = go_maps,
                                  .nmappings = 3, .period = period, .time_nanos = 1700000000000000000};
}

static void test_pprof_go_raw(void **state)
{
    (void)state;
    if (!have_go()) {
        print_message("go not installed (Debian: golang-go): go tool pprof not checked\n");
        skip();
    }
    struct pprof_record recs[2];
    struct pprof_profile p = go_profile(recs, 1, 1024);
    struct bytes files[] = {encode(&p, true)};
    char *out = pprof_cmd("-raw -symbolize=none", files, 1, NULL);
    assert_contains(out, "PeriodType: space bytes\nPeriod: 1024\n");
    assert_contains(out, "alloc_objects/count alloc_space/bytes inuse_objects/count "
                         "inuse_space/bytes[dflt] resident_space/bytes swapped_space/bytes "
                         "fragmentation_space/bytes\n");
    assert_contains(out, "\n11 45056 7 28672 8192 4096 512: 1 2 3 \n");
    assert_contains(out, "\n1000 32000 250 8000 4096 0 64: 4 3 \n");
    assert_contains(out, "bytes:[4096 bytes]");
    assert_contains(out, "bytes:[32 bytes]");
    assert_contains(out, "thread:[worker]");
    assert_contains(out, "\n1: 0x401000 M=1 \n");
    assert_contains(out, "\n2: 0x7f0000002000 M=2 \n");
    assert_contains(out, "\n4: 0x7f1000000010 M=3 \n");
    assert_contains(out, "1: 0x400000/0x500000/0x0 /opt/demo/main 0123abcd");
    assert_contains(out, "2: 0x7f0000000000/0x7f0000100000/0x1000 /opt/demo/libone.so");
    free(out);
    free(files[0].p);
}

static void test_pprof_go_merge_sums(void **state)
{
    (void)state;
    if (!have_go()) {
        print_message("go not installed (Debian: golang-go): go tool pprof not checked\n");
        skip();
    }
    /* Values are written unbiased, so merging is plain addition, whatever
     * each profile's period. */
    struct pprof_record ra[2], rb[2];
    struct pprof_profile a = go_profile(ra, 1, 1024), b = go_profile(rb, 3, 4096);
    struct bytes files[] = {encode(&a, false), encode(&b, true)};
    struct bytes merged;
    pprof_cmd("-proto", files, 2, &merged);
    assert_true(merged.n > 2 && merged.p[0] == 0x1f && merged.p[1] == 0x8b);
    char *out = pprof_cmd("-raw -symbolize=none", &merged, 1, NULL);
    assert_contains(out, "\n44 180224 28 114688 32768 16384 2048: ");
    assert_contains(out, "\n4000 128000 1000 32000 16384 0 256: ");
    assert_contains(out, "thread:[worker]");
    free(out);
    free(merged.p);
    free(files[0].p);
    free(files[1].p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pprof_golden_bytes),
        cmocka_unit_test(test_pprof_crc32_check_value),
        cmocka_unit_test(test_pprof_gzip_frames_round_trip),
        cmocka_unit_test(test_pprof_gzip_profiles_round_trip),
        cmocka_unit_test(test_pprof_locations_and_labels),
        cmocka_unit_test(test_pprof_many_locations),
        cmocka_unit_test(test_pprof_errors),
        cmocka_unit_test(test_pprof_read_mappings),
        cmocka_unit_test(test_pprof_go_raw),
        cmocka_unit_test(test_pprof_go_merge_sums),
    };
    return cmocka_run_group_tests_name("pprof", tests, NULL, NULL);
}
