/*
 * secure_env.c: linked with lib/libsalloc.a, run by test_real_programs
 * with SALLOC_CONF set, plainly and as a set-user-ID program: prints
 * whether it runs in secure execution (AT_SECURE) and the sample rate's
 * lg that salloc took, which is the environment's only when it does not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

int mallctl(const char *, void *, size_t *, void *, size_t);

int main(void)
{
    free(malloc(1)); /* salloc set up */
    size_t lg = 0, len = sizeof(lg);
    if (mallctl("opt.lg_prof_sample", &lg, &len, NULL, 0) != 0)
        return 2;
    printf("secure %lu lg %zu\n", getauxval(AT_SECURE), lg);
    return 0;
}
