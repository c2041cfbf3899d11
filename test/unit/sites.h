/*
 * sites.h: known allocation sites for the profile tests.  Each site is a
 * function in its own section, so a dump record belongs to the site when
 * its first frame (the return address into the caller of malloc) lies
 * between the section's linker bounds __start_sec_<name>/__stop_sec_<name>.
 */
#ifndef SA_TEST_SITES_H
#define SA_TEST_SITES_H

#include <stdlib.h>

#define SITE(name) __attribute__((noinline, section("sec_" #name))) static
#define SECTION_BOUNDS(name) extern char __start_sec_##name[], __stop_sec_##name[];
#define IN_SECTION(name, a) \
    ((uintptr_t)(a) >= (uintptr_t)__start_sec_##name && (uintptr_t)(a) < (uintptr_t)__stop_sec_##name)

/* A site's body: one malloc call through a volatile pointer (so the
 * compiler keeps it), and an empty asm after it so that the call does not
 * become a tail jump, which would take the site's frame off the stack. */
static void *(*volatile sites_malloc)(size_t) = malloc;
#define CALL_MALLOC(n)                                                         \
    do {                                                                       \
        void *p_ = sites_malloc(n);                                            \
        __asm__ volatile("" : : "r"(p_) : "memory");                           \
        return p_;                                                             \
    } while (0)

#endif
