/*
 * elf.c: just enough of ELF64 (little-endian, the Linux targets salloc runs
 * on) to symbolize an address: the PT_LOAD program headers (file offset ->
 * virtual address) and the function symbols of .symtab, or of .dynsym when
 * the file is stripped.  Every offset read from the file is checked against
 * its size: a damaged or foreign file yields "no symbols", never a crash.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct sym {
    uint64_t addr, size;
    const char *name; /* points into elf.data */
};

struct elf {
    char *data;
    size_t size;
    Elf64_Phdr *loads; /* PT_LOAD headers, copied */
    size_t nloads;
    struct sym *syms;  /* sorted by addr */
    size_t nsyms;
};

static bool in_file(const struct elf *e, uint64_t off, uint64_t len)
{
    return off <= e->size && len <= e->size - off;
}

static int sym_cmp(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    /* Among aliases the sized one first, then the shorter name (foo over
     * __foo_internal is a guess; either is right). */
    if ((x->size == 0) != (y->size == 0))
        return x->size == 0 ? 1 : -1;
    return (int)strlen(x->name) - (int)strlen(y->name);
}

/* Section header i.  Headers and symbols are copied out of the file: the
 * offsets in it need not be aligned (a damaged file), and a misaligned
 * access is undefined. */
static Elf64_Shdr section(const struct elf *e, const Elf64_Ehdr *h, uint64_t i)
{
    Elf64_Shdr sh;
    memcpy(&sh, e->data + h->e_shoff + i * h->e_shentsize, sizeof(sh));
    return sh;
}

/* Loads the function symbols of the first section of type `type`. */
static void load_symbols(struct elf *e, const Elf64_Ehdr *h, uint32_t type)
{
    for (unsigned i = 0; i < h->e_shnum; i++) {
        const Elf64_Shdr sh = section(e, h, i);
        if (sh.sh_type != type || sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= h->e_shnum)
            continue;
        const Elf64_Shdr strs = section(e, h, sh.sh_link);
        if (!in_file(e, sh.sh_offset, sh.sh_size) || !in_file(e, strs.sh_offset, strs.sh_size))
            continue;
        size_t n = sh.sh_size / sizeof(Elf64_Sym);
        e->syms = xrealloc(e->syms, (e->nsyms + n) * sizeof(*e->syms));
        const char *names = e->data + strs.sh_offset;
        for (size_t k = 0; k < n; k++) {
            Elf64_Sym st;
            memcpy(&st, e->data + sh.sh_offset + k * sizeof(st), sizeof(st));
            int t = ELF64_ST_TYPE(st.st_info);
            if ((t != STT_FUNC && t != STT_GNU_IFUNC) || st.st_shndx == SHN_UNDEF ||
                st.st_value == 0 || st.st_name >= strs.sh_size)
                continue;
            const char *name = names + st.st_name;
            if (!memchr(name, '\0', strs.sh_size - st.st_name) || !*name)
                continue;
            e->syms[e->nsyms++] = (struct sym){st.st_value, st.st_size, name};
        }
        return;
    }
}

struct elf *elf_open(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct elf *e = xmalloc(sizeof(*e));
    memset(e, 0, sizeof(*e));
    size_t cap = 1 << 20;
    e->data = xmalloc(cap);
    for (;;) {
        if (e->size == cap)
            e->data = xrealloc(e->data, cap *= 2);
        size_t n = fread(e->data + e->size, 1, cap - e->size, f);
        e->size += n;
        if (n == 0)
            break;
    }
    fclose(f);
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->data;
    if (e->size < sizeof(*h) || memcmp(h->e_ident, ELFMAG, SELFMAG) ||
        h->e_ident[EI_CLASS] != ELFCLASS64 || h->e_ident[EI_DATA] != ELFDATA2LSB) {
        elf_close(e);
        return NULL;
    }
    if (h->e_phentsize == sizeof(Elf64_Phdr) &&
        in_file(e, h->e_phoff, (uint64_t)h->e_phnum * sizeof(Elf64_Phdr))) {
        e->loads = xmalloc((h->e_phnum + 1) * sizeof(Elf64_Phdr));
        for (unsigned i = 0; i < h->e_phnum; i++) {
            Elf64_Phdr ph;
            memcpy(&ph, e->data + h->e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
            if (ph.p_type == PT_LOAD)
                e->loads[e->nloads++] = ph;
        }
    }
    if (h->e_shentsize == sizeof(Elf64_Shdr) &&
        in_file(e, h->e_shoff, (uint64_t)h->e_shnum * sizeof(Elf64_Shdr))) {
        load_symbols(e, h, SHT_SYMTAB);
        if (!e->nsyms)
            load_symbols(e, h, SHT_DYNSYM);
    }
    if (e->nsyms)
        qsort(e->syms, e->nsyms, sizeof(*e->syms), sym_cmp);
    return e;
}

void elf_close(struct elf *e)
{
    if (!e)
        return;
    free(e->data);
    free(e->loads);
    free(e->syms);
    free(e);
}

bool elf_offset_to_vaddr(const struct elf *e, uint64_t off, uint64_t *vaddr)
{
    for (size_t i = 0; i < e->nloads; i++) {
        const Elf64_Phdr *ph = &e->loads[i];
        if (off >= ph->p_offset && off - ph->p_offset < ph->p_memsz) {
            *vaddr = ph->p_vaddr + (off - ph->p_offset);
            return true;
        }
    }
    return false;
}

const char *elf_symbol(const struct elf *e, uint64_t vaddr)
{
    size_t lo = 0, hi = e->nsyms;
    while (lo < hi) { /* first symbol with addr > vaddr */
        size_t mid = lo + (hi - lo) / 2;
        if (e->syms[mid].addr <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    /* Step back over aliases at the same address to the preferred one. */
    size_t i = lo - 1;
    while (i > 0 && e->syms[i - 1].addr == e->syms[i].addr)
        i--;
    const struct sym *s = &e->syms[i];
    if (s->size && vaddr - s->addr >= s->size)
        return NULL;
    return s->name;
}
