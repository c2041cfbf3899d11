/*
 * prof_recent.c: the most recent sampled allocations (prof_recent.h).
 *
 * A FIFO of records under one lock: a sample appends one (evicting the
 * oldest past the limit), the free of its block completes it, a dump copies
 * them all to a private mapping and writes the copy with the lock released.
 * The lock is taken once per sample and once per sampled free, and only
 * while records are kept (the limit is not 0, or records are left): at the
 * default of 0 the sampling path reads one word and goes on.
 */
#define _GNU_SOURCE /* gettid */
#include "prof_recent.h"

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"
#include "log.h"
#include "meta.h"
#include "os.h"
#include "prof.h"
#include "stack.h"
#include "util.h"

struct prof_recent {
    struct prof_recent *next;    /* toward the newest */
    struct prof_recent **owner;  /* &sample->recent while its block lives */
    size_t usable;
    uint64_t alloc_ns, free_ns;  /* CLOCK_MONOTONIC */
    struct prof_stack *alloc_stack, *free_stack;
    pid_t alloc_tid, free_tid;   /* the kernel's thread ids */
    bool released;
    char thread[32];             /* the allocating thread's prof name */
};

static sa_lock_t recent_lock = SA_LOCK_INITIALIZER(LOCK_RANK_RECENT);
static struct prof_recent *oldest, *newest, *spare;
static size_t count;
static ssize_t limit; /* written under the lock, read without it */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

ssize_t prof_recent_max(void) { return __atomic_load_n(&limit, __ATOMIC_RELAXED); }

/* Under the lock: drops the oldest records until at most `keep` are left
 * (keep < 0: none dropped). */
static void evict_locked(ssize_t keep)
{
    while (keep >= 0 && count > (size_t)keep) {
        struct prof_recent *r = oldest;
        oldest = r->next;
        if (!oldest)
            newest = NULL;
        if (r->owner)
            *r->owner = NULL; /* its sample lives on, unrecorded */
        r->next = spare;
        spare = r;
        count--;
    }
}

bool prof_recent_set_max(ssize_t max)
{
    if (max < -1)
        return false;
    sa_lock(&recent_lock);
    __atomic_store_n(&limit, max, __ATOMIC_RELAXED);
    evict_locked(max);
    sa_unlock(&recent_lock);
    return true;
}

void prof_recent_alloc(struct prof_recent **owner, size_t usable, struct prof_stack *stack,
                       const char *thread)
{
    if (prof_recent_max() == 0)
        return;
    uint64_t at = now_ns();
    pid_t tid = gettid();
    sa_lock(&recent_lock);
    struct prof_recent *r = spare;
    if (r)
        spare = r->next;
    else
        r = meta_alloc(sizeof(*r), 16); /* LOCK_RANK_META is below this lock */
    if (r && limit != 0) {
        *r = (struct prof_recent){.owner = owner, .usable = usable, .alloc_ns = at,
                                  .alloc_stack = stack, .alloc_tid = tid};
        memcpy(r->thread, thread, sizeof(r->thread) - 1);
        if (newest)
            newest->next = r;
        else
            oldest = r;
        newest = r;
        count++;
        *owner = r;
        evict_locked(limit);
    } else if (r) { /* the limit went to 0 meanwhile */
        r->next = spare;
        spare = r;
    }
    sa_unlock(&recent_lock);
}

bool prof_recent_has(struct prof_recent *const *owner)
{
    return __atomic_load_n(owner, __ATOMIC_RELAXED) != NULL;
}

void prof_recent_release(struct prof_recent **owner, struct prof_stack *free_stack)
{
    uint64_t at = now_ns();
    pid_t tid = gettid();
    sa_lock(&recent_lock);
    struct prof_recent *r = *owner;
    if (r) {
        r->owner = NULL;
        r->released = true;
        r->free_ns = at;
        r->free_tid = tid;
        r->free_stack = free_stack;
        *owner = NULL;
    }
    sa_unlock(&recent_lock);
}

/* ---- the dump ---- */

static void put_trace(struct outbuf *o, const char *key, const struct prof_stack *st)
{
    outbuf_fmt(o, ",\n      \"%s\": [", key);
    for (uint32_t i = 0; st && i < st->depth; i++)
        outbuf_fmt(o, "%s\"%p\"", i ? ", " : "", st->frames[i]);
    outbuf_str(o, "]");
}

/* The thread's name as a JSON string's body: the characters salloc lets a
 * name have (thread.prof.name) need no escape but these two. */
static void put_name(struct outbuf *o, const char *name)
{
    for (const char *c = name; *c; c++) {
        if (*c == '"' || *c == '\\')
            outbuf_str(o, "\\");
        outbuf_bytes(o, c, 1);
    }
}

static void put_record(struct outbuf *o, const struct prof_recent *r, bool first)
{
    outbuf_fmt(o, "%s\n    {\n      \"size\": %zu,\n      \"usize\": %zu,\n", first ? "" : ",",
               r->usable, r->usable);
    outbuf_fmt(o, "      \"released\": %s,\n      \"alloc_thread_uid\": %d",
               r->released ? "true" : "false", (int)r->alloc_tid);
    if (r->thread[0]) {
        outbuf_str(o, ",\n      \"alloc_thread_name\": \"");
        put_name(o, r->thread);
        outbuf_str(o, "\"");
    }
    outbuf_fmt(o, ",\n      \"alloc_time\": %llu", (unsigned long long)r->alloc_ns);
    put_trace(o, "alloc_trace", r->alloc_stack);
    if (r->released) {
        outbuf_fmt(o, ",\n      \"free_thread_uid\": %d,\n      \"free_time\": %llu",
                   (int)r->free_tid, (unsigned long long)r->free_ns);
        if (r->free_stack)
            put_trace(o, "free_trace", r->free_stack);
    }
    outbuf_str(o, "\n    }");
}

bool prof_recent_dump(void (*write_cb)(void *, const char *), void *cbopaque)
{
    /* The copy's mapping is made under the lock, so that it fits the
     * records it copies; one page at least. */
    sa_lock(&recent_lock);
    ssize_t max = limit;
    size_t n = count, len = sa_align_up((n ? n : 1) * sizeof(struct prof_recent), os_page_size());
    struct prof_recent *copy = os_map(len, os_page_size());
    if (copy) {
        size_t i = 0;
        for (const struct prof_recent *r = oldest; r; r = r->next)
            copy[i++] = *r;
    }
    sa_unlock(&recent_lock);
    if (!copy)
        return false;
    char buf[2048];
    struct outbuf_writer writer = {write_cb, cbopaque};
    struct outbuf o;
    outbuf_init(&o, buf, sizeof(buf), outbuf_writer_sink, &writer);
    outbuf_fmt(&o, "{\n  \"sample_interval\": %llu,\n  \"recent_alloc_max\": %zd,\n",
               1ull << prof_lg_sample_get(), max);
    outbuf_str(&o, "  \"recent_alloc\": [");
    for (size_t i = 0; i < n; i++)
        put_record(&o, &copy[i], i == 0);
    outbuf_str(&o, n ? "\n  ]\n}\n" : "]\n}\n");
    outbuf_flush(&o);
    os_unmap(copy, len);
    return true;
}

/* ---- fork ---- */

void prof_recent_prefork(void) { sa_lock(&recent_lock); }
void prof_recent_postfork_parent(void) { sa_unlock(&recent_lock); }
void prof_recent_postfork_child(void) { sa_lock_reinit(&recent_lock); }
