/*
 * fmath.h: the little floating-point salloc needs, without libm (the library
 * links only libc): natural log for drawing exponential sampling intervals,
 * and 1 - e^-x for the sampling probability p(Z) = 1 - e^(-Z/R) used to
 * unbias dumps (spec/heap-dump-formats.md; seeds/001).  Accurate to a few
 * units in the last place on the domains used; test_sampler.c checks them
 * against libm.
 */
#ifndef SA_FMATH_H
#define SA_FMATH_H

#include <stdint.h>
#include <string.h>

#include "fmath_tables.h"

#define SA_LN2 0.69314718055994530942

/* 1/k for k = 0..21 (entry 0 unused): sa_exp_neg's series multiplies by these
 * instead of dividing, which on x86 costs 4 cycles instead of 15 a term.
 * Defined once, by src/fmath.c, as sa_exp_table is (fmath_tables.h). */
extern const double sa_inverse[22] __attribute__((visibility("hidden")));
#ifdef SA_FMATH_TABLES
const double sa_inverse[22] = {
    0, 1.0 / 1, 1.0 / 2, 1.0 / 3, 1.0 / 4, 1.0 / 5, 1.0 / 6, 1.0 / 7, 1.0 / 8, 1.0 / 9, 1.0 / 10,
    1.0 / 11, 1.0 / 12, 1.0 / 13, 1.0 / 14, 1.0 / 15, 1.0 / 16, 1.0 / 17, 1.0 / 18, 1.0 / 19,
    1.0 / 20, 1.0 / 21,
};
#endif

/* ln(x) for finite normal x > 0.  x = m * 2^e with m in [sqrt(1/2),
 * sqrt(2)), found with integer operations alone (adding the bits of 1 less
 * those of sqrt(1/2) carries into the exponent exactly when m would reach
 * sqrt(2); no branch to mispredict on random input), and m = b (1 + t)
 * with b = j/64 the nearest table point: t = (m - b) * (64/j), where m - b
 * is exact and |t| < 1/90, so eight terms of ln(1 + t)'s series reach
 * 4e-17 of the result.  The series is evaluated as four independent pairs
 * (Estrin), and the table gives 64/j so that no division waits in the
 * chain: about half the latency of the atanh series it replaced, and one
 * is taken per sample.  Near 1 (j = 64, e = 0) the result is the series
 * alone, so it keeps its relative accuracy. */
static inline double sa_ln(double x)
{
    const uint64_t sqrt_half = 0x3fe6a09e667f3bcdull, one = 0x3ff0000000000000ull;
    uint64_t bits;
    memcpy(&bits, &x, sizeof(bits));
    uint64_t shifted = bits + (one - sqrt_half);
    int e = (int)(shifted >> 52) - 0x3ff;
    uint64_t mbits = (shifted & 0x000fffffffffffffull) + sqrt_half;
    double m;
    memcpy(&m, &mbits, sizeof(m));
    int j = (int)(m * 64 + 0.5);
    const double *row = sa_ln_table[j - SA_LN_TABLE_FIRST];
    double t = (m - j * (1.0 / 64)) * row[1];
    double t2 = t * t, t4 = t2 * t2;
    double series = t * (((1 - t * (1.0 / 2)) + t2 * (1.0 / 3 - t * (1.0 / 4))) +
                         t4 * ((1.0 / 5 - t * (1.0 / 6)) + t2 * (1.0 / 7 - t * (1.0 / 8))));
    return e * SA_LN2 + (row[0] + series);
}

/* e^x for x <= 0 (0 below -745).  x = k ln2 + r with |r| <= ln2/2; e^r by
 * its Taylor series to degree 14 (error below 1e-17). */
static inline double sa_exp_neg(double x)
{
    if (x < -745)
        return 0;
    double kf = x * (1 / SA_LN2) - 0.5;
    int k = (int)kf; /* rounds toward zero: kf <= 0, so this is ceil */
    if (x - k * SA_LN2 > SA_LN2 / 2)
        k++;
    /* Cody-Waite: ln2 in two parts, so k * ln2 is exact to ~1e-20. */
    double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
    double term = 1, sum = 1;
    for (int i = 1; i <= 14; i++) {
        term *= r * sa_inverse[i];
        sum += term;
    }
    /* 2^k by building the exponent; k >= -1075 here, so scale in two steps
     * to reach the subnormal range. */
    int k1 = k < -1000 ? -1000 : k, k2 = k - k1;
    uint64_t b1 = (uint64_t)(k1 + 1023) << 52, b2 = (uint64_t)(k2 + 1023) << 52;
    double p1, p2;
    memcpy(&p1, &b1, sizeof(p1));
    memcpy(&p2, &b2, sizeof(p2));
    return sum * p1 * p2;
}

/* 1 - e^-x for x >= 0, accurate also when x is tiny (8 bytes at R = 2^40).
 * Below 1: x = j/64 + t with |t| <= 1/128 (t exact), and
 *     1 - e^-x = (1 - e^(-j/64)) + e^(-j/64) (1 - e^-t),
 * the first two tabulated, the last by seven terms of its series (error
 * below 1e-19); no cancellation worse than a factor of 2.  From 1 up,
 * sa_exp_neg.  One per sample (its weight) and per dump line. */
static inline double sa_one_minus_exp_neg(double x)
{
    if (x >= 1)
        return 1 - sa_exp_neg(-x);
    int j = (int)(x * 64 + 0.5);
    double t = x - j * (1.0 / 64);
    /* 1 - t/2 + t^2/6 - ... + t^6/5040 in three independent parts (a
     * shorter chain of dependent operations than Horner's rule). */
    double t2 = t * t, t4 = t2 * t2;
    double q = t * ((1 - t * (1.0 / 2)) + t2 * (1.0 / 6 - t * (1.0 / 24)) +
                    t4 * ((1.0 / 120 - t * (1.0 / 720)) + t2 * (1.0 / 5040)));
    return sa_exp_table[j][1] + sa_exp_table[j][0] * q;
}

#endif
