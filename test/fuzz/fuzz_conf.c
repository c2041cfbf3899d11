/*
 * fuzz_conf.c: the option-string parser (src/conf.c) on arbitrary bytes.
 *
 * Each input, NUL-terminated, goes through conf_apply() as one source, and
 * then, unless it would make conf_init() abort on purpose (abort_conf:true
 * with a bad pair), through conf_init() as SALLOC_CONF, which adds the
 * quiet confirm_conf pass and the "malloc_conf #3" echo.  (An input with a
 * NUL byte is read up to it, as an environment variable would be.)  After each call
 * every option the parser may set must hold a value its table allows
 * (check_options), and every option is put back to its default (reset) so
 * inputs stay independent.
 *
 * The parser's diagnostics go to fd 2: LLVMFuzzerInitialize asks libFuzzer
 * for -close_fd_mask=2 (fuzz_util.h), which points fd 2 at /dev/null once
 * at start and keeps libFuzzer's own output and sanitizer reports.  Pass
 * -close_fd_mask=0 to see them.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "conf.h"
#include "pageheap.h"
#include "prof.h"
#include "tcache.h"

#include "fuzz_util.h"

/* Every option at its default: test/unit/test_conf.c's reset(), plus the
 * options it leaves alone. */
static const char defaults[] =
    "confirm_conf:false,prof:true,prof_active:true,prof_thread_active_init:true,"
    "lg_prof_sample:19,prof_prefix:salloc,prof_final:false,"
    "prof_accum:false,lg_prof_interval:-1,prof_gdump:false,"
    "dirty_decay_ms:10000,abort_conf:false,prof_format:heap,prof_unwind:fast,"
    "prof_peak_pct:10,prof_final_peak:false,check:false,prof_guard:false,"
    "lg_prof_guard_every:-1,thp:default,prof_leak:false,prof_leak_error:false,"
    "stats_print:false,stats_print_opts:,prof_sys_thread_name:false,abort:false,"
    "zero_realloc:free,tcache:true,tcache_max:262144,junk:false,zero:false,"
    "prof_recent_alloc_max:0";

static void reset(void)
{
    FUZZ_CHECK(conf_apply(defaults, "reset") == 0);
    FUZZ_CHECK(opt_dirty_decay_ms == 10000 && opt_lg_prof_sample == 19);
}

static bool one_of(const char *v, const char *const *choices)
{
    for (; *choices; choices++)
        if (!strcmp(v, *choices))
            return true;
    return false;
}

/* What conf.c's table promises about each variable it writes. */
static void check_options(void)
{
    static const char *const formats[] = {"heap", "pb", "pb.gz", NULL};
    static const char *const unwinders[] = {"fast", "libgcc", "check", NULL};
    static const char *const thp_modes[] = {"auto", "always", "never", "default", NULL};
    static const char *const zero_realloc_modes[] = {"free", "alloc", "abort", NULL};
    static const char *const junk_modes[] = {"true", "false", "alloc", "free", NULL};
    FUZZ_CHECK(memchr(opt_junk, '\0', sizeof(opt_junk)) != NULL);
    FUZZ_CHECK(one_of(opt_junk, junk_modes));
    FUZZ_CHECK(memchr(opt_zero_realloc, '\0', sizeof(opt_zero_realloc)) != NULL);
    FUZZ_CHECK(one_of(opt_zero_realloc, zero_realloc_modes));
    FUZZ_CHECK(memchr(opt_thp, '\0', sizeof(opt_thp)) != NULL);
    FUZZ_CHECK(one_of(opt_thp, thp_modes));
    FUZZ_CHECK(memchr(opt_prof_prefix, '\0', sizeof(opt_prof_prefix)) != NULL);
    FUZZ_CHECK(memchr(opt_prof_format, '\0', sizeof(opt_prof_format)) != NULL);
    FUZZ_CHECK(memchr(opt_prof_unwind, '\0', sizeof(opt_prof_unwind)) != NULL);
    FUZZ_CHECK(one_of(opt_prof_format, formats));
    FUZZ_CHECK(one_of(opt_prof_unwind, unwinders));
    FUZZ_CHECK(opt_lg_prof_sample <= 62);
    FUZZ_CHECK(opt_lg_prof_interval >= -1 && opt_lg_prof_interval <= 63);
    FUZZ_CHECK(opt_lg_prof_guard_every >= -1 && opt_lg_prof_guard_every <= 63);
    FUZZ_CHECK(opt_prof_peak_pct >= 1 && opt_prof_peak_pct <= 1000);
    FUZZ_CHECK(opt_prof_recent_alloc_max >= -1);
    FUZZ_CHECK(opt_dirty_decay_ms >= -1 && opt_dirty_decay_ms <= LONG_MAX / 1000000);
    FUZZ_CHECK(pageheap_decay_ms() == opt_dirty_decay_ms);
    /* The caches hold the largest class within tcache_max, up to 8 MiB. */
    FUZZ_CHECK(opt_tcache_max <= ((size_t)8 << 20));
    FUZZ_CHECK(tcache_max_cached_size <= opt_tcache_max);
    FUZZ_CHECK(tcache_max_cached_size == 0 || sizeclass_size(sizeclass_of(tcache_max_cached_size)) ==
                                                  tcache_max_cached_size);
    /* malloc_stats_print's letters, each at most once. */
    size_t n = strnlen(opt_stats_print_opts, sizeof(opt_stats_print_opts));
    FUZZ_CHECK(n < sizeof(opt_stats_print_opts));
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(strchr("Jgmdablxeh", opt_stats_print_opts[i]) != NULL);
        FUZZ_CHECK(!memchr(opt_stats_print_opts, opt_stats_print_opts[i], i));
    }
}

/* conf_init() reads SALLOC_CONF with getenv().  setenv() would keep a copy
 * of every distinct value for good (glibc cannot free one a getenv()
 * caller may hold): the environment entry is this buffer instead, put once
 * with putenv() and rewritten in place. */
static char *env_entry;
static size_t env_cap;

static void set_salloc_conf(const char *opts, size_t len)
{
    static const char name[] = "SALLOC_CONF=";
    if (sizeof(name) + len > env_cap) {
        char *grown = malloc(sizeof(name) + len);
        memcpy(grown, name, sizeof(name) - 1);
        memcpy(grown + sizeof(name) - 1, opts, len + 1);
        FUZZ_CHECK(putenv(grown) == 0);
        free(env_entry); /* no longer in the environment */
        env_entry = grown;
        env_cap = sizeof(name) + len;
    } else {
        memcpy(env_entry + sizeof(name) - 1, opts, len + 1);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_default_flag(argc, argv, "-close_fd_mask=", "2");
    unsetenv("MALLOC_CONF");
    unsetenv("SALLOC_CONF");
    reset();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *opts = malloc(size + 1);
    memcpy(opts, data, size);
    opts[size] = '\0';

    int bad = conf_apply(opts, "fuzz");
    FUZZ_CHECK(bad >= 0);
    check_options();
    /* conf_init() aborts, as it should, exactly when this source has a bad
     * pair, or asks for a leak summary without the final dump it comes
     * with, and leaves abort_conf set: keep to the other inputs. */
    bool leak_without_final = (opt_prof_leak || opt_prof_leak_error) && !opt_prof_final;
    bool would_abort = (bad > 0 || leak_without_final) && opt_abort_conf;
    reset();
    if (!would_abort) {
        set_salloc_conf(opts, size);
        conf_init();
        check_options();
        FUZZ_CHECK(!opt_prof_leak_error || opt_prof_leak); /* the one implies the other */
        reset();
    }
    free(opts);
    return 0;
}
