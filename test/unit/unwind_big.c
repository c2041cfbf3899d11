/*
 * unwind_big.c: a library of 1,200 small functions, which test_unwind.c
 * loads for an .eh_frame_hdr search table of over 1,024 entries that no
 * other test has searched: big enough for unwind.c to index, fresh so that
 * a test sees what happens to its index from the first search on (no
 * system library is: a sanitizer's runtime may load and walk libstdc++
 * first).  Built twice (test/bin/libunwind_big_a.so, _b.so), with another
 * UNWIND_BIG_SALT, so that the two have other code and build IDs: one for
 * each test.  Each function computes something of its own, so that the
 * compiler folds none of them into another.
 */
#define FN(n)                                                                                      \
    int unwind_big_##n(int x);                                                                     \
    int unwind_big_##n(int x) { return x * (n) + ((n) ^ UNWIND_BIG_SALT); }
#define TEN(p) FN(p##0) FN(p##1) FN(p##2) FN(p##3) FN(p##4) FN(p##5) FN(p##6) FN(p##7) FN(p##8) FN(p##9)
#define HUNDRED(p)                                                                                 \
    TEN(p##0) TEN(p##1) TEN(p##2) TEN(p##3) TEN(p##4) TEN(p##5) TEN(p##6) TEN(p##7) TEN(p##8) TEN(p##9)

HUNDRED(10) HUNDRED(11) HUNDRED(12) HUNDRED(13) HUNDRED(14) HUNDRED(15)
HUNDRED(16) HUNDRED(17) HUNDRED(18) HUNDRED(19) HUNDRED(20) HUNDRED(21)
