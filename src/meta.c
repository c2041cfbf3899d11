/*
 * meta.c: bump allocation of metadata records from mmapped chunks.
 *
 * Lock: `meta_lock` guards the current chunk.  Callers may hold any lock of a
 * lower rank (the page heap's, a central list's); this file calls only os.c.
 */
#include "meta.h"

#include <errno.h>

#include "lock.h"
#include "os.h"
#include "util.h"

/* Big enough that a chunk is rare, small enough that a tiny program's
 * metadata stays well under a megabyte of resident memory. */
#define META_CHUNK (256u * 1024u)

static sa_lock_t meta_lock = SA_LOCK_INITIALIZER(LOCK_RANK_META);
static char *chunk_cur, *chunk_end; /* guarded by meta_lock */
static size_t mapped;               /* atomic: read without the lock */

void *meta_alloc(size_t size, size_t align)
{
    size = sa_align_up(size ? size : 1, 16);
    if (size > META_CHUNK / 4) {
        /* A big record gets its own mapping rather than wasting a chunk. */
        size_t len = sa_align_up(size, os_page_size());
        void *p = os_map(len, os_page_size());
        if (p) {
            sa_lock(&meta_lock);
            __atomic_fetch_add(&mapped, len, __ATOMIC_RELAXED);
            sa_unlock(&meta_lock);
        }
        return p;
    }
    sa_lock(&meta_lock);
    char *p = (char *)sa_align_up((uintptr_t)chunk_cur, align);
    if (!chunk_cur || p + size > chunk_end) {
        char *c = os_map(META_CHUNK, os_page_size());
        if (!c) {
            sa_unlock(&meta_lock);
            errno = ENOMEM;
            return NULL;
        }
        __atomic_fetch_add(&mapped, META_CHUNK, __ATOMIC_RELAXED);
        chunk_end = c + META_CHUNK;
        p = c; /* chunk start is page aligned: every align up to 4096 holds */
    }
    chunk_cur = p + size;
    sa_unlock(&meta_lock);
    return p;
}

size_t meta_mapped_bytes(void)
{
    return __atomic_load_n(&mapped, __ATOMIC_RELAXED);
}

void meta_prefork(void) { sa_lock(&meta_lock); }
void meta_postfork_parent(void) { sa_unlock(&meta_lock); }
void meta_postfork_child(void) { sa_lock_reinit(&meta_lock); }
