/*
 * fuzz_unwind.c: the stack walker (src/unwind.c) on a loaded object and a
 * stack that the input makes up: its reader of .eh_frame_hdr's search
 * table, CIEs and FDEs (pointer encodings, augmentations), the CFA
 * programs it runs and the rules it reduces them to, and the walk those
 * rules drive (rule cache, signal frames, the thread's memo).
 *
 * An input is a header, the object's table segment, then the stack
 * (little-endian numbers):
 *
 *   offset size
 *    0  1  flags      bit 0: a sigreturn trampoline (glibc's __restore_rt,
 *                     9 bytes) at `tramp`; bit 1: the object has a build ID
 *                     (a PT_NOTE in its first page), so the walker keeps it
 *                     in its table of objects met before; bit 2: it came
 *                     with the program (sa_link_map_may_unload() false), so
 *                     a memo's check trusts it without a lookup; bit 3:
 *                     the walker knows the stack's top (the end of what it
 *                     may read over it), else it asks about each page
 *                     (fuzz_os_readable) and keeps no walk past the first
 *                     for its memo; bit 4: the object's file cannot be
 *                     opened, else it can (os_file_open and the rest: its
 *                     bytes are the object's, each segment at its vaddr),
 *                     so that with a build ID the _dl_find_object walk
 *                     reads the tables from there (src/unwind_file.c, also
 *                     compiled in)
 *    1  1  max        frames asked for: 1 + max % STACK_WALK_SLOTS
 *    2  2  sp         the walk's rsp: stack + (sp & ~7), 8-aligned as
 *                     UNWIND_FROM_HERE's always is
 *    4  4  pc         its return address (a word, below)
 *    8  4  rbp        its rbp (a word)
 *   12  4  text       the code segment: vaddr, then size; its bytes are
 *   16  4  text_size  zeros but for the trampoline
 *   20  4  table      the table segment: vaddr, then size; its bytes
 *   24  4  table_len  follow the header (fewer if the input ends first)
 *   28  2  hdr_off    PT_GNU_EH_FRAME (.eh_frame_hdr): table + hdr_off,
 *   30  2  hdr_len    hdr_len bytes
 *   32  4  tramp      the trampoline's vaddr (none unless it fits in text)
 *   36     the table segment: .eh_frame_hdr and .eh_frame as a linker lays
 *          them out (make_corpus.py copies them from real objects)
 *   ...    the stack: 4-byte words, each the 8-byte word at stack + 8i
 *          (up to 64 KiB of stack; zeros above, and under `stack`)
 *
 * A word (pc, rbp, the stack's) is what the walker reads, made from 32 bits
 * by their top two: 00 stack + (w & 0xffff), an address on the stack; 01
 * object + (w & 0xfffff), the object's vaddr w & 0xfffff (return addresses);
 * 10 w & 0x3fffffff, a small number; 11 0xffffffff00000000 | w, near the
 * top of the address space (sums wrap).  So a seed's walk means the same
 * in every run, whatever the addresses.
 *
 * The object has vaddrs below 1 MiB; its first page holds its ELF header
 * and program headers (a PT_LOAD of its own, then text, table,
 * PT_GNU_EH_FRAME, and PT_NOTE with bit 1), as a linked object's does.  An
 * input whose segments overlap or leave that range (an empty one may lie
 * anywhere) is skipped.  The
 * object and the stack lie in one mapping at a fixed address, so that
 * absolute pointer encodings (DW_EH_PE_absptr) mean the same in every run:
 *
 *   guard | object, 1 MiB | guard | 8 KiB | stack, 64 KiB | 1 MiB + 8 KiB | guard
 *
 * The object's bytes outside its three segments are poisoned (ASan), so
 * every read of the table reader must stay inside a segment, as
 * object_bytes() promises.  The stack's surroundings are what the walker
 * may read by unwind.h's rules: up to 255 words under a CFA (a saved rbp),
 * up to UNWIND_MAX_FRAME over the rsp; the guard pages beyond fault.
 *
 * unwind.c is compiled into this file (#include) rather than linked from
 * build/fuzz/lib: the reader and the walk are static functions behind
 * unwind_capture_from(), whose objects come from the loader.  Its two
 * lookups, _dl_find_object() and dl_iterate_phdr(), are renamed to
 * stand-ins that know only the made-up object, and its caches (rules,
 * objects met before) are emptied before each walk, so that inputs stay
 * independent.
 *
 * One thing the walker takes on trust is made true here: the ucontext a
 * signal frame points at is the kernel's, and its rsp a stack address (the
 * walk goes on from there unchecked).  Wherever the walk could find one
 * (after each word that holds the address of sigreturn code, which is the
 * trampoline's or the same 9 bytes in the table segment; at the start rsp
 * if the walk starts at such code; at the rsp of one whose rip is such
 * code) its rsp is made an 8-aligned stack address before the walk.  An
 * input where that does not settle is skipped.
 *
 * Checked besides the sanitizers:
 *   - both lookups (_dl_find_object and dl_iterate_phdr) give the same walk,
 *     the first from the object's file (unless bit 4), the second from
 *     memory;
 *   - a walk through a memo gives the frames of one without; a walk it kept
 *     is replayed (unwind_memo_replays() agreeing) with the same frames,
 *     and still is, giving what a walk without the memo gives, after every
 *     stack word near its reads that it did not record has been changed,
 *     and the start's rbp too unless rbp_matters: what unwind.h promises,
 *     that a walk is a function of its start and the words it recorded;
 *   - frames fit in `max`: the frame array is allocated at exactly that.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <sanitizer/asan_interface.h>

#include "fuzz_util.h"

int fuzz_dl_find_object(void *pc, struct dl_find_object *f);
int fuzz_dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *arg);
int fuzz_os_readable(const void *addr);

#define SA_TESTING 1 /* unwind_use_find_object writable: both lookups are tried */

/* The object's file, for unwind_file.c: its system calls (os.h's
 * os_file_*; os.c is not linked in) are stand-ins (below) that serve the
 * made-up object's bytes. */
#include "unwind_file.c"

#define _dl_find_object fuzz_dl_find_object
#define dl_iterate_phdr fuzz_dl_iterate_phdr
#define os_readable fuzz_os_readable
#include "unwind.c"
#undef _dl_find_object
#undef dl_iterate_phdr
#undef os_readable

#include "stack.h" /* STACK_WALK_SLOTS: what stack.c asks the walker for */

#define GUARD ((size_t)64 << 10)
#define OBJECT_SPAN ((size_t)1 << 20)
#define STACK_BELOW ((size_t)8 << 10)
#define STACK_SPAN ((size_t)64 << 10)
#define STACK_ABOVE (UNWIND_MAX_FRAME + ((size_t)8 << 10))
#define REGION_SIZE (GUARD + OBJECT_SPAN + GUARD + STACK_BELOW + STACK_SPAN + STACK_ABOVE + GUARD)
#define REGION_AT ((void *)0x500000000000) /* free in ASan's x86-64 layout */
#define PAGE 4096

#define NOTE_AT 0x200
#define UC_RSP offsetof(ucontext_t, uc_mcontext.gregs[REG_RSP])
#define UC_RIP offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP])
#define MAX_TRAMPS 8

static uintptr_t object; /* vaddr 0 of the made-up object */
static uintptr_t stack;  /* the first stack word */
static uintptr_t stack_end; /* the end of what the walker may read over it */
static uintptr_t dirty_lo, dirty_hi; /* stack bytes written, to clear */
/* FUZZ_UNWIND_VERBOSE=1: each input's walk on stderr (frames as object
 * vaddrs, o+0x..., or stack offsets, s+0x...), to see what a seed does. */
static bool verbose;

/* The made-up object, as the stand-ins describe it. */
static struct {
    const ElfW(Phdr) *phdr;
    size_t phnum;
    uintptr_t map_end, eh_frame_hdr;
    bool permanent;
} obj;
static char object_name[] = "/fuzz/unwind-object";
static struct link_map link_map_of_object = {.l_name = object_name};
static bool file_readable; /* unless input bit 4 */
#define FILE_FD 1000

int os_file_open(const char *path, int flags)
{
    (void)flags;
    if (!file_readable || strcmp(path, object_name)) {
        errno = ENOENT;
        return -1;
    }
    return FILE_FD;
}

/* The file holds each segment at its vaddr (make_object: p_offset is
 * p_vaddr); unwind_file.c reads only inside a segment's p_filesz, all of
 * it unpoisoned, so a read past one is ASan's to report. */
ssize_t os_file_pread(int fd, void *buf, size_t n, off_t at)
{
    FUZZ_CHECK(fd == FILE_FD && at >= 0 && (size_t)at <= OBJECT_SPAN && n <= OBJECT_SPAN - (size_t)at);
    memcpy(buf, (const void *)(object + (uintptr_t)at), n);
    return (ssize_t)n;
}

bool os_file_is_regular(int fd)
{
    FUZZ_CHECK(fd == FILE_FD);
    return true;
}

void os_file_close(int fd) { FUZZ_CHECK(fd == FILE_FD); }

bool sa_link_map_may_unload(const void *l)
{
    return !(l == &link_map_of_object && obj.permanent);
}

int fuzz_dl_find_object(void *pc, struct dl_find_object *f)
{
    if ((uintptr_t)pc < object || (uintptr_t)pc >= obj.map_end)
        return -1;
    memset(f, 0, sizeof(*f));
    f->dlfo_map_start = (void *)object;
    f->dlfo_map_end = (void *)obj.map_end;
    f->dlfo_link_map = &link_map_of_object;
    f->dlfo_eh_frame = (void *)obj.eh_frame_hdr;
    return 0;
}

int fuzz_dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *arg)
{
    struct dl_phdr_info info = {.dlpi_addr = object, .dlpi_name = object_name,
                                .dlpi_phdr = obj.phdr, .dlpi_phnum = (ElfW(Half))obj.phnum,
                                .dlpi_adds = 1, .dlpi_subs = 0};
    return cb(&info, sizeof(info), arg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    verbose = getenv("FUZZ_UNWIND_VERBOSE") != NULL;
    void *at = mmap(REGION_AT, REGION_SIZE, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (at == MAP_FAILED) /* absolute encodings then differ from run to run */
        at = mmap(NULL, REGION_SIZE, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED) {
        perror("fuzz_unwind: mmap");
        abort();
    }
    uintptr_t r = (uintptr_t)at;
    object = r + GUARD;
    link_map_of_object.l_addr = object;
    stack = object + OBJECT_SPAN + GUARD + STACK_BELOW;
    stack_end = stack + STACK_SPAN + STACK_ABOVE;
    if (mprotect((void *)r, GUARD, PROT_NONE) ||
        mprotect((void *)(object + OBJECT_SPAN), GUARD, PROT_NONE) ||
        mprotect((void *)stack_end, GUARD, PROT_NONE)) {
        perror("fuzz_unwind: mprotect");
        abort();
    }
    ASAN_POISON_MEMORY_REGION((void *)(object + PAGE), OBJECT_SPAN - PAGE);
    dirty_lo = stack_end;
    dirty_hi = stack - STACK_BELOW;
    return 0;
}

/* The made-up stack is on no thread's stack, so the walker asks about each
 * page before it reads it (unwind.c's stack_readable).  By its rules it
 * never asks about one outside what it may read (the layout above): the
 * stand-in stops the run as the read's fault would have, and otherwise
 * answers "readable" without a system call. */
int fuzz_os_readable(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    if (a < stack - STACK_BELOW || a >= stack_end) {
        fprintf(stderr, "fuzz_unwind: the walker asked about %p, outside its stack's reach\n",
                addr);
        abort();
    }
    return 1;
}

static uintptr_t word(uint32_t w)
{
    switch (w >> 30) {
    case 0: return stack + (w & 0xffff);
    case 1: return object + (w & 0xfffff);
    case 2: return w & 0x3fffffff;
    default: return ~(uintptr_t)0xffffffff | w;
    }
}

static uintptr_t load(uintptr_t at)
{
    uintptr_t v;
    memcpy(&v, (const void *)at, sizeof(v));
    return v;
}

static void store(uintptr_t at, uintptr_t v)
{
    memcpy((void *)at, &v, sizeof(v));
    if (at < dirty_lo)
        dirty_lo = at;
    if (at + sizeof(v) > dirty_hi)
        dirty_hi = at + sizeof(v);
}

static uint32_t u32_at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint16_t u16_at(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* ---- the stack's ucontexts ---- */

static uintptr_t tramps[MAX_TRAMPS]; /* where the object holds sigreturn code */
static unsigned ntramps;

static bool is_tramp(uintptr_t v)
{
    for (unsigned i = 0; i < ntramps; i++)
        if (v == tramps[i])
            return true;
    return false;
}

/* Makes the rsp of the ucontext at `u`, and of those its rip leads to, an
 * 8-aligned stack address; true if it changed any. */
static bool trust_ucontext(uintptr_t u)
{
    bool changed = false;
    for (unsigned i = 0; i <= STACK_WALK_SLOTS; i++) {
        if (u < stack || u + UC_RIP + 8 > stack_end)
            return changed; /* not a stack address: no walk gets here */
        uintptr_t rsp = load(u + UC_RSP);
        if (rsp < stack || rsp >= stack + STACK_SPAN || rsp % 8) {
            rsp = stack + (rsp % STACK_SPAN & ~(uintptr_t)7);
            store(u + UC_RSP, rsp);
            changed = true;
        }
        if (!is_tramp(load(u + UC_RIP)))
            break;
        u = rsp;
    }
    return changed;
}

/* Every ucontext a walk from (pc, sp) may read made trustworthy (see the
 * top); false if that does not settle (the input is skipped).  Above the
 * bytes written the stack holds zeros. */
static bool trust_ucontexts(uintptr_t pc, uintptr_t sp)
{
    if (!ntramps)
        return true;
    for (int round = 0; round < 4; round++) {
        bool changed = is_tramp(pc) && trust_ucontext(sp);
        for (uintptr_t p = stack - 8; p < dirty_hi; p++)
            if (is_tramp(load(p)))
                changed |= trust_ucontext(p + 8);
        if (!changed)
            return true;
    }
    return false;
}

/* ---- the object ---- */

struct input {
    uint8_t flags, max;
    uint16_t sp, hdr_off, hdr_len;
    uint32_t pc, rbp, text, text_size, table, table_len, tramp;
    const uint8_t *table_bytes;
    const uint8_t *words;
    size_t nwords;
};
#define HEADER_SIZE 36

static bool parse(const uint8_t *d, size_t n, struct input *in)
{
    if (n < HEADER_SIZE)
        return false;
    in->flags = d[0];
    in->max = d[1];
    in->sp = u16_at(d + 2);
    in->pc = u32_at(d + 4);
    in->rbp = u32_at(d + 8);
    in->text = u32_at(d + 12) & 0xfffff;
    in->text_size = u32_at(d + 16) & 0xfffff;
    in->table = u32_at(d + 20) & 0xfffff;
    in->table_len = u32_at(d + 24) & 0xfffff;
    in->hdr_off = u16_at(d + 28);
    in->hdr_len = u16_at(d + 30);
    in->tramp = u32_at(d + 32) & 0xfffff;
    d += HEADER_SIZE, n -= HEADER_SIZE;
    if (in->table_len > n)
        in->table_len = (uint32_t)n;
    in->table_bytes = d;
    d += in->table_len, n -= in->table_len;
    in->words = d;
    in->nwords = n / 4 < STACK_SPAN / 8 ? n / 4 : STACK_SPAN / 8;
    /* Three segments, apart, inside the object's span. */
    uint64_t t0 = in->text, t1 = t0 + in->text_size, b0 = in->table, b1 = b0 + in->table_len;
    return (!in->text_size || (t0 >= PAGE && t1 <= OBJECT_SPAN)) &&
           (!in->table_len || (b0 >= PAGE && b1 <= OBJECT_SPAN)) &&
           (t1 <= b0 || b1 <= t0 || !in->text_size || !in->table_len);
}

static void make_object(const struct input *in)
{
    ElfW(Ehdr) eh = {.e_type = ET_DYN, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
                     .e_phoff = sizeof(eh), .e_ehsize = sizeof(eh),
                     .e_phentsize = sizeof(ElfW(Phdr))};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    ElfW(Phdr) ph[5] = {
        {.p_type = PT_LOAD, .p_flags = PF_R, .p_vaddr = 0, .p_filesz = PAGE, .p_memsz = PAGE},
        {.p_type = PT_LOAD, .p_flags = PF_R | PF_X, .p_offset = in->text, .p_vaddr = in->text,
         .p_filesz = in->text_size, .p_memsz = in->text_size},
        {.p_type = PT_LOAD, .p_flags = PF_R, .p_offset = in->table, .p_vaddr = in->table,
         .p_filesz = in->table_len, .p_memsz = in->table_len},
        {.p_type = PT_GNU_EH_FRAME, .p_flags = PF_R, .p_vaddr = in->table + in->hdr_off,
         .p_memsz = in->hdr_len},
        {.p_type = PT_NOTE, .p_flags = PF_R, .p_vaddr = NOTE_AT},
    };
    size_t n = 4;
    static const uint8_t id[20] = "fuzz_unwind build ID";
    if (in->flags & 2) {
        Elf64_Nhdr nh = {.n_namesz = 4, .n_descsz = sizeof(id), .n_type = NT_GNU_BUILD_ID};
        memcpy((void *)(object + NOTE_AT), &nh, sizeof(nh));
        memcpy((void *)(object + NOTE_AT + sizeof(nh)), "GNU", 4);
        memcpy((void *)(object + NOTE_AT + sizeof(nh) + 4), id, sizeof(id));
        ph[4].p_filesz = ph[4].p_memsz = sizeof(nh) + 4 + sizeof(id);
        n = 5;
    } else {
        memset((void *)(object + NOTE_AT), 0, sizeof(Elf64_Nhdr) + 4 + sizeof(id));
    }
    eh.e_phnum = (ElfW(Half))n;
    memcpy((void *)object, &eh, sizeof(eh));
    memcpy((void *)(object + sizeof(eh)), ph, n * sizeof(ph[0]));
    obj.phdr = (const ElfW(Phdr) *)(object + sizeof(eh));
    obj.phnum = n;
    obj.eh_frame_hdr = object + in->table + in->hdr_off;
    uint32_t end = in->text + in->text_size > in->table + in->table_len
                       ? in->text + in->text_size : in->table + in->table_len;
    obj.map_end = object + ((end + PAGE - 1) & ~(uint32_t)(PAGE - 1));
    obj.permanent = in->flags & 4;
    file_readable = !(in->flags & 16);

    ASAN_UNPOISON_MEMORY_REGION((void *)(object + in->text), in->text_size);
    ASAN_UNPOISON_MEMORY_REGION((void *)(object + in->table), in->table_len);
    memcpy((void *)(object + in->table), in->table_bytes, in->table_len);
    /* Sigreturn code: the trampoline, and wherever the table has it too. */
    ntramps = 0;
    if ((in->flags & 1) && in->tramp >= in->text &&
        (uint64_t)in->tramp + sizeof(sigreturn_code) <= (uint64_t)in->text + in->text_size) {
        memcpy((void *)(object + in->tramp), sigreturn_code, sizeof(sigreturn_code));
        tramps[ntramps++] = object + in->tramp;
    }
    const uint8_t *t = in->table_bytes, *t_end = t + in->table_len, *hit;
    while (ntramps < MAX_TRAMPS &&
           (hit = memmem(t, (size_t)(t_end - t), sigreturn_code, sizeof(sigreturn_code)))) {
        tramps[ntramps++] = object + in->table + (uintptr_t)(hit - in->table_bytes);
        t = hit + 1;
    }
}

static void clear_object(const struct input *in)
{
    if ((in->flags & 1) && ntramps && tramps[0] == object + in->tramp)
        memset((void *)(object + in->tramp), 0, sizeof(sigreturn_code));
    memset((void *)(object + in->table), 0, in->table_len);
    ASAN_POISON_MEMORY_REGION((void *)(object + in->text), in->text_size);
    ASAN_POISON_MEMORY_REGION((void *)(object + in->table), in->table_len);
}

static void clear_stack(void)
{
    if (dirty_lo < dirty_hi)
        memset((void *)dirty_lo, 0, dirty_hi - dirty_lo);
    dirty_lo = stack_end;
    dirty_hi = stack - STACK_BELOW;
}

static bool make_stack(const struct input *in, uintptr_t pc, uintptr_t sp)
{
    clear_stack();
    for (size_t i = 0; i < in->nwords; i++)
        store(stack + 8 * i, word(u32_at(in->words + 4 * i)));
    return trust_ucontexts(pc, sp);
}

/* ---- walks ---- */

/* The walker's caches emptied: a rule or an object kept from another
 * input (at the same addresses) would answer for this one. */
static void forget_everything(void)
{
    memset(cache, 0, sizeof(cache[0]) << cache_bits);
    cache_bits = CACHE_BITS_FIRST;
    cache_evictions = 0;
    memset(known, 0, sizeof(known));
    known_claimed = 0;
}

struct walk_result {
    unsigned n;
    bool complete;
    void **frames; /* exactly max of them */
};

static struct walk_result capture(const struct unwind_from *from, unsigned max)
{
    struct walk_result r = {.frames = malloc(max * sizeof(void *))};
    r.n = unwind_capture_from(from, r.frames, max, &r.complete);
    FUZZ_CHECK(r.n <= max);
    return r;
}

static bool same(const struct walk_result *a, const struct walk_result *b)
{
    return a->n == b->n && a->complete == b->complete &&
           !memcmp(a->frames, b->frames, a->n * sizeof(void *));
}

static void show(const struct walk_result *r, const struct unwind_memo *m)
{
    fprintf(stderr, "fuzz_unwind: %u frames, %s, memo %s:", r->n,
            r->complete ? "complete" : "incomplete",
            m->last == UNWIND_MEMO_KEPT ? "kept" : "not kept");
    for (unsigned i = 0; i < r->n; i++) {
        uintptr_t f = (uintptr_t)r->frames[i];
        if (f - object < OBJECT_SPAN)
            fprintf(stderr, " o+%#lx", (unsigned long)(f - object));
        else if (f - stack < STACK_SPAN)
            fprintf(stderr, " s+%#lx", (unsigned long)(f - stack));
        else
            fprintf(stderr, " %#lx", (unsigned long)f);
    }
    fprintf(stderr, "\n");
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Changes every 8-byte stack word within 2 KiB under a read `m` recorded
 * (where a frame's saved rbp, which the memo forgets if nothing uses it,
 * may lie) that no recorded read overlaps. */
static void change_unrecorded(const struct unwind_memo *m)
{
    uintptr_t at[sizeof(m->reads) / sizeof(m->reads[0])];
    unsigned n = m->nreads;
    for (unsigned i = 0; i < n; i++)
        at[i] = m->reads[i].addr;
    qsort(at, n, sizeof(at[0]), by_address);
    uintptr_t p = stack - STACK_BELOW; /* the next word not yet looked at */
    unsigned j = 0; /* the first read that may overlap p's word */
    for (unsigned i = 0; i < n; i++) {
        uintptr_t lo = (at[i] - 256 * 8) & ~(uintptr_t)7, hi = at[i] + 8;
        for (p = p > lo ? p : lo; p < hi && p + 8 <= stack_end; p += 8) {
            while (j < n && at[j] + 8 <= p)
                j++;
            bool recorded = false;
            for (unsigned k = j; k < n && at[k] < p + 8 && !recorded; k++)
                recorded = at[k] + 8 > p;
            if (!recorded)
                store(p, load(p) ^ 0x5a5a5a5a5a5a5a5aull);
        }
    }
}

/* The walks from `from` with the lookup now chosen, against `first`. */
static void check_walks(const struct unwind_from *from, unsigned max,
                        const struct walk_result *first)
{
    forget_everything();
    struct walk_result plain = capture(from, max);
    FUZZ_CHECK(same(&plain, first)); /* whichever lookup found the object */

    struct unwind_memo *m = calloc(1, sizeof(*m));
    struct unwind_from with = *from;
    with.memo = m;
    struct walk_result kept = capture(&with, max);
    FUZZ_CHECK(same(&kept, &plain));
    if (verbose)
        show(&kept, m);
    if (m->last == UNWIND_MEMO_KEPT) {
        FUZZ_CHECK(unwind_memo_replays(&with, max));
        FUZZ_CHECK(m->last == UNWIND_MEMO_REPLAYED);
        m->last = UNWIND_MEMO_UNUSED;
        struct walk_result again = capture(&with, max);
        FUZZ_CHECK(m->last == UNWIND_MEMO_REPLAYED);
        FUZZ_CHECK(same(&again, &plain));
        free(again.frames);

        /* The words it did not record changed, and rbp unless it matters:
         * still replayed, and what a walk without the memo gives now (if
         * the ucontexts settle: a changed word may name a trampoline). */
        change_unrecorded(m);
        if (!m->rbp_matters)
            with.rbp ^= 0x5a5a5a5a5a5a5a5aull;
        if (trust_ucontexts(with.pc, with.sp)) {
            struct unwind_from without = with;
            without.memo = NULL;
            struct walk_result fresh = capture(&without, max);
            FUZZ_CHECK(same(&fresh, &plain)); /* else it read a word the memo does not check */
            m->last = UNWIND_MEMO_UNUSED;
            struct walk_result replay = capture(&with, max);
            FUZZ_CHECK(m->last == UNWIND_MEMO_REPLAYED);
            FUZZ_CHECK(same(&replay, &plain));
            free(fresh.frames);
            free(replay.frames);
        }
    }
    free(kept.frames);
    free(plain.frames);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in;
    if (!parse(data, size, &in))
        return 0;
    unsigned max = 1 + in.max % STACK_WALK_SLOTS;
    struct unwind_from from = {.pc = word(in.pc), .sp = stack + (in.sp & ~7u),
                               .rbp = word(in.rbp)};
    make_object(&in);
    unwind_stack_top_for_test = in.flags & 8 ? stack_end : 0;
    struct walk_result first = {0};
    /* With _dl_find_object (glibc 2.35 and later: the first walk's), then
     * with dl_iterate_phdr; the stack laid out afresh for each. */
    for (int lookup = HAVE_DL_FIND_OBJECT ? 0 : 1; lookup < 2; lookup++) {
        unwind_use_find_object = lookup == 0;
        if (!make_stack(&in, from.pc, from.sp))
            break; /* ucontexts that do not settle: skipped */
        if (!first.frames) {
            forget_everything();
            first = capture(&from, max);
        }
        check_walks(&from, max, &first);
    }
    free(first.frames);
    unwind_stack_top_for_test = 0;
    clear_stack();
    clear_object(&in);
    return 0;
}
