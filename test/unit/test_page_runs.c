/*
 * test_page_runs.c: src/page_runs.h, the bitmap runs sampled_pages.c's
 * regions carve from, against a bit-by-bit reference on random maps:
 * first fit, at multiples of the alignment, across word boundaries, none
 * when no run fits; setting and clearing runs that cross words.
 */
#include "page_runs.h"
#include "unit.h"

#define BITS 256

static bool bit(const uint64_t *map, size_t i) { return map[i / 64] >> (i % 64) & 1; }

static size_t reference_find(const uint64_t *map, size_t n, size_t align)
{
    for (size_t at = 0; at + n <= BITS; at += align) {
        size_t k = 0;
        while (k < n && bit(map, at + k))
            k++;
        if (k == n)
            return at;
    }
    return BITS;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Mostly set or mostly clear, in stretches, with a few holes and islands
 * in three maps of four (the fourth keeps runs longer than a word). */
static void random_map(uint64_t *map)
{
    unsigned density = (unsigned)(next() % 8);
    bool holes = next() % 4 != 0;
    for (size_t w = 0; w < BITS / 64; w++) {
        map[w] = 0;
        for (unsigned b = 0; b < 64; b += 8)
            if (next() % 8 >= density)
                map[w] |= (uint64_t)0xff << b;
        if (holes)
            map[w] ^= next() & next() & next();
    }
}

static void test_page_runs_find_matches_reference(void **state)
{
    (void)state;
    uint64_t map[BITS / 64];
    int found = 0;
    for (int round = 0; round < 20000; round++) {
        random_map(map); /* runs of every length */
        size_t n = 1 + next() % 40, align = (size_t)1 << (next() % 6);
        size_t want = reference_find(map, n, align);
        size_t got = page_runs_find(map, BITS, n, align);
        if (got != want)
            fail_msg("round %d: run of %zu at multiples of %zu: %zu, not %zu", round, n, align,
                     got, want);
        if (got < BITS) {
            assert_true(page_runs_all(map, got, n, true));
            page_runs_set(map, got, n, false);
            assert_true(page_runs_all(map, got, n, false));
            found++;
        }
    }
    assert_true(found > 2000 && found < 18000); /* both outcomes were tried */
}

static void test_page_runs_set_crosses_words(void **state)
{
    (void)state;
    uint64_t map[BITS / 64] = {0};
    page_runs_set(map, 60, 70, true); /* bits 60..129: three words */
    for (size_t i = 0; i < BITS; i++)
        assert_int_equal(bit(map, i), i >= 60 && i < 130);
    assert_int_equal(page_runs_find(map, BITS, 70, 1), 60);
    assert_int_equal(page_runs_find(map, BITS, 71, 1), BITS);
    assert_int_equal(page_runs_find(map, BITS, 64, 64), 64);
    assert_int_equal(page_runs_find(map, BITS, 3, 128), BITS); /* 128..130: 130 is clear */
    page_runs_set(map, 64, 64, false);
    assert_true(page_runs_all(map, 60, 4, true));
    assert_true(page_runs_all(map, 64, 64, false));
    assert_int_equal(page_runs_find(map, BITS, 2, 1), 60);
    assert_int_equal(page_runs_find(map, BITS, 2, 4), 60);
    assert_int_equal(page_runs_find(map, BITS, 2, 8), 128);
    uint64_t full[BITS / 64];
    memset(full, 0xff, sizeof(full));
    assert_int_equal(page_runs_find(full, BITS, BITS, 1), 0);
    assert_int_equal(page_runs_find(full, BITS, 1, 256), 0);
}

static void test_page_runs_count_and_next_match_reference(void **state)
{
    (void)state;
    uint64_t map[BITS / 64];
    size_t runs_seen = 0, longest = 0;
    for (int round = 0; round < 5000; round++) {
        random_map(map);
        size_t at = next() % BITS, n = next() % (BITS - at + 1), want = 0;
        for (size_t i = at; i < at + n; i++)
            want += bit(map, i);
        assert_int_equal(page_runs_count(map, at, n), want);
        /* The runs, walked from 0: each maximal, none missed. */
        size_t from = 0, len;
        for (;;) {
            size_t start = from;
            while (start < BITS && !bit(map, start))
                start++;
            size_t end = start;
            while (end < BITS && bit(map, end))
                end++;
            size_t got = page_runs_next(map, BITS, from, &len);
            assert_int_equal(got, start);
            assert_int_equal(len, end - start);
            if (got == BITS)
                break;
            runs_seen++;
            longest = len > longest ? len : longest;
            from = got + len;
        }
    }
    assert_true(runs_seen > 10000 && longest >= 128); /* runs short and long, across words */
    uint64_t full[BITS / 64];
    memset(full, 0xff, sizeof(full));
    size_t len;
    assert_int_equal(page_runs_next(full, BITS, 3, &len), 3);
    assert_int_equal(len, BITS - 3);
    assert_int_equal(page_runs_count(full, 0, BITS), BITS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_runs_find_matches_reference),
        cmocka_unit_test(test_page_runs_set_crosses_words),
        cmocka_unit_test(test_page_runs_count_and_next_match_reference),
    };
    return cmocka_run_group_tests_name("page runs", tests, NULL, NULL);
}
