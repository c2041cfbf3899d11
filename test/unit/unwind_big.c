/*
 * unwind_big.c: a library of 1,200 small functions, which test_unwind.c
 * loads for an .eh_frame_hdr search table of over 1,024 entries that no
 * other test has searched: big enough for unwind.c to index, fresh so that
 * the test sees the index built.  Each function computes something of its
 * own, so that the compiler folds none of them into another.
 */
#define FN(n)                                                                                      \
    int unwind_big_##n(int x);                                                                     \
    int unwind_big_##n(int x) { return x * (n) + ((n) ^ 0x5a5a); }
#define TEN(p) FN(p##0) FN(p##1) FN(p##2) FN(p##3) FN(p##4) FN(p##5) FN(p##6) FN(p##7) FN(p##8) FN(p##9)
#define HUNDRED(p)                                                                                 \
    TEN(p##0) TEN(p##1) TEN(p##2) TEN(p##3) TEN(p##4) TEN(p##5) TEN(p##6) TEN(p##7) TEN(p##8) TEN(p##9)

HUNDRED(10) HUNDRED(11) HUNDRED(12) HUNDRED(13) HUNDRED(14) HUNDRED(15)
HUNDRED(16) HUNDRED(17) HUNDRED(18) HUNDRED(19) HUNDRED(20) HUNDRED(21)
