/*
 * pprof.c: profile.proto writer (spec/heap-dump-formats.md section 3): hand-made
 * varints and length-delimited fields, an optional gzip wrapper of stored
 * deflate blocks, the CRC-32 it needs, and the executable mappings of this
 * process read from /proc/self/maps.
 *
 * Owns only what one pprof_write call maps: the string and location tables and
 * the output buffer, all from os_map and unmapped before returning.  No locks;
 * callers serialize dumps.  Never calls malloc or stdio (it runs inside the
 * allocator), never keeps state between calls.
 *
 * Nested lengths: each message is written by a "body" function that takes a
 * sink.  A counting sink only adds up bytes, so a message costs one counting
 * call of its body (for the length prefix) and one real call; nesting is at
 * most three deep (Profile > Sample > Label), and counting and writing run the
 * same code, so a size can never disagree with the bytes written.  Before any
 * byte is written a pre-pass interns every string and location in the order
 * the fields are later written (sample_type, mapping, sample, location,
 * period_type, period, default_sample_type, time_nanos, comment, string_table:
 * the order of the golden file, section 3.6), so the string table, written
 * last, is complete and every index is known.
 */
#define _GNU_SOURCE
#include "pprof.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "elfnote.h"
#include "os.h"
#include "procmaps.h"
#include "util.h"

/* ---- CRC-32 (IEEE, reflected polynomial 0xEDB88320), byte-wise table ---- */

/* crc_table[i] = CRC register after shifting the byte i through 8 rounds;
 * constant so that no lazy initialisation races between threads.  The unit
 * test recomputes every entry bit by bit. */
static const uint32_t crc_table[256] = {
    0x00000000, 0x77073096, 0xee0e612c, 0x990951ba, 0x076dc419, 0x706af48f,
    0xe963a535, 0x9e6495a3, 0x0edb8832, 0x79dcb8a4, 0xe0d5e91e, 0x97d2d988,
    0x09b64c2b, 0x7eb17cbd, 0xe7b82d07, 0x90bf1d91, 0x1db71064, 0x6ab020f2,
    0xf3b97148, 0x84be41de, 0x1adad47d, 0x6ddde4eb, 0xf4d4b551, 0x83d385c7,
    0x136c9856, 0x646ba8c0, 0xfd62f97a, 0x8a65c9ec, 0x14015c4f, 0x63066cd9,
    0xfa0f3d63, 0x8d080df5, 0x3b6e20c8, 0x4c69105e, 0xd56041e4, 0xa2677172,
    0x3c03e4d1, 0x4b04d447, 0xd20d85fd, 0xa50ab56b, 0x35b5a8fa, 0x42b2986c,
    0xdbbbc9d6, 0xacbcf940, 0x32d86ce3, 0x45df5c75, 0xdcd60dcf, 0xabd13d59,
    0x26d930ac, 0x51de003a, 0xc8d75180, 0xbfd06116, 0x21b4f4b5, 0x56b3c423,
    0xcfba9599, 0xb8bda50f, 0x2802b89e, 0x5f058808, 0xc60cd9b2, 0xb10be924,
    0x2f6f7c87, 0x58684c11, 0xc1611dab, 0xb6662d3d, 0x76dc4190, 0x01db7106,
    0x98d220bc, 0xefd5102a, 0x71b18589, 0x06b6b51f, 0x9fbfe4a5, 0xe8b8d433,
    0x7807c9a2, 0x0f00f934, 0x9609a88e, 0xe10e9818, 0x7f6a0dbb, 0x086d3d2d,
    0x91646c97, 0xe6635c01, 0x6b6b51f4, 0x1c6c6162, 0x856530d8, 0xf262004e,
    0x6c0695ed, 0x1b01a57b, 0x8208f4c1, 0xf50fc457, 0x65b0d9c6, 0x12b7e950,
    0x8bbeb8ea, 0xfcb9887c, 0x62dd1ddf, 0x15da2d49, 0x8cd37cf3, 0xfbd44c65,
    0x4db26158, 0x3ab551ce, 0xa3bc0074, 0xd4bb30e2, 0x4adfa541, 0x3dd895d7,
    0xa4d1c46d, 0xd3d6f4fb, 0x4369e96a, 0x346ed9fc, 0xad678846, 0xda60b8d0,
    0x44042d73, 0x33031de5, 0xaa0a4c5f, 0xdd0d7cc9, 0x5005713c, 0x270241aa,
    0xbe0b1010, 0xc90c2086, 0x5768b525, 0x206f85b3, 0xb966d409, 0xce61e49f,
    0x5edef90e, 0x29d9c998, 0xb0d09822, 0xc7d7a8b4, 0x59b33d17, 0x2eb40d81,
    0xb7bd5c3b, 0xc0ba6cad, 0xedb88320, 0x9abfb3b6, 0x03b6e20c, 0x74b1d29a,
    0xead54739, 0x9dd277af, 0x04db2615, 0x73dc1683, 0xe3630b12, 0x94643b84,
    0x0d6d6a3e, 0x7a6a5aa8, 0xe40ecf0b, 0x9309ff9d, 0x0a00ae27, 0x7d079eb1,
    0xf00f9344, 0x8708a3d2, 0x1e01f268, 0x6906c2fe, 0xf762575d, 0x806567cb,
    0x196c3671, 0x6e6b06e7, 0xfed41b76, 0x89d32be0, 0x10da7a5a, 0x67dd4acc,
    0xf9b9df6f, 0x8ebeeff9, 0x17b7be43, 0x60b08ed5, 0xd6d6a3e8, 0xa1d1937e,
    0x38d8c2c4, 0x4fdff252, 0xd1bb67f1, 0xa6bc5767, 0x3fb506dd, 0x48b2364b,
    0xd80d2bda, 0xaf0a1b4c, 0x36034af6, 0x41047a60, 0xdf60efc3, 0xa867df55,
    0x316e8eef, 0x4669be79, 0xcb61b38c, 0xbc66831a, 0x256fd2a0, 0x5268e236,
    0xcc0c7795, 0xbb0b4703, 0x220216b9, 0x5505262f, 0xc5ba3bbe, 0xb2bd0b28,
    0x2bb45a92, 0x5cb36a04, 0xc2d7ffa7, 0xb5d0cf31, 0x2cd99e8b, 0x5bdeae1d,
    0x9b64c2b0, 0xec63f226, 0x756aa39c, 0x026d930a, 0x9c0906a9, 0xeb0e363f,
    0x72076785, 0x05005713, 0x95bf4a82, 0xe2b87a14, 0x7bb12bae, 0x0cb61b38,
    0x92d28e9b, 0xe5d5be0d, 0x7cdcefb7, 0x0bdbdf21, 0x86d3d2d4, 0xf1d4e242,
    0x68ddb3f8, 0x1fda836e, 0x81be16cd, 0xf6b9265b, 0x6fb077e1, 0x18b74777,
    0x88085ae6, 0xff0f6a70, 0x66063bca, 0x11010b5c, 0x8f659eff, 0xf862ae69,
    0x616bffd3, 0x166ccf45, 0xa00ae278, 0xd70dd2ee, 0x4e048354, 0x3903b3c2,
    0xa7672661, 0xd06016f7, 0x4969474d, 0x3e6e77db, 0xaed16a4a, 0xd9d65adc,
    0x40df0b66, 0x37d83bf0, 0xa9bcae53, 0xdebb9ec5, 0x47b2cf7f, 0x30b5ffe9,
    0xbdbdf21c, 0xcabac28a, 0x53b39330, 0x24b4a3a6, 0xbad03605, 0xcdd70693,
    0x54de5729, 0x23d967bf, 0xb3667a2e, 0xc4614ab8, 0x5d681b02, 0x2a6f2b94,
    0xb40bbe37, 0xc30c8ea1, 0x5a05df1b, 0x2d02ef8d,
};

uint32_t pprof_crc32(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    crc = ~crc; /* zlib's convention: pre- and post-inverted register */
    while (len--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- output: counting or buffered to fd, optionally gzip-framed ---- */

/* A stored deflate block holds at most 65535 bytes (LEN is 16 bits). */
#define BLOCK_MAX 65535u
#define BLOCK_HDR 5u /* BFINAL/BTYPE byte, LEN, NLEN */

struct sink {
    bool counting;      /* only n is kept */
    size_t n;           /* bytes put so far */
    int fd, err;        /* err: first errno of a failed write; stops output */
    bool gzip;
    unsigned char *buf; /* BLOCK_HDR bytes of room, then up to BLOCK_MAX data */
    size_t pos;         /* data bytes in buf */
    uint32_t crc;       /* of all data flushed (gzip) */
};

static void write_all(struct sink *o, const void *data, size_t len)
{
    const char *p = data;
    while (len && !o->err) {
        ssize_t k = write(o->fd, p, len);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
        } else if (k == 0 || errno != EINTR) {
            o->err = k == 0 ? EIO : errno;
        }
    }
}

/* Sends the buffered bytes: as one stored block (final or not) when
 * gzipping, so the buffer is the only copy of the output ever held. */
static void flush(struct sink *o, bool final)
{
    size_t len = o->pos;
    if (o->gzip) {
        unsigned char *h = o->buf;
        h[0] = final; /* BFINAL in bit 0, BTYPE 00 = stored */
        h[1] = (unsigned char)len;
        h[2] = (unsigned char)(len >> 8);
        h[3] = (unsigned char)~len;
        h[4] = (unsigned char)(~len >> 8);
        o->crc = pprof_crc32(o->crc, o->buf + BLOCK_HDR, len);
        write_all(o, o->buf, BLOCK_HDR + len);
    } else if (len) {
        write_all(o, o->buf + BLOCK_HDR, len);
    }
    o->pos = 0;
}

static void put(struct sink *o, const void *data, size_t len)
{
    o->n += len;
    if (o->counting)
        return;
    const unsigned char *p = data;
    while (len) {
        /* Flush only when more bytes follow, so the final flush (BFINAL)
         * always has data unless the whole stream is empty. */
        if (o->pos == BLOCK_MAX)
            flush(o, false);
        size_t k = BLOCK_MAX - o->pos < len ? BLOCK_MAX - o->pos : len;
        memcpy(o->buf + BLOCK_HDR + o->pos, p, k);
        o->pos += k;
        p += k;
        len -= k;
    }
}

/* 7 bits a byte, low group first; int64 goes as its two's complement. */
static void put_varint(struct sink *o, uint64_t v)
{
    unsigned char b[10];
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (unsigned char)v;
    put(o, b, n);
}

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

static void put_key(struct sink *o, unsigned field, unsigned wire)
{
    put_varint(o, (uint64_t)field << 3 | wire);
}

/* A scalar field; proto3 readers take an absent field as 0, so 0 is left out. */
static void put_uint(struct sink *o, unsigned field, uint64_t v)
{
    if (v) {
        put_key(o, field, WIRE_VARINT);
        put_varint(o, v);
    }
}

static void put_bytes(struct sink *o, unsigned field, const void *data, size_t len)
{
    put_key(o, field, WIRE_LEN);
    put_varint(o, len);
    put(o, data, len);
}

/* ---- the encoder's tables ---- */

/* Open addressing, linear probing: a slot holds an entry number (a string
 * index or a location id, both from 1), 0 when empty.  Kept at most half
 * full; it doubles into a fresh mapping, so a dump with few distinct
 * addresses touches few pages however many frames it has. */
struct table {
    uint32_t *slot;
    size_t cap; /* power of two, 0 before the first insert */
};

struct enc {
    const struct pprof_profile *p;
    const char **str;       /* str[i], i >= 1: string_table[i]; [0] is "" */
    size_t *str_len;
    size_t nstr, str_max;   /* nstr counts the "" entry */
    struct table strs;
    uint64_t *loc_pc;       /* loc_pc[id - 1]: the return address */
    uint32_t *loc_map;      /* its mapping id, 0 if none */
    size_t nloc;
    struct table locs;
    uint32_t *map_order;    /* mapping indexes sorted by start, for search */
    uint64_t s_bytes, s_thread; /* indexes of the label keys */
};

static uint64_t hash_str(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
    return h;
}

static uint64_t hash_pc(uint64_t pc)
{
    return (pc * 0x9e3779b97f4a7c15u) >> 17; /* Fibonacci hashing */
}

static uint64_t hash_entry(const struct enc *e, const struct table *t, uint32_t id)
{
    return t == &e->strs ? hash_str(e->str[id], e->str_len[id]) : hash_pc(e->loc_pc[id - 1]);
}

/* Makes room for one more of `n` entries; false (errno ENOMEM) if it cannot. */
static bool table_reserve(struct enc *e, struct table *t, size_t n)
{
    if (2 * (n + 1) <= t->cap)
        return true;
    size_t cap = t->cap ? 2 * t->cap : 1024;
    uint32_t *slot = os_map(cap * sizeof(*slot), os_page_size());
    if (!slot)
        return false;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slot[i])
            continue;
        size_t j = hash_entry(e, t, t->slot[i]) & (cap - 1);
        while (slot[j])
            j = (j + 1) & (cap - 1);
        slot[j] = t->slot[i];
    }
    if (t->cap)
        os_unmap(t->slot, t->cap * sizeof(*slot));
    t->slot = slot;
    t->cap = cap;
    return true;
}

/* The string_table index of `s`, added if new; 0 for NULL and "", -1 on
 * ENOMEM.  Emitting looks up again what the pre-pass added: only an insert
 * may grow the table, so a lookup never fails. */
static int64_t str_id(struct enc *e, const char *s)
{
    if (!s || !*s)
        return 0;
    size_t len = strlen(s);
    for (int pass = 0; pass < 2; pass++) {
        size_t mask = e->strs.cap - 1, j = hash_str(s, len) & mask;
        for (uint32_t id; e->strs.cap && (id = e->strs.slot[j]); j = (j + 1) & mask)
            if (e->str_len[id] == len && !memcmp(e->str[id], s, len))
                return id;
        if (pass == 0 && !table_reserve(e, &e->strs, e->nstr))
            return -1;
        if (pass == 1 && e->nstr < e->str_max) { /* str_max bounds every insert */
            e->str[e->nstr] = s;
            e->str_len[e->nstr] = len;
            e->strs.slot[j] = (uint32_t)e->nstr;
            return (int64_t)e->nstr++;
        }
    }
    return errno = EINVAL, -1;
}

static bool intern(struct enc *e, const char *s, uint64_t *id)
{
    int64_t i = str_id(e, s);
    if (id && i >= 0)
        *id = (uint64_t)i;
    return i >= 0;
}

/* The id of the mapping that holds `addr`, 0 if none: binary search over
 * the mappings by start. */
static uint32_t mapping_of(const struct enc *e, uint64_t addr)
{
    const struct pprof_mapping *m = e->p->mappings;
    size_t lo = 0, hi = e->p->nmappings; /* first start > addr is in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m[e->map_order[mid]].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    uint32_t i = e->map_order[lo - 1];
    return addr < m[i].limit ? i + 1 : 0;
}

/* Location.address is the return address - 1: inside the call instruction,
 * so symbolization names the caller's line (section 3.4). */
static uint64_t loc_address(uint64_t pc) { return pc ? pc - 1 : 0; }

/* The Location id of return address `pc` (first use gets the next id); 0
 * on ENOMEM, which only an insert can meet. */
static uint32_t loc_id(struct enc *e, uint64_t pc)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t mask = e->locs.cap - 1, j = hash_pc(pc) & mask;
        for (uint32_t id; e->locs.cap && (id = e->locs.slot[j]); j = (j + 1) & mask)
            if (e->loc_pc[id - 1] == pc)
                return id;
        if (pass == 0 && !table_reserve(e, &e->locs, e->nloc))
            return 0;
        if (pass == 1) {
            e->loc_pc[e->nloc] = pc;
            e->loc_map[e->nloc] = mapping_of(e, loc_address(pc));
            e->locs.slot[j] = (uint32_t)++e->nloc;
            return (uint32_t)e->nloc;
        }
    }
    return 0;
}

/* Interns every string and location in the order emit() writes them. */
static bool prepass(struct enc *e)
{
    const struct pprof_profile *p = e->p;
    bool ok = true;
    for (size_t i = 0; i < p->ntypes; i++)
        ok = ok && intern(e, p->types[i].type, NULL) && intern(e, p->types[i].unit, NULL);
    for (size_t i = 0; i < p->nmappings; i++)
        ok = ok && intern(e, p->mappings[i].filename, NULL) &&
             intern(e, p->mappings[i].build_id, NULL);
    for (size_t i = 0; ok && i < p->nrecords; i++) {
        const struct pprof_record *r = &p->records[i];
        for (uint32_t d = 0; ok && d < r->depth; d++)
            ok = loc_id(e, (uintptr_t)r->frames[d]) != 0;
        if (r->usable) /* key, then num_unit: the same string */
            ok = ok && intern(e, "bytes", &e->s_bytes);
        if (r->thread && *r->thread)
            ok = ok && intern(e, "thread", &e->s_thread) && intern(e, r->thread, NULL);
    }
    if (p->period)
        ok = ok && intern(e, "space", NULL) && intern(e, "bytes", &e->s_bytes);
    ok = ok && intern(e, p->default_type, NULL);
    for (size_t i = 0; i < p->ncomments; i++)
        ok = ok && intern(e, p->comments[i], NULL);
    return ok;
}

/* ---- messages ---- */

typedef void body_fn(struct sink *o, struct enc *e, const void *arg);

/* A length-delimited field whose payload `body` writes: counted first. */
static void put_msg(struct sink *o, unsigned field, body_fn *body, struct enc *e, const void *arg)
{
    struct sink count = {.counting = true};
    body(&count, e, arg);
    put_key(o, field, WIRE_LEN);
    put_varint(o, count.n);
    body(o, e, arg);
}

struct label {
    uint64_t key, str, num, unit; /* string indexes, and num */
};

static void label_body(struct sink *o, struct enc *e, const void *arg)
{
    const struct label *l = arg;
    (void)e;
    put_uint(o, 1, l->key);
    put_uint(o, 2, l->str);
    put_uint(o, 3, l->num);
    put_uint(o, 4, l->unit);
}

static void value_type_body(struct sink *o, struct enc *e, const void *arg)
{
    const struct pprof_value_type *t = arg;
    put_uint(o, 1, (uint64_t)str_id(e, t->type));
    put_uint(o, 2, (uint64_t)str_id(e, t->unit));
}

static void sample_locs(struct sink *o, struct enc *e, const void *arg)
{
    const struct pprof_record *r = arg;
    for (uint32_t d = 0; d < r->depth; d++)
        put_varint(o, loc_id(e, (uintptr_t)r->frames[d]));
}

static void sample_values(struct sink *o, struct enc *e, const void *arg)
{
    const struct pprof_record *r = arg;
    for (size_t i = 0; i < e->p->ntypes; i++)
        put_varint(o, (uint64_t)r->values[i]); /* zeros too: packed list */
}

static void sample_body(struct sink *o, struct enc *e, const void *arg)
{
    const struct pprof_record *r = arg;
    if (r->depth) /* packed repeated fields; an empty one is left out */
        put_msg(o, 1, sample_locs, e, r);
    if (e->p->ntypes)
        put_msg(o, 2, sample_values, e, r);
    if (r->usable) {
        struct label l = {e->s_bytes, 0, r->usable, e->s_bytes};
        put_msg(o, 3, label_body, e, &l);
    }
    if (r->thread && *r->thread) {
        struct label l = {e->s_thread, (uint64_t)str_id(e, r->thread), 0, 0};
        put_msg(o, 3, label_body, e, &l);
    }
}

static void mapping_body(struct sink *o, struct enc *e, const void *arg)
{
    const struct pprof_mapping *m = arg;
    put_uint(o, 1, (uint64_t)(m - e->p->mappings) + 1);
    put_uint(o, 2, m->start);
    put_uint(o, 3, m->limit);
    put_uint(o, 4, m->offset);
    put_uint(o, 5, (uint64_t)str_id(e, m->filename));
    put_uint(o, 6, (uint64_t)str_id(e, m->build_id));
}

static void location_body(struct sink *o, struct enc *e, const void *arg)
{
    size_t i = *(const size_t *)arg;
    put_uint(o, 1, i + 1);
    put_uint(o, 2, e->loc_map[i]);
    put_uint(o, 3, loc_address(e->loc_pc[i]));
}

static void emit(struct sink *o, struct enc *e)
{
    const struct pprof_profile *p = e->p;
    for (size_t i = 0; i < p->ntypes; i++)
        put_msg(o, 1, value_type_body, e, &p->types[i]);
    for (size_t i = 0; i < p->nmappings; i++)
        put_msg(o, 3, mapping_body, e, &p->mappings[i]);
    for (size_t i = 0; i < p->nrecords; i++)
        put_msg(o, 2, sample_body, e, &p->records[i]);
    for (size_t i = 0; i < e->nloc; i++)
        put_msg(o, 4, location_body, e, &i);
    if (p->period) {
        struct pprof_value_type space = {"space", "bytes"};
        put_msg(o, 11, value_type_body, e, &space);
        put_uint(o, 12, p->period);
    }
    put_uint(o, 14, (uint64_t)str_id(e, p->default_type));
    put_uint(o, 9, (uint64_t)p->time_nanos);
    for (size_t i = 0; i < p->ncomments; i++) {
        put_key(o, 13, WIRE_VARINT); /* unpacked, so an index 0 still counts */
        put_varint(o, (uint64_t)str_id(e, p->comments[i]));
    }
    for (size_t i = 0; i < e->nstr; i++) /* entry 0 is "" */
        put_bytes(o, 6, e->str[i], e->str_len[i]);
}

/* ---- gzip framing ---- */

static const unsigned char gzip_header[10] = {
    0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, /* deflate, no flags/mtime, OS unknown */
};

static void sink_start(struct sink *o)
{
    if (o->gzip)
        write_all(o, gzip_header, sizeof(gzip_header));
}

/* Last block (BFINAL, possibly empty), then CRC-32 and ISIZE (mod 2^32). */
static void sink_finish(struct sink *o)
{
    flush(o, true);
    if (o->gzip) {
        unsigned char t[8];
        uint32_t isize = (uint32_t)o->n;
        for (int i = 0; i < 4; i++) {
            t[i] = (unsigned char)(o->crc >> (8 * i));
            t[4 + i] = (unsigned char)(isize >> (8 * i));
        }
        write_all(o, t, sizeof(t));
    }
}

#define IO_BYTES (BLOCK_HDR + BLOCK_MAX)

#ifdef SA_TESTING
/* Test seam: `len` raw bytes gzip-framed (or not) the way pprof_write frames
 * a profile, so tests reach the empty and block-boundary cases. */
int pprof_test_frame(int fd, const void *data, size_t len, bool gzip);
int pprof_test_frame(int fd, const void *data, size_t len, bool gzip)
{
    size_t bytes = sa_align_up(IO_BYTES, os_page_size());
    struct sink o = {.fd = fd, .gzip = gzip, .buf = os_map(bytes, os_page_size())};
    if (!o.buf)
        return -1;
    sink_start(&o);
    put(&o, data, len);
    sink_finish(&o);
    os_unmap(o.buf, bytes);
    return o.err ? (errno = o.err, -1) : 0;
}
#endif

int pprof_write(int fd, const struct pprof_profile *p, bool gzip)
{
    if (p->ntypes > PPROF_MAX_TYPES)
        return errno = EINVAL, -1;
    size_t frames = 0;
    for (size_t i = 0; i < p->nrecords; i++)
        frames += p->records[i].depth;
    /* Every string the pre-pass can add: "", two per type and mapping, one
     * thread name per record, comments, and bytes/thread/space/default. */
    size_t str_max = 5 + 2 * p->ntypes + 2 * p->nmappings + p->nrecords + p->ncomments;
    if (frames >= UINT32_MAX || str_max >= UINT32_MAX)
        return errno = ENOMEM, -1;
    /* One mapping for the dense arrays (filled in order, so only what is
     * used is touched) and the output buffer. */
    size_t off_str = sa_align_up(IO_BYTES, 16);
    size_t off_len = off_str + str_max * sizeof(char *);
    size_t off_pc = off_len + str_max * sizeof(size_t);
    size_t off_map = off_pc + frames * sizeof(uint64_t);
    size_t off_order = off_map + frames * sizeof(uint32_t);
    size_t bytes = sa_align_up(off_order + p->nmappings * sizeof(uint32_t), os_page_size());
    char *scratch = os_map(bytes, os_page_size());
    if (!scratch)
        return -1;
    struct enc e = {.p = p,
                    .str = (const char **)(scratch + off_str),
                    .str_len = (size_t *)(scratch + off_len),
                    .nstr = 1,
                    .str_max = str_max,
                    .loc_pc = (uint64_t *)(scratch + off_pc),
                    .loc_map = (uint32_t *)(scratch + off_map),
                    .map_order = (uint32_t *)(scratch + off_order)};
    e.str[0] = "";
    /* Insertion sort: /proc/self/maps order is already sorted but for the
     * main program moved first, so this is near linear. */
    for (uint32_t i = 0; i < p->nmappings; i++) {
        uint32_t j = i;
        for (; j > 0 && p->mappings[e.map_order[j - 1]].start > p->mappings[i].start; j--)
            e.map_order[j] = e.map_order[j - 1];
        e.map_order[j] = i;
    }
    int err = 0;
    if (!prepass(&e)) {
        err = errno;
    } else {
        struct sink o = {.fd = fd, .gzip = gzip, .buf = (unsigned char *)scratch};
        sink_start(&o);
        emit(&o, &e);
        sink_finish(&o);
        err = o.err;
    }
    if (e.strs.cap)
        os_unmap(e.strs.slot, e.strs.cap * sizeof(uint32_t));
    if (e.locs.cap)
        os_unmap(e.locs.slot, e.locs.cap * sizeof(uint32_t));
    os_unmap(scratch, bytes);
    return err ? (errno = err, -1) : 0;
}

/* ---- this process's mappings ---- */

/* Appends the hex of `file`'s NT_GNU_BUILD_ID note to `buf` (at *used, of
 * size `size`); NULL if the file has none or cannot be read.  Reads only the
 * ELF header, program headers and PT_NOTE segments, with pread. */
static const char *read_build_id(const char *file, char *buf, size_t *used, size_t size)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    const char *id = NULL;
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr))
        goto out;
    for (unsigned i = 0; i < eh.e_phnum && !id; i++) {
        Elf64_Phdr ph;
        /* Build-id notes are tens of bytes.  Static, as pprof_read_mappings'
         * line: its callers hold the dump lock. */
        SA_BSS_APART static unsigned char note[1024];
        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) != sizeof(ph))
            goto out;
        if (ph.p_type != PT_NOTE)
            continue;
        size_t n = ph.p_filesz < sizeof(note) ? ph.p_filesz : sizeof(note);
        if (pread(fd, note, n, (off_t)ph.p_offset) != (ssize_t)n)
            continue;
        size_t len;
        const unsigned char *bid = elf_build_id(note, n, &len);
        if (bid && *used + 2 * len + 1 <= size) {
            char *hex = buf + *used;
            for (size_t k = 0; k < len; k++) {
                hex[2 * k] = "0123456789abcdef"[bid[k] >> 4];
                hex[2 * k + 1] = "0123456789abcdef"[bid[k] & 15];
            }
            hex[2 * len] = '\0';
            *used += 2 * len + 1;
            id = hex;
        }
    }
out:
    close(fd);
    return id;
}

static const char *skip_field(const char *s) /* past a word and its spaces */
{
    while (*s && *s != ' ')
        s++;
    while (*s == ' ')
        s++;
    return s;
}

/* Where pprof_read_mappings collects the mappings. */
struct mapping_list {
    struct pprof_mapping *out;
    size_t cap, n;
    char *buf; /* file names and build IDs */
    size_t used, size;
};

/* One line of /proc/self/maps:
 *   start-end perms offset dev inode   path
 * kept if executable and backed by a file (path starts with '/'). */
static void add_mapping(const char *line, size_t len, uintptr_t start, uintptr_t end, void *arg)
{
    (void)len;
    struct mapping_list *l = arg;
    struct pprof_mapping m = {.start = start, .limit = end};
    const char *perms = strchr(line, ' ') + 1; /* procmaps_foreach saw the space */
    const char *s = skip_field(perms);
    m.offset = procmaps_hex(&s);
    s = skip_field(skip_field(skip_field(s))); /* offset's tail, dev, inode */
    if (l->n == l->cap || strlen(perms) < 4 || perms[2] != 'x' || *s != '/')
        return;
    size_t name_len = strlen(s);
    if (l->n > 0 && !strcmp(l->out[l->n - 1].filename, s)) { /* another segment, same file */
        m.filename = l->out[l->n - 1].filename;
        m.build_id = l->out[l->n - 1].build_id;
    } else {
        if (l->used + name_len + 1 > l->size)
            return;
        memcpy(l->buf + l->used, s, name_len + 1);
        m.filename = l->buf + l->used;
        l->used += name_len + 1;
        m.build_id = read_build_id(m.filename, l->buf, &l->used, l->size);
    }
    l->out[l->n++] = m;
}

size_t pprof_read_mappings(struct pprof_mapping *out, size_t cap, char *buf, size_t bufsize)
{
    /* Lines longer than `line` (a path near PATH_MAX) are skipped whole.
     * Not on the stack, which may be a small thread's (a dump inside
     * malloc): the caller holds the dump lock (dump.c; the unit test calls
     * it alone). */
    SA_BSS_APART static char line[4096 + 128];
    struct mapping_list l = {out, cap, 0, buf, 0, bufsize};
    if (!procmaps_foreach(line, sizeof(line), add_mapping, &l))
        return 0;
    size_t n = l.n;

    /* The main program first (stable: its segments keep their order).  The
     * line buffer holds its name. */
    char *exe = line;
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(line) - 1);
    if (k <= 0)
        return n;
    exe[k] = '\0';
    for (size_t i = 0, front = 0; i < n; i++) {
        if (strcmp(out[i].filename, exe))
            continue;
        struct pprof_mapping m = out[i];
        memmove(&out[front + 1], &out[front], (i - front) * sizeof(m));
        out[front++] = m;
    }
    return n;
}
