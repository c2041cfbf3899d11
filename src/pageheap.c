/*
 * pageheap.c: spans of pages (see pageheap.h for the contract).
 *
 * Lock: ph_lock guards every static below and the pagemap writers.  Nothing
 * here calls malloc; records come from meta.c and are recycled on
 * `spares[kind]`, each length of record apart (span.h: a small span's
 * record must have room for its class's free bits).
 *
 * Free lists: free[dirty][b] holds free spans of exactly b pages for
 * 1 <= b < NBUCKETS, and free[dirty][0] every longer one.  A bitmap per kind
 * says which exact buckets are non-empty, so a search is a couple of bit
 * scans.  Dirty spans are also on an LRU list, oldest first, which decay
 * walks from the head.
 *
 * Recent spans: a span of at most RECENT_MAX_PAGES freed while the cache
 * holds less than RECENT_BYTES goes onto recent[npages], a stack, as it is:
 * not merged with its neighbours, not on the lists nor the LRU.  The next
 * request of exactly that length takes it back, skipping the merge and the
 * split that a free and an allocation of the same span otherwise cost
 * (see RECENT_BYTES).  The cache empties into the lists (merging as any
 * free does) at each decay look that is due, so decay sees its spans at
 * most a decay step late, before the heap takes clean pages while it holds
 * dirty ones, and before a purge.  Its spans count as free and dirty.
 */
#include "pageheap.h"

#include <errno.h>
#include <string.h>

#include "conf.h"
#include "lock.h"
#include "log.h"
#include "meta.h"
#include "os.h"
#include "pagemap.h"
#include "sizeclass.h"

#define NBUCKETS 128
/* Chunks start on 2 MiB boundaries so that huge pages can back them. */
#define CHUNK_ALIGN ((size_t)2 << 20)

/* See "Recent spans" above.  200 blocks of 4 KiB allocated and freed in a
 * loop (100 one-page spans, each through the page heap and back) took 193
 * instructions an operation, against 268 with every span merged on its
 * free and split again on its allocation; 200 of 16 KiB (100 spans of 4
 * pages) 302 against 383.  32 pages hold the longest span of a size class;
 * 4 MiB holds those 16 KiB bursts' spans whole.  The peak resident memory
 * of bench's sizemix did not move (taking dirty pages first keeps it so). */
#define RECENT_MAX_PAGES 32
#define RECENT_BYTES ((size_t)4 << 20)

static sa_lock_t ph_lock = SA_LOCK_INITIALIZER(LOCK_RANK_PAGEHEAP);
static struct span *free_lists[2][NBUCKETS];
static uint64_t nonempty[2][NBUCKETS / 64];
static struct span *lru_head, *lru_tail;
static struct span *recent[RECENT_MAX_PAGES + 1];
static struct span *spares[SPAN_RECORD_KINDS];
static struct pageheap_stats stats;
static long decay_ms = 10000;
static uint64_t next_decay_check;

/* ---- records ---- */

/* A record of at least `kind`'s length: a spare of that length, else a
 * longer spare (rather than new metadata while those wait unused), else a
 * new one. */
static struct span *record_take(unsigned kind)
{
    struct span *s;
    for (unsigned k = kind; k < SPAN_RECORD_KINDS; k++)
        if ((s = spares[k])) {
            spares[k] = s->next;
            *s = (struct span){.state = SPAN_UNUSED, .record_kind = (uint8_t)k};
            return s;
        }
    if (!(s = meta_alloc(span_record_bytes(kind), SA_CACHELINE)))
        return NULL;
    stats.records[kind]++;
    *s = (struct span){.state = SPAN_UNUSED, .record_kind = (uint8_t)kind};
    return s;
}

/* A record for any span but a small one (record_for_class). */
static struct span *record_new(void) { return record_take(SPAN_RECORD_SHORT); }

static void record_release(struct span *s)
{
    s->state = SPAN_UNUSED;
    s->next = spares[s->record_kind];
    spares[s->record_kind] = s;
}

/* Span `s`, cut for class `cls` (on no list, in no pagemap entry but
 * stale ones: pageheap_alloc has yet to publish it), in a record with room
 * for the class's free bits: `s` itself, or a longer record that takes its
 * place (`s` goes to the spares; a stale entry sees it SPAN_UNUSED).  NULL
 * on ENOMEM, `s` unchanged. */
static struct span *record_for_class(struct span *s, unsigned cls)
{
    unsigned kind = span_record_kind_for(sizeclass_objects(cls));
    if (s->record_kind >= kind)
        return s;
    struct span *l = record_take(kind);
    if (!l)
        return NULL;
    l->start = s->start;
    l->npages = s->npages;
    l->dirty = s->dirty;
    record_release(s);
    return l;
}

/* ---- free lists ---- */

static size_t bucket_of(size_t npages) { return npages < NBUCKETS ? npages : 0; }

static void stat_free_add(const struct span *s, long sign)
{
    size_t bytes = s->npages << SA_PAGE_SHIFT;
    size_t *counter = s->dirty ? &stats.free_dirty : &stats.free_clean;
    *counter += sign > 0 ? bytes : -bytes;
}

/* Files free span `s` in its bucket's list and counts it (the LRU is
 * list_insert's, or insert_coalesced's). */
static void bucket_insert(struct span *s)
{
    size_t b = bucket_of(s->npages);
    struct span **head = &free_lists[s->dirty][b];
    s->prev = NULL;
    s->next = *head;
    if (*head)
        (*head)->prev = s;
    *head = s;
    nonempty[s->dirty][b / 64] |= 1ull << (b % 64);
    stat_free_add(s, 1);
}

static void bucket_remove(struct span *s)
{
    size_t b = bucket_of(s->npages);
    if (s->prev)
        s->prev->next = s->next;
    else
        free_lists[s->dirty][b] = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (!free_lists[s->dirty][b])
        nonempty[s->dirty][b / 64] &= ~(1ull << (b % 64));
    stat_free_add(s, -1);
}

/* Dirty span `s` at the LRU's tail. */
static void lru_append(struct span *s)
{
    /* The LRU stays oldest first, which decay relies on: a span older
     * than the tail (a recent span filed late, one filed back whole on
     * ENOMEM) takes the tail's time (it is purged a little later than it
     * could be; never left behind younger spans). */
    if (lru_tail && s->freed_at < lru_tail->freed_at)
        s->freed_at = lru_tail->freed_at;
    s->lru_prev = lru_tail;
    s->lru_next = NULL;
    if (lru_tail)
        lru_tail->lru_next = s;
    else
        lru_head = s;
    lru_tail = s;
}

static void lru_unlink(struct span *s)
{
    if (s->lru_prev)
        s->lru_prev->lru_next = s->lru_next;
    else
        lru_head = s->lru_next;
    if (s->lru_next)
        s->lru_next->lru_prev = s->lru_prev;
    else
        lru_tail = s->lru_prev;
}

/* Dirty span `s` takes the place of `old` in the LRU, and its time. */
static void lru_replace(struct span *old, struct span *s)
{
    s->freed_at = old->freed_at;
    s->lru_prev = old->lru_prev;
    s->lru_next = old->lru_next;
    if (s->lru_prev)
        s->lru_prev->lru_next = s;
    else
        lru_head = s;
    if (s->lru_next)
        s->lru_next->lru_prev = s;
    else
        lru_tail = s;
}

static void list_insert(struct span *s)
{
    bucket_insert(s);
    if (s->dirty)
        lru_append(s);
}

static void list_remove(struct span *s)
{
    bucket_remove(s);
    if (s->dirty)
        lru_unlink(s);
}

/* The first and last pages find a free span when a neighbour is freed. */
static void register_ends(struct span *s)
{
    pagemap_set_span(span_page(s), s);
    pagemap_set_span(span_page(s) + s->npages - 1, s);
}

/* A free span of the same kind that ends exactly where `s` starts (before)
 * or starts exactly where it ends (after), or NULL.  Pagemap entries may be
 * stale; the bounds check makes a stale one harmless. */
static struct span *free_neighbour(const struct span *s, bool before)
{
    struct span *n = pagemap_span((void *)(before ? s->start - 1 : span_end(s)));
    if (!n || n == s || span_state(n) != SPAN_FREE || n->recent || n->dirty != s->dirty)
        return NULL;
    if (before ? span_end(n) != s->start : n->start != span_end(s))
        return NULL;
    return n;
}

/* Adds free span `s` to the lists, merged with free neighbours of its kind.
 * Merged with dirty ones, it takes the oldest's place and time in the LRU,
 * its own pages included.  Given its own time, as it was, pages freed long
 * ago took the time of a span freed next to them: a buffer taken from
 * their span and given back more often than the decay time (carve cuts
 * it from the start) kept them resident for good.  Pages just freed go
 * back to the kernel early instead, when the oldest's time is up. */
static void insert_coalesced(struct span *s)
{
    struct span *oldest = NULL; /* merged, dirty, still in the LRU */
    for (int before = 1; before >= 0; before--) {
        struct span *n = free_neighbour(s, before);
        if (!n)
            continue;
        bucket_remove(n);
        if (before)
            s->start = n->start;
        s->npages += n->npages;
        if (n->dirty && (!oldest || n->freed_at < oldest->freed_at)) {
            struct span *younger = oldest;
            oldest = n;
            n = younger;
        }
        if (n) {
            if (n->dirty)
                lru_unlink(n);
            record_release(n);
        }
    }
    register_ends(s);
    if (oldest) {
        bucket_insert(s);
        lru_replace(oldest, s);
        record_release(oldest);
    } else {
        list_insert(s);
    }
}

/* Keeps dirty free span `s` (on no list) in the recent cache if it fits. */
static bool recent_push(struct span *s)
{
    size_t bytes = s->npages << SA_PAGE_SHIFT;
    if (s->npages > RECENT_MAX_PAGES || stats.recent + bytes > RECENT_BYTES)
        return false;
    struct span **head = &recent[s->npages];
    register_ends(s); /* a tail split off by pageheap_shrink has none yet */
    s->recent = 1;
    s->prev = NULL;
    s->next = *head;
    if (*head)
        (*head)->prev = s;
    *head = s;
    stats.recent += bytes;
    stat_free_add(s, 1);
    return true;
}

/* Takes recent span `s` off the cache (it is then on no list). */
static void recent_remove(struct span *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        recent[s->npages] = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->recent = 0;
    stats.recent -= s->npages << SA_PAGE_SHIFT;
    stat_free_add(s, -1);
}

/* A recent span of exactly `npages`, taken off the cache, or NULL. */
static struct span *recent_pop(size_t npages)
{
    struct span *s = npages <= RECENT_MAX_PAGES ? recent[npages] : NULL;
    if (s)
        recent_remove(s);
    return s;
}

/* Files every recent span in the lists, merged with its free neighbours. */
static void recent_flush(void)
{
    for (size_t n = 1; stats.recent && n <= RECENT_MAX_PAGES; n++) {
        struct span *s;
        while ((s = recent_pop(n)))
            insert_coalesced(s);
    }
}

/* ---- transparent huge pages (opt.thp) ----
 *
 * Under "auto", chunks mapped beyond the heap's first THP_AFTER bytes are
 * advised MADV_HUGEPAGE: a heap that big gains from one TLB entry per 2 MiB
 * (phase/heap=256MiB took about half the time where huge pages came
 * cheap), where a small program would pay 2 MiB of resident memory for the
 * first page it touches.  Past 32 MiB (the first chunk) a heap of 45 MiB
 * paid 1.5 MB more at its peak (sizemix/live=100000, +3%) and ran no
 * faster; past 64 MiB the 256 MiB heap is as fast.  ("always" advises
 * every chunk.)
 *
 * "auto" is not the default ("default" is, as in jemalloc: no advice, the
 * system's setting).  Where a virtual machine's host takes back the
 * guest's free memory (free page reporting, as on the bench VM), a fault
 * that zeroes a fresh 2 MiB page makes the host back it again 4 KiB at a
 * time: phase/heap=256MiB took 902 ns an allocation under "auto" against
 * 395 under "default" (mimalloc 374, jemalloc 432; medians of 7 paired
 * rounds), and "auto" was that slow in every bench-compare run of six.
 * Only where huge-page faults are cheap (bare metal, a host that backs its
 * guests) is "auto" the faster.
 *
 * But khugepaged collapses any advised 2 MiB range with one page still
 * present into a huge page again, filling in the pages decay purged.  So
 * the first purge in an advised chunk turns it to MADV_NOHUGEPAGE: its huge
 * pages stay until purges split them, and what is purged stays purged.  A
 * chunk is one mapping: one madvise each way, never one per span (which
 * would split the mapping per span).  Advised chunks are kept in a small
 * table, under ph_lock; once it is full, chunks are no longer advised. */
#define THP_CHUNKS 64
#define THP_AFTER (2 * PAGEHEAP_GROW_MIN)

static struct {
    uintptr_t start, end;
    bool advised; /* MADV_HUGEPAGE, not yet turned back */
} thp_chunks[THP_CHUNKS];
static unsigned nthp_chunks;

bool pageheap_hugepages_advised(void) { return __atomic_load_n(&nthp_chunks, __ATOMIC_RELAXED) != 0; }

/* Under ph_lock: advice for a chunk just mapped, `mapped_before` bytes
 * into the heap. */
static void advise_chunk(void *p, size_t bytes, size_t mapped_before)
{
    bool huge = !strcmp(opt_thp, "always") || (!strcmp(opt_thp, "auto") && mapped_before >= THP_AFTER);
    if (huge && nthp_chunks < THP_CHUNKS) {
        os_hugepage(p, bytes);
        thp_chunks[nthp_chunks].start = (uintptr_t)p;
        thp_chunks[nthp_chunks].end = (uintptr_t)p + bytes;
        thp_chunks[nthp_chunks].advised = true;
        __atomic_store_n(&nthp_chunks, nthp_chunks + 1, __ATOMIC_RELAXED);
    } else if (!strcmp(opt_thp, "never")) {
        os_nohugepage(p, bytes);
    }
}

/* Under ph_lock: [start, end) is about to be purged; the advised chunks it
 * touches stop asking for huge pages (above). */
static void unadvise_chunks(uintptr_t start, uintptr_t end)
{
    for (unsigned i = 0; i < nthp_chunks; i++)
        if (thp_chunks[i].advised && start < thp_chunks[i].end && end > thp_chunks[i].start) {
            os_nohugepage((void *)thp_chunks[i].start, thp_chunks[i].end - thp_chunks[i].start);
            thp_chunks[i].advised = false;
        }
}

/* Spans marked for small pages, counted against a cap (pageheap.h). */
SA_TEST_MUTABLE size_t pageheap_small_pages_max = PAGEHEAP_SMALL_PAGES_MAX;
static size_t small_pages_spans; /* marked spans; atomic */

bool pageheap_small_pages_mark(struct span *s)
{
    if (s->small_pages)
        return true;
    if (__atomic_load_n(&small_pages_spans, __ATOMIC_RELAXED) >= pageheap_small_pages_max)
        return false;
    __atomic_fetch_add(&small_pages_spans, 1, __ATOMIC_RELAXED);
    s->small_pages = 1;
    return true;
}

size_t pageheap_small_pages_spans(void) { return __atomic_load_n(&small_pages_spans, __ATOMIC_RELAXED); }

/* Under ph_lock: large span `s`, being freed, held a sample whose pages
 * were kept small (prof.c).  Where its chunk still asks for huge pages,
 * they ask again: the free span would otherwise never get huge pages back,
 * and its mapping would stay split in three.  (Where the kernel gives huge
 * pages to all memory and no chunk asked, no advice restores the default:
 * those pages stay small.) */
static void readvise_sampled(struct span *s)
{
    s->small_pages = 0;
    __atomic_fetch_sub(&small_pages_spans, 1, __ATOMIC_RELAXED);
    uintptr_t start = s->start, end = span_end(s);
    for (unsigned i = 0; i < nthp_chunks; i++) {
        uintptr_t lo = start > thp_chunks[i].start ? start : thp_chunks[i].start;
        uintptr_t hi = end < thp_chunks[i].end ? end : thp_chunks[i].end;
        if (thp_chunks[i].advised && lo < hi)
            os_hugepage((void *)lo, hi - lo);
    }
}

/* ---- purging ---- */

/* Purges free dirty span `s`; false if the kernel refused, and then `s`
 * goes back to the LRU's tail to be tried again a decay period later.
 * Loops over the LRU stop at a refusal: the span they would meet next is
 * the one just refused. */
static bool purge_locked(struct span *s)
{
    list_remove(s);
    unadvise_chunks(s->start, span_end(s));
    bool ok = os_purge((void *)s->start, s->npages << SA_PAGE_SHIFT);
    if (ok) {
        stats.purged += s->npages << SA_PAGE_SHIFT;
        stats.nmadvise++;
        s->dirty = 0;
    } else {
        s->freed_at = os_now_ns();
    }
    insert_coalesced(s);
    return ok;
}

/* Under ph_lock: purges what has been free for a decay time at `now`, at
 * most once a decay step. */
static void decay_locked(uint64_t now)
{
    if (decay_ms < 0)
        return;
    uint64_t decay_ns = (uint64_t)decay_ms * 1000000u;
    if (now < next_decay_check)
        return;
    next_decay_check = now + pageheap_decay_step_ns(decay_ns);
    recent_flush();
    while (lru_head && lru_head->freed_at + decay_ns <= now && purge_locked(lru_head))
        ;
}

/* Under ph_lock, as the page heap is used: decay, unless the background
 * thread runs it (background.h).  A free passes on the clock reading it
 * took for its span's time: one read a free, not two (the second was 4%
 * of the instructions of 200 4 KiB blocks allocated and freed in a loop,
 * recent spans and all). */
bool pageheap_background_decay;

static void maybe_decay(uint64_t now)
{
    if (!pageheap_decay_in_background())
        decay_locked(now);
}

static void maybe_decay_on_alloc(void)
{
    if ((lru_head || stats.recent) && !pageheap_decay_in_background())
        decay_locked(os_now_ns());
}

void pageheap_decay(void)
{
    sa_lock(&ph_lock);
    decay_locked(os_now_ns());
    sa_unlock(&ph_lock);
}

void pageheap_decay_now(void)
{
    sa_lock(&ph_lock);
    next_decay_check = 0;
    decay_locked(os_now_ns());
    sa_unlock(&ph_lock);
}

/* ---- finding and carving ---- */

/* The lowest set bucket >= `from` in either kind's bitmap, or 0 if none. */
static size_t first_bucket(size_t from)
{
    for (size_t w = from / 64; w < NBUCKETS / 64; w++) {
        uint64_t bits = nonempty[0][w] | nonempty[1][w];
        if (w == from / 64)
            bits &= ~0ull << (from % 64);
        if (bits)
            return w * 64 + (size_t)__builtin_ctzll(bits);
    }
    return 0;
}

/* Best fit among the long spans: fewest pages, then dirty, then lowest
 * address (keeps the heap compact). */
static struct span *best_long(size_t need)
{
    struct span *best = NULL;
    for (int dirty = 1; dirty >= 0; dirty--)
        for (struct span *s = free_lists[dirty][0]; s; s = s->next)
            if (s->npages >= need &&
                (!best || s->npages < best->npages ||
                 (s->npages == best->npages && s->dirty == best->dirty && s->start < best->start)))
                best = s;
    return best;
}

static struct span *find_free(size_t need)
{
    if (need < NBUCKETS) {
        size_t b = first_bucket(need);
        if (b)
            return free_lists[1][b] ? free_lists[1][b] : free_lists[0][b];
    }
    return best_long(need);
}

/* Maps a fresh chunk big enough for `npages` aligned to `align_pages`;
 * returns it as a clean span that is on no list. */
static struct span *grow(size_t npages, size_t align_pages)
{
    size_t bytes = npages << SA_PAGE_SHIFT;
    bytes = sa_align_up(bytes < PAGEHEAP_GROW_MIN ? PAGEHEAP_GROW_MIN : bytes, CHUNK_ALIGN);
    size_t align = align_pages << SA_PAGE_SHIFT;
    struct span *s = record_new();
    if (!s)
        return NULL;
    void *p = os_map(bytes, align > CHUNK_ALIGN ? align : CHUNK_ALIGN);
    if (!p || !pagemap_ensure((uintptr_t)p >> SA_PAGE_SHIFT, bytes >> SA_PAGE_SHIFT)) {
        if (p)
            os_unmap(p, bytes);
        record_release(s);
        errno = ENOMEM;
        return NULL;
    }
    advise_chunk(p, bytes, stats.mapped);
    __atomic_store_n(&stats.mapped, stats.mapped + bytes, __ATOMIC_RELAXED);
    s->start = (uintptr_t)p;
    s->npages = bytes >> SA_PAGE_SHIFT;
    s->state = SPAN_FREE;
    s->dirty = 0;
    return s;
}

/* Splits pages [start, start + npages) of free span `s` (on no bucket's
 * list) off as a new free span and files it: if `s` is dirty and still in
 * the LRU (in_lru), there just before it, with its time, else as any
 * free span.  False on ENOMEM (nothing changed). */
static bool split_off(struct span *s, uintptr_t start, size_t npages, bool in_lru)
{
    struct span *r = record_new();
    if (!r)
        return false;
    r->start = start;
    r->npages = npages;
    r->state = SPAN_FREE;
    r->dirty = s->dirty;
    r->freed_at = s->freed_at;
    register_ends(r);
    if (!in_lru) {
        list_insert(r);
        return true;
    }
    bucket_insert(r);
    r->lru_prev = s->lru_prev;
    r->lru_next = s;
    if (s->lru_prev)
        s->lru_prev->lru_next = r;
    else
        lru_head = r;
    s->lru_prev = r;
    return true;
}

/* Cuts the aligned run of `npages` out of free span `s` (on no bucket's
 * list; in the LRU if in_lru), filing what is left before and after it,
 * and takes `s` out of the LRU.  What is left keeps the place and time of
 * `s` in the LRU: appended at its tail, as it was, an old dirty span that
 * a buffer was cut from again and again (while younger dirty spans were
 * about) looked freed just now each time, and stayed resident for good.
 * False on ENOMEM: `s` is then filed back whole. */
static bool carve(struct span *s, size_t npages, size_t align_pages, bool in_lru)
{
    uintptr_t at = sa_align_up(s->start, align_pages << SA_PAGE_SHIFT);
    size_t before = (at - s->start) >> SA_PAGE_SHIFT;
    size_t after = s->npages - before - npages;
    bool ok = false;
    if (before && !split_off(s, s->start, before, in_lru)) {
        /* nothing split off */
    } else if (after && !split_off(s, at + (npages << SA_PAGE_SHIFT), after, in_lru)) {
        /* The pages before are filed already: the rest joins them again. */
        s->start = at;
        s->npages -= before;
    } else {
        s->start = at;
        s->npages = npages;
        ok = true;
    }
    if (in_lru)
        lru_unlink(s);
    if (!ok)
        insert_coalesced(s);
    return ok;
}

/* Debug builds: every free list, the dirty LRU, the counts and the free
 * pages' classes, every 32nd allocation or free (pageheap_check takes the
 * lock). */
static void debug_check(void)
{
    static unsigned calls;
    if (sa_debug_due(&calls, 32))
        pageheap_check();
}

struct span *pageheap_alloc(size_t npages, size_t align_pages, unsigned cls, bool *zeroed)
{
    if (npages == 0 || npages > PAGEHEAP_MAX_PAGES || align_pages > PAGEHEAP_MAX_PAGES) {
        errno = ENOMEM;
        return NULL;
    }
    sa_lock(&ph_lock);
    struct span *s = align_pages <= 1 ? recent_pop(npages) : NULL;
    bool in_lru = false; /* s: from the lists, dirty */
    if (!s) {
        s = find_free(npages + align_pages - 1);
        if ((!s || !s->dirty) && stats.recent) {
            /* Not clean pages while the cache holds dirty ones. */
            recent_flush();
            s = find_free(npages + align_pages - 1);
        }
        if (s) {
            bucket_remove(s); /* carve takes it out of the LRU */
            in_lru = s->dirty;
        } else {
            s = grow(npages, align_pages);
        }
    }
    if (!s || !carve(s, npages, align_pages, in_lru)) {
        sa_unlock(&ph_lock);
        errno = ENOMEM;
        return NULL;
    }
    if (cls) {
        struct span *r = record_for_class(s, cls);
        if (!r) {
            insert_coalesced(s); /* its pages back, as carve's failure files them */
            sa_unlock(&ph_lock);
            errno = ENOMEM;
            return NULL;
        }
        s = r;
    }
    if (zeroed)
        *zeroed = !s->dirty;
    if (cls == 0)
        stats.nmalloc_large++;
    s->next = s->prev = NULL;
    s->sample = NULL; /* a small span's bits instead: central.c sets them */
    s->owner = NULL;
    s->owner_gen = 0;
    s->owner_tag = 0; /* and its pages' (pagemap_set_class_range) */
    s->allocated = s->carved = 0;
    s->on_list = 0;
    s->cls = (uint8_t)cls;
    if (cls) {
        s->state = SPAN_SMALL;
        pagemap_set_span_range(span_page(s), npages, s);
        pagemap_set_class_range(span_page(s), npages, cls);
        stats.small += npages << SA_PAGE_SHIFT;
    } else {
        s->state = SPAN_LARGE;
        register_ends(s);
        stats.large += npages << SA_PAGE_SHIFT;
    }
    maybe_decay_on_alloc();
    sa_unlock(&ph_lock);
    debug_check();
    return s;
}

static void free_locked(struct span *s)
{
    size_t bytes = s->npages << SA_PAGE_SHIFT;
    /* A sampled large span is unsampled first (prof.c); a small span's
     * record holds its free bits there. */
    SA_ASSERT(s->state == SPAN_SMALL || !s->sample);
    if (s->state == SPAN_SMALL) {
        pagemap_set_class_range(span_page(s), s->npages, 0);
        stats.small -= bytes;
    } else {
        stats.large -= bytes;
        if (s->small_pages)
            readvise_sampled(s);
    }
    s->state = SPAN_FREE;
    s->dirty = 1;
    uint64_t now = os_now_ns();
    s->freed_at = now;
    if (decay_ms == 0) {
        insert_coalesced(s);
        purge_locked(s);
        return;
    }
    if (!recent_push(s))
        insert_coalesced(s);
    maybe_decay(now);
}

void pageheap_free(struct span *s)
{
    sa_lock(&ph_lock);
    free_locked(s);
    sa_unlock(&ph_lock);
    debug_check();
}

size_t pageheap_free_large(void *p)
{
    sa_lock(&ph_lock);
    struct span *s = pagemap_span(p);
    size_t bytes = pageheap_is_large_start(s, p) ? s->npages << SA_PAGE_SHIFT : 0;
    if (bytes) {
        free_locked(s);
        stats.ndalloc_large++;
    }
    sa_unlock(&ph_lock);
    if (bytes)
        debug_check();
    return bytes;
}

bool pageheap_shrink(struct span *s, size_t npages)
{
    sa_lock(&ph_lock);
    struct span *tail = record_new();
    if (tail) {
        tail->start = s->start + (npages << SA_PAGE_SHIFT);
        tail->npages = s->npages - npages;
        tail->state = SPAN_LARGE;
        tail->small_pages = s->small_pages; /* freed just below, uncounted there */
        if (tail->small_pages)
            __atomic_fetch_add(&small_pages_spans, 1, __ATOMIC_RELAXED);
        s->npages = npages;
        register_ends(s);
        free_locked(tail);
    }
    sa_unlock(&ph_lock);
    return tail != NULL;
}

bool pageheap_grow_in_place(struct span *s, size_t npages)
{
    sa_lock(&ph_lock);
    struct span *n = pagemap_span((void *)span_end(s));
    size_t take = npages - s->npages;
    bool ok = n && n != s && span_state(n) == SPAN_FREE && n->start == span_end(s) &&
              n->npages >= take;
    if (ok) {
        if (n->recent)
            recent_remove(n);
        else
            list_remove(n);
        if (n->npages > take) {
            /* Merged: a recent span's neighbours may be free. */
            n->start += take << SA_PAGE_SHIFT;
            n->npages -= take;
            insert_coalesced(n);
        } else {
            record_release(n);
        }
        s->npages = npages;
        register_ends(s);
        stats.large += take << SA_PAGE_SHIFT;
    }
    sa_unlock(&ph_lock);
    return ok;
}

struct span *pageheap_register_mapping(void *start, size_t npages)
{
    sa_lock(&ph_lock);
    struct span *s = NULL;
    if (pagemap_ensure((uintptr_t)start >> SA_PAGE_SHIFT, npages) && (s = record_new())) {
        s->start = (uintptr_t)start;
        s->npages = npages;
        s->state = SPAN_PARKED;
        /* Every page, not only the ends: a pointer into the middle of a
         * sample is described (prof_describe), and a fault anywhere in a
         * guarded one recognised (guard.c). */
        pagemap_set_span_range(span_page(s), npages, s);
    }
    sa_unlock(&ph_lock);
    return s;
}

void pageheap_unregister_mapping(struct span *s)
{
    sa_lock(&ph_lock);
    record_release(s); /* stale pagemap entries now see SPAN_UNUSED */
    sa_unlock(&ph_lock);
}

/* No lock: only the mapping's owner changes its state, and readers (free,
 * realloc, malloc_usable_size of a pointer into it) look at it only while
 * the caller owns the allocation. */
void pageheap_sampled_attach(struct span *s, void *sample, uintptr_t object)
{
    s->object = object;
    __atomic_store_n(&s->sample, sample, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, SPAN_SAMPLED, __ATOMIC_RELEASE);
}

void pageheap_sampled_detach(struct span *s, unsigned state)
{
    __atomic_store_n(&s->state, state, __ATOMIC_RELEASE);
}

struct span *pageheap_sampled_span(const void *p)
{
    /* Lock-free for the same reason as pageheap_large_span. */
    struct span *s = pagemap_span(p);
    return s && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SPAN_SAMPLED &&
                   s->object == (uintptr_t)p
               ? s
               : NULL;
}

size_t pageheap_mapped_bytes(void) { return __atomic_load_n(&stats.mapped, __ATOMIC_RELAXED); }

size_t pageheap_purge(void)
{
    sa_lock(&ph_lock);
    size_t before = stats.purged;
    recent_flush();
    while (lru_head && purge_locked(lru_head))
        ;
    size_t purged = stats.purged - before;
    sa_unlock(&ph_lock);
    return purged;
}

void pageheap_set_decay_ms(long ms)
{
    sa_lock(&ph_lock);
    /* Atomic: sampled frees and the background thread read it unlocked. */
    __atomic_store_n(&decay_ms, ms, __ATOMIC_RELAXED);
    next_decay_check = 0;
    recent_flush(); /* under 0, every free purges at once: none may wait */
    sa_unlock(&ph_lock);
}

long pageheap_decay_ms(void) { return __atomic_load_n(&decay_ms, __ATOMIC_RELAXED); }

void pageheap_get_stats(struct pageheap_stats *st)
{
    sa_lock(&ph_lock);
    *st = stats;
    sa_unlock(&ph_lock);
}

/* ---- invariants ---- */

static void check_span(const struct span *s, int dirty, size_t b, size_t *bytes)
{
    if (s->state != SPAN_FREE || s->dirty != dirty || bucket_of(s->npages) != b)
        sa_fatal("pageheap: span %p misfiled (state %d dirty %d pages %zu bucket %zu)",
                 (void *)s->start, s->state, s->dirty, s->npages, b);
    if (pagemap_span((void *)s->start) != s ||
        pagemap_span((void *)(span_end(s) - 1)) != s)
        sa_fatal("pageheap: free span %p not in the pagemap", (void *)s->start);
    if (free_neighbour(s, true) || free_neighbour(s, false))
        sa_fatal("pageheap: free span %p not coalesced", (void *)s->start);
    for (uintptr_t p = s->start; p < span_end(s); p += SA_PAGE_SIZE)
        if (pagemap_class_of((void *)p))
            sa_fatal("pageheap: free page %p has a size class", (void *)p);
    *bytes += s->npages << SA_PAGE_SHIFT;
}

void pageheap_check(void)
{
    sa_lock(&ph_lock);
    size_t bytes[2] = {0, 0}, lru = 0;
    for (int dirty = 0; dirty < 2; dirty++)
        for (size_t b = 0; b < NBUCKETS; b++) {
            bool bit = nonempty[dirty][b / 64] >> (b % 64) & 1;
            if (b && bit != (free_lists[dirty][b] != NULL))
                sa_fatal("pageheap: bitmap wrong for bucket %zu", b);
            for (struct span *s = free_lists[dirty][b]; s; s = s->next)
                check_span(s, dirty, b, &bytes[dirty]);
        }
    size_t in_recent = 0;
    for (size_t n = 1; n <= RECENT_MAX_PAGES; n++)
        for (struct span *s = recent[n]; s; s = s->next) {
            if (s->state != SPAN_FREE || !s->dirty || !s->recent || s->npages != n ||
                pagemap_span((void *)s->start) != s || (s->next && s->next->prev != s) ||
                pagemap_class_of((void *)s->start))
                sa_fatal("pageheap: recent span %p misfiled", (void *)s->start);
            in_recent += n << SA_PAGE_SHIFT;
        }
    if (in_recent != stats.recent)
        sa_fatal("pageheap: recent spans hold %zu bytes, counted %zu", in_recent, stats.recent);
    bytes[1] += in_recent;
    uint64_t last = 0;
    for (struct span *s = lru_head; s; s = s->lru_next) {
        if (!s->dirty || s->freed_at < last)
            sa_fatal("pageheap: dirty LRU out of order at %p", (void *)s->start);
        last = s->freed_at;
        lru += s->npages << SA_PAGE_SHIFT;
    }
    if (bytes[0] != stats.free_clean || bytes[1] != stats.free_dirty ||
        lru + in_recent != bytes[1])
        sa_fatal("pageheap: free byte counts disagree (clean %zu/%zu dirty %zu/%zu lru %zu)",
                 bytes[0], stats.free_clean, bytes[1], stats.free_dirty, lru);
    if (stats.free_clean + stats.free_dirty + stats.small + stats.large != stats.mapped)
        sa_fatal("pageheap: mapped %zu != free + small + large", stats.mapped);
    sa_unlock(&ph_lock);
}

void pageheap_prefork(void) { sa_lock(&ph_lock); }
void pageheap_postfork_parent(void) { sa_unlock(&ph_lock); }
void pageheap_postfork_child(void) { sa_lock_reinit(&ph_lock); }
