/*
 * unwind.c: the cached DWARF stack walker (see unwind.h for the contract).
 *
 * Three parts, bottom up:
 *   1. reading .eh_frame_hdr, CIEs and FDEs (bounds-checked against the
 *      loaded segments of the object that holds the code address);
 *   2. running a CFA program up to one address and reducing the resulting
 *      row to a 32-bit rule (or END / GIVE_UP);
 *   3. the rule cache and the walk itself.
 *
 * References: the x86-64 psABI section 3.7 (DWARF register numbers: rbp 6,
 * rsp 7, return address 16), the LSB's .eh_frame and .eh_frame_hdr
 * formats, DWARF 4 section 6.4 (call frame instructions).  libgcc's
 * unwind-dw2.c is the behaviour matched: DW_CFA_remember_state saves the
 * CFA rule too, and a return address without an FDE ends the stack.
 */
#define _GNU_SOURCE
#include "unwind.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <stddef.h>
#include <string.h>
#include <ucontext.h>

#include "elfnote.h"
#include "os.h"
#include "unwind_file.h"
#include "util.h"

/* ---- rules ----
 * bits 0-2 kind, bit 3 CFA is rbp-based (else rsp), bits 4-11 rbp slot k
 * (rbp saved at CFA - 8k; 0: rbp unchanged), bits 12-31 CFA offset.
 * RULE_SIGNAL: the return address is a signal trampoline (its CIE says 'S'):
 * the interrupted registers are in the ucontext the kernel left there. */
enum { RULE_EMPTY = 0, RULE_FRAME = 1, RULE_END = 2, RULE_GIVE_UP = 3, RULE_SIGNAL = 4 };
#define RULE_KIND(r) ((r) & 7u)
#define RULE_CFA_RBP(r) (((r) >> 3) & 1u)
#define RULE_RBP_SLOT(r) (((r) >> 4) & 0xffu)
#define RULE_CFA_OFF(r) ((r) >> 12)
#define RULE_CFA_OFF_MAX ((1u << 20) - 1)

#define DW_REG_RBP 6
#define DW_REG_RSP 7
#define DW_REG_RA 16

static struct unwind_stats stats; /* relaxed atomics; replays below */

/* Replays, counted in stripes on cache lines of their own, a thread's
 * stripe picked by its memo's address: every sample replays, and one word
 * all sampling threads wrote moved its line from core to core at each
 * sample.  Two threads sampling every 8th 64-byte allocation on two cores:
 * 2.2 ns an allocation faster (median of 11 paired rounds, 9 faster), for
 * 8 more instructions a sample. */
#define REPLAY_STRIPE_BITS 6
#define REPLAY_STRIPES (1u << REPLAY_STRIPE_BITS)
SA_BSS_APART static struct {
    uint64_t n;
} SA_ALIGNED(SA_CACHELINE) replays[REPLAY_STRIPES];

static void count(uint64_t *counter) { __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

/* ---- 1. reading DWARF ---- */

/* Reads never go past `end`; any that would sets `bad`, and later reads
 * return zeros, so callers check `bad` once at the end of a record.  The
 * bytes are where the object is mapped (bias 0) or a copy read from its
 * file (unwind_file.h): p + bias is their address in the object, which
 * pc-relative pointers are relative to. */
struct cursor {
    const uint8_t *p, *end;
    bool bad;
    intptr_t bias;
};

static uint64_t read_fixed(struct cursor *c, size_t n)
{
    uint64_t v = 0;
    if ((size_t)(c->end - c->p) < n || c->bad) {
        c->bad = true;
        return 0;
    }
    memcpy(&v, c->p, n); /* x86-64 is little-endian, as the data is */
    c->p += n;
    return v;
}

static uint8_t read_u8(struct cursor *c) { return (uint8_t)read_fixed(c, 1); }

static uint64_t read_uleb(struct cursor *c)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b = read_u8(c);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    c->bad = true;
    return 0;
}

static int64_t read_sleb(struct cursor *c)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b = read_u8(c);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (shift + 7 < 64 && (b & 0x40))
                v |= ~(uint64_t)0 << (shift + 7);
            return (int64_t)v;
        }
    }
    c->bad = true;
    return 0;
}

/* DW_EH_PE_* pointer encodings (LSB): low nibble the format, bits 4-6 what
 * it is relative to.  Only what x86-64 Linux toolchains emit: absolute,
 * pc-relative and (in .eh_frame_hdr) data-relative. */
#define PE_OMIT 0xff
#define PE_FORMAT(e) ((e) & 0x0f)
#define PE_APPLY(e) ((e) & 0x70)
#define PE_PCREL 0x10
#define PE_DATAREL 0x30

static uintptr_t read_encoded(struct cursor *c, uint8_t enc, uintptr_t datarel)
{
    uintptr_t field = (uintptr_t)c->p + (uintptr_t)c->bias;
    uint64_t v;
    switch (PE_FORMAT(enc)) {
    case 0x00: case 0x04: case 0x0c: v = read_fixed(c, 8); break;
    case 0x01: v = read_uleb(c); break;
    case 0x02: v = read_fixed(c, 2); break;
    case 0x03: v = read_fixed(c, 4); break;
    case 0x09: v = (uint64_t)read_sleb(c); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)read_fixed(c, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)read_fixed(c, 4); break;
    default: c->bad = true; return 0;
    }
    switch (PE_APPLY(enc)) {
    case 0: break;
    case PE_PCREL: v += field; break;
    case PE_DATAREL: v += datarel; break;
    default: c->bad = true; return 0;
    }
    return (uintptr_t)v;
}

/* The object holding a code address: its load bias and program headers,
 * and (found through _dl_find_object) the range it is mapped at and a tag
 * that names this loading of it. */
struct object {
    uintptr_t pc;
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    size_t phnum;
    bool found;
    uintptr_t map_start, map_end;
    uint64_t tag;
    /* Its link map's name and dynamic section (found through
     * _dl_find_object; else NULL): whether its file can be read instead. */
    const char *name;
    const ElfW(Dyn) *dynamic;
    struct unwind_file *file; /* the walk's; set: read its tables from there */
    const unsigned char *id; /* its build ID (code_identity), or NULL */
    size_t id_len;
};

/* Whether `o`'s program headers put o->pc in one of its loaded segments. */
static bool holds_pc(const struct object *o)
{
    for (size_t i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        uintptr_t start = o->base + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && o->pc >= start && o->pc - start < ph->p_memsz)
            return true;
    }
    return false;
}

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct object *o = arg;
    o->base = info->dlpi_addr;
    o->phdr = info->dlpi_phdr;
    o->phnum = info->dlpi_phnum;
    return o->found = holds_pc(o);
}

/* The loader's lock-free lookup (glibc 2.35 and later), found at run time:
 * a weak reference, so salloc still loads on an older glibc. */
#ifdef DLFO_STRUCT_HAS_EH_DBASE
#pragma weak _dl_find_object
#define HAVE_DL_FIND_OBJECT 1
#else
#define HAVE_DL_FIND_OBJECT 0
#endif

SA_UNWIND_MUTABLE bool unwind_use_find_object = HAVE_DL_FIND_OBJECT;

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x9E3779B97F4A7C15ull + 0x7f4a7c15; }

/* A build ID's first 16 bytes (of 20 for SHA-1 IDs) name it well enough,
 * in two mixes: this runs per object per capture. */
static uint64_t id_mix(const unsigned char *id, size_t len)
{
    uint64_t w[2] = {0, 0};
    if (len >= sizeof(w))
        memcpy(w, id, sizeof(w)); /* the usual case: two loads */
    else
        memcpy(w, id, len);
    return mix(mix(3, w[0]), w[1]);
}

/* What the code of `o` is, whatever address it was loaded at: its build
 * ID (a hash of its contents, which the GNU toolchain writes into a note
 * by default), else its file name.  Needed because the loader allocates
 * link maps with malloc: a library loaded where an unloaded one was, of
 * the same size, may well get the same link map address too. */
static uint64_t code_identity(struct object *o, const char *name)
{
    for (size_t i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        o->id = elf_build_id((const unsigned char *)(o->base + ph->p_vaddr), ph->p_memsz,
                             &o->id_len);
        if (o->id)
            return id_mix(o->id, o->id_len);
    }
    uint64_t h = 5;
    size_t len = name ? strnlen(name, 4096) : 0;
    for (size_t k = 0; k < len; k += 8) {
        uint64_t w = 0;
        memcpy(&w, name + k, len - k < 8 ? len - k : 8);
        h = mix(h, w);
    }
    return h;
}

#if HAVE_DL_FIND_OBJECT
/* The rest of find_object_lockfree, from what _dl_find_object found. */
static bool describe_found(struct object *o, const struct dl_find_object *f)
{
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f->dlfo_map_start;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_phentsize != sizeof(ElfW(Phdr)) ||
        eh->e_phoff < sizeof(*eh) || eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(ElfW(Phdr)) > 4096)
        return false; /* headers not in the first page: leave it unwalked */
    o->base = f->dlfo_link_map->l_addr;
    o->name = f->dlfo_link_map->l_name;
    o->dynamic = f->dlfo_link_map->l_ld;
    o->phdr = (const ElfW(Phdr) *)((uintptr_t)f->dlfo_map_start + eh->e_phoff);
    o->phnum = eh->e_phnum;
    o->map_start = (uintptr_t)f->dlfo_map_start;
    o->map_end = (uintptr_t)f->dlfo_map_end;
    /* This loading of this code: another object loaded at the same
     * address later has other contents (and if not, the same rules). */
    uint64_t tag = mix(mix(mix(1, (uintptr_t)f->dlfo_link_map), o->map_start), o->map_end);
    o->tag = mix(mix(tag, (uintptr_t)f->dlfo_eh_frame), code_identity(o, f->dlfo_link_map->l_name)) | 1;
    if (o->tag == UINT64_MAX) /* frame_tag's "do not cache" */
        o->tag = 1;
    return holds_pc(o);
}
#endif

/* The object at o->pc through _dl_find_object: lock-free, so a capture
 * never waits for the loader's lock (which a fork() may leave held for
 * good in the child: glibc resets dl_iterate_phdr's lock there only for
 * the thread that was holding it, none of the others).  The program
 * headers are read from the ELF header the object's first page maps, as
 * glibc itself finds them. */
static bool find_object_lockfree(struct object *o)
{
#if HAVE_DL_FIND_OBJECT
    struct dl_find_object f;
    if (!_dl_find_object || _dl_find_object((void *)o->pc, &f) != 0 || !f.dlfo_link_map)
        return false;
    return describe_found(o, &f);
#else
    (void)o;
    return false;
#endif
}

/* ---- objects met before ----
 * Finding an object's tag the long way (its program headers, then its
 * notes) cost a few dozen ns per object per capture, most of a capture.
 * Objects met before are kept here, found again by what _dl_find_object
 * says now (link map, range, .eh_frame) and confirmed by their build ID,
 * read again where it lies: in the object's first page, which is mapped
 * (it holds the ELF header that the range _dl_find_object gives starts
 * with).  An object loaded later in an unloaded one's place, with the same
 * link map address too, has other bytes there, unless it is the same build
 * at the same address: the same code, with the same rules.  The table is
 * append-only, entries never change once ready, so readers take no lock;
 * an object with no build ID in its first page, or met once the table is
 * full (a program that loads and unloads many libraries), is looked up
 * the long way each time. */
#define KNOWN_OBJECTS 32

struct known_object {
    uintptr_t link_map, map_start, map_end, eh_frame;
    const unsigned char *id; /* its build ID's first bytes, in its first page */
    size_t id_len;
    uint64_t id_hash; /* id_mix of them, as the tag took them */
    uint64_t tag;
    bool permanent; /* never unloaded (permanent_object): a memo's check
                     * needs no lookup */
    bool ready;
};

static struct known_object known[KNOWN_OBJECTS];
static unsigned known_claimed;

#if HAVE_DL_FIND_OBJECT
static bool known_matches(const struct known_object *k, const struct dl_find_object *f)
{
    return k->link_map == (uintptr_t)f->dlfo_link_map &&
           k->map_start == (uintptr_t)f->dlfo_map_start &&
           k->map_end == (uintptr_t)f->dlfo_map_end && k->eh_frame == (uintptr_t)f->dlfo_eh_frame &&
           id_mix(k->id, k->id_len) == k->id_hash;
}

/* The entry of the object `f` describes, or -1. */
static int known_index(const struct dl_find_object *f)
{
    unsigned n = __atomic_load_n(&known_claimed, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n && i < KNOWN_OBJECTS; i++)
        if (__atomic_load_n(&known[i].ready, __ATOMIC_ACQUIRE) && known_matches(&known[i], f))
            return (int)i;
    return -1;
}

/* Whether `f` is an object glibc never unloads: dlclose() unloads only
 * what dlopen() loaded (and not even that if marked nodelete), never what
 * the program's own loading brought in.  Those found here for sure: every
 * object loaded with the program, as its link map tells when salloc is the
 * process's malloc (sa_link_map_may_unload); else the program, the loader,
 * the libc that salloc's own references resolved to, and salloc itself
 * (linked -z nodelete, so even when dlopen()ed).  Once per object met
 * (known_add), so four lookups each are nothing. */
static bool permanent_object(const struct dl_find_object *f)
{
    if (!sa_link_map_may_unload(f->dlfo_link_map))
        return true;
    const void *const in[] = {(const void *)getauxval(AT_ENTRY), (const void *)_dl_find_object,
                              (const void *)gnu_get_libc_version,
                              (const void *)unwind_capture_from};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        struct dl_find_object p;
        if (in[i] && _dl_find_object((void *)in[i], &p) == 0 &&
            p.dlfo_link_map == f->dlfo_link_map && p.dlfo_map_start == f->dlfo_map_start)
            return true;
    }
    return false;
}

/* Keeps `o` (just described from `f`) if its build ID is in its first
 * page and the table has room: its entry, or -1. */
static int known_add(const struct object *o, const struct dl_find_object *f)
{
    const unsigned char *id = o->id; /* as the tag took it (code_identity) */
    size_t len = o->id_len < 16 ? o->id_len : 16;
    if (!id || len < 8 || (uintptr_t)id < o->map_start || (uintptr_t)id + len > o->map_start + 4096)
        return -1;
    unsigned i = __atomic_fetch_add(&known_claimed, 1, __ATOMIC_RELAXED);
    if (i >= KNOWN_OBJECTS) {
        __atomic_store_n(&known_claimed, KNOWN_OBJECTS, __ATOMIC_RELAXED); /* no wrap-around */
        return -1;
    }
    known[i] = (struct known_object){
        .link_map = (uintptr_t)f->dlfo_link_map, .map_start = o->map_start,
        .map_end = o->map_end, .eh_frame = (uintptr_t)f->dlfo_eh_frame, .id = id,
        .id_len = len, .id_hash = id_mix(id, len), .tag = o->tag,
        .permanent = permanent_object(f)};
    __atomic_store_n(&known[i].ready, true, __ATOMIC_RELEASE);
    return (int)i;
}
#endif

/* The tag of the loaded object holding `pc` and its range, through the
 * objects met before when it is one (*entry: its entry, else -1); 0 if no
 * object holds it. */
static uint64_t object_tag(uintptr_t pc, uintptr_t *start, uintptr_t *end, int *entry)
{
    *entry = -1;
#if HAVE_DL_FIND_OBJECT
    struct dl_find_object f;
    if (!_dl_find_object || _dl_find_object((void *)pc, &f) != 0 || !f.dlfo_link_map)
        return 0;
    *start = (uintptr_t)f.dlfo_map_start;
    *end = (uintptr_t)f.dlfo_map_end;
    if ((*entry = known_index(&f)) >= 0)
        return known[*entry].tag;
    struct object o = {.pc = pc};
    count(&stats.objects);
    if (!describe_found(&o, &f))
        return 0;
    *entry = known_add(&o, &f);
    return o.tag;
#else
    (void)pc, (void)start, (void)end;
    return 0;
#endif
}

/* Whether the object at `at` is still the one of entry `entry` (a memo's
 * check, unwind.h): what _dl_find_object says of it matches the entry, as
 * object_tag would find it, without the search through the table.  An
 * object never unloaded is where it was: only `at` is checked, which
 * still tells a memo that names the wrong entry (a test makes one). */
static bool still_known(uintptr_t at, int entry)
{
#if HAVE_DL_FIND_OBJECT
    if (entry < 0 || entry >= KNOWN_OBJECTS)
        return false;
    if (known[entry].permanent)
        return at == known[entry].map_start;
    struct dl_find_object f;
    return _dl_find_object && _dl_find_object((void *)at, &f) == 0 && f.dlfo_link_map &&
           known_matches(&known[entry], &f);
#else
    (void)at, (void)entry;
    return false;
#endif
}

/* Fills `o` for code address o->pc; false if no loaded object holds it. */
static bool object_at(struct object *o)
{
    if (unwind_use_find_object)
        o->found = find_object_lockfree(o);
    else
        dl_iterate_phdr(find_object, o);
    return o->found;
}

/* A cursor over [p, p + len) if that lies inside one loaded segment of the
 * object; a bad cursor otherwise. */
static struct cursor object_bytes(const struct object *o, uintptr_t p, uint64_t len)
{
    for (size_t i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        uintptr_t start = o->base + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && p >= start && p - start <= ph->p_memsz &&
            len <= ph->p_memsz - (p - start))
            return (struct cursor){(const uint8_t *)p, (const uint8_t *)p + len, false, 0};
    }
    return (struct cursor){NULL, NULL, true, 0};
}

/* [addr, addr + len) of the object into `buf`: from its file if the walk
 * reads it there, else (or if that read fails) where it is mapped.  False
 * if the bytes are not all in one loaded segment. */
static bool fetch(const struct object *o, uintptr_t addr, void *buf, size_t len)
{
    if (o->file && unwind_file_read(o->file, addr, buf, len))
        return true;
    struct cursor c = object_bytes(o, addr, len);
    if (c.bad)
        return false;
    memcpy(buf, c.p, len);
    return true;
}

/* Up to `cap` bytes from `p` of the walk's file: a CIE's (`cie`) from
 * the walk's copy when it is the last one read, which it then is. */
static size_t file_record_bytes(struct unwind_file *f, uintptr_t p, uint8_t *buf, size_t cap,
                                bool cie)
{
    if (cie && f->cie_at == p) {
        memcpy(buf, f->cie, f->cie_got);
        return f->cie_got;
    }
    size_t got = unwind_file_read_upto(f, p, buf, cap);
    if (cie && got > 0 && got <= sizeof(f->cie)) {
        memcpy(f->cie, buf, got);
        f->cie_got = got;
        f->cie_at = p;
    }
    return got;
}

/* One .eh_frame record (CIE or FDE) at `p`: a cursor over its body (after
 * the length), or a bad cursor.  A zero length is the terminator.  Read
 * from the file into `buf` when the walk reads the object's file and the
 * body fits in `cap` bytes (all but a few records in a thousand); else in
 * place. */
static struct cursor record_at(const struct object *o, uintptr_t p, uint8_t *buf, size_t cap,
                               bool cie)
{
    size_t got = o->file ? file_record_bytes(o->file, p, buf, cap, cie) : 0;
    if (got >= 4) { /* the length and, most often, the whole record */
        uint32_t len32;
        memcpy(&len32, buf, 4);
        if (len32 == 0)
            return (struct cursor){NULL, NULL, true, 0};
        if (len32 <= got - 4)
            return (struct cursor){buf + 4, buf + 4 + len32, false, (intptr_t)(p - (uintptr_t)buf)};
    }
    struct cursor c = object_bytes(o, p, 4);
    uint64_t len = read_fixed(&c, 4);
    if (len == 0xffffffffu) {
        c = object_bytes(o, p + 4, 8);
        len = read_fixed(&c, 8);
        p += 8;
    }
    if (c.bad || len == 0)
        return (struct cursor){NULL, NULL, true, 0};
    return object_bytes(o, p + 4, len);
}

/* The binary-search table is read a block of this many entries at a
 * time once the search has narrowed to one: from a file, 6 reads and a
 * block where the search alone took 12 (libc's 3,713 entries). */
#define TABLE_BLOCK 64

/* ---- the search tables' indexes ----
 * Read from a file (unwind_file.h), each step of the binary search above
 * the last block is a pread(): 10 for a rule of gcc's cc1 (45,201
 * entries), with the block's, the FDE's and the CIE's 13 in all.  gcc -O2
 * -c src/prof.c at the default rate made 8,833 to 9,768 reads, where
 * with prof:false it makes 3,571 system calls in all.  So an object whose
 * table is read from its file gets, at its INDEX_AFTER_SEARCHES-th search,
 * an index: the start of every TABLE_BLOCK-th entry, read once
 * (INDEX_CHUNK entries a read), after which a rule reads the block the
 * index names and the FDE, and the CIE unless the walk has it
 * (file_record_bytes): gcc then made 2,306 to 2,377 reads (6,611 calls in
 * all), and its system time fell from 50.5-58.0 ms to 44.7-47.1 (medians
 * of 15 to 30 runs, old and new in turn; with prof:false 31.3-42.8: it
 * moves more between runs than the reads cost).
 *
 * Not at its first search: building one touches 8 KiB of buffer and a
 * page of keys, which a program with a few dozen rules (a small one's,
 * libc's and libstdc++'s) would carry for nothing: bench_core's pair/16
 * had 12 KiB more resident in salloc's memory with an index at the first
 * search.  Keyed by the object's tag (describe_found: this loading of
 * this code) and its table's address and length.  Like the objects met
 * before, the entries are append-only; once ready an entry never changes,
 * so readers take no lock.  One thread claims or builds at a time (a
 * try-lock: another meanwhile searches the table as before, as does every
 * object once the entries or keys run out, and one whose table could not
 * be read).  Objects read in memory get none: reading their whole table
 * would map it (unwind_file.h).  Bytes: 4 a key (cc1: 2.8 KiB, libc 236),
 * in .lbss, touched only as used. */
#define INDEXED_OBJECTS 32
#define INDEX_KEYS (1u << 14)
#define INDEX_CHUNK 1024 /* entries a read while building: 8 KiB */
/* Smaller tables take 4 reads or fewer to search: not worth an index. */
#define INDEX_MIN_ENTRIES (TABLE_BLOCK * 16)
#define INDEX_AFTER_SEARCHES UNWIND_INDEX_AFTER_SEARCHES

enum { INDEX_COUNTING = 1, INDEX_READY, INDEX_NONE };

struct table_index {
    uint64_t tag;
    uintptr_t table;
    uint64_t n;
    uint32_t first;    /* its keys: index_keys[first, first + ceil(n / TABLE_BLOCK)) */
    unsigned searches; /* atomic: while counting, the searches of its table */
    unsigned state;    /* atomic */
};

static struct table_index indexes[INDEXED_OBJECTS];
static unsigned indexes_claimed; /* atomic; entries below it are claimed */
static uint32_t index_keys_used; /* only the try-lock's holder reads or writes it */
static bool index_lock;          /* atomic: the try-lock */
SA_BSS_APART static int32_t index_keys[INDEX_KEYS];
SA_BSS_APART static int32_t index_chunk[2 * INDEX_CHUNK];

SA_UNWIND_MUTABLE uint32_t unwind_index_keys_max = INDEX_KEYS;

static bool index_trylock(void) { return !__atomic_exchange_n(&index_lock, true, __ATOMIC_ACQUIRE); }
static void index_unlock(void) { __atomic_store_n(&index_lock, false, __ATOMIC_RELEASE); }

/* The claimed entry for (tag, table, n); NULL if none. */
static struct table_index *index_find(uint64_t tag, uintptr_t table, uint64_t n)
{
    unsigned claimed = __atomic_load_n(&indexes_claimed, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < claimed; i++)
        if (indexes[i].tag == tag && indexes[i].table == table && indexes[i].n == n)
            return &indexes[i];
    return NULL;
}

/* Claims an entry, counting, for (tag, table, n): one search so far. */
static void index_claim(uint64_t tag, uintptr_t table, uint64_t n)
{
    if (!index_trylock())
        return; /* counted from a later search */
    unsigned i = __atomic_load_n(&indexes_claimed, __ATOMIC_RELAXED);
    /* Another thread may have claimed it since the caller looked. */
    if (!index_find(tag, table, n) && i < INDEXED_OBJECTS) {
        indexes[i] = (struct table_index){.tag = tag, .table = table, .n = n, .searches = 1,
                                          .state = INDEX_COUNTING};
        __atomic_store_n(&indexes_claimed, i + 1, __ATOMIC_RELEASE);
    }
    index_unlock();
}

/* Under the try-lock: reads every TABLE_BLOCK-th entry's start of `o`'s
 * table from its file into the keys from `first` on. */
static bool index_read(const struct object *o, uintptr_t table, uint64_t n, uint32_t first)
{
    for (uint64_t at = 0; at < n; at += INDEX_CHUNK) {
        uint64_t len = n - at < INDEX_CHUNK ? n - at : INDEX_CHUNK;
        /* Not fetch(): falling back to memory would map the whole table. */
        if (!unwind_file_read(o->file, table + 8 * at, index_chunk, 8 * len))
            return false;
        for (uint64_t e = 0; e < len; e += TABLE_BLOCK) /* INDEX_CHUNK is a multiple */
            index_keys[first + (at + e) / TABLE_BLOCK] = index_chunk[2 * e];
    }
    return true;
}

/* Builds the index of counting entry `ix` for `o`: true if it is ready
 * now.  Not if another thread holds the try-lock (a later search tries
 * again); never if there is no room or its table cannot be read. */
static bool index_build(struct table_index *ix, const struct object *o)
{
    if (!index_trylock())
        return false;
    if (__atomic_load_n(&ix->state, __ATOMIC_RELAXED) == INDEX_COUNTING) {
        uint64_t nkeys = (ix->n + TABLE_BLOCK - 1) / TABLE_BLOCK;
        uint32_t max = unwind_index_keys_max;
        bool room = index_keys_used <= max && nkeys <= max - index_keys_used;
        if (room && index_read(o, ix->table, ix->n, index_keys_used)) {
            ix->first = index_keys_used;
            index_keys_used += (uint32_t)nkeys;
            __atomic_store_n(&ix->state, INDEX_READY, __ATOMIC_RELEASE);
            count(&stats.indexes);
        } else {
            __atomic_store_n(&ix->state, INDEX_NONE, __ATOMIC_RELAXED);
        }
    }
    index_unlock();
    return __atomic_load_n(&ix->state, __ATOMIC_ACQUIRE) == INDEX_READY;
}

/* The index of `o`'s table for this search if it is not ready yet (the
 * caller looked with index_ready): built now if this is its
 * INDEX_AFTER_SEARCHES-th search (or a later one: the build may have found
 * the try-lock held); NULL if the table is searched without one. */
static const struct table_index *index_of(const struct object *o, uintptr_t table, uint64_t n)
{
    if (!o->file || n < INDEX_MIN_ENTRIES)
        return NULL;
    struct table_index *ix = index_find(o->tag, table, n);
    if (!ix) {
        index_claim(o->tag, table, n);
        return NULL;
    }
    unsigned state = __atomic_load_n(&ix->state, __ATOMIC_ACQUIRE);
    if (state == INDEX_READY)
        return ix;
    if (state != INDEX_COUNTING ||
        __atomic_add_fetch(&ix->searches, 1, __ATOMIC_RELAXED) < INDEX_AFTER_SEARCHES)
        return NULL;
    return index_build(ix, o) ? ix : NULL;
}

/* The ready index of an object (`o`, read from its file) met before,
 * found by its tag alone: a walk takes its table's address and length from
 * it without reading the header again. */
static const struct table_index *index_ready(const struct object *o)
{
    if (!o->file)
        return NULL;
    unsigned claimed = __atomic_load_n(&indexes_claimed, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < claimed; i++)
        if (indexes[i].tag == o->tag)
            return __atomic_load_n(&indexes[i].state, __ATOMIC_ACQUIRE) == INDEX_READY
                       ? &indexes[i]
                       : NULL;
    return NULL;
}

void unwind_postfork_child(void)
{
    /* The thread that held it is not in the child: the entry it was
     * building counts on, and a later search builds it again. */
    index_unlock();
}

/* The block of the table (its first entry) where the last entry whose
 * start is <= pc lies: the last key <= pc, or block 0 if none is. */
static uint64_t index_block(const struct table_index *ix, uintptr_t hdr, uintptr_t pc)
{
    const int32_t *keys = &index_keys[ix->first];
    uint64_t lo = 0, hi = (ix->n + TABLE_BLOCK - 1) / TABLE_BLOCK;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (hdr + (intptr_t)keys[mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    return lo * TABLE_BLOCK;
}

/* The address of the FDE that may cover `pc`, from the object's sorted
 * .eh_frame_hdr table; 0 if there is none. */
static uintptr_t find_fde(const struct object *o, uintptr_t pc)
{
    uintptr_t hdr = 0;
    uint64_t hdr_len = 0;
    for (size_t i = 0; i < o->phnum; i++)
        if (o->phdr[i].p_type == PT_GNU_EH_FRAME) {
            hdr = o->base + o->phdr[i].p_vaddr;
            hdr_len = o->phdr[i].p_memsz;
        }
    if (!hdr)
        return 0;
    uintptr_t table;
    uint64_t n;
    const struct table_index *ix = index_ready(o);
    if (o->file && o->file->table) { /* read for an earlier frame of this walk */
        table = o->file->table;
        n = o->file->count;
    } else if (ix) { /* or for its index */
        table = o->file->table = ix->table;
        n = o->file->count = ix->n;
    } else {
        /* version, three encodings, .eh_frame's address and the count: at
         * most 20 bytes, as many as the header holds in all */
        uint8_t head[20];
        size_t head_len = hdr_len < sizeof(head) ? (size_t)hdr_len : sizeof(head);
        if (head_len < 4 || !fetch(o, hdr, head, head_len))
            return 0;
        struct cursor c = {head, head + head_len, false, (intptr_t)(hdr - (uintptr_t)head)};
        uint8_t version = read_u8(&c), ptr_enc = read_u8(&c), count_enc = read_u8(&c);
        uint8_t table_enc = read_u8(&c);
        read_encoded(&c, ptr_enc, hdr);
        n = read_encoded(&c, count_enc, hdr);
        uint64_t table_off = (uint64_t)(c.p - head);
        /* The binary-search table: pairs of 4-byte offsets from the header. */
        if (c.bad || version != 1 || count_enc == PE_OMIT || table_enc != (PE_DATAREL | 0x0b) ||
            n == 0 || n > (hdr_len - table_off) / 8)
            return 0;
        table = hdr + table_off;
        if (o->file) {
            o->file->table = table;
            o->file->count = n;
        }
    }
    uint64_t lo = 0, hi = n; /* find the last entry whose start is <= pc */
    if (ix || (ix = index_of(o, table, n))) {
        lo = index_block(ix, hdr, pc);
        hi = n - lo < TABLE_BLOCK ? n : lo + TABLE_BLOCK;
        count(&stats.indexed);
    }
    while (hi - lo > TABLE_BLOCK) {
        uint64_t mid = lo + (hi - lo) / 2;
        int32_t start;
        if (!fetch(o, table + 8 * mid, &start, 4))
            return 0;
        if (hdr + (intptr_t)start <= pc)
            lo = mid;
        else
            hi = mid;
    }
    int32_t block[2 * TABLE_BLOCK];
    if (!fetch(o, table + 8 * lo, block, 8 * (hi - lo)))
        return 0;
    uint64_t at = 0; /* in the block */
    for (uint64_t b = 0, e = hi - lo; e - b > 1;) {
        uint64_t mid = b + (e - b) / 2;
        if (hdr + (intptr_t)block[2 * mid] <= pc)
            b = at = mid;
        else
            e = mid;
    }
    return hdr + (intptr_t)block[2 * at] <= pc ? hdr + (intptr_t)block[2 * at + 1] : 0;
}

/* What a CIE says about the FDEs that use it. */
struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool has_aug_data; /* 'z': FDEs carry an augmentation length */
    bool signal_frame; /* 'S' */
    struct cursor initial; /* its initial instructions */
};

/* CIEs hold a few bytes of augmentation and initial instructions: 28 at
 * most in libc, libstdc++ and python3.11. */
#define CIE_BUF UNWIND_FILE_CIE_BYTES
/* FDEs of libc: 192 bytes at most; of python3.11, 1 in 9,810 is longer. */
#define FDE_BUF 256

static bool parse_cie(const struct object *o, uintptr_t at, struct cie *ci, uint8_t *buf)
{
    struct cursor c = record_at(o, at, buf, CIE_BUF, true);
    if (read_fixed(&c, 4) != 0) /* CIE id: 0 in .eh_frame */
        return false;
    uint8_t version = read_u8(&c);
    const char *aug = (const char *)c.p;
    size_t aug_len = c.bad ? 0 : strnlen(aug, (size_t)(c.end - c.p));
    if (c.bad || aug_len == (size_t)(c.end - c.p) || (version != 1 && version != 3))
        return false;
    c.p += aug_len + 1;
    *ci = (struct cie){.fde_enc = 0};
    ci->code_align = read_uleb(&c);
    ci->data_align = read_sleb(&c);
    ci->ra_reg = version == 1 ? read_u8(&c) : read_uleb(&c);
    if (aug[0] == 'z') {
        uint64_t len = read_uleb(&c);
        if (c.bad || len > (uint64_t)(c.end - c.p))
            return false;
        struct cursor data = {c.p, c.p + len, false, c.bias};
        c.p += len;
        ci->has_aug_data = true;
        for (const char *a = aug + 1; *a; a++) {
            if (*a == 'R')
                ci->fde_enc = read_u8(&data);
            else if (*a == 'P')
                read_encoded(&data, read_u8(&data), 0); /* personality: skipped */
            else if (*a == 'L')
                read_u8(&data); /* LSDA encoding: the FDE's data is skipped whole */
            else if (*a == 'S')
                ci->signal_frame = true;
            else if (*a != 'B')
                break; /* unknown: the rest of the data is skipped by length */
        }
        if (data.bad)
            return false;
    } else if (aug[0]) {
        return false; /* an augmentation we cannot skip without 'z' */
    }
    ci->initial = c;
    return !c.bad;
}

/* ---- 2. running CFA programs ---- */

enum how { SAME = 0, UNDEFINED, OFFSET, OTHER };

struct reg_rule {
    uint8_t how;
    int64_t off; /* OFFSET: saved at CFA + off */
};

struct row {
    uint64_t cfa_reg;
    int64_t cfa_off;
    bool cfa_expr;
    struct reg_rule rbp, ra;
};

#define REMEMBER_DEPTH 8

struct program {
    const struct cie *ci;
    const struct row *initial; /* for DW_CFA_restore; NULL while running the CIE */
    uintptr_t target;
};

static void set_reg(struct row *r, const struct cie *ci, uint64_t reg, uint8_t how, int64_t off)
{
    struct reg_rule *rule = reg == DW_REG_RBP ? &r->rbp : reg == ci->ra_reg ? &r->ra : NULL;
    if (rule)
        *rule = (struct reg_rule){how, off};
}

static void restore_reg(struct row *r, const struct program *pg, uint64_t reg)
{
    if (!pg->initial)
        return;
    if (reg == DW_REG_RBP)
        r->rbp = pg->initial->rbp;
    else if (reg == pg->ci->ra_reg)
        r->ra = pg->initial->ra;
}

/* A factored offset times the CIE's data alignment, wrapping as the
 * unsigned product does: a table's numbers are anything (signed overflow
 * would be undefined), and rule_of_row refuses what makes no sense. */
static int64_t scaled(uint64_t factored, int64_t align)
{
    return (int64_t)(factored * (uint64_t)align);
}

/* Runs the instructions of `c` from address `loc`, stopping before the
 * first advance past pg->target.  False on malformed or unknown input. */
static bool run_program(struct cursor *c, const struct program *pg, uintptr_t loc, struct row *r)
{
    const struct cie *ci = pg->ci;
    struct row saved[REMEMBER_DEPTH];
    unsigned depth = 0;
    while (c->p < c->end && !c->bad) {
        uint8_t op = read_u8(c), arg = op & 0x3f;
        uint64_t reg, delta = 0;
        switch (op & 0xc0 ? op & 0xc0 : op) {
        case 0x40: delta = arg; break;                                   /* advance_loc */
        case 0x80: set_reg(r, ci, arg, OFFSET, scaled(read_uleb(c), ci->data_align)); break;
        case 0xc0: restore_reg(r, pg, arg); break;                       /* restore */
        case 0x00: break;                                                /* nop */
        case 0x01: /* set_loc */
            loc = read_encoded(c, ci->fde_enc, 0);
            if (loc > pg->target)
                return !c->bad;
            break;
        case 0x02: delta = read_fixed(c, 1); break;                      /* advance_loc1 */
        case 0x03: delta = read_fixed(c, 2); break;                      /* advance_loc2 */
        case 0x04: delta = read_fixed(c, 4); break;                      /* advance_loc4 */
        case 0x05: /* offset_extended */
            reg = read_uleb(c);
            set_reg(r, ci, reg, OFFSET, scaled(read_uleb(c), ci->data_align));
            break;
        case 0x06: restore_reg(r, pg, read_uleb(c)); break;              /* restore_extended */
        case 0x07: set_reg(r, ci, read_uleb(c), UNDEFINED, 0); break;    /* undefined */
        case 0x08: set_reg(r, ci, read_uleb(c), SAME, 0); break;         /* same_value */
        case 0x09: /* register */
            reg = read_uleb(c);
            read_uleb(c);
            set_reg(r, ci, reg, OTHER, 0);
            break;
        case 0x0a: /* remember_state: the whole row, CFA included (as libgcc) */
            if (depth == REMEMBER_DEPTH)
                return false;
            saved[depth++] = *r;
            break;
        case 0x0b: /* restore_state */
            if (depth == 0)
                return false;
            *r = saved[--depth];
            break;
        case 0x0c: /* def_cfa */
            r->cfa_reg = read_uleb(c);
            r->cfa_off = (int64_t)read_uleb(c);
            r->cfa_expr = false;
            break;
        case 0x0d: r->cfa_reg = read_uleb(c); r->cfa_expr = false; break; /* def_cfa_register */
        case 0x0e: r->cfa_off = (int64_t)read_uleb(c); break;            /* def_cfa_offset */
        case 0x0f: /* def_cfa_expression: cannot be a rule, so give up */
            return false;
        case 0x10: /* expression */
        case 0x16: { /* val_expression */
            reg = read_uleb(c);
            uint64_t len = read_uleb(c);
            if (len > (uint64_t)(c->end - c->p))
                return false;
            c->p += len;
            set_reg(r, ci, reg, OTHER, 0);
            break;
        }
        case 0x11: /* offset_extended_sf */
            reg = read_uleb(c);
            set_reg(r, ci, reg, OFFSET, scaled((uint64_t)read_sleb(c), ci->data_align));
            break;
        case 0x12: /* def_cfa_sf */
            r->cfa_reg = read_uleb(c);
            r->cfa_off = scaled((uint64_t)read_sleb(c), ci->data_align);
            r->cfa_expr = false;
            break;
        case 0x13: /* def_cfa_offset_sf */
            r->cfa_off = scaled((uint64_t)read_sleb(c), ci->data_align);
            break;
        case 0x14: /* val_offset */
            reg = read_uleb(c);
            read_uleb(c);
            set_reg(r, ci, reg, OTHER, 0);
            break;
        case 0x15: /* val_offset_sf */
            reg = read_uleb(c);
            read_sleb(c);
            set_reg(r, ci, reg, OTHER, 0);
            break;
        case 0x2e: read_uleb(c); break;                                  /* GNU_args_size */
        case 0x2f: /* GNU_negative_offset_extended */
            reg = read_uleb(c);
            set_reg(r, ci, reg, OFFSET, scaled(0 - read_uleb(c), ci->data_align));
            break;
        default:
            return false;
        }
        if (delta) {
            loc += delta * ci->code_align;
            if (loc > pg->target)
                break;
        }
    }
    return !c->bad;
}

/* The row in force at `pc` reduced to a rule. */
static uint32_t rule_of_row(const struct row *r, const struct cie *ci)
{
    if (r->ra.how == UNDEFINED)
        return RULE_END; /* the outermost frame (_start, a thread's start) */
    if (ci->signal_frame || r->cfa_expr || (r->cfa_reg != DW_REG_RSP && r->cfa_reg != DW_REG_RBP) ||
        r->cfa_off < 8 || r->cfa_off > (int64_t)RULE_CFA_OFF_MAX || r->ra.how != OFFSET ||
        r->ra.off != -8)
        return RULE_GIVE_UP;
    uint32_t slot = 0;
    if (r->rbp.how == OFFSET) {
        if (r->rbp.off >= 0 || r->rbp.off % 8 || r->rbp.off < -8 * 0xff)
            return RULE_GIVE_UP;
        slot = (uint32_t)(-r->rbp.off / 8);
    } else if (r->rbp.how != SAME) {
        return RULE_GIVE_UP;
    }
    return RULE_FRAME | (uint32_t)(r->cfa_reg == DW_REG_RBP) << 3 | slot << 4 |
           (uint32_t)r->cfa_off << 12;
}

/* x86-64 Linux's signal return trampoline (glibc's __restore_rt, the
 * sa_restorer every handler returns through): mov $15, %rax; syscall. */
static const unsigned char sigreturn_code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05};

/* The rule for code address `pc` in object `o`, from its .eh_frame. */
static uint32_t rule_in_object(const struct object *o, uintptr_t pc)
{
    uintptr_t fde_at = find_fde(o, pc);
    if (!fde_at)
        return RULE_END; /* no unwind information: the stack ends here, as for libgcc */
    uint8_t fde_buf[FDE_BUF], cie_buf[CIE_BUF];
    struct cursor c = record_at(o, fde_at, fde_buf, sizeof(fde_buf), false);
    uintptr_t cie_field = (uintptr_t)c.p + (uintptr_t)c.bias;
    uint32_t cie_off = (uint32_t)read_fixed(&c, 4);
    struct cie ci;
    if (c.bad || cie_off == 0 || !parse_cie(o, cie_field - cie_off, &ci, cie_buf))
        return RULE_GIVE_UP;
    uintptr_t begin = read_encoded(&c, ci.fde_enc, 0);
    uintptr_t range = read_encoded(&c, ci.fde_enc & 0x0f, 0);
    if (ci.has_aug_data) {
        uint64_t len = read_uleb(&c);
        if (len > (uint64_t)(c.end - c.p)) /* past the record: not run as instructions */
            return RULE_GIVE_UP;
        c.p += len;
    }
    if (c.bad)
        return RULE_GIVE_UP;
    if (pc < begin || pc - begin >= range)
        return RULE_END; /* in a gap between FDEs: no unwind information */
    /* walk() compares the code at the return address (pc + 1), or at an
     * interrupted instruction (pc), with sigreturn's: bytes the object must
     * have, which an FDE's range alone does not promise. */
    if (ci.signal_frame) {
        bool code_there = !object_bytes(o, pc, 1 + sizeof(sigreturn_code)).bad;
        return code_there ? RULE_SIGNAL : RULE_GIVE_UP;
    }
    struct row initial = {.cfa_reg = DW_REG_RSP}, r;
    struct program pg = {.ci = &ci, .initial = NULL, .target = pc};
    struct cursor init = ci.initial;
    if (!run_program(&init, &pg, begin, &initial))
        return RULE_GIVE_UP;
    r = initial;
    pg.initial = &initial;
    if (!run_program(&c, &pg, begin, &r))
        return RULE_GIVE_UP;
    return rule_of_row(&r, &ci);
}

/* The rule for code address `pc`, from the .eh_frame of the object that
 * holds it; *held (if not NULL) says whether a loaded object does (else
 * the rule is RULE_END, true only while nothing is loaded there). */
static uint32_t compute_rule_held(uintptr_t pc, bool *held, struct unwind_file *file)
{
    count(&stats.misses);
    struct object o = {.pc = pc};
    bool found = object_at(&o);
    if (held)
        *held = found;
    if (!found)
        return RULE_END;
    if (file && o.name) {
        struct unwind_file_object fo = {o.map_start, o.name, o.base, o.phdr,
                                        o.phnum,     o.dynamic, o.id, o.id_len};
        if (unwind_file_select(file, &fo)) {
            o.file = file;
            count(&stats.from_files);
        }
    }
    return rule_in_object(&o, pc);
}

static uint32_t compute_rule(uintptr_t pc, struct unwind_file *file)
{
    return compute_rule_held(pc, NULL, file);
}

bool unwind_rule_for_test(uintptr_t pc, bool *outermost, bool *cfa_rbp, uint32_t *cfa_off,
                          uint32_t *rbp_slot)
{
    struct unwind_file file;
    unwind_file_start(&file);
    uint32_t r = compute_rule(pc, &file);
    unwind_file_end(&file);
    *outermost = RULE_KIND(r) == RULE_END;
    *cfa_rbp = RULE_CFA_RBP(r);
    *cfa_off = RULE_CFA_OFF(r);
    *rbp_slot = RULE_RBP_SLOT(r);
    return RULE_KIND(r) == RULE_FRAME || RULE_KIND(r) == RULE_END;
}

void unwind_rules_for_test(const uintptr_t *pcs, unsigned n, uint32_t *rules)
{
    struct unwind_file file;
    unwind_file_start(&file);
    for (size_t i = 0; i < n; i++)
        rules[i] = compute_rule(pcs[i], &file);
    unwind_file_end(&file);
}

int unwind_object_permanent_for_test(const void *pc)
{
    uintptr_t start, end;
    int entry;
    if (!object_tag((uintptr_t)pc, &start, &end, &entry) || entry < 0)
        return -1;
    return known[entry].permanent;
}

/* ---- 3. the cache and the walk ---- */

/* An entry is valid while its seq is even and unchanged around the reads
 * of pc, tag and rule (a per-entry seqlock: writers make it odd while they
 * write; a writer that finds it odd skips the update).  The tag names the
 * code the rule describes (frame_tag): a rule whose code was unloaded, and
 * perhaps replaced by other code at the same address, no longer matches. */
#define CACHE_BITS 12

struct entry {
    uint32_t seq;
    uint32_t rule;
    uint64_t pc;
    uint64_t tag;
};

/* Page-aligned, so that the small table (below) is one page. */
SA_BSS_APART static struct entry cache[1u << CACHE_BITS] SA_ALIGNED(4096);

/* The cache starts as its first 2^CACHE_BITS_FIRST entries (one page)
 * and takes all of them once it has evicted CACHE_GROW_EVICTIONS rules.
 * A hash spreads a program's return addresses over every page of the
 * table it indexes: all 96 KiB of it had a small profiled program touch
 * 15 of its 24 pages (60 kB of resident memory, 1.3% of a 4.5 MB
 * process) for a few dozen rules; a first table of 512 entries, which
 * started mid-page, 4 pages.  bench_core's rows keep to the 128 entries
 * (sizemix, the most code of them, with 26 evictions), and `pair/16`'s
 * variables and tables come to 13 pages instead of 17.  A program whose
 * stacks meet more code than the small table holds evicts soon and gets
 * the whole table.
 * The index is the hash's top bits, so a rule found by the small table is
 * simply not found by the large one (a miss, computed again); an entry is
 * valid wherever it is, as its pc and tag say whose rule it holds. */
#define CACHE_BITS_FIRST 7
#define CACHE_GROW_EVICTIONS 64

static unsigned cache_bits = CACHE_BITS_FIRST; /* atomic; grows once */
static unsigned cache_evictions;               /* atomic; while small */

static struct entry *entry_of(uint64_t pc)
{
    unsigned bits = __atomic_load_n(&cache_bits, __ATOMIC_RELAXED);
    return &cache[(pc * 0x9E3779B97F4A7C15ull) >> (64 - bits)];
}

/* A put replaced another pc's rule. */
static void evicted(void)
{
    if (__atomic_load_n(&cache_bits, __ATOMIC_RELAXED) == CACHE_BITS)
        return;
    if (__atomic_add_fetch(&cache_evictions, 1, __ATOMIC_RELAXED) >= CACHE_GROW_EVICTIONS)
        __atomic_store_n(&cache_bits, CACHE_BITS, __ATOMIC_RELAXED);
}

static uint32_t cache_get(uint64_t pc, uint64_t tag)
{
    struct entry *e = entry_of(pc);
    /* Acquire on every load keeps the second read of seq after the data
     * (no fences: ThreadSanitizer cannot check them; on x86 these are all
     * plain loads anyway). */
    uint32_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    uint64_t p = __atomic_load_n(&e->pc, __ATOMIC_ACQUIRE);
    uint64_t g = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
    uint32_t rule = __atomic_load_n(&e->rule, __ATOMIC_ACQUIRE);
    uint32_t s2 = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    if ((s1 & 1) || s1 != s2 || p != pc)
        return RULE_EMPTY;
    if (g != tag) {
        count(&stats.stale);
        return RULE_EMPTY;
    }
    return rule;
}

static void cache_put(uint64_t pc, uint64_t tag, uint32_t rule)
{
    struct entry *e = entry_of(pc);
    uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    if ((s & 1) ||
        !__atomic_compare_exchange_n(&e->seq, &s, s + 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    uint64_t was = __atomic_load_n(&e->pc, __ATOMIC_RELAXED);
    if (was && was != pc)
        evicted();
    /* Release stores: seq's odd value is visible before the rest. */
    __atomic_store_n(&e->pc, pc, __ATOMIC_RELEASE);
    __atomic_store_n(&e->tag, tag, __ATOMIC_RELEASE);
    __atomic_store_n(&e->rule, rule, __ATOMIC_RELEASE);
    __atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
}

/* What one walk knows about the code it meets.  With _dl_find_object: the
 * objects it found (a stack spans a handful, and their code cannot be
 * unloaded while its frames are on this stack), so each frame's tag is its
 * object's, looked up once per object.  Otherwise one tag for the whole
 * walk: the loader's unload count (dl_iterate_phdr's dlpi_subs), so that a
 * dlclose() makes every older rule stale; UINT64_MAX (cache nothing) if
 * libc does not report it. */
#define WALK_OBJECTS 6

struct walk_object {
    uintptr_t start, end;
    uint64_t tag;
    int entry; /* in the table of objects met before, or -1 */
};

struct walk_state {
    uint64_t unloads;
    unsigned nobjects;
    bool unkept; /* met code a memo cannot vouch for (unwind_memo) */
    /* rbp's value came from the memo's read rbp_read (if it came from a
     * read at all), and a CFA was computed from it since (rbp_used). */
    bool rbp_used;
    unsigned rbp_read;
    /* What the walk may read without asking: [readable_lo, readable_hi),
     * below the top of its stack (readable_from); on a stack without a
     * known top (`probing`), the OS pages found readable (stack_readable). */
    uintptr_t readable_lo, readable_hi;
    bool probing;
    struct walk_object objects[WALK_OBJECTS];
    struct unwind_file file; /* closed when the walk ends */
};

_Static_assert(UNWIND_MEMO_OBJECTS >= WALK_OBJECTS, "a memo holds a walk's objects");

static int read_unloads(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
        return -1;
    *(uint64_t *)arg = info->dlpi_subs + 2; /* never 0: 0 means "no object" */
    return 1;
}

/* The tag of a walk without _dl_find_object (struct walk_state); with it,
 * UINT64_MAX, unused. */
static uint64_t walk_unloads(void)
{
    uint64_t unloads = UINT64_MAX;
    if (!unwind_use_find_object && dl_iterate_phdr(read_unloads, &unloads) != 1)
        unloads = UINT64_MAX;
    return unloads;
}

static void walk_start(struct walk_state *w)
{
    w->nobjects = 0;
    w->unkept = false;
    w->rbp_used = true; /* the starting rbp is no read (rbp_matters says if it counts) */
    w->rbp_read = 0;
    w->unloads = walk_unloads();
    unwind_file_start(&w->file);
}

/* The tag of the code at `pc`: 0 if no object holds it (its rule is not
 * cached), UINT64_MAX if rules cannot be cached at all. */
static uint64_t frame_tag(struct walk_state *w, uintptr_t pc)
{
    if (!unwind_use_find_object)
        return w->unloads;
    for (unsigned i = 0; i < w->nobjects; i++)
        if (pc >= w->objects[i].start && pc < w->objects[i].end)
            return w->objects[i].tag;
    uintptr_t start, end;
    int entry;
    uint64_t tag = object_tag(pc, &start, &end, &entry);
    if (tag && w->nobjects < WALK_OBJECTS)
        w->objects[w->nobjects++] = (struct walk_object){start, end, tag, entry};
    /* No object, one the walk does not keep, or one a memo cannot check. */
    if (!tag || entry < 0 || w->nobjects == WALK_OBJECTS)
        w->unkept = true;
    return tag;
}

static uint32_t rule_for(struct walk_state *w, uintptr_t pc)
{
    uint64_t tag = frame_tag(w, pc);
    if (tag == UINT64_MAX)
        return compute_rule(pc, &w->file);
    if (tag == 0)
        return RULE_END; /* no object holds it: no unwind information */
    uint32_t rule = cache_get(pc, tag);
    if (rule == RULE_EMPTY) {
        bool held;
        rule = compute_rule_held(pc, &held, &w->file);
        /* Without _dl_find_object the tag is the unload count, which a
         * dlopen() into the same place leaves alone: the end a PC that no
         * object holds gives is not kept, nor a memo of a walk through it. */
        if (held)
            cache_put(pc, tag, rule);
        else
            w->unkept = true;
    }
    return rule;
}

/* A stack word the walk reads, noted in `rec` (if any) for a replay. */
static uintptr_t read_word(struct unwind_memo *rec, struct walk_state *w, uintptr_t addr)
{
    uintptr_t value = *(const uintptr_t *)addr;
    if (rec) {
        if (rec->nreads < sizeof(rec->reads) / sizeof(rec->reads[0]))
            rec->reads[rec->nreads++] = (typeof(rec->reads[0])){addr, value};
        else
            w->unkept = true;
    }
    return value;
}

/* A saved rbp that no frame's CFA came from: nothing the walk did
 * depended on its value, so a replay need not check it.  Code without
 * frame pointers saves and restores rbp as it does any other register,
 * and most of those values are never used: a replay of a walk through
 * such code checks about half as many words. */
static void forget_unused_rbp(struct unwind_memo *rec, const struct walk_state *w)
{
    unsigned i = w->rbp_read;
    if (w->rbp_used || i >= rec->nreads)
        return;
    /* Usually one word after it (the return address): a loop, not a
     * memmove call made at every frame. */
    for (rec->nreads--; i < rec->nreads; i++)
        rec->reads[i] = rec->reads[i + 1];
}

/* ---- the top of the stack ----
 *
 * A walk only goes up the stack, and a right one stops below its top (at
 * the outermost frame, whose CFI says so).  A wrong one (a rule that does
 * not match its code, a return address that is no return address) could
 * read on past the top, into whatever is mapped above, or fault: above a
 * thread's stack there is often another thread's guard page.  So a walk
 * reads nothing at or above the top of the stack it is on, where it can
 * tell: glibc puts a thread's descriptor (pthread_self()) at the top of
 * the thread's stack mapping, above its TLS (not the main thread's: its
 * descriptor is among the loader's mappings), and __libc_stack_end is the
 * main thread's rsp at _start, below only its arguments and environment.
 * A stack pointer above either, or further below it than that stack can
 * reach (thread_window, main_window), is on a stack it cannot tell: a
 * signal stack (sigaltstack), a coroutine's, a thread's that glibc did
 * not start.  There the walk asks the kernel
 * whether each new OS page it is about to read is readable
 * (stack_readable), and stops at one that is not (asking the kernel for
 * the signal stack's extent instead would cost every such walk a system
 * call, where most read one page or two).  The windows are a guess: a
 * coroutine or signal stack that a thread glibc started uses, mapped less
 * than thread_window below that thread's descriptor (a thread given a
 * smaller stack than the default), is taken for the thread's stack and
 * bounded by its top, not its own (asking about every page of every walk
 * instead would cost a system call or more a sample); a walk deeper than
 * the window on a thread given a larger stack asks about its pages, a few
 * (a walk reads at most the frames asked for), where it need not. */
extern void *__libc_stack_end;
#define STACK_WINDOW ((uintptr_t)1 << 30) /* before the constructor, or no answer */

#ifdef SA_TESTING
uintptr_t unwind_stack_top_for_test;
#endif

/* The main thread's pthread_self(), from salloc's constructor (which the
 * main thread runs); 0 before.  How far below its top a stack reaches: a
 * thread's, glibc's default stack size (which the thread's descriptor is
 * in: at most that far above its sp); the main thread's, RLIMIT_STACK. */
static uintptr_t main_thread;
static uintptr_t thread_window = STACK_WINDOW, main_window = STACK_WINDOW;

__attribute__((constructor)) static void note_stacks(void)
{
    main_thread = (uintptr_t)pthread_self();
    pthread_attr_t attr;
    size_t size;
    if (pthread_getattr_default_np(&attr) == 0) {
        if (pthread_attr_getstacksize(&attr, &size) == 0 && size > 0 && size < STACK_WINDOW)
            thread_window = size;
        pthread_attr_destroy(&attr);
    }
    struct rlimit limit;
    if (getrlimit(RLIMIT_STACK, &limit) == 0 && limit.rlim_cur > 0 &&
        limit.rlim_cur < STACK_WINDOW)
        main_window = limit.rlim_cur;
}

uintptr_t unwind_stack_top(uintptr_t sp)
{
#ifdef SA_TESTING
    if (unwind_stack_top_for_test)
        return unwind_stack_top_for_test;
#endif
    uintptr_t self = (uintptr_t)pthread_self();
    if (sp < self && self - sp <= thread_window && self != main_thread)
        return self;
    uintptr_t start = (uintptr_t)__libc_stack_end;
    if (sp < start && start - sp <= main_window)
        return (start | 4095) + 1; /* its page is the stack's too */
    return UINTPTR_MAX;
}

/* The OS page stack_readable asks about: x86-64's.  A kernel with larger
 * pages would be asked about each 4 KiB of them, the same answer. */
#define PROBE_PAGE ((uintptr_t)4096)

/* Set when the kernel would not say (os_readable gave -1: a seccomp
 * filter refusing its call with an errno, say): from then on, walks on stacks
 * without a known top read unchecked, as they did before there was a
 * check, rather than pay a refused system call per page.  Relaxed. */
static bool probes_refused;

/* Whether a walk on a stack without a known top may read [from, to):
 * its pages are in the range found readable already (the starting sp's
 * page to begin with: the thread runs on it), or the kernel says each of
 * the others is (os_readable: a system call per new page; a walk spans
 * one to three pages, and only walks that no replay answered pay it: on
 * a paravirtualised VM a sample whose fresh 18-frame walk crosses a page
 * took 1.8 us on a makecontext stack, 0.29 on the main thread's).
 * Walks go up the stack, so the range grows up; a page apart from it
 * starts it afresh.  A walk that asked is not kept for a replay, which
 * would read the same words without asking (the stack may have been
 * unmapped since, and another mapped where it was): only a walk within
 * its starting sp's page is, a page the replaying thread runs on. */
static bool stack_readable(struct walk_state *w, uintptr_t from, uintptr_t to)
{
    if (from >= w->readable_lo && to <= w->readable_hi)
        return true;
    if (!w->probing)
        return false; /* past a known top */
    w->unkept = true;
    uintptr_t page = from & -PROBE_PAGE, last = (to - 1) & -PROBE_PAGE;
    for (;; page += PROBE_PAGE) {
        if (page < w->readable_lo || page >= w->readable_hi) {
            int readable = __atomic_load_n(&probes_refused, __ATOMIC_RELAXED)
                               ? -1
                               : os_readable((const void *)page);
            if (readable == 0)
                return false;
            if (readable < 0)
                __atomic_store_n(&probes_refused, true, __ATOMIC_RELAXED);
            if (page == w->readable_hi)
                w->readable_hi = page + PROBE_PAGE;
            else if (page + PROBE_PAGE == w->readable_lo)
                w->readable_lo = page;
            else
                w->readable_lo = page, w->readable_hi = page + PROBE_PAGE;
        }
        if (page == last)
            return true;
    }
}

/* Where a walk from `sp`, on a stack whose top is `top`, may read: below
 * the top; without one (UINTPTR_MAX), nowhere yet (`sp` may be an
 * interrupted one from a signal frame, on a page that is not readable: a
 * stack overflow's) or, at the walk's start, sp's page. */
static void readable_from(struct walk_state *w, uintptr_t sp, uintptr_t top, bool running_on_it)
{
    w->probing = top == UINTPTR_MAX;
    w->readable_lo = w->probing && running_on_it ? sp & -PROBE_PAGE : 0;
    w->readable_hi = !w->probing ? top : running_on_it ? w->readable_lo + PROBE_PAGE : 0;
}

/* The bytes of a signal frame's ucontext the walk reads. */
#define UCONTEXT_READ (offsetof(ucontext_t, uc_mcontext.gregs) + (REG_RIP + 1) * sizeof(greg_t))
_Static_assert(REG_RIP > REG_RSP && REG_RIP > REG_RBP, "rip is the last register read");

/* The walk proper.  A frame step with rule r:
 *     cfa = (rbp or rsp) + offset;  rip = [cfa - 8];  rbp = [cfa - 8k] or
 *     unchanged;  rsp = cfa.
 * A signal frame: the handler returned into the trampoline with rsp at the
 * ucontext the kernel saved, whose registers are the interrupted ones.
 * The first address (`pc`) is an exact one if `exact` (unwind_capture's
 * own), as is an interrupted instruction; every other is a return address
 * (unwind_capture_from's first too), looked up at ra - 1 so
 * that a call at the very end of a function (a noreturn call) still finds
 * its own FDE.  *complete says whether the walk reached the end of the
 * stack (or `max` frames); if not it stopped at a frame it could not
 * unwind, and the frames before it are still right. */
static unsigned walk(struct walk_state *w, uintptr_t pc, uintptr_t sp, uintptr_t rbp, bool exact,
                     void **frames, unsigned max, bool *complete, struct unwind_memo *rec)
{
    unsigned n = 0;
    bool rbp_is_start = true; /* not yet read from a frame */
    uintptr_t top = unwind_stack_top(sp);
    readable_from(w, sp, top, true);
    *complete = false;
    while (n < max) {
        /* A walk the memo cannot keep (keep()) needs no more notes: deep
         * stacks would note, and forget, words at every frame to the end. */
        if (rec && (w->unkept || n > UNWIND_MEMO_FRAMES))
            rec = NULL;
        uintptr_t at = exact ? pc : pc - 1;
        uint32_t r = rule_for(w, at);
        exact = false;
        if (RULE_KIND(r) == RULE_SIGNAL) {
            w->unkept = true; /* the kernel's frame: not replayed */
            if (memcmp((const void *)pc, sigreturn_code, sizeof(sigreturn_code)) ||
                sp >= top || top - sp < UCONTEXT_READ ||
                !stack_readable(w, sp, sp + UCONTEXT_READ))
                return n;
            const ucontext_t *uc = (const ucontext_t *)sp;
            pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
            sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
            rbp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
            exact = true; /* the interrupted instruction, not a return address */
            top = unwind_stack_top(sp); /* the interrupted code's stack */
            readable_from(w, sp, top, false);
        } else if (RULE_KIND(r) == RULE_FRAME) {
            if (RULE_CFA_RBP(r)) {
                if (rec && rbp_is_start)
                    rec->rbp_matters = true;
                w->rbp_used = true;
            }
            uintptr_t cfa = (RULE_CFA_RBP(r) ? rbp : sp) + RULE_CFA_OFF(r);
            /* rsp is always 8-aligned on x86-64: a CFA that is not comes
             * from a wrong rule, or from an rbp that is no frame pointer,
             * and its words would be read through misaligned pointers. */
            if (cfa <= sp || cfa - sp > UNWIND_MAX_FRAME || cfa % 8)
                return n;
            /* Below the top, or the page asked about (the return address
             * at cfa - 8 is on the page below cfa). */
            if (cfa > w->readable_hi && !stack_readable(w, cfa - 8, cfa))
                return n;
            pc = read_word(rec, w, cfa - 8);
            if (RULE_RBP_SLOT(r)) {
                uintptr_t slot = cfa - 8 * RULE_RBP_SLOT(r);
                if (slot < w->readable_lo && !stack_readable(w, slot, slot + 8))
                    return n;
                if (rec)
                    forget_unused_rbp(rec, w);
                rbp = read_word(rec, w, slot);
                rbp_is_start = false;
                w->rbp_read = rec ? rec->nreads - 1 : 0;
                w->rbp_used = false;
            }
            sp = cfa;
        } else {
            *complete = RULE_KIND(r) == RULE_END;
            return n;
        }
        if (pc == 0)
            break;
        frames[n++] = (void *)pc;
    }
    *complete = true;
    return n;
}

#if defined(__x86_64__)
__attribute__((noinline)) unsigned unwind_capture(void **frames, unsigned max, bool *complete)
{
    /* Where this function is, and its rsp and rbp there: the CFI for that
     * exact address says how to reach the caller. */
    uintptr_t pc, sp, rbp;
    __asm__ volatile("lea 0(%%rip), %0\n\t"
                     "mov %%rsp, %1\n\t"
                     "mov %%rbp, %2"
                     : "=&r"(pc), "=&r"(sp), "=&r"(rbp));
    struct walk_state w;
    walk_start(&w);
    unsigned n = walk(&w, pc, sp, rbp, true, frames, max, complete, NULL);
    unwind_file_end(&w.file);
    if (!*complete)
        count(&stats.incomplete);
    return n;
}

/* How many frames the memo holds if the walk from (pc, sp, rbp), of
 * tag `unloads` (walk_unloads), would give them again (see unwind.h for why
 * a match is exact); else -1.  A walk that follows a failed check looks its
 * objects up itself: handing it those the check found (before an object
 * that no longer matches) saved nothing that happens more than once after
 * a dlclose(), and cost every replay 8 instructions an object. */
static int replay_check(const struct unwind_memo *m, uint64_t unloads, uintptr_t pc, uintptr_t sp,
                        uintptr_t rbp, unsigned max)
{
    if (m->pc != pc || m->sp != sp || (m->rbp_matters && m->rbp != rbp) || m->nframes > max)
        return -1;
    if (unloads != m->unloads)
        return -1;
    /* The stack words first: their loads then overlap the objects' checks
     * (6 ns of a 64 ns sample, measured), where after them they stalled. */
    for (unsigned i = 0; i < m->nreads; i++)
        if (*(const uintptr_t *)m->reads[i].addr != m->reads[i].value)
            return -1;
    for (unsigned i = 0; i < m->nobjects; i++)
        if (!still_known(m->objects[i].at, m->objects[i].entry))
            return -1;
    return (int)m->nframes;
}

static void replayed(struct unwind_memo *m)
{
    m->last = UNWIND_MEMO_REPLAYED;
    /* Not a locked add (one per sample, where the rest of a replay is a
     * few dozen instructions): a statistic may miss a count of another
     * thread whose memo shares the stripe. */
    uint64_t *n = &replays[((uintptr_t)m >> 6) * 0x9E3779B97F4A7C15ull >> (64 - REPLAY_STRIPE_BITS)].n;
    __atomic_store_n(n, __atomic_load_n(n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

bool unwind_memo_replays(const struct unwind_from *from, unsigned max)
{
    struct unwind_memo *m = from->memo;
    if (!m || max == 0 || from->pc == 0)
        return false;
    if (replay_check(m, walk_unloads(), from->pc, from->sp, from->rbp, max - 1) < 0)
        return false;
    replayed(m);
    return true;
}

/* Keeps the walk just taken in `m` if a replay can vouch for it. */
static void keep(struct unwind_memo *m, const struct walk_state *w, uintptr_t pc, uintptr_t sp,
                 uintptr_t rbp, void *const *frames, unsigned n, unsigned max, bool complete)
{
    m->pc = 0;
    /* A walk cut short by `max` ends in the middle of the stack: not kept. */
    if (!complete || w->unkept || n > UNWIND_MEMO_FRAMES || n >= max ||
        (!unwind_use_find_object && w->unloads == UINT64_MAX))
        return;
    forget_unused_rbp(m, w); /* the last rbp read, unused at the end */
    m->nobjects = unwind_use_find_object ? w->nobjects : 0;
    for (unsigned i = 0; i < m->nobjects; i++) {
        m->objects[i].at = w->objects[i].start;
        m->objects[i].entry = w->objects[i].entry;
    }
    m->unloads = w->unloads;
    m->nframes = n;
    memcpy(m->frames, frames, n * sizeof(void *));
    m->sp = sp;
    m->rbp = rbp;
    m->pc = pc;
}

unsigned unwind_capture_from(const struct unwind_from *from, void **frames, unsigned max,
                             bool *complete)
{
    *complete = true;
    if (max == 0 || from->pc == 0)
        return 0;
    struct walk_state w;
    walk_start(&w);
    struct unwind_memo *m = from->memo;
    frames[0] = (void *)from->pc;
    if (m) {
        int k = replay_check(m, w.unloads, from->pc, from->sp, from->rbp, max - 1);
        if (k >= 0) {
            memcpy(frames + 1, m->frames, (unsigned)k * sizeof(void *));
            replayed(m);
            return 1 + (unsigned)k;
        }
        m->pc = 0;
        m->nreads = 0;      /* the walk below notes its reads afresh */
        m->rbp_matters = false;
    }
    unsigned n = 1 + walk(&w, from->pc, from->sp, from->rbp, false, frames + 1, max - 1, complete, m);
    unwind_file_end(&w.file);
    if (m) {
        keep(m, &w, from->pc, from->sp, from->rbp, frames + 1, n - 1, max - 1, *complete);
        m->last = m->pc ? UNWIND_MEMO_KEPT : UNWIND_MEMO_UNUSED;
    }
    if (!*complete)
        count(&stats.incomplete);
    return n;
}
#else
/* Other architectures: no walker yet (stack.c says what then). */
unsigned unwind_capture(void **frames, unsigned max, bool *complete)
{
    (void)frames, (void)max, (void)walk;
    count(&stats.incomplete);
    *complete = false;
    return 0;
}

unsigned unwind_capture_from(const struct unwind_from *from, void **frames, unsigned max,
                             bool *complete)
{
    (void)from;
    return unwind_capture(frames, max, complete);
}

bool unwind_memo_replays(const struct unwind_from *from, unsigned max)
{
    (void)from, (void)max;
    return false;
}
#endif

void unwind_get_stats(struct unwind_stats *st)
{
    st->incomplete = __atomic_load_n(&stats.incomplete, __ATOMIC_RELAXED);
    st->misses = __atomic_load_n(&stats.misses, __ATOMIC_RELAXED);
    st->from_files = __atomic_load_n(&stats.from_files, __ATOMIC_RELAXED);
    st->stale = __atomic_load_n(&stats.stale, __ATOMIC_RELAXED);
    st->objects = __atomic_load_n(&stats.objects, __ATOMIC_RELAXED);
    st->indexes = __atomic_load_n(&stats.indexes, __ATOMIC_RELAXED);
    st->indexed = __atomic_load_n(&stats.indexed, __ATOMIC_RELAXED);
    st->replays = 0;
    for (unsigned i = 0; i < REPLAY_STRIPES; i++)
        st->replays += __atomic_load_n(&replays[i].n, __ATOMIC_RELAXED);
    st->cache_entries = 1u << __atomic_load_n(&cache_bits, __ATOMIC_RELAXED);
}

uint32_t unwind_rule_cached_for_test(uintptr_t pc)
{
    struct walk_state w;
    walk_start(&w);
    uint32_t rule = rule_for(&w, pc);
    unwind_file_end(&w.file);
    return rule;
}
