/*
 * demo.c: salloc-demo, a small deterministic workload to profile with
 * "salloc run -- build/bin/salloc-demo".  About a second of work in three
 * parts, each with its own allocation sites:
 *
 *   - word frequencies: generated text (text_generate) is split into words
 *     counted in a chained hash table (word_node_new, table_grow); the
 *     table stays live to the end, as a real index would;
 *   - a record cache: three threads, each with its own LRU cache of records
 *     (record_new, record_payload_new) that evicts and frees old entries;
 *   - a request loop: two threads parse requests into buffers
 *     (request_buffer_alloc); an error path forgets to free the buffer of
 *     every 8th request: the leak, the largest live site at exit.
 *
 * Everything is seeded: the output and the live heap at exit are the same
 * on every run (each thread owns its data; no result depends on timing).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: enough for generating text */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* ---- word frequencies ---- */

struct word {
    struct word *next;
    uint64_t count;
    char text[];
};

struct table {
    struct word **buckets;
    size_t nbuckets, nwords;
};

static const char *const syllables[] = {"ka", "lo", "mi", "ne", "ru", "ta", "shi", "po",
                                        "an", "ve", "dor", "el", "qu", "is", "ter", "um"};

/* A text of about `words` words, Zipf-like: short words are frequent. */
static NOINLINE char *text_generate(size_t words, uint64_t seed)
{
    size_t cap = words * 8 + 1, len = 0;
    char *text = malloc(cap);
    for (size_t i = 0; i < words; i++) {
        uint64_t r = rng_next(&seed);
        int nsyl = 1 + (int)(__builtin_ctzll(r | (1ull << 5)));
        for (int k = 0; k < nsyl && len + 4 < cap; k++) {
            const char *s = syllables[(r >> (8 + 4 * k)) & 15];
            size_t n = strlen(s);
            memcpy(text + len, s, n);
            len += n;
        }
        if (len + 2 >= cap)
            break;
        text[len++] = ' ';
    }
    text[len] = '\0';
    return text;
}

static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static NOINLINE struct word *word_node_new(const char *s, size_t n)
{
    struct word *w = malloc(sizeof(*w) + n + 1);
    memcpy(w->text, s, n);
    w->text[n] = '\0';
    w->count = 0;
    return w;
}

static NOINLINE void table_grow(struct table *t)
{
    size_t nb = t->nbuckets ? t->nbuckets * 2 : 1024;
    struct word **b = calloc(nb, sizeof(*b));
    for (size_t i = 0; i < t->nbuckets; i++)
        for (struct word *w = t->buckets[i], *next; w; w = next) {
            next = w->next;
            size_t j = hash_str(w->text, strlen(w->text)) & (nb - 1);
            w->next = b[j];
            b[j] = w;
        }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

static void table_count(struct table *t, const char *s, size_t n)
{
    if (t->nwords >= t->nbuckets)
        table_grow(t);
    size_t j = hash_str(s, n) & (t->nbuckets - 1);
    for (struct word *w = t->buckets[j]; w; w = w->next)
        if (!strncmp(w->text, s, n) && w->text[n] == '\0') {
            w->count++;
            return;
        }
    struct word *w = word_node_new(s, n);
    w->count = 1;
    w->next = t->buckets[j];
    t->buckets[j] = w;
    t->nwords++;
}

static struct table words; /* live until exit */

static void word_frequencies(void)
{
    for (int chunk = 0; chunk < 12; chunk++) {
        char *text = text_generate(150000, 0x5eed0000u + (uint64_t)chunk);
        for (char *p = text; *p;) {
            char *e = strchr(p, ' ');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n)
                table_count(&words, p, n);
            p += n + (e ? 1 : 0);
        }
        free(text);
    }
    struct word *best = NULL;
    for (size_t i = 0; i < words.nbuckets; i++)
        for (struct word *w = words.buckets[i]; w; w = w->next)
            if (!best || w->count > best->count || (w->count == best->count && strcmp(w->text, best->text) < 0))
                best = w;
    printf("words: %zu distinct, most frequent \"%s\" x %llu\n", words.nwords, best ? best->text : "",
           best ? (unsigned long long)best->count : 0ull);
}

/* ---- record cache ---- */

struct record {
    struct record *prev, *next; /* LRU list, most recent first */
    struct record *hnext;       /* hash chain */
    uint64_t key;
    size_t len;
    char *payload;
};

struct cache {
    struct record *head, *tail;
    struct record **hash;
    size_t nhash, count, limit;
    uint64_t hits, misses;
};

static NOINLINE char *record_payload_new(uint64_t key, size_t len)
{
    char *p = malloc(len);
    for (size_t i = 0; i < len; i++)
        p[i] = (char)('a' + (key + i) % 26);
    return p;
}

static NOINLINE struct record *record_new(uint64_t key)
{
    struct record *r = calloc(1, sizeof(*r));
    r->key = key;
    r->len = 200 + key % 1800;
    r->payload = record_payload_new(key, r->len);
    return r;
}

static void lru_unlink(struct cache *c, struct record *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        c->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        c->tail = r->prev;
}

static void lru_push(struct cache *c, struct record *r)
{
    r->prev = NULL;
    r->next = c->head;
    if (c->head)
        c->head->prev = r;
    c->head = r;
    if (!c->tail)
        c->tail = r;
}

static void cache_evict(struct cache *c)
{
    struct record *r = c->tail;
    lru_unlink(c, r);
    struct record **pp = &c->hash[r->key % c->nhash];
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
    free(r->payload);
    free(r);
    c->count--;
}

static struct record *cache_get(struct cache *c, uint64_t key)
{
    for (struct record *r = c->hash[key % c->nhash]; r; r = r->hnext)
        if (r->key == key) {
            c->hits++;
            lru_unlink(c, r);
            lru_push(c, r);
            return r;
        }
    c->misses++;
    if (c->count == c->limit)
        cache_evict(c);
    struct record *r = record_new(key);
    r->hnext = c->hash[key % c->nhash];
    c->hash[key % c->nhash] = r;
    lru_push(c, r);
    c->count++;
    return r;
}

static struct cache caches[3]; /* live until exit */

static void *cache_worker(void *arg)
{
    struct cache *c = arg;
    uint64_t seed = 0xcace0000u + (uint64_t)(c - caches);
    c->limit = 1500;
    c->nhash = 4096;
    c->hash = calloc(c->nhash, sizeof(*c->hash));
    uint64_t sum = 0;
    for (int i = 0; i < 400000; i++) {
        uint64_t r = rng_next(&seed);
        /* 80% of lookups go to a hot set of 2000 keys */
        uint64_t key = (r % 10 < 8) ? (r >> 8) % 2000 : 2000 + (r >> 8) % 60000;
        struct record *rec = cache_get(c, key);
        sum += (unsigned char)rec->payload[rec->len / 2];
    }
    return (void *)(uintptr_t)sum;
}

/* ---- requests ---- */

struct request {
    char *buf;
    size_t len;
};

/* Each buffer starts with a guard word; the store after malloc also keeps
 * the compiler from turning the call into a tail jump, which would hide
 * this function from the stack. */
static NOINLINE char *request_buffer_alloc(size_t len)
{
    char *b = malloc(len);
    memcpy(b, "RQ00", 4);
    return b;
}

/* Fills a request; returns -1 for a "malformed" one (every 8th). */
static int request_parse(struct request *rq, uint64_t id)
{
    rq->len = 4096 + (id % 4) * 1024;
    rq->buf = request_buffer_alloc(rq->len);
    int n = snprintf(rq->buf, rq->len, "GET /item/%llu HTTP/1.1\r\nHost: demo\r\n\r\n", (unsigned long long)id);
    memset(rq->buf + n, 'x', rq->len - (size_t)n);
    return id % 8 == 7 ? -1 : 0;
}

static uint64_t request_handle(uint64_t id)
{
    struct request rq;
    if (request_parse(&rq, id) < 0)
        return 0; /* the bug: the error path returns without free(rq.buf) */
    uint64_t h = hash_str(rq.buf, rq.len);
    free(rq.buf);
    return h;
}

static void *request_worker(void *arg)
{
    uint64_t base = (uint64_t)(uintptr_t)arg, sum = 0;
    for (uint64_t id = base; id < base + 6000; id++)
        sum ^= request_handle(id);
    return (void *)(uintptr_t)sum;
}

int main(void)
{
    pthread_t cache_threads[3], request_threads[2];
    for (int i = 0; i < 3; i++)
        pthread_create(&cache_threads[i], NULL, cache_worker, &caches[i]);
    for (int i = 0; i < 2; i++)
        pthread_create(&request_threads[i], NULL, request_worker, (void *)(uintptr_t)(i * 1000000));
    word_frequencies();
    for (int i = 0; i < 3; i++) {
        void *sum;
        pthread_join(cache_threads[i], &sum);
        printf("cache %d: %zu records, %llu hits, %llu misses, checksum %llu\n", i, caches[i].count,
               (unsigned long long)caches[i].hits, (unsigned long long)caches[i].misses,
               (unsigned long long)(uintptr_t)sum);
    }
    for (int i = 0; i < 2; i++) {
        void *sum;
        pthread_join(request_threads[i], &sum);
        printf("requests %d: checksum %016llx\n", i, (unsigned long long)(uintptr_t)sum);
    }
    printf("leaked: %d request buffers (every 8th request's error path)\n", 2 * 6000 / 8);
    return 0;
}
