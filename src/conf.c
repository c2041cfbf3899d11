/*
 * conf.c: option strings (see conf.h).  The table below is the one place
 * that lists option names; each row parses and applies one option.
 */
#include "conf.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pageheap.h"
#include "util.h"

/* The program may define `const char *malloc_conf = "...";` (jemalloc's
 * convention); weak, so it is NULL when it does not. */
extern const char *malloc_conf __attribute__((weak));

static bool parse_long(const char *v, size_t len, long lo, long hi, long *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long x = strtol(buf, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

static bool set_dirty_decay_ms(const char *v, size_t len)
{
    long ms;
    if (!parse_long(v, len, -1, LONG_MAX / 1000000, &ms))
        return false;
    pageheap_set_decay_ms(ms);
    return true;
}

static const struct option {
    const char *name;
    bool (*set)(const char *value, size_t len);
} options[] = {
    {"dirty_decay_ms", set_dirty_decay_ms},
};

static bool apply_pair(const char *key, size_t klen, const char *val, size_t vlen)
{
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
        if (strlen(options[i].name) == klen && !memcmp(options[i].name, key, klen))
            return options[i].set(val, vlen);
    return false;
}

int conf_apply(const char *opts, const char *source)
{
    int bad = 0;
    const char *p = opts;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (len && (!colon || !apply_pair(p, (size_t)(colon - p), colon + 1,
                                          len - (size_t)(colon - p) - 1))) {
            char pair[128];
            size_t n = len < sizeof(pair) - 1 ? len : sizeof(pair) - 1;
            memcpy(pair, p, n);
            pair[n] = '\0';
            sa_message("invalid conf pair \"%s\" in %s: ignored", pair, source);
            bad++;
        }
        p = end ? end + 1 : NULL;
    }
    return bad;
}

void conf_init(void)
{
    if (&malloc_conf && malloc_conf)
        conf_apply(malloc_conf, "malloc_conf");
    conf_apply(getenv("MALLOC_CONF"), "MALLOC_CONF");
    conf_apply(getenv("SALLOC_CONF"), "SALLOC_CONF");
}
