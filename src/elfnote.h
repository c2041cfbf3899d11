/*
 * elfnote.h: the GNU build ID in an ELF object's notes, for the two places
 * that need it: the pprof writer (build IDs of mapped files, read from
 * disk) and the stack walker (the identity of loaded code, read in memory).
 */
#ifndef SA_ELFNOTE_H
#define SA_ELFNOTE_H

#include <elf.h>
#include <stddef.h>
#include <string.h>

#include "util.h"

/* The NT_GNU_BUILD_ID descriptor among the notes in [notes, notes + n) (a
 * PT_NOTE segment: namesz, descsz, type, then name and desc, each padded
 * to 4 bytes), and its length in *len; NULL if there is none or the notes
 * are malformed. */
static inline const unsigned char *elf_build_id(const unsigned char *notes, size_t n, size_t *len)
{
    for (size_t at = 0; at + sizeof(Elf64_Nhdr) <= n;) {
        Elf64_Nhdr nh;
        memcpy(&nh, notes + at, sizeof(nh));
        size_t name = at + sizeof(nh), desc = name + sa_align_up(nh.n_namesz, 4);
        if (nh.n_namesz > n || nh.n_descsz > n || desc + nh.n_descsz > n)
            return NULL;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && !memcmp(notes + name, "GNU", 4) &&
            nh.n_descsz) {
            *len = nh.n_descsz;
            return notes + desc;
        }
        at = desc + sa_align_up(nh.n_descsz, 4);
    }
    return NULL;
}

#endif
