/*
 * unwind_file.c: unwind tables read from the object's file (see
 * unwind_file.h for why, and when the file may stand for the mapping).
 */
#define _GNU_SOURCE
#include "unwind_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

bool SA_TEST_MUTABLE unwind_file_enabled = true;

/* The offset in the file of `addr`, if it lies in the file image of a
 * read-only segment, and in *room the bytes of that image from there on;
 * -1 otherwise. */
static off_t file_offset(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum, uintptr_t addr,
                         size_t *room)
{
    for (size_t i = 0; i < phnum; i++) {
        const ElfW(Phdr) *ph = &phdr[i];
        uintptr_t start = base + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || addr < start || addr - start >= ph->p_filesz)
            continue;
        if (ph->p_flags & PF_W)
            return -1;
        *room = ph->p_filesz - (addr - start);
        return (off_t)(ph->p_offset + (addr - start));
    }
    return -1;
}

/* Text relocations change read-only segments after loading: the file no
 * longer holds what is mapped. */
static bool has_text_relocations(const ElfW(Dyn) *d)
{
    for (; d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
            return true;
    return false;
}

static bool open_verified(struct unwind_file *f, const struct unwind_file_object *o)
{
    if (!o->name || !o->id || o->id_len == 0 || o->id_len > 64 || has_text_relocations(o->dynamic))
        return false;
    size_t room;
    off_t id_at = file_offset(o->base, o->phdr, o->phnum, (uintptr_t)o->id, &room);
    if (id_at < 0 || room < o->id_len)
        return false;
    /* O_NONBLOCK: a name that now names a FIFO must not stop the walk. */
    int fd = os_file_open(o->name[0] ? o->name : "/proc/self/exe", O_NONBLOCK);
    if (fd < 0)
        return false;
    unsigned char id[64];
    if (!os_file_is_regular(fd) || os_file_pread(fd, id, o->id_len, id_at) != (ssize_t)o->id_len ||
        memcmp(id, o->id, o->id_len)) {
        os_file_close(fd);
        return false;
    }
    f->fd = fd;
    return true;
}

/* Every call below leaves errno as it found it: a sample must not change
 * it (the file missing, the vDSO's name, a refused open). */

bool unwind_file_select(struct unwind_file *f, const struct unwind_file_object *o)
{
    if (f->object == o->map_start)
        return f->usable;
    unwind_file_end(f);
    int saved = errno;
    f->object = o->map_start;
    f->base = o->base;
    f->phdr = o->phdr;
    f->phnum = o->phnum;
    f->usable = unwind_file_enabled && open_verified(f, o);
    errno = saved;
    return f->usable;
}

size_t unwind_file_read_upto(const struct unwind_file *f, uintptr_t addr, void *buf, size_t max)
{
    size_t room;
    off_t at = f->usable ? file_offset(f->base, f->phdr, f->phnum, addr, &room) : -1;
    if (at < 0)
        return 0;
    int saved = errno;
    ssize_t got = os_file_pread(f->fd, buf, room < max ? room : max, at);
    errno = saved;
    return got > 0 ? (size_t)got : 0;
}

bool unwind_file_read(const struct unwind_file *f, uintptr_t addr, void *buf, size_t len)
{
    return unwind_file_read_upto(f, addr, buf, len) == len;
}

void unwind_file_end(struct unwind_file *f)
{
    if (f->fd >= 0) {
        int saved = errno;
        os_file_close(f->fd);
        errno = saved;
    }
    unwind_file_start(f);
}
