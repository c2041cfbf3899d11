/*
 * jemalloc_linked.c: a program written for jemalloc and linked with
 * -ljemalloc, which mixes jemalloc's own functions (mallocx, rallocx,
 * xallocx, sallocx, dallocx, sdallocx, nallocx) with the C ones on the same
 * blocks.  Run with salloc preloaded, every call must land in salloc's heap:
 * had salloc no mallocx, jemalloc's would serve it, and salloc's free() of
 * that block would abort (test_real_programs).  Prints which allocator
 * answered mallctl("version") and a line per check that failed; exits 1
 * if any did.
 */
#include <jemalloc/jemalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures;

static void expect(int ok, const char *what, size_t size)
{
    if (!ok) {
        printf("FAILED: %s (size %zu)\n", what, size);
        failures++;
    }
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int main(void)
{
    const char *version = "";
    size_t len = sizeof(version);
    mallctl("version", &version, &len, NULL, 0);
    printf("allocator: %s\n", strncmp(version, "salloc", 6) == 0 ? "salloc" : "jemalloc");
    for (size_t size = 1; size < ((size_t)4 << 20); size = size * 3 + 1) {
        /* jemalloc's allocation, C's free */
        unsigned char *p = mallocx(size, MALLOCX_ALIGN(64) | MALLOCX_ZERO);
        expect(p && (uintptr_t)p % 64 == 0, "mallocx aligned", size);
        expect(sallocx(p, 0) == nallocx(size, MALLOCX_ALIGN(64)), "sallocx == nallocx", size);
        expect(malloc_usable_size(p) == sallocx(p, 0), "malloc_usable_size == sallocx", size);
        expect(all_zero(p, size), "mallocx zeroed", size);
        memset(p, 0x5a, size);
        unsigned char *q = rallocx(p, size * 2, MALLOCX_ZERO);
        expect(q && q[0] == 0x5a && q[size - 1] == 0x5a, "rallocx kept the bytes", size);
        free(q);
        /* C's allocation, jemalloc's frees and resizes */
        unsigned char *r = malloc(size);
        expect(xallocx(r, size, 0, 0) >= size, "xallocx of a malloc block", size);
        dallocx(r, 0);
        unsigned char *s = calloc(1, size);
        s = realloc(s, size + 100);
        expect(s != NULL, "realloc", size);
        sdallocx(s, size + 100, 0);
        unsigned char *t = rallocx(malloc(size), size / 2 + 1, 0);
        dallocx(t, MALLOCX_TCACHE_NONE);
    }
    printf("%s\n", failures ? "failed" : "ok");
    return failures != 0;
}
